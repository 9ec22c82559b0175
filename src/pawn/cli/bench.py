"""``pawn bench``: parse the flags → :func:`pawn.bench.run_bench` → :func:`pawn.bench.print_report`.
(The bench internals and BenchSettings belong to ``pawn.bench``; this module only parses and calls.)"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pawn.cli._errors import fail
from pawn.cli._options import JsonOpt, dtype_option
from pawn.cli._output import check_outputs, heartbeat, write_json


def bench_cmd(
    only: Annotated[Optional[list[str]], typer.Option("--only", help="Run only these sections (repeatable or comma list): memory, engine, step, mfu, data, concurrency, eval, decode. Default: all.")] = None,
    variant: Annotated[Optional[str], typer.Option("--variant", help="Benchmark one model of this size (toy, small, base, large).")] = None,
    supernet: Annotated[Optional[str], typer.Option("--supernet", help="Benchmark the joint step of this supernet (tiny, large). Default: tiny (toy variant with --quick).")] = None,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", min=1, help="Games per train step (default 16; 4 with --quick).", show_default=False)] = None,
    seq_len: Annotated[Optional[int], typer.Option("--seq-len", min=1, help="Train-step sequence length (default 128; 32 with --quick).", show_default=False)] = None,
    steps_per_chunk: Annotated[Optional[int], typer.Option("--steps-per-chunk", min=1, help="K, optimizer steps per lax.scan chunk (default 10; 2 with --quick).", show_default=False)] = None,
    dtype: Annotated[Optional[str], typer.Option("--dtype", callback=dtype_option, help="Train-step compute dtype: float32 (fp32) or bfloat16 (bf16) (default: float32 on CPU, bfloat16 on accelerators).", show_default=False)] = None,
    remat: Annotated[Optional[str], typer.Option("--remat", help="Per-layer rematerialisation: none, attention, full, or auto (default: the first that fits; the memory section reports all three).", show_default=False)] = None,
    accumulation_steps: Annotated[Optional[int], typer.Option("--accumulation-steps", min=1, help="Micro-batches per optimizer step (default 1).", show_default=False)] = None,
    concurrency: Annotated[Optional[int], typer.Option("--concurrency", min=1, help="Run 1..N independent training processes at once (spawned) and report aggregate and per-process tokens/s (default 2).", show_default=False)] = None,
    repeats: Annotated[Optional[int], typer.Option("--repeats", min=1, help="Timed runs per measurement (median, min, max) (default 5; 2 with --quick).", show_default=False)] = None,
    pgn: Annotated[Optional[list[Path]], typer.Option("--pgn", help="PGN file, or a directory of .pgn files, for the parsing workload (repeatable), e.g. Lichess exports; default: the random games written as PGN.")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Every section at tiny sizes (a smoke run, about a minute on two CPU cores).")] = False,
    json_out: JsonOpt = None,
) -> None:
    """Measure where time goes: compiled train-step memory (XLA memory analysis, per remat mode, and
    whether it fits 80 GB and 141 GB devices), engine games/s, train step (eager, jit, lax.scan
    chunk), MFU, the data path, concurrent training processes, teacher-forced evaluation and
    KV-cache decoding.

    Sections that run the train step first check its compiled memory against this device and
    refuse in one line, with the flags that would fit, instead of running out of memory.

    Prints rich tables; --json FILE writes every figure with the header (device, JAX version,
    threads, CPU model) and the settings. Medians over repeated runs after warm-up, min and max shown.
    `pawn bench --concurrency 4 --only concurrency` shows whether sharing one machine pays.
    """
    import os

    from pawn.bench import BenchSettings, parse_only

    try:
        sections = parse_only(only)
    except ValueError as e:
        raise fail(str(e), 2)
    if variant is not None and supernet is not None:
        raise fail("give either --variant or --supernet, not both", 2)
    fields = BenchSettings.quick_defaults() if quick else {}
    if variant is not None or supernet is not None:
        fields.update(variant=variant, supernet=supernet)
    given = {"batch_size": batch_size, "seq_len": seq_len, "steps_per_chunk": steps_per_chunk, "concurrency": concurrency, "repeats": repeats,
             "dtype": dtype, "remat": remat, "accumulation_steps": accumulation_steps}
    fields.update({k: v for k, v in given.items() if v is not None})
    if pgn:
        files: list[Path] = []
        for f in pgn:
            if f.is_dir():
                found = sorted(f.glob("*.pgn"))
                if not found:
                    raise fail(f"--pgn: no .pgn file in directory {f}", 2)
                files.extend(found)
            elif f.is_file():
                files.append(f)
            else:
                raise fail(f"--pgn: no such file {f}", 2)
        fields["pgn_files"] = tuple(str(f) for f in files)
    settings = BenchSettings(**fields)
    if "concurrency" in sections:
        # Child processes must share an accelerator: this process must not grab 75 % of its memory.
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    from pawn.progress import output_console

    from pawn.bench import REFERENCE_MACHINE, estimate_seconds, print_report, run_bench
    from pawn.progress import format_duration

    console = output_console()
    err = output_console(stderr=True)
    try:
        settings.check()
    except ValueError as e:
        raise fail(str(e), 2)
    check_outputs(json=json_out)
    import jax

    est = estimate_seconds(settings, sections)
    faster = "" if jax.default_backend() == "cpu" else f" (on this {jax.default_backend()} accelerator the model sections are usually much faster)"
    err.print(f"pawn bench: {', '.join(sections)}; roughly {format_duration(sum(est.values()))} on {REFERENCE_MACHINE}{faster} "
              f"({', '.join(f'{n} ~{format_duration(t)}' for n, t in est.items())}); tables print as sections finish, "
              "Ctrl-C keeps what finished", highlight=False, soft_wrap=True)

    beat = heartbeat("pawn bench")

    def progress(name: str) -> None:
        msg = f"pawn bench: {name} ({sections.index(name) + 1}/{len(sections)}, roughly {format_duration(est[name])})"
        beat.status = f"{name} (roughly {format_duration(est[name])})"
        if err.is_terminal:
            status.update(msg)
        else:
            err.print(msg, highlight=False, soft_wrap=True)

    def on_section(name: str, report: dict) -> None:
        print_report(report, console, only=[name], header=not report["completed_sections"][:-1], footer=False)

    try:
        with err.status("") as status:
            report = run_bench(settings, sections, progress=progress, on_section=on_section)
    except ValueError as e:
        raise fail(str(e), 2)
    except RuntimeError as e:
        raise fail(str(e))
    if report["completed_sections"]:
        print_report(report, console, only=[], header=False)
    if report.get("interrupted"):
        done = report["completed_sections"]
        kept = "nothing had finished"
        if done:
            write_json(json_out, report)
            kept = f"kept {', '.join(done)} (tables above" + (f", {json_out})" if json_out else ")")
        raise fail(f"interrupted during {report['interrupted']}; {kept}", 130)
    write_json(json_out, report)
