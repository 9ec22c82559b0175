"""The ``pawn bench`` section table: one :class:`Section` row per section (how it runs, how its
record is laid out, its time estimate, whether it shares the compiled train-step setup), the
only home of a section. Each section module registers its own row at import
(:func:`register`); :func:`discover` imports every module of :mod:`pawn.bench`, so a new
section is its own module plus its test: ``--only``, the run order, the estimate, the table
printed and the ``--json`` document follow from the row.

This module sits below the section modules and above :mod:`pawn.bench.settings` (the names
``--only`` accepts are handed to it, :func:`pawn.bench.settings.set_section_names`)."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from pawn.bench.settings import BenchSettings, set_section_names
from pawn.config import flops_per_token


@dataclass
class SectionContext:
    """What a section's ``run`` may use besides the settings: the compiled
    :class:`~pawn.bench.step.StepSetup` (for ``shared_setup`` sections, else None), the
    records of the sections that ran before it (name → record), ``detail`` (a callback for a
    one-line sub-status, e.g. which process count is running) and ``partial`` (a section that
    fills its record as it goes puts it here, so a Ctrl-C keeps what finished)."""

    setup: Any = None
    results: dict[str, Any] = field(default_factory=dict)
    detail: Callable[[str], None] = lambda m: None
    partial: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Section:
    """One row of the section table.

    Attributes:
        name: the ``--only`` name and the ``--json`` key.
        order: run order (sections run by ascending order; the built-in ones use 10, 20, …).
        run: ``(settings, SectionContext) -> record`` (a dataclass, :mod:`pawn.bench.records`).
        view: ``record -> TableView`` (:mod:`pawn.bench.report`), the table printed.
        reference_s: rough wall seconds on :data:`pawn.bench.runner.REFERENCE_MACHINE` with
            ``--quick`` and with the default settings (the estimate printed before a run).
        work: ``settings -> float``, the relative amount of work of the section's dominant loop;
            the estimate scales the reference time by it (:func:`pawn.bench.runner.estimate_seconds`).
        shared_setup: the section uses the one compiled train-step setup shared by the run.
    """

    name: str
    order: int
    run: Callable[[BenchSettings, SectionContext], Any]
    view: Callable[[Any], Any]
    reference_s: tuple[float, float]
    work: Callable[[BenchSettings], float]
    shared_setup: bool = False


SECTIONS: dict[str, Section] = {}
"""Every registered section by name, in run order."""


def register(row: Section) -> Section:
    """Add ``row`` to :data:`SECTIONS` (kept in run order) after checking it is complete.

    Raises:
        TypeError: a duplicate name or order, a ``run``/``view``/``work`` that is not callable,
            or ``reference_s`` that is not two positive numbers.
    """
    where = f"bench section {row.name!r}"
    if row.name in SECTIONS:
        raise TypeError(f"{where} is registered twice")
    if any(r.order == row.order for r in SECTIONS.values()):
        raise TypeError(f"{where}: order {row.order} is taken by another section")
    for attr in ("run", "view", "work"):
        if not callable(getattr(row, attr)):
            raise TypeError(f"{where}: {attr} is not callable")
    ref = row.reference_s
    if not (isinstance(ref, tuple) and len(ref) == 2 and all(isinstance(x, (int, float)) and x > 0 for x in ref)):
        raise TypeError(f"{where}: reference_s must be (quick seconds, default seconds), got {ref!r}")
    rows = sorted([*SECTIONS.values(), row], key=lambda r: r.order)
    SECTIONS.clear()
    SECTIONS.update((r.name, r) for r in rows)
    set_section_names(tuple(SECTIONS))
    return row


_NOT_SECTIONS = frozenset({"runner", "section", "engine_child", "__main__"})


def discover() -> None:
    """Import every module of :mod:`pawn.bench` (each section module registers its row)."""
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if info.name not in _NOT_SECTIONS:
            importlib.import_module(f"{__package__}.{info.name}")


def train_step_work(s: BenchSettings) -> float:
    """FLOPs of one compiled train chunk (the sum over the trained variants of
    :func:`pawn.config.flops_per_token` · B · T · K), the unit most sections' work is counted in."""
    _, variants, _ = s.model()
    return float(sum(flops_per_token(v[0] if isinstance(v, tuple) else v, s.seq_len) for v in variants)
                 * s.batch_size * s.seq_len * s.steps_per_chunk)

