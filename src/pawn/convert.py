"""Convert published v1 (PyTorch) PAWN checkpoints to v2 (spec ``model-and-checkpoints.md`` §6).

The source is a Hugging Face repo id (``thomas-schweich/pawn-small``) or a local directory with a
v1 ``model.safetensors`` and ``config.json``; only those two files are read. Every tensor's name
and shape is checked against the source's own ``model_config`` (its ``n_heads`` included: the
published large has 8 heads of 80 channels, not the v2 supernet's 10), linear weights are
transposed from ``[out, in]`` to ``[in, out]`` and layers are stacked. After writing, the
converted checkpoint is loaded back and compared with an independent NumPy implementation of the
v1 forward on a fixed batch; conversion fails if max |Δlogit| over real positions exceeds 1e-4.

Conversion cache: the output for a source goes to ``<cache>/<key>`` where ``<cache>`` is
``$PAWN_CONVERTED_DIR``, else ``$HF_HOME/pawn-jax-converted``, else
``~/.cache/huggingface/pawn-jax-converted``. The key is the source *identifier*, not the weights'
content: ``owner--name`` for a repo id, ``local--<dirname>-<hash of the absolute path>`` for a
directory. A later call with the same identifier reuses the cached result; ``force=True``
reconverts.
"""

from __future__ import annotations

from pawn.errors import PawnError
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from pawn.checkpoint import (
    CheckpointError,
    IncompatibleCheckpointError,
    is_hub_id,
    load_checkpoint,
    save_checkpoint,
    verify_manifest,
)
from pawn.config import ModelConfig
from pawn.vocab import N_OUTCOMES, NUM_ACTIONS, OUTCOME_TOKEN_BASE, PAD_TOKEN, VOCAB_SIZE, action_table

PARITY_TOL = 1e-4
"""Largest allowed max |Δlogit| (fp32) between the converted model and the NumPy v1 forward."""
LEGACY_VOCAB_SIZE = 4284


class ConversionError(PawnError):
    """Conversion failed; the message is one line naming the source, file or tensor."""


@dataclass
class ConversionResult:
    """Outcome of :func:`convert`.

    Attributes:
        path: the v2 checkpoint directory.
        cached: true when an existing conversion was reused (no parity check was rerun).
        max_abs_dlogit: max |Δlogit| over real positions of the parity batch (None if cached).
        seconds: wall time of this call, in seconds.
        config: the converted model's config.
    """

    path: Path
    cached: bool
    max_abs_dlogit: Optional[float]
    seconds: float
    config: ModelConfig


def default_cache_dir() -> Path:
    """Directory holding converted checkpoints (see the module docstring)."""
    if os.environ.get("PAWN_CONVERTED_DIR"):
        return Path(os.environ["PAWN_CONVERTED_DIR"])
    hf_home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(hf_home) / "pawn-jax-converted"


def cache_key(source: str) -> str:
    """Cache directory name for a source identifier (repo id or local directory)."""
    if is_hub_id(source):
        return source.replace("/", "--")
    p = Path(source).resolve()
    return f"local--{p.name}-{hashlib.sha256(str(p).encode()).hexdigest()[:10]}"


# --------------------------------------------------------------------------- reading v1


def v1_tensor_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Expected v1 tensor names and PyTorch shapes (spec §4.2), from the source's model_config."""
    d, L, F, V, O = cfg["d_model"], cfg["n_layers"], cfg["d_ff"], cfg["vocab_size"], cfg["n_outcomes"]
    shapes: dict[str, tuple[int, ...]] = {
        "embed.src_embed.weight": (64, d), "embed.dst_embed.weight": (64, d),
        "embed.promo_embed.weight": (5, d), "embed.pad_embed": (d,),
        "embed.outcome_embed.weight": (O, d), "final_norm.weight": (d,), "lm_head.weight": (V, d),
    }
    for i in range(L):
        p = f"layers.{i}."
        shapes[p + "attn_norm.weight"] = (d,)
        shapes[p + "ffn_norm.weight"] = (d,)
        for w in ("wq", "wk", "wv", "wo"):
            shapes[p + f"attn.{w}.weight"] = (d, d)
        shapes[p + "ffn.w_gate.weight"] = (F, d)
        shapes[p + "ffn.w_up.weight"] = (F, d)
        shapes[p + "ffn.w_down.weight"] = (d, F)
    return shapes


def read_v1_config(src: Path) -> dict:
    """Read and gate a v1 ``config.json`` (spec §6.2). Returns the model_config with defaults.

    Raises:
        ConversionError: unreadable file, no model_config, or missing required fields.
        IncompatibleCheckpointError: the legacy 4,284-token vocabulary or a vocab_size /
            n_outcomes other than 1980 / 11.
    """
    path = src / "config.json"
    try:
        raw = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise ConversionError(f"{path}: not found (a v1 source needs config.json and model.safetensors)") from None
    except ValueError as e:
        raise ConversionError(f"{path}: not valid JSON ({e})") from None
    mc = raw.get("model_config") if isinstance(raw, dict) else None
    if not isinstance(mc, dict):
        raise ConversionError(f"{path}: no model_config object")
    missing = [k for k in ("d_model", "n_layers", "n_heads", "d_ff") if k not in mc]
    if missing:
        raise ConversionError(f"{path}: model_config lacks required fields {missing}")
    defaults = {"vocab_size": VOCAB_SIZE, "max_seq_len": 512, "n_outcomes": N_OUTCOMES, "rope_base": 10000.0}
    cfg = {}
    for key in ("d_model", "n_layers", "n_heads", "d_ff", "vocab_size", "max_seq_len", "n_outcomes", "rope_base"):
        value = mc.get(key, defaults.get(key))
        kind = float if key == "rope_base" else int
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
            raise ConversionError(f"{path}: model_config.{key} must be {'a number' if kind is float else 'an integer'}, got {value!r}")
        cfg[key] = kind(value)
    if cfg["vocab_size"] == LEGACY_VOCAB_SIZE:
        raise IncompatibleCheckpointError(
            f"{path}: vocab_size 4284 is the legacy v0.x vocabulary (PAD = 0, coordinate grid tokens); "
            "its token ids do not map to PAWN's 1,980-token vocabulary, so it cannot be converted"
        )
    if cfg["vocab_size"] != VOCAB_SIZE:
        raise IncompatibleCheckpointError(f"{path}: vocab_size {cfg['vocab_size']} is not PAWN's {VOCAB_SIZE}")
    if cfg["n_outcomes"] != N_OUTCOMES:
        raise IncompatibleCheckpointError(f"{path}: n_outcomes {cfg['n_outcomes']} is not PAWN's {N_OUTCOMES}")
    return cfg


def read_v1_tensors(src: Path, cfg: dict) -> dict[str, np.ndarray]:
    """Load ``model.safetensors`` and check every tensor name and shape against ``cfg``.

    Raises:
        ConversionError: unreadable file, missing or extra tensors, or a shape mismatch (the
            message names the tensor and both shapes; a ``[4284, d]`` lm_head under a config
            claiming 1980 is caught here).
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    path = src / "model.safetensors"
    if not path.is_file():
        raise ConversionError(f"{path}: not found")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise ConversionError(f"{path}: unreadable safetensors file ({e})") from None
    expected = v1_tensor_shapes(cfg)
    if {"wq", "lm_head", "src_embed"} <= set(tensors):
        raise ConversionError(f"{path}: already a v2 checkpoint (canonical tensor names); load it directly, no conversion needed")
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing:
        raise ConversionError(f"{path}: missing tensors {missing[:5]}{' …' if len(missing) > 5 else ''} for n_layers={cfg['n_layers']}")
    if extra:
        raise ConversionError(f"{path}: unexpected tensors {extra[:5]}{' …' if len(extra) > 5 else ''} (not in the v1 schema for this config)")
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise ConversionError(f"{path}: tensor {name} has shape {tuple(tensors[name].shape)}, model_config implies {shape}")
    return {k: v.astype(np.float32) for k, v in tensors.items()}


def v1_to_v2(tensors: dict[str, np.ndarray], n_layers: int) -> dict[str, np.ndarray]:
    """Map v1 tensors to the 16 v2 arrays (spec §6.1): embeddings copied, every linear weight
    (lm_head included) transposed ``[out, in] → [in, out]``, per-layer tensors stacked in layer
    order on a new leading axis."""
    def stack(fmt: str, transpose: bool) -> np.ndarray:
        arrs = [tensors[fmt.format(i=i)] for i in range(n_layers)]
        return np.stack([a.T if transpose else a for a in arrs])

    out = {
        "src_embed": tensors["embed.src_embed.weight"], "dst_embed": tensors["embed.dst_embed.weight"],
        "promo_embed": tensors["embed.promo_embed.weight"], "pad_embed": tensors["embed.pad_embed"],
        "outcome_embed": tensors["embed.outcome_embed.weight"],
        "attn_norm": stack("layers.{i}.attn_norm.weight", False),
        "ffn_norm": stack("layers.{i}.ffn_norm.weight", False),
        "final_norm": tensors["final_norm.weight"], "lm_head": tensors["lm_head.weight"].T,
    }
    for w in ("wq", "wk", "wv", "wo"):
        out[w] = stack("layers.{i}.attn." + w + ".weight", True)
    for w in ("w_gate", "w_up", "w_down"):
        out[w] = stack("layers.{i}.ffn." + w + ".weight", True)
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


# --------------------------------------------------------------------------- NumPy v1 forward


def v1_forward_numpy(tensors: dict[str, np.ndarray], cfg: dict, tokens: np.ndarray, attn_mask: np.ndarray) -> np.ndarray:
    """Independent fp32 NumPy implementation of the v1 PyTorch forward (spec §2), straight from
    the v1 tensor names and ``[out, in]`` orientation: factored embedding with PAD/outcome
    overrides, RMSNorm (ε 1e-6), interleaved RoPE, causal + key-padding attention with NaN rows
    of fully-masked queries set to 0, SwiGLU, final norm, lm_head.

    Args:
        tensors: v1 tensors by name. cfg: v1 model_config (d_model, n_layers, n_heads, ...).
        tokens: int [B, T]. attn_mask: bool [B, T].

    Returns:
        logits float32 [B, T, V].
    """
    f32 = np.float32
    d, L, H = cfg["d_model"], cfg["n_layers"], cfg["n_heads"]
    hd = d // H
    B, T = tokens.shape
    src, dst, promo = action_table()
    a = np.clip(tokens, 0, NUM_ACTIONS - 1)
    x = (tensors["embed.src_embed.weight"][src[a]] + tensors["embed.dst_embed.weight"][dst[a]]
         + tensors["embed.promo_embed.weight"][promo[a]])
    x = np.where((tokens == PAD_TOKEN)[..., None], tensors["embed.pad_embed"], x)
    oi = np.clip(tokens - OUTCOME_TOKEN_BASE, 0, cfg["n_outcomes"] - 1)
    x = np.where((tokens >= OUTCOME_TOKEN_BASE)[..., None], tensors["embed.outcome_embed.weight"][oi], x).astype(f32)

    def norm(v, w):
        return (v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + f32(1e-6))).astype(f32) * w

    j = np.arange(hd // 2, dtype=f32)
    inv = (1.0 / (f32(cfg["rope_base"]) ** (2 * j / f32(hd)))).astype(f32)
    ang = np.arange(T, dtype=f32)[:, None] * inv[None, :]
    cos, sin = np.cos(ang).astype(f32), np.sin(ang).astype(f32)

    def rope(v):  # v [B, H, T, hd]
        ev, od = v[..., 0::2], v[..., 1::2]
        out = np.empty_like(v)
        out[..., 0::2] = ev * cos - od * sin
        out[..., 1::2] = ev * sin + od * cos
        return out

    allowed = np.tril(np.ones((T, T), bool))[None, None] & attn_mask[:, None, None, :]
    for i in range(L):
        p = f"layers.{i}."
        h = norm(x, tensors[p + "attn_norm.weight"])
        q, k, v = (
            (h @ tensors[p + f"attn.{w}.weight"].T).reshape(B, T, H, hd).transpose(0, 2, 1, 3)
            for w in ("wq", "wk", "wv")
        )
        q, k = rope(q), rope(k)
        s = (q @ k.transpose(0, 1, 3, 2)) / np.sqrt(f32(hd))
        s = np.where(allowed, s, -np.inf)
        with np.errstate(invalid="ignore"):
            e = np.exp(s - s.max(axis=-1, keepdims=True))
            w = e / e.sum(axis=-1, keepdims=True)
        w = np.nan_to_num(w, nan=0.0).astype(f32)
        ctx = (w @ v).transpose(0, 2, 1, 3).reshape(B, T, d)
        x = x + ctx @ tensors[p + "attn.wo.weight"].T
        h = norm(x, tensors[p + "ffn_norm.weight"])
        g = h @ tensors[p + "ffn.w_gate.weight"].T
        u = h @ tensors[p + "ffn.w_up.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * u) @ tensors[p + "ffn.w_down.weight"].T
    return (norm(x, tensors["final_norm.weight"]) @ tensors["lm_head.weight"].T).astype(f32)


def parity_batch(max_seq_len: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The fixed parity batch: four rows of 64 uniform random action tokens (spec §6.5), plus a
    row with an outcome token at position 0 and trailing PADs, and a row starting with PAD.
    Returns ``tokens`` int32 [6, T] and ``attn_mask`` bool [6, T] (T = min(64, max_seq_len))."""
    T = min(64, max_seq_len)
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, NUM_ACTIONS, size=(6, T)).astype(np.int32)
    tokens[4, 0] = OUTCOME_TOKEN_BASE + 2
    tokens[4, T - 5:] = PAD_TOKEN
    tokens[5, 0] = PAD_TOKEN
    return tokens, tokens != PAD_TOKEN


def parity_max_abs_dlogit(model, tensors: dict[str, np.ndarray], cfg: dict) -> float:
    """max |Δlogit| between ``model`` (fp32) and :func:`v1_forward_numpy` over real positions of
    :func:`parity_batch`. Fully-masked query rows are excluded (spec §8.8)."""
    import jax.numpy as jnp

    tokens, mask = parity_batch(cfg["max_seq_len"])
    ours = np.asarray(model(jnp.asarray(tokens), jnp.asarray(mask), dtype="float32"))
    ref = v1_forward_numpy(tensors, cfg, tokens, mask)
    real = mask & (np.cumsum(mask, axis=1) > 0)
    return float(np.abs(ours - ref)[real].max())


# --------------------------------------------------------------------------- driver


def _download(repo_id: str) -> Path:
    """Snapshot ``model.safetensors`` and ``config.json`` of a Hub repo into the normal HF cache
    (``HF_HUB_OFFLINE=1`` is honoured). Raises ConversionError with one line on any failure."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import (
            GatedRepoError,
            HfHubHTTPError,
            LocalEntryNotFoundError,
            OfflineModeIsEnabled,
            RepositoryNotFoundError,
        )
    except ImportError as e:  # pragma: no cover - dependency declared in pyproject
        raise ConversionError(f"huggingface_hub is not installed ({e})") from None
    try:
        return Path(snapshot_download(repo_id, allow_patterns=["model.safetensors", "config.json"]))
    except RepositoryNotFoundError:
        raise ConversionError(f"{repo_id}: no such model repository on the Hugging Face Hub (or it is private)") from None
    except GatedRepoError:
        raise ConversionError(f"{repo_id}: the repository is gated; log in with `hf auth login` and accept its terms") from None
    except (LocalEntryNotFoundError, OfflineModeIsEnabled):
        raise ConversionError(
            f"{repo_id}: not in the local Hugging Face cache and the Hub cannot be reached "
            "(offline or HF_HUB_OFFLINE=1); connect once to download it"
        ) from None
    except HfHubHTTPError as e:
        raise ConversionError(f"{repo_id}: Hub request failed ({str(e).splitlines()[0]})") from None
    except OSError as e:
        raise ConversionError(f"{repo_id}: download failed ({e.__class__.__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None


def convert_directory(src: Path, output: Path, source_id: Optional[str] = None) -> tuple[ModelConfig, float]:
    """Convert one local v1 directory into a v2 checkpoint at ``output`` and check parity.

    If ``src`` has a ``.complete`` manifest it is verified first (a corrupt source is refused,
    not re-signed). The result (with a ``README.md`` model card, :mod:`pawn.hub.card`, listed in its manifest) is
    written atomically, loaded back (hashes verified) and compared
    with the NumPy v1 forward; on a parity failure the output is removed.

    Returns:
        ``(config, max_abs_dlogit)``.

    Raises:
        ConversionError, IncompatibleCheckpointError, CheckpointError: one-line messages.
    """
    from pawn.model import PAWNModel

    if (src / ".complete").exists():
        try:
            verify_manifest(src)
        except CheckpointError as e:
            raise ConversionError(f"source {e}") from None
    cfg = read_v1_config(src)
    tensors = read_v1_tensors(src, cfg)
    try:
        config = ModelConfig(**cfg)
    except Exception as e:  # pydantic.ValidationError: its first message says why
        why = e.errors()[0]["msg"].removeprefix("Value error, ") if hasattr(e, "errors") else str(e)
        raise ConversionError(f"{src / 'config.json'}: invalid model_config ({why})") from None
    params = v1_to_v2(tensors, cfg["n_layers"])
    run_config = {"converted_from": source_id or str(src.resolve())}
    from pawn.hub.card import CARD_FILE, model_card

    card = model_card(config, run_config=run_config, notes=[
        f"`pawn convert` checked the converted weights against an independent NumPy v1 forward: max |Δlogit| ≤ {PARITY_TOL:g}."])
    save_checkpoint(output, params, config, run_config=run_config, extra_files={CARD_FILE: card.encode("utf-8")})
    ckpt = load_checkpoint(output)
    model = PAWNModel(ckpt.config, params=ckpt.params)
    dmax = parity_max_abs_dlogit(model, tensors, cfg)
    if not dmax <= PARITY_TOL:
        shutil.rmtree(output, ignore_errors=True)
        raise ConversionError(
            f"{src}: converted model disagrees with the v1 reference forward (max |Δlogit| {dmax:.3g} > {PARITY_TOL:g}); output removed"
        )
    return config, dmax


def convert(source: str, output: Optional[str | os.PathLike] = None, *, force: bool = False) -> ConversionResult:
    """Convert a v1 checkpoint (Hub repo id or local directory) to v2, with caching.

    Args:
        source: ``owner/name`` on the Hugging Face Hub, or a local directory holding a v1
            ``model.safetensors`` and ``config.json``.
        output: destination directory; default ``default_cache_dir() / cache_key(source)``.
        force: reconvert even if a complete conversion already exists at the destination.

    Returns:
        :class:`ConversionResult`.

    Raises:
        ConversionError (one line): network failures, unknown repo, nothing cached while offline,
            missing files, missing/extra tensors, shape mismatches, parity failure.
        IncompatibleCheckpointError: legacy vocabulary or wrong n_outcomes.
    """
    t0 = time.perf_counter()
    hub = is_hub_id(source)
    if not hub and not Path(source).is_dir():
        raise ConversionError(f"{source}: not a directory and not a Hugging Face repo id (owner/name)")
    source_id = source if hub else str(Path(source).resolve())
    out = Path(output) if output is not None else default_cache_dir() / cache_key(source)
    if out.exists():
        if not out.is_dir():
            raise ConversionError(f"{out}: exists and is not a directory; choose another --output")
        is_ours = (out / ".complete").exists() or not any(out.iterdir())
        if not is_ours:
            raise ConversionError(f"{out}: exists and is not a PAWN checkpoint; refusing to overwrite it")
        ckpt = None
        try:
            ckpt = load_checkpoint(out)
        except (CheckpointError, FileNotFoundError):
            pass  # a damaged earlier result: convert again
        if ckpt is not None:
            made_from = (ckpt.run_config or {}).get("converted_from")
            if made_from != source_id:
                raise ConversionError(
                    f"{out}: holds a checkpoint that is not a conversion of {source}"
                    f" ({'made from ' + made_from if made_from else 'not made by pawn convert'}); refusing to replace it"
                )
            if not force:
                return ConversionResult(out, True, None, time.perf_counter() - t0, ckpt.config)
    src = _download(source) if hub else Path(source)
    config, dmax = convert_directory(src, out, source_id)
    return ConversionResult(out, False, dmax, time.perf_counter() - t0, config)
