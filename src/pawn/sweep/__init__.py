"""``pawn sweep``: Optuna studies over adapter and pretraining runs (spec
``eval-probe-generate-sweep-bench.md`` §6.1; issue 15).

- :mod:`.space` — search spaces per strategy (§6.1) and ``--space`` files.
- :mod:`.storage` — the study storage (SQLite by default, any SQLAlchemy URL, or an Optuna
  journal file), shared safely by several workers.
- :mod:`.trials` — the trial runner interface (settings → run → best val loss), the pruner hook,
  the pretraining runner (``run_pretrain`` in process) and :class:`~.trials.SweepError`.
- :mod:`.objective` — one trial's objective and verdict, and the trial counts both worker loops share.
- :mod:`.adapt` — the ``pawn adapt`` trial runner.
- :mod:`.population` — P trials differing only in array-valued hyperparameters trained as one
  vmapped program.
- :mod:`.study` — the driver: study creation, workers, results and the best trial's config.

Imports run one way (study → adapt, population → objective →
trials, space, storage, settings): the ``pawn.sweep`` layers contract in ``pyproject.toml``.
"""
