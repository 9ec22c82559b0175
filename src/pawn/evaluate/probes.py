"""The nine linear probes on the embedding output and every layer (spec
``eval-probe-generate-sweep-bench.md`` §2).

Board state at ply t (before move t) is paired with the hidden state at the position holding
move t (pure moves: position t; outcome prefix: t + 1). One linear map per probe type with
weight ``[L+1, d, n_out]`` ~ N(0, 1)/√d and zero bias, all layers trained jointly (the loss is a
sum of per-layer means, so layers are independent) with optax AdamW (lr 1e-3, v2 defaults:
weight decay 1e-4; the published v1 table used 0.01). Each epoch shuffles the training games,
takes them ``game_batch`` at a time, shuffles that group's valid positions and takes steps on
mini-batches of ``inner_batch`` positions. A full validation pass after every epoch updates
``best_accuracy``; a final pass gives ``accuracy``/``loss`` (and ``mae``).

Speed (v2 departure from the spec's streaming description, same numbers): the backbone is
frozen, so its hidden states at the probed positions are computed once per corpus (all layers
in one forward pass, ``game_batch`` games at a time) and cached ``[L+1, n_positions, d]`` in the
backbone's output dtype (float32 on CPU; a bfloat16 forward's states are kept in bfloat16, as
computed, and upcast for the probes), written in place into one preallocated buffer. The training
steps and validation chunks run as ``lax.scan`` segments over the cached features; each step is
one fused head for all probes (one ``[n, d] × [d, Σ n_out]`` matmul per layer forward, closed-form
logit gradients, one ``hᵀ·G`` matmul back, one AdamW). The mini-batch sequence (random stream,
grouping, padding) is the streaming one, so the results do not depend on whether a corpus was
cached. A corpus whose features exceed ``feature_cache_gb`` is streamed instead (its forward
pass repeated every epoch). The probe matmuls are the floor: Σ n_out = 918 outputs, so a step
costs 4 · 256 · (L+1) · d · 918 FLOPs (0.9 GFLOP for the TINY supernet's large variant).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from pawn.data.layout import Layout
from pawn.engine import probe_targets, random_games
from pawn.evaluate.settings import ProbeSettings

# name: (n_out, kind) — kind ∈ ce (one class), ce_sq (13 classes × 64 squares), bce, mse
PROBES: dict[str, tuple[int, str]] = {
    "piece_type": (13 * 64, "ce_sq"),
    "side_to_move": (1, "bce"),
    "is_check": (1, "bce"),
    "castling_rights": (4, "bce"),
    "ep_square": (65, "ce"),
    "material_count": (10, "mse"),
    "legal_move_count": (1, "mse"),
    "halfmove_clock": (1, "mse"),
    "game_phase": (3, "ce"),
}
"""The nine probes of spec §2.1 (``is_square_attacked`` is intentionally omitted)."""

from pawn.metrics import PROBE_LABELS  # noqa: E402  (the names' one home for JAX-free readers)

if set(PROBE_LABELS) != set(PROBES):
    raise RuntimeError("pawn.evaluate.probes: PROBES and pawn.metrics.PROBE_LABELS name different probes")

REGRESSION = tuple(k for k, (_, kind) in PROBES.items() if kind == "mse")
R2_EPS = 1e-8


_DEFAULTS = ProbeSettings.model_fields  # the defaults live once, in the command settings


@dataclass
class ProbeConfig:
    """Probe-run settings (spec §2.4 v2 defaults).

    Attributes:
        n_train_games: training games (4,096).
        n_val_games: validation games; None = ``n_train_games // 4`` (at least 1), so 1,024
            for the default 4,096 (the spec's 4:1 split).
        max_ply: random-game ply cap (default: min(context, 256)).
        seed: training-corpus seed (12345); validation uses seed + 1; probe init key seed + 7.
        n_epochs, lr: 20, 1e-3.
        weight_decay: AdamW weight decay. 1e-4 = the v2 default (optax); 0.01 = v1 (torch
            AdamW default), the setting of the published v1.0.0 probe table (spec §2.2, §2.5).
        game_batch, inner_batch: games per forward (64), positions per step (256).
        prepend_outcome: outcome-prefixed layout. probes: subset of :data:`PROBES` (all).
        dtype: compute dtype of the backbone forward.
        feature_cache_gb: at most this many GiB of cached hidden states (float32, or bfloat16 for a
            bfloat16 forward) (validation set
            first, then training set); a corpus that does not fit is streamed (recomputed every
            epoch). None = half the accelerator's memory, or 30 % of the host's available
            memory on CPU. Numbers are the same either way.
    """

    n_train_games: int = _DEFAULTS["games"].default
    n_val_games: Optional[int] = None
    max_ply: Optional[int] = None
    seed: int = _DEFAULTS["seed"].default
    n_epochs: int = _DEFAULTS["epochs"].default
    lr: float = _DEFAULTS["lr"].default
    weight_decay: float = _DEFAULTS["weight_decay"].default
    game_batch: int = 64
    inner_batch: int = 256
    prepend_outcome: bool = False
    probes: tuple[str, ...] = tuple(PROBES)
    dtype: Optional[str] = None
    feature_cache_gb: Optional[float] = None

    @property
    def val_games(self) -> int:
        """Validation games: ``n_val_games``, else ``max(1, n_train_games // 4)``."""
        return self.n_val_games if self.n_val_games is not None else max(1, self.n_train_games // 4)


# --------------------------------------------------------------------------- math
def _per_layer_loss(kind: str, logits, y, w):
    """Weighted mean loss per layer. logits [L+1, n, k]; y targets [n, ...]; w [n] weights."""
    n = logits.shape[1]
    if kind == "ce_sq":  # class-major columns (see _Head): [L+1, n, 13 classes, 64 squares]
        lg = logits.reshape(logits.shape[0], n, 13, 64)
        picked = (lg * jax.nn.one_hot(y, 13, axis=-2, dtype=lg.dtype)[None]).sum(-2)
        l = (jax.nn.logsumexp(lg, axis=-2) - picked).mean(-1)
    elif kind == "ce":  # one-hot pick: its gradient is dense, no scatter (slow on CPU)
        picked = (logits * jax.nn.one_hot(y, logits.shape[-1], dtype=logits.dtype)[None]).sum(-1)
        l = jax.nn.logsumexp(logits, axis=-1) - picked
    elif kind == "bce":
        l = optax.sigmoid_binary_cross_entropy(logits, jnp.broadcast_to(y.reshape(n, -1)[None], logits.shape)).mean(-1)
    else:
        l = ((logits - y.reshape(n, -1)[None]) ** 2).mean(-1)
    return (l * w[None]).sum(-1) / jnp.maximum(w.sum(), 1.0)


def _metric_sums(kind: str, logits, y, w, mean):
    """Per-layer sums for validation: (loss·n, correct-or-SS_res, abs_err, SS_tot)."""
    n = logits.shape[1]
    loss = _per_layer_loss(kind, logits, y, w) * w.sum()
    zero = jnp.zeros(logits.shape[0])
    if kind == "ce_sq":
        pred = logits.reshape(logits.shape[0], n, 13, 64).argmax(-2)
        good = ((pred == y[None]).mean(-1) * w[None]).sum(-1)
        return loss, good, zero, zero
    if kind == "ce":
        return loss, ((logits.argmax(-1) == y[None]) * w[None]).sum(-1), zero, zero
    yy = y.reshape(n, -1).astype(jnp.float32)
    if kind == "bce":
        good = (((logits > 0) == (yy[None] > 0.5)).mean(-1) * w[None]).sum(-1)
        return loss, good, zero, zero
    err = logits - yy[None]
    ss_res = ((err ** 2).sum(-1) * w[None]).sum(-1)
    abs_err = (jnp.abs(err).sum(-1) * w[None]).sum(-1)
    ss_tot = (((yy - mean) ** 2).sum(-1) * w).sum() + zero
    return loss, ss_res, abs_err, ss_tot


class _Head:
    """Column layout of the fused probe head: every active probe's outputs side by side, in
    ``probes`` order, so one matmul per layer computes all probes (``[n, d] × [d, Σ n_out]``).

    The probes share the features of a step, so their weights live in one array ``w``
    [L+1, d, Σ n_out] (``b`` [L+1, Σ n_out]) trained by one AdamW. AdamW is elementwise and every
    probe steps on every mini-batch, so this is the same optimisation as one optimizer per probe
    type (spec §2.2), up to float32 summation order. ``piece_type``'s 832 columns are stored
    class-major (column ``c · 64 + square``) rather than the spec's square-major reading
    (``square · 13 + c``): the same per-square logits, permuted so the 13-way softmax runs along
    the 64 contiguous squares (faster on CPU); :meth:`fuse` permutes the initial weights
    accordingly. Static (hashable) for ``jit``."""

    def __init__(self, probes: tuple[str, ...]):
        self.probes = tuple(probes)
        offs = np.concatenate([[0], np.cumsum([PROBES[k][0] for k in self.probes])]).astype(int)
        self.slices = {k: (int(offs[i]), int(offs[i + 1])) for i, k in enumerate(self.probes)}
        self.n_out = int(offs[-1])

    def __hash__(self):
        return hash(self.probes)

    def __eq__(self, other):
        return isinstance(other, _Head) and other.probes == self.probes

    def split(self, logits) -> dict:
        """Fused logits [..., Σ n_out] → {probe: [..., n_out]}."""
        return {k: logits[..., a:b] for k, (a, b) in self.slices.items()}

    def fuse(self, params: dict[str, dict]) -> dict:
        """Per-probe params {probe: {w [L+1, d, n_out], b [L+1, n_out]}} (``piece_type``
        square-major, as :func:`init_probe_params` makes them) → fused {w, b} (numpy work, one
        transfer: no per-shape compiles)."""

        def cols(k, a):
            a = np.asarray(a, np.float32)
            if PROBES[k][1] != "ce_sq":
                return a
            return np.swapaxes(a.reshape(*a.shape[:-1], 64, 13), -1, -2).reshape(a.shape)

        return {"w": jnp.asarray(np.concatenate([cols(k, params[k]["w"]) for k in self.probes], -1)),
                "b": jnp.asarray(np.concatenate([cols(k, params[k]["b"]) for k in self.probes], -1))}


def _apply(fused, h):
    """Fused logits float32 [L+1, n, Σ n_out] of features h [L+1, n, d] (one batched matmul per
    step; bfloat16 features are upcast, so the probe math is float32 whatever the cache holds)."""
    return jnp.einsum("lnd,ldk->lnk", h.astype(jnp.float32), fused["w"]) + fused["b"][:, None, :]


def _logit_grad(kind: str, logits, y, w):
    """d(per-layer weighted mean loss)/d logits, float32 [L+1, n, k]: the closed forms of the
    losses of :func:`_per_layer_loss` (softmax − one-hot for CE, σ − y for BCE, 2·(z − y) for MSE),
    each divided by the outputs averaged over and scaled by ``w / Σw``."""
    n, k = logits.shape[1], logits.shape[2]
    scale = (w / jnp.maximum(w.sum(), 1.0))[None, :, None]
    if kind == "ce_sq":  # class-major [L+1, n, 13, 64], mean over the 64 squares
        lg = logits.reshape(logits.shape[0], n, 13, 64)
        g = (jax.nn.softmax(lg, axis=-2) - jax.nn.one_hot(y, 13, axis=-2, dtype=lg.dtype)[None]) / 64.0
        return g.reshape(logits.shape) * scale
    if kind == "ce":
        return (jax.nn.softmax(logits, axis=-1) - jax.nn.one_hot(y, k, dtype=logits.dtype)[None]) * scale
    yy = y.reshape(n, -1).astype(logits.dtype)[None]
    if kind == "bce":
        return (jax.nn.sigmoid(logits) - yy) * (scale / k)
    return (logits - yy) * (scale * (2.0 / k))


def _fused_grad(head: _Head, fused, h, ys, w):
    """Gradient of Σ over probes and layers of the per-layer weighted mean losses w.r.t. the fused
    {w, b}: one logit-gradient array [L+1, n, Σ n_out] and one matmul ``hᵀ·G`` per layer (the same
    values as autodiff of :func:`_per_layer_loss`, without per-probe slices and pads)."""
    out = head.split(_apply(fused, h))
    g = jnp.concatenate([_logit_grad(PROBES[k][1], out[k], ys[k], w) for k in head.probes], -1)
    return {"w": jnp.einsum("lnd,lnk->ldk", h.astype(jnp.float32), g), "b": g.sum(1)}


@eqx.filter_jit
def _train_segment(head, params, opt_state, optimizer, feats, targets, idx, w, active):
    """AdamW steps over one segment. params fused {w, b}; feats [L+1, n, d]; targets {probe:
    [n, ...]}; idx, w [S, inner] (rows into feats, weights 0 on padding); active bool [S] (False =
    no step)."""

    def step(carry, xs):
        i, wi, on = xs

        def run(c):
            p, o = c
            grads = _fused_grad(head, p, feats[:, i], {k: a[i] for k, a in targets.items()}, wi)
            updates, o = optimizer.update(grads, o, p)
            return optax.apply_updates(p, updates), o

        return jax.lax.cond(on, run, lambda c: c, carry), None

    (params, opt_state), _ = jax.lax.scan(step, (params, opt_state), (idx, w, active))
    return params, opt_state


@eqx.filter_jit
def _val_segment(head, params, feats, targets, idx, w, means):
    """Per-chunk validation sums over one segment: {probe: 4 × [S, L+1]} (see :func:`_metric_sums`)."""

    def chunk(_, xs):
        i, wi = xs
        out = head.split(_apply(params, feats[:, i]))
        return None, {k: _metric_sums(PROBES[k][1], out[k], targets[k][i], wi, means.get(k, 0.0)) for k in head.probes}

    return jax.lax.scan(chunk, None, (idx, w))[1]


@eqx.filter_jit
def _hidden(model, ids, attn, dtype):
    return model(ids, attn, dtype=dtype, return_hidden=True)[1]


@eqx.filter_jit
def _block_features(model, ids, attn, flat, dtype):
    """Hidden states of every layer at flat positions: ids [B, T] → [L+1, len(flat), d] in the
    backbone's output dtype (float32, or bfloat16 for a bfloat16 forward: stored as computed, so
    caching loses nothing; the probes upcast to float32)."""
    hidden = _hidden(model, ids, attn, dtype)
    Lp, B, T, d = hidden.shape
    return hidden.reshape(Lp, B * T, d)[:, flat]


@partial(jax.jit, donate_argnums=0)
def _put_block(cache, block, r0):
    """Write ``block`` [L+1, rows, d] into rows ``r0 …`` of ``cache`` [L+1, N, d] in place (the
    cache buffer is donated, so building the cache never holds two copies of it)."""
    return jax.lax.dynamic_update_slice(cache, block.astype(cache.dtype), (0, r0, 0))


# --------------------------------------------------------------------------- data
def _auto_cache_bytes() -> int:
    """Default feature-cache budget: half the accelerator's memory, or 30 % of the host's
    available memory on CPU."""
    dev = jax.devices()[0]
    if dev.platform != "cpu":
        try:
            return int(0.5 * dev.memory_stats()["bytes_limit"])
        except Exception:  # noqa: BLE001 - backends without memory stats
            return 4 << 30
    try:
        import os

        return int(0.3 * os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 4 << 30


def _feature_dtype(model, seq_len: int, dtype):
    """Dtype of the backbone's hidden states for a forward in ``dtype`` (shape-only trace)."""
    ids = jax.ShapeDtypeStruct((1, seq_len), jnp.int32)
    attn = jax.ShapeDtypeStruct((1, seq_len), jnp.bool_)
    return jax.eval_shape(lambda i, a: _hidden(model, i, a, dtype), ids, attn).dtype


class _Features:
    """Hidden states [L+1, n_positions (+ one spare block), d] of one corpus, in the backbone's
    output dtype, at its probed positions (row
    order: game-major, ply ascending — the order of ``corpus.rows``), computed ``game_batch``
    games per forward pass; or, when not cached, the same rows computed per game group on demand."""

    def __init__(self, model, corpus: "_Corpus", game_batch: int, dtype, cache: bool, progress=None):
        self.model, self.corpus, self.game_batch, self.dtype = model, corpus, game_batch, dtype
        self.block_rows = game_batch * corpus.max_ply
        self.cached = cache
        self.feats = self.targets = None
        if cache:
            Lp, d = model.config.n_layers + 1, model.config.d_model
            n_groups = -(-corpus.n_games // game_batch)
            # One spare block of rows so every group writes a full, fixed-shape block (one compile).
            self.feats = jnp.zeros((Lp, corpus.n_positions + self.block_rows, d), _feature_dtype(model, corpus.seq_len, dtype))
            for gi, s in enumerate(range(0, corpus.n_games, game_batch)):
                games = np.arange(s, min(s + game_batch, corpus.n_games))
                block, _ = self._compute(games)
                self.feats = _put_block(self.feats, block, jnp.int32(corpus.starts[games[0]]))
                if progress is not None:
                    self.feats.block_until_ready()
                    progress((gi + 1) / n_groups)
            self.targets = {k: jnp.asarray(a) for k, a in corpus.rows.items()}

    def _inputs(self, games: np.ndarray):
        """(ids, attn, flat padded to ``block_rows``, n valid) of ``games``' positions, in order."""
        c = self.corpus
        ids, attn, flat = c.batch(_pad_games(games, self.game_batch))
        flat = flat[flat < games.size * c.seq_len]
        n = flat.size
        flat = np.concatenate([flat, np.zeros(self.block_rows - n, flat.dtype)])
        return jnp.asarray(ids), jnp.asarray(attn), jnp.asarray(flat), n

    def _compute(self, games: np.ndarray):
        """(features [L+1, block_rows, d] of ``games``' positions in order, padded; count n)."""
        ids, attn, flat, n = self._inputs(games)
        return _block_features(self.model, ids, attn, flat, self.dtype), n

    def block(self, games: np.ndarray):
        """Streaming: (features, targets) of ``games`` with rows 0…n−1 in order (padded)."""
        f, n = self._compute(games)
        rows = self.corpus.rows_of(games)
        pad = self.block_rows - n
        ys = {k: jnp.asarray(np.concatenate([a[rows], np.zeros((pad,) + a.shape[1:], a.dtype)]))
              for k, a in self.corpus.rows.items()}
        return f, ys


class _Corpus:
    """Games, packed sequences and probe targets of one split; ``rows`` holds the targets of
    every valid (game, ply) flattened game-major, ply ascending (``starts``/``counts`` per game)."""

    def __init__(self, n_games: int, max_ply: int, seed: int, prepend_outcome: bool, probes: tuple[str, ...]):
        g = random_games(n_games, max_ply, seed)
        self.n_games, self.max_ply = n_games, max_ply
        self.layout = Layout.of(prepend_outcome)
        self.offset = self.layout.offset
        self.seq_len = self.layout.seq_len(max_ply)
        self.packed = self.layout.pack(g.tokens, g.lengths, g.outcome, self.seq_len)
        tg = probe_targets(g.tokens, g.lengths)
        self.valid = tg["valid"]  # [N, max_ply]
        self.targets = {k: tg[k] for k in probes}
        self.counts = self.valid.sum(1).astype(np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)
        self.rows = {k: a[self.valid] for k, a in self.targets.items()}
        self.n_positions = int(self.counts.sum())

    def batch(self, games: np.ndarray):
        """(ids, attn, flat position index [n] into [len(games), T]) of the valid plies of ``games``."""
        b, t = np.nonzero(self.valid[games])
        flat = b * self.seq_len + self.layout.position_of_ply(t)
        return self.packed["input_ids"][games], self.packed["attn_mask"][games], flat

    def rows_of(self, games: np.ndarray) -> np.ndarray:
        """Row indices (into ``rows``) of the valid plies of ``games``, in the order of :meth:`batch`."""
        cnt = self.counts[games]
        first = np.repeat(self.starts[games] - np.concatenate([[0], np.cumsum(cnt)[:-1]]), cnt)
        return first + np.arange(cnt.sum())


def _pad_games(games: np.ndarray, size: int) -> np.ndarray:
    """Pad a game-index batch to ``size`` by repeating index 0 (their positions are never used)."""
    return games if games.size == size else np.concatenate([games, np.zeros(size - games.size, games.dtype)])


def _chunk(rows: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Mini-batches of exactly ``size`` rows: (idx [s, size], w [s, size]), weight 0 on padding."""
    n_chunks = -(-rows.size // size)
    idx = np.zeros(n_chunks * size, np.int32)
    idx[: rows.size] = rows
    w = np.zeros(n_chunks * size, np.float32)
    w[: rows.size] = 1.0
    return idx.reshape(n_chunks, size), w.reshape(n_chunks, size)


def _segments(idx: np.ndarray, w: np.ndarray, seg: int):
    """Split [s, size] step arrays into segments of ``seg`` steps (the last padded with inactive
    steps): yields (idx, w, active) of shapes [seg, size], [seg, size], [seg]."""
    for s in range(0, len(idx), seg):
        i, ww = idx[s:s + seg], w[s:s + seg]
        pad = seg - len(i)
        on = np.concatenate([np.ones(len(i), bool), np.zeros(pad, bool)])
        if pad:
            i = np.concatenate([i, np.zeros((pad, i.shape[1]), i.dtype)])
            ww = np.concatenate([ww, np.zeros((pad, ww.shape[1]), ww.dtype)])
        yield jnp.asarray(i), jnp.asarray(ww), jnp.asarray(on)


# --------------------------------------------------------------------------- run
def init_probe_params(probes: tuple[str, ...], n_layers_plus_one: int, d_model: int, seed: int) -> dict[str, dict]:
    """Initial probe weights (spec §2.2): per probe ``w`` float32 [L+1, d, n_out] ~ N(0, 1)/√d
    (``jax.random.normal(key, (L+1, d, n_out)) / √d`` with one key per probe, split from
    ``PRNGKey(seed)`` in ``probes`` order) and ``b`` zeros [L+1, n_out].

    Speed: with JAX's partitionable threefry (the default) an element's random bits depend only on
    its flat index, so every probe's draw is the leading slice of one draw of a power-of-two length
    (bit-identical to drawing each shape): one compile per length instead of one per probe shape
    (27 compiles for a TINY supernet's three variants, about 30 s on a loaded 2-core CPU), the
    rest in numpy.
    """
    keys = jax.random.split(jax.random.PRNGKey(seed), len(probes))
    inv = np.float32(1 / np.sqrt(d_model))  # XLA's form of ``/ √d`` (a reciprocal multiply)
    shapes = {k: (n_layers_plus_one, d_model, PROBES[k][0]) for k in probes}
    length = 1 << max(int(np.prod(sh)) for sh in shapes.values()).bit_length() if probes else 1
    out = {}
    for k, kk in zip(probes, keys):
        n = int(np.prod(shapes[k]))
        if jax.config.jax_threefry_partitionable:
            draw = np.asarray(jax.random.normal(kk, (length,)))[:n].reshape(shapes[k])
        else:  # bits depend on the shape: draw each one as is
            draw = np.asarray(jax.random.normal(kk, shapes[k]))
        out[k] = {"w": jnp.asarray(draw * inv), "b": jnp.zeros((n_layers_plus_one, PROBES[k][0]), jnp.float32)}
    return out


def run_probes(model: Callable, config: ProbeConfig = ProbeConfig(),
               progress: Optional[Callable[[float, float, str], None]] = None) -> dict[str, Any]:
    """Train and evaluate the linear probes of spec §2 on ``model``.

    Args:
        model: a :class:`pawn.model.PAWNModel` (``return_hidden=True`` gives [L+1, B, T, d]).
        config: :class:`ProbeConfig`.
        progress: optional callback ``(done, total, message)``; ``total`` = epochs + 1 (the first
            unit is the feature pass), called after every segment of work.

    Returns:
        dict with ``settings`` and ``probes`` {probe: {``embed``/``layer_<i>``: {accuracy,
        loss, best_accuracy, n_train, n_val[, mae]}}} and ``best`` {probe: {layer,
        best_accuracy[, mae]}} (the layer with the highest ``best_accuracy``). For regression
        probes ``accuracy`` is R² (pooled over outputs, SS_tot around the val-set means) and
        ``mae`` = Σ|err| over outputs / positions (v1).

    Raises:
        ValueError: an unknown probe name, or a non-positive size.
    """
    unknown = sorted(set(config.probes) - set(PROBES))
    if unknown:
        raise ValueError(f"unknown probes {unknown}; choose from {list(PROBES)}")
    for name in ("n_train_games", "game_batch", "inner_batch"):
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be ≥ 1, got {getattr(config, name)}")
    if config.val_games < 1:
        raise ValueError(f"n_val_games must be ≥ 1, got {config.val_games}")
    mc = model.config
    max_ply = config.max_ply or min(Layout.of(config.prepend_outcome).max_ply(mc.max_seq_len), 256)
    n_val_games = config.val_games

    t_start = time.perf_counter()
    train = _Corpus(config.n_train_games, max_ply, config.seed, config.prepend_outcome, config.probes)
    val = _Corpus(n_val_games, max_ply, config.seed + 1, config.prepend_outcome, config.probes)
    Lp, d = mc.n_layers + 1, mc.d_model
    total = config.n_epochs + 1

    def report(done: float, msg: str) -> None:
        if progress is not None:
            progress(done, total, msg)

    # Feature caches: validation first (it is read every epoch), then training.
    budget = _auto_cache_bytes() if config.feature_cache_gb is None else int(config.feature_cache_gb * 2**30)
    per_row = Lp * d * jnp.dtype(_feature_dtype(model, train.seq_len, config.dtype)).itemsize
    spare = config.game_batch * max_ply  # each cache holds one spare block of rows
    val_rows, train_rows = val.n_positions + spare, train.n_positions + spare
    cache_val = val_rows * per_row <= budget
    cache_train = (train_rows + (val_rows if cache_val else 0)) * per_row <= budget
    share = val.n_positions * cache_val / max(val.n_positions * cache_val + train.n_positions * cache_train, 1)
    vf = _Features(model, val, config.game_batch, config.dtype, cache_val,
                   lambda f: report(f * share, "hidden states (validation)"))
    tf = _Features(model, train, config.game_batch, config.dtype, cache_train,
                   lambda f: report(share + f * (1 - share), "hidden states (training)"))
    report(1.0, "hidden states cached" if cache_val or cache_train else "streaming hidden states")
    t_feats = time.perf_counter()

    head = _Head(config.probes)
    params = head.fuse(init_probe_params(config.probes, Lp, d, config.seed + 7))
    optimizer = optax.adamw(config.lr, weight_decay=config.weight_decay)
    opt_state = optimizer.init(params)
    means = {}
    for k in config.probes:
        if PROBES[k][1] == "mse":
            a = val.targets[k][val.valid].astype(np.float64)
            means[k] = jnp.asarray(a.reshape(a.shape[0], -1).mean(0) if a.size else np.zeros(1), jnp.float32)
    rng = np.random.default_rng(config.seed)
    seg = max(1, -(-config.game_batch * max_ply // config.inner_batch))  # most steps a game group can need
    val_groups = [np.arange(s, min(s + config.game_batch, n_val_games)) for s in range(0, n_val_games, config.game_batch)]
    if cache_val:
        val_plan = _chunk(np.concatenate([val.rows_of(g) for g in val_groups]), config.inner_batch) if val_groups else None

    def val_pass():
        outs = []
        if cache_val:
            for i, w, _ in _segments(*val_plan, seg):
                outs.append(_val_segment(head, params, vf.feats, vf.targets, i, w, means))
        else:
            for games in val_groups:
                f, ys = vf.block(games)
                for i, w, _ in _segments(*_chunk(np.arange(val.counts[games].sum()), config.inner_batch), seg):
                    outs.append(_val_segment(head, params, f, ys, i, w, means))
        n = max(val.n_positions, 1)
        res = {}
        for k in config.probes:
            # Chunk sums accumulated in order in float64 (padding chunks add exact zeros).
            loss, good, abs_err, ss_tot = (np.cumsum(np.concatenate([np.asarray(o[k][j], np.float64) for o in outs]), 0)[-1]
                                           for j in range(4))
            if PROBES[k][1] == "mse":
                res[k] = {"loss": loss / n, "accuracy": 1.0 - good / (ss_tot + R2_EPS), "mae": abs_err / n}
            else:
                res[k] = {"loss": loss / n, "accuracy": good / n}
        return res

    best = {k: np.full(Lp, -np.inf) for k in config.probes}
    for epoch in range(config.n_epochs):
        order = rng.permutation(config.n_train_games)
        groups = [order[s:s + config.game_batch] for s in range(0, order.size, config.game_batch)]
        label = f"epoch {epoch + 1}/{config.n_epochs}"
        if cache_train:
            steps = []
            for games in groups:
                rows = train.rows_of(games)
                steps.append(_chunk(rows[rng.permutation(rows.size)], config.inner_batch))
            idx = np.concatenate([s[0] for s in steps])
            w = np.concatenate([s[1] for s in steps])
            n_seg = -(-len(idx) // seg)
            for si, (i, ww, on) in enumerate(_segments(idx, w, seg)):
                params, opt_state = _train_segment(head, params, opt_state, optimizer, tf.feats, tf.targets, i, ww, on)
                report(1 + epoch + 0.9 * (si + 1) / n_seg, label)
        else:
            for gi, games in enumerate(groups):
                f, ys = tf.block(games)
                local = np.arange(train.counts[games].sum())
                for i, ww, on in _segments(*_chunk(local[rng.permutation(local.size)], config.inner_batch), seg):
                    params, opt_state = _train_segment(head, params, opt_state, optimizer, f, ys, i, ww, on)
                report(1 + epoch + 0.9 * (gi + 1) / len(groups), label)
        ev = val_pass()
        for k in config.probes:
            best[k] = np.maximum(best[k], ev[k]["accuracy"])
        report(2 + epoch, f"{label}: " + ", ".join(f"{k} {ev[k]['accuracy'].max():.3f}" for k in config.probes))
    t_epochs = time.perf_counter()
    final = val_pass()
    t_end = time.perf_counter()
    layers = ["embed"] + [f"layer_{i}" for i in range(mc.n_layers)]
    probes_out: dict[str, Any] = {}
    best_out: dict[str, Any] = {}
    for k in config.probes:
        recs = {}
        for li, name in enumerate(layers):
            r = {"accuracy": float(final[k]["accuracy"][li]), "loss": float(final[k]["loss"][li]),
                 "best_accuracy": float(best[k][li]) if config.n_epochs else float(final[k]["accuracy"][li]),
                 "n_train": train.n_positions, "n_val": val.n_positions}
            if "mae" in final[k]:
                r["mae"] = float(final[k]["mae"][li])
            recs[name] = r
        probes_out[k] = recs
        top = max(layers, key=lambda n: recs[n]["best_accuracy"])
        best_out[k] = {"layer": top, "best_accuracy": recs[top]["best_accuracy"], **({"mae": recs[top]["mae"]} if "mae" in recs[top] else {})}
    settings = {"n_games": config.n_train_games, "n_val_games": n_val_games, "max_ply": max_ply, "seed": config.seed,
                "n_epochs": config.n_epochs, "lr": config.lr, "weight_decay": config.weight_decay, "game_batch": config.game_batch,
                "inner_batch": config.inner_batch, "prepend_outcome": config.prepend_outcome, "dtype": config.dtype,
                "features_cached": {"train": cache_train, "val": cache_val},
                # Wall seconds (first-call compiles included): corpus + hidden-state pass, the
                # epochs (training + per-epoch validation), the final validation pass.
                "timing_s": {"features": t_feats - t_start, "epochs": t_epochs - t_feats, "final_val": t_end - t_epochs}}
    return {"settings": settings, "probes": probes_out, "best": best_out}


def probe_figure(result: dict[str, Any], title: str = ""):
    """The figure of :func:`plot_probes`: an "accuracy" axis (0–1) for the classification probes
    and, when there are regression probes, an "R²" axis of its own. Returns the matplotlib figure.

    Raises:
        ImportError: matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("--plot needs matplotlib: pip install 'pawn[plot]' (or pip install matplotlib)") from e
    groups = [("accuracy", [k for k in result["probes"] if k not in REGRESSION]),
              ("R²", [k for k in result["probes"] if k in REGRESSION])]
    groups = [g for g in groups if g[1]]
    fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 5), squeeze=False)
    for ax, (label, names) in zip(axes[0], groups):
        for k in names:
            recs = result["probes"][k]
            layers = list(recs)
            ax.plot(range(len(layers)), [recs[n]["best_accuracy"] for n in layers], marker="o", label=k)
            ax.set_xticks(range(len(layers)), layers, rotation=45)
        ax.set_xlabel("layer")
        ax.set_ylabel(f"best {label}")
        if label == "accuracy":
            ax.set_ylim(0, 1)
        ax.legend(fontsize=8)
    fig.suptitle(title or "linear probes")
    fig.tight_layout()
    return fig


def plot_probes(result: dict[str, Any], path: str, title: str = "") -> None:
    """Best accuracy by layer of the classification probes and R² of the regression probes, on
    two separate axes (R² can be far below 0, which squashed the accuracies on a shared axis),
    one line per probe, saved to ``path``.

    Raises:
        ImportError: matplotlib is not installed (``pip install 'pawn[plot]'``).
    """
    fig = probe_figure(result, title)
    import matplotlib.pyplot as plt

    from pawn.fileio import atomic_output

    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
