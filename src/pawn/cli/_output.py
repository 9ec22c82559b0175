"""The CLI's one output sink: a typed :class:`TableReport` rendered as a rich table (terminal and
logs) or as JSON rows; ``--json`` files written whole through :func:`pawn.fileio.write_json`;
output paths checked before the work; progress and heartbeat lines on stderr."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Sequence

import typer


def pct(x: Optional[float]) -> str:
    """A fraction as a percentage with 2 decimals (``1.13%``; the JSON outputs keep every digit);
    ``—`` for None/NaN."""
    return "—" if x is None or x != x else f"{100 * x:.2f}%"


def num(x: Optional[float], fmt: str = ".4f") -> str:
    """``format(x, fmt)``; ``—`` for None/NaN."""
    return "—" if x is None or x != x else format(x, fmt)


@dataclass(frozen=True)
class Column:
    """One table column: its header, how a value is shown (a format spec, ``"pct"`` or a
    callable), and its alignment."""

    header: str
    fmt: str | Callable[[Any], str] = ""
    justify: Literal["left", "right"] = "right"
    missing: str = "—"

    def show(self, value: Any) -> str:
        """The cell text: strings as given; None/NaN as ``missing``; ``"pct"`` as a percentage."""
        if isinstance(value, str):
            return value
        if value is None or (isinstance(value, float) and value != value):
            return self.missing
        if callable(self.fmt):
            return self.fmt(value)
        if self.fmt == "pct":
            return pct(value)
        return format(value, self.fmt)


@dataclass
class TableReport:
    """A typed table: ``rows`` hold raw values (numbers stay numbers for JSON); each column's
    :class:`Column` formats them for display."""

    title: Optional[str]
    columns: Sequence[Column]
    rows: list[tuple[Any, ...]] = field(default_factory=list)

    def add(self, *values: Any) -> "TableReport":
        if len(values) != len(self.columns):
            raise ValueError(f"row of {len(values)} values for {len(self.columns)} columns")
        self.rows.append(tuple(values))
        return self

    def to_rich(self):
        """A :class:`rich.table.Table` of the formatted cells, shown literally (a cell such as a
        failure reason ``[/path: …]`` is not read as rich markup)."""
        from rich.table import Table
        from rich.text import Text

        t = Table(title=None if self.title is None else Text(self.title))
        for c in self.columns:
            t.add_column(Text(c.header), justify=c.justify)
        for r in self.rows:
            t.add_row(*(Text(c.show(v)) for c, v in zip(self.columns, r)))
        return t

    def to_json(self) -> dict[str, Any]:
        """``{"title", "rows": [{header: raw value}]}`` with NaN/±Inf as null."""
        from pawn.fileio import json_safe

        return {"title": self.title, "rows": [json_safe(dict(zip((c.header for c in self.columns), r))) for r in self.rows]}


class Output:
    """Where a command's reports go: ``format="table"`` prints rich tables on stdout (wide
    tables are not cut in logs, :func:`pawn.progress.output_console`), ``"json"`` prints one JSON
    object per report and line."""

    def __init__(self, format: Literal["table", "json"] = "table", console=None):
        from pawn.progress import output_console

        self.format = format
        self.console = console or output_console()

    def report(self, rep: TableReport) -> None:
        if self.format == "json":
            typer.echo(json.dumps(rep.to_json(), allow_nan=False))
        else:
            self.console.print(rep.to_rich())

    def line(self, text: str, **kw: Any) -> None:
        """A free text line (rich markup allowed) in table mode; nothing in JSON mode."""
        if self.format != "json":
            self.console.print(text, **kw)


def write_json(path: Optional[Path], data: Any) -> None:
    """Write a ``--json`` file (whole or not at all; NaN as null) and say so; nothing if ``path`` is None.

    Raises:
        pawn.fileio.OutputPathError: the file cannot be written.
    """
    if path is None:
        return
    from pawn.fileio import write_json as _write

    _write(path, data, what="--json")
    typer.echo(f"wrote {path}")


def check_outputs(**paths: Optional[Path]) -> None:
    """Before any work, check each output file can be written (``flag=path``; flag ``pgn_out`` is ``--pgn-out``).

    Raises:
        pawn.fileio.OutputPathError: naming the flag and the path.
    """
    from pawn.fileio import check_output_file

    for flag, p in paths.items():
        if p is not None:
            check_output_file(p, "--" + flag.replace("_", "-"))


def heartbeat(label: str):
    """When stdout is not a terminal, a "still running" line every PAWN_LOG_EVERY_S seconds (30 by
    default) until the command ends (:class:`pawn.progress.Heartbeat`).

    Raises:
        pawn.errors.UsageError: a bad PAWN_LOG_EVERY_S.
    """
    try:  # the Click that Typer runs on (vendored in recent Typer)
        from typer._click.globals import get_current_context
    except ImportError:  # pragma: no cover
        from click import get_current_context

    from pawn.errors import UsageError
    from pawn.progress import Heartbeat

    try:
        hb = Heartbeat(label).start()
    except ValueError as e:
        raise UsageError(str(e)) from None
    get_current_context().call_on_close(hb.stop)
    return hb


def _hms(x: float) -> str:
    return "?" if x != x else f"{int(x) // 3600}:{int(x) % 3600 // 60:02d}:{int(x) % 60:02d}"


class Progress:
    """Progress of a long command on stderr: a rich bar with elapsed time and ETA on a terminal,
    else one plain line at most every ``interval`` seconds (and at each task's end)."""

    def __init__(self, interval: float = 10.0):
        from pawn.progress import output_console

        self.console = output_console(stderr=True)
        self.interval = interval
        self.bar = None

    def __enter__(self) -> "Progress":
        if self.console.is_terminal:
            from rich.progress import BarColumn, Progress as Bar, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self.bar = Bar(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                           TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[msg]}"),
                           console=self.console)
            self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()

    def task(self, name: str, total: float) -> Callable[[float, float, str], None]:
        """A callback ``(done, total, message)`` for one unit of work named ``name``."""
        if self.bar is not None:
            tid = self.bar.add_task(name, total=total, msg="")
            return lambda done, tot, msg: self.bar.update(tid, completed=done, total=tot, msg=msg)
        t0 = time.perf_counter()
        last = [t0]

        def plain(done: float, tot: float, msg: str) -> None:
            now = time.perf_counter()
            if now - last[0] < self.interval and done < tot:
                return
            last[0] = now
            el = now - t0
            eta = el / done * (tot - done) if done > 0 else float("nan")
            self.console.print(f"{name}: {100 * done / tot:.0f}% elapsed {_hms(el)} ETA {_hms(eta)} {msg}", highlight=False)

        return plain


def interrupted(done: list[str], names: list[str], json_out: Optional[Path], record: dict) -> "typer.Exit":
    """Ctrl-C in eval/probe: keep the finished models' results (if --json), say so in one line;
    returns the exit (130) to raise."""
    from pawn.cli._errors import fail

    left = [n for n in names if n not in done]
    if done and json_out is not None:
        record["interrupted"] = {"finished": done, "not_run_or_unfinished": left}
        write_json(json_out, record)
        return fail(f"interrupted; kept the results of {', '.join(done)} in {json_out} (not finished: {', '.join(left)})", 130)
    kept = f"finished {', '.join(done)} (printed above; no --json given)" if done else "nothing was finished"
    return fail(f"interrupted; {kept}; nothing written", 130)


__all__ = ["Column", "TableReport", "Output", "write_json", "check_outputs", "heartbeat", "Progress", "interrupted", "pct", "num",
           "print_config", "run_training"]


STOPPED_MESSAGES = {"sigterm": "stopped by signal at step {step}; checkpoint {ck} (resume with --resume {run})",
                    "paused": "paused at step {step}; checkpoint {ck} (resume with --resume {run})",
                    "resume_no_op": "nothing to do: {run} already reached step {step}",
                    "dry_run": "dry run: the plan and memory check above passed; nothing was trained or written ({run} not created)"}
"""The line a training command (pretrain, adapt) prints for a run that stopped before its end,
by stop reason (spec §1.10); format fields ``step``, ``ck`` (checkpoint) and ``run`` (run dir)."""


def interrupted_message(run_dir: Optional[Path]) -> str:
    """The one line for a training run stopped at once by Ctrl-C (the second one, or one after
    the signal handlers were restored, e.g. in the final validation): the newest complete
    checkpoint on disk under ``run_dir/checkpoints`` and how to resume from it, or that none
    was written."""
    from pawn.train.lifecycle import complete_checkpoints

    done = complete_checkpoints(run_dir / "checkpoints") if run_dir is not None and (run_dir / "checkpoints").is_dir() else []
    if done:
        step, path = done[-1]
        return (f"interrupted (Ctrl-C); the last complete checkpoint is {path} (step {step}), on disk and loadable; "
                f"resume with --resume {run_dir}")
    return "interrupted (Ctrl-C); stopped before any checkpoint of this run was written"


def run_training(call: Callable[[], Any], run_dir: Callable[[], Optional[Path]] = lambda: None) -> Any:
    """Run a training call (:func:`pawn.train.spine.run` of a task); Ctrl-C that it did not handle
    itself is one line and exit 130 naming the last complete checkpoint on disk
    (:func:`interrupted_message`) of the run directory the run decided (``run_dir()``: the task's
    :attr:`~pawn.train.task.Task.run_dir`, None before it was decided)."""
    from pawn.cli._errors import fail

    try:
        return call()
    except KeyboardInterrupt:
        raise fail(interrupted_message(run_dir()), 130)


def print_config(cfg: Any) -> None:
    """``--print-config``: the full resolved settings of ``cfg`` (a settings model) as JSON on
    stdout, a file ``--config`` takes back (the command-only flags and ``resume`` left out)."""
    data = cfg.model_dump(mode="json")
    data.pop("resume", None)
    typer.echo(json.dumps(data, indent=2))


def report_end(res: Any, stalled: str, length: str = "") -> bool:
    """The line of a training run that ended: :func:`report_stop`'s when it stopped before its
    end (returns True), else "stopped early ... (``stalled``) stopped improving (--patience)" or
    "finished N steps``length``", with the run directory (returns False)."""
    if report_stop(res):
        return True
    if res.reason == "patience":
        typer.echo(f"stopped early at step {res.step}: {stalled} stopped improving (--patience); run directory {res.run_dir}")
    else:
        typer.echo(f"finished {res.step} steps{length}; run directory {res.run_dir}")
    return False


def report_stop(res: Any) -> bool:
    """Print the :data:`STOPPED_MESSAGES` line for a run result (``reason``, ``step``,
    ``checkpoint``, ``run_dir``) that stopped before its end; True when it did."""
    if res.reason not in STOPPED_MESSAGES:
        return False
    typer.echo(STOPPED_MESSAGES[res.reason].format(step=res.step, ck=res.checkpoint, run=res.run_dir))
    return True
