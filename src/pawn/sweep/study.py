"""The sweep driver: create or load the study, run trials (in this process, or in ``workers``
processes on the same storage), and report.

One worker's loop (:func:`run_trials`) claims each trial under the study's lock
(:func:`claim_trial`: fail stale trials of killed workers, count the COMPLETE, PRUNED and live
RUNNING trials of the whole study (:func:`n_counted`), ask, first heartbeat, draw), runs it with
heartbeats, and tells Optuna the verdict — so every worker, and a re-run of the same command after
a stop, works toward the same total, and W workers stop at it (Optuna's ``study.optimize`` checks
stale trials and claims WAITING ones without a lock between processes, and its
``MaxTrialsCallback`` counts finished trials only).
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState
from pydantic import ValidationError

from pawn.errors import PawnError
from pawn.fileio import write_json
from pawn.settings import PATH, PretrainConfig, fields_with, format_validation_error, read_config_file, relative_config_path, resolve_config_paths
from pawn.sweep.objective import ask_quietly, failed_elsewhere, log_stale, make_objective, n_counted, n_finished
from pawn.sweep.settings import SweepSettings
from pawn.sweep.space import Space, derive, load_space, suggest
from pawn.sweep.storage import (SharedStudy, creation_lock, fail_running_trials, open_storage, retry_parent,
                                shown_url, storage_url)
from pawn.sweep.trials import PretrainTrialRunner, SweepError, TrialRunner, raise_if_interrupted

BEST_CONFIG = "best_config.json"


@dataclass
class SweepResult:
    """What ``pawn sweep`` reports.

    Attributes:
        study: the Optuna study (loaded from the storage). storage: its URL.
        trials: every trial as a JSON-able dict (:func:`trial_record`).
        best: the best COMPLETE trial's record, or None. best_config: the written
            ``best_config.json`` (a ``pawn <command> --config`` file), or None.
        command: the trial command (``pretrain`` / ``adapt``).
    """

    study: optuna.Study
    storage: str
    trials: list[dict[str, Any]]
    best: Optional[dict[str, Any]]
    best_config: Optional[Path]
    command: str


def make_pruner(s: SweepSettings) -> optuna.pruners.BasePruner:
    """``hyperband`` → ``HyperbandPruner()``; ``median`` → ``MedianPruner(n_startup_trials=
    pruner_startup_trials)``; ``none`` → ``NopPruner``."""
    if s.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner()
    if s.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=s.pruner_startup_trials, n_warmup_steps=0)
    return optuna.pruners.NopPruner()


def sampler_seed(seed: Optional[int], worker: int, n_trials: int) -> Optional[int]:
    """The sampler seed of one worker start: ``numpy.random.SeedSequence([seed, worker,
    n_trials])``'s first 32-bit word, or None without ``--seed``.

    ``n_trials`` is the number of trials the study already holds (any state), so a start that
    continues a study (the same command with a larger ``--trials``, a worker restarted after a
    kill) draws new parameters instead of repeating the first start's draws; the same command on
    a fresh study draws the same parameters again. ``worker`` (``PAWN_SWEEP_WORKER``) keeps the
    workers of ``--workers`` apart."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([seed, worker, n_trials]).generate_state(1)[0])


def make_sampler(s: SweepSettings, n_trials: int = 0) -> optuna.samplers.BaseSampler:
    """``tpe`` → ``TPESampler(seed)``; ``random`` → ``RandomSampler(seed)``, seeded by
    :func:`sampler_seed` from ``--seed``, this worker's index (``PAWN_SWEEP_WORKER``) and the
    ``n_trials`` the study holds at this start."""
    seed = sampler_seed(s.seed, int(os.environ.get("PAWN_SWEEP_WORKER", "0") or 0), n_trials)
    return optuna.samplers.TPESampler(seed=seed) if s.sampler == "tpe" else optuna.samplers.RandomSampler(seed=seed)


def open_study(s: SweepSettings) -> tuple[optuna.Study, str]:
    """:func:`open_shared`'s ``(study, storage URL)``."""
    shared = open_shared(s)
    return shared.study, shared.url


def open_shared(s: SweepSettings, log: Callable[[str], None] = print) -> SharedStudy:
    """Create the study, or load it when it exists (``load_if_exists``), under the storage's
    creation lock (:func:`pawn.sweep.storage.creation_lock`), with a sampler seeded for this
    start (:func:`make_sampler` with the study's trial count). ``log``: the notes of a server
    database that does not answer for a while (:class:`pawn.sweep.storage.Patience`).

    Raises:
        SweepError: the study exists with another run type or strategy (one line).
        pawn.sweep.storage.StorageError: the storage cannot be opened.
    """
    url = storage_url(s.storage, s.out)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with creation_lock(url, s.out, s.db_retry_s, log):
        storage = open_storage(url, heartbeat_s=s.heartbeat_s, grace_s=s.grace_s, retry_s=s.db_retry_s, log=log)
        study = optuna.create_study(study_name=s.resolved_study_name, storage=storage, direction="minimize",
                                    sampler=optuna.samplers.RandomSampler(), pruner=make_pruner(s), load_if_exists=True)
        study = optuna.load_study(study_name=study.study_name, storage=storage, pruner=make_pruner(s),
                                  sampler=make_sampler(s, len(study.get_trials(deepcopy=False))))
        attrs = study.user_attrs
        if "sweep_id" not in attrs:  # this study's identity in a bucket it syncs to (claim_bucket)
            study.set_user_attr("sweep_id", uuid.uuid4().hex)
        if "run_type" not in attrs:
            study.set_user_attr("run_type", s.run_type)
            study.set_user_attr("space", s.space_name)
        elif (attrs.get("run_type"), attrs.get("space")) != (s.run_type, s.space_name):
            raise SweepError(f"study {s.resolved_study_name!r} in {shown_url(url)} is a {attrs.get('run_type')} sweep over "
                             f"{attrs.get('space')!r}, not {s.run_type} over {s.space_name!r}; choose another --study-name")
    return SharedStudy(study, storage, url, s.out, s.grace_s, s.db_retry_s, log)


_CACHE_OPTIONS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
                  "jax_persistent_cache_min_entry_size_bytes")


@contextlib.contextmanager
def compilation_cache(path: Optional[Path], log: Callable[[str], None] = print):
    """Within the block, JAX's persistent compilation cache is on in ``path`` for this process:
    every executable is written, however small or fast to compile
    (``jax_persistent_cache_min_compile_time_secs = 0``, no minimum entry size), and read back
    by later compilations of the same program — so sweep workers and re-runs of a sweep load
    what an earlier trial compiled instead of compiling it again (issue 15). The previous
    settings are restored on exit. ``None``: nothing changes.

    A damaged entry (a torn write, a full disk, a file altered by hand) is removed when it is
    read, with one ``log`` line, so the program is compiled and its entry written again
    (:func:`_repairing_cache_reads`); JAX alone warned and recompiled on every later run without
    rewriting it (its cache does not overwrite an existing entry).

    Raises:
        SweepError: the directory cannot be created (one line).
    """
    if path is None:
        yield
        return
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SweepError(f"--compilation-cache {path}: cannot create it ({e.strerror or e})") from None
    import jax
    from jax.experimental.compilation_cache import compilation_cache as cc

    before = {k: getattr(jax.config, k) for k in _CACHE_OPTIONS}
    cc.reset_cache()  # a cache already opened (another directory, or none) is not kept
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    try:
        with _repairing_cache_reads(Path(path), log):
            yield
    finally:
        for k, v in before.items():
            jax.config.update(k, v)
        cc.reset_cache()


@contextlib.contextmanager
def _repairing_cache_reads(path: Path, log: Callable[[str], None]):
    """Within the block, a persistent-cache entry in ``path`` that JAX cannot read back
    (decompress or deserialize) is deleted (``<key>-cache`` and ``<key>-atime``, the files of
    JAX's ``LRUCache``) and reported once per entry; the read then counts as a miss, so JAX
    compiles and writes the entry anew. Wraps ``jax._src.compilation_cache.get_executable_and_time``
    (JAX has no public hook for it); a JAX without that function is left as it is."""
    from jax._src import compilation_cache as jcc

    original = getattr(jcc, "get_executable_and_time", None)
    if original is None:
        yield
        return
    reported: set[str] = set()

    def get_executable_and_time(cache_key, *args, **kwargs):
        try:
            return original(cache_key, *args, **kwargs)
        except Exception as e:  # noqa: BLE001 -- any failure to read an entry back is a damaged entry
            for suffix in ("-cache", "-atime"):
                with contextlib.suppress(FileNotFoundError):
                    (path / f"{cache_key}{suffix}").unlink()
            if cache_key not in reported:
                reported.add(cache_key)
                log(f"compilation cache {path}: entry {cache_key[:40]} could not be read "
                    f"({type(e).__name__}: {' '.join(str(e).split())[:120]}); removed, compiled and written again")
            return None, None

    jcc.get_executable_and_time = get_executable_and_time
    try:
        yield
    finally:
        jcc.get_executable_and_time = original


def trained_settings() -> tuple[type, ...]:
    """The settings classes of the commands a sweep trains with (:class:`pawn.settings.PretrainConfig`,
    :class:`pawn.train.adapt_config.AdaptSettings`): their fields tagged :data:`pawn.settings.PATH`
    (:func:`pawn.settings.fields_with`) are the config keys read relative to ``--base-config``
    and written relative to ``best_config.json``."""
    from pawn.train.adapt_config import AdaptSettings

    return PretrainConfig, AdaptSettings


def make_runner(s: SweepSettings, log: Callable[[str], None], sinks: Sequence[Callable[[Path], Any]] = ()) -> TrialRunner:
    """The trial runner of ``s.run_type``, with the fixed settings of ``--base-config`` (and
    ``--push-to-bucket`` over its ``push_to_bucket``); each trial's run opens the record ``sinks``
    (e.g. its live ``report.html``).

    Raises:
        SweepError: a run type whose trainer is not available, or unusable base settings.
    """
    base = resolve_config_paths(read_config_file(s.base_config), s.base_config, *trained_settings()) if s.base_config is not None else {}
    if s.push_to_bucket is not None:  # --push-to-bucket over the base config's
        base["push_to_bucket"] = s.push_to_bucket
    try:
        if s.run_type == "pretrain":
            if s.data is not None:
                base["corpus_dir"] = s.data
            return PretrainTrialRunner(base, log=log, sinks=sinks)
    except ValidationError as e:
        raise SweepError(f"--base-config {s.base_config}: {format_validation_error(e)}") from None
    if importlib.util.find_spec("pawn.train.adapt") is None:
        raise SweepError("adapter sweeps need pawn adapt, which this build does not have yet; use --run-type pretrain")
    from pawn.sweep.adapt import AdaptTrialRunner

    return AdaptTrialRunner(base, strategy=s.strategy, checkpoint=s.checkpoint, data=s.data, log=log, sinks=sinks)


def _probes(d: Any) -> list[Any]:
    """The values :func:`prepare_space` validates a space entry at: a float/int distribution's
    low and high ends, every categorical choice, or the fixed value."""
    if isinstance(d, (FloatDistribution, IntDistribution)):
        return [d.low, d.high] if d.high != d.low else [d.low]
    if isinstance(d, CategoricalDistribution):
        return list(d.choices)
    return [d]


def _show(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else json.dumps(v, default=str)


def prepare_space(s: SweepSettings, runner: TrialRunner, log: Callable[[str], None] = print) -> Space:
    """The search space of ``s`` (:func:`pawn.sweep.space.load_space`), checked against the
    trial command's settings before any trial is created, so that settings every trial would
    fail on are one error instead of a table of failed trials:

    - every ``--base-config`` key and every space key (after the §6.1 renames,
      ``runner.setting_names``) must be a setting of the trial command;
    - a field that ``--base-config`` sets is FIXED to that value: its §6.1 entry is removed from
      the space (one log line says so) unless the ``--space`` file names it, which searches it;
    - the trial settings must validate with the base config alone, with every space entry at
      its first probe value, and with each entry in turn at each probe value (a distribution's
      low and high ends, each categorical choice; :func:`_probes`), the others at their first.

    Also runs the runner's own ``check()`` (a local backbone that must load, a local ``--data``
    path that must exist).

    Raises:
        SweepError: one line naming the file (``--base-config`` / ``--space``), the field and,
            for a space entry, the value refused.
        pawn.sweep.space.SpaceError, pawn.settings.ConfigFileError: a malformed ``--space`` file.
    """
    space = load_space(s.space_name, s.space)
    named = set(read_config_file(s.space)) if s.space is not None else set()
    base = dict(getattr(runner, "base", {}))
    fields = getattr(runner, "settings_fields", None)
    names_of = getattr(runner, "setting_names", lambda k: (k,))
    where_base = f"--base-config {s.base_config}" if s.base_config is not None else "base settings"

    def where_space(k: str) -> str:
        return f"--space {s.space}" if k in named else f"built-in search space {s.space_name!r} (pawn.sweep.space.SPACES)"

    if fields is not None:
        unknown = [k for k in base if k not in fields]
        if unknown:
            raise SweepError(f"{where_base}: {', '.join(unknown)}: not a setting of pawn {runner.command}")
        for k in space:
            bad = [n for n in names_of(k) if n not in fields]
            if bad:
                raise SweepError(f"{where_space(k)}: {k}: not a setting of pawn {runner.command}"
                                 + (f" (sets {', '.join(bad)})" if bad != [k] else ""))
    for k in list(space):
        fixed_by = [n for n in names_of(k) if n in base]
        if fixed_by and k not in named:
            del space[k]
            log(f"{where_base} sets {', '.join(f'{n} = {_show(base[n])}' for n in fixed_by)}: {k} is fixed, "
                f"not searched (name it in --space to search it)")
    runner_check = getattr(runner, "check", None)
    if runner_check is not None:
        runner_check()
    scratch = s.out / "_check"

    def refused(params: dict[str, Any]) -> Optional[str]:
        try:
            runner.config(derive(s.space_name, params), scratch)
        except ValidationError as e:
            return format_validation_error(e)
        except PawnError as e:
            return " ".join(str(e).split())
        return None

    probes = {k: _probes(d) for k, d in space.items()}
    ref = {k: v[0] for k, v in probes.items()}
    err = refused(ref)
    if err is not None:
        base_err = refused({})
        if base_err is not None:
            raise SweepError(f"{where_base}: {base_err}")
        for k in ref:  # the entry whose removal makes the settings valid is the one to name
            if refused({kk: vv for kk, vv in ref.items() if kk != k}) is None:
                raise SweepError(f"{where_space(k)}: {k} = {_show(ref[k])}: {err}")
        shown = ", ".join(f"{k} = {_show(v)}" for k, v in ref.items())
        raise SweepError(f"search space: the trial settings are refused at {shown}: {err}")
    for k, values in probes.items():
        for v in values[1:]:
            err = refused({**ref, k: v})
            if err is not None:
                raise SweepError(f"{where_space(k)}: {k} = {_show(v)}: {err}")
    return space


def run_worker(s: SweepSettings, *, log: Callable[[str], None] = print, runner: Optional[TrialRunner] = None,
               space: Optional[Space] = None) -> optuna.Study:
    """One worker: run trials until the study holds ``s.trials`` finished ones, counting the trials
    other workers are running (:func:`n_counted`), or until ``s.timeout``; each in this process. At
    most ``trials − finished`` attempts per call, so a run of failures ends (re-run to continue). KeyboardInterrupt propagates after Optuna has
    marked the running trial FAILED (``fail_reason`` "interrupted (Ctrl-C)"). JAX's persistent
    compilation cache is on in ``s.compilation_cache_dir`` meanwhile (:func:`compilation_cache`).
    ``space``: the space already checked by :func:`prepare_space` with ``runner`` (else both are
    made and checked here).

    Raises:
        SweepError, pawn.sweep.space.SpaceError, pawn.sweep.storage.StorageError: before any trial.
    """
    if space is None:  # settings every trial would fail on: one error, before the study exists
        runner = runner or make_runner(s, log)
        space = prepare_space(s, runner, log)
    with compilation_cache(s.compilation_cache_dir, log):
        return _run_worker(s, log=log, runner=runner, space=space)


def _run_worker(s: SweepSettings, *, log: Callable[[str], None], runner: TrialRunner, space: Space) -> optuna.Study:
    """:func:`run_worker` inside its compilation cache."""
    if "PAWN_SWEEP_WORKER" in os.environ:
        log(f"worker {os.environ['PAWN_SWEEP_WORKER']} (pid {os.getpid()}): {_show_env(dict(os.environ))}")
    shared = open_shared(s, log)
    study = shared.study
    with shared.lock():
        if s.fail_running:
            failed = fail_running_trials(shared, "marked failed by --fail-running")
            if failed:
                log(f"marked RUNNING trials {failed} as failed (--fail-running)")
        log_stale(shared.fail_stale(), shared, log)
        finished, counted = n_finished(study), n_counted(study)
    remaining = s.trials - finished
    if remaining <= 0:
        log(f"study {study.study_name} already holds {s.trials} finished trials")
        return study
    if counted >= s.trials:
        running = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
        log(f"study {study.study_name} holds {finished} finished trials and RUNNING trials {running}, "
            f"{s.trials} in all: nothing left for this worker. A killed worker's trial is failed and retried once "
            f"its heartbeat is older than --grace-s ({s.grace_s} s); --fail-running fails them now")
        return study
    # ERROR: a failed trial is already one "trial N failed: reason" line of ours; Optuna's own
    # warning would repeat it as "The value nan is not acceptable"
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    if s.population > 1:
        from pawn.sweep.population import run_population_worker

        run_population_worker(s, shared, runner, space, remaining, log)
        return study
    run_trials(s, shared, make_objective(s, runner, space, log), space, remaining, log)
    _log_short(s, study, log)
    return study


def _log_short(s: SweepSettings, study: optuna.Study, log: Callable[[str], None]) -> None:
    """One line when this worker stops short of ``s.trials`` finished trials because other trials
    are RUNNING (other workers', or a killed worker's not yet stale); not in a spawned worker,
    whose siblings' trials those are."""
    finished = n_finished(study)
    running = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    if finished < s.trials and running and "PAWN_SWEEP_WORKER" not in os.environ:
        log(f"stopped at {finished} of {s.trials} finished trials: RUNNING trials {running} make up the rest. If no "
            f"other worker runs them, re-run after --grace-s ({s.grace_s} s) to retry them, or use --fail-running")


def claim_trial(s: SweepSettings, shared: SharedStudy, space: Space, log: Callable[[str], None]) -> Optional[optuna.Trial]:
    """Under the study's lock: fail stale trials (one retry each), and unless the study already
    holds ``s.trials`` counted trials (:func:`n_counted`), take the next trial — a WAITING one
    (a retry, an enqueued trial) or a new one — record its first heartbeat and draw its
    parameters, so that the next worker's claim sees them. Returns the trial, or None."""
    with shared.lock():
        log_stale(shared.fail_stale(), shared, log)
        if n_counted(shared.study) >= s.trials:
            return None
        trial = ask_quietly(shared.study)
        shared.begin(trial)
        suggest(trial, space)
        return trial


def run_trials(s: SweepSettings, shared: SharedStudy, objective: Callable[[optuna.Trial], float], space: Space,
               remaining: int, log: Callable[[str], None]) -> None:
    """One worker's trial loop (in place of ``study.optimize``, whose stale check and claim are
    not serialised between workers): up to ``remaining`` attempts, each a :func:`claim_trial`,
    ``objective`` with heartbeats every ``s.heartbeat_s`` seconds, and ``study.tell``; stops when
    the study holds ``s.trials`` counted trials or after ``s.timeout`` seconds.

    A trial that another worker's stale check failed while it ran (this worker suspended,
    SIGSTOP, a swap storm) is noticed at its next report or attribute write
    (``UpdateFinishedTrialError``): one line says so and the loop goes on (that trial is not
    counted among the attempts: its retry usually comes next). An exception from
    ``objective`` (KeyboardInterrupt included) marks the trial FAIL and propagates.
    """
    t0, attempts = time.monotonic(), 0
    while attempts < remaining:
        raise_if_interrupted()
        if s.timeout is not None and time.monotonic() - t0 > s.timeout:
            break
        trial = claim_trial(s, shared, space, log)
        if trial is None:
            break
        attempts += 1
        value, state, error = None, TrialState.FAIL, None
        with shared.beating([trial], s.heartbeat_s):
            try:
                value = objective(trial)
                # a Ctrl-C Python dropped after the trial's last chunk check (a weakref callback
                # in its final steps): the trial is interrupted, as if it had been raised there
                raise_if_interrupted()
                state = TrialState.COMPLETE if math.isfinite(value) else TrialState.FAIL
            except optuna.TrialPruned:
                state = TrialState.PRUNED
            except optuna.exceptions.UpdateFinishedTrialError:
                state = None
            except BaseException as e:  # noqa: BLE001 -- recorded, then re-raised
                error = e
        if state is None or shared.trial(trial.number).state.is_finished():
            log(failed_elsewhere(shared, trial.number))
            attempts -= 1  # not this worker's failure: its retry is another attempt
            continue
        shared.study.tell(trial, value if state == TrialState.COMPLETE else None, state=state, skip_if_finished=True)
        if error is not None:
            raise error
        gc.collect()
    raise_if_interrupted()  # one dropped during the last trial's gc.collect() or the loop's exit


SHARED_MEMORY_FRACTION = 0.9
"""Share of one accelerator's memory that the workers placed on it split between them."""
WORKER_ENV_KEYS = ("CUDA_VISIBLE_DEVICES", "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION")


def visible_gpus(environ: dict[str, str]) -> list[str]:
    """The CUDA devices the workers may use: ``CUDA_VISIBLE_DEVICES`` when set (its comma-separated
    entries), else — unless ``JAX_PLATFORMS`` excludes CUDA — the GPUs ``nvidia-smi -L`` lists
    (indices as strings); ``[]`` when there are none (CPU)."""
    if "CUDA_VISIBLE_DEVICES" in environ:
        return [d.strip() for d in environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip() and d.strip() != "-1"]
    platforms = environ.get("JAX_PLATFORMS", "")
    if platforms and not any(p in platforms for p in ("cuda", "gpu")):
        return []
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(line for line in listed.splitlines() if line.startswith("GPU "))]


def worker_env(index: int, workers: int, environ: dict[str, str], gpus: list[str]) -> dict[str, str]:
    """The environment of worker ``index`` of ``workers`` (``PAWN_SWEEP_WORKER`` = index).

    With accelerators (``gpus``, :func:`visible_gpus`), worker i sees one device,
    ``gpus[i % len(gpus)]`` (``CUDA_VISIBLE_DEVICES``): a worker per device when there are at
    least as many devices as workers. The k > 1 workers that share one device do not let JAX
    preallocate (``XLA_PYTHON_CLIENT_PREALLOCATE=false``, which would give the first 75 % of the
    device) and each may use ``SHARED_MEMORY_FRACTION / k`` of it
    (``XLA_PYTHON_CLIENT_MEM_FRACTION``). Values the user set for these two variables are kept.
    """
    env = {**environ, "PAWN_SWEEP_WORKER": str(index)}
    if not gpus:
        return env
    slot = index % len(gpus)
    env["CUDA_VISIBLE_DEVICES"] = gpus[slot]
    sharing = len(range(slot, workers, len(gpus)))
    if sharing > 1 and "XLA_PYTHON_CLIENT_MEM_FRACTION" not in environ:
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{SHARED_MEMORY_FRACTION / sharing:.3f}"
    return env


def _show_env(env: dict[str, str]) -> str:
    shown = [f"{k}={env[k]}" for k in WORKER_ENV_KEYS if k in env]
    return ", ".join(shown) if shown else "no accelerator settings"


def spawn_workers(s: SweepSettings, *, log: Callable[[str], None] = print) -> None:
    """Start ``s.workers`` worker processes (``python -m pawn.cli sweep --config <out>/
    worker_config.json``, each ``--workers 1``) on the same storage and wait for them. The study
    is created here first, so the workers only load it. Each worker's device and memory
    settings: :func:`worker_env`.

    Raises:
        SweepError: a worker exited with an error (its exit code named; its messages were shown).
        KeyboardInterrupt: after the workers have been interrupted and have exited.
    """
    open_study(s)
    cfg = s.out / "worker_config.json"
    data = {k: v for k, v in s.model_dump(mode="json", exclude_none=True).items() if k != "json_out"}
    write_json(cfg, {**data, "workers": 1}, what="worker config")
    cmd = [sys.executable, "-m", "pawn.cli", "sweep", "--config", str(cfg)]
    gpus = visible_gpus(dict(os.environ))
    envs = [worker_env(i, s.workers, dict(os.environ), gpus) for i in range(s.workers)]
    procs = [subprocess.Popen(cmd, env=env) for env in envs]
    log(f"started {s.workers} workers (pids {', '.join(str(p.pid) for p in procs)})"
        + (f" on devices {', '.join(env['CUDA_VISIBLE_DEVICES'] for env in envs)}" if gpus else ""))
    try:
        codes = [p.wait() for p in procs]
    except KeyboardInterrupt:
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        raise
    bad = [(i, c) for i, c in enumerate(codes) if c != 0]
    if bad:
        raise SweepError("worker(s) failed: " + ", ".join(f"#{i} exit {c}" for i, c in bad))


def trial_record(t: optuna.trial.FrozenTrial, retried_as: Optional[int] = None) -> dict[str, Any]:
    """One trial as JSON: number, state, value (best val loss), params, reason, fail_reason,
    steps, run_dir, intermediate val losses by global step, population, start/end times,
    retry_of / retried_as (trial numbers). A FAIL trial without a recorded ``fail_reason`` that
    was retried (``retried_as``) was failed by a stale-heartbeat check, which says so."""
    fail_reason = t.user_attrs.get("fail_reason")
    if fail_reason is None and t.state == TrialState.FAIL and retried_as is not None:
        fail_reason = f"no heartbeat for over --grace-s (worker killed or suspended); retried as trial {retried_as}"
    return {
        "number": t.number, "state": t.state.name, "value": t.value, "params": t.params,
        "reason": t.user_attrs.get("reason"), "fail_reason": fail_reason,
        "retry_of": retry_parent(t), "retried_as": retried_as, "duplicate_of": t.user_attrs.get("duplicate_of"),
        "steps": t.user_attrs.get("steps"), "run_dir": t.user_attrs.get("run_dir"),
        "intermediate": {str(k): v for k, v in sorted(t.intermediate_values.items())},
        "population": t.user_attrs.get("population"),
        "started": t.datetime_start.isoformat() if t.datetime_start else None,
        "finished": t.datetime_complete.isoformat() if t.datetime_complete else None,
    }


def best_config(study: optuna.Study, config_dir: Path, path_fields: Iterable[str] = ()) -> Optional[dict[str, Any]]:
    """The best COMPLETE trial's settings as a ``--config`` file for its command, to be written
    into ``config_dir``: its stored config without ``out`` and ``resume`` (give ``--out`` when
    re-running), each local path of ``path_fields`` (the fields tagged :data:`pawn.settings.PATH`
    of :func:`trained_settings`) given relative (a path that exists from here) spelled relative to
    ``config_dir`` (:func:`pawn.settings.relative_config_path`; ``--config`` resolves it back), and
    ``push_to_bucket`` as the bucket alone (``owner/name``: not the trial's folder), or None."""
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.value is not None]
    if not done:
        return None
    best = min(done, key=lambda t: t.value)
    cfg = best.user_attrs.get("config")
    if cfg is None:
        return None
    paths = frozenset(path_fields)
    out = {k: _portable(v, config_dir) if k in paths else v for k, v in cfg.items() if k not in ("out", "resume") and v is not None}
    if out.get("push_to_bucket"):  # the bucket, not the trial's folder in it: a re-run syncs to its own folder
        from pawn.hub.bucket import split_bucket_target

        out["push_to_bucket"] = split_bucket_target(out["push_to_bucket"])[0]
    return out


def _portable(value: Any, config_dir: Path) -> Any:
    """``value`` (of a path field) relative to ``config_dir`` when it is a local path that exists
    from here; other values (a Hub id, a Lichess source) as they are."""
    if isinstance(value, str) and value and os.path.exists(value):
        return relative_config_path(value, config_dir)
    return value


def summarize(s: SweepSettings, study: optuna.Study, url: str, *, command: str, write_best: bool = True) -> SweepResult:
    """Collect every trial and, with ``write_best``, write ``<out>/best_config.json``
    (atomically) for the best one (``SweepResult.best_config`` is None otherwise); ``command``: the
    trial command the file feeds (the runner's :attr:`~pawn.sweep.trials.TrialRunner.command`)."""
    frozen = study.get_trials(deepcopy=False)
    retried_as = {retry_parent(t): t.number for t in frozen if retry_parent(t) is not None}
    trials = [trial_record(t, retried_as.get(t.number)) for t in frozen]
    done = [r for r in trials if r["state"] == "COMPLETE" and r["value"] is not None]
    best = min(done, key=lambda r: r["value"]) if done else None
    path = None
    path_fields = dict.fromkeys(k for m in trained_settings() for k in fields_with(m, PATH))
    cfg = best_config(study, s.out, path_fields) if write_best else None
    if cfg is not None:
        path = s.out / BEST_CONFIG
        write_json(path, cfg, what="best config")
    return SweepResult(study, url, trials, best, path, command)


def _plan(s: SweepSettings, runner: TrialRunner, log: Callable[[str], None]) -> None:
    """The sweep's expected wall time before its first trial (:func:`pawn.train.walltime.plan_sweep`):
    the trials still to run × each one's steps, from the fixed settings (``--base-config`` and the
    sweep's own); nothing when they do not validate without the searched parameters (each trial
    then reports its own)."""
    from pawn.train.walltime import plan_sweep

    plan_cost = getattr(runner, "plan_cost", None)
    if plan_cost is None or getattr(runner, "base", None) is None:  # a spawned worker's runner: each trial reports its own
        return
    try:
        plan_sweep(s.trials, plan_cost(), log=log)
    except (ValidationError, PawnError):
        return


def claim_bucket(s: SweepSettings, runner: TrialRunner, log: Callable[[str], None] = print) -> None:
    """With ``push_to_bucket`` among the trials' fixed settings (``--push-to-bucket`` or
    ``--base-config``): open the study
    (:func:`open_shared`; its ``sweep_id`` user attribute names it) and claim its folder in the
    bucket (:func:`pawn.hub.bucket.claim_sweep_folder`: ``<folder>/<study>/``, the folder of
    ``owner/name/folder`` or else the sweep directory's name), then set ``runner.bucket_folder``,
    under which each trial syncs to its ``trial_NNNN/`` (:func:`pawn.sweep.objective.trial_bucket`).
    Nothing without ``push_to_bucket``; with ``--population`` one line says that its members (which
    write no run directory) sync nothing.

    Raises:
        SweepError: the folder holds a run's or another sweep's files, or the bucket cannot be
            reached or made (one line).
    """
    target = (getattr(runner, "base", None) or {}).get("push_to_bucket")
    if not target:
        return
    if s.population > 1:  # members write no run directory (pawn.sweep.population): nothing to sync, no folder claimed
        log(f"hub: --population {s.population} trains members that write no run directory, so nothing is synced to "
            f"{target}; re-run the best trial (best_config.json) to sync it")
        return
    from pawn.hub.bucket import claim_sweep_folder

    study = open_shared(s, log).study
    try:
        runner.bucket_folder = claim_sweep_folder(target, s.out.resolve().name, study.study_name, study.user_attrs["sweep_id"],
                                                  private=bool(runner.base.get("hub_private")), log=log)
    except PawnError as e:
        raise SweepError(str(e)) from None


def run_sweep(s: SweepSettings, *, log: Callable[[str], None] = print, runner: Optional[TrialRunner] = None,
              sinks: Sequence[Callable[[Path], Any]] = ()) -> SweepResult:
    """``pawn sweep``: run the study (this process, or ``s.workers`` processes), then
    :func:`summarize`. ``sinks``: record sinks every trial's run opens (:func:`make_runner`).
    ``s.out`` is a run directory for the one-run-per-directory rule: each sweep process holds a
    shared lock on it (:func:`pawn.train.rundir.open_sweep_dir`), so the workers of one study
    share it and a run is kept out.

    Raises:
        SweepError, SpaceError, StorageError, pawn.settings.ConfigFileError: one line each
            (SweepError also when ``s.out`` holds a run or a run is writing it).
    """
    from pawn.train.rundir import RunDirError, check_sweep_dir, open_sweep_dir

    try:
        check_sweep_dir(s.out)  # a run's directory is no sweep's: refused before anything is checked or written
    except RunDirError as e:
        raise SweepError(str(e)) from None
    # settings every trial would fail on: one error before the sweep directory or study exists
    runner = runner or make_runner(s, log, sinks)
    space = prepare_space(s, runner, log)
    bucket = (getattr(runner, "base", None) or {}).get("push_to_bucket")
    if bucket and s.population == 1:  # offline, no token, the Hub unreachable: refused before --out is made
        from pawn.hub.bucket import check_can_push_bucket

        try:
            check_can_push_bucket(bucket)
        except PawnError as e:
            raise SweepError(str(e)) from None
    _plan(s, runner, log)
    try:
        lock = open_sweep_dir(s.out)  # shared by this study's processes; excludes a run (pawn.train.rundir)
    except RunDirError as e:
        raise SweepError(str(e)) from None
    try:
        claim_bucket(s, runner, log)  # before any trial: a bucket folder of another run or sweep is refused
        t0 = time.perf_counter()
        if s.workers > 1:
            spawn_workers(s, log=log)
            study, url = open_study(s)
        else:
            study = run_worker(s, log=log, runner=runner, space=space)
            url = storage_url(s.storage, s.out)
        log(f"sweep took {time.perf_counter() - t0:.1f} s")
        # a worker spawned by --workers leaves best_config.json to its parent, which writes it once all have ended
        return summarize(s, study, url, command=runner.command, write_best="PAWN_SWEEP_WORKER" not in os.environ)
    finally:
        lock.release()
