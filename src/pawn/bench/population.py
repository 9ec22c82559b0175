"""``pawn bench`` section ``population``: trials/hour of P trials trained as ONE vmapped program
(:mod:`pawn.sweep.population`, what ``pawn sweep --population P`` runs) against the same P trials
run one after another (issue 15: "P must be worth it on CPU and on a GPU").

The P members differ only in :data:`pawn.sweep.population.ARRAY_FIELDS` (lr, weight decay,
warm-up: :data:`MEMBERS`). Two run types, each with two rows:

- ``pretrain``: pretraining trials on the bench model shape (``--variant``/``--supernet``), fed
  engine random games;
- ``adapt``: ``--population-strategy`` adapter trials on the same shape as the backbone (random
  weights written to a temporary checkpoint), fed the adapt section's games (``--adapt-data``,
  else ``../shared/data/lichess``, else ``examples/lichess`` from the working directory, else engine random games written as
  PGN, said so).

Rows:

- ``step`` (steady state): the vmapped K-step chunk of the P members
  (:class:`~pawn.sweep.population.PopulationProgram`) against P runs of the sequential
  :class:`~pawn.train.loop.TrainProgram` chunk (one program per member, as P separate trials
  compile), both compiled first (``first_chunk_s``: the first call of each, compilation
  included), then ``--repeats`` rounds interleaved population, sequential, population, …;
  medians. Trials/hour = 3600 / (seconds per trial-step × ``--population-steps``).
- ``end_to_end`` (what a sweep sees, ``--population-end-to-end``):
  :func:`~pawn.sweep.population.run_pretrain_population` /
  :func:`~pawn.sweep.population.run_adapt_population` against P calls of
  :func:`~pawn.train.pretrain.run_pretrain` / :func:`~pawn.train.adapt.run_adapt` with the same
  configs, as a sequential sweep runs them (each streams its batches, validates and checkpoints;
  pretraining trials each compile, adapter trials share one
  :class:`~pawn.train.adapt.AdaptReuse`: backbone read once, chunk and validation compiled
  once): ``--population-steps``
  steps per trial, validation halfway and at the end; wall seconds, trials/hour = 3600·P / wall.

``ratio`` = population trials/hour over sequential trials/hour = sequential seconds over
population seconds (> 1: the population is worth it).
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from pawn.bench.adapt import data_name
from pawn.bench.records import OMIT_NONE, Measurement
from pawn.bench.settings import BenchSettings
from pawn.bench.report import BenchColumn, TableView, _n
from pawn.bench.section import Section, register, train_step_work
from pawn.bench.timing import timing_stats
from pawn.errors import UsageError

MEMBERS: tuple[dict[str, float], ...] = (
    dict(lr=3e-4, weight_decay=0.0, warmup=0.05), dict(lr=1e-3, weight_decay=0.05, warmup=0.1),
    dict(lr=2e-3, weight_decay=0.1, warmup=0.0), dict(lr=5e-4, weight_decay=0.01, warmup=0.2))
"""Member hyperparameters, cycled: member i takes ``MEMBERS[i % 4]`` with its lr multiplied by
``1 + i // 4``; ``warmup`` is a fraction of the trial's steps (``warmup_steps = int(warmup ·
steps)``)."""

RUN_TYPES = ("pretrain", "adapt")
"""Run types of the section, in run order."""


@dataclass
class PopulationRow:
    """One measurement of P trials as a population against P sequential trials.

    Attributes:
        run_type: ``"pretrain"`` or ``"adapt"``.
        row: ``"step"`` (one K-step chunk, steady state) or ``"end_to_end"`` (whole trials).
        population_s: seconds of the population: the median vmapped chunk (step) or the wall
            of the population run (end to end).
        sequential_s: seconds of the same trial-steps one trial at a time: the median of P
            sequential chunks (step) or the wall of P sequential runs (end to end).
        trial_steps: member optimizer steps in each of those measurements (K·P or steps·P).
        s_per_trial_step: ``{"population", "sequential"}`` seconds / ``trial_steps``.
        trials_per_hour: ``{"population", "sequential"}`` at ``steps_per_trial`` steps a trial.
        ratio: population trials/hour ÷ sequential = ``sequential_s / population_s``.
        first_chunk_s: step rows: ``{"population", "sequential"}`` seconds of the first call(s)
            (tracing + compilation + one chunk; the P sequential programs compile each).
        population, sequential: step rows: the timed chunks (median, min, max over rounds).
    """

    run_type: str
    row: str
    population_s: float
    sequential_s: float
    trial_steps: int
    s_per_trial_step: dict[str, float]
    trials_per_hour: dict[str, float]
    ratio: float
    first_chunk_s: Optional[dict[str, float]] = field(default=None, metadata=OMIT_NONE)
    population: Optional[Measurement] = field(default=None, metadata=OMIT_NONE)
    sequential: Optional[Measurement] = field(default=None, metadata=OMIT_NONE)

    @classmethod
    def of(cls, run_type: str, row: str, population_s: float, sequential_s: float, trial_steps: int,
           steps_per_trial: int, **extra: Any) -> "PopulationRow":
        """The row from the two times; the per-trial-step seconds, trials/hour and ratio are derived."""
        per = {"population": population_s / trial_steps, "sequential": sequential_s / trial_steps}
        tph = {k: 3600.0 / (v * steps_per_trial) for k, v in per.items()}
        return cls(run_type, row, population_s, sequential_s, trial_steps, per, tph, sequential_s / population_s, **extra)


@dataclass
class PopulationResult:
    """The ``population`` section: P, steps per trial, K, the batch shape, the model, the adapter
    strategy and its data (source, training games), the members' hyperparameters and the rows
    (pretrain step, pretrain end to end, adapt step, adapt end to end; end-to-end rows only with
    ``--population-end-to-end``)."""

    population_size: int
    steps_per_trial: int
    steps_per_chunk: int
    batch_size: int
    seq_len: int
    model: str
    strategy: str
    data: str
    train_games: int
    members: list[dict[str, float]]
    rows: list[PopulationRow] = field(default_factory=list)


def member_settings(i: int, steps: int) -> dict[str, float]:
    """Member ``i``'s ``lr``, ``weight_decay`` and ``warmup_steps`` for trials of ``steps`` steps
    (:data:`MEMBERS`)."""
    m = MEMBERS[i % len(MEMBERS)]
    return {"lr": m["lr"] * (1 + i // len(MEMBERS)), "weight_decay": m["weight_decay"], "warmup_steps": int(m["warmup"] * steps)}


def _interleaved(run_pop: Callable[[], None], run_seq: Callable[[], None], rounds: int,
                 detail: Callable[[str], None] = lambda m: None) -> tuple[dict, dict]:
    """First call of each (compilation included), then ``rounds`` rounds pop, seq, pop, seq …:
    :func:`~pawn.bench.timing.timing_stats` of each, with ``first_call_s``. ``detail`` is told
    which part runs (``first calls (compiling)``, ``round 2/5``)."""
    firsts = []
    detail("first calls (compiling)")
    for fn in (run_pop, run_seq):
        t0 = time.perf_counter()
        fn()
        firsts.append(time.perf_counter() - t0)
    tp, ts = [], []
    for r in range(max(1, rounds)):
        detail(f"round {r + 1}/{max(1, rounds)}")
        for fn, xs in ((run_pop, tp), (run_seq, ts)):
            t0 = time.perf_counter()
            fn()
            xs.append(time.perf_counter() - t0)
    out = []
    for first, xs in zip(firsts, (tp, ts)):
        st = timing_stats(xs)
        st["first_call_s"], st["compile_s"] = first, max(0.0, first - st["median_s"])
        out.append(st)
    return out[0], out[1]


def _step_row(run_type: str, prog_of: Callable, member_cfgs: list, model, trainable, chunk_host: dict, frozen_needed: bool,
              s: BenchSettings, steps: int, detail: Callable[[str], None] = lambda m: None) -> PopulationRow:
    """The ``step`` row: ``prog_of(member config) -> (TrainProgram, optimizer, schedule)``;
    ``model`` is split by ``trainable`` (None = all trained); ``detail``: sub-status lines."""
    import equinox as eqx
    import jax

    from pawn.sweep.population import PopulationProgram, lr_table
    from pawn.train.loop import init_partitioned_state, partition_model

    P, K, B, T = len(member_cfgs), s.steps_per_chunk, s.batch_size, s.seq_len
    progs = [prog_of(c) for c in member_cfgs]
    base = member_cfgs[0]
    pop = PopulationProgram(progs[0][0], b1=base.beta1, b2=base.beta2, max_grad_norm=base.max_grad_norm)
    table = lr_table([sched for _, _, sched in progs], steps)
    train_half, frozen = partition_model(model, trainable)
    frozen = progs[0][0].place_frozen(frozen) if frozen_needed else None
    # placed as run_*_population places it: an unplaced state would compile again on the second call
    holder = {"pop": eqx.filter_shard(pop.init(train_half, [c.weight_decay for c in member_cfgs]), progs[0][0].replicated),
              "seq": []}
    for prog, opt, _ in progs:
        st, _fz = init_partitioned_state(model, opt, trainable)
        holder["seq"].append(prog.place_state(st))

    def run_pop():
        holder["pop"], m = pop.run_chunk(holder["pop"], progs[0][0].place_chunk(chunk_host), table, frozen)
        jax.block_until_ready(m["loss"])

    def run_seq():
        for i, (prog, _, _) in enumerate(progs):
            args = (frozen,) if frozen_needed else ()
            holder["seq"][i], m = prog.run_chunk(holder["seq"][i], prog.place_chunk(chunk_host), *args)
            jax.block_until_ready(m["loss"])

    label = workload(run_type)
    sp, ss = _interleaved(run_pop, run_seq, s.repeats, lambda m: detail(f"{label} steady-state chunk: {m}"))
    mp = Measurement.of(sp).per(K * P * B * T, "tokens_per_s")
    ms = Measurement.of(ss).per(K * P * B * T, "tokens_per_s")
    return PopulationRow.of(run_type, "step", mp.median_s, ms.median_s, K * P, steps,
                            first_chunk_s={"population": sp["first_call_s"], "sequential": ss["first_call_s"]},
                            population=mp, sequential=ms)


def workload(run_type: str, strategy: Optional[str] = None) -> str:
    """The workload a population row measures: ``pretraining``, ``adapter`` or ``adapter (<strategy>)``."""
    if run_type == "pretrain":
        return "pretraining"
    return f"adapter ({strategy})" if strategy else "adapter"


def _e2e_row(run_type: str, run_pop: Callable[[], Any], run_seq: Callable[[], Any], P: int, steps: int,
             detail: Callable[[str], None] = lambda m: None) -> PopulationRow:
    """The ``end_to_end`` row: wall seconds of ``run_pop()`` (P whole trials as one population)
    and of ``run_seq()`` (the same P trials one after another; it reports each trial through
    ``detail`` itself). Raises UsageError when a population member did not complete."""
    detail(f"{workload(run_type)} end to end: a population of {P} trials of {steps} steps")
    t0 = time.perf_counter()
    outs = run_pop()
    pop_s = time.perf_counter() - t0
    bad = [o for o in outs if o.reason not in ("completed", "step_limit")]
    if bad:
        raise UsageError(f"bench population: a {run_type} population member ended with {bad[0].reason}"
                         f"{': ' + bad[0].error if bad[0].error else ''}")
    t0 = time.perf_counter()
    run_seq()
    seq_s = time.perf_counter() - t0
    return PopulationRow.of(run_type, "end_to_end", pop_s, seq_s, steps * P, steps)


class _NoPrune:
    """A stand-in Optuna trial for the population's reporters: records nothing, never prunes."""

    def report(self, value, step):
        pass

    def should_prune(self):
        return False


def _reporters(P: int, key: str):
    from pawn.sweep.trials import PrunerHook

    return [PrunerHook(_NoPrune(), lambda m: m[key]) for _ in range(P)]


def _e2e_chunk(s: BenchSettings) -> tuple[int, int]:
    """``(half, K)`` of the end-to-end trials: validation every ``half = steps / 2`` steps (an
    adapter "epoch"; ``population_steps`` is even), K = gcd(``--steps-per-chunk``, half)."""
    half = s.population_steps // 2
    return half, math.gcd(s.steps_per_chunk, half)


def bench_pretrain_population(s: BenchSettings, out: PopulationResult, tmp: Path, detail: Callable[[str], None] = lambda m: None) -> None:
    """The pretraining rows (appended to ``out.rows``); ``detail``: the section's sub-status callback."""
    import numpy as np

    from pawn.data.stream import EngineSource, make_batch
    from pawn.model import PAWNModel
    from pawn.settings import PretrainConfig
    from pawn.sweep.population import run_pretrain_population
    from pawn.train.loop import TrainProgram, make_mesh, make_optimizer
    from pawn.train.pretrain import run_pretrain

    import jax

    P, steps = s.population_size, s.population_steps
    half, K_e2e = _e2e_chunk(s)
    shape = {"variant": s.variant} if s.variant is not None else {"supernet": s.supernet or "tiny"}
    base = dict(shape, batch_size=s.batch_size, seq_len=s.seq_len, total_steps=2 * half, steps_per_chunk=K_e2e,
                val_every=half, checkpoint_every=2 * half, val_games=s.population_val_games, dtype=s.dtype or "auto",
                remat="none", model_seed=0, seed=s.seed)
    cfgs = [PretrainConfig.load(**base, **member_settings(i, steps), out=str(tmp / "pretrain" / f"m{i}")) for i in range(P)]
    stored, variants = cfgs[0].model_configs()

    def prog_of(c):
        sched = c.schedule()
        opt = make_optimizer(sched, b1=c.beta1, b2=c.beta2, weight_decay=c.weight_decay, max_grad_norm=c.max_grad_norm)
        return TrainProgram.of(opt, sched, list(variants.values()), dtype=s.compute_dtype()), opt, sched

    src = EngineSource(s.seed, s.seq_len)
    batches = [make_batch(src, i, s.batch_size, s.seq_len, False) for i in range(s.steps_per_chunk)]
    chunk = {k: np.stack([b[k] for b in batches]) for k in batches[0]}
    model = PAWNModel(stored, jax.random.key(0))
    out.rows.append(_step_row("pretrain", prog_of, cfgs, model, None, chunk, False, s, steps, detail))
    if s.population_end_to_end:
        from pawn.sweep.trials import PretrainTrialRunner

        dumps = [c.model_dump(mode="json") for c in cfgs]
        key = PretrainTrialRunner(dumps[0]).objective_key

        def seq():
            for i, c in enumerate(cfgs):
                detail(f"pretraining end to end: sequential trial {i + 1}/{P} of {steps} steps")
                run_pretrain(c, log=lambda m: None, progress=False, install_signal_handlers=False)

        out.rows.append(_e2e_row("pretrain", lambda: run_pretrain_population(dumps, _reporters(P, key), log=lambda m: None),
                                 seq, P, steps, detail))


def bench_adapt_population(s: BenchSettings, out: PopulationResult, tmp: Path, detail: Callable[[str], None] = lambda m: None) -> None:
    """The adapter rows (appended to ``out.rows``); sets ``out.data`` and ``out.train_games``.
    ``detail``: the section's sub-status callback.

    Raises:
        UsageError: fewer games than one epoch of the end-to-end trials needs.
        AdapterConfigError: a strategy that does not fit the backbone shape.
    """
    import jax
    import numpy as np

    from pawn.adapters import build_adapted, get_strategy
    from pawn.adapters.strategies import rosa
    from pawn.bench.adapt import RANDOM_GAMES, _random_games_pgn, adapt_data
    from pawn.checkpoint import save_checkpoint
    from pawn.data.lichess import LichessFilters, load_corpus
    from pawn.data.lichess_batches import GameBatches
    from pawn.model import PAWNModel
    from pawn.sweep.population import run_adapt_population
    from pawn.train.adapt import AdaptReuse, load_backbone_for, run_adapt
    from pawn.train.adapter_step import BATCH_KEYS, make_adapter_loss
    from pawn.train.adapt_config import AdaptSettings
    from pawn.train.loop import TrainProgram, make_mesh, make_optimizer

    P, steps, B, T, K = s.population_size, s.population_steps, s.batch_size, s.seq_len, s.steps_per_chunk
    half, K_e2e = _e2e_chunk(s)
    get_strategy(s.population_strategy)
    cfg, _, _ = s.model()
    backbone = tmp / "backbone"
    save_checkpoint(backbone, {k: np.asarray(v) for k, v in PAWNModel(cfg, jax.random.key(0)).params().items()}, cfg,
                    run_config={"prepend_outcome": False, "seq_len": T})
    data = named = adapt_data(s, detail)
    if data is None:  # no Lichess games here: engine random games through the same PGN → cache path
        data = _random_games_pgn(tmp / "random-games.pgn", max(4 * (half + K) * B, 64 + s.population_val_games), T, s.seed)
    base = dict(backbone=str(backbone), strategy=s.population_strategy, data=data, batch_size=B, seq_len=T, epochs=2,
                steps_per_epoch=half, steps_per_chunk=K_e2e, val_games=s.population_val_games, data_seed=s.seed,
                cache_dir=str(tmp / "cache"), dtype=s.dtype or "auto", lr_schedule="cosine")
    cfgs = [AdaptSettings.load(**base, **member_settings(i, steps), out=str(tmp / "adapt" / f"m{i}")) for i in range(P)]
    c0 = cfgs[0]
    detail(f"adapter: reading the games of {data_name(named or RANDOM_GAMES)} into a cache")
    # the cache is built here, untimed, with run_adapt's arguments: both timed sides then read it
    corpus = load_corpus(c0.data, LichessFilters(c0.elo_min, c0.elo_max, c0.min_ply, c0.max_games), split=c0.split,
                         val_games=c0.val_games, cache_dir=c0.cache_dir, test_games=c0.test_games)
    out.data, out.train_games = str(named or RANDOM_GAMES), len(corpus.train)
    batches = GameBatches(corpus.train, c0.layout, T, B, s.seed, legal_mask=True)
    if batches.steps_per_epoch < max(K, half):
        raise UsageError(f"bench population: {len(corpus.train)} games of {data} give {batches.steps_per_epoch} batches of "
                         f"{B}; the adapter trials need {max(K, half)}")
    keys = (*BATCH_KEYS, "legal")
    host = [batches.batch_at(i) for i in range(K)]
    chunk = {k: np.stack([getattr(b, k) for b in host]) for k in keys}
    bb, _, _ = load_backbone_for(c0)
    model = build_adapted(c0.strategy, c0.adapter_settings(), bb, jax.random.key(c0.seed))
    if rosa.is_phased(model):
        raise UsageError(f"bench population: strategy {c0.strategy} changes its trainable set mid-run and has no "
                         "population trainer; choose another --population-strategy")
    loss = make_adapter_loss(legal_mask=True, illegal_penalty=0.0, dtype=s.compute_dtype())

    def prog_of(c):
        sched = c.schedule(steps)
        opt = make_optimizer(sched, b1=c.beta1, b2=c.beta2, weight_decay=c.weight_decay, max_grad_norm=c.max_grad_norm)
        return TrainProgram.of(opt, sched, model.config, dtype=s.compute_dtype(), loss_fn=loss), opt, sched

    out.rows.append(_step_row("adapt", prog_of, cfgs, model, model.trainable_filter(), chunk, True, s, steps, detail))
    if s.population_end_to_end:
        dumps = [c.model_dump(mode="json") for c in cfgs]

        def seq():  # as a sequential sweep runs its trials: one AdaptReuse (backbone read once, programs shared)
            reuse = AdaptReuse()
            for i, c in enumerate(cfgs):
                detail(f"adapter end to end: sequential trial {i + 1}/{P} of {steps} steps")
                run_adapt(c, log=lambda m: None, progress=False, install_signal_handlers=False, reuse=reuse)

        out.rows.append(_e2e_row("adapt", lambda: run_adapt_population(dumps, _reporters(P, "loss"), log=lambda m: None),
                                 seq, P, steps, detail))


def bench_population(s: BenchSettings, detail: Callable[[str], None] = lambda m: None) -> PopulationResult:
    """Run the section: the pretraining rows, then the adapter rows (module docstring). Every
    file (run directories, the backbone checkpoint, the game cache) lives in a temporary
    directory removed at the end. ``detail``: the section's sub-status callback (which row runs).

    Raises:
        UsageError: too few games for the adapter trials, or a phased strategy (RoSA family).
        AdapterConfigError: a strategy that does not fit the backbone shape.
        pawn.sweep.population.PopulationError: members that cannot share a population.
    """
    _, _, label = s.model()
    out = PopulationResult(s.population_size, s.population_steps, s.steps_per_chunk, s.batch_size, s.seq_len, label,
                           s.population_strategy, "", 0, [member_settings(i, s.population_steps) for i in range(s.population_size)])
    tmp = Path(tempfile.mkdtemp(prefix="pawn-bench-population-"))
    try:
        bench_pretrain_population(s, out, tmp, detail)
        bench_adapt_population(s, out, tmp, detail)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def population_view(r: PopulationResult):
    """The printed table of the section (:class:`pawn.bench.report.TableView`)."""

    v = TableView(f"population of {r.population_size} (one vmapped program) vs {r.population_size} sequential trials: {r.model}, "
                  f"batch {r.batch_size} × seq {r.seq_len}, K = {r.steps_per_chunk}, {r.steps_per_trial} steps per trial; "
                  f"adapters {r.strategy} on {r.train_games:,} games of {data_name(r.data)}",
                  ["workload", BenchColumn("measure", left=True), BenchColumn("population s"), BenchColumn("sequential s"),
                   BenchColumn("s/trial-step pop"), BenchColumn("s/trial-step seq"), BenchColumn("trials/h pop"), BenchColumn("trials/h seq"),
                   BenchColumn("ratio"), BenchColumn("first chunk s pop / seq")])
    names = {"step": "steady-state chunk", "end_to_end": "end to end"}
    for row in r.rows:
        v.rows.append({"workload": workload(row.run_type, r.strategy),
                       "measure": names[row.row], "population s": f"{row.population_s:.3f}", "sequential s": f"{row.sequential_s:.3f}",
                       "s/trial-step pop": f"{row.s_per_trial_step['population']:.4f}",
                       "s/trial-step seq": f"{row.s_per_trial_step['sequential']:.4f}",
                       "trials/h pop": _n(row.trials_per_hour["population"]), "trials/h seq": _n(row.trials_per_hour["sequential"]),
                       "ratio": f"{row.ratio:.2f}×",
                       "first chunk s pop / seq": (f"{row.first_chunk_s['population']:.1f} / {row.first_chunk_s['sequential']:.1f}"
                                                   if row.first_chunk_s else "")})
    lrs = ", ".join(f"lr {m['lr']:g} wd {m['weight_decay']:g} warm-up {m['warmup_steps']}" for m in r.members)
    v.notes.append(f"members differ only in lr, weight decay and warm-up steps: {lrs}")
    v.notes.append("steady-state chunk: population s = one vmapped K-step chunk of all members, sequential s = P chunks "
                   "one program each (median over interleaved rounds); end to end: wall s of whole trials (compile, data, "
                   "validation halfway and at the end; sequential runs also checkpoint)")
    v.notes.append("trials/h at the steps per trial; ratio = population trials/h ÷ sequential (> 1: the population pays)")
    return v


__all__ = ["MEMBERS", "RUN_TYPES", "PopulationResult", "PopulationRow", "bench_population", "member_settings", "population_view"]


def _work(s: BenchSettings) -> float:
    """Per run type: P sequential + 1 vmapped chunk per round (+ the first calls), and with end to
    end 2·P trials of population_steps steps."""
    e2e = 2 * s.population_size * s.population_steps if s.population_end_to_end else 0
    return 2 * train_step_work(s) / s.steps_per_chunk * (2 * s.population_size * s.steps_per_chunk * (s.repeats + 1) + e2e)


# measured on the shared 2-core CPU at load ~5: quick ~100 s, default ~20 min
SECTION = register(Section("population", 100, lambda s, ctx: bench_population(s, ctx.detail), population_view, (60.0, 600.0),
                           _work))
"""The ``population`` row of the section table (:mod:`pawn.bench.section`)."""
