"""The ``pawn bench`` driver: section selection, the run header, the time estimate and
:func:`run_bench`, which runs the chosen sections in order into one :class:`BenchReport`. What a
section is (how it runs, its estimate, its table) is its row of :mod:`pawn.bench.section`."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from pawn.bench.engine import cpus_available
from pawn.bench.records import to_json
from pawn.bench.section import SECTIONS as SECTION_TABLE
from pawn.bench.section import SectionContext, discover
from pawn.bench.settings import BenchSettings, parse_only
from pawn.bench.step import make_setup

discover()  # a section module not imported above registers its row now

SECTIONS: tuple[str, ...] = tuple(SECTION_TABLE)
"""Section names accepted by ``--only``, in run order (the section table, :mod:`pawn.bench.section`)."""

SHARED_SETUP: tuple[str, ...] = tuple(n for n, row in SECTION_TABLE.items() if row.shared_setup)
"""Sections that share one compiled :class:`~pawn.bench.step.StepSetup`."""


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
            if self.interrupted in self.results:  # what the interrupted section had finished
                d[self.interrupted] = {**to_json(self.results[self.interrupted]), "partial": True,
                                       "section_wall_s": self.section_wall_s.get(self.interrupted)}
        if self.wall_s is not None:
            d["wall_s"] = self.wall_s
        return d


def run_bench(
    s: BenchSettings,
    sections: Sequence[str],
    progress: Callable[[str], None] = lambda m: None,
    on_section: Optional[Callable[[str, BenchReport], None]] = None,
    detail: Callable[[str, str], None] = lambda name, m: None,
) -> BenchReport:
    """Run the chosen sections in order. The step, mfu and data sections share one compiled
    setup. ``on_section(name, report)`` is called as each section finishes (the CLI prints its
    table then).

    ``detail(name, message)`` receives a section's sub-status lines (which process count the
    concurrency section runs).

    Ctrl-C (KeyboardInterrupt) stops the run and returns what finished: ``completed_sections``
    lists those sections and ``interrupted`` names the one that was running; when that section
    had finished part of its record (the concurrency rows of the process counts that ran), the
    record is kept in ``results`` and in ``--json`` with ``partial: true``.

    Raises:
        ValueError: a shape that does not split over the devices.
        RuntimeError: the engine child process failed.
        pawn.train.memory.InsufficientMemoryError: the train step does not fit the device.
    """
    report = BenchReport(header(), s, list(sections))
    setup = None
    t_all = time.perf_counter()
    name = None
    partial: dict[str, Any] = {}
    try:
        for name in sections:
            progress(name)
            t0 = time.perf_counter()
            row = SECTION_TABLE[name]
            if row.shared_setup and setup is None:
                detail(name, f"compiling the train step shared by {', '.join(SHARED_SETUP)}")
                setup = make_setup(s)
            ctx = SectionContext(setup if row.shared_setup else None, report.results,
                                 detail=lambda m, _n=name: detail(_n, m), partial=partial)
            report.results[name] = row.run(s, ctx)
            report.section_wall_s[name] = time.perf_counter() - t0
            report.completed_sections.append(name)
            if on_section is not None:
                on_section(name, report)
    except KeyboardInterrupt:
        report.interrupted = name
        if name in partial:
            report.results[name] = partial[name]
            report.section_wall_s[name] = time.perf_counter() - t0
    report.wall_s = time.perf_counter() - t_all
    return report


# Rough wall seconds of each section on an otherwise idle 2-core CPU (each row's reference_s:
# --quick, default settings = tiny supernet, batch 16 × 128, K 10, 5 repeats). Concurrency is the
# one-process row (see estimate_seconds). Derived from CPU seconds measured per section on a busy
# 2-core machine (quick: engine 0.5, step 29.8, mfu 0.4, data 0.1, concurrency 28.2 for rows 1
# and 2, decode 3.2; default: engine 12.2, step 168.5, mfu 0.7, data 71.4), and, for the default
# concurrency and decode sections, from a whole default run with --concurrency 4 taking about 7.5
# minutes there. eval and the decode section's 64 × 257 workload are guesses from their first
# timings. Only used for the estimate printed before a run.
REFERENCE_SECTION_S: dict[str, tuple[float, float]] = {n: row.reference_s for n, row in SECTION_TABLE.items()}
"""Section name → (``--quick``, default) reference wall seconds (from the section table)."""
REFERENCE_MACHINE = "a 2-core CPU"
"""Where :data:`REFERENCE_SECTION_S` was measured."""


def _work(s: BenchSettings, name: str) -> float:
    """Relative amount of work of a section (its row's ``work``), for :func:`estimate_seconds`."""
    return float(SECTION_TABLE[name].work(s))


def estimate_seconds(s: BenchSettings, sections: Sequence[str], cores: int = 2) -> dict[str, float]:
    """Rough wall seconds per section on :data:`REFERENCE_MACHINE`: the reference time of the
    default run (or of ``--quick``), half fixed cost (start-up, compilation) and half scaled by
    the section's work relative to that reference (:func:`_work`). Concurrency sums its rows:
    the row of n processes costs ``max(1, n / cores)`` times the one-process row (the processes
    share ``cores`` CPU cores). Accelerators are usually much faster for large models."""
    ref = BenchSettings.defaults(quick=s.quick)
    out = {}
    for name in sections:
        base = SECTION_TABLE[name].reference_s[0 if s.quick else 1]
        ratio = _work(s, name) / max(_work(ref, name), 1.0)
        t = 0.5 * base + 0.5 * base * ratio
        if name == "concurrency":
            t *= sum(max(1.0, n / cores) for n in range(1, s.concurrency + 1))
        out[name] = t
    return out


def rescaled_estimates(est: dict[str, float], wall_s: dict[str, float]) -> tuple[dict[str, float], float]:
    """The estimates of the sections not finished yet, scaled by this run's pace: ``(estimates,
    pace)`` with ``pace`` = Σ wall seconds of the finished sections (``wall_s``) ÷ Σ their
    estimates (``est``), 1.0 before any finished. So after the first sections ran 2.7× slower
    than :data:`REFERENCE_MACHINE` (a slower or busier machine), the rest is expected 2.7×
    slower too."""
    done = [n for n in wall_s if n in est]
    pace = sum(wall_s[n] for n in done) / max(sum(est[n] for n in done), 1e-9) if done else 1.0
    return {n: t * pace for n, t in est.items() if n not in wall_s}, pace


def finished_line(name: str, wall_s: float, est: dict[str, float], done_wall_s: dict[str, float]) -> str:
    """The line printed as section ``name`` finishes: its wall time against its estimate and
    the rest of the run re-estimated at this run's pace (:func:`rescaled_estimates`)."""
    from pawn.progress import format_duration

    rest, pace = rescaled_estimates(est, done_wall_s)
    line = f"pawn bench: {name} took {format_duration(wall_s)} (estimated {format_duration(est[name])})"
    if rest:
        line += (f"; the other {len(rest)} section{'s' if len(rest) > 1 else ''} roughly {format_duration(sum(rest.values()))} "
                 f"at this run's pace ({pace:.2f}× the estimates so far)")
    return line


def estimate_line(s: BenchSettings, sections: Sequence[str], est: dict[str, float], backend: str) -> str:
    """The line printed before a run: the sections, the total and per-section estimates."""
    from pawn.progress import format_duration

    faster = "" if backend == "cpu" else f" (on this {backend} accelerator the model sections are usually much faster)"
    return (f"pawn bench: {', '.join(sections)}; roughly {format_duration(sum(est.values()))} on {REFERENCE_MACHINE}{faster} "
            f"({', '.join(f'{n} ~{format_duration(t)}' for n, t in est.items())}); tables print as sections finish, "
            "Ctrl-C keeps what finished")
