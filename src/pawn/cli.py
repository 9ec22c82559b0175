"""The ``pawn`` command line. Each subcommand parses options and calls one library function."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

app = typer.Typer(
    name="pawn",
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
