"""The nine linear probes on the embedding output and every layer (spec
``eval-probe-generate-sweep-bench.md`` §2).

Board state at ply t (before move t) is paired with the hidden state at the position holding
move t (pure moves: position t; outcome prefix: t + 1). One linear map per probe type with
weight ``[L+1, d, n_out]`` ~ N(0, 1)/√d and zero bias, all layers trained jointly (the loss is a
sum of per-layer means, so layers are independent) with optax AdamW (lr 1e-3, v2 defaults:
weight decay 1e-4). Training streams: each epoch shuffles the training games, forwards
``game_batch`` games at a time (all layers in one pass), shuffles the valid positions and takes
steps on mini-batches of ``inner_batch`` positions. A full validation pass after every epoch
updates ``best_accuracy``; a final pass gives ``accuracy``/``loss`` (and ``mae``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from pawn.data.packing import pack_games
from pawn.engine import probe_targets, random_games

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

REGRESSION = tuple(k for k, (_, kind) in PROBES.items() if kind == "mse")
R2_EPS = 1e-8


@dataclass
class ProbeConfig:
    """Probe-run settings (spec §2.4 v2 defaults).

    Attributes:
        n_train_games, n_val_games: corpus sizes (4,096 / 1,024).
        max_ply: random-game ply cap (default: min(context, 256)).
        seed: training-corpus seed (12345); validation uses seed + 1; probe init key seed + 7.
        n_epochs, lr, weight_decay: 20, 1e-3, 1e-4 (optax defaults; v1 used 0.01).
        game_batch, inner_batch: games per forward (64), positions per step (256).
        prepend_outcome: outcome-prefixed layout. probes: subset of :data:`PROBES` (all).
        dtype: compute dtype of the backbone forward.
    """

    n_train_games: int = 4096
    n_val_games: int = 1024
    max_ply: Optional[int] = None
    seed: int = 12345
    n_epochs: int = 20
    lr: float = 1e-3
    weight_decay: float = 1e-4
    game_batch: int = 64
    inner_batch: int = 256
    prepend_outcome: bool = False
    probes: tuple[str, ...] = tuple(PROBES)
    dtype: Optional[str] = None


# --------------------------------------------------------------------------- math
def _per_layer_loss(kind: str, logits, y, w):
    """Weighted mean loss per layer. logits [L+1, n, k]; y targets [n, ...]; w [n] weights."""
    n = logits.shape[1]
    if kind == "ce_sq":
        lg = logits.reshape(logits.shape[0], n, 64, 13)
        l = optax.softmax_cross_entropy_with_integer_labels(lg, y[None].astype(jnp.int32)).mean(-1)
    elif kind == "ce":
        l = optax.softmax_cross_entropy_with_integer_labels(logits, y[None].astype(jnp.int32))
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
        pred = logits.reshape(logits.shape[0], n, 64, 13).argmax(-1)
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


def _gather(hidden, idx):
    """hidden [L+1, B, T, d] → [L+1, n, d] at flat positions ``idx`` int [n] (b·T + t)."""
    Lp, B, T, d = hidden.shape
    return hidden.reshape(Lp, B * T, d)[:, idx].astype(jnp.float32)


@eqx.filter_jit
def _hidden(model, ids, attn, dtype):
    return model(ids, attn, dtype=dtype, return_hidden=True)[1]


def _apply(params, h):
    return {k: jnp.einsum("lnd,ldk->lnk", h, p["w"]) + p["b"][:, None, :] for k, p in params.items()}


@eqx.filter_jit
def _train_step(params, opt_state, optimizer, hidden, idx, w, ys):
    h = _gather(hidden, idx)

    def loss_fn(p):
        out = _apply(p, h)
        return sum(_per_layer_loss(PROBES[k][1], out[k], ys[k], w).sum() for k in p)

    grads = jax.grad(loss_fn)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


@eqx.filter_jit
def _val_step(params, hidden, idx, w, ys, means):
    out = _apply(params, _gather(hidden, idx))
    return {k: _metric_sums(PROBES[k][1], out[k], ys[k], w, means.get(k, 0.0)) for k in params}


# --------------------------------------------------------------------------- data
class _Corpus:
    """Games, packed sequences and flattened probe targets of one split."""

    def __init__(self, n_games: int, max_ply: int, seed: int, prepend_outcome: bool, probes: tuple[str, ...]):
        g = random_games(n_games, max_ply, seed)
        self.offset = int(prepend_outcome)
        self.seq_len = max_ply + self.offset
        self.packed = pack_games(g.tokens, g.lengths, g.outcome, self.seq_len, prepend_outcome=prepend_outcome)
        tg = probe_targets(g.tokens, g.lengths)
        self.valid = tg["valid"]  # [N, max_ply]
        self.targets = {k: tg[k] for k in probes}
        self.n_positions = int(self.valid.sum())

    def batch(self, games: np.ndarray):
        """(ids, attn, flat position index [n] into [len(games), T], targets [n, ...])."""
        v = self.valid[games]
        b, t = np.nonzero(v)
        flat = b * self.seq_len + t + self.offset
        ys = {k: a[games][b, t] for k, a in self.targets.items()}
        return self.packed["input_ids"][games], self.packed["attn_mask"][games], flat, ys


def _pad_games(games: np.ndarray, size: int) -> np.ndarray:
    """Pad a game-index batch to ``size`` by repeating index 0 (their positions are never used)."""
    return games if games.size == size else np.concatenate([games, np.zeros(size - games.size, games.dtype)])


def _chunks(flat, ys, size, rng=None):
    """Mini-batches of exactly ``size`` positions (weights 0 on padding)."""
    order = rng.permutation(flat.size) if rng is not None else np.arange(flat.size)
    for s in range(0, flat.size, size):
        sel = order[s:s + size]
        w = np.zeros(size, np.float32)
        w[: sel.size] = 1.0
        pad = size - sel.size
        idx = np.concatenate([flat[sel], np.zeros(pad, flat.dtype)])
        yb = {k: np.concatenate([a[sel], np.zeros((pad,) + a.shape[1:], a.dtype)]) for k, a in ys.items()}
        yield jnp.asarray(idx), jnp.asarray(w), {k: jnp.asarray(a) for k, a in yb.items()}


# --------------------------------------------------------------------------- run
def run_probes(model: Callable, config: ProbeConfig = ProbeConfig(), progress: Optional[Callable[[str], None]] = None) -> dict[str, Any]:
    """Train and evaluate the linear probes of spec §2 on ``model``.

    Args:
        model: a :class:`pawn.model.PAWNModel` (``return_hidden=True`` gives [L+1, B, T, d]).
        config: :class:`ProbeConfig`.
        progress: optional callback receiving one line per epoch.

    Returns:
        dict with ``settings`` and ``probes`` {probe: {``embed``/``layer_<i>``: {accuracy,
        loss, best_accuracy, n_train, n_val[, mae]}}} and ``best`` {probe: {layer,
        best_accuracy[, mae]}} (the layer with the highest ``best_accuracy``). For regression
        probes ``accuracy`` is R² (pooled over outputs, SS_tot around the val-set means) and
        ``mae`` = Σ|err| over outputs / positions (v1).

    Raises:
        ValueError: an unknown probe name.
    """
    unknown = sorted(set(config.probes) - set(PROBES))
    if unknown:
        raise ValueError(f"unknown probes {unknown}; choose from {list(PROBES)}")
    mc = model.config
    max_ply = config.max_ply or min(mc.max_seq_len - int(config.prepend_outcome), 256)
    train = _Corpus(config.n_train_games, max_ply, config.seed, config.prepend_outcome, config.probes)
    val = _Corpus(config.n_val_games, max_ply, config.seed + 1, config.prepend_outcome, config.probes)
    Lp, d = mc.n_layers + 1, mc.d_model
    keys = jax.random.split(jax.random.PRNGKey(config.seed + 7), len(config.probes))
    params = {k: {"w": jax.random.normal(kk, (Lp, d, PROBES[k][0])) / np.sqrt(d), "b": jnp.zeros((Lp, PROBES[k][0]))}
              for k, kk in zip(config.probes, keys)}
    optimizer = optax.adamw(config.lr, weight_decay=config.weight_decay)
    opt_state = optimizer.init(params)
    means = {}
    for k in config.probes:
        if PROBES[k][1] == "mse":
            a = val.targets[k][val.valid].astype(np.float64)
            means[k] = jnp.asarray(a.reshape(a.shape[0], -1).mean(0) if a.size else np.zeros(1), jnp.float32)
    rng = np.random.default_rng(config.seed)

    def val_pass():
        acc = {k: [np.zeros(Lp) for _ in range(4)] for k in config.probes}
        for s in range(0, config.n_val_games, config.game_batch):
            games = np.arange(s, min(s + config.game_batch, config.n_val_games))
            ids, attn, flat, ys = val.batch(_pad_games(games, config.game_batch))
            keep = flat < games.size * val.seq_len
            flat, ys = flat[keep], {k: a[keep] for k, a in ys.items()}
            hidden = _hidden(model, jnp.asarray(ids), jnp.asarray(attn), config.dtype)
            for idx, w, yb in _chunks(flat, ys, config.inner_batch):
                out = _val_step(params, hidden, idx, w, yb, means)
                for k, sums in out.items():
                    for i in range(4):
                        acc[k][i] += np.asarray(sums[i], np.float64)
        n = max(val.n_positions, 1)
        res = {}
        for k, (loss, good, abs_err, ss_tot) in acc.items():
            if PROBES[k][1] == "mse":
                res[k] = {"loss": loss / n, "accuracy": 1.0 - good / (ss_tot + R2_EPS), "mae": abs_err / n}
            else:
                res[k] = {"loss": loss / n, "accuracy": good / n}
        return res

    best = {k: np.full(Lp, -np.inf) for k in config.probes}
    for epoch in range(config.n_epochs):
        order = rng.permutation(config.n_train_games)
        for s in range(0, order.size, config.game_batch):
            games = order[s:s + config.game_batch]
            n_real = games.size
            ids, attn, flat, ys = train.batch(_pad_games(games, config.game_batch))
            keep = flat < n_real * train.seq_len
            flat, ys = flat[keep], {k: a[keep] for k, a in ys.items()}
            hidden = _hidden(model, jnp.asarray(ids), jnp.asarray(attn), config.dtype)
            for idx, w, yb in _chunks(flat, ys, config.inner_batch, rng):
                params, opt_state = _train_step(params, opt_state, optimizer, hidden, idx, w, yb)
        ev = val_pass()
        for k in config.probes:
            best[k] = np.maximum(best[k], ev[k]["accuracy"])
        if progress is not None:
            progress(f"epoch {epoch + 1}/{config.n_epochs}: " + ", ".join(f"{k} {ev[k]['accuracy'].max():.3f}" for k in config.probes))
    final = val_pass()
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
    settings = {"n_games": config.n_train_games, "n_val_games": config.n_val_games, "max_ply": max_ply, "seed": config.seed,
                "n_epochs": config.n_epochs, "lr": config.lr, "weight_decay": config.weight_decay, "game_batch": config.game_batch,
                "inner_batch": config.inner_batch, "prepend_outcome": config.prepend_outcome, "dtype": config.dtype}
    return {"settings": settings, "probes": probes_out, "best": best_out}


def plot_probes(result: dict[str, Any], path: str, title: str = "") -> None:
    """Accuracy (R² for regression probes) by layer, one line per probe, saved to ``path``.

    Raises:
        ImportError: matplotlib is not installed (``pip install 'pawn[plot]'``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("--plot needs matplotlib: pip install 'pawn[plot]' (or pip install matplotlib)") from e
    fig, ax = plt.subplots(figsize=(8, 5))
    for k, recs in result["probes"].items():
        layers = list(recs)
        ax.plot(range(len(layers)), [recs[n]["best_accuracy"] for n in layers], marker="o",
                label=k + (" (R²)" if k in REGRESSION else ""))
        ax.set_xticks(range(len(layers)), layers, rotation=45)
    ax.set_xlabel("layer")
    ax.set_ylabel("best accuracy / R²")
    ax.set_title(title or "linear probes")
    ax.legend(fontsize=8)
    fig.tight_layout()
    from pawn.fileio import atomic_output

    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
