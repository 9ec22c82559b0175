"""Convert published v1 (PyTorch) PAWN checkpoints to v2 (spec ``model-and-checkpoints.md`` §6),
slice standalone variants out of supernet checkpoints (§3.5), and resolve any checkpoint source.

A source is a Hugging Face Hub id ``owner/name[@revision][/folder]`` (:mod:`pawn.hub.fetch`; the
revision is a branch, tag or commit id, the folder one checkpoint's folder in the repo) or a local
directory. A v1 source has a ``model.safetensors`` and
``config.json``; only those two files are read. Every tensor's name and shape is checked against
the source's own ``model_config`` (its ``n_heads`` included: the published large has 8 heads of
80 channels, not the v2 supernet's 10), linear weights are transposed from ``[out, in]`` to
``[in, out]`` and layers are stacked.

Parity bar (§6.5): after writing, the converted checkpoint is loaded back and its fp32 logits are
compared with an independent NumPy implementation of the v1 forward computed in **float64**, on
the fixed batch of :func:`parity_batch`, over real positions; conversion fails unless max
|Δlogit| ≤ :data:`PARITY_MAX_TOL` (1e-3) and mean |Δlogit| ≤ :data:`PARITY_MEAN_TOL` (1e-4).
Both numbers are reported. (The fp32 drift of a correct conversion grows with logit magnitude:
about 2e-4 max at |logit| ≈ 60, the published large model's scale.)

Conversion cache: the output for a source goes to ``<cache>/<key>`` where ``<cache>`` is
``$PAWN_CONVERTED_DIR``, else ``huggingface_hub.cached_assets_path("pawn", "converted")``
(``$HF_HOME/assets/pawn/converted``). For a Hub id the key is ``owner--name--<resolved commit>``
(plus ``--<folder, %-encoded>`` for a checkpoint in a repo folder), so a re-published repo (or another ``@revision``) is converted again without ``--force``; for a
directory it is ``local--<dirname>-<hash of the absolute path>``. A later call with the same key
reuses the cached result; ``force=True`` reconverts.
"""

from __future__ import annotations

from pawn.errors import PawnError
import difflib
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
    check_output_target,
    is_hub_id,
    load_checkpoint,
    save_checkpoint,
    verify_manifest,
)
from pawn.config import PARAMS, ModelConfig
from pawn.hub.fetch import (HubDownloadError, HubRef, HubSnapshot, clear_cache_hint, fetch_snapshot, materialise_v2, parse_hub_ref,
                            verify_v1_download)
from pawn.vocab import N_OUTCOMES, NUM_ACTIONS, OUTCOME_TOKEN_BASE, PAD_TOKEN, VOCAB_SIZE, action_table

PARITY_MAX_TOL = 1e-3
"""Largest allowed max |Δlogit| between the converted fp32 model and the float64 v1 forward (spec §6.5)."""
PARITY_MEAN_TOL = 1e-4
"""Largest allowed mean |Δlogit| over real positions (spec §6.5 tightening: a systematic error
shows in the mean long before the max)."""
LEGACY_VOCAB_SIZE = 4284


class ConversionError(PawnError):
    """Conversion failed; the message is one line naming the source, file or tensor."""


@dataclass
class ConversionResult:
    """Outcome of :func:`convert`.

    Attributes:
        path: the v2 checkpoint directory.
        cached: true when an existing conversion was reused (no parity check was rerun).
        max_abs_dlogit, mean_abs_dlogit: max and mean |Δlogit| over real positions of the parity
            batch against the float64 v1 forward (None if cached or for a slice).
        seconds: wall time of this call, in seconds.
        config: the converted model's config.
        commit: the resolved Hub commit id of the source (None for a local directory).
        variant: the variant name for :func:`slice_checkpoint` results, else None.
    """

    path: Path
    cached: bool
    max_abs_dlogit: Optional[float]
    seconds: float
    config: ModelConfig
    mean_abs_dlogit: Optional[float] = None
    commit: Optional[str] = None
    variant: Optional[str] = None


def default_cache_dir() -> Path:
    """Directory holding converted checkpoints (see the module docstring)."""
    if os.environ.get("PAWN_CONVERTED_DIR"):
        return Path(os.environ["PAWN_CONVERTED_DIR"])
    from huggingface_hub import cached_assets_path

    from pawn.hub.fetch import hf_dirs

    return cached_assets_path(library_name="pawn", namespace="converted", assets_dir=hf_dirs()[1])


def cache_key(source: str, commit: Optional[str] = None, ref: Optional[HubRef] = None) -> str:
    """Cache directory name for a source: ``owner--name--<commit>[--<folder>]`` for a Hub id
    resolved to ``commit`` (``ref``: its resolved :class:`~pawn.hub.fetch.HubRef`, which knows the
    folder of an ``@branch/with/slashes/folder`` id; default parsed from ``source``), else
    ``local--<dirname>-<path hash>``."""
    ref = ref if ref is not None else parse_hub_ref(source)
    if ref is not None:
        return ref.folder_name + (f"--{ref.cache_name(commit)}" if commit else "")
    p = Path(source).resolve()
    return f"local--{p.name}-{hashlib.sha256(str(p).encode()).hexdigest()[:10]}"


# --------------------------------------------------------------------------- reading v1


def v1_tensor_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Expected v1 tensor names and PyTorch shapes (spec §4.2), from the source's model_config."""
    mc = ModelConfig.model_construct(**{k: cfg[k] for k in ("d_model", "n_layers", "d_ff", "vocab_size", "n_outcomes")})
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in PARAMS:  # the parameter table's v1 names (spec §4.2, §6.1)
        for i in range(cfg["n_layers"]) if "{i}" in spec.v1_name else (None,):
            shapes[spec.v1_name.format(i=i)] = spec.v1_shape(mc)
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
    out = {}
    for spec in PARAMS:  # the parameter table's v1 names and orientation
        fix = (lambda a: a.T) if spec.v1_transposed else (lambda a: a)
        if "{i}" in spec.v1_name:
            out[spec.name] = np.stack([fix(tensors[spec.v1_name.format(i=i)]) for i in range(n_layers)])
        else:
            out[spec.name] = fix(tensors[spec.v1_name])
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


# --------------------------------------------------------------------------- NumPy v1 forward


def v1_forward_numpy(tensors: dict[str, np.ndarray], cfg: dict, tokens: np.ndarray, attn_mask: np.ndarray,
                     dtype=np.float64) -> np.ndarray:
    """Independent NumPy implementation of the v1 PyTorch forward (spec §2), straight from
    the v1 tensor names and ``[out, in]`` orientation: factored embedding with PAD/outcome
    overrides, RMSNorm (ε 1e-6), interleaved RoPE, causal + key-padding attention with NaN rows
    of fully-masked queries set to 0, SwiGLU, final norm, lm_head.

    Args:
        tensors: v1 tensors by name. cfg: v1 model_config (d_model, n_layers, n_heads, ...).
        tokens: int [B, T]. attn_mask: bool [B, T].
        dtype: compute dtype; float64 (default) is the parity reference of spec §6.5, whose own
            rounding error is far below the fp32 model's.

    Returns:
        logits ``dtype`` [B, T, V].
    """
    f32 = np.dtype(dtype).type
    tensors = {k: np.asarray(v, dtype=f32) for k, v in tensors.items()}
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

    # RoPE tables exactly as v1 builds them (fp32 inv_freq and angles, spec §2.4), then widened.
    j = np.arange(hd // 2, dtype=np.float32)
    inv = (1.0 / (np.float32(cfg["rope_base"]) ** (2 * j / np.float32(hd)))).astype(np.float32)
    ang = np.arange(T, dtype=np.float32)[:, None] * inv[None, :]
    cos, sin = np.cos(ang).astype(np.float32).astype(f32), np.sin(ang).astype(np.float32).astype(f32)

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


def parity_dlogit(model, tensors: dict[str, np.ndarray], cfg: dict) -> tuple[float, float]:
    """``(max, mean)`` |Δlogit| between ``model`` run in fp32 and the float64
    :func:`v1_forward_numpy` over real positions of :func:`parity_batch` (fully-masked query rows
    are excluded, spec §8.8). Pass bar: :data:`PARITY_MAX_TOL`, :data:`PARITY_MEAN_TOL`."""
    import jax.numpy as jnp

    tokens, mask = parity_batch(cfg["max_seq_len"])
    ours = np.asarray(model(jnp.asarray(tokens), jnp.asarray(mask), dtype="float32"), dtype=np.float64)
    ref = v1_forward_numpy(tensors, cfg, tokens, mask, dtype=np.float64)
    real = mask & (np.cumsum(mask, axis=1) > 0)
    diff = np.abs(ours - ref)[real]
    return float(diff.max()), float(diff.mean())


# --------------------------------------------------------------------------- driver


def convert_directory(src: Path, output: Path, source_id: Optional[str] = None) -> tuple[ModelConfig, float, float]:
    """Convert one local v1 directory into a v2 checkpoint at ``output`` and check parity.

    If ``src`` has a ``.complete`` manifest it is verified first (a corrupt source is refused,
    not re-signed). The result (with a ``README.md`` model card, :mod:`pawn.hub.card`, listed in
    its manifest) is written atomically, loaded back (hashes verified) and compared with the
    float64 NumPy v1 forward (:func:`parity_dlogit`); on a parity failure the output is removed.

    Returns:
        ``(config, max_abs_dlogit, mean_abs_dlogit)``.

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
    from pawn.settings import RECIPE, PretrainConfig, fields_with

    card = model_card(config, run_config=run_config, recipe_fields=fields_with(PretrainConfig, RECIPE), notes=[
        "`pawn convert` checked the converted weights against an independent float64 NumPy v1 forward: "
        f"max |Δlogit| ≤ {PARITY_MAX_TOL:g} and mean |Δlogit| ≤ {PARITY_MEAN_TOL:g} over real positions."])
    save_checkpoint(output, params, config, run_config=run_config, extra_files={CARD_FILE: card.encode("utf-8")})
    ckpt = load_checkpoint(output)
    model = PAWNModel(ckpt.config, params=ckpt.params)
    dmax, dmean = parity_dlogit(model, tensors, cfg)
    if not (dmax <= PARITY_MAX_TOL and dmean <= PARITY_MEAN_TOL):
        shutil.rmtree(output, ignore_errors=True)
        raise ConversionError(
            f"{src}: converted model disagrees with the v1 reference forward (max |Δlogit| {dmax:.3g}, bar {PARITY_MAX_TOL:g}; "
            f"mean {dmean:.3g}, bar {PARITY_MEAN_TOL:g}); output removed"
        )
    return config, dmax, dmean


def _reusable(out: Path, made_from: dict, what: str, force: bool):
    """The checkpoint already at ``out`` if it was made from ``made_from`` (and not ``force``);
    None to (re)write it. Everything else at ``out`` (a file, a symbolic link, a run directory,
    a foreign directory or checkpoint) is refused by :func:`pawn.checkpoint.check_output_target`
    before any work; a damaged earlier result of the same conversion is written again."""
    if check_output_target(out, made_from, what) is None:
        return None
    try:
        ckpt = load_checkpoint(out)
    except (CheckpointError, FileNotFoundError):
        return None  # a damaged earlier result: write it again
    return None if force else ckpt


def convert(source: str, output: Optional[str | os.PathLike] = None, *, force: bool = False) -> ConversionResult:
    """Convert a v1 checkpoint (Hub id or local directory) to v2, with caching.

    Args:
        source: ``owner/name[@revision][/folder]`` on the Hugging Face Hub, or a local directory
            holding a v1 ``model.safetensors`` and ``config.json``.
        output: destination directory; default ``default_cache_dir() / cache_key(source, commit)``.
        force: reconvert even if a complete conversion already exists at the destination.

    Returns:
        :class:`ConversionResult`.

    Raises:
        ConversionError (one line): missing files, missing/extra tensors, shape mismatches, a v2
            source, parity failure. HubDownloadError: network failures, unknown repo/revision,
            nothing cached while offline, an interrupted download.
        IncompatibleCheckpointError: legacy vocabulary or wrong n_outcomes.
    """
    t0 = time.perf_counter()
    ref = parse_hub_ref(source)
    if ref is None and not Path(source).is_dir():
        raise ConversionError(f"{source}: not a directory and not a Hugging Face repo id (owner/name[@revision][/folder])")
    commit = None
    if ref is not None:
        snap = fetch_snapshot(ref, force=force)
        if snap.kind == "v2":
            raise ConversionError(f"{ref}: already a v2 checkpoint (it has a .complete manifest); load it directly, no conversion needed")
        src, commit, source_id, ref = snap.path, snap.commit, snap.pinned, snap.ref
    else:
        src, source_id = Path(source), str(Path(source).resolve())
    out = Path(output) if output is not None else default_cache_dir() / cache_key(source, commit, ref)
    ckpt = _reusable(out, {"converted_from": source_id, "supernet_checkpoint": None, "variant": None, "merged_from": None},
                     f"a conversion of {source}", force)
    if ckpt is not None:
        return ConversionResult(out, True, None, time.perf_counter() - t0, ckpt.config, commit=commit)
    if ref is not None:  # no manifest: check the cached bytes against their Hub hashes (re-fetched once)
        src = verify_v1_download(snap).path
    config, dmax, dmean = convert_directory(src, out, source_id)
    return ConversionResult(out, False, dmax, time.perf_counter() - t0, config, dmean, commit)


def fetch_source(source: str | os.PathLike) -> tuple[Path, HubSnapshot]:
    """A Hub id as a local checkpoint directory: a v2 checkpoint (model or adapter) downloaded,
    checked whole and linked into the PAWN Hub cache (:func:`pawn.hub.fetch.materialise_v2`; its
    hashes are verified by whoever loads it), a published v1 checkpoint converted once into the
    conversion cache (:func:`convert`).

    Returns:
        ``(directory, HubSnapshot)``.

    Raises:
        HubDownloadError, CheckpointError, ConversionError: see :func:`pawn.hub.fetch.fetch_snapshot`
            and :func:`convert`.
    """
    snap = fetch_snapshot(str(source))
    if snap.kind == "v1":
        return convert(str(source)).path, snap
    return materialise_v2(snap), snap


def refuse_corrupt(path: Path, snap: HubSnapshot, error: Exception) -> HubDownloadError:
    """Remove the cached copy ``path`` of ``snap`` that failed verification (never kept) and return
    the one-line error to raise (it says how to clear the HF cache)."""
    shutil.rmtree(path, ignore_errors=True)
    return HubDownloadError(f"{snap.ref}: download at commit {snap.commit[:12]} is incomplete or corrupt, not loaded ({error}); "
                            f"{clear_cache_hint(snap.ref)}")


def refetch(path: Path, snap: HubSnapshot, error: Exception) -> tuple[Path, HubSnapshot]:
    """A v2 copy ``path`` of ``snap`` failed verification: remove it and download the same commit
    again once (``force_download``), relinked. Offline or with the Hub unreachable, refuse at once.

    Raises:
        HubDownloadError: (:func:`refuse_corrupt`) it cannot be downloaded again now.
    """
    from pawn.hub.push import is_offline

    shutil.rmtree(path, ignore_errors=True)
    if is_offline() or snap.from_cache is not None:
        raise refuse_corrupt(path, snap, error)
    again = fetch_snapshot(snap.ref.pinned(snap.commit), force=True)
    again = HubSnapshot(snap.ref, again.commit, again.kind, again.path, again.files, snap.from_cache)
    return materialise_v2(again), again


def load_fetched(path: Path, snap: HubSnapshot):
    """:func:`pawn.checkpoint.load_checkpoint` of a :func:`fetch_source` result; a downloaded v2
    copy that fails verification is removed and downloaded again once (:func:`refetch`), then
    refused (:func:`refuse_corrupt`).

    Raises:
        HubDownloadError, CheckpointError.
    """
    try:
        return load_checkpoint(path)
    except CheckpointError as e:
        if snap.kind == "v1":
            raise
        path, snap = refetch(path, snap, e)
    try:
        return load_checkpoint(path)
    except CheckpointError as e:
        raise refuse_corrupt(path, snap, f"{e}; also after downloading it again") from None


def _load_source(source: str | os.PathLike):
    src = str(source)
    if parse_hub_ref(src) is None:
        return load_checkpoint(src), None, None
    path, snap = fetch_source(src)
    return load_fetched(path, snap), snap.commit, snap


def load_source(source: str | os.PathLike):
    """Any checkpoint source as a verified :class:`pawn.checkpoint.Checkpoint` (its run config and
    so its layout kept) plus the resolved Hub commit.

    A local directory is loaded as is; a Hub id ``owner/name[@revision][/folder]`` holding a v2
    checkpoint (a ``.complete`` in the repo root or the folder) is downloaded, checked whole and
    hash-verified (:func:`pawn.hub.fetch.fetch_snapshot`, :func:`~pawn.hub.fetch.materialise_v2`);
    one holding a published v1 checkpoint is converted once into the cache (:func:`convert`).

    Returns:
        ``(Checkpoint, commit or None)``.

    Raises:
        FileNotFoundError, CheckpointError (HubDownloadError included), ConversionError.
    """
    ckpt, commit, _ = _load_source(source)
    return ckpt, commit


def slice_checkpoint(source: str, variant: str, output: Optional[str | os.PathLike] = None, *,
                     force: bool = False) -> ConversionResult:
    """Write the nested ``variant`` of a supernet checkpoint as a standalone v2 checkpoint
    (:func:`pawn.model.sliced`, spec §3.5): prefix slices of every array, the variant's config,
    and the supernet's run config (layout and trained context kept) with ``variant`` and
    ``supernet_checkpoint`` added, so ``pawn eval`` treats it as a single model with the same
    numbers as ``--variant`` on the supernet.

    Args:
        source: a local supernet checkpoint directory or a Hub id of one.
        variant: one of the supernet's variant names (``small``, ``base``, ``large``).
        output: destination; default ``default_cache_dir() / (cache_key(source, commit) + "--" + variant)``.
        force: rewrite an existing result.

    Raises:
        ConversionError: not a supernet checkpoint, or an unknown variant; plus the errors of
            :func:`load_source`.
    """
    from pawn.config import SUPERNETS, supernet_of
    from pawn.hub.card import CARD_FILE, model_card
    from pawn.settings import RECIPE, PretrainConfig, fields_with
    from pawn.model import PAWNModel, sliced

    t0 = time.perf_counter()
    ckpt, commit, snap = _load_source(source)
    sup = supernet_of(ckpt.config, ckpt.run_config)
    if sup is None:
        raise ConversionError(f"{source}: not a supernet checkpoint, so --slice {variant} does not apply")
    variants = SUPERNETS[sup][1]
    if variant not in variants:
        raise ConversionError(f"{source}: --slice {variant!r} is not one of supernet {sup!r}'s variants {sorted(variants)}")
    source_id = snap.pinned if snap is not None else str(Path(source).resolve())
    out = Path(output) if output is not None else default_cache_dir() / f"{cache_key(source, commit, snap.ref if snap else None)}--{variant}"
    have = _reusable(out, {"supernet_checkpoint": source_id, "variant": variant, "merged_from": None},
                     f"variant {variant} of {source}", force)
    if have is not None:
        return ConversionResult(out, True, None, time.perf_counter() - t0, have.config, commit=commit, variant=variant)
    vcfg = variants[variant]
    params = {k: np.asarray(v) for k, v in sliced(PAWNModel(ckpt.config, params=ckpt.params), vcfg).params().items()}
    run = {**(ckpt.run_config or {}), "variant": variant, "supernet_checkpoint": source_id}
    card = model_card(vcfg, run_config=run, title=f"PAWN {sup}/{variant}", recipe_fields=fields_with(PretrainConfig, RECIPE),
                      notes=[f"Sliced by `pawn convert --slice {variant}` from the supernet checkpoint `{source_id}` (the leading slice of every array: its first layers, heads and channels)."])
    save_checkpoint(out, params, vcfg, run_config=run, extra_files={CARD_FILE: card.encode("utf-8")})
    return ConversionResult(out, False, None, time.perf_counter() - t0, vcfg, commit=commit, variant=variant)


def not_local_nor_hub(source: str, hub_error: str) -> str:
    """One line for a ``source`` that is neither a local directory nor a loadable Hub id: both
    readings, the Hub's reason, and local names close to it (a mistyped path is the likelier
    case when its parent directory exists)."""

    reason = hub_error.removeprefix(f"{source}: ")
    p = Path(source)
    hint = ""
    if p.parent != Path(".") and p.parent.is_dir():
        try:
            names = [c.name for c in p.parent.iterdir()]
        except OSError:
            names = []
        close = difflib.get_close_matches(p.name, names, n=3, cutoff=0.5)
        hint = f" ({p.parent}/ exists" + (f"; did you mean {' or '.join(str(p.parent / c) for c in close)}?)" if close else ")")
    return f"{source}: no such local directory{hint}, and as a Hugging Face Hub id: {reason}"


@dataclass
class ConvertReport:
    """One row of :func:`convert_many`.

    Attributes:
        source: the source as given. result: the :class:`ConversionResult`, or None on failure.
        error: the one-line error, or None on success.
    """

    source: str
    result: Optional[ConversionResult]
    error: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.result is not None

    def row(self) -> tuple[str, str, str, str]:
        """(source [commit], result with shape, output path, parity max / mean |Δlogit|) for the table."""
        res = self.result
        if res is None:
            return self.source, "failed", "", self.error or ""
        c = res.config
        what = ("cached" if res.cached else ("sliced" if res.variant else "converted")) + f" d{c.d_model} L{c.n_layers} H{c.n_heads} F{c.d_ff}"
        parity = "—" if res.max_abs_dlogit is None else f"{res.max_abs_dlogit:.2e} / {res.mean_abs_dlogit:.2e}"
        return self.source + (f" ({res.commit[:12]})" if res.commit else ""), what, str(res.path), parity


def convert_many(sources: list[str], output: Optional[str | os.PathLike] = None, *, force: bool = False,
                 slice_variant: Optional[str] = None, on_done=None) -> list[ConvertReport]:
    """Convert (or, with ``slice_variant``, slice) each source in turn, going on after a failure.

    Args:
        sources: Hub ids and/or local directories.
        output: with one source, its destination; with several, a parent directory that gets one
            sub-folder per source (named by its cache key). Default: the conversion cache.
        force, slice_variant: see :func:`convert` and :func:`slice_checkpoint`.
        on_done: called with each :class:`ConvertReport` as soon as it is known.

    Returns:
        One :class:`ConvertReport` per source, in order. Only :class:`pawn.errors.PawnError`
        problems are caught (reported as the row's ``error``); anything else is a bug and raises.
    """
    reports = []
    for src in sources:
        dest: Optional[Path] = None
        if output is not None:
            dest = Path(output)
            if len(sources) > 1:
                dest = dest / (cache_key(src) + (f"--{slice_variant}" if slice_variant else ""))
        try:
            res = slice_checkpoint(src, slice_variant, dest, force=force) if slice_variant else convert(src, dest, force=force)
            rep = ConvertReport(src, res)
        except HubDownloadError as e:  # not a local directory either: name both readings, as loading does
            rep = ConvertReport(src, None, not_local_nor_hub(src, str(e)) if is_hub_id(src) else str(e))
        except (PawnError, FileNotFoundError) as e:
            rep = ConvertReport(src, None, str(e))
        reports.append(rep)
        if on_done is not None:
            on_done(rep)
    return reports
