"""``pawn bench``: parse the flags (generated from :class:`pawn.bench.BenchSettings`, like
``pawn pretrain``'s), run :func:`pawn.bench.run_bench`, print each section's table as it finishes
and write ``--json``."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Optional

import typer

from pawn.bench.settings import BenchSettings
from pawn.cli_options import settings_parameters

_OWN_OPTIONS = ("pgn_files", "quick")  # set by --pgn (files or folders) and --quick below


def _bench(only=None, pgn=None, quick=False, json_out=None, config=None, **fields) -> None:
    import os

    from pydantic import ValidationError

    from pawn import bench
    from pawn.cli import _check_outputs, _fail, _heartbeat, _write_json
    from pawn.progress import format_duration, output_console
    from pawn.settings import format_validation_error

    try:
        sections = bench.parse_only(only)
        files = {"pgn_files": bench.resolve_pgn_files(pgn)} if pgn else {}
        settings = BenchSettings.load(config, quick=quick or None, **files, **fields)
    except ValidationError as e:
        raise _fail(format_validation_error(e), 2)
    except ValueError as e:  # UsageError, ConfigFileError, an unknown section
        raise _fail(str(e), 2)
    if "concurrency" in sections:  # child processes share an accelerator: don't grab 75 % of its memory
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    console, err = output_console(), output_console(stderr=True)
    _check_outputs(json=json_out)
    import jax

    est = bench.estimate_seconds(settings, sections)
    err.print(bench.estimate_line(settings, sections, est, jax.default_backend()), highlight=False, soft_wrap=True)
    beat = _heartbeat("pawn bench")

    def progress(name: str) -> None:
        beat.status = f"{name} (roughly {format_duration(est[name])})"
        msg = f"pawn bench: {name} ({sections.index(name) + 1}/{len(sections)}, roughly {format_duration(est[name])})"
        status.update(msg) if err.is_terminal else err.print(msg, highlight=False, soft_wrap=True)

    def on_section(name: str, report) -> None:
        bench.print_report(report, console, only=[name], header=not report.completed_sections[:-1], footer=False)

    try:
        with err.status("") as status:
            report = bench.run_bench(settings, sections, progress=progress, on_section=on_section)
    except ValueError as e:
        raise _fail(str(e), 2)
    except RuntimeError as e:
        raise _fail(str(e))
    if report.completed_sections:
        bench.print_report(report, console, only=[], header=False)
    if report.interrupted:
        done = report.completed_sections
        kept = "nothing had finished"
        if done:
            _write_json(json_out, report.to_dict())
            kept = f"kept {', '.join(done)} (tables above" + (f", {json_out})" if json_out else ")")
        raise _fail(f"interrupted during {report.interrupted}; {kept}", 130)
    _write_json(json_out, report.to_dict())


def _option(name: str, annotation, decl: str, help: str, default=None) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                             default=typer.Option(default, decl, help=help, show_default=False))


def bench_cmd(**kwargs) -> None:
    """Measure where time goes: compiled train-step memory (XLA memory analysis, per remat mode, and
    whether it fits 80 GB and 141 GB devices), engine games/s, train step (eager, jit, lax.scan
    chunk), MFU, the data path, concurrent training processes, teacher-forced evaluation and
    KV-cache decoding.

    Sections that run the train step first check its compiled memory against this device and
    refuse in one line, with the flags that would fit, instead of running out of memory.

    Prints rich tables; --json FILE writes every figure with the header (device, JAX version,
    threads, CPU model) and the settings. Medians over repeated runs after warm-up, min and max shown.
    `pawn bench --concurrency 4 --only concurrency` shows whether sharing one machine pays.
    Every setting can also come from a PAWN_BENCH_<NAME> environment variable or a --config file;
    precedence: command line > environment > config file > --quick > defaults.
    """
    _bench(**kwargs)


bench_cmd.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
    _option("only", Optional[list[str]], "--only", "Run only these sections (repeatable or comma list): memory, engine, step, mfu, data, concurrency, eval, decode. Default: all."),
    _option("pgn", Optional[list[Path]], "--pgn", "PGN file, or a directory of .pgn files, for the parsing workload (repeatable), e.g. Lichess exports; default: the random games written as PGN."),
    _option("quick", bool, "--quick", "Every section at tiny sizes (a smoke run, about a minute on two CPU cores).", False),
    _option("json_out", Optional[Path], "--json", "Write every figure and the exact settings to this JSON file."),
    _option("config", Optional[Path], "--config", "JSON or TOML file of bench settings (lowest priority above defaults)."),
    *(p for p in settings_parameters(BenchSettings, env_prefix="PAWN_BENCH_") if p.name not in _OWN_OPTIONS),
])
