"""The PAWN transformer in Equinox (spec ``model-and-checkpoints.md`` §2).

Decoder-only, pre-norm; factored move embeddings; RMSNorm (ε = 1e-6, fp32 math); attention with a
causal and key-padding mask, no biases; RoPE on interleaved adjacent channel pairs; SwiGLU; final
norm; untied ``lm_head``. Per-layer weights are stacked on a leading ``L`` axis and the layers run
under ``lax.scan``. Parameters are fp32; the compute dtype is chosen per call. This module knows no
files, no engine and no CLI.
"""

from __future__ import annotations

import functools
from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name
from jaxtyping import Array, Bool, Float, Int

from pawn.config import PARAMS, ModelConfig, validate_nested
from pawn.vocab import NUM_ACTIONS, OUTCOME_TOKEN_BASE, PAD_TOKEN, action_table

RMS_EPS = 1e-6
"""RMSNorm epsilon (spec §2.2)."""
INIT_STD = 0.02
MASK_FILL = -1e30
"""Score given to masked keys before the fp32 softmax (exp underflows to exactly 0)."""
"""Standard deviation of the normal init of every matrix (spec §2.7)."""

PARAM_NAMES: tuple[str, ...] = tuple(p.name for p in PARAMS)
"""The 16 canonical parameter names, in declaration order (spec §5.2; :data:`pawn.config.PARAMS`)."""


def param_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Shape of every canonical parameter for ``cfg`` (spec §5.2; linear weights ``[in, out]``;
    :data:`pawn.config.PARAMS`)."""
    return {p.name: p.shape(cfg) for p in PARAMS}


@functools.cache
def _decomposition() -> np.ndarray:
    """int32 [1968, 3]: (src, dst, promo) of every action (spec §1.5), the vocabulary's
    :func:`pawn.vocab.action_table` read on first use (not at import)."""
    src, dst, promo = action_table()
    return np.stack([src, dst, promo], axis=1).astype(np.int32)


def resolve_dtype(dtype: Optional[str | jnp.dtype]) -> jnp.dtype:
    """Compute dtype: ``None``/``"auto"`` → float32 on CPU, bfloat16 on accelerators."""
    if dtype is None or dtype == "auto":
        return jnp.float32 if jax.default_backend() == "cpu" else jnp.bfloat16
    return jnp.dtype(dtype)


def rms_norm(x: Float[Array, "... d"], w: Float[Array, " d"]) -> Float[Array, "... d"]:
    """RMSNorm (spec §2.2, v2 order): normalise and scale in fp32, cast once to ``x.dtype``."""
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + RMS_EPS)
    return (y * w.astype(jnp.float32)).astype(x.dtype)


def rope_tables(positions: Int[Array, " T"], head_dim: int, base: float) -> tuple[Array, Array]:
    """cos, sin fp32 [T, head_dim/2] with θ[p, j] = p / base^(2j/head_dim) (spec §2.4)."""
    inv_freq = 1.0 / (base ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    theta = positions.astype(jnp.float32)[:, None] * inv_freq[None, :]
    return jnp.cos(theta), jnp.sin(theta)


def rope_constants(T: int, head_dim: int, base: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`rope_tables` of positions ``0 … T-1`` as host arrays: cos, sin float32 numpy
    [T, head_dim/2] (spec §2.4), bitwise the values the tables take inside a compiled program on
    the default backend. Computed once per ``(T, head_dim, base, backend)`` and also while a caller
    is being traced, so the caller's program holds them as constants.

    Left as traced ops, XLA:CPU fuses the ``cos``/``sin`` into every consumer and recomputes them
    for each element of q and k, forward and backward: 47 ms of a 425 ms TINY supernet joint step
    at T 128 (``benchmarks/xla_profile.py --step pretrain``). Under ``jax.disable_jit()`` the tables
    are computed op by op, as everything else is there."""
    if jax.config.jax_disable_jit:
        cos, sin = rope_tables(jnp.arange(T), head_dim, base)
        return np.asarray(cos), np.asarray(sin)
    return _rope_constants(int(T), int(head_dim), float(base), jax.default_backend())


@functools.lru_cache(maxsize=64)
def _rope_constants(T: int, head_dim: int, base: float, backend: str) -> tuple[np.ndarray, np.ndarray]:
    # One compiled program with the positions as an iota, as in a model's program (an op-by-op or
    # positions-as-argument computation rounds a few values differently); a compiled executable
    # runs even while a caller is being traced.
    del backend  # a key only: jit compiles for the default backend
    cos, sin = jax.jit(lambda: rope_tables(jnp.arange(T), head_dim, base)).lower().compile()()
    return np.asarray(cos), np.asarray(sin)


def apply_rope(x: Float[Array, "B T H hd"], cos: Array, sin: Array) -> Float[Array, "B T H hd"]:
    """Rotate interleaved channel pairs (2j, 2j+1) by θ (spec §2.4); fp32 math, input dtype out.
    ``cos``/``sin`` are [T, hd/2]."""
    B, T, H, hd = x.shape
    xp = x.astype(jnp.float32).reshape(B, T, H, hd // 2, 2)
    x0, x1 = xp[..., 0], xp[..., 1]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    out = jnp.stack([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)
    return out.reshape(B, T, H, hd).astype(x.dtype)


def dense(x: Float[Array, "... n"], w: Float[Array, "n m"]) -> Float[Array, "... m"]:
    """``x @ w`` computed on a 2-D view of ``x``: XLA:CPU runs the backward pass of a batched
    ``[B, T, n] @ [n, m]`` about 3× slower than the same product on ``[B·T, n]``."""
    lead = x.shape[:-1]
    return (x.reshape(-1, x.shape[-1]) @ w).reshape(*lead, w.shape[-1])


def _attend(q, k, v, keep, all_masked):
    """Scaled dot-product attention. q [B,Tq,H,hd]; k, v [B,Tk,H,hd]; keep bool [B,Tq,Tk];
    all_masked bool [B,Tq]. Softmax in fp32; rows with no key kept get zero output (spec §2.3)."""
    hd = q.shape[-1]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) * (hd ** -0.5)
    # A finite fill keeps fully-masked rows (no real key at or before the query) free of NaN in
    # both passes; their weights are then zeroed, so their output is exactly 0 (spec §2.3).
    masked = jnp.where(keep[:, None, :, :], scores, MASK_FILL)
    w = jax.nn.softmax(masked, axis=-1)
    w = (w * (~all_masked)[:, None, :, None]).astype(v.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", w, v)


def _attend_cached(
    q: Float[Array, "B H hd"], k: Float[Array, "B H Tc hd"], v: Float[Array, "B H Tc hd"], valid: Bool[Array, " Tc"]
) -> Float[Array, "B H hd"]:
    """Attention of one query per row over a KV cache in its stored [B, H, Tc, hd] layout (no
    transposes): keys where ``valid`` is false are masked. Same arithmetic as :func:`_attend`
    (scores in the compute dtype, scaled and softmaxed in fp32, weights cast to ``v.dtype``;
    spec §2.3). Decode never has a fully-masked row (slot ``pos`` is always valid)."""
    hd = q.shape[-1]
    scores = jnp.einsum("bhd,bhtd->bht", q, k).astype(jnp.float32) * (hd ** -0.5)
    w = jax.nn.softmax(jnp.where(valid[None, None, :], scores, MASK_FILL), axis=-1).astype(v.dtype)
    return jnp.einsum("bht,bhtd->bhd", w, v)


REMAT_MODES: tuple[str, ...] = ("none", "attention", "full")
"""Per-layer rematerialisation policies of the training forward (cheapest memory last):

* ``none`` — no rematerialisation; every intermediate the backward needs is kept.
* ``attention`` — each layer under ``jax.checkpoint`` keeping only its matmul outputs
  (:data:`SAVED_IN_ATTENTION_MODE`); the attention core, norms, RoPE and SiLU are recomputed.
* ``full`` — each layer under ``jax.checkpoint`` saving nothing: only the layer inputs
  ``[L, B, T, d]`` are kept and a whole layer is recomputed in the backward pass.

No mode changes the numbers computed (XLA may fuse differently, float-rounding level)."""


def remat_mode(remat: bool | str) -> str:
    """Normalise a ``remat`` argument: ``False``/``"none"`` → ``"none"``, ``True``/``"full"`` →
    ``"full"``, ``"attention"`` → ``"attention"``.

    Raises:
        ValueError: any other value (the message lists :data:`REMAT_MODES`).
    """
    if remat is True:
        return "full"
    if remat is False or remat is None:
        return "none"
    if remat not in REMAT_MODES:
        raise ValueError(f"unknown remat mode {remat!r}; choose from {', '.join(REMAT_MODES)}")
    return remat


SAVED_IN_ATTENTION_MODE: tuple[str, ...] = ("attn_q", "attn_k", "attn_v", "attn_ctx", "attn_lse")
"""Per-layer values kept by remat mode ``attention``: what the attention backward needs
(post-RoPE q, k; v; the attention output and its fp32 log-sum-exp [B, H, T]), 4·d + H values per
token. The attention forward is never rerun; norms and the SwiGLU FFN (the 8·d-per-token gate and
up activations) are recomputed in the backward pass."""


def _remat_policy(mode: str):
    if mode == "attention":
        return jax.checkpoint_policies.save_only_these_names(*SAVED_IN_ATTENTION_MODE)
    return jax.checkpoint_policies.nothing_saveable


ATTENTION_BLOCK = 128
"""Query block of :func:`causal_attention`: block ``i`` scores only keys ``[0, end_i)``, so the
largest transient is ``[B, H, ATTENTION_BLOCK, T]`` and the masked upper triangle beyond the
block diagonal is never computed."""


def _query_blocks(T: int, block: int) -> list[tuple[int, int]]:
    return [(s, min(s + block, T)) for s in range(0, T, block)]


def _block_scores(q_blk, k_pre, mask_pre, start: int, scale: float):
    """Masked fp32 scores [B, H, t, e] of queries ``start … start+t−1`` against keys ``0 … e−1``."""
    t, e = q_blk.shape[1], k_pre.shape[1]
    sc = jnp.einsum("bqhd,bkhd->bhqk", q_blk, k_pre, preferred_element_type=jnp.float32) * jnp.float32(scale)
    causal = jnp.arange(e)[None, :] <= (start + jnp.arange(t))[:, None]
    keep = causal[None, None] & mask_pre[:, None, None, :]
    # A finite fill keeps rows with no key kept free of NaN in both passes (spec §2.3).
    return jnp.where(keep, sc, MASK_FILL)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def causal_attention(q, k, v, attn_mask, block: int = ATTENTION_BLOCK):
    """Causal scaled dot-product attention with a key-padding mask (spec §2.3), blockwise over
    queries, keeping no ``[T, T]`` tensor for the backward pass.

    Args:
        q, k, v: [B, T, H, hd] in the compute dtype.
        attn_mask: bool [B, T], true at real keys.
        block: query block length (static).

    Returns:
        [B, T, H, hd] in ``v.dtype``. Scores are accumulated in fp32 and softmaxed in fp32; the
        weights are cast to the compute dtype for the ``AV`` product. A row with no key kept
        (all scores at the finite fill) gets uniform weights: the caller zeroes its output.

    The backward pass (custom VJP) saves only q, k, v, the output and the fp32 log-sum-exp
    [B, H, T] and recomputes each block's weights, as flash attention does (Dao et al. 2022,
    §3.1, with whole key prefixes instead of an online softmax).
    """
    return _causal_attention_fwd(q, k, v, attn_mask, block)[0]


def _causal_attention_fwd(q, k, v, attn_mask, block=ATTENTION_BLOCK):
    scale = q.shape[-1] ** -0.5
    outs, lses = [], []
    for s, e in _query_blocks(q.shape[1], block):
        sc = _block_scores(q[:, s:e], k[:, :e], attn_mask[:, :e], s, scale)
        m = sc.max(axis=-1, keepdims=True)
        p = jnp.exp(sc - m)
        den = p.sum(axis=-1, keepdims=True)
        outs.append(jnp.einsum("bhqk,bkhd->bqhd", (p / den).astype(v.dtype), v[:, :e]))
        lses.append((m + jnp.log(den))[..., 0])
    o = jnp.concatenate(outs, axis=1) if len(outs) > 1 else outs[0]
    lse = jnp.concatenate(lses, axis=2) if len(lses) > 1 else lses[0]
    # Named for the remat policy: saving both means a checkpointed layer never reruns this.
    o, lse = checkpoint_name(o, "attn_ctx"), checkpoint_name(lse, "attn_lse")
    return o, (q, k, v, attn_mask, o, lse)


def _causal_attention_bwd(block, res, do):
    q, k, v, attn_mask, o, lse = res
    f32 = jnp.float32
    scale = q.shape[-1] ** -0.5
    delta = jnp.einsum("bqhd,bqhd->bhq", do.astype(f32), o.astype(f32))  # rowsum(dO ∘ O)
    dq_blocks = []
    dk = jnp.zeros(k.shape, f32)
    dv = jnp.zeros(v.shape, f32)
    for s, e in _query_blocks(q.shape[1], block):
        sc = _block_scores(q[:, s:e], k[:, :e], attn_mask[:, :e], s, scale)
        p = jnp.exp(sc - lse[:, :, s:e, None])
        do_b = do[:, s:e]
        dv = dv.at[:, :e].add(jnp.einsum("bhqk,bqhd->bkhd", p.astype(do.dtype), do_b, preferred_element_type=f32))
        dp = jnp.einsum("bqhd,bkhd->bhqk", do_b, v[:, :e], preferred_element_type=f32)
        ds = (p * (dp - delta[:, :, s:e, None]) * f32(scale)).astype(q.dtype)
        dq_blocks.append(jnp.einsum("bhqk,bkhd->bqhd", ds, k[:, :e], preferred_element_type=f32))
        dk = dk.at[:, :e].add(jnp.einsum("bhqk,bqhd->bkhd", ds, q[:, s:e], preferred_element_type=f32))
    dq = jnp.concatenate(dq_blocks, axis=1) if len(dq_blocks) > 1 else dq_blocks[0]
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None


causal_attention.defvjp(_causal_attention_fwd, _causal_attention_bwd)


def plain_attention(q, k, v, attn_mask):
    """Causal scaled dot-product attention with a key-padding mask (spec §2.3) in one piece: the
    full masked fp32 score matrix [B, H, T, T], one softmax, and XLA's own VJP (which keeps the
    fp32 weights [B, H, T, T] for the backward pass).

    The same function as :func:`causal_attention` (same fp32 scores, same finite fill, same
    softmax, weights cast to ``v.dtype`` for ``AV``; a row with no key kept gets uniform weights
    and the caller zeroes it), so the two agree to float rounding in value and gradient. Used for
    short sequences without remat (:func:`attention_path`), where the ``[T, T]`` weights are small
    and XLA may fuse the softmax and its VJP with the neighbouring ops; on CPU at T ≤ 128 it
    measured as fast as the blockwise path (a single block there), so the short-T speed-up of that
    path comes from the unrolled layers.

    Args:
        q, k, v: [B, T, H, hd] in the compute dtype.
        attn_mask: bool [B, T], true at real keys.

    Returns:
        [B, T, H, hd] in ``v.dtype``.
    """
    sc = _block_scores(q, k, attn_mask, 0, q.shape[-1] ** -0.5)
    w = jax.nn.softmax(sc, axis=-1).astype(v.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", w, v)


PLAIN_ATTENTION_MAX_T = ATTENTION_BLOCK
"""Longest sequence for which the training forward without remat uses :func:`plain_attention`
(see :func:`attention_path`); 0 always takes the blockwise attention. The layer loop does not
depend on it (unrolled whenever remat is none)."""


def attention_path(seq_len: int, remat: bool | str) -> str:
    """Which attention a forward of ``seq_len`` tokens with ``remat`` runs:

    * ``"plain"`` — remat ``none`` and ``seq_len ≤`` :data:`PLAIN_ATTENTION_MAX_T`:
      :func:`plain_attention`. At ``T ≤ 128`` the blockwise path scores one block of the full
      ``[T, T]`` matrix anyway; the plain path keeps its fp32 weights for the backward instead of
      recomputing them (L·B·H·T² · 4 bytes more, e.g. 3 MiB per layer at B 16, H 3, T 128).
    * ``"blockwise"`` — otherwise: :func:`causal_attention` (no ``[T, T]`` tensor kept).

    The layer loop is unrolled (``lax.scan(..., unroll=True)``) whenever remat is ``none``, on
    either path, so XLA fuses and schedules across layers: the TINY joint step at T 256 and 512
    (blockwise) ran 1.24–1.28× faster unrolled, with 406 instead of 548 MiB of temp memory at
    T 512 (``benchmarks/joint_step.py``, issue 27). With remat it stays rolled: unrolling would let
    XLA hoist every recomputation to the start of the backward pass, so nothing would be freed.

    Both compute the same function (float rounding). ``pawn pretrain --remat auto`` tries
    ``none`` first, so short sequences get the plain path when it fits.

    Raises:
        ValueError: an unknown ``remat`` mode.
    """
    return "plain" if remat_mode(remat) == "none" and seq_len <= PLAIN_ATTENTION_MAX_T else "blockwise"


FUSED_ATTENTION = True
"""Use cuDNN's fused attention where :func:`_attend_full` allows it (set False to force the
XLA attention, e.g. when cuDNN fails to compile a shape)."""

ATTENTION_IMPL: dict[str, str] = {}
"""The attention implementation chosen at the last trace of the full forward, by compute dtype
(``"cudnn"`` or ``"xla"``); reported by ``pawn bench`` and ``benchmarks/accel_check.sh``."""


def _attend_full(q, k, v, attn_mask, all_masked, prefix_mask: bool, path: str = "blockwise"):
    """Attention of the full forward: q, k, v [B, T, H, hd]; returns [B, T, H, hd].

    On an NVIDIA GPU with a bf16/fp16 compute dtype and a prefix ``attn_mask`` (true exactly on
    positions ``< sum(attn_mask[b])``, which is what packed games are), this is
    ``jax.nn.dot_product_attention(..., is_causal=True, key_value_seq_lengths=...,
    implementation="cudnn")``: cuDNN's fused flash attention, which keeps no ``[T, T]`` tensor for
    the backward. Elsewhere (CPU, fp32, or when cuDNN refuses the shapes at trace time) it is
    :func:`plain_attention` for ``path == "plain"`` and the blockwise :func:`causal_attention`
    otherwise (:func:`attention_path`). Rows with no real key at or before the query
    (``all_masked`` bool [B, T]) output exactly 0 in every path (spec §2.3)."""
    out = None
    if FUSED_ATTENTION and prefix_mask and jax.default_backend() == "gpu" and q.dtype in (jnp.bfloat16, jnp.float16):
        # A game of length 0 has no real key at all; give the kernel one (slot 0) so its rows stay
        # finite in both passes; their output is zeroed below.
        kv_len = jnp.maximum(attn_mask.sum(axis=1, dtype=jnp.int32), 1)
        try:
            out = jax.nn.dot_product_attention(q, k, v, is_causal=True, key_value_seq_lengths=kv_len, implementation="cudnn")
            ATTENTION_IMPL[jnp.dtype(q.dtype).name] = "cudnn"
        except (NotImplementedError, ValueError, RuntimeError, TypeError):
            # jax raises these at trace time when cuDNN cannot take the shapes, dtype or GPU
            # generation; the XLA attention below computes the same function.
            out = None
    if out is None:
        out = plain_attention(q, k, v, attn_mask) if path == "plain" else causal_attention(q, k, v, attn_mask)
        ATTENTION_IMPL[jnp.dtype(q.dtype).name] = "xla"
    return jnp.where(all_masked[:, :, None, None], jnp.zeros((), out.dtype), out)


class KVCache(eqx.Module):
    """Keys (post-RoPE) and values of every layer (spec §2.10, laid out for in-place decoding):
    ``k``, ``v`` are tuples of L arrays [B, H, T_cache, hd] in the compute dtype, one buffer per
    layer, so a decode step writes slot ``pos`` of each with ``lax.dynamic_update_slice`` and
    attends over it where it lies — no per-step transpose, re-stacking or slicing copy (a stacked
    [L, …] array would be sliced, i.e. copied, per layer). ``T_cache`` is ``max_seq_len`` by
    default or the generation length (:meth:`PAWNModel.prefill`'s ``cache_len``); donated to the
    jitted step, the buffers are updated in place."""

    k: tuple[Array, ...]
    v: tuple[Array, ...]

    @property
    def length(self) -> int:
        """``T_cache``, the number of slots."""
        return int(self.k[0].shape[2])

    def stacked(self) -> tuple[Float[Array, "L B H Tc hd"], Float[Array, "L B H Tc hd"]]:
        """K and V stacked to the spec's [L, B, H, T_cache, hd] (a copy; for inspection)."""
        return jnp.stack(self.k), jnp.stack(self.v)


class LayerAdapter(eqx.Module):
    """What an adapter may change inside the forward pass (spec ``training-and-adapters.md`` §4):
    the entry point :meth:`PAWNModel.__call__`, :meth:`~PAWNModel.prefill` and
    :meth:`~PAWNModel.decode` take as ``adapter=``. Every hook defaults to the identity; the
    strategies of :mod:`pawn.adapters` override the ones they need.

    Per-layer adapter parameters are returned by :meth:`scan_params` stacked on a leading ``L``
    axis (all L layers; a layer subset is scattered in, zero-filled elsewhere) and are scanned
    together with the backbone's layer weights, so the rolled layer scan is not copied. The
    hooks receive one layer's slice ``ap`` of that pytree.
    """

    def scan_params(self, dtype) -> Optional[dict]:
        """Per-layer parameters, a pytree of arrays with leading axis L, or None."""
        return None

    def layer_weights(self, lw: dict, ap) -> dict:
        """Effective weights of one layer (``lw``: name -> array in the compute dtype, norms fp32)."""
        return lw

    def project(self, name: str, x: Array, y: Array, ap) -> Array:
        """Output of projection ``name`` (``wq``, ``wk``, ``wv``, ``wo``, ``w_gate``, ``w_up``,
        ``w_down``) given its input ``x`` [..., d_in] and the backbone's ``y = x @ W`` [..., d_out]."""
        return y

    def after_attn(self, h: Array, ap) -> Array:
        """Residual stream [B, T, d] right after the attention residual add."""
        return h

    def after_ffn(self, h: Array, ap) -> Array:
        """Residual stream [B, T, d] right after the FFN residual add (end of the block)."""
        return h

    def logits(self, z: Float[Array, "... V"]) -> Float[Array, "... V"]:
        """Float32 logits after ``lm_head``."""
        return z


class PAWNModel(eqx.Module):
    """The PAWN transformer. Parameters are the 16 canonical arrays of spec §5.2 (fp32), linear
    weights in ``[in, out]`` orientation, per-layer arrays stacked on a leading L axis.

    Call ``model(tokens, attn_mask)`` for logits; see :meth:`__call__`, :meth:`prefill` and
    :meth:`decode`.
    """

    src_embed: Float[Array, "64 d"]
    dst_embed: Float[Array, "64 d"]
    promo_embed: Float[Array, "5 d"]
    pad_embed: Float[Array, " d"]
    outcome_embed: Float[Array, "O d"]
    attn_norm: Float[Array, "L d"]
    wq: Float[Array, "L d d"]
    wk: Float[Array, "L d d"]
    wv: Float[Array, "L d d"]
    wo: Float[Array, "L d d"]
    ffn_norm: Float[Array, "L d"]
    w_gate: Float[Array, "L d F"]
    w_up: Float[Array, "L d F"]
    w_down: Float[Array, "L F d"]
    final_norm: Float[Array, " d"]
    lm_head: Float[Array, "d V"]
    config: ModelConfig = eqx.field(static=True)

    def __init__(self, config: ModelConfig, key: Optional[jax.Array] = None, *, params: Optional[dict] = None):
        """Build a model from a config, either freshly initialised from ``key`` (spec §2.7:
        matrices N(0, 0.02), one key per array by ``fold_in(key, i)`` in declaration order; norm
        scales ones; ``pad_embed`` zeros) or from ``params`` (a dict of the 16 canonical arrays).

        Raises:
            ValueError: neither or both of ``key``/``params``; a missing, extra or mis-shaped
                parameter (the message names it and both shapes).
        """
        if (key is None) == (params is None):
            raise ValueError("give exactly one of key (fresh init) or params (existing weights)")
        shapes = param_shapes(config)
        if params is None:
            params = {}
            for i, spec in enumerate(PARAMS):
                shape = shapes[spec.name]
                if spec.init == "ones":
                    params[spec.name] = jnp.ones(shape, jnp.float32)
                elif spec.init == "zeros":
                    params[spec.name] = jnp.zeros(shape, jnp.float32)
                else:
                    params[spec.name] = INIT_STD * jax.random.normal(jax.random.fold_in(key, i), shape, jnp.float32)
        else:
            missing = [n for n in PARAM_NAMES if n not in params]
            extra = sorted(set(params) - set(PARAM_NAMES))
            if missing or extra:
                raise ValueError(f"parameter set mismatch: missing {missing}, unexpected {extra}")
            for name in PARAM_NAMES:
                got = tuple(params[name].shape)
                if got != shapes[name]:
                    raise ValueError(f"parameter {name} has shape {got}, config {config.name} needs {shapes[name]}")
        self.config = config
        for name in PARAM_NAMES:
            setattr(self, name, jnp.asarray(params[name], jnp.float32))

    # ------------------------------------------------------------------ parameters
    def params(self) -> dict[str, Array]:
        """The 16 canonical arrays by name (spec §5.2)."""
        return {n: getattr(self, n) for n in PARAM_NAMES}

    def num_params(self) -> int:
        """Number of scalar parameters (equals :func:`pawn.config.param_count`)."""
        return int(sum(np.prod(getattr(self, n).shape) for n in PARAM_NAMES))

    # ------------------------------------------------------------------ pieces
    def embed(self, tokens: Int[Array, "B T"]) -> Float[Array, "B T d"]:
        """Factored input embedding (spec §2.1), fp32 [B, T, d]: ids are clamped into the action
        range for the table lookup, then PAD rows become ``pad_embed`` and outcome ids
        ``outcome_embed[clamp(x − 1969, 0, O−1)]``."""
        decomp = jnp.asarray(_decomposition())
        a = decomp[jnp.clip(tokens, 0, NUM_ACTIONS - 1)]
        e = self.src_embed[a[..., 0]] + self.dst_embed[a[..., 1]] + self.promo_embed[a[..., 2]]
        e = jnp.where((tokens == PAD_TOKEN)[..., None], self.pad_embed, e)
        out_idx = jnp.clip(tokens - OUTCOME_TOKEN_BASE, 0, self.config.n_outcomes - 1)
        return jnp.where((tokens >= OUTCOME_TOKEN_BASE)[..., None], self.outcome_embed[out_idx], e)

    def _layer_weights(self, dtype) -> dict[str, Array]:
        w = {n: getattr(self, n) for n in ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")}
        w = {n: a.astype(dtype) for n, a in w.items()}
        w["attn_norm"], w["ffn_norm"] = self.attn_norm, self.ffn_norm  # norms stay fp32
        return w

    @staticmethod
    def _proj(x, lw, name, ad):
        y = dense(x, lw[name])
        if ad is not None:
            adapter, ap = ad
            y = adapter.project(name, x, y, ap)
        return y

    def _qkv(self, x, lw, cos, sin, ad=None):
        B, T, d = x.shape
        H, hd = self.config.n_heads, self.config.head_dim
        q = self._proj(x, lw, "wq", ad).reshape(B, T, H, hd)
        k = self._proj(x, lw, "wk", ad).reshape(B, T, H, hd)
        v = self._proj(x, lw, "wv", ad).reshape(B, T, H, hd)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def _ffn(self, h, lw, ad=None):
        x = rms_norm(h, lw["ffn_norm"])
        g = jax.nn.silu(self._proj(x, lw, "w_gate", ad)) * self._proj(x, lw, "w_up", ad)
        return self._proj(g, lw, "w_down", ad)

    def _head(self, h: Array) -> Float[Array, "... V"]:
        x = rms_norm(h, self.final_norm)
        return dense(x, self.lm_head.astype(h.dtype)).astype(jnp.float32)

    def _run(self, tokens, attn_mask, dtype, *, return_hidden: bool, return_kv: bool, remat, prefix_mask: bool = False,
             adapter: Optional[LayerAdapter] = None):
        B, T = tokens.shape
        cfg = self.config
        if T > cfg.max_seq_len:
            raise ValueError(f"sequence length {T} exceeds max_seq_len {cfg.max_seq_len}")
        mode = remat_mode(remat)
        path = attention_path(T, mode)
        if attn_mask is None:
            attn_mask = tokens != PAD_TOKEN
        attn_mask = attn_mask.astype(bool)
        cos, sin = rope_constants(T, cfg.head_dim, cfg.rope_base)
        all_masked = jnp.cumsum(attn_mask.astype(jnp.int32), axis=1) == 0
        h0 = self.embed(tokens).astype(dtype)

        ap_all = None if adapter is None else adapter.scan_params(dtype)

        def layer(h, xs):
            lw, ap = xs if adapter is not None else (xs, None)
            ad = None if adapter is None else (adapter, ap)
            if ad is not None:
                lw = adapter.layer_weights(lw, ap)
            x = rms_norm(h, lw["attn_norm"])
            q, k, v = self._qkv(x, lw, cos, sin, ad)
            q, k, v = checkpoint_name(q, "attn_q"), checkpoint_name(k, "attn_k"), checkpoint_name(v, "attn_v")
            ctx = _attend_full(q, k, v, attn_mask, all_masked, prefix_mask, path).reshape(B, T, cfg.d_model)
            h = h + self._proj(ctx, lw, "wo", ad)
            if ad is not None:
                h = adapter.after_attn(h, ap)
            h = h + self._ffn(h, lw, ad)
            if ad is not None:
                h = adapter.after_ffn(h, ap)
            ys = (h if return_hidden else None, (k, v) if return_kv else None)
            return h, ys

        if mode != "none":
            layer = jax.checkpoint(layer, policy=_remat_policy(mode), prevent_cse=False)
        # Unrolled without remat (XLA fuses and schedules across layers: faster and less temp
        # memory on either attention path), rolled with it (see attention_path); the weights
        # stay stacked either way.
        xs = self._layer_weights(dtype) if adapter is None else (self._layer_weights(dtype), ap_all)
        h, (hidden, kv) = jax.lax.scan(layer, h0, xs, unroll=mode == "none")
        return h0, h, hidden, kv

    @staticmethod
    def _adapted_logits(z, adapter):
        return z if adapter is None else adapter.logits(z)

    # ------------------------------------------------------------------ public calls
    def __call__(
        self,
        tokens: Int[Array, "B T"],
        attn_mask: Optional[Bool[Array, "B T"]] = None,
        *,
        dtype: Optional[str] = None,
        return_hidden: bool = False,
        remat: bool | str = False,
        prefix_mask: bool = False,
        adapter: Optional[LayerAdapter] = None,
    ):
        """Full forward pass.

        Args:
            tokens: int32 [B, T] token ids, T ≤ ``max_seq_len``.
            attn_mask: bool [B, T], true at real (non-PAD) positions; padding masks keys only.
                Defaults to ``tokens != PAD``.
            dtype: compute dtype (``"float32"``, ``"bfloat16"``); ``None`` = fp32 on CPU, bf16 on
                accelerators. Parameters stay fp32; norms, softmax and logits are fp32.
            return_hidden: also return the residual stream in the compute dtype,
                [L+1, B, T, d]: index 0 = embedding output, ℓ+1 = after layer ℓ (pre-final-norm).
            remat: per-layer rematerialisation in the backward pass (memory only), one of
                :data:`REMAT_MODES`; ``False`` = ``"none"``, ``True`` = ``"full"``.
            prefix_mask: the caller guarantees ``attn_mask[b]`` is true exactly on positions
                ``< sum(attn_mask[b])`` (packed games); lets an NVIDIA GPU use cuDNN's fused
                attention (see :func:`_attend_full`). Wrong for other masks.
            adapter: a :class:`LayerAdapter` acting inside the layer scan and on the logits
                (:mod:`pawn.adapters`); None = the bare backbone (the same computation as before
                adapters existed).

        Returns:
            logits float32 [B, T, V], or ``(logits, hidden)`` with ``return_hidden``.

        Raises:
            ValueError: T > ``max_seq_len``; an unknown ``remat`` mode.
        """
        dt = resolve_dtype(dtype)
        h0, h, hidden, _ = self._run(tokens, attn_mask, dt, return_hidden=return_hidden, return_kv=False, remat=remat,
                                     prefix_mask=prefix_mask, adapter=adapter)
        logits = self._adapted_logits(self._head(h), adapter)
        if return_hidden:
            return logits, jnp.concatenate([h0[None], hidden], axis=0)
        return logits

    def prefill(
        self,
        tokens: Int[Array, "B T"],
        attn_mask: Optional[Bool[Array, "B T"]] = None,
        *,
        dtype: Optional[str] = None,
        cache_len: Optional[int] = None,
        adapter: Optional[LayerAdapter] = None,
    ) -> tuple[Float[Array, "B T V"], KVCache]:
        """Forward pass that also returns a :class:`KVCache` (spec §2.10).

        Args:
            tokens, attn_mask, dtype, adapter: as for :meth:`__call__`.
            cache_len: ``T_cache``, slots in the cache (T ≤ cache_len ≤ ``max_seq_len``); default
                ``max_seq_len``. Give the generation length (prompt + tokens to generate) so each
                decode step attends over only that many slots.

        Returns:
            ``(logits float32 [B, T, V], cache)``: logits equal :meth:`__call__`'s; the cache's
            per-layer K/V [B, H, cache_len, hd] hold slots [0, T) (every slot, masked ones
            included) and zeros after. For decoding, every prefix slot must be a real token and
            all rows must share the prefix length.

        Raises:
            ValueError: T > ``max_seq_len``, or ``cache_len`` outside T..``max_seq_len``.
        """
        dt = resolve_dtype(dtype)
        T = tokens.shape[1]
        Tc = self.config.max_seq_len if cache_len is None else int(cache_len)
        if not T <= Tc <= self.config.max_seq_len:
            raise ValueError(f"cache_len {Tc} must lie between the prompt length {T} and max_seq_len {self.config.max_seq_len}")
        _, h, _, (k, v) = self._run(tokens, attn_mask, dt, return_hidden=False, return_kv=True, remat=False, adapter=adapter)
        # scan stacks [L, B, T, H, hd]; the cache holds one [B, H, T_cache, hd] buffer per layer
        # (one transpose here, none per decode step).
        pad = ((0, 0), (0, 0), (0, Tc - T), (0, 0))
        k = tuple(jnp.pad(x.transpose(0, 2, 1, 3), pad) for x in k)
        v = tuple(jnp.pad(x.transpose(0, 2, 1, 3), pad) for x in v)
        return self._adapted_logits(self._head(h), adapter), KVCache(k=k, v=v)

    def decode(
        self, token: Int[Array, " B"], pos: Int[Array, ""], cache: KVCache, adapter: Optional[LayerAdapter] = None
    ) -> tuple[Float[Array, "B V"], KVCache]:
        """One incremental step (spec §2.10): embed ``token`` at position ``pos``, write its K/V
        into slot ``pos`` of every layer with ``lax.dynamic_update_slice`` (in place when the
        caller's jit donates ``cache``), attend to slots ≤ pos. No padding mask.

        Args:
            token: int32 [B], the token at ``pos``.
            pos: int32 scalar, may be traced (one compilation serves every position); must lie in
                [1, T_cache) and slots [0, pos) must be filled (an out-of-range ``pos`` is clamped
                by XLA, not detected).
            cache: :class:`KVCache` (L × [B, H, T_cache, hd]); its dtype is the compute dtype.
            adapter: as for :meth:`__call__` (the one given to :meth:`prefill`).

        Returns:
            ``(logits float32 [B, V], cache)``: logits equal the full forward's at ``pos``
            within 1e-5 in fp32; the cache with slot ``pos`` written.
        """
        cfg = self.config
        dt = cache.k[0].dtype
        B, H, Tc, hd = cache.k[0].shape
        pos = jnp.asarray(pos, jnp.int32)
        cos, sin = rope_tables(pos[None], hd, cfg.rope_base)  # [1, hd/2], equal to row pos of the table
        valid = jnp.arange(Tc) <= pos
        lw = self._layer_weights(dt)
        ap_all = None if adapter is None else adapter.scan_params(dt)
        zero = jnp.zeros((), jnp.int32)
        ks, vs = list(cache.k), list(cache.v)
        h = self.embed(token[:, None]).astype(dt)  # [B, 1, d]
        # Layers unrolled in Python (L is small and static); each writes slot pos of its own
        # buffer in place and attends over it as stored.
        for layer in range(len(ks)):
            w = {n: a[layer] for n, a in lw.items()}
            ad = None
            if adapter is not None:
                ap = jax.tree_util.tree_map(lambda a, i=layer: a[i], ap_all)
                ad = (adapter, ap)
                w = adapter.layer_weights(w, ap)
            x = rms_norm(h, w["attn_norm"])
            q, k, v = self._qkv(x, w, cos, sin, ad)  # [B, 1, H, hd]; with T = 1 this is [B, H, 1, hd] as is
            ks[layer] = jax.lax.dynamic_update_slice(ks[layer], k.reshape(B, H, 1, hd), (zero, zero, pos, zero))
            vs[layer] = jax.lax.dynamic_update_slice(vs[layer], v.reshape(B, H, 1, hd), (zero, zero, pos, zero))
            ctx = _attend_cached(q.reshape(B, H, hd), ks[layer], vs[layer], valid)
            h = h + self._proj(ctx.reshape(B, 1, cfg.d_model), w, "wo", ad)
            if ad is not None:
                h = adapter.after_attn(h, ad[1])
            h = h + self._ffn(h, w, ad)
            if ad is not None:
                h = adapter.after_ffn(h, ad[1])
        return self._adapted_logits(self._head(h), adapter)[:, 0], KVCache(k=tuple(ks), v=tuple(vs))


def sliced(model: PAWNModel, variant: ModelConfig) -> PAWNModel:
    """The nested ``variant`` of a supernet: prefix slices of every array (spec §3.5). Runs the
    first ``variant.n_layers`` layers at width ``variant.d_model`` with the shared final norm and
    ``lm_head`` rows ``[:d]``. Slicing with the model's own config is the identity.

    Raises:
        ValueError: ``variant`` does not nest in ``model.config`` (see
            :func:`pawn.config.validate_nested`).
    """
    validate_nested(variant, model.config)
    p = model.params()
    out = {spec.name: p[spec.name][spec.nested_slice(variant)] for spec in PARAMS}
    return PAWNModel(variant, params=out)
