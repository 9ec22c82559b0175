"""The ``pawn`` command line: one module per command group, each command parse → call the library
→ render. Shared pieces: :mod:`._options` (shared options and the settings → flags generator),
:mod:`._errors` (the one error map), :mod:`._output` (the one output sink).

A new command is one line below: ``register("NAME", "pawn.cli.MODULE:FUNCTION")``.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Annotated, Optional

import typer

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
app.add_typer(importlib.import_module("pawn.cli.data").data_app, name="data")


def run() -> None:
    """The ``pawn`` console script: :data:`app`, except that an interrupted run (exit code 130)
    leaves at once with ``os._exit`` once its message is flushed. A Ctrl-C that lands while XLA
    is compiling leaves native compiler threads running, and tearing the interpreter down under
    them crashed the process (SIGSEGV) after the message; nothing remains to be written then."""
    import os
    import sys

    try:
        app()
    except SystemExit as e:
        if e.code == 130:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        raise
