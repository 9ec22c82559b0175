"""Thin PyTorch loader for PAWN v2 checkpoints (spec ``model-and-checkpoints.md`` §6.6).

For users who serve in PyTorch: :func:`load` reads a v2 checkpoint directory into
:class:`PAWNTorch`, a small self-contained ``torch.nn.Module`` with the v2 forward — inference
only (no training helpers, no KV cache). Needs the optional extra ``pip install 'pawn[torch]'``;
``torch`` is imported only by this module, never by the rest of PAWN.

Behaviour (§6.6): the ``.complete`` manifest is verified if present (strict rules of §5.4);
``config.json`` must have ``format_version`` 1 and a ``model_config`` (§5.3); the tensor set must
be exactly the 16 canonical names with shapes matching the config. Stacked ``[L, ...]`` tensors
are un-stacked and linear weights transposed back to PyTorch's ``[out, in]``; module names mirror
v1 (``embed.src_embed``, ``layers.{i}.attn.wq``, …, ``final_norm``, ``lm_head``) so the state-dict
keys coincide with a v1 ``model.safetensors``. ``load(..., adapter=DIR)`` adds a LoRA adapter in
the Hugging Face PEFT layout (``pawn convert --peft``, or one trained with PEFT on this module;
:mod:`pawn.adapters.peft`) as PEFT's unmerged LoRA layers do: ``y = x·Wᵀ + (lora_alpha/r)·B(A(x))``.
Numerics follow v2: RMSNorm (ε 1e-6) normalises
and multiplies by its scale in fp32, interleaved RoPE (base from the config) in fp32, plain
attention with the weights of fully-masked query rows set to 0, SwiGLU, untied ``lm_head``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from torch import nn

from pawn.adapters.peft import MODULE_PATHS, PeftBackboneMismatchError, read_peft_lora
from pawn.checkpoint import (
    CONFIG_FILE,
    MANIFEST,
    MODEL_FILE,
    CheckpointIntegrityError,
    _read_json,
    _read_tensors,
    not_a_checkpoint_dir,
    read_model_config,
    sha256_file,
    verify_manifest,
)
from pawn.config import PARAMS, ModelConfig
from pawn.vocab import NUM_ACTIONS, OUTCOME_TOKEN_BASE, PAD_TOKEN, action_table

RMS_EPS = 1e-6
__all__ = ["LoRALinear", "PAWNTorch", "add_lora", "load"]


class RMSNorm(nn.Module):
    """``x · rsqrt(mean(x², -1) + 1e-6) · weight`` computed in fp32, cast once to ``x``'s dtype."""

    def __init__(self, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + RMS_EPS) * self.weight.float()
        return y.to(x.dtype)


class FactoredEmbedding(nn.Module):
    """Factored input embedding (spec §2.1): ``src + dst + promo`` for actions, ``pad_embed`` for
    PAD (1968), ``outcome_embed`` rows for ids ≥ 1969."""

    def __init__(self, d: int, n_outcomes: int):
        super().__init__()
        self.src_embed = nn.Embedding(64, d)
        self.dst_embed = nn.Embedding(64, d)
        self.promo_embed = nn.Embedding(5, d)
        self.pad_embed = nn.Parameter(torch.zeros(d))
        self.outcome_embed = nn.Embedding(n_outcomes, d)
        src, dst, promo = action_table()
        table = torch.from_numpy(np.stack([src, dst, promo], axis=1).astype(np.int64))
        self.register_buffer("decomp_table", table, persistent=False)
        self.n_outcomes = n_outcomes

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        a = tokens.clamp(0, NUM_ACTIONS - 1)
        s, t, p = self.decomp_table[a].unbind(-1)
        e = self.src_embed(s) + self.dst_embed(t) + self.promo_embed(p)
        e = torch.where((tokens == PAD_TOKEN)[..., None], self.pad_embed.to(e.dtype), e)
        o = self.outcome_embed((tokens - OUTCOME_TOKEN_BASE).clamp(0, self.n_outcomes - 1))
        return torch.where((tokens >= OUTCOME_TOKEN_BASE)[..., None], o, e)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Interleaved-pair RoPE on ``x`` [B, H, T, hd] in fp32 (pairs ``(2j, 2j+1)``, spec §2.4)."""
    x32 = x.float()
    ev, od = x32[..., 0::2], x32[..., 1::2]
    out = torch.stack((ev * cos - od * sin, ev * sin + od * cos), dim=-1).flatten(-2)
    return out.to(x.dtype)


class Attention(nn.Module):
    """Causal self-attention with key padding (spec §2.3), no biases."""

    def __init__(self, d: int, n_heads: int):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d // n_heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        q, k, v = (w(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        scores = (q @ k.transpose(-1, -2)) * self.head_dim ** -0.5
        scores = scores.masked_fill(~keep, float("-inf"))
        w = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)  # fully-masked rows → 0
        return self.wo((w @ v).transpose(1, 2).reshape(B, T, d))


class SwiGLU(nn.Module):
    """``w_down(silu(w_gate x) ⊙ w_up x)`` (spec §2.5)."""

    def __init__(self, d: int, d_ff: int):
        super().__init__()
        self.w_gate = nn.Linear(d, d_ff, bias=False)
        self.w_up = nn.Linear(d, d_ff, bias=False)
        self.w_down = nn.Linear(d_ff, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_down(nn.functional.silu(self.w_gate(x)) * self.w_up(x))


class Block(nn.Module):
    """Pre-norm transformer block (spec §2.6)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model)
        self.attn = Attention(cfg.d_model, cfg.n_heads)
        self.ffn_norm = RMSNorm(cfg.d_model)
        self.ffn = SwiGLU(cfg.d_model, cfg.d_ff)

    def forward(self, x, cos, sin, keep):
        x = x + self.attn(self.attn_norm(x), cos, sin, keep)
        return x + self.ffn(self.ffn_norm(x))


class PAWNTorch(nn.Module):
    """PAWN's v2 forward in PyTorch (inference). ``config`` is the checkpoint's
    :class:`pawn.config.ModelConfig`."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.embed = FactoredEmbedding(config.d_model, config.n_outcomes)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.final_norm = RMSNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor, attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Logits for every position.

        Args:
            tokens: int64 [B, T] token ids, ``T ≤ max_seq_len``.
            attn_mask: bool [B, T], True at real (non-padding) positions; default all True.
                Padding masks keys only; a padded query row's output is meaningless.

        Returns:
            float [B, T, vocab_size] logits (the parameters' dtype).

        Raises:
            ValueError: ``T > max_seq_len`` or a mask of another shape.
        """
        B, T = tokens.shape
        if T > self.config.max_seq_len:
            raise ValueError(f"sequence length {T} exceeds max_seq_len {self.config.max_seq_len}")
        if attn_mask is None:
            attn_mask = torch.ones(B, T, dtype=torch.bool, device=tokens.device)
        if tuple(attn_mask.shape) != (B, T):
            raise ValueError(f"attn_mask has shape {tuple(attn_mask.shape)}, tokens {(B, T)}")
        hd = self.config.head_dim
        j = torch.arange(hd // 2, dtype=torch.float32, device=tokens.device)
        inv = 1.0 / (self.config.rope_base ** (2 * j / hd))
        ang = torch.arange(T, dtype=torch.float32, device=tokens.device)[:, None] * inv[None, :]
        cos, sin = torch.cos(ang), torch.sin(ang)
        causal = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()
        keep = causal[None, None] & attn_mask.bool()[:, None, None, :]
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin, keep)
        return self.lm_head(self.final_norm(x))


class LoRALinear(nn.Linear):
    """A bias-free ``nn.Linear`` plus an unmerged LoRA delta, as PEFT's ``lora.Linear``:
    ``forward(x) = x·Wᵀ + scaling · lora_B(lora_A(x))``. The base weight keeps its state-dict key
    (``….wq.weight``); the factors add ``….wq.lora_A.weight`` [r, in] and ``….wq.lora_B.weight`` [out, r].

    Args:
        base: the linear layer adapted (its weight is shared, not copied).
        a: float [r, in_features]; b: float [out_features, r]; scaling: ``lora_alpha / r``.
    """

    def __init__(self, base: nn.Linear, a: torch.Tensor, b: torch.Tensor, scaling: float):
        super().__init__(base.in_features, base.out_features, bias=False, device=base.weight.device, dtype=base.weight.dtype)
        self.weight = base.weight
        r = a.shape[0]
        self.lora_A = nn.Linear(base.in_features, r, bias=False, device=base.weight.device, dtype=base.weight.dtype)
        self.lora_B = nn.Linear(r, base.out_features, bias=False, device=base.weight.device, dtype=base.weight.dtype)
        with torch.no_grad():
            self.lora_A.weight.copy_(a)
            self.lora_B.weight.copy_(b)
        self.scaling = float(scaling)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + self.lora_B(self.lora_A(x)) * self.scaling


def add_lora(model: PAWNTorch, adapter: str | os.PathLike, backbone: Optional[dict] = None) -> PAWNTorch:
    """Put the LoRA weights of the PEFT folder ``adapter`` on ``model`` (in place) as :class:`LoRALinear` layers.

    Args:
        model: the backbone, loaded by :func:`load`.
        adapter: a PEFT LoRA folder (:func:`pawn.adapters.peft.read_peft_lora`).
        backbone: what is known of the backbone checkpoint: ``{"sha256": model.safetensors digest,
            "run_config": its run config, "path": its directory}``; checked against the folder's
            ``pawn_adapter.json`` when both are there.

    Returns:
        ``model``.

    Raises:
        pawn.adapters.peft.PeftFormatError: see :func:`~pawn.adapters.peft.read_peft_lora` and
            :meth:`~pawn.adapters.peft.PeftLoRA.check_model` (shapes, ``target_modules``).
        pawn.adapters.peft.PeftBackboneMismatchError: the backbone is not the recorded one (the
            message names both SHA-256s), or is the supernet of a recorded variant (slice it first).
    """
    peft = read_peft_lora(adapter, framework="pt")
    rec = (peft.record or {}).get("backbone")
    if isinstance(rec, dict) and backbone is not None:
        where = backbone.get("path")
        variant = rec.get("variant")
        run_variant = (backbone.get("run_config") or {}).get("variant")
        if variant is not None and run_variant != variant:
            raise PeftBackboneMismatchError(
                f"{adapter}: trained on variant {variant} of {rec.get('source')}; load that variant as the backbone "
                f"(`pawn convert {where} --slice {variant}` writes it), not {where}")
        if variant is None and rec.get("sha256") and backbone.get("sha256") != rec["sha256"]:
            raise PeftBackboneMismatchError(
                f"{adapter}: backbone {where} has model.safetensors SHA-256 {backbone.get('sha256')}, "
                f"but the adapter was trained on {rec['sha256']} ({rec.get('source')})")
    peft.check_model(model.config)
    for (target, layer), (a, b) in peft.weights.items():
        parent_name, _, leaf = MODULE_PATHS[target].format(i=layer).rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, leaf, LoRALinear(getattr(parent, leaf), a.float(), b.float(), peft.scaling))
    return model


def _shapes(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The 16 canonical v2 tensor shapes for ``c`` (spec §5.2, :data:`pawn.config.PARAMS`), without importing JAX."""
    return {p.name: p.shape(c) for p in PARAMS}


def state_dict_from_v2(params: dict[str, np.ndarray], n_layers: int) -> dict[str, torch.Tensor]:
    """v2 arrays (spec §5.2: stacked ``[L, ...]``, ``[in, out]``) → v1-named ``[out, in]`` tensors
    (the inverse of spec §6.1)."""
    t = {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for k, v in params.items()}
    sd = {}
    for spec in PARAMS:  # the v1 names and orientation of the parameter table (spec §6.1)
        fix = (lambda x: x.T.contiguous()) if spec.v1_transposed else (lambda x: x)
        if "{i}" in spec.v1_name:
            for i in range(n_layers):
                sd[spec.v1_name.format(i=i)] = fix(t[spec.name][i])
        else:
            sd[spec.v1_name] = fix(t[spec.name])
    return sd


def load(path: str | os.PathLike, device: str | torch.device = "cpu", adapter: Optional[str | os.PathLike] = None) -> PAWNTorch:
    """Load a v2 checkpoint directory into :class:`PAWNTorch` (eval mode, fp32).

    Args:
        path: the backbone checkpoint directory.
        device: where the module is placed.
        adapter: a LoRA adapter folder in the PEFT layout (``pawn convert RUN --peft DIR``), put
            on the backbone unmerged (:func:`add_lora`); its logits are the JAX adapted model's
            to float32 rounding.

    Raises:
        FileNotFoundError: no such directory.
        pawn.checkpoint.CheckpointError (and subclasses): manifest mismatch, bad ``config.json``,
            a tensor set other than the 16 canonical names, or a shape that disagrees with the
            config (one line naming the file and tensor).
        pawn.adapters.peft.PeftFormatError, PeftBackboneMismatchError: see :func:`add_lora`.
    """
    d = Path(path)
    if not d.is_dir():
        raise FileNotFoundError(not_a_checkpoint_dir(d))
    digest = None
    if (d / MANIFEST).exists():
        digest = verify_manifest(d).get(MODEL_FILE)
    cfg_json = _read_json(d / CONFIG_FILE)
    if not isinstance(cfg_json, dict):
        raise CheckpointIntegrityError(f"{d / CONFIG_FILE}: the top level is not a JSON object")
    config = read_model_config(cfg_json, d / CONFIG_FILE)
    params = _read_tensors(d / MODEL_FILE)  # the names are checked before the config is read for shapes
    if set(params) != set(_shapes(config)):
        raise CheckpointIntegrityError(
            f"{d / MODEL_FILE}: tensor names differ from the v2 schema: missing "
            f"{sorted(set(_shapes(config)) - set(params))}, unexpected {sorted(set(params) - set(_shapes(config)))}"
        )
    for name, shape in _shapes(config).items():
        if tuple(params[name].shape) != shape:
            raise CheckpointIntegrityError(f"{d / MODEL_FILE}: tensor {name} has shape {tuple(params[name].shape)}, model_config needs {shape}")
    model = PAWNTorch(config)
    model.load_state_dict(state_dict_from_v2(params, config.n_layers), strict=True)
    if adapter is not None:
        add_lora(model, adapter, {"sha256": digest or sha256_file(d / MODEL_FILE), "path": str(d),
                                  "run_config": cfg_json.get("run_config") if isinstance(cfg_json.get("run_config"), dict) else None})
    return model.to(device).eval()
