"""Adapter trials: ``pawn adapt`` (:func:`pawn.train.adapt.run_adapt`) in process, one run
directory per trial, the objective its ``val_loss`` (spec §6.1: best val loss).

The §6.1 search spaces (the strategy table's rows, :mod:`pawn.sweep.space`) name strategy
settings; :func:`adapt_fields` maps them to ``pawn adapt``'s through the row (``rank`` →
``lora_rank``, ``targets = "qv"`` → ``lora_targets = ["q", "v"]``). The Lichess games come from the memory-mapped cache that the first trial
builds (later trials parse nothing); the backbone is loaded once per worker process and the
train chunk and validation are compiled once for all trials that differ only in array-valued
hyperparameters (:class:`pawn.train.adapt.AdaptReuse`, issue 15).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from pawn.adapters import get_strategy
from pawn.adapters.registry import STRATEGIES
from pawn.checkpoint import is_hub_id
from pawn.errors import PawnError
from pawn.sweep.trials import PrunerHook, SweepError, TrialOutcome, error_line
from pawn.train.adapt import AdaptReuse, AdaptTask, run_adapt
from pawn.train.adapt_config import AdaptSettings
from pawn.train.run import Hook, TrainingError
from pawn.vocab import MAX_SEQ_LEN

STRATEGY_OF_SPACE = {"tiny": "specialized_clm", "rosa-ratio": "retro-bottleneck"}
"""§6.1 space names whose ``pawn adapt`` strategy has another name (rosa-ratio sets a RoSA bottleneck
size and density: retro-bottleneck)."""

LEGACY_NAMES = {"dim": "bottleneck_dim"}
"""§6.1 names that are no strategy setting (v1's bottleneck space said ``dim``), still accepted in
``--space`` files and old studies."""


def _setting(space_name: str, name: str) -> str:
    """The ``pawn adapt`` setting of §6.1 parameter ``name``: through the strategy row's
    :meth:`~pawn.adapters.Strategy.setting_of` (``rank`` → ``lora_rank``, ``targets`` →
    ``sparse_targets`` for sparse), else the name itself (trainer-wide settings such as ``lr``)."""
    row = STRATEGIES.get(STRATEGY_OF_SPACE.get(space_name, space_name))
    name = LEGACY_NAMES.get(name, name)
    if row is None:
        return name
    try:
        return row.setting_of(name)
    except KeyError:
        return name


def adapt_fields(space_name: str, params: dict[str, Any]) -> dict[str, Any]:
    """§6.1 parameter names → ``pawn adapt`` settings fields (:func:`_setting`). A ``targets``
    preset (``"qkvo"``, ``"qv"``, ``"qkv"``) becomes a list of projection letters. Other names
    pass through unchanged (an unknown one is refused by the settings model, which fails that
    trial with the field named)."""
    out: dict[str, Any] = {}
    for k, v in params.items():
        if k == "targets" and isinstance(v, str) and "," not in v:
            v = list(v)
        out[_setting(space_name, k)] = v
    return out


def setting_names(space_name: str, name: str) -> tuple[str, ...]:
    """The ``pawn adapt`` settings fields that the §6.1 parameter ``name`` of space
    ``space_name`` sets (:func:`adapt_fields`; rosa-ratio's ``total_budget`` and
    ``bottleneck_ratio`` together set ``bottleneck_dim`` and ``density``, :func:`pawn.sweep.space.derive`)."""
    if space_name == "rosa-ratio" and name in ("total_budget", "bottleneck_ratio"):
        return ("bottleneck_dim", "density")
    return (_setting(space_name, name),)


def _resolved(config: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """``config`` with the ``data_seed`` the run resolved (a random one when none was set),
    read from the run directory's ``config.json``, so that ``best_config.json`` repeats the
    trial's shuffles. Unchanged when the file is unreadable (a run that wrote nothing)."""
    try:
        seed = json.loads((Path(run_dir) / "config.json").read_text()).get("data_seed")
    except (OSError, ValueError, AttributeError):
        return config
    return {**config, "data_seed": seed} if isinstance(seed, int) else config


class AdaptTrialRunner:
    """Adapter trials through :func:`pawn.train.adapt.run_adapt`.

    Args:
        base: fixed ``pawn adapt`` settings (``--base-config``), below the sweep's own
            ``checkpoint``/``data``/``strategy`` and the sampled parameters.
        strategy: the §6.1 space name (``lora``, ``bottleneck``, …, ``tiny``).
        checkpoint: the backbone (directory or Hub id). data: the Lichess source.

    Attributes:
        reuse: the :class:`~pawn.train.adapt.AdaptReuse` every trial of this runner shares
            (the loaded backbone, the compiled train chunk and validation).
    """

    command = AdaptTask.name
    task = AdaptTask  # the task its trials run (its cost, its population trainer)
    objective_key = "loss"  # pawn.metrics key of the val record

    def __init__(self, base: dict[str, Any], *, strategy: str, checkpoint: str, data: str,
                 log: Callable[[str], None] = print, sinks: Sequence[Callable[[Path], Any]] = ()):
        self.base, self.space_name, self.log, self.sinks = dict(base), strategy, log, tuple(sinks)
        self.fixed = {"backbone": checkpoint, "data": data, "strategy": STRATEGY_OF_SPACE.get(strategy, strategy)}
        self.reuse = AdaptReuse()
        self.settings_fields = frozenset(AdaptSettings.model_fields)

    def setting_names(self, name: str) -> tuple[str, ...]:
        """The settings fields a space parameter sets (:func:`setting_names`)."""
        return setting_names(self.space_name, name)

    def check(self) -> None:
        """Before any trial is created: a local backbone checkpoint must load (a run directory,
        a damaged or missing checkpoint would fail every trial the same way) and a local
        ``--data`` path must exist. Hub ids (backbone or data) are resolved by the first trial.

        Raises:
            pawn.sweep.trials.SweepError: the backbone or data cannot be used (one line, naming it).
        """
        data = str(self.fixed["data"])
        if not Path(data).exists() and not is_hub_id(data):
            raise SweepError(f"--data {data}: no such file or directory (nor a Hub dataset id)")
        src = self.fixed["backbone"]
        if is_hub_id(src) and not Path(src).exists():
            return
        try:
            self.reuse.backbone(AdaptSettings.model_construct(backbone=src, variant=self.base.get("variant")))
        except TrainingError as e:
            raise SweepError(f"--checkpoint: {e}") from None

    def config(self, params: dict[str, Any], trial_dir: Path) -> dict[str, Any]:
        cfg = AdaptSettings.load(**{**self.base, **self.fixed, **adapt_fields(self.space_name, params),
                                    "out": str(trial_dir), "resume": None})
        if "seq_len" not in cfg.user_set_fields:
            # as `pawn adapt` without --seq-len: the backbone's trained context, not the generic
            # default (the stored config names it, so run_adapt sees it as set)
            cfg = cfg.model_copy(update={"seq_len": self._trained_seq_len(cfg)})
        return cfg.model_dump(mode="json")

    def plan_cost(self):
        """One trial's cost from the fixed settings (:meth:`pawn.train.adapt.AdaptTask.cost`), the
        backbone loaded when it is a local checkpoint; None when the data decides the steps.

        Raises:
            pydantic.ValidationError / PawnError: the fixed settings do not validate, or the backbone fails.
        """
        settings = AdaptSettings.load(**{**self.base, **self.fixed, "out": None, "resume": None})
        if "seq_len" not in settings.user_set_fields:  # as each trial: the backbone's trained context
            settings = settings.model_copy(update={"seq_len": self._trained_seq_len(settings)})
        bb = self.reuse.backbone(settings)[0] if Path(str(settings.backbone)).exists() else None
        return self.task(settings).cost(backbone_config=None if bb is None else bb.config)

    def _trained_seq_len(self, cfg) -> int:
        """The sequence length the backbone was trained at (its run config's ``seq_len``), or
        ``cfg.seq_len`` when it records none, the strategy has no backbone, or the backbone cannot
        be loaded here (a Hub id, or a failure the trial itself reports)."""
        if not get_strategy(cfg.strategy).uses_backbone:
            return cfg.seq_len
        try:
            bb_run = self.reuse.backbone(cfg)[2]
        except PawnError:
            return cfg.seq_len
        n = (bb_run or {}).get("seq_len")
        return n if isinstance(n, int) and 2 <= n <= MAX_SEQ_LEN else cfg.seq_len

    def run(self, config: dict[str, Any], hooks: Sequence[Hook]) -> TrialOutcome:
        cfg = AdaptSettings.load(**config)
        pruner: Optional[PrunerHook] = next((h for h in hooks if isinstance(h, PrunerHook)), None)
        reported = (lambda: dict(pruner.reported)) if pruner else dict
        best = (lambda: pruner.best) if pruner else (lambda: float("nan"))
        try:
            res = run_adapt(cfg, log=self.log, progress=False, install_signal_handlers=False, hooks=hooks,
                            reuse=self.reuse, sinks=self.sinks)
        except PawnError as e:
            return TrialOutcome(best(), "exception", 0, Path(cfg.out), config, reported(), error_line(e))
        err = "validation loss was not finite" if res.reason == "nonfinite_val" else None
        return TrialOutcome(best(), res.reason, res.step, res.run_dir, _resolved(config, res.run_dir), reported(), err)
