"""``pawn bench`` section ``eval``: teacher-forced evaluation speed, what ``pawn eval`` runs (spec
``eval-probe-generate-sweep-bench.md`` §1.5, §7)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pawn.bench.records import FLATTEN, Measurement
from pawn.bench.settings import BenchSettings
from pawn.bench.section import Section, register
from pawn.bench.report import _range, TableView
from pawn.config import flops_per_token
from pawn.bench.timing import time_call
from pawn.settings import VAL_SEED_PUBLISHED


@dataclass
class EvalResult:
    """The ``eval`` section: the model, the workload (games × seq_len positions at batch_size,
    ``positions`` supervised ones) and the timed calls with positions/s and games/s (its keys
    sit at the top level of the JSON object)."""

    model: str
    config: str
    games: int
    seq_len: int
    batch_size: int
    positions: int
    timing: Measurement = field(metadata=FLATTEN)


def bench_eval(s: BenchSettings) -> EvalResult:
    """Teacher-forced evaluation speed, what ``pawn eval`` runs: positions/s and games/s of
    :func:`pawn.evaluate.accuracy.evaluate_games` on ``eval_games`` random games of the
    published validation stream (seed :data:`~pawn.settings.VAL_SEED_PUBLISHED`) at
    ``seq_len``, ``batch_size`` games per model call; packing, the engine's legal masks and the
    host-side scoring are part of the measured call. The warm-up call scores the same games (the
    same shapes), so the timed calls compile nothing; its time is ``first_call_s``. Positions are
    the supervised (``loss_mask``) ones. The model is the stored config (the supernet itself for
    a supernet), random init: speed does not depend on the weights."""
    import jax

    from pawn.engine import random_games
    from pawn.evaluate.accuracy import evaluate_games
    from pawn.model import PAWNModel

    cfg, _, label = s.model()
    model = PAWNModel(cfg, jax.random.key(0))
    g = random_games(s.eval_games, s.seq_len, seed=VAL_SEED_PUBLISHED)
    res = {}

    def run():
        res["r"] = evaluate_games(model, g.tokens, g.lengths, g.outcome, seq_len=s.seq_len, batch_size=s.batch_size)
        return res["r"].n_positions

    st = time_call(run, repeats=s.repeats, warmup=max(1, s.warmup))
    n_pos = int(res["r"].n_positions)
    timing = Measurement.of(st).per(n_pos, "positions_per_s").per(s.eval_games, "games_per_s")
    return EvalResult(label, cfg.name, s.eval_games, s.seq_len, s.batch_size, n_pos, timing)


def view(ev) -> TableView:
    """The printed table of the section (:class:`pawn.bench.report.TableView`)."""
    t = ev.timing
    cols = ["positions", "time_ms", "positions_per_s", "positions_per_s_range", "eval_games_per_s", "first_call_s"]
    return TableView(f"eval (teacher-forced, as pawn eval): {ev.model} ({ev.config}), {ev.games} games × {ev.seq_len} positions, "
                     f"batch {ev.batch_size}", cols,
                     [{"positions": ev.positions, "time_ms": t, "positions_per_s": t.rates["positions_per_s"],
                       "positions_per_s_range": _range(t, "positions_per_s"), "eval_games_per_s": t.rates["games_per_s"],
                       "first_call_s": t.first_call_s}])


SECTION = register(Section("eval", 70, lambda s, ctx: bench_eval(s), view, (3.0, 10.0),
                           lambda s: flops_per_token(s.model()[0], s.seq_len) / 3 * s.eval_games * s.seq_len * s.repeats))
"""The ``eval`` row of the section table (:mod:`pawn.bench.section`)."""
