"""Strategies added as modules of their own: each module of this package builds its settings model
and adapter module and calls :func:`pawn.adapters.registry.register` with its row;
:mod:`pawn.adapters.registry` imports every module here at import time (sorted by name), so a new
strategy needs no edit elsewhere."""
