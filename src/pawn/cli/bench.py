"""``pawn bench``: parse :class:`pawn.bench.settings.BenchSettings` (flags generated like every
command's) → :func:`pawn.bench.run_bench` → :func:`pawn.bench.print_report` per finished section."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from pawn.bench.settings import BenchSettings, concurrency_first
from pawn.cli._errors import fail
from pawn.cli._options import settings_command
from pawn.cli._output import check_outputs, heartbeat, write_json

DOC = """Measure where time goes: compiled train-step memory (XLA memory analysis, per remat mode, and
whether it fits 80 GB and 141 GB devices), engine games/s, train step (eager, jit, lax.scan
chunk), MFU, the data path, concurrent training processes, teacher-forced evaluation,
KV-cache decoding, adapter training and trials/hour of vmapped populations against sequential
trials.

Sections that run the train step first check its compiled memory against this device and
refuse in one line, with the flags that would fit, instead of running out of memory.

Prints rich tables; --json FILE writes every figure with the header (device, JAX version,
threads, CPU model) and the settings. Medians over repeated runs after warm-up, min and max shown.
`pawn bench --concurrency 4 --only concurrency` shows whether sharing one machine pays.
Every setting can also come from a PAWN_BENCH_<NAME> environment variable or a --config file;
precedence: command line > environment > config file > --quick > defaults."""


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM (a closed terminal, a Slurm time limit) stops ``pawn bench`` as Ctrl-C does: the
    finished sections' tables and ``--json`` are kept (issue 26; it used to exit with nothing
    written). The previous handler is restored on exit; outside the main thread nothing changes."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        old = None
    try:
        yield
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def bench_cmd(s: BenchSettings) -> None:
    from pawn import bench
    from pawn.progress import format_duration, output_console

    sections = bench.parse_only(s.only)
    json_out = s.json_out
    if "concurrency" in sections:  # child processes share an accelerator: don't grab 75 % of its memory
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    console, err = output_console(), output_console(stderr=True)
    sections, note = concurrency_first(sections, s)
    if note:
        err.print(note, highlight=False, soft_wrap=True)
    check_outputs(json=json_out)
    import jax

    est = bench.estimate_seconds(s, sections)
    err.print(bench.estimate_line(s, sections, est, jax.default_backend()), highlight=False, soft_wrap=True)
    beat = heartbeat("pawn bench")
    started = {"t": time.monotonic()}

    def progress(name: str) -> None:
        started["t"] = time.monotonic()
        now = bench.rescaled_estimates(est, done)[0][name]
        beat.status = f"{name} (roughly {format_duration(now)})"
        msg = f"pawn bench: {name} ({sections.index(name) + 1}/{len(sections)}, roughly {format_duration(now)})"
        status.update(msg) if err.is_terminal else err.print(msg, highlight=False, soft_wrap=True)

    def detail(name: str, message: str) -> None:
        msg = f"pawn bench: {name}: {message} ({format_duration(time.monotonic() - started['t'])} into the section)"
        beat.status = f"{name}: {message}"
        status.update(msg) if err.is_terminal else err.print(msg, highlight=False, soft_wrap=True)

    done: dict[str, float] = {}

    def on_section(name: str, r) -> None:
        if err.is_terminal:  # the tables go to stdout, the spinner to stderr: clear it first, so no table
            status.stop()    # line starts after the spinner's text (glued to it in the scrollback)
            status.update("")
        bench.print_report(r, console, only=[name], header=not r.completed_sections[:-1], footer=False)
        done[name] = r.section_wall_s[name]
        err.print(bench.finished_line(name, done[name], est, done), highlight=False, soft_wrap=True)
        if err.is_terminal:
            status.start()

    with err.status("") as status, _sigterm_as_interrupt():
        report = bench.run_bench(s, sections, progress=progress, detail=detail, on_section=on_section)
    if report.completed_sections:
        bench.print_report(report, console, only=[], header=False)
    if report.interrupted:
        done = list(report.completed_sections)
        if report.interrupted in report.results:  # the rows the interrupted section had finished
            bench.print_report(report, console, only=[report.interrupted], header=not done, footer=False)
            done.append(f"the finished rows of {report.interrupted}")
        if done:
            write_json(json_out, report.to_dict())
        kept = f"kept {', '.join(done)} (tables above" + (f", {json_out})" if json_out else ")") if done else "nothing had finished"
        raise fail(f"interrupted during {report.interrupted}; {kept}", 130)
    write_json(json_out, report.to_dict())


def _command(s: BenchSettings) -> None:
    bench_cmd(s)


bench_command = settings_command(BenchSettings, _command, doc=DOC)
