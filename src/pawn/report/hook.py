"""A run hook (:class:`pawn.train.hooks.RunHook`) that writes the run's own ``report.html`` next to
``curves.png`` at every validation and when the run closes, so reloading the file shows the live
run. The ``pawn pretrain``/``adapt``/``sweep`` commands pass it to the trainer explicitly
(:func:`report_sinks`, ``sinks=`` of :func:`pawn.train.pretrain.run_pretrain` and
:func:`pawn.train.adapt.run_adapt`) when plotly (the ``report`` extra) is installed. It never
hashes checkpoints (their table says "not checked"): ``pawn report`` verifies them."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from pawn.report import REPORT_FILE, has_plotly


class ReportHook:
    """Write :func:`pawn.report.write_report` of ``run_dir`` to ``run_dir/report.html`` (or
    ``path``) at each ``val`` record, and at close (so the report ends with the run's final status)
    when a report was written or records came.
    The whole file is re-read each time (through :mod:`pawn.runs`), so a resumed run's report
    has every segment; the checkpoints' files are not hashed (``verify_checkpoints=False``).

    Args:
        run_dir: the run directory (``metrics.jsonl`` is written before hooks run).
        path: the HTML file (default ``run_dir/report.html``).
    """

    def __init__(self, run_dir: Path, path: Optional[Path] = None):
        self.run_dir = Path(run_dir)
        self.path = Path(path) if path is not None else self.run_dir / REPORT_FILE
        self._dirty = False

    def _write(self) -> None:
        from pawn.report import write_report

        write_report([self.run_dir], self.path, verify_checkpoints=False)
        self._dirty = False

    def on_record(self, kind: str, record: dict) -> None:
        if kind == "val":
            self._write()
        else:  # train, end, hub...: drawn at the next validation or at close
            self._dirty = True

    def close(self) -> None:
        if self._dirty or self.path.exists():  # the final state (the end record, the last status) is in the report
            self._write()


def report_sinks() -> tuple[Callable[[Path], ReportHook], ...]:
    """The record sinks a training command passes to its run: :class:`ReportHook` when plotly
    is installed, else none."""
    return (ReportHook,) if has_plotly() else ()
