"""The work behind ``pawn eval``, ``pawn probe`` and ``pawn generate``: resolve the per-model
settings (layout, ply cap), run the evaluation on every loaded model and return typed results,
one per model, as they finish (so a caller can print each and keep the finished ones on Ctrl-C).

Each result's :meth:`record` is its entry in the command's ``--json`` file (spec
``eval-probe-generate-sweep-bench.md`` §1–§3). Errors a user can cause are :class:`EvaluationError`
(or another :class:`pawn.errors.PawnError`) with a one-line message.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

from pawn.data.layout import Layout
from pawn.data.pgn_stream import pgn_files_in
from pawn.errors import PawnError, UsageError
from pawn.evaluate.settings import EvalSettings, GenerateSettings, ProbeSettings
from pawn.progress import counted

if TYPE_CHECKING:  # these import JAX/Equinox: imported where used, so input checks run without them
    from pawn.metrics_core import AccuracyReport
    from pawn.evaluate.loading import LoadedModel

Log = Callable[[str], None]


class EvaluationError(PawnError, ValueError):
    """A checkpoint, input file or setting that an evaluation cannot use (exit code 1)."""


def load(checkpoint: str, variant: Optional[str]) -> list[LoadedModel]:
    """:func:`pawn.evaluate.loading.load_models`, with every loading problem a PawnError.

    Raises:
        pawn.checkpoint.CheckpointError, pawn.convert.ConversionError, EvaluationError.
    """
    from pawn.evaluate.loading import load_models

    try:
        return load_models(checkpoint, variant)
    except (FileNotFoundError, ValueError) as e:
        if isinstance(e, PawnError):
            raise
        raise EvaluationError(str(e)) from None


# ============================================================================ eval
@dataclass
class ModelEval:
    """``pawn eval`` of one model: the random-game :class:`AccuracyReport` and, with ``--pgn``,
    the Lichess result of :func:`pawn.evaluate.accuracy.evaluate_pgn` (a dict by Elo band)."""

    name: str
    model_config: dict
    layout: Layout
    max_ply: int
    max_ply_source: str
    seq_len: int
    games: int
    seed: int
    report: Optional[AccuracyReport]
    lichess: Optional[dict]
    wall_s: float
    held_out: Optional[dict] = None
    """With ``--split``: :func:`pawn.evaluate.accuracy.evaluate_held_out` plus ``split`` (val/test),
    ``run`` (the run directory), ``source`` and the rule from the run's ``split.json``."""
    split_run: Optional[str] = None
    """The adapter's run directory when it records a split (``split.json``), else None."""
    split_hint: Optional[str] = None
    """With ``--pgn`` on an adapter: the ``--split`` choices its run offers, or why the overlap with
    its training games could not be checked."""

    def record(self) -> dict[str, Any]:
        rec: dict[str, Any] = {"name": self.name, "model_config": self.model_config,
                               "prepend_outcome": self.layout.prepend_outcome}
        if self.report is not None:  # not with --pgn-only
            d = self.report.to_dict()
            d["settings"].update(games=self.games, seed=self.seed, max_ply=self.max_ply, max_ply_source=self.max_ply_source)
            rec["random_games"] = d
        rec["eval_wall_s"] = self.wall_s
        if self.lichess is not None:
            rec["lichess"] = self.lichess
        if self.held_out is not None:
            rec["held_out"] = self.held_out
        return rec


def elo_edges(s: EvalSettings) -> tuple[int, ...]:
    """The ``--elo-edges`` band edges as integers.

    Raises:
        UsageError (exit code 2): not a comma-separated list of at least two strictly increasing
            integers (checked here, before any model is loaded or evaluated).
    """
    try:
        edges = tuple(int(x) for x in s.elo_edges.split(","))
    except ValueError:
        raise UsageError(f"--elo-edges must be comma-separated integers, got {s.elo_edges!r}") from None
    if len(edges) < 2 or list(edges) != sorted(set(edges)):
        raise UsageError(f"--elo-edges must be at least two strictly increasing integers, got {s.elo_edges!r}")
    return edges


def check_eval(s: EvalSettings) -> None:
    """Input checks of ``pawn eval`` that need no model (before any work).

    Raises:
        EvaluationError: a missing --pgn file; UsageError: bad --elo-edges, a --pgn folder
            without .pgn files, --pgn-min-ply > --max-ply, --pgn with --split, --pgn-only
            without --pgn or --split.
    """
    elo_edges(s)
    if s.pgn is not None and s.split is not None:
        raise UsageError("give --pgn FILE or --split val|test, not both")
    if s.pgn_only and s.pgn is None and s.split is None:
        raise UsageError("--pgn-only skips the random-game pass: it needs --pgn FILE or --split val|test")
    if s.pgn is not None and s.pgn.is_dir() and not pgn_files_in(s.pgn):
        raise UsageError(f"--pgn {s.pgn}: no .pgn file in this folder")
    if s.pgn is not None and not (s.pgn.is_file() or s.pgn.is_dir() or s.pgn.is_fifo()):
        raise EvaluationError(f"PGN file not found: {s.pgn}")
    if s.pgn is not None and s.max_ply is not None and s.pgn_min_ply > s.max_ply:
        raise UsageError(f"--pgn-min-ply ({s.pgn_min_ply}) exceeds --max-ply ({s.max_ply}); lower it to at most {s.max_ply}")


def eval_max_ply(max_ply: Optional[int], lm: LoadedModel, layout: Layout) -> tuple[int, str]:
    """The ply cap ``pawn eval`` uses for one model and where it comes from (for the report)."""
    if max_ply is not None:
        return max_ply, "--max-ply"
    if lm.trained_seq_len is not None:
        plies = max(1, layout.max_ply(min(lm.trained_seq_len, lm.config.max_seq_len)))
        return plies, f"the checkpoint's trained context, seq_len {lm.trained_seq_len}"
    return 512, "default: the checkpoint records no training context"


def adapter_split(lm: LoadedModel, *, required: bool):
    """``(run, SplitRecord)`` of an adapter checkpoint inside a ``pawn adapt`` run that recorded
    its split (``split.json``), else ``(run or None, None)``.

    Raises:
        EvaluationError: with ``required`` (``--split``): not an adapter, not inside its run
            directory, or a run without a split record; any unreadable split record.
    """
    from pawn.runs import population_member_of, run_of_checkpoint

    if not lm.adapter:
        if required:
            raise EvaluationError(f"--split needs an adapter checkpoint of a pawn adapt run; {lm.source} is a plain model "
                                  "(evaluate it with --pgn FILE)")
        return None, None
    run = run_of_checkpoint(lm.source) or population_member_of(lm.source)
    if run is None:
        if required:
            raise EvaluationError(f"--split: {lm.source} is not inside a pawn adapt run directory (RUN/best or "
                                  "RUN/checkpoints/NAME), so no split record names its held-out games")
        return None, None
    try:
        rec = run.split
    except PawnError as e:
        raise EvaluationError(str(e)) from None
    if rec is None and required:
        raise EvaluationError(f"--split: the run {run.path} records no split (split.json; written by pawn adapt since "
                              "this version), so its held-out games cannot be named; evaluate with --pgn on games it did not train on")
    return run, rec


def backbone_of(lm: LoadedModel):
    """An adapter's backbone, to score alone on the same games beside it; None for a plain model and
    for ``specialized_clm`` (its "backbone" is the model trained from scratch)."""
    if not lm.adapter or getattr(lm.model, "strategy", None) == "specialized_clm":
        return None
    return getattr(lm.model, "backbone", None)


def _held_out(lm: LoadedModel, rec, run, s: EvalSettings, seq_len: int, layout: Layout, log: Log) -> dict:
    """``--split``: the run's validation/test games re-derived and evaluated."""
    from pawn.data.split import rederive
    from pawn.evaluate.accuracy import evaluate_held_out

    cache_dir = s.cache_dir if s.cache_dir is not None else run.config.get("cache_dir")
    games = rederive(rec, s.split, cache_dir=cache_dir, warn=lambda m: log(f"warning: {m}"))
    res = evaluate_held_out(lm.model, games, seq_len=seq_len, batch_size=min(s.batch_size, 64),
                            prepend_outcome=layout.prepend_outcome, dtype=s.dtype, backbone=backbone_of(lm))
    return {"split": s.split, "run": str(run.path), "source": rec.repo_or_path, "fingerprint_sha256": rec.fingerprint,
            "filters": rec.filters, "rule": rec.rule, **res}


def eval_models(models: Sequence[LoadedModel], s: EvalSettings, log: Log = lambda _m: None,
                progress: Callable[[str, float], Any] = lambda _n, _t: None) -> Iterator[ModelEval]:
    """Evaluate each model on ``s.games`` random games (one game set per ply cap; skipped with
    ``s.pgn_only``) and, with ``s.pgn``, on the PGN's games by Elo band (each Lichess game once;
    for an adapter whose run records its split, counting the games it trained on), or, with
    ``s.split``, on an adapter run's held-out games; yield each model's result when it is done.
    ``progress(name, total)`` returns the ``(done, total, message)`` callback of one model's
    random-game pass (games done).

    Raises:
        UsageError: --pgn-min-ply above a model's ply cap, --pgn a pipe (``<(zstdcat …)``, read
            once) with several models; EvaluationError: unusable games or PGN,
            --split on a model without a split record; pawn.errors.DataError: the run's source
            changed since it recorded its split.
    """
    from pawn.engine import random_games
    from pawn.evaluate.accuracy import evaluate_games, evaluate_pgn

    edges, game_cache = elo_edges(s), {}
    if s.pgn is not None and s.pgn.is_fifo() and len(models) > 1:
        raise UsageError(f"--pgn {s.pgn} is a pipe, which can be read once: evaluate one checkpoint at a time on it, "
                         "or save the games to a file")
    for lm in models:
        run, rec = adapter_split(lm, required=s.split is not None) if (s.split is not None or s.pgn is not None) else (None, None)
        layout = Layout.resolve(s.prepend_outcome, lm.layout)
        plies, source = eval_max_ply(s.max_ply, lm, layout)
        if s.pgn is not None and s.pgn_min_ply > plies:
            raise UsageError(f"--pgn-min-ply ({s.pgn_min_ply}) exceeds the max_ply in use ({plies}, {source}); lower it or set --max-ply")
        log(f"{lm.name}: max_ply {plies} ({source})")
        seq_len = min(lm.config.max_seq_len, layout.seq_len(plies))
        t = time.perf_counter()
        try:
            lichess = held = rep = None
            if s.pgn is not None:  # first: an unusable file fails before the long random-game pass
                known = rec.ids if rec is not None else None
                lichess = evaluate_pgn(lm.model, str(s.pgn), seq_len=seq_len, elo_edges=edges, max_games_per_band=s.pgn_games_per_band,
                                       min_ply=s.pgn_min_ply, prepend_outcome=layout.prepend_outcome, batch_size=min(s.batch_size, 64),
                                       dtype=s.dtype, known_ids=known, backbone=backbone_of(lm))
            if s.split is not None:
                held = _held_out(lm, rec, run, s, seq_len, layout, log)
            if not s.pgn_only:
                if plies not in game_cache:
                    game_cache[plies] = random_games(s.games, plies, s.seed)
                g = game_cache[plies]
                rep = evaluate_games(lm.model, g.tokens, g.lengths, g.outcome, seq_len=seq_len, batch_size=s.batch_size,
                                     prepend_outcome=layout.prepend_outcome, dtype=s.dtype, late_ply=s.late_ply,
                                     progress=progress(f"{lm.name}: eval", s.games))
        except ValueError as e:
            if isinstance(e, PawnError):
                raise
            raise EvaluationError(str(e)) from None
        hint = None
        if s.pgn is not None and lm.adapter:
            if rec is None:
                hint = (f"note: {lm.source} is not inside its pawn adapt run, so --pgn games were not checked against its "
                        "training games" if run is None else
                        f"note: the run {run.path} records no split (split.json), so --pgn games were not checked against "
                        "its training games")
            elif rec.ids is None:
                hint = (f"note: the run's source {rec.repo_or_path} ({rec.kind}) has no game ids, so --pgn games were not "
                        "checked against its training games; --split val" + (" or --split test" if rec.n("test") else "")
                        + " evaluates its held-out games")
            else:
                hint = "--split val or --split test" if rec.n("test") else "--split val (retrain with --test-games N for a test split)"
        yield ModelEval(lm.name, lm.config.to_json_dict(), layout, plies, source, seq_len, s.games, s.seed, rep, lichess,
                        time.perf_counter() - t, held, None if rec is None else str(run.path), hint)


def eval_settings_record(s: EvalSettings, wall_s: float) -> dict[str, Any]:
    """The ``settings`` entry of the ``pawn eval --json`` file."""
    return {"games": s.games, "seed": s.seed, "max_ply": s.max_ply, "batch_size": s.batch_size, "late_ply": s.late_ply,
            "dtype": s.dtype, "variant": s.variant, "pgn": None if s.pgn is None else str(s.pgn), "elo_edges": list(elo_edges(s)),
            "pgn_games_per_band": s.pgn_games_per_band, "pgn_min_ply": s.pgn_min_ply, "split": s.split, "pgn_only": s.pgn_only,
            "wall_s": wall_s}


# ============================================================================ probe
@dataclass
class ModelProbes:
    """``pawn probe`` of one model: :func:`pawn.evaluate.probes.run_probes`'s result dict plus
    where its ply cap came from and the plot written (if any)."""

    name: str
    model_config: dict
    result: dict
    max_ply: int
    val_games: int
    wall_s: float
    plot: Optional[Path] = None

    def record(self) -> dict[str, Any]:
        return {"name": self.name, "model_config": self.model_config, **self.result, "wall_s": self.wall_s}


def probe_names(s: ProbeSettings) -> tuple[str, ...]:
    """The probes to run (``--probe``, else all nine).

    Raises:
        EvaluationError: an unknown probe name, or --plot without matplotlib.
    """
    from pawn.evaluate.probes import PROBES

    if s.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise EvaluationError("--plot needs matplotlib: pip install 'pawn[plot]' (or pip install matplotlib)") from None
    names = tuple(s.probe) if s.probe else tuple(PROBES)
    bad = sorted(set(names) - set(PROBES))
    if bad:
        raise EvaluationError(f"unknown probe(s) {bad}; choose from {', '.join(PROBES)}")
    return names


def probe_models(models: Sequence[LoadedModel], s: ProbeSettings, log: Log = lambda _m: None,
                 progress: Callable[[str, float], Any] = lambda _n, _t: None) -> Iterator[ModelProbes]:
    """Train the linear probes on each model and yield each model's result when it is done.
    ``progress(name, total)`` returns the ``(done, total, message)`` callback of one model."""
    from pawn.evaluate import probes

    names = probe_names(s)
    for lm in models:
        layout = Layout.resolve(s.prepend_outcome, lm.layout)
        plies, source = s.max_ply, "--max-ply"
        if plies is None:
            ctx = min(lm.trained_seq_len or lm.config.max_seq_len, lm.config.max_seq_len)
            plies = max(1, min(layout.max_ply(ctx), 256))
            source = f"min(trained context {ctx}, 256)" if lm.trained_seq_len else f"min(model context {ctx}, 256)"
        cfg = probes.ProbeConfig(n_train_games=s.games, n_val_games=s.val_games, max_ply=plies, seed=s.seed, n_epochs=s.epochs, lr=s.lr,
                                 weight_decay=s.weight_decay, prepend_outcome=layout.prepend_outcome, probes=names, dtype=s.dtype,
                                 feature_cache_gb=s.feature_cache_gb)
        log(f"{lm.name}: {s.games}/{cfg.val_games} games, max_ply {plies} ({source}), weight decay {s.weight_decay:g}, {counted(s.epochs, 'epoch')}")
        t0 = time.perf_counter()
        res = probes.run_probes(lm.model, cfg, progress=progress(lm.name, s.epochs + 1))
        res["settings"]["max_ply_source"] = source
        out = ModelProbes(lm.name, lm.config.to_json_dict(), res, plies, cfg.val_games, time.perf_counter() - t0)
        if s.plot is not None:
            out.plot = s.plot if len(models) == 1 else s.plot.with_name(f"{s.plot.stem}_{lm.name.replace('/', '_')}{s.plot.suffix}")
            probes.plot_probes(res, str(out.plot), title=f"{lm.name} linear probes")
        yield out


# ============================================================================ suite
SUITE_KIND = "pawn-eval-suite"
"""The ``kind`` of a ``pawn eval --suite`` JSON file (what :func:`pawn.report.report_kind` reads)."""
SUITE_VERSION = 1


@dataclass
class ModelSuite:
    """``pawn eval --suite`` of one model: its :class:`ModelEval`, :class:`ModelProbes` and the
    outcome diagnostics (:func:`pawn.evaluate.diagnostics.run_outcome_tests` and
    :func:`~pawn.evaluate.diagnostics.edge_case_diagnostics`); wall seconds per stage."""

    eval: ModelEval
    probes: ModelProbes
    outcome_prefix_trained: bool
    outcome_tests: dict
    edge_cases: dict
    diagnostics_settings: dict
    wall_s: dict[str, float]

    @property
    def name(self) -> str:
        return self.eval.name

    def record(self) -> dict[str, Any]:
        """The model's entry in the suite JSON: the ``pawn eval --json`` entry (``random_games``…)
        plus ``probes`` (``settings``, ``probes`` {probe: {layer: {...}}}, ``best``, ``max_ply``),
        ``diagnostics`` (``outcome_prefix_trained``, ``outcome_tests``, ``edge_cases``, ``settings``)
        and ``wall_s`` {eval, probes, diagnostics, total}."""
        rec = self.eval.record()
        rec["probes"] = {**self.probes.result, "max_ply": self.probes.max_ply, "val_games": self.probes.val_games}
        rec["diagnostics"] = {"outcome_prefix_trained": self.outcome_prefix_trained, "outcome_tests": self.outcome_tests,
                              "edge_cases": self.edge_cases, "settings": self.diagnostics_settings}
        rec["wall_s"] = dict(self.wall_s)
        return rec


def suite_probe_settings(s: EvalSettings) -> ProbeSettings:
    """The :class:`ProbeSettings` of ``pawn eval --suite``: ``--probe-games`` and ``--probe-epochs``,
    the eval's dtype, layout flag and variant, every other field at ``pawn probe``'s default (not read
    from ``PAWN_PROBE_*``: the suite is sized by its own flags)."""
    return ProbeSettings.model_construct(games=s.probe_games, epochs=s.probe_epochs, dtype=s.dtype,
                                         prepend_outcome=s.prepend_outcome, variant=s.variant)


def suite_path(checkpoint: str, json_out: Optional[Path]) -> Path:
    """Where ``pawn eval --suite`` writes: ``json_out``, else ``eval_suite_<checkpoint folder>.json``
    in the run directory the checkpoint belongs to (``RUN/checkpoints/NAME``, ``RUN/variants/NAME``:
    :func:`pawn.runs.run_of_checkpoint`, so ``pawn report RUN`` shows it), else in the current
    directory (a Hub id or a checkpoint outside its run)."""

    from pawn.runs import run_of_checkpoint

    if json_out is not None:
        return Path(json_out)
    local = Path(checkpoint)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", local.name if local.exists() else checkpoint).strip("_") or "model"
    run = run_of_checkpoint(local) if local.exists() else None
    return (run.path if run is not None else Path(".")) / f"eval_suite_{stem}.json"


def suite_settings_record(s: EvalSettings, wall_s: float) -> dict[str, Any]:
    """The ``settings`` entry of the suite JSON: the eval's, the probe and diagnostic sizes."""
    ps = suite_probe_settings(s)
    return {**eval_settings_record(s, wall_s), "suite": True, "probe_games": ps.games, "probe_epochs": ps.epochs,
            "probe_seed": ps.seed, "probe_weight_decay": ps.weight_decay, "diagnostic_games": s.diagnostic_games,
            "edge_positions": s.edge_positions}


def suite_models(models: Sequence[LoadedModel], s: EvalSettings, log: Log = lambda _m: None,
                 progress: Callable[[str, float], Any] = lambda _n, _t: None) -> Iterator[ModelSuite]:
    """``pawn eval --suite`` (the v2 ``run_evals_backbone``): for each model the random-game eval
    (:func:`eval_models`, ``s.games``), the nine linear probes (:func:`probe_models` with
    :func:`suite_probe_settings`) and the outcome diagnostics (spec eval §3.3, gated off for a model
    not trained with the outcome prefix, and §3.5 edge cases, ``s.edge_positions`` per category);
    yields each model's :class:`ModelSuite` when it is done. ``progress(name, total)`` returns the
    ``(done, total, message)`` callback of one stage of one model (eval, probes, diagnostics).

    Raises:
        EvaluationError, UsageError: as :func:`eval_models` and :func:`probe_models`.
    """
    from pawn.evaluate.diagnostics import TESTS, edge_case_diagnostics, run_outcome_tests
    from pawn.metrics import EDGE_LABELS

    ps = suite_probe_settings(s)
    n_tests, n_edge = len(TESTS), len(EDGE_LABELS)
    for lm in models:
        t0 = time.perf_counter()
        ev = next(eval_models([lm], s, log=log, progress=progress))
        t1 = time.perf_counter()
        pr = next(probe_models([lm], ps, log=log, progress=lambda n, t: progress(f"{n}: probes", t)))
        t2 = time.perf_counter()
        trained = Layout.resolve(s.prepend_outcome, lm.layout).prepend_outcome
        bar = progress(f"{lm.name}: diagnostics", n_tests + n_edge)
        n = s.diagnostic_games
        dset = {"n_per_outcome": n, "n_per_bucket": n, "n_per_pair": n, "n_per_scenario": n, "seed": 0,
                "batch_size": min(s.batch_size, 32), "edge_positions": s.edge_positions}
        tests = run_outcome_tests(lm.model, outcome_prefix_trained=trained, n_per_outcome=n, n_per_bucket=n, n_per_pair=n,
                                  n_per_scenario=n, seed=0, batch_size=dset["batch_size"], dtype=s.dtype,
                                  progress=lambda d, _t, m: bar(d, n_tests + n_edge, m))
        edges = edge_case_diagnostics(lm.model, n_per_category=s.edge_positions, prepend_outcome=trained, dtype=s.dtype,
                                      progress=lambda d, _t, m: bar(n_tests + d, n_tests + n_edge, m))
        t3 = time.perf_counter()
        yield ModelSuite(ev, pr, trained, tests, edges, dset,
                         {"eval": t1 - t0, "probes": t2 - t1, "diagnostics": t3 - t2, "total": t3 - t0})


# ============================================================================ generate
@dataclass
class RandomGames:
    """``pawn generate --random``: engine games and the files written."""

    n_games: int
    mean_game_length: float
    termination_counts: dict[str, int]
    written: list[Path] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        return {"n_games": self.n_games, "mean_game_length": self.mean_game_length, "termination_counts": self.termination_counts}


@dataclass
class ModelGames:
    """``pawn generate`` of one model: :func:`pawn.evaluate.generation.analyze`'s statistics,
    the diagnostics (with ``--diagnostics``) and the files written."""

    name: str
    model_config: dict
    stats: dict
    outcome_tests: Optional[dict] = None
    edge_cases: Optional[dict] = None
    written: list[Path] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        rec = {"name": self.name, "model_config": self.model_config, "generation": self.stats}
        if self.outcome_tests is not None:
            rec.update(outcome_tests=self.outcome_tests, edge_cases=self.edge_cases)
        return rec


def generate_settings_record(s: GenerateSettings) -> dict[str, Any]:
    """The ``settings`` entry of the ``pawn generate --json`` file."""
    return s.model_dump(include={"checkpoint", "random", "games", "seed", "max_ply", "temperature", "top_k", "mask_illegal",
                                 "outcome", "prefix", "kv_cache", "batch_size"})


def check_generate(s: GenerateSettings) -> None:
    """Raises UsageError (exit code 2) unless exactly one of --checkpoint and --random is given."""
    if (s.checkpoint is None) == (not s.random):
        raise UsageError("give exactly one of --checkpoint CKPT or --random")


def _suffixed(path: Optional[Path], suffix: str) -> Optional[Path]:
    return None if path is None else path.with_name(path.stem + suffix + path.suffix)


def generate_random(s: GenerateSettings) -> RandomGames:
    """``s.games`` uniformly random engine games, written to ``s.out`` / ``s.pgn_out``."""
    import numpy as np

    from pawn.engine import random_games
    from pawn.evaluate.generation import games_table, write_games

    g = random_games(s.games, s.max_ply or 512, s.seed)
    table = games_table(g.tokens, g.lengths, g.termination)
    write_games(table, s.out, s.pgn_out, event="PAWN random games")
    names, counts = np.unique(table.column("termination_name").to_numpy(zero_copy_only=False), return_counts=True)
    return RandomGames(s.games, float(g.lengths.mean()), {str(k): int(v) for k, v in zip(names, counts)},
                       [p for p in (s.out, s.pgn_out) if p is not None])


def _prefix_tokens(s: GenerateSettings):
    """``--prefix`` as (moves [games, 512], lengths [games]) or (None, None).

    Raises:
        EvaluationError: a prefix that is no readable game or UCI move list.
    """
    import numpy as np

    from pawn.engine import parse_pgn, uci_to_tokens

    if s.prefix is None:
        return None, None
    try:
        if Path(s.prefix).is_file():
            pg = parse_pgn(s.prefix, max_ply=512, min_ply=1)
            if len(pg) == 0:
                raise ValueError(f"no readable game in {s.prefix}")
            t1, l1 = pg.tokens[:1], pg.lengths[:1]
        else:
            t1, l1 = uci_to_tokens([s.prefix.split()], 512)
    except ValueError as e:
        raise EvaluationError(f"bad --prefix: {e}") from None
    return np.repeat(t1, s.games, 0), np.repeat(l1, s.games, 0)


def generate_models(models: Sequence[LoadedModel], s: GenerateSettings, log: Log = lambda _m: None) -> Iterator[ModelGames]:
    """Sample ``s.games`` games from each model, write them, run the diagnostics if asked; yield
    each model's :class:`ModelGames` when it is done.

    Raises:
        EvaluationError: a bad --prefix or a setting the model cannot use.
    """
    from pawn.evaluate.generation import analyze, autoregressive_generate, games_table, write_games
    from pawn.vocab import OUTCOME_NAMES, OUTCOME_TOKEN_BASE

    token = None if s.outcome is None else OUTCOME_TOKEN_BASE + OUTCOME_NAMES.index(s.outcome)
    pre_moves, pre_len = _prefix_tokens(s)
    conditioned = Layout.of(token is not None)  # the outcome slot is used only when conditioning
    for lm in models:
        trained = Layout.resolve(s.outcome_prefix_trained, lm.layout).prepend_outcome
        T = lm.config.max_seq_len if s.max_ply is None else min(lm.config.max_seq_len, conditioned.seq_len(s.max_ply))
        try:
            res = autoregressive_generate(lm.model, s.games, outcome_token=token, prefix_moves=pre_moves, prefix_lengths=pre_len,
                                          max_seq_len=T, temperature=s.temperature, top_k=s.top_k, mask_illegal=s.mask_illegal,
                                          batch_size=s.batch_size, seed=s.seed, use_kv_cache=s.kv_cache, dtype=s.dtype)
        except ValueError as e:
            raise EvaluationError(str(e)) from None
        out = ModelGames(lm.name, lm.config.to_json_dict(), analyze(res, s.outcome))
        if s.out is not None or s.pgn_out is not None:
            table = games_table(res.moves, res.game_lengths, res.term_codes, {"forfeit_ply": res.forfeit_ply.tolist()})
            suffix = "" if len(models) == 1 else "_" + lm.name.replace("/", "_")
            o, p = _suffixed(s.out, suffix), _suffixed(s.pgn_out, suffix)
            write_games(table, o, p, event=f"PAWN {lm.name}")
            out.written = [f for f in (o, p) if f is not None]
        if s.diagnostics:
            from pawn.evaluate.diagnostics import edge_case_diagnostics, run_outcome_tests

            out.outcome_tests = run_outcome_tests(lm.model, outcome_prefix_trained=trained, seed=s.seed, batch_size=min(s.batch_size, 32),
                                                  use_kv_cache=s.kv_cache, dtype=s.dtype)
            out.edge_cases = edge_case_diagnostics(lm.model, n_per_category=s.edge_positions, prepend_outcome=trained, dtype=s.dtype)
        yield out


__all__ = ["EvaluationError", "load", "ModelEval", "eval_models", "ModelSuite", "suite_models", "suite_path",
           "suite_settings_record", "suite_probe_settings", "SUITE_KIND", "SUITE_VERSION", "check_eval", "elo_edges", "eval_max_ply", "eval_settings_record",
           "ModelProbes", "probe_models", "probe_names", "RandomGames", "ModelGames", "generate_random", "generate_models",
           "generate_settings_record", "check_generate"]
