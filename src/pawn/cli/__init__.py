"""The ``pawn`` command line: one module per command group, each command parse → call the library
→ render. Shared pieces: :mod:`._options` (shared options and the settings → flags generator),
:mod:`._errors` (the one error map), :mod:`._output` (the one output sink).

A new command is one line below: ``register("NAME", "pawn.cli.MODULE:FUNCTION")``.
"""

from __future__ import annotations

import signal
import threading


def _interrupted_while_starting(signum, frame) -> None:
    """SIGINT while the command modules (JAX, Equinox, …) are still importing: one line and exit
    130 at once (was a KeyboardInterrupt traceback from deep inside an import); nothing has run."""
    import os
    import sys

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

        typer.echo(f"pawn {__version__} (pawn-engine {_engine.__version__})")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        Optional[bool],
        typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the package and engine versions."),
    ] = None,
) -> None:
    """PAWN: chess world-model transformers trained on random legal games."""


def _reflow(doc: str) -> str:
    """Join a docstring's hard-wrapped lines into one line per paragraph: Typer's rich help keeps
    single newlines, which broke the command list and the help texts in mid-sentence."""
    return "\n\n".join(" ".join(par.split()) for par in inspect.cleandoc(doc).split("\n\n"))


def register(name: str, target: str) -> None:
    """Add command ``name`` from ``"module:function"`` (a Typer command function) to :data:`app`."""
    module, _, attr = target.partition(":")
    fn = getattr(importlib.import_module(module), attr)
    app.command(name, help=_reflow(fn.__doc__ or ""))(fn)


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
app.add_typer(importlib.import_module("pawn.cli.data").data_app, name="data")

if _STARTING:  # the commands are imported: Ctrl-C is the commands' own business from here on
    signal.signal(signal.SIGINT, signal.default_int_handler)


def run() -> None:
    """The ``pawn`` console script: :data:`app`, except that an interrupted run (exit code 130)
    leaves at once with ``os._exit`` once its message is flushed. A Ctrl-C that lands while XLA
    is compiling leaves native compiler threads running, and tearing the interpreter down under
    them crashed the process (SIGSEGV) after the message; nothing remains to be written then."""
    import os
    import sys

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
