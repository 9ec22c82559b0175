"""The ``pawn bench`` driver: section selection, the run header, the time estimate and
:func:`run_bench`, which runs the chosen sections in order into one :class:`BenchReport`."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from pawn.bench.engine import cpus_available
from pawn.errors import UsageError
from pawn.bench.mfu import step_flops_per_token
from pawn.bench.records import to_json
from pawn.bench.settings import BenchSettings
from pawn.config import flops_per_token

SECTIONS: tuple[str, ...] = ("memory", "engine", "step", "mfu", "data", "concurrency", "eval", "decode", "adapt", "population")
"""Section names accepted by ``--only``, in run order. Section ``x`` runs ``pawn.bench.bench_x``."""

SHARED_SETUP = ("step", "mfu", "data")
"""Sections that share one compiled :class:`~pawn.bench.step.StepSetup`."""


def parse_only(values: Optional[Sequence[str]]) -> list[str]:
    """``--only`` values (repeatable, comma lists) → section names in run order.

    Raises:
        ValueError: an unknown name (listing the valid ones).
    """
    if not values:
        return list(SECTIONS)
    names = {x.strip() for v in values for x in v.split(",") if x.strip()}
    bad = sorted(names - set(SECTIONS))
    if bad:
        raise UsageError(f"unknown section(s) {', '.join(bad)}; choose from {', '.join(SECTIONS)}")
    return [n for n in SECTIONS if n in names]


def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (Linux) or ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@dataclass
class Header:
    """Where the numbers come from: time, host, versions, device, CPU and thread counts."""

    timestamp: str
    hostname: str
    pawn_version: str
    python: str
    jax_version: str
    jaxlib_version: str
    backend: str
    device: str
    device_count: int
    cpu_model: str
    cpu_count: Optional[int]
    cpus_available: int
    rayon_threads: int
    xla_flags: str


def header() -> Header:
    """The :class:`Header` of this process (JAX's default backend and devices)."""
    import jax
    import jaxlib

    from pawn import __version__

    devs = jax.devices()
    cpus = cpus_available()
    return Header(_dt.datetime.now().astimezone().isoformat(timespec="seconds"), platform.node(), __version__,
                  platform.python_version(), jax.__version__, jaxlib.__version__, jax.default_backend(),
                  devs[0].device_kind, len(devs), cpu_model(), os.cpu_count(), cpus,
                  int(os.environ.get("RAYON_NUM_THREADS") or cpus), os.environ.get("XLA_FLAGS", ""))


@dataclass
class BenchReport:
    """One ``pawn bench`` run: header, settings, the sections asked for, those completed (in
    order), each completed section's record and wall seconds, the section a Ctrl-C interrupted
    (None if none) and the total wall seconds. :meth:`to_dict` is the ``--json`` document."""

    header: Header
    settings: BenchSettings
    sections: list[str]
    completed_sections: list[str] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    section_wall_s: dict[str, float] = field(default_factory=dict)
    interrupted: Optional[str] = None
    wall_s: Optional[float] = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"header": to_json(self.header), "settings": self.settings.to_dict(),
                             "sections": list(self.sections), "completed_sections": list(self.completed_sections)}
        for name in self.completed_sections:
            d[name] = {**to_json(self.results[name]), "section_wall_s": self.section_wall_s[name]}
        if self.interrupted is not None:
            d["interrupted"] = self.interrupted
        if self.wall_s is not None:
            d["wall_s"] = self.wall_s
        return d


def _run_section(name: str, s: BenchSettings, report: BenchReport, setup):
    """Call ``pawn.bench.bench_<name>`` (looked up on the package at call time, so a section can
    be replaced there) with what it shares with the other sections."""
    import pawn.bench as pkg

    fn = getattr(pkg, f"bench_{name}")
    if name == "mfu":
        return fn(s, report.results.get("step"), setup)
    return fn(s, setup) if name in SHARED_SETUP else fn(s)


def run_bench(
    s: BenchSettings,
    sections: Sequence[str],
    progress: Callable[[str], None] = lambda m: None,
    on_section: Optional[Callable[[str, BenchReport], None]] = None,
) -> BenchReport:
    """Run the chosen sections in order. The step, mfu and data sections share one compiled
    setup. ``on_section(name, report)`` is called as each section finishes (the CLI prints its
    table then).

    Ctrl-C (KeyboardInterrupt) stops the run and returns what finished: ``completed_sections``
    lists those sections and ``interrupted`` names the one that was running.

    Raises:
        ValueError: a shape that does not split over the devices.
        RuntimeError: the engine child process failed.
        pawn.train.memory.InsufficientMemoryError: the train step does not fit the device.
    """
    from pawn.bench.step import make_setup

    report = BenchReport(header(), s, list(sections))
    setup = None
    t_all = time.perf_counter()
    name = None
    try:
        for name in sections:
            progress(name)
            t0 = time.perf_counter()
            if name in SHARED_SETUP and setup is None:
                setup = make_setup(s)
            report.results[name] = _run_section(name, s, report, setup)
            report.section_wall_s[name] = time.perf_counter() - t0
            report.completed_sections.append(name)
            if on_section is not None:
                on_section(name, report)
    except KeyboardInterrupt:
        report.interrupted = name
    report.wall_s = time.perf_counter() - t_all
    return report


# Rough wall seconds of each section on an otherwise idle 2-core CPU: (--quick, default settings =
# tiny supernet, batch 16 × 128, K 10, 5 repeats). Concurrency is the one-process row (see
# estimate_seconds). Derived from CPU seconds measured per section on a busy 2-core machine
# (quick: engine 0.5, step 29.8, mfu 0.4, data 0.1, concurrency 28.2 for rows 1 and 2, decode 3.2;
# default: engine 12.2, step 168.5, mfu 0.7, data 71.4), and, for the default concurrency and
# decode sections, from a whole default run with --concurrency 4 taking about 7.5 minutes there.
# memory: three compilations of 10–25 s (toy to large supernet); eval and the decode section's
# 64 × 257 workload are guesses from their first timings.
# Only used for the estimate printed before a run.
REFERENCE_SECTION_S: dict[str, tuple[float, float]] = {
    "memory": (30.0, 60.0), "engine": (2.0, 10.0), "step": (25.0, 120.0), "mfu": (2.0, 3.0), "data": (1.0, 50.0),
    "concurrency": (9.0, 46.0), "eval": (3.0, 10.0), "decode": (5.0, 60.0), "adapt": (40.0, 240.0),
    "population": (60.0, 600.0),  # measured on the shared 2-core CPU at load ~5: quick ~100 s, default ~20 min
}
REFERENCE_MACHINE = "a 2-core CPU"
"""Where :data:`REFERENCE_SECTION_S` was measured."""


def _work(s: BenchSettings, name: str) -> float:
    """Relative amount of work of a section (its dominant loop), for :func:`estimate_seconds`."""
    if name == "engine":
        return s.engine_games * s.engine_max_ply * s.repeats
    if name == "memory":  # compile only: about one compilation per remat mode, whatever the sizes
        return float(len(s.remat_candidates()))
    stored, variants, _ = s.model()
    if name == "decode":
        return flops_per_token(stored, s.decode_len) / 3 * s.decode_games * s.decode_len * s.decode_len
    if name == "eval":
        return flops_per_token(stored, s.seq_len) / 3 * s.eval_games * s.seq_len * s.repeats
    step = step_flops_per_token(variants, s.seq_len) * s.batch_size * s.seq_len * s.steps_per_chunk
    if name == "concurrency":
        return step * s.concurrency_chunks
    if name == "data":
        return step * s.data_chunks
    if name == "adapt":  # one chunk per strategy (+ full fine-tuning) per repeat, plus the data-wait chunks
        return step * ((len(s.adapt_strategies) + 1) * (s.repeats + s.warmup) + s.data_chunks)
    if name == "population":  # per run type: P sequential + 1 vmapped chunk per round (+ the first calls), and
        # with end to end 2·P trials of population_steps steps
        e2e = 2 * s.population_size * s.population_steps if s.population_end_to_end else 0
        return 2 * step / s.steps_per_chunk * (2 * s.population_size * s.steps_per_chunk * (s.repeats + 1) + e2e)
    return step * s.repeats


def estimate_seconds(s: BenchSettings, sections: Sequence[str], cores: int = 2) -> dict[str, float]:
    """Rough wall seconds per section on :data:`REFERENCE_MACHINE`: the reference time of the
    default run (or of ``--quick``), half fixed cost (start-up, compilation) and half scaled by
    the section's work relative to that reference (:func:`_work`). Concurrency sums its rows:
    the row of n processes costs ``max(1, n / cores)`` times the one-process row (the processes
    share ``cores`` CPU cores). Accelerators are usually much faster for large models."""
    ref = BenchSettings.defaults(quick=s.quick)
    out = {}
    for name in sections:
        base = REFERENCE_SECTION_S[name][0 if s.quick else 1]
        ratio = _work(s, name) / max(_work(ref, name), 1.0)
        t = 0.5 * base + 0.5 * base * ratio
        if name == "concurrency":
            t *= sum(max(1.0, n / cores) for n in range(1, s.concurrency + 1))
        out[name] = t
    return out


def estimate_line(s: BenchSettings, sections: Sequence[str], est: dict[str, float], backend: str) -> str:
    """The line printed before a run: the sections, the total and per-section estimates."""
    from pawn.progress import format_duration

    faster = "" if backend == "cpu" else f" (on this {backend} accelerator the model sections are usually much faster)"
    return (f"pawn bench: {', '.join(sections)}; roughly {format_duration(sum(est.values()))} on {REFERENCE_MACHINE}{faster} "
            f"({', '.join(f'{n} ~{format_duration(t)}' for n, t in est.items())}); tables print as sections finish, "
            "Ctrl-C keeps what finished")
