"""``python -m pawn.cli``: the ``pawn`` command."""

from pawn.cli import run

run()
