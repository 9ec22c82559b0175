"""One line per validation, printed when it happens (issue 26): ``pawn pretrain`` and ``pawn
adapt`` wrote validation results only to ``metrics.jsonl`` and the end-of-run table, so a
terminal or a log file showed nothing of them for hours.

The hook runs after the early-stopping hook (it sees ``val/improved`` and the best so far) and
writes through the progress reporter (:meth:`pawn.progress.ProgressReporter.note`), so in a
terminal the line goes above the bar and in a log it sits between the plain progress lines.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

from pawn.runs import SCHEMA_VERSION, parse_record
from pawn.train.run import ChunkContext, Hook


def _pct(v: Any) -> str:
    return "nan" if not isinstance(v, (int, float)) or v != v else f"{100 * v:.1f}%"


def _num(v: Any) -> str:
    return "nan" if not isinstance(v, (int, float)) or v != v else f"{v:.4f}"


def _nats(v: Any) -> str:
    return "nan" if not isinstance(v, (int, float)) or v != v else f"{v:+.3f}"


def pretrain_validation_line(step: int, val: Mapping[str, Any], models: Sequence[tuple[str, str]]) -> str:
    """``validation at step N: <model> loss L, top-1 A, legal R, complete C, excess E nats; …[; improved]``
    from a pretrain ``val`` record (:mod:`pawn.runs` schema: a supernet's values under
    ``variants``; excess: the legal-masked loss over the uniform-over-legal player's, nats);
    ``models`` is ``(label, variant name)`` per model, in print order. Ends with
    ``improved`` when the monitored model's validation improved (``val/improved``)."""
    rec = parse_record(dict(val, type="val", schema=SCHEMA_VERSION))
    parts = []
    for label, name in models:
        v = rec.variants.get(name, {}) if rec.variants else rec.values
        parts.append(f"{label} loss {_num(v.get('loss'))}, top-1 {_pct(v.get('top1'))}, "
                     f"legal {_pct(v.get('legal_rate'))}, complete {_pct(v.get('completion_rate'))}, "
                     f"excess {_nats(v.get('excess_nats'))} nats")
    tail = "; improved" if val.get("val/improved") else ""
    return f"validation at step {step}: " + "; ".join(parts) + tail


def adapt_validation_line(step: int, val: Mapping[str, Any], steps_per_epoch: Optional[int] = None) -> str:
    """``validation at step N (epoch E): loss L, top-1 A, top-5 B[, improved]`` from an adapt
    ``val`` record (``loss``, ``top1``, ``top5``; top-1 over every position)."""
    ep = f" (epoch {step // steps_per_epoch})" if steps_per_epoch else ""
    tail = ", improved" if val.get("val/improved") else ""
    return (f"validation at step {step}{ep}: loss {_num(val.get('loss'))}, top-1 {_pct(val.get('top1'))}, "
            f"top-5 {_pct(val.get('top5'))}{tail}")


class ValidationLineHook(Hook):
    """After every chunk that validated (``ctx.val`` set), write ``line(step, val)`` through
    ``write`` (the progress reporter's :meth:`~pawn.progress.ProgressReporter.note`, or the
    command's log without a progress display)."""

    def __init__(self, line: Callable[[int, Mapping[str, Any]], str], write: Callable[[str], None]):
        self.line, self.write = line, write

    def on_chunk(self, ctx: ChunkContext) -> None:
        if ctx.val is not None:
            self.write(self.line(ctx.step, ctx.val))
