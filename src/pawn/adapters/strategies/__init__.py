"""One module per adapter strategy (the PEFT shape): each builds its settings model on
:class:`pawn.adapters.configs.StrategySettings`, its adapter module on the public base
:class:`pawn.adapters.base.Adapter`, and hands its row to :func:`pawn.adapters.table.register`.
:mod:`pawn.adapters.registry` imports every module here at import time, so a new strategy needs
no edit elsewhere: ``pawn adapt --strategy`` (and its help), ``--list-strategies`` and the sweep
spaces follow from the row."""
