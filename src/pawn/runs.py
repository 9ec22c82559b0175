"""The run record: one typed reader of every run directory PAWN writes (pretraining and adapters).

A run directory holds ``config.json`` (the resolved, re-feedable config), ``metrics.jsonl`` (one
JSON record per line), ``schedule_health.json`` (spec ``training-and-adapters.md`` §1.10),
``checkpoints/step_NNNNNNNN`` and ``checkpoints/best``, an adapter run's ``split.json`` (which games it
trained, validated and tested on: :mod:`pawn.data.split`), and the ``eval*.json`` reports of
``pawn eval --json`` kept beside it. Every consumer (the model card, ``curves.png``, TensorBoard and
W&B, the sweep objective, ``pawn report``, ``pawn dashboard``, ``pawn lab``) reads runs through
:func:`open_run`, never by parsing ``metrics.jsonl`` itself.

**One schema** (:data:`SCHEMA_VERSION` = 2) for every record, the same for pretraining and
adapters: ``type`` (``config``, ``train``, ``val``, ``eval``, ``hub``, ``end``), ``schema``,
``step``, the metrics under their :mod:`pawn.metrics` keys at the top level (the run's model: a
supernet's monitored variant, the joint loss for a supernet's ``train`` ``loss``), per-variant
values under ``variants`` (``{"small": {"loss": ...}, ...}``), host/device memory under ``mem``
(GiB), an adapter's weight norms under ``weights``, then ``timestamp`` and ``elapsed`` (s).

**Older runs** (schema 1: no ``schema`` key) are migrated on read: pretraining's
``val/accuracy_d64_L2_F256``, ``loss_d64_L2_F256``, ``train/accuracy`` and adapters' ``val_top1``,
``train_top1``, ``mem/rss_gb``, ``weights/layer0.wq.A`` become the same typed :class:`Record`.

**Which positions a figure counts** (:func:`positions_of`, :attr:`Run.positions`). From schema 3
(:data:`MOVE_DECISIONS_SCHEMA`) an adapter run under the hard legal mask counts only **move
decisions** in its loss, top-1 and top-5 (train and val): the end-of-game slot, whose legal set is
{PAD} alone, a certain hit with zero loss under the mask, is no longer counted, nor the last slot
of a game cut at the ply cap. Records of schema 1 and 2 keep their meaning on read — those
figures include one such free slot per game — and are labelled by it, so figures of the two
definitions are never compared as equals. Pretraining and unmasked adapter runs count every
supervised position in every schema (the published convention).

This module imports neither JAX nor the engine.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

from pawn.errors import PawnError
from pawn.metrics import METRICS, RECORD_KINDS, V1_NAMES

SCHEMA_VERSION = 3
"""The version of the records written by this PAWN (the ``schema`` field of each record): 2 the
one typed schema of every record, 3 the same fields with an adapter's legal-masked figures over
move decisions only (:data:`MOVE_DECISIONS_SCHEMA`)."""

MOVE_DECISIONS_SCHEMA = 3
"""The first schema whose legal-masked adapter figures (loss, top-1, top-5) count move decisions
only; older records count each game's end-of-game slot too (a certain hit under the mask)."""

POSITIONS: dict[str, str] = {
    "move_decisions": "every move decision (legal-masked; no end-of-game slot)",
    "with_end_of_game": "every supervised position, the end-of-game slot included: a certain hit under the legal mask "
                        f"(written before record schema {MOVE_DECISIONS_SCHEMA})",
    "published": "every supervised position, the end-of-game slot included (published convention)",
}
"""The position sets a run's loss, top-1 and top-5 may count (:func:`positions_of`) → how tables say it.
Figures of different sets are not comparable: ``with_end_of_game`` adds about one free hit per game."""

METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.json"
HEALTH_FILE = "schedule_health.json"
CHECKPOINTS_DIR = "checkpoints"
LAB_FILE = "lab.json"
VARIANTS_DIR = "variants"
STEP_DIR = re.compile(r"^step_(\d{8,})$")
BEST_DIR = "best"
RECORD_TYPES = ("config", "train", "val", "eval", "hub", "end")
METRIC_RECORDS = frozenset(RECORD_KINDS)
"""The record types whose numeric fields are metric values (and ``variants`` per-variant ones)."""

RECORD_FIELDS = frozenset({"epoch", "step_start", "elapsed"})
"""Numbers a ``train``/``val``/``eval`` record carries under a plain name that are not metrics
(the epoch, the chunk's first step, the seconds since the run started)."""

COMPLETE_REASONS = frozenset({"completed", "step_limit"})
"""Stop reasons (spec §1.10) of a run that reached its planned length."""
FAILED_REASONS = frozenset({"exception", "error", "nonfinite", "non_finite_loss"})
"""Stop reasons of a run that ended in an error."""

_CFG_SUFFIX = re.compile(r"^(?P<name>.+)_(?P<cfg>d\d+_L\d+_F\d+)$")


class RunError(PawnError):
    """A path that is not a readable run directory (one line naming it)."""


# ============================================================================ records
@dataclass(frozen=True)
class Record:
    """One line of ``metrics.jsonl``, typed and in the current schema.

    Attributes:
        type: ``config``, ``train``, ``val``, ``eval``, ``hub``, ``end`` (others are kept as is).
        step: the optimizer step (None on ``config`` records).
        values: canonical metric keys (:data:`pawn.metrics.METRICS`) → value (None for NaN/Inf
            as written) of the run's model.
        variants: variant name (``small``, ``base``, ``large``) → its metric values, for a
            supernet; ``{}`` otherwise.
        fields: everything else as written (``timestamp``, ``elapsed`` in s, ``mem`` in GiB,
            ``weights``, ``includes_compile``, ``step_start``, ``epoch``, hub push fields, the
            ``end`` reason, the ``config`` record's ``run_config``/``summary``...).
        offset, end: the byte range of the line in ``metrics.jsonl`` (``end`` is the next cursor).
        schema: the schema the line was written in (1 for files written before this record).
    """

    type: str
    step: Optional[int]
    values: dict[str, Optional[float]]
    variants: dict[str, dict[str, Optional[float]]]
    fields: dict[str, Any]
    offset: int = 0
    end: int = 0
    schema: int = SCHEMA_VERSION

    def get(self, key: str, variant: Optional[str] = None) -> Optional[float]:
        """The value of metric ``key`` (of ``variant`` when given), None when absent."""
        if variant is not None:
            return (self.variants.get(variant) or {}).get(key)
        return self.values.get(key)

    def to_json(self) -> dict[str, Any]:
        """The record in the current on-disk layout (what :func:`record_line` writes), under its own
        schema number (2 for a migrated schema-1 record: the same layout and meaning), so a
        record written before :data:`MOVE_DECISIONS_SCHEMA` keeps its meaning when rewritten."""
        out: dict[str, Any] = {"type": self.type, "schema": max(self.schema, 2)}
        if self.step is not None:
            out["step"] = self.step
        out.update(self.values)
        if self.variants:
            out["variants"] = self.variants
        out.update(self.fields)
        return out


def positions_of(schema: int, *, adapter: bool, legal_mask: bool = True) -> str:
    """The key of :data:`POSITIONS` that the loss, top-1 and top-5 of a record count.

    Args:
        schema: the record's schema (:attr:`Record.schema`).
        adapter: the record is an adapter run's (``pawn adapt``, a sweep trial).
        legal_mask: the adapter trained and validated under the hard legal mask (not
            ``--no-legal-mask``).

    Returns:
        ``"move_decisions"`` (an adapter under the mask, schema ≥ :data:`MOVE_DECISIONS_SCHEMA`),
        ``"with_end_of_game"`` (the same, older records) or ``"published"`` (pretraining, or an
        adapter without the mask: every supervised position, as published).
    """
    if not adapter or not legal_mask:
        return "published"
    return "move_decisions" if schema >= MOVE_DECISIONS_SCHEMA else "with_end_of_game"


def _num(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class _Migration:
    """What reading schema-1 records needs from earlier lines: the variant names of the
    supernet's metric keys (``d64_L2_F256`` → ``small``) and its monitored model."""

    def __init__(self) -> None:
        self.cfg_names: dict[str, str] = {}
        self.main_cfg: Optional[str] = None

    def learn(self, raw: dict) -> None:
        summary = raw.get("summary") if isinstance(raw.get("summary"), dict) else {}
        variants = summary.get("variants") if isinstance(summary.get("variants"), dict) else {}
        for name, v in variants.items():
            if isinstance(v, dict) and isinstance(v.get("config"), str):
                self.cfg_names[v["config"]] = name
        mc = raw.get("model_config")
        if isinstance(mc, dict) and all(k in mc for k in ("d_model", "n_layers", "d_ff")):
            self.main_cfg = f"d{mc['d_model']}_L{mc['n_layers']}_F{mc['d_ff']}"

    def variant(self, cfg: str) -> str:
        return self.cfg_names.get(cfg, cfg)


def _split_v1(raw: dict, mig: _Migration) -> tuple[dict, dict, dict]:
    """values, variants, fields of a schema-1 record (see the module docstring)."""
    kind = raw.get("type")
    values: dict[str, Any] = {}
    variants: dict[str, dict[str, Any]] = {}
    fields: dict[str, Any] = {}
    for k, v in raw.items():
        if k in ("type", "step"):
            continue
        if k.startswith("mem/"):
            fields.setdefault("mem", {})[k[4:]] = v
            continue
        if k.startswith("weights/"):
            fields.setdefault("weights", {})[k[8:]] = v
            continue
        if kind in ("train", "val"):
            name = k[4:] if (kind == "val" and k.startswith("val/")) else k
            m = _CFG_SUFFIX.match(name)
            if m and m.group("name") in V1_NAMES:
                variants.setdefault(mig.variant(m.group("cfg")), {})[V1_NAMES[m.group("name")]] = _num(v)
                continue
            if m:  # a per-variant field the registry does not know: kept under its old name
                variants.setdefault(mig.variant(m.group("cfg")), {})[m.group("name")] = _num(v)
                continue
            if name in V1_NAMES and not isinstance(v, bool) and (v is None or isinstance(v, (int, float))):
                values[V1_NAMES[name]] = _num(v)
                continue
        fields[k] = v
    if kind == "val" and variants:
        main = mig.variant(mig.main_cfg) if mig.main_cfg else None
        if main not in variants:
            main = list(variants)[-1]
        for k, v in variants[main].items():
            values.setdefault(k, v)
    if len(variants) == 1:  # a single model: its values are the run's
        (only,) = variants.values()
        for k, v in only.items():
            values.setdefault(k, v)
        variants = {}
    return values, variants, fields


def _split_v2(raw: dict) -> tuple[dict, dict, dict]:
    values: dict[str, Any] = {}
    fields: dict[str, Any] = {}
    metric = raw.get("type") in METRIC_RECORDS
    for k, v in raw.items():
        if k in ("type", "step", "schema") or (metric and k == "variants"):
            continue
        if metric and k in METRICS and (v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))):
            values[k] = _num(v)
        else:
            fields[k] = v
    variants = raw.get("variants") if metric and isinstance(raw.get("variants"), dict) else {}
    return values, {str(n): dict(v) for n, v in variants.items() if isinstance(v, dict)}, fields


def parse_record(raw: dict, *, offset: int = 0, end: int = 0, migration: Optional[_Migration] = None) -> Record:
    """One decoded ``metrics.jsonl`` object as a :class:`Record` (schema 1 migrated).

    Args:
        raw: the JSON object of the line. offset, end: its byte range in the file.
        migration: what earlier lines of the same file taught (variant names); a fresh one
            when None (schema-1 per-variant keys then keep their config names).
    """
    mig = migration or _Migration()
    schema = raw.get("schema", 1)
    if raw.get("type") == "config":
        mig.learn(raw)
    if isinstance(schema, int) and schema >= 2:
        values, variants, fields = _split_v2(raw)
    else:
        values, variants, fields = _split_v1(raw, mig)
        schema = 1
    step = raw.get("step")
    return Record(str(raw.get("type", "")), int(step) if isinstance(step, (int, float)) and not isinstance(step, bool) else None,
                  values, variants, fields, offset, end, int(schema))


def parse_records(raws: Iterable[dict]) -> list[Record]:
    """:func:`parse_record` of a file's decoded lines in order, sharing what earlier ``config``
    records teach (schema-1 variant names)."""
    mig = _Migration()
    return [parse_record(dict(r), migration=mig) for r in raws]


def read_records(path: str | os.PathLike, since: int = 0) -> tuple[list[Record], int]:
    """Every complete record of a ``metrics.jsonl`` whose line starts at byte ``since`` or later,
    and the cursor to pass next time.

    A last line without its newline (a writer in the middle of a write, or a crash) is not
    returned and the cursor stays at its start, so polling with the returned cursor never
    repeats nor drops a record. A complete line that is not JSON (damage) is skipped.
    Schema-1 per-variant names are resolved from the file's ``config`` records even when
    ``since`` is past them.

    Raises:
        RunError: the file cannot be read (one line naming it).
    """
    p = Path(path)
    try:
        with open(p, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return [], since
    except OSError as e:
        raise RunError(f"{p}: cannot read the metrics ({e.strerror or e})") from None
    return parse_bytes(data, since)


def parse_bytes(data: bytes, since: int = 0) -> tuple[list[Record], int]:
    """:func:`read_records` of the bytes of a ``metrics.jsonl`` (e.g. the cut of it a Hub push
    uploads): the complete records whose line starts at ``since`` or later, and the cursor."""
    mig = _Migration()
    out: list[Record] = []
    pos = 0
    cursor = since
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:
            break  # torn last line: not returned, the cursor stays before it
        line = data[pos:nl]
        start, pos = pos, nl + 1
        if start >= since:
            cursor = pos
        if not line.strip():
            continue
        if start < since and b'"config"' not in line[:40]:
            continue
        try:
            raw = json.loads(line)
        except ValueError:
            continue
        if not isinstance(raw, dict):
            continue
        rec = parse_record(raw, offset=start, end=pos, migration=mig)
        if start >= since:
            out.append(rec)
    return out, max(cursor, since)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_metric(record_type: str, key: str, where: str = "") -> None:
    """Raise ValueError unless ``key`` is a registered metric whose row lets ``record_type`` carry it."""
    m = METRICS.get(key)
    if m is None:
        raise ValueError(f"record {record_type}{where}: {key!r} is not a metric of pawn.metrics.METRICS "
                         f"(register its row with pawn.metrics.register)")
    if record_type in METRIC_RECORDS and record_type not in m.kinds:
        raise ValueError(f"record {record_type}{where}: metric {key!r} is not written into {record_type} records "
                         f"(its row's kinds: {', '.join(m.kinds)})")


def _writable_metric(record_type: str, key: str) -> bool:
    m = METRICS.get(key)
    return m is not None and (record_type not in METRIC_RECORDS or record_type in m.kinds)


def writable_fields(record_type: str, fields: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``fields`` of a ``record_type`` record without the metric values :func:`record_line` would
    refuse, and the keys left out (a per-variant one as ``variants.<name>.<key>``): in a
    ``train``/``val``/``eval`` record, a number under a key that is no registered metric (or
    whose row's ``kinds`` lacks ``record_type``), whether a metric key or a plain top-level
    name (neither namespaced with ``/`` nor one of :data:`RECORD_FIELDS`). Records written by a
    newer PAWN or with a plugin metric (:func:`pawn.metrics.register`) not registered here carry
    such keys; every reader keeps them, the writer refuses them. Other records are returned whole.
    """
    if record_type not in METRIC_RECORDS:
        return dict(fields), []
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for k, v in fields.items():
        if k == "variants" and isinstance(v, dict):
            variants: dict[str, Any] = {}
            for name, vals in v.items():
                if isinstance(vals, dict):
                    dropped += [f"variants.{name}.{mk}" for mk in vals if not _writable_metric(record_type, mk)]
                    vals = {mk: mv for mk, mv in vals.items() if _writable_metric(record_type, mk)}
                variants[name] = vals
            kept[k] = variants
            continue
        metric_like = (k in METRICS and (v is None or _is_number(v))) or (_is_number(v) and "/" not in k and k not in RECORD_FIELDS)
        if metric_like and not _writable_metric(record_type, k):
            dropped.append(k)
            continue
        kept[k] = v
    return kept, dropped


def record_line(record_type: str, step: Optional[int] = None, *, values: Optional[dict] = None,
                variants: Optional[dict] = None, fields: Optional[dict] = None) -> dict[str, Any]:
    """The JSON object of one record in the current schema (what the metrics logger writes):
    ``type``, ``schema``, ``step``, the metric ``values`` (keys of :data:`pawn.metrics.METRICS`),
    ``variants`` and the other fields, in that order.

    Raises:
        ValueError: a key of ``values`` (or of a variant) that is not a registered metric or whose
            row's ``kinds`` lacks ``record_type``; in a ``train``/``val``/``eval`` record, a
            top-level number under a plain name that is neither a metric nor one of
            :data:`RECORD_FIELDS` (an unregistered metric would otherwise vanish from every
            report; namespaced extras such as ``rosa/phase`` are kept as fields).
    """
    for k in (values or {}):
        _check_metric(record_type, k)
    if variants and record_type not in METRIC_RECORDS:
        raise ValueError(f"record {record_type}: only {', '.join(sorted(METRIC_RECORDS))} records have variants")
    for name, vals in (variants or {}).items():
        for k in vals:
            _check_metric(record_type, k, f", variant {name}")
    if record_type in METRIC_RECORDS:
        for k, v in (fields or {}).items():
            if _is_number(v) and "/" not in k and k not in RECORD_FIELDS:
                _check_metric(record_type, k)
    out: dict[str, Any] = {"type": record_type, "schema": SCHEMA_VERSION}
    if step is not None:
        out["step"] = int(step)
    out.update(values or {})
    if variants:
        out["variants"] = variants
    out.update(fields or {})
    return out


RUN_ID_FIELD = "run_id"
"""The ``config`` record field that names the run: the same in every segment of a resumed run,
different for every other run (also one written into a folder of the same name)."""


def new_run_id() -> str:
    """A fresh run id: a random UUID (version 4, RFC 9562) as 32 lowercase
    hex digits."""
    import uuid

    return uuid.uuid4().hex


@dataclass(frozen=True)
class RunIdentity:
    """What tells two copies of one run's ``metrics.jsonl`` from two runs (:func:`run_identity`).

    Attributes:
        run_id: the last ``config`` record's :data:`RUN_ID_FIELD` (None in records written before
            run ids). started: the first ``config`` record's ``timestamp`` (ISO 8601; None without
            a config record): a resumed run keeps its first segment's record.
    """

    run_id: Optional[str]
    started: Optional[str]

    def same_run(self, run_id: Optional[str], started: Optional[str]) -> bool:
        """Whether these records are of the run with ``run_id`` whose first config record has
        ``started`` (None: that run has no records yet): the ids when both have one, else the first
        config record's timestamp (a run started before run ids, resumed by a PAWN that gave it
        one); False when neither can tell."""
        if self.run_id is not None and run_id is not None and self.run_id == run_id:
            return True
        return self.started is not None and self.started == started


def run_identity(records: Iterable[Record]) -> RunIdentity:
    """The :class:`RunIdentity` of a run's records (from :func:`read_records` or :func:`parse_bytes`)."""
    configs = [r for r in records if r.type == "config"]
    ids = [r.fields.get(RUN_ID_FIELD) for r in configs if isinstance(r.fields.get(RUN_ID_FIELD), str)]
    started = configs[0].fields.get("timestamp") if configs else None
    return RunIdentity(ids[-1] if ids else None, started if isinstance(started, str) else None)


def last_per_step(records: Iterable[Record]) -> list[Record]:
    """The records sorted by step with the last one written for each step kept (a resumed run
    re-does the steps after its checkpoint)."""
    by_step: dict[int, Record] = {}
    for r in records:
        if r.step is not None:
            by_step[r.step] = r
    return [by_step[s] for s in sorted(by_step)]


# ============================================================================ runs
@dataclass(frozen=True)
class CheckpointInfo:
    """One ``checkpoints/step_NNNNNNNN`` of a run.

    Attributes:
        step: its optimizer step. path: the directory.
        verified: its ``.complete`` manifest (SHA-256 of every file) verifies; adapter
            checkpoints without a manifest count as verified when their files are present; None
            when the manifest was not checked (:meth:`Run.checkpoints` with ``verify=False``).
        is_best: ``checkpoints/best`` holds the same step.
        pushed: True/False when a ``hub`` record reports this step's push, None if never pushed.
    """

    step: int
    path: Path
    verified: Optional[bool]
    is_best: bool
    pushed: Optional[bool]


@dataclass(frozen=True)
class RunStatus:
    """Where a run stands.

    Attributes:
        state: ``running`` (records still coming), ``complete`` (reached its planned steps),
            ``stopped`` (early stop, signal, pause), ``failed`` (an error), ``unknown`` (no end
            record and no recent write: the process is gone, or an older PAWN wrote it).
        reason: the stop reason (spec §1.10: ``completed``, ``step_limit``, ``early_stop``,
            ``sigterm``, ``paused``, ``exception``...; a signal stop whose ``end`` record names the
            signal is ``sigint`` or ``sigterm`` by the signal received) or why the state is unknown.
        step: the last step with a record. total_steps: the planned length.
        last_write_age_s: seconds since ``metrics.jsonl`` was last written.
    """

    state: str
    reason: Optional[str]
    step: Optional[int]
    total_steps: Optional[int]
    last_write_age_s: Optional[float] = None


def _read_json(path: Path) -> Optional[Any]:
    try:
        return json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None


MAX_REPORT_BYTES = 20 * 2**20
"""The largest file a run's report reader reads (:func:`read_file_within`); an eval report is a few KiB."""


def read_file_within(path: str | os.PathLike, within: str | os.PathLike, max_bytes: int = MAX_REPORT_BYTES) -> bytes:
    """The bytes of ``path`` when it is a regular file (a symbolic link to one is followed) that
    resolves inside the folder ``within`` and holds at most ``max_bytes`` bytes.

    The file is opened without blocking (``O_NONBLOCK``) and checked with ``fstat`` on the open
    descriptor, so a FIFO or device met here (one swapped in after a check too) is refused instead
    of being waited on or read without end; at most ``max_bytes + 1`` bytes are ever read.

    Raises:
        RunError: one line naming ``path`` and why: a link that leads nowhere, a link loop, a link
            out of ``within``, not a regular file (FIFO, device, socket, folder), larger than
            ``max_bytes``, or unreadable.
    """
    import stat as _stat

    p = Path(path)
    try:
        real = Path(os.path.realpath(p, strict=True))
    except OSError as e:
        import errno as _errno

        if e.errno == _errno.ELOOP:
            raise RunError(f"{p}: a symbolic link loop; not read") from None
        if e.errno == _errno.ENOENT and os.path.islink(p):
            raise RunError(f"{p}: a symbolic link to a file that does not exist; not read") from None
        raise RunError(f"{p}: cannot be read ({e.strerror or e})") from None
    home = Path(os.path.realpath(within))
    if real != home and home not in real.parents:
        raise RunError(f"{p}: a symbolic link out of {home}; not read")  # where it leads is not shown
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        raise RunError(f"{p}: cannot be read ({e.strerror or e})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not _stat.S_ISREG(st.st_mode):
            what = ("a FIFO (named pipe)" if _stat.S_ISFIFO(st.st_mode) else "a device" if _stat.S_ISCHR(st.st_mode)
                    or _stat.S_ISBLK(st.st_mode) else "a socket" if _stat.S_ISSOCK(st.st_mode) else
                    "a folder" if _stat.S_ISDIR(st.st_mode) else "not a regular file")
            raise RunError(f"{p}: {what}, not a regular file; not read")
        if st.st_size > max_bytes:
            raise RunError(f"{p}: {st.st_size:,} bytes, more than the {max_bytes:,} read; not read")
        try:
            data = f.read(max_bytes + 1)
        except OSError as e:
            raise RunError(f"{p}: cannot be read ({e.strerror or e})") from None
    if len(data) > max_bytes:  # grew since fstat
        raise RunError(f"{p}: more than the {max_bytes:,} bytes read; not read")
    return data


def _is_run_dir(path: Path) -> bool:
    return (path / METRICS_FILE).is_file() and (path / CONFIG_FILE).is_file()


@dataclass
class Run:
    """One run directory, read through the run record. Build with :func:`open_run`.

    Attributes:
        path: the directory. name: its name. kind: ``pretrain`` or ``adapt``.
        config: the resolved run config (``config.json``; an adapter run's ``run_config``).
    """

    path: Path
    config: dict
    kind: str
    _records: Optional[list[Record]] = field(default=None, repr=False)
    _cursor: int = field(default=0, repr=False)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS_FILE

    # ------------------------------------------------------------------ records
    def records(self, since: int = 0, types: Optional[Iterable[str]] = None) -> tuple[list[Record], int]:
        """The records whose line starts at byte ``since`` or later (of the given ``types``),
        and the next cursor (see :func:`read_records`: no record twice, none skipped)."""
        recs, cursor = read_records(self.metrics_path, since)
        if types is not None:
            want = set(types)
            recs = [r for r in recs if r.type in want]
        return recs, cursor

    def all_records(self) -> list[Record]:
        """Every record (read once and then extended from the cursor on each call)."""
        if self._records is None:
            self._records, self._cursor = read_records(self.metrics_path)
        else:
            new, self._cursor = read_records(self.metrics_path, self._cursor)
            self._records.extend(new)
        return self._records

    def _of(self, kind: str) -> list[Record]:
        return [r for r in self.all_records() if r.type == kind]

    @property
    def config_record(self) -> Optional[Record]:
        """The last ``config`` record (a resumed run writes one per segment)."""
        recs = self._of("config")
        return recs[-1] if recs else None

    @property
    def train(self) -> list[Record]:
        """``train`` records, last per step."""
        return last_per_step(self._of("train"))

    @property
    def val(self) -> list[Record]:
        """``val`` records, last per step."""
        return last_per_step(self._of("val"))

    @property
    def hub(self) -> list[Record]:
        """``hub`` records (push outcomes), in file order."""
        return self._of("hub")

    @property
    def end(self) -> Optional[Record]:
        """The last ``end`` record when no ``train`` record follows it (a resumed run goes on)."""
        recs = self.all_records()
        for r in reversed(recs):
            if r.type == "end":
                return r
            if r.type == "train":
                return None
        return None

    # ------------------------------------------------------------------ facts
    @property
    def identity(self) -> RunIdentity:
        """Its :class:`RunIdentity` (run id and first config record's timestamp)."""
        return run_identity(self.all_records())

    @property
    def strategy(self) -> Optional[str]:
        """The adapter strategy (None for pretraining)."""
        c = self.config_record
        s = (c.fields.get("strategy") if c else None) or self.config.get("strategy")
        return str(s) if s else None

    @property
    def variants(self) -> list[str]:
        """The supernet variant names in size order (``[]`` for one model or an adapter)."""
        c = self.config_record
        summary = (c.fields.get("summary") if c else None) or {}
        v = summary.get("variants") if isinstance(summary, dict) else None
        return list(v) if isinstance(v, dict) and len(v) > 1 else []

    @property
    def total_steps(self) -> Optional[int]:
        c = self.config_record
        for src in ((c.fields if c else {}), (c.fields.get("summary") or {}) if c else {}, self.config):
            t = src.get("total_steps") if isinstance(src, dict) else None
            if isinstance(t, int) and not isinstance(t, bool):
                return t
        return None

    @property
    def trainable_params(self) -> Optional[int]:
        """Trainable parameters: an adapter's, or the model's for pretraining."""
        c = self.config_record
        if c is None:
            return None
        for k in ("trainable_params", "param_count"):
            v = c.fields.get(k)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        return None

    @property
    def movable_params(self) -> Optional[int]:
        """An adapter run's trainable parameters that its loss reaches (the config record's
        ``movable_params``; ``unfreeze`` with embeddings or the head, ``specialized_clm`` and output
        FiLM train some that never move), None for runs written before PAWN recorded it."""
        c = self.config_record
        v = c.fields.get("movable_params") if c is not None else None
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    @property
    def compute(self) -> Optional[dict]:
        """What the run spent over all its segments, from its last ``end`` record's ``compute``:
        ``optimizer_steps`` and, for adapter runs, ``main_steps``, ``warmup_steps`` (the RoSA
        family's LoRA warm-up, outside the main step counter), ``mask_scoring_batches``,
        ``gradient_batches`` (forward-and-backward passes over a batch), ``trainable_params``,
        ``movable_params``. None while the run has no ``end`` record, or when an older PAWN wrote it."""
        for r in reversed(self.all_records()):
            if r.type == "end":
                c = r.fields.get("compute")
                return dict(c) if isinstance(c, dict) else None
        return None

    @property
    def health(self) -> Optional[dict]:
        """``schedule_health.json`` (spec §1.10), or None."""
        h = _read_json(self.path / HEALTH_FILE)
        return h if isinstance(h, dict) else None

    @property
    def lab(self) -> Optional[dict]:
        """``lab.json`` (written by ``pawn lab`` for the runs it starts), or None."""
        h = _read_json(self.path / LAB_FILE)
        return h if isinstance(h, dict) else None

    @property
    def split(self):
        """An adapter run's :class:`pawn.data.split.SplitRecord` (``split.json``: source
        fingerprint, filters, train/val/test rule, game ids), or None when the run has none
        (pretraining, or an adapter run written before PAWN recorded it).

        Raises:
            pawn.errors.DataError: a ``split.json`` that cannot be read (one line naming it).
        """
        from pawn.data.split import SPLIT_FILE, read

        p = self.path / SPLIT_FILE
        return read(p) if p.is_file() else None

    @property
    def legal_mask(self) -> bool:
        """An adapter run trained under the hard legal mask (not ``--no-legal-mask``); False for pretraining."""
        return self.kind == "adapt" and not self.config.get("disable_legal_mask")

    def positions_of(self, record: Record) -> str:
        """The :data:`POSITIONS` key of the position set ``record``'s loss, top-1 and top-5 count
        (:func:`positions_of` with this run's kind and mask)."""
        return positions_of(record.schema, adapter=self.kind == "adapt", legal_mask=self.legal_mask)

    @property
    def positions(self) -> str:
        """The :data:`POSITIONS` key of the run's validation figures: that of its last ``val``
        record (of its config record, or the current schema, when it has none yet), or
        ``"mixed"`` when its ``val`` records count different sets (an old run resumed by a newer
        PAWN: the curve changes definition at the resume)."""
        val = self.val
        sets = {self.positions_of(r) for r in val}
        if len(sets) > 1:
            return "mixed"
        if sets:
            return sets.pop()
        c = self.config_record
        return self.positions_of(c) if c is not None else positions_of(SCHEMA_VERSION, adapter=self.kind == "adapt",
                                                                       legal_mask=self.legal_mask)

    @property
    def best_val_loss(self) -> Optional[float]:
        """The lowest validation loss of the run's model over its ``val`` records."""
        losses = [r.values.get("loss") for r in self.val]
        losses = [x for x in losses if isinstance(x, (int, float)) and math.isfinite(x)]
        return min(losses) if losses else None

    @property
    def last_step(self) -> Optional[int]:
        steps = [r.step for r in self.all_records() if r.type in ("train", "val") and r.step is not None]
        return max(steps) if steps else None

    def median_chunk_s(self) -> Optional[float]:
        """The median wall time of a train chunk, compile chunks left out (s)."""
        times = [r.values.get("chunk_wall_s") for r in self.train if not r.fields.get("includes_compile")]
        times = [t for t in times if isinstance(t, (int, float))]
        return statistics.median(times) if times else None

    @property
    def status(self) -> RunStatus:
        """Where the run stands (:class:`RunStatus`): from the ``end`` record, else from
        ``schedule_health.json`` for runs written before ``end`` records, else from how
        recently ``metrics.jsonl`` was written (running while within max(120 s, 5 median
        chunk times))."""
        total = self.total_steps
        step = self.last_step
        try:
            age = max(0.0, time.time() - self.metrics_path.stat().st_mtime)
        except OSError:
            age = None
        end = self.end
        reason = None
        if end is not None:
            reason = end.fields.get("reason")
            sig = end.fields.get("signal")
            if reason == "sigterm" and isinstance(sig, str) and sig.upper() in ("SIGINT", "SIGTERM"):
                reason = sig.lower()  # spec §1.10 records both as "sigterm"; the label names the one received
        elif not any(r.schema >= 2 for r in self._of("config")):
            h = self.health
            if h is not None and h.get("actual_total_steps") == step:
                reason = h.get("reason_for_stop")
        if reason is not None:
            state = ("complete" if reason in COMPLETE_REASONS else "failed" if reason in FAILED_REASONS else "stopped")
            return RunStatus(state, str(reason), step, total, age)
        median = self.median_chunk_s() or 0.0
        if age is not None and age <= max(120.0, 5 * median):
            return RunStatus("running", None, step, total, age)
        return RunStatus("unknown", "no end record and no recent write (the process is gone?)", step, total, age)

    # ------------------------------------------------------------------ files
    def checkpoints(self, verify: bool = True) -> list[CheckpointInfo]:
        """Every ``checkpoints/step_NNNNNNNN``, oldest first, with its manifest verified
        (SHA-256 of every file) unless ``verify`` is False: then a checkpoint with a ``.complete``
        manifest has ``verified = None`` (not checked), and nothing is read but the folder names
        and the records (a live report inside the training process must not hash every kept
        checkpoint at every validation)."""
        from pawn.checkpoint import MANIFEST, CheckpointError, verify_manifest

        d = self.path / CHECKPOINTS_DIR
        if not d.is_dir():
            return []
        best_step = self.best_step
        pushed: dict[int, bool] = {}
        for r in self.hub:
            if r.step is not None:
                ok = r.fields.get("ok")
                if ok is None:
                    ok = r.fields.get("status") in ("pushed", "ok", "success")
                pushed[r.step] = bool(ok) or pushed.get(r.step, False)
        out = []
        for p in sorted(d.iterdir()):
            m = STEP_DIR.match(p.name)
            if not m or not p.is_dir():
                continue
            if (p / MANIFEST).is_file() and not verify:
                ok = None
            elif (p / MANIFEST).is_file():
                try:
                    verify_manifest(p)
                    ok = True
                except CheckpointError:
                    ok = False
            else:
                ok = (p / "training_state.json").is_file()
            s = int(m.group(1))
            out.append(CheckpointInfo(s, p, ok, s == best_step, pushed.get(s)))
        return out

    @property
    def best_step(self) -> Optional[int]:
        """The step of ``checkpoints/best`` (its ``training_state.json``), or None."""
        st = _read_json(self.path / CHECKPOINTS_DIR / BEST_DIR / "training_state.json")
        return st.get("step") if isinstance(st, dict) and isinstance(st.get("step"), int) else None

    @property
    def best(self) -> Optional[Path]:
        """``checkpoints/best`` (lowest val loss) when it exists."""
        p = self.path / CHECKPOINTS_DIR / BEST_DIR
        return p if p.is_dir() else None

    def eval_reports(self) -> list[tuple[Path, dict]]:
        """The ``eval*.json`` reports kept in the run directory (``pawn eval --json``), oldest
        first; files that cannot be read are left out (:meth:`unreadable_reports` names them)."""
        return self._scan_reports()[0]

    def unreadable_reports(self) -> list[tuple[Path, str]]:
        """The ``eval*.json`` entries of the run directory that :meth:`eval_reports` leaves out, each
        with one line saying why (:func:`read_file_within`: a dangling link, a link loop, a link out
        of the run, a FIFO or device, over :data:`MAX_REPORT_BYTES`; or not JSON), by name."""
        return self._scan_reports()[1]

    def _scan_reports(self) -> tuple[list[tuple[Path, dict]], list[tuple[Path, str]]]:
        def mtime(q: Path) -> float:
            try:
                return q.lstat().st_mtime
            except OSError:
                return 0.0

        good: list[tuple[Path, dict]] = []
        bad: list[tuple[Path, str]] = []
        try:
            found = sorted(self.path.glob("eval*.json"), key=lambda q: (mtime(q), q.name))
        except OSError as e:
            return [], [(self.path, f"{self.path}: cannot be listed ({e.strerror or e})")]
        for p in found:
            try:
                d = json.loads(read_file_within(p, self.path))
            except RunError as e:
                bad.append((p, str(e)))
                continue
            except (ValueError, UnicodeDecodeError) as e:
                bad.append((p, f"{p}: not JSON ({' '.join(str(e).split())[:120]})"))
                continue
            if isinstance(d, dict):
                good.append((p, d))
        return good, sorted(bad, key=lambda x: x[0].name)


def open_run(path: str | os.PathLike) -> Run:
    """Open a run directory (``config.json`` + ``metrics.jsonl``).

    Raises:
        RunError: ``path`` is missing, not a directory, or not a PAWN run directory.
    """
    p = Path(path)
    if not p.exists():
        raise RunError(f"{p}: no such run directory")
    if not p.is_dir():
        raise RunError(f"{p}: not a run directory (a file)")
    if not (p / METRICS_FILE).is_file():
        raise RunError(f"{p}: not a PAWN run directory (no {METRICS_FILE})")
    config = _read_json(p / CONFIG_FILE)
    if not isinstance(config, dict):
        config = {}
    run_config = config.get("run_config") if isinstance(config.get("run_config"), dict) else config
    run = Run(p, dict(run_config), "pretrain")
    c = run.config_record
    if (c is not None and c.fields.get("strategy")) or run_config.get("strategy") or config.get("strategy"):
        run.kind = "adapt"
    return run


def run_of_checkpoint(path: str | os.PathLike) -> Optional[Run]:
    """The run a checkpoint directory belongs to: ``<run>/checkpoints/<name>``, the ``<run>/best``
    link (symlinks resolved) or a supernet run's exported ``<run>/variants/<name>``, else None (a
    checkpoint copied out of its run)."""
    p = Path(path).resolve()
    run_dir = p.parent.parent if p.parent.name in (CHECKPOINTS_DIR, VARIANTS_DIR) else None
    if run_dir is None or not (run_dir / METRICS_FILE).is_file():
        return None
    try:
        return open_run(run_dir)
    except RunError:
        return None


def population_member_of(path: str | os.PathLike) -> Optional[Run]:
    """The population sweep member (``pawn sweep --population``) an adapter checkpoint ``MEMBER/best``
    belongs to, when ``MEMBER`` holds the member's ``split.json`` (a member keeps only ``best`` and
    its split record: no metrics file, so :func:`open_run` does not open it), else None. The
    :class:`Run`'s config is the run config stored in the checkpoint's ``config.json``; its
    :attr:`Run.split` reads the member's record."""
    from pawn.data.split import SPLIT_FILE

    p = Path(path).resolve()
    if p.name != "best" or not (p.parent / SPLIT_FILE).is_file():
        return None
    cfg = _read_json(p / CONFIG_FILE)
    run_config = cfg.get("run_config") if isinstance(cfg, dict) and isinstance(cfg.get("run_config"), dict) else {}
    return Run(p.parent, dict(run_config), "adapt")


def discover_runs(root: str | os.PathLike) -> list[Run]:
    """Every run directory at or under ``root`` (recursive; checkpoint folders are not
    entered), sorted by path.

    Raises:
        RunError: ``root`` does not exist.
    """
    r = Path(root)
    if not r.exists():
        raise RunError(f"{r}: no such directory")
    found: list[Run] = []

    def walk(d: Path) -> Iterator[Path]:
        if _is_run_dir(d):
            yield d
        try:
            children = sorted(c for c in d.iterdir() if c.is_dir() and not c.is_symlink())
        except OSError:
            return
        for c in children:
            if c.name in (CHECKPOINTS_DIR, "variants", "tensorboard", "jax-cache") or c.name.startswith("."):
                continue
            yield from walk(c)

    for d in walk(r):
        try:
            found.append(open_run(d))
        except RunError:
            continue
    return found


__all__ = ["MAX_REPORT_BYTES", "read_file_within", "RUN_ID_FIELD", "RunIdentity", "new_run_id", "run_identity", "SCHEMA_VERSION",
           "MOVE_DECISIONS_SCHEMA", "POSITIONS", "positions_of", "Record", "Run", "RunError", "RunStatus", "CheckpointInfo",
           "open_run", "discover_runs", "run_of_checkpoint", "read_records", "parse_bytes", "parse_record", "parse_records",
           "record_line", "writable_fields", "last_per_step"]
