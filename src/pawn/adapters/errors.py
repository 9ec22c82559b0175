"""Errors of the adapter layer (one-line messages, mapped by the CLI like every PawnError)."""

from __future__ import annotations

from pawn.checkpoint import CheckpointError
from pawn.errors import PawnError


class AdapterError(PawnError, ValueError):
    """An adapter operation that cannot be done (e.g. merging an activation-side adapter)."""


class BackboneMismatchError(CheckpointError):
    """The backbone found for an adapter checkpoint is not the one it was trained on (its
    ``model.safetensors`` SHA-256 differs from the recorded one; the message names both)."""
