"""``pawn doctor``: what this installation runs on (:func:`pawn.cli._accel.doctor_report`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def command(
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Also write the rows as a JSON object to this file.")] = None,
) -> None:
    """Print the package, engine, Python and JAX versions, JAX's backend and devices, and whether
    an NVIDIA GPU or a TPU on this machine goes unused (with the install line that fixes it).

    Imports JAX and starts its backend (a few seconds); `pawn --version` prints the versions only."""
    from pawn.cli._accel import doctor_report

    rows = doctor_report()
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        typer.echo(f"{k:<{width}}  {v}")
    if json_out is not None:
        from pawn.fileio import write_json

        data: dict = {}
        for k, v in rows:  # several device kinds: a list
            data[k] = [*data[k], v] if isinstance(data.get(k), list) else ([data[k], v] if k in data else v)
        write_json(json_out, data, what="--json")
        typer.echo(f"wrote {json_out}")
