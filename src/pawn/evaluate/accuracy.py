"""Teacher-forced accuracy of ``pawn eval`` (spec ``eval-probe-generate-sweep-bench.md``
§1.2–§1.5, §4.1, §5): the metric core lives in :mod:`pawn.metrics_core` (shared with the
trainer's validation) and is re-exported here; this module adds the Lichess accuracy by Elo band.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import numpy as np

from pawn.data.layout import Layout
from pawn.data.lichess import SKIPPED_SHOWN, SeenIds, lichess_ids, skipped_lines
from pawn.data.pgn_stream import codec_of, pgn_files_in, read_pgn_bytes
from pawn.engine import parse_pgn
from pawn.engine.pgn import check_pgn
from pawn.metrics_core import (PERPLEXITY_LOSS_CAP, PHASES, AccuracyReport, evaluate_games, grid_legal,
                               lower_median, ply_predictions)
from pawn.vocab import PLY_LIMIT

__all__ = [
    "PHASES", "PERPLEXITY_LOSS_CAP", "AccuracyReport", "evaluate_games", "grid_legal", "lower_median", "ply_predictions",
    "DEFAULT_ELO_EDGES", "MISSING_ELO", "LICHESS_PERPLEXITY_CAP", "elo_bands", "evaluate_pgn", "evaluate_held_out",
    "held_out_figures",
]


# --------------------------------------------------------------------------- Lichess (§4.1)
DEFAULT_ELO_EDGES: tuple[int, ...] = (600, 1000, 1400, 1800, 2200)
"""Elo band edges of the v1 Lichess eval: [600,1000), [1000,1400), [1400,1800), [1800,2200)."""
MISSING_ELO = 1500
"""Elo used for a player whose rating header is missing (v1)."""
LICHESS_PERPLEXITY_CAP = 1e6


def elo_bands(white_elo: np.ndarray, black_elo: np.ndarray, edges: tuple[int, ...]) -> np.ndarray:
    """Band index of each game by the **average** of both Elos (missing → 1500): band k is
    ``[edges[k], edges[k+1])``; −1 outside every band. int64 [N]."""
    w = np.where(np.asarray(white_elo) == 0, MISSING_ELO, white_elo).astype(np.float64)
    b = np.where(np.asarray(black_elo) == 0, MISSING_ELO, black_elo).astype(np.float64)
    avg = (w + b) / 2.0
    band = np.searchsorted(np.asarray(edges, np.float64), avg, side="right") - 1
    return np.where((band >= 0) & (band < len(edges) - 1), band, -1)


def evaluate_pgn(
    model: Callable,
    pgn: str,
    *,
    seq_len: int,
    elo_edges: tuple[int, ...] = DEFAULT_ELO_EDGES,
    max_games_per_band: int = 1000,
    min_ply: int = 10,
    prepend_outcome: bool = False,
    batch_size: int = 64,
    dtype: Optional[str] = None,
    known_ids: Optional[Mapping[str, np.ndarray]] = None,
    backbone: Optional[Callable] = None,
) -> dict[str, Any]:
    """Accuracy on human moves, stratified by Elo (spec §4.1, v1 definitions).

    Games are parsed by the engine (``max_ply = seq_len − offset``, shorter than ``min_ply``
    skipped; a game whose Lichess id (``Site`` tag) occurred earlier in ``pgn`` (the same game in
    two exports) is dropped, so every game counts once), bucketed by the average Elo of both
    players, and at most ``max_games_per_band``
    per band (file order) are scored. With the outcome prefix, every game gets a dummy
    PLY_LIMIT outcome (v1). Per band, over positions with a move target: ``loss`` (full-vocab
    CE), ``perplexity`` (exp, capped at 1e6), ``top1``/``top5`` (full vocabulary),
    ``legal_rate`` (argmax legal by the grid bit), ``top1_legal_masked`` (argmax over the legal
    moves, over the move decisions at sequence position ≥ 10: spec §1.6 without v1's end-of-game
    slot, a certain hit under the mask), all position-weighted, and the legal-masked figures over
    every move decision with the uniform-over-legal reference and the excess (:func:`held_out_figures`);
    with ``backbone`` (an adapter's backbone, called like ``model``), the same figures of the backbone
    alone on the band's games under ``backbone``.

    Returns:
        dict with ``file``, ``parser`` (counts: read, kept, one per skip reason), ``skipped``
        (the first :data:`pawn.data.lichess.SKIPPED_SHOWN` skipped games: {file, game (1-based),
        ply (from 0), reason}), ``n_skipped`` (all of them), ``n_out_of_band`` and ``bands`` {``elo_<lo>_<hi>``: {elo_range, n_games, n_positions,
        loss, perplexity, top1, top5, legal_rate, top1_legal_masked}} (bands without games are reported with
        ``n_games`` 0 and NaN metrics), ``n_duplicates`` (games dropped as repeats), ``n_evaluated``
        (games scored) and ``overlap``: with ``known_ids`` ({name: uint64 Lichess ids, e.g. an
        adapter's training games}), how many scored games are in each set, else None.

    Raises:
        FileNotFoundError: no such PGN file (``pgn`` may be a folder of ``.pgn`` files). ValueError: fewer than two Elo edges or unsorted.
    """
    edges = tuple(int(e) for e in elo_edges)
    if len(edges) < 2 or list(edges) != sorted(set(edges)):
        raise ValueError(f"elo edges must be at least two strictly increasing values, got {edges}")
    source: Any = pgn
    if Path(pgn).is_dir():  # a folder: its PGN files (.pgn, .pgn.zst, .gz, .bz2) in name order, as one stream
        files = pgn_files_in(pgn)
        if not files:
            raise FileNotFoundError(f"{pgn}: no .pgn file in this folder")
        source = b"\n\n".join(read_pgn_bytes(f) for f in files)
    elif codec_of(pgn) is not None:  # .pgn.zst, .pgn.gz, .pgn.bz2
        source = read_pgn_bytes(pgn)
    games = parse_pgn(source, max_ply=Layout.of(prepend_outcome).max_ply(seq_len), min_ply=min_ply)
    check_pgn(games, str(pgn))
    # a folder is one stream: its game numbers count through the files in name order
    label = str(pgn) if not Path(pgn).is_dir() else f"{pgn} (its .pgn files in name order)"
    skipped = [{"file": label, "game": int(g), "ply": int(p), "reason": str(r)} for g, p, r in games.skipped[:SKIPPED_SHOWN]]
    if len(games) == 0:
        counts = ", ".join(f"{k} {v}" for k, v in games.counts.items() if k not in ("read", "kept") and v)
        first = skipped_lines([(d["file"], d["game"], d["ply"], d["reason"]) for d in skipped[:1]], len(skipped[:1]))
        if not games.counts.get("read", 0):
            raise ValueError(f"{pgn}: no PGN game in it (empty, or not a PGN file)")
        raise ValueError(f"{pgn}: no usable game among {games.counts.get('read', 0)} read" + (f" (skipped: {counts})" if counts else "")
                         + (f"; first skipped: {first[0].removeprefix(label + ': ')}" if first else ""))
    ids = lichess_ids(games.header("site"))
    first = SeenIds().first_seen(ids)  # a repeated game id (two overlapping exports) counts once
    band = elo_bands(games.white_elo, games.black_elo, edges)
    out: dict[str, Any] = {
        "file": str(pgn), "parser": dict(games.counts), "skipped": skipped, "n_skipped": len(games.skipped),
        "n_duplicates": int((~first).sum()), "n_out_of_band": int(((band < 0) & first).sum()), "bands": {},
    }
    band = np.where(first, band, -1)
    scored: list[np.ndarray] = []
    for k in range(len(edges) - 1):
        lo, hi = edges[k], edges[k + 1]
        idx = np.nonzero(band == k)[0][:max_games_per_band]
        scored.append(idx)
        rec: dict[str, Any] = {"elo_range": [lo, hi], "n_games": int(idx.size)}
        if idx.size:
            r = evaluate_games(
                model, games.tokens[idx], games.lengths[idx], np.full(idx.size, PLY_LIMIT, np.int16),
                seq_len=seq_len, batch_size=batch_size, prepend_outcome=prepend_outcome, dtype=dtype,
            )
            rec.update(
                n_positions=r.n_move_positions, loss=r.moves_only_loss,
                perplexity=min(math.exp(min(r.moves_only_loss, 700.0)), LICHESS_PERPLEXITY_CAP),
                top1=r.moves_only_top1_full_vocab, top5=r.moves_only_top5_full_vocab, legal_rate=r.moves_only_legal_rate,
                top1_legal_masked=r.legal_masked_top1, **held_out_figures(r),
            )
            if backbone is not None:
                rb = evaluate_games(backbone, games.tokens[idx], games.lengths[idx], np.full(idx.size, PLY_LIMIT, np.int16),
                                    seq_len=seq_len, batch_size=batch_size, prepend_outcome=prepend_outcome, dtype=dtype)
                rec["backbone"] = held_out_figures(rb)
        else:
            rec.update(n_positions=0, loss=float("nan"), perplexity=float("nan"), top1=float("nan"),
                       top5=float("nan"), legal_rate=float("nan"), top1_legal_masked=float("nan"),
                       **dict.fromkeys(("top1_legal_masked_all_moves", "loss_legal_masked_all_moves", "uniform_loss_all_moves",
                                        "uniform_top1_all_moves", "excess_nats_all_moves", "excess_nats_lo", "excess_nats_hi"), float("nan")))
        out["bands"][f"elo_{lo}_{hi}"] = rec
    idx = np.concatenate(scored)
    out["n_evaluated"] = int(idx.size)
    out["overlap"] = None
    if known_ids is not None:
        got = ids[idx]
        got = got[got != 0]
        out["overlap"] = {name: int(np.isin(got, np.asarray(v, np.uint64)).sum()) for name, v in known_ids.items()}
    return out


def held_out_figures(r: AccuracyReport) -> dict[str, Any]:
    """The legal-masked figures of one :class:`AccuracyReport` on human games, over every move
    decision: ``top1_legal_masked_all_moves``, ``loss_legal_masked_all_moves`` (nats), the
    uniform-over-legal player's ``uniform_loss_all_moves`` E[ln N_legal] over the same positions and
    ``excess_nats_all_moves`` (loss − uniform; ≤ 0 beats a player that knows only the rules) with its
    95 % bootstrap interval over games ``excess_nats_lo`` / ``excess_nats_hi``, and that player's top-1
    ``uniform_top1_all_moves`` E[1/N_legal]."""
    return {"top1_legal_masked_all_moves": r.legal_masked_top1_all_moves, "loss_legal_masked_all_moves": r.legal_masked_loss_all_moves,
            "uniform_loss_all_moves": r.uniform_loss_all_moves, "uniform_top1_all_moves": r.ceiling_moves_only,
            "excess_nats_all_moves": r.excess_nats_all_moves, "excess_nats_lo": r.excess_nats_lo, "excess_nats_hi": r.excess_nats_hi}


def evaluate_held_out(model: Callable, games, *, seq_len: int, batch_size: int = 64, prepend_outcome: bool = False,
                      dtype: Optional[str] = None, backbone: Optional[Callable] = None) -> dict[str, Any]:
    """Accuracy on a set of corpus games (an adapter run's validation or test games,
    :func:`pawn.data.split.rederive`), with the metrics of one Elo band of :func:`evaluate_pgn`
    plus the legal-masked figures over every move decision (the positions of ``pawn adapt``'s
    validation under its legal mask; :func:`held_out_figures`), the per-game sums behind them and,
    with ``backbone``, the same figures of the backbone alone on the same games and the paired
    difference adapter − backbone.

    Args:
        games: :class:`pawn.data.cache.CsrGames` (cut to ``seq_len − offset`` plies here).
        backbone: the adapter's backbone (called like ``model``), or None.

    Returns:
        ``{n_games, n_positions, loss, perplexity, top1, top5, legal_rate, top1_legal_masked,
        top1_legal_masked_all_moves, loss_legal_masked_all_moves, uniform_loss_all_moves,
        excess_nats_all_moves, excess_nats_lo, excess_nats_hi, per_game}`` (position-weighted;
        losses in nats: ``loss`` the unmasked CE, the legal-masked one as ``pawn adapt`` validates;
        every figure over the move decisions, ``top1_legal_masked`` over those at position ≥ 10;
        ``per_game``: lists [n_games] ``n_moves``, ``legal_nll``, ``legal_hits``, ``ln_n_legal`` —
        each game's move decisions, summed legal-masked loss, legal-masked top-1 hits and ln N_legal,
        for paired comparisons with :mod:`pawn.stats`); with ``backbone`` also ``backbone``
        (:func:`held_out_figures` of the backbone alone) and ``vs_backbone``: the adapter − backbone
        differences of the legal-masked loss and top-1 with 95 % paired bootstrap intervals over games.
    """
    from pawn.stats import paired_bootstrap_ratio

    width = Layout.of(prepend_outcome).max_ply(seq_len)
    tokens, lengths, _ = games.gather(np.arange(len(games)), width)
    outcome = np.full(len(games), PLY_LIMIT, np.int16)
    r = evaluate_games(model, tokens, lengths, outcome, seq_len=seq_len,
                       batch_size=batch_size, prepend_outcome=prepend_outcome, dtype=dtype)
    out = {"n_games": len(games), "n_positions": r.n_move_positions, "loss": r.moves_only_loss,
           "perplexity": min(math.exp(min(r.moves_only_loss, 700.0)), LICHESS_PERPLEXITY_CAP),
           "top1": r.moves_only_top1_full_vocab, "top5": r.moves_only_top5_full_vocab, "legal_rate": r.moves_only_legal_rate,
           "top1_legal_masked": r.legal_masked_top1, **held_out_figures(r),
           "per_game": {k: v.tolist() for k, v in r.per_game.items()}}
    if backbone is not None:
        rb = evaluate_games(backbone, tokens, lengths, outcome, seq_len=seq_len, batch_size=batch_size,
                            prepend_outcome=prepend_outcome, dtype=dtype)
        out["backbone"] = held_out_figures(rb)
        a, b, n = r.per_game, rb.per_game, r.per_game["n_moves"]
        out["vs_backbone"] = {"loss_legal_masked_all_moves": paired_bootstrap_ratio(a["legal_nll"], b["legal_nll"], n).to_dict(),
                              "top1_legal_masked_all_moves": paired_bootstrap_ratio(a["legal_hits"], b["legal_hits"], n).to_dict()}
    return out
