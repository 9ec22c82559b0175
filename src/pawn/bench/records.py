"""Typed result records of ``pawn bench`` and their JSON form.

Every section returns a dataclass; :func:`to_json` turns it into the plain dict written by
``--json`` (the same keys as before the records were typed). Two field options shape that dict:
``omit_none`` (the key is left out while the value is None) and ``flatten`` (a nested record's
keys are merged into its parent's, e.g. a :class:`Measurement` inside the eval record).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from pawn.bench.timing import per_repetition_rates, rates

OMIT_NONE = {"omit_none": True}
"""Field metadata: leave the key out of the JSON while the value is None."""
FLATTEN = {"flatten": True}
"""Field metadata: merge the nested record's keys into the parent's JSON object."""


def to_json(obj: Any) -> Any:
    """JSON-ready form of a record: dataclasses become dicts (see the module docstring),
    objects with ``to_dict()`` use it, lists/tuples/dicts are converted element-wise."""
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if v is None and f.metadata.get("omit_none"):
                continue
            if f.metadata.get("flatten"):
                out.update(to_json(v))
            else:
                out[f.name] = to_json(v)
        return out
    if isinstance(obj, dict):
        return {k: to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    return obj


@dataclass
class Measurement:
    """Timed repetitions of one workload and the throughputs derived from them.

    Attributes:
        median_s, min_s, max_s: wall seconds per timed repetition; n: repetitions.
        first_call_s, compile_s: the first warm-up call and its excess over the median (tracing
            + compilation, an estimate); None when the workload had no timed warm-up.
        rates: throughputs by unit (``"tokens_per_s"``, ``"tokens_per_s_min"`` …), work / time.
        work: the workload's own figures (games, plies, tokens, …), written after the rates.
    """

    median_s: float
    min_s: float
    max_s: float
    n: int
    first_call_s: Optional[float] = None
    compile_s: Optional[float] = None
    rates: dict[str, float] = field(default_factory=dict)
    work: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, stats: dict[str, Any], **work: Any) -> "Measurement":
        """From :func:`~pawn.bench.timing.timing_stats` or :func:`~pawn.bench.timing.time_call`
        output; ``work`` goes to :attr:`work`."""
        m = cls(stats["median_s"], stats["min_s"], stats["max_s"], stats["n"], stats.get("first_call_s"), stats.get("compile_s"))
        m.work.update(work)
        return m

    def per(self, work: float, unit: str) -> "Measurement":
        """Add the rate ``work / time`` as ``unit`` (median, ``_min``, ``_max``); returns self."""
        self.rates.update(rates({"median_s": self.median_s, "min_s": self.min_s, "max_s": self.max_s}, work, unit))
        return self

    def per_repetition(self, samples_s: Sequence[float], work: Sequence[float], unit: str) -> "Measurement":
        """Add :func:`~pawn.bench.timing.per_repetition_rates` as ``unit``; returns self."""
        self.rates.update(per_repetition_rates(samples_s, work, unit))
        return self

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"median_s": self.median_s, "min_s": self.min_s, "max_s": self.max_s, "n": self.n}
        if self.compile_s is not None:
            d.update(first_call_s=self.first_call_s, compile_s=self.compile_s)
        return {**d, **self.rates, **to_json(self.work)}
