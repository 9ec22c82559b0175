"""v2 checkpoints: safetensors weights, JSON config and a SHA-256 ``.complete`` manifest, written
atomically (spec ``model-and-checkpoints.md`` §5).

A checkpoint is a directory::

    model.safetensors        16 fp32 tensors with canonical names (spec §5.2), stacked layers
    config.json              {"format_version": 1, "model_config": {...}, ["run_config": {...}]}
    optimizer.safetensors    optional: flattened optimizer state (used by ``pretrain --resume``)
    training_state.json      optional: step, data position, RNG, ... (used by ``--resume``)
    .complete                {"format_version": 1, "files": {name: sha256}}, written last

Loading verifies every hash first. No pickle is used anywhere.
"""

from __future__ import annotations

from pawn.errors import PawnError
import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
from safetensors.numpy import load_file

from pawn.config import ModelConfig
from pawn.fileio import save_safetensors
from pawn.hubref import is_hub_id  # noqa: F401  (re-exported: callers ask the checkpoint layer)

FORMAT_VERSION = 1
"""Version of the model checkpoint format (``config.json`` ``format_version``, spec §5.3) that
:func:`save_checkpoint` writes. Adapter checkpoints version their own part separately
(:data:`pawn.adapters.io.ADAPTER_FORMAT_VERSION`), so bumping one does not strand the other."""

MIGRATIONS: dict[int, Callable[[dict], dict]] = {}
"""``config.json`` migrations: ``MIGRATIONS[v]`` turns the contents of a format-``v`` checkpoint
into format ``v + 1`` (tensors are read by name after the config is migrated). Bumping
:data:`FORMAT_VERSION` from ``n`` to ``n + 1`` adds ``MIGRATIONS[n]``, so every checkpoint
written before still loads (:func:`migrate_config`)."""

RUN_MARKERS: tuple[str, ...] = ("config.json", "metrics.jsonl", "schedule_health.json", "checkpoints", "variants")
"""Entries whose presence means a directory holds a run (what a run writes at its top level);
:mod:`pawn.train.rundir` and the output checks here share it."""
MANIFEST = ".complete"
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
OPTIMIZER_FILE = "optimizer.safetensors"
TRAINING_STATE_FILE = "training_state.json"


class CheckpointError(PawnError):
    """Base class of every checkpoint problem; the message names the directory and file."""


class IncompleteCheckpointError(CheckpointError):
    """The directory has no ``.complete`` manifest: the write never finished (spec §5.4)."""


class CheckpointIntegrityError(CheckpointError):
    """A file is missing, unlisted, or its SHA-256 does not match the manifest; or the tensor set
    is not the canonical one (spec §5.4, §5.6)."""


class UnsupportedCheckpointVersionError(CheckpointError):
    """``config.json`` has a ``format_version`` this PAWN cannot read: newer than
    :data:`FORMAT_VERSION`, not an integer, or older with no migration path (spec §5.3)."""


def migrate_config(cfg_json: dict, where: Path, current: Optional[int] = None,
                   migrations: Optional[dict[int, Callable[[dict], dict]]] = None) -> dict:
    """``config.json`` contents brought to format ``current`` (default :data:`FORMAT_VERSION`)
    by applying ``migrations`` (default :data:`MIGRATIONS`) ``v → v + 1`` in order; the result
    has ``format_version == current``. The input is not modified.

    Raises:
        UnsupportedCheckpointVersionError: a version that is not a positive integer, newer than
            ``current`` (written by a newer PAWN), or older with a missing migration step.
    """
    current = FORMAT_VERSION if current is None else current
    migrations = MIGRATIONS if migrations is None else migrations
    version = cfg_json.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UnsupportedCheckpointVersionError(f"{where}: format_version {version!r} is not supported (expected 1..{current})")
    if version > current:
        raise UnsupportedCheckpointVersionError(
            f"{where}: format_version {version} is newer than this PAWN reads ({current}); upgrade PAWN")
    out = dict(cfg_json)
    for v in range(version, current):
        if v not in migrations:
            raise UnsupportedCheckpointVersionError(f"{where}: format_version {version} has no migration from {v} to {v + 1}")
        out = dict(migrations[v](out))
        out["format_version"] = v + 1
    return out


class IncompatibleCheckpointError(CheckpointError):
    """The checkpoint's model cannot be used by PAWN (e.g. legacy vocabulary; spec §4.6)."""


class CheckpointTargetError(CheckpointError):
    """A path a checkpoint would be written to (or its ``.bak``/``.tmp`` sibling, or a parent)
    is something this write must not replace: a file, a symbolic link, a run directory, a
    directory that is not a PAWN checkpoint, or another checkpoint. Nothing was changed."""


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, streamed in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(chunk):
            h.update(b)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as 2-space-indented UTF-8 JSON, fsynced (inside a staging directory)."""
    _write_bytes(path, json.dumps(obj, indent=2, allow_nan=False).encode("utf-8"))


def write_manifest(directory: Path) -> dict[str, str]:
    """Hash every regular file in ``directory`` (except ``.complete``; subdirectories are
    skipped) and write the ``.complete`` manifest. Returns ``{name: sha256}``."""
    files = {
        p.name: sha256_file(p)
        for p in sorted(directory.iterdir())
        if p.is_file() and not p.is_symlink() and p.name != MANIFEST
    }
    write_json(directory / MANIFEST, {"format_version": FORMAT_VERSION, "files": files})
    return files


def not_a_checkpoint_dir(path: Path, what: str = "checkpoint") -> str:
    """The one-line message for a ``path`` given as a checkpoint directory that is not one: a file
    (naming the directory that holds it when that is a checkpoint) or nothing at all."""
    if path.is_file():
        hint = f"; the checkpoint is its directory {path.parent}" if (path.parent / MANIFEST).is_file() else ""
        return f"{path}: is a file, not a {what} directory{hint}"
    return f"{path}: no such {what} directory"


def verify_manifest(directory: Path) -> dict[str, str]:
    """Check a checkpoint directory against its manifest (spec §5.4, strict rules).

    Raises:
        IncompleteCheckpointError: no ``.complete``.
        CheckpointIntegrityError: unreadable manifest, a listed file missing, an unlisted file
            present, or a SHA-256 mismatch; the message names the file.
        UnsupportedCheckpointVersionError: the manifest's ``format_version`` is not 1..
            :data:`FORMAT_VERSION` (a manifest without one is read as the current format).
    """
    directory = Path(directory)
    man = directory / MANIFEST
    if not man.is_file():
        if (directory / "checkpoints").is_dir() or (directory / "variants").is_dir():
            raise IncompleteCheckpointError(
                f"{directory}: a run directory, not a checkpoint; pass one of its checkpoints/step_NNNNNNNN "
                "or variants/<name> directories"
            )
        raise IncompleteCheckpointError(f"{directory}: no {MANIFEST} manifest (the checkpoint was never completed)")
    try:
        manifest = json.loads(man.read_text("utf-8"))
        listed = manifest["files"]
        if not isinstance(listed, dict):
            raise TypeError
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointIntegrityError(f"{man}: unreadable manifest ({e.__class__.__name__})") from None
    version = manifest.get("format_version", FORMAT_VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= FORMAT_VERSION:
        newer = isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION
        raise UnsupportedCheckpointVersionError(
            f"{man}: manifest format_version {version!r} is not one this PAWN reads (1..{FORMAT_VERSION})"
            + ("; written by a newer PAWN: upgrade PAWN" if newer else ""))
    present = {p.name for p in directory.iterdir() if p.is_file() and p.name != MANIFEST}
    for name in sorted(set(listed) - present):
        raise CheckpointIntegrityError(f"{directory / name}: listed in {MANIFEST} but missing")
    for name in sorted(present - set(listed)):
        raise CheckpointIntegrityError(f"{directory / name}: not listed in {MANIFEST} (unexpected file)")
    for name, digest in sorted(listed.items()):
        try:
            actual = sha256_file(directory / name)
        except OSError as e:
            raise CheckpointIntegrityError(f"{directory / name}: unreadable ({e.strerror or e})") from None
        if actual != digest:
            raise CheckpointIntegrityError(f"{directory / name}: SHA-256 does not match {MANIFEST}")
    return listed


def _read_tensors(path: Path) -> dict[str, np.ndarray]:
    """``safetensors`` load that reports a malformed file as one-line CheckpointIntegrityError."""
    try:
        return load_file(str(path))
    except Exception as e:  # SafetensorError, OSError, ...: anything unreadable
        raise CheckpointIntegrityError(f"{path}: not a readable safetensors file ({' '.join(str(e).split())})") from None


def _read_json(path: Path) -> Any:
    """JSON load that reports a malformed file as one-line CheckpointIntegrityError."""
    try:
        return json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as e:
        raise CheckpointIntegrityError(f"{path}: not valid JSON ({' '.join(str(e).split())})") from None


def _check_replaceable(path: Path, role: str) -> None:
    """Refuse a ``path`` that a checkpoint write would rename or delete but that is not a plain
    directory: a symbolic link (renaming or ``rmtree`` would act on the link, not on what it
    names) or a non-directory (a user's file). Missing is fine.

    Raises:
        CheckpointTargetError: one line naming ``path`` and its ``role`` (target, .bak, .tmp).
    """
    if path.is_symlink():
        raise CheckpointTargetError(f"{path}: {role} is a symbolic link; refusing to replace it (nothing was changed)")
    if path.exists() and not path.is_dir():
        raise CheckpointTargetError(f"{path}: {role} exists and is not a directory; refusing to replace it (nothing was changed)")


def _check_parent(target: Path) -> None:
    """Refuse a ``target`` whose nearest existing ancestor is not a directory (``afile/x``).

    Raises:
        CheckpointTargetError: one line naming that ancestor.
    """
    for parent in target.parents:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise CheckpointTargetError(f"{target}: {parent} is a file, not a directory")
            return


def check_output_target(out: str | os.PathLike, made_from: dict[str, Any], what: str) -> Optional[dict]:
    """The one rule for a command that writes a checkpoint to a path the user names
    (``pawn convert``, ``--slice``, ``--merge``): only a free path or that command's own earlier
    result is ever replaced; anything else is refused before any work, and nothing is changed.

    Args:
        out: the destination directory.
        made_from: ``{run_config key: value}`` that an earlier result of the same command from
            the same source carries (e.g. ``{"converted_from": ..., "variant": None}``); a key
            absent from the stored run config counts as None.
        what: how to name that result in the error (``"a conversion of SRC"``).

    Returns:
        None when ``out`` is free (missing, or an empty directory); the stored ``run_config``
        (a dict) when ``out`` holds a complete checkpoint that matches ``made_from`` — the caller
        reuses or replaces it as its command documents.

    Raises:
        CheckpointTargetError: one line naming ``out`` when it is a symbolic link, a file, a run
            directory, a non-empty directory that is not a PAWN checkpoint, a checkpoint whose
            ``config.json`` cannot be read, or a checkpoint that is not ``what``; or when a parent
            of ``out`` is a file.
    """
    out = Path(out)
    _check_parent(out)
    _check_replaceable(out, "the output")
    if not out.exists():
        return None
    run = [m for m in RUN_MARKERS if m != CONFIG_FILE and (out / m).exists()]
    if run:
        raise CheckpointTargetError(f"{out}: a run directory (it has {', '.join(run)}), never a valid output; choose another --output")
    if not (out / MANIFEST).is_file():
        if not any(out.iterdir()):
            return None
        raise CheckpointTargetError(f"{out}: exists and is not a PAWN checkpoint; refusing to overwrite it (choose another --output)")
    try:
        cfg = _read_json(out / CONFIG_FILE)
    except CheckpointIntegrityError:
        cfg = None
    if not isinstance(cfg, dict):
        raise CheckpointTargetError(f"{out}: holds a checkpoint whose {CONFIG_FILE} cannot be read; refusing to replace it (choose another --output)")
    rc = cfg.get("run_config") if isinstance(cfg.get("run_config"), dict) else {}
    if any(rc.get(k) != v for k, v in made_from.items()):
        origin = rc.get("merged_from") or rc.get("converted_from") or rc.get("supernet_checkpoint")
        kind = "an adapter checkpoint" if isinstance(cfg.get("adapter"), dict) else "a checkpoint"
        raise CheckpointTargetError(
            f"{out}: holds {kind} that is not {what}"
            f" ({'made from ' + str(origin) if origin else 'not made by pawn convert'}); refusing to replace it"
        )
    return rc


def atomic_replace_dir(staging: Path, target: Path) -> None:
    """Move a finished ``staging`` directory to ``target`` with rename-aside (spec §5.5): a
    previous ``target`` is renamed to ``<target>.bak`` first and removed only after the new
    directory is in place, so ``target`` never goes missing without a loadable copy.

    ``target`` and ``<target>.bak`` must each be missing or a real directory; anything else is
    refused before anything is renamed or deleted.

    Raises:
        CheckpointTargetError: ``target`` or ``<target>.bak`` is a symbolic link or not a
            directory, or ``staging`` is not a directory.
    """
    staging, target = Path(staging), Path(target)
    bak = target.with_name(target.name + ".bak")
    if staging.is_symlink() or not staging.is_dir():
        raise CheckpointTargetError(f"{staging}: staging directory is missing or not a directory")
    _check_replaceable(target, "the target")
    _check_replaceable(bak, "its backup sibling")
    if bak.exists() and not target.exists():
        bak.rename(target)  # an earlier swap crashed between the two renames
    if bak.exists():
        shutil.rmtree(bak)
    if target.exists():
        target.rename(bak)
    try:
        staging.rename(target)
    except BaseException:
        if bak.exists() and not target.exists():
            bak.rename(target)
        raise
    _fsync_dir(target.parent)
    if bak.exists():
        shutil.rmtree(bak)


def save_checkpoint(
    path: str | os.PathLike,
    params: dict[str, Any],
    config: ModelConfig,
    *,
    run_config: Optional[dict] = None,
    optimizer_state: Optional[dict[str, Any]] = None,
    training_state: Optional[dict] = None,
    extra_files: Optional[dict[str, bytes]] = None,
) -> Path:
    """Write a v2 checkpoint directory atomically.

    Files are staged in the sibling ``<name>.tmp`` (a stale one is removed), the manifest is
    written last, then the directory is renamed into place (spec §5.5). A crash at any moment
    leaves either the previous complete checkpoint or the new one.

    Args:
        path: the checkpoint directory to create or replace.
        params: the 16 canonical arrays (``PAWNModel.params()``); saved as fp32.
        config: the model config, stored under ``model_config``.
        run_config: JSON-serialisable training-run config (stored under ``run_config``).
        optimizer_state: flat ``{name: array}`` of optimizer state (``optimizer.safetensors``).
        training_state: JSON-serialisable resume state (``training_state.json``).
        extra_files: ``{name: bytes}`` of further files (e.g. a ``README.md`` model card),
            written before the manifest so that it lists them (spec §5.7).

    Returns:
        The final checkpoint path.
    """

    def fill(staging: Path) -> None:
        tensors = {k: np.ascontiguousarray(np.asarray(v, dtype=np.float32)) for k, v in params.items()}
        save_safetensors(tensors, staging / MODEL_FILE)
        cfg: dict[str, Any] = {"format_version": FORMAT_VERSION, "model_config": config.to_json_dict()}
        if run_config is not None:
            cfg["run_config"] = run_config
        write_json(staging / CONFIG_FILE, cfg)
        write_training_files(staging, optimizer_state, training_state)
        for name, data in (extra_files or {}).items():
            if "/" in name or name in (MANIFEST, MODEL_FILE, CONFIG_FILE, "", ".", ".."):
                raise ValueError(f"extra checkpoint file name {name!r} is not allowed")
            _write_bytes(staging / name, data)

    return write_checkpoint_dir(path, fill)


def write_training_files(staging: Path, optimizer_state: Optional[dict[str, Any]], training_state: Optional[dict]) -> None:
    """Write ``optimizer.safetensors`` / ``training_state.json`` into a staging directory (each
    only when given)."""
    if optimizer_state is not None:
        save_safetensors({k: np.ascontiguousarray(np.asarray(v)) for k, v in optimizer_state.items()}, staging / OPTIMIZER_FILE)
    if training_state is not None:
        write_json(staging / TRAINING_STATE_FILE, training_state)


def write_checkpoint_dir(path: str | os.PathLike, fill: Callable[[Path], None]) -> Path:
    """The atomic checkpoint write of spec §5.5 around ``fill``: a fresh staging sibling
    ``<name>.tmp`` (a stale one is removed) is filled by ``fill(staging)``, the ``.complete``
    manifest is written last, then the directory replaces ``path`` (:func:`atomic_replace_dir`).
    On any error the staging directory is removed and ``path`` is left as it was.

    Returns:
        The final checkpoint path.

    Raises:
        CheckpointTargetError: ``path``, ``<name>.bak`` or ``<name>.tmp`` is a symbolic link or a
            non-directory, or a parent of ``path`` is a file; checked before anything is written.
    """
    target = Path(path)
    staging = target.with_name(target.name + ".tmp")
    _check_parent(target)
    for p, role in ((target, "the target"), (target.with_name(target.name + ".bak"), "its backup sibling"),
                    (staging, "its staging sibling")):
        _check_replaceable(p, role)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CheckpointTargetError(f"{target}: cannot create {target.parent} ({e.strerror or e})") from None
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    try:
        fill(staging)
        write_manifest(staging)
        _fsync_dir(staging)
        atomic_replace_dir(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def read_model_config(cfg_json: dict, where: Path) -> ModelConfig:
    """Parse ``config.json`` contents per spec §5.3.

    An older ``format_version`` is migrated first (:func:`migrate_config`).

    Raises:
        UnsupportedCheckpointVersionError: a ``format_version`` that cannot be migrated (see
            :func:`migrate_config`).
        CheckpointError: no ``model_config``, unknown fields (e.g. v1's ``dropout``: convert the
            checkpoint first), missing required fields or invalid values.
    """
    cfg_json = migrate_config(cfg_json, where)
    if "model_config" not in cfg_json:
        raise CheckpointError(f"{where}: no model_config")
    mc = cfg_json["model_config"]
    if not isinstance(mc, dict):
        raise CheckpointError(f"{where}: model_config is not a JSON object")
    fields = set(ModelConfig.model_fields)
    unknown = sorted(set(mc) - fields)
    if unknown:
        raise CheckpointError(
            f"{where}: model_config has fields {unknown} that a v2 checkpoint does not have; "
            "if this is a published v1 checkpoint, run `pawn convert` on it first"
        )
    missing = sorted(f for f in ("d_model", "n_layers", "n_heads", "d_ff") if f not in mc)
    if missing:
        raise CheckpointError(f"{where}: model_config lacks required fields {missing}")
    try:
        return ModelConfig(**mc)
    except Exception as e:  # pydantic.ValidationError: report in one line
        raise CheckpointError(f"{where}: invalid model_config: {e.errors()[0]['msg'] if hasattr(e, 'errors') else e}") from None


@dataclass
class Checkpoint:
    """Everything read from a verified checkpoint directory.

    Attributes:
        path: the directory.
        config: the model config.
        params: the 16 canonical arrays, float32 NumPy.
        run_config: the training-run config, if stored.
        optimizer_state: flat optimizer arrays, if stored.
        training_state: resume state, if stored.
    """

    path: Path
    config: ModelConfig
    params: dict[str, np.ndarray]
    run_config: Optional[dict] = None
    optimizer_state: Optional[dict[str, np.ndarray]] = None
    training_state: Optional[dict] = field(default=None)


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Verify and read a v2 checkpoint directory (spec §5.6), shapes checked against the config.

    Raises:
        FileNotFoundError: ``path`` is not a directory.
        IncompleteCheckpointError, CheckpointIntegrityError, UnsupportedCheckpointVersionError,
        CheckpointError: see :func:`verify_manifest` and :func:`read_model_config`; also a tensor
            set other than the 16 canonical names or a tensor whose shape disagrees with the
            config (named in the message); a malformed safetensors or JSON file (including
            ``optimizer.safetensors`` and ``training_state.json``) is CheckpointIntegrityError.
    """
    from pawn.model import PARAM_NAMES, param_shapes

    d = Path(path)
    if not d.is_dir():
        raise FileNotFoundError(not_a_checkpoint_dir(d))
    files = verify_manifest(d)
    for required in (MODEL_FILE, CONFIG_FILE):
        if required not in files:
            raise CheckpointIntegrityError(f"{d}: {required} is missing")
    cfg_json = _read_json(d / CONFIG_FILE)
    if not isinstance(cfg_json, dict):
        raise CheckpointIntegrityError(f"{d / CONFIG_FILE}: the top level is not a JSON object")
    cfg_json = migrate_config(cfg_json, d / CONFIG_FILE)  # run_config and model_config as of this format
    config = read_model_config(cfg_json, d / CONFIG_FILE)
    params = _read_tensors(d / MODEL_FILE)
    if set(params) != set(PARAM_NAMES):
        raise CheckpointIntegrityError(
            f"{d / MODEL_FILE}: tensor names differ from the v2 schema: missing "
            f"{sorted(set(PARAM_NAMES) - set(params))}, unexpected {sorted(set(params) - set(PARAM_NAMES))}"
        )
    for name, shape in param_shapes(config).items():
        if tuple(params[name].shape) != shape:
            raise CheckpointIntegrityError(
                f"{d / MODEL_FILE}: tensor {name} has shape {tuple(params[name].shape)}, model_config needs {shape}"
            )
    opt = _read_tensors(d / OPTIMIZER_FILE) if OPTIMIZER_FILE in files else None
    ts = _read_json(d / TRAINING_STATE_FILE) if TRAINING_STATE_FILE in files else None
    if ts is not None and not isinstance(ts, dict):
        raise CheckpointIntegrityError(f"{d / TRAINING_STATE_FILE}: the top level is not a JSON object")
    run_config = cfg_json.get("run_config")
    if run_config is not None and not isinstance(run_config, dict):
        raise CheckpointIntegrityError(f"{d / CONFIG_FILE}: run_config is not a JSON object")
    return Checkpoint(d, config, params, run_config, opt, ts)


def sequence_layout_of(run_config: Optional[dict]) -> Optional[bool]:
    """Whether a checkpoint was trained with the outcome token at position 0: its run config's
    ``prepend_outcome`` (a bool), else None (not recorded: a converted or hand-made checkpoint)."""
    v = (run_config or {}).get("prepend_outcome")
    return v if isinstance(v, bool) else None


def check_init_layout(ckpt: Checkpoint, prepend_outcome: bool, flag: str = "--init-from") -> Optional[str]:
    """The rule for starting a run from another checkpoint's weights: its sequence layout must be
    the run's, since position 0 is the outcome token in one and the first move in the other.

    Returns:
        None when they agree; a one-line warning when the checkpoint does not record its layout.

    Raises:
        CheckpointError: the checkpoint records the other layout (one line naming it and the flag).
    """
    theirs = sequence_layout_of(ckpt.run_config)
    name = {True: "the outcome-prefix layout (prepend_outcome)", False: "the pure-moves layout"}
    if theirs is None:
        return (f"WARNING: {flag} {ckpt.path}: its sequence layout is not recorded; this run uses "
                f"{name[prepend_outcome]}, so its weights are taken as trained that way")
    if theirs != prepend_outcome:
        raise CheckpointError(
            f"{flag} {ckpt.path}: trained with {name[theirs]}, this run uses {name[prepend_outcome]} "
            f"(position 0 would mean something else); {'add' if theirs else 'drop'} --prepend-outcome to match it")
    return None


def load_model(path: str | os.PathLike):
    """Load a v2 checkpoint directory for use: ``(PAWNModel, ModelConfig)`` (hashes verified
    before use). Hugging Face repo ids of published v1 models are loaded by
    :func:`pawn.load_model` / :func:`pawn.evaluate.loading.load_model`, which convert them first.

    Raises:
        FileNotFoundError: no such directory (a repo-id-shaped name says where Hub ids load).
        CheckpointError (and subclasses): see :func:`load_checkpoint`.
    """
    from pawn.model import PAWNModel

    src = str(path)
    if is_hub_id(src):
        raise FileNotFoundError(f"{src}: no such checkpoint directory (to load a Hugging Face Hub id, use pawn.load_model)")
    ckpt = load_checkpoint(src)
    return PAWNModel(ckpt.config, params=ckpt.params), ckpt.config
