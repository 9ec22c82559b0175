"""Errors of the adapter layer (one-line messages, mapped by the CLI like every PawnError)."""

from __future__ import annotations

from pawn.errors import PawnError


class AdapterError(PawnError, ValueError):
    """An adapter operation that cannot be done (e.g. merging an activation-side adapter)."""
