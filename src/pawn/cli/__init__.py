"""The ``pawn`` command line: one module per command group, each command parse → call the library
→ render. Shared pieces: :mod:`._options` (shared options and the settings → flags generator),
:mod:`._errors` (the one error map), :mod:`._output` (the one output sink).

A new command is one line below: ``register("NAME", "pawn.cli.MODULE:FUNCTION")``.
"""

from __future__ import annotations

import ast
import os
import signal
import sys
import threading


def _interrupted_while_starting(signum, frame) -> None:
    """SIGINT while the command modules (JAX, Equinox, …) are still importing: one line and exit
    130 at once (was a KeyboardInterrupt traceback from deep inside an import); nothing has run."""

    sys.stderr.write("error: interrupted (Ctrl-C) while starting; nothing was done\n")
    sys.stderr.flush()
    os._exit(130)


# Installed only over Python's own handler in the main thread, and put back once the commands are
# registered (end of this module), so a host program's handler is never replaced.
_STARTING = (threading.current_thread() is threading.main_thread()
             and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
if _STARTING:
    signal.signal(signal.SIGINT, _interrupted_while_starting)

import importlib  # noqa: E402
import inspect  # noqa: E402
from typing import Annotated, Optional  # noqa: E402

import typer  # noqa: E402

from pawn.cli._errors import OneLineErrors

app = typer.Typer(
    name="pawn",
    cls=OneLineErrors,
    help="PAWN: chess world-model transformers trained on random legal games.",
    no_args_is_help=True,
    add_completion=False,
)


def _version_callback(value: bool) -> None:
    if value:
        from pawn import __version__, _engine
        from pawn.cli._accel import jax_versions

        typer.echo(f"pawn {__version__} (pawn-engine {_engine.__version__}; {jax_versions()}; "
                   "`pawn doctor` shows JAX's backend and devices)")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        Optional[bool],
        typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the package, engine and JAX versions."),
    ] = None,
) -> None:
    """PAWN: chess world-model transformers trained on random legal games."""


def _reflow(doc: str) -> str:
    """Join a docstring's hard-wrapped lines into one line per paragraph: Typer's rich help keeps
    single newlines, which broke the command list and the help texts in mid-sentence."""
    return "\n\n".join(" ".join(par.split()) for par in inspect.cleandoc(doc).split("\n\n"))


EXAMPLES: dict[str, tuple[str, ...]] = {
    "convert": ("pawn convert thomas-schweich/pawn-base --output ckpt/base",
                "pawn convert runs/tiny/checkpoints/best --slice base --output ckpt/tiny-base",
                "pawn convert runs/lora/best --merge --output ckpt/merged"),
    "pretrain": ("pawn pretrain --supernet tiny --total-steps 300 --out runs/tiny",
                 "pawn pretrain --resume auto --out runs/tiny",
                 "pawn pretrain --variant base --total-steps 200000 --lr-schedule wsd --out runs/base"),
    "eval": ("pawn eval thomas-schweich/pawn-base --pgn games.pgn --elo-edges 800,1200,1600,2000 --json eval.json",
             "pawn eval runs/adapt-lora/best --split test --pgn-only",
             "pawn eval runs/tiny/checkpoints/best --suite"),
    "probe": ("pawn probe runs/tiny/variants/large",
              "pawn probe runs/tiny/variants/large --probe piece_type --plot probes.png",
              "pawn probe thomas-schweich/pawn-base --json probes.json"),
    "generate": ("pawn generate --random --games 100 --out games.parquet",
                 "pawn generate --checkpoint runs/tiny/variants/large --games 16 --pgn-out games.pgn",
                 "pawn generate --random --games 8 --pgn-out games.pgn --seed 3"),
    "bench": ("pawn bench", "pawn bench --only memory", "pawn bench --json bench.json"),
    "adapt": ("pawn adapt runs/tiny/variants/large --strategy lora --data games/ --out runs/lora",
              "pawn adapt runs/tiny/variants/large --strategy bottleneck --bottleneck-dim 32 --data games.pgn",
              "pawn adapt --resume auto --out runs/lora"),
    "play": ("pawn play runs/tiny/variants/large --games 20 --stockfish-elo 1320",
             "pawn play runs/lora/best --vs stockfish --games 10",
             "pawn play runs/a/best --vs runs/b/best --games 50 --json match.json"),
    "sweep": ("pawn sweep --checkpoint runs/tiny/variants/large --strategy lora --data games/ --trials 20 --out sweeps/lora",
              "pawn sweep --checkpoint runs/tiny/variants/large --strategy lora --data games/ --workers 2 --out sweeps/lora",
              "pawn sweep --run-type pretrain --base-config base.json --trials 8 --out sweeps/pre"),
    "uci": ("pawn uci runs/lora/best",
            "pawn uci runs/tiny --variant large --log uci.log",
            "pawn uci thomas-schweich/pawn-base"),
    "report": ("pawn report runs/ -o report.html",
               "pawn report runs/lora runs/bottleneck -o compare.html",
               "pawn report runs/ sweeps/lora -o report.html"),
    "dashboard": ("pawn dashboard runs/",
                  "pawn dashboard runs/ --port 8080 --host 0.0.0.0",
                  "pawn dashboard runs/ --sweep sweeps/lora"),
    "doctor": ("pawn doctor",
               "pawn doctor --json doctor.json",
               "pawn doctor --json runs/doctor.json"),
    "lab": ("pawn lab",
            "pawn lab --dir ~/pawn-work",
            "pawn lab --http 127.0.0.1:8765"),
}
"""Three example command lines per command, shown at the end of its ``--help``."""


def _examples(name: str) -> str:
    ex = EXAMPLES.get(name)
    return ("\n\nExamples:\n\n" + "\n\n".join(f"  {line}" for line in ex)) if ex else ""


def _load_command(name: str, target: str):
    """The Click command of ``"module:function"`` (a Typer command function), built on first use:
    only the command being run (or whose ``--help`` is asked) imports its module, so ``pawn
    --version``, ``pawn --help`` and other commands' help never import JAX through it."""
    module, _, attr = target.partition(":")
    starting = (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    if starting:  # Ctrl-C while the command's modules (JAX, Equinox…) import: one line, exit 130
        signal.signal(signal.SIGINT, _interrupted_while_starting)
    try:
        from pawn.cli._options import uniform_env_help, user_help

        fn = getattr(importlib.import_module(module), attr)
    finally:
        if starting:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    one = typer.Typer(add_completion=False)
    one.command(name, help=user_help(_reflow(fn.__doc__ or "")) + _examples(name))(fn)
    return uniform_env_help(typer.main.get_command(one))


def _summary(target: str) -> str:
    """The first paragraph of the command function's docstring, read from its source file (no
    import): the command list of ``pawn --help``."""
    import importlib.util

    module, _, attr = target.partition(":")
    spec = importlib.util.find_spec(module)
    try:
        tree = ast.parse(open(spec.origin, encoding="utf-8").read()) if spec and spec.origin else None
    except (OSError, SyntaxError):
        tree = None
    consts: dict[str, str] = {}
    for node in (tree.body if tree else []):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attr:
            return _reflow(ast.get_docstring(node) or "").split("\n\n")[0]
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            var = node.targets[0].id
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                consts[var] = node.value.value
            elif var == attr and isinstance(node.value, ast.Call):  # NAME = settings_command(..., doc=DOC)
                for kw in node.value.keywords:
                    if kw.arg == "doc" and isinstance(kw.value, ast.Name) and kw.value.id in consts:
                        return _reflow(consts[kw.value.id]).split("\n\n")[0]
    return ""


def register(name: str, target: str) -> None:
    """Add command ``name`` from ``"module:function"`` (a Typer command function) to :data:`app`;
    its module is imported when the command is used (:class:`pawn.cli._errors.OneLineErrors`)."""
    OneLineErrors.lazy_commands[name] = (target, lambda: _load_command(name, target), lambda: _summary(target))


register("convert", "pawn.cli.convert:convert_cmd")
register("pretrain", "pawn.cli.pretrain:pretrain_cmd")
register("eval", "pawn.cli.eval:command")
register("probe", "pawn.cli.probe:command")
register("generate", "pawn.cli.generate:command")
register("bench", "pawn.cli.bench:bench_command")
register("adapt", "pawn.cli.adapt:command")
register("play", "pawn.cli.play:command")
register("uci", "pawn.cli.uci:uci_cmd")
register("sweep", "pawn.cli.sweep:sweep_cmd")
register("report", "pawn.cli.report:command")
register("dashboard", "pawn.cli.dashboard:command")
register("lab", "pawn.cli.lab:command")
register("doctor", "pawn.cli.doctor:command")
app.add_typer(importlib.import_module("pawn.cli.data").data_app, name="data")

if _STARTING:  # the commands are imported: Ctrl-C is the commands' own business from here on
    signal.signal(signal.SIGINT, signal.default_int_handler)


def run() -> None:
    """The ``pawn`` console script: :data:`app`, except that an interrupted run (exit code 130)
    leaves at once with ``os._exit`` once its message is flushed. A Ctrl-C that lands while XLA
    is compiling leaves native compiler threads running, and tearing the interpreter down under
    them crashed the process (SIGSEGV) after the message; nothing remains to be written then."""

    try:
        app()
    except KeyboardInterrupt:  # between start-up and a command's own handling (argument parsing)
        sys.stdout.flush()
        sys.stderr.write("error: interrupted (Ctrl-C)\n")
        sys.stderr.flush()
        os._exit(130)
    except SystemExit as e:
        if e.code == 130:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        raise
