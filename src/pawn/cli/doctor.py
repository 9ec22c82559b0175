"""``pawn doctor``: what this installation runs on (:func:`pawn.cli._accel.doctor_report`)."""

from __future__ import annotations

import typer


def command() -> None:
    """Print the package, engine, Python and JAX versions, JAX's backend and devices, and whether
    an NVIDIA GPU or a TPU on this machine goes unused (with the install line that fixes it).

    Imports JAX and starts its backend (a few seconds); `pawn --version` prints the versions only."""
    from pawn.cli._accel import doctor_report

    rows = doctor_report()
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        typer.echo(f"{k:<{width}}  {v}")
