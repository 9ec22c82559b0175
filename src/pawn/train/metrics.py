"""JSONL metrics log (spec ``eval-probe-generate-sweep-bench.md`` §8.1, ``training-and-adapters.md``
§1.6): one typed record per line (``config``, ``train``, ``val``, ``hub``, ``end``) in the run
record's schema (:mod:`pawn.runs`, :data:`pawn.runs.SCHEMA_VERSION`) with an ISO timestamp and
elapsed seconds, NaN/Inf written as ``null``, host memory under ``mem``, flushed after every
record. Read runs back with :func:`pawn.runs.open_run`, never by parsing this file."""

from __future__ import annotations

import datetime as _dt
import json
import os
import resource
import time
from pathlib import Path
from typing import Any, Optional


from pawn.fileio import json_safe
from pawn.metrics import METRICS
from pawn.runs import METRIC_RECORDS, RUN_ID_FIELD, record_line


def host_memory() -> dict[str, float]:
    """Host memory of this process in GiB: current RSS (``mem/rss_gb``) and peak RSS
    (``mem/peak_rss_gb``), plus the system total/used when /proc/meminfo exists."""
    out: dict[str, float] = {}
    try:
        with open("/proc/self/statm") as f:
            rss_pages = int(f.read().split()[1])
        out["mem/rss_gb"] = rss_pages * os.sysconf("SC_PAGE_SIZE") / 2**30
    except (OSError, ValueError, IndexError):
        pass
    out["mem/peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    try:
        info = {}
        with open("/proc/meminfo") as f:
            for line in f:
                k, v = line.split(":", 1)
                info[k] = int(v.split()[0])
        out["mem/system_total_gb"] = info["MemTotal"] / 2**20
        out["mem/system_used_gb"] = (info["MemTotal"] - info.get("MemAvailable", info["MemFree"])) / 2**20
    except (OSError, KeyError, ValueError):
        pass
    return out


def device_memory() -> dict[str, float]:
    """Peak and current accelerator memory in GiB, when the backend reports it."""
    import jax

    out: dict[str, float] = {}
    try:
        stats = jax.local_devices()[0].memory_stats() or {}
    except Exception:  # backends without memory stats
        return out
    if "peak_bytes_in_use" in stats:
        out["mem/device_peak_gb"] = stats["peak_bytes_in_use"] / 2**30
    if "bytes_in_use" in stats:
        out["mem/device_current_gb"] = stats["bytes_in_use"] / 2**30
    return out


class MetricsLogger:
    """Append typed records to ``metrics.jsonl``.

    Args:
        path: the JSONL file (created if missing, appended otherwise).
        elapsed_offset: seconds already spent by earlier segments of the run (on resume).
        hooks: receive each record after it is written and flushed (``on_record(type, record)``)
            and are closed with the logger (:class:`pawn.train.hooks.RunHooks`: curves PNG,
            TensorBoard, W&B). A hook that raises is reported and dropped by ``RunHooks``.
        run_id: written as :data:`pawn.runs.RUN_ID_FIELD` into every ``config`` record (None: not).
    """

    def __init__(self, path: Path, *, elapsed_offset: float = 0.0, hooks: Optional[Any] = None,
                 run_id: Optional[str] = None):
        self.path = Path(path)
        self.run_id = run_id
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", encoding="utf-8")
        self._t0 = time.monotonic() - elapsed_offset
        self.hooks = hooks

    @property
    def elapsed(self) -> float:
        """Seconds since the run started (across resumes)."""
        return time.monotonic() - self._t0

    def write(self, record_type: str, step: Optional[int] = None, **fields: Any) -> dict:
        """Write one record in the run record's schema (:func:`pawn.runs.record_line`): ``type``,
        ``schema``, ``step`` (if given), the numeric fields named by a :data:`pawn.metrics.METRICS`
        key as the run's metric values, ``variants`` (``{variant name: {metric key: value}}``)
        when given (``train``/``val``/``eval`` records; a ``config`` record's fields are kept as
        given), the other fields, ``timestamp`` (ISO 8601, UTC), ``elapsed`` (s, 3 dp) and
        memory under ``mem`` (GiB). Returns the record as written."""
        metric_record = record_type in METRIC_RECORDS
        variants = fields.pop("variants", None) if metric_record else None
        values = {k: v for k, v in fields.items() if metric_record and k in METRICS
                  and (v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)))}
        rest = {k: v for k, v in fields.items() if k not in values}
        if record_type == "config" and self.run_id is not None:
            rest.setdefault(RUN_ID_FIELD, self.run_id)
        rest["timestamp"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
        rest["elapsed"] = round(self.elapsed, 3)
        if record_type != "config":
            mem = {**host_memory(), **device_memory()}
            rest["mem"] = {k.split("/", 1)[1]: v for k, v in mem.items()}
        rec = json_safe(record_line(record_type, step, values=values, variants=variants, fields=rest))
        self._f.write(json.dumps(rec, allow_nan=False) + "\n")
        self._f.flush()
        if self.hooks is not None:
            self.hooks.on_record(record_type, rec)
        return rec

    def close(self) -> None:
        """Close the file (every record is already flushed), then the hooks."""
        try:
            self._f.close()
        finally:
            if self.hooks is not None:
                self.hooks.close()


def read_metrics(path: Path) -> list[dict]:
    """Parse a metrics file line by line (a torn last line from a crash is skipped)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def truncate_metrics(path: Path, last_step: int) -> float:
    """Keep only records with ``step ≤ last_step`` (and step-less records) before a resume,
    rewriting the file atomically. Returns the largest ``elapsed`` kept (0 if none)."""
    if not path.exists():
        return 0.0
    # an ``end`` record of an earlier segment goes: the resumed run has not ended
    kept = [r for r in read_metrics(path) if r.get("type") != "end" and (r.get("step") is None or r["step"] <= last_step)]
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in kept:
            f.write(json.dumps(r, allow_nan=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return max((r.get("elapsed") or 0.0 for r in kept if r.get("type") != "config"), default=0.0)
