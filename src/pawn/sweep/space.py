"""Search spaces per strategy (spec ``eval-probe-generate-sweep-bench.md`` §6.1) and the
``--space`` override file.

A space maps a field name to an Optuna distribution (``FloatDistribution``,
``IntDistribution``, ``CategoricalDistribution``) or to a fixed value. A ``--space`` TOML/JSON
file is a table ``field = spec`` whose entries replace or add to the strategy's space:

- ``{type = "float", low = 1e-5, high = 1e-2, log = true}`` (optional ``step``)
- ``{type = "int", low = 5, high = 20}`` (optional ``step``, ``log``)
- ``{type = "categorical", choices = [32, 64]}``
- any plain value (number, string, bool): the field is fixed to it (not searched).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Union

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from pawn.adapters.registry import STRATEGIES, Choice, FloatRange, IntRange
from pawn.errors import UsageError
from pawn.settings import read_config_file

Space = dict[str, Union[BaseDistribution, Any]]
"""Field name → Optuna distribution, or a fixed value."""


class SpaceError(UsageError):
    """A ``--space`` file entry that is not a distribution; the message names file and field."""


def _f(low, high, log=False):
    return FloatDistribution(low, high, log=log)


def _i(low, high, step=1):
    return IntDistribution(low, high, step=step)


def _c(*choices):
    return CategoricalDistribution(list(choices))


_ADAPTER_COMMON: Space = {"lr": _f(1e-5, 1e-2, log=True), "batch_size": _c(32, 64, 128, 256),
                          "weight_decay": _f(0.0, 0.1), "warmup_frac": _f(0.0, 0.15), "patience": _i(5, 20)}


def _distribution(entry: Any) -> BaseDistribution:
    """An Optuna distribution from a strategy row's space entry (:mod:`pawn.adapters.registry`)."""
    if isinstance(entry, Choice):
        return CategoricalDistribution(list(entry.choices))
    if isinstance(entry, FloatRange):
        return FloatDistribution(entry.low, entry.high, log=entry.log)
    if isinstance(entry, IntRange):
        return IntDistribution(entry.low, entry.high, step=entry.step)
    raise TypeError(f"not a space entry: {entry!r}")


def strategy_space(strategy: str) -> Space:
    """The §6.1 space of an adapter strategy: the trainer-wide dimensions (lr, batch size, weight
    decay, warmup, patience) plus the strategy row's own :attr:`~pawn.adapters.Strategy.space`.
    The lr range is log-U[1e-5, 1e-2]; when the strategy's own default lr
    (:attr:`~pawn.adapters.Strategy.lr`) is above that range, its upper end is raised to 3× the
    default, so the search reaches past the default on both sides (IA³'s scaling vectors need a
    larger rate than the common range holds)."""
    row = STRATEGIES[strategy]
    common = dict(_ADAPTER_COMMON)
    if row.lr > common["lr"].high:
        common["lr"] = _f(common["lr"].low, 3 * row.lr, log=True)
    return {**common, **{k: _distribution(v) for k, v in row.space.items()}}


SPACES: dict[str, Space] = {
    **{name: strategy_space(name) for name in STRATEGIES},
    "tiny": strategy_space("specialized_clm"),
    "rosa-ratio": {**_ADAPTER_COMMON, "total_budget": _c(100_000, 250_000, 500_000), "bottleneck_ratio": _f(0.05, 0.95),
                   "lr": _f(1e-4, 3e-3, log=True), "batch_size": _c(64, 128), "rosa_warmup_steps": _c(64, 128)},
    "pretrain": {"lr": _f(1e-5, 1e-3, log=True), "batch_size": _c(128, 256, 512), "weight_decay": _f(0.0, 0.1),
                 "warmup_steps": _i(500, 5000, step=500), "total_steps": _c(50_000, 100_000)},
    "architecture": {"d_model": _c(512, 640, 768, 896, 1024, 1152, 1280), "n_layers": _i(8, 24, step=2),
                     "n_heads": _c(8, 16), "d_ff_mult": _c(3, 4, 5), "lr": _f(1e-5, 1e-3, log=True),
                     "batch_size": _c(128, 256), "weight_decay": _f(0.0, 0.1), "warmup_steps": _i(500, 3000)},
}
"""The §6.1 search spaces: one per adapter strategy (derived from the strategy table, so a new
strategy has its space here with no edit), ``tiny`` (= ``specialized_clm``), ``rosa-ratio``, and
the run types ``pretrain`` and ``architecture``. The adapter spaces use the strategy settings'
names (``rank``, ``targets``, ``bottleneck_dim``) or ``pawn adapt``'s (``lora_ffn``)."""

ROSA_RATIO_BASE = (16_384, 8_388_608)
"""rosa-ratio's base constants (§6.1): parameters per bottleneck unit, and the number of
weights a density applies to."""


def derive(strategy: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Fields computed from sampled ones: for ``rosa-ratio`` (§6.1)
    ``bottleneck_dim = round(budget·r / 16,384)`` and ``density = budget·(1−r) / 8,388,608``.
    Other strategies: ``params`` unchanged."""
    out = dict(params)
    if strategy == "rosa-ratio" and "total_budget" in out and "bottleneck_ratio" in out:
        b, r = out.pop("total_budget"), out.pop("bottleneck_ratio")
        out["bottleneck_dim"] = max(1, round(b * r / ROSA_RATIO_BASE[0]))
        out["density"] = b * (1 - r) / ROSA_RATIO_BASE[1]
    return out


def _parse_entry(name: str, spec: Any, where: str) -> Any:
    if not isinstance(spec, Mapping):
        return spec  # a fixed value
    kind = spec.get("type")
    extra = set(spec) - {"type", "low", "high", "log", "step", "choices"}
    if extra:
        raise SpaceError(f"{where}: field {name}: unknown keys {sorted(extra)} (use type, low, high, log, step, choices)")
    try:
        if kind == "float":
            return FloatDistribution(float(spec["low"]), float(spec["high"]), log=bool(spec.get("log", False)),
                                     step=None if spec.get("step") is None else float(spec["step"]))
        if kind == "int":
            return IntDistribution(int(spec["low"]), int(spec["high"]), log=bool(spec.get("log", False)),
                                   step=int(spec.get("step", 1)))
        if kind == "categorical":
            choices = spec["choices"]
            if not isinstance(choices, list) or not choices:
                raise ValueError("choices must be a non-empty list")
            return CategoricalDistribution(choices)
    except KeyError as e:
        raise SpaceError(f"{where}: field {name}: type {kind} needs {e.args[0]}") from None
    except (ValueError, TypeError) as e:
        raise SpaceError(f"{where}: field {name}: {e}") from None
    raise SpaceError(f"{where}: field {name}: type must be float, int or categorical, got {kind!r}")


def load_space(strategy: str, path: Path | None = None) -> Space:
    """The space of ``strategy`` (:data:`SPACES`), with a ``--space`` file's entries applied.

    Raises:
        SpaceError: unknown strategy, or a bad entry (one line naming the file and field).
        pawn.settings.ConfigFileError: unreadable/invalid TOML or JSON.
    """
    if strategy not in SPACES:
        raise SpaceError(f"no search space for {strategy!r}; known: {', '.join(SPACES)}")
    space = dict(SPACES[strategy])
    if path is not None:
        for name, spec in read_config_file(Path(path)).items():
            space[name] = _parse_entry(name, spec, str(path))
    return space


def suggest(trial: optuna.trial.BaseTrial, space: Space) -> dict[str, Any]:
    """Sample every searched field of ``space`` on ``trial`` (``suggest_float`` /
    ``suggest_int`` / ``suggest_categorical``) and return ``{field: value}`` including the fixed
    fields."""
    out: dict[str, Any] = {}
    for name, d in space.items():
        if isinstance(d, FloatDistribution):
            out[name] = trial.suggest_float(name, d.low, d.high, log=d.log, step=d.step)
        elif isinstance(d, IntDistribution):
            out[name] = trial.suggest_int(name, d.low, d.high, log=d.log, step=d.step)
        elif isinstance(d, CategoricalDistribution):
            out[name] = trial.suggest_categorical(name, list(d.choices))
        else:
            out[name] = d
    return out


def describe(space: Space) -> dict[str, Any]:
    """A JSON-able view of ``space`` (for ``--json`` and the study's user attributes)."""
    def one(d):
        if isinstance(d, BaseDistribution):
            return optuna.distributions.distribution_to_json(d)
        return d if not (isinstance(d, float) and not math.isfinite(d)) else str(d)

    return {k: one(v) for k, v in space.items()}
