"""Path checks the commands run before any heavy import (JAX, a backbone, a compile): an input
that does not exist (with "did you mean …" for a mistyped local path), an output directory that
cannot be created, and a run directory given where a checkpoint is expected (its best
checkpoint is used). Everything here uses the standard library only.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

from pawn.errors import PawnError, UsageError

_HUB_SHAPE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[^\s]+)?(/[^\s]*)?$")
"""A string that may be a Hugging Face Hub id (``owner/name[@rev][/folder]``); the grammar is
checked exactly by :func:`pawn.hub.fetch.parse_hub_ref` when the Hub is asked."""


class PathCheckError(PawnError, ValueError):
    """An input path that does not exist or an output that cannot be written (exit code 1); the
    message names the flag and the path."""


def suggest_path(path: str | os.PathLike) -> Optional[Path]:
    """The existing path closest to a mistyped ``path``: each missing component replaced by its
    closest sibling name (``difflib.get_close_matches``, cutoff 0.5), from the first missing one
    on (``runs/tni/variants/large`` → ``runs/tiny/variants/large``). None when no component can
    be matched or the corrected path does not exist."""
    p = Path(path)
    parts = p.parts
    cur = Path(parts[0]) if p.is_absolute() else Path(".")
    rest = parts[1:] if p.is_absolute() else parts
    changed = False
    for part in rest:
        nxt = cur / part
        if not nxt.exists():
            try:
                names = [c.name for c in cur.iterdir()] if cur.is_dir() else []
            except OSError:
                return None
            close = difflib.get_close_matches(part, names, n=1, cutoff=0.5)
            if not close:
                return None
            nxt, changed = cur / close[0], True
        cur = nxt
    if not changed or not cur.exists():
        return None
    return cur if p.is_absolute() else Path(os.path.relpath(cur))


def _first_part_is_local(path: str) -> bool:
    first = Path(path).parts[0] if Path(path).parts else ""
    return bool(first) and Path(first).is_dir()


def check_input(path: Optional[str | os.PathLike], flag: str, *, hub: bool = True, what: str = "file or folder",
                note: str = "") -> None:
    """Refuse an input that names no local file or folder, before any work. ``note`` follows the
    path in the message (where it was read from: :meth:`pawn.settings._Settings.config_path_note`).

    A string shaped like a Hub id (``owner/name``…, when ``hub``) whose first component is not a
    local folder is left to the Hub; one whose first component is a local folder
    (``runs/tni/…``) is a mistyped local path.

    Raises:
        PathCheckError: ``"<flag> <path><note>: no such <what> (did you mean <close>?)"``.
    """
    if path is None:
        return
    s = str(path)
    if Path(s).exists():
        return
    if hub and _HUB_SHAPE.match(s) and not _first_part_is_local(s) and not s.lower().endswith((".pgn", ".parquet", ".json", ".toml")):
        return
    close = suggest_path(s)
    hint = f" (did you mean {close}?)" if close is not None else ""
    tail = "" if not hub or close is not None else ", and not a Hugging Face Hub id (owner/name)"
    raise PathCheckError(f"{flag} {s}{note}: no such {what}{hint}{tail}")


def check_output_dir(path: Optional[str | os.PathLike], flag: str = "--out") -> None:
    """Refuse, before any work, an output directory that cannot be created or written: a file
    on the way, or a nearest existing ancestor where a file cannot be created (tried with a
    temporary file, removed at once; permission bits alone do not tell for root or read-only
    mounts).

    Raises:
        PathCheckError: naming the flag, the directory and the reason.
    """
    if path is None:
        return
    out = Path(path)
    for p in (out, *out.parents):
        if not p.exists():
            continue
        if not p.is_dir():
            raise PathCheckError(f"{flag} {out}: {p} is a file, not a directory")
        try:
            fd, tmp = tempfile.mkstemp(prefix=".pawn-write-check-", dir=p)
            os.close(fd)
            os.unlink(tmp)
        except OSError as e:
            raise PathCheckError(f"{flag} {out}: cannot write in {p} ({e.strerror or e})") from None
        return


def init_from_checkpoint(cfg: Any, echo: Callable[[str], None]) -> Any:
    """``cfg`` with its ``--init-from`` checked before any work (``pawn pretrain`` and ``pawn
    adapt``): a run directory stands for its best checkpoint (said in one line through
    ``echo``); ignored with ``--resume``.

    Raises:
        pawn.errors.UsageError: no such checkpoint directory (one line).
    """
    if cfg.init_from is None or cfg.resume is not None:
        return cfg
    if is_run_directory(cfg.init_from):  # a run directory: its best checkpoint, said in one line
        ckpt, line = run_best_checkpoint(cfg.init_from)
        echo(line.replace("using its", "--init-from uses its"))
        cfg = cfg.model_copy(update={"init_from": ckpt})
    check_input(cfg.init_from, "--init-from", hub=False, what="checkpoint directory")
    return cfg


def is_run_directory(path: str | os.PathLike) -> bool:
    """True for a training run directory (``config.json`` and ``checkpoints/`` at its top, no
    checkpoint manifest of its own)."""
    p = Path(path)
    return p.is_dir() and (p / "checkpoints").is_dir() and not (p / ".complete").is_file()


def run_best_checkpoint(path: str | os.PathLike) -> tuple[Path, str]:
    """The checkpoint a run directory stands for: ``checkpoints/best`` (lowest validation loss),
    else the newest complete ``checkpoints/step_N``; and a one-line description of the choice.

    Raises:
        UsageError: the run has no complete checkpoint yet.
    """
    run = Path(path)
    best = run / "checkpoints" / "best"
    if (best / ".complete").is_file():
        step = _recorded_step(best)
        at = f", step {step}" if step is not None else ""
        return best, f"{run} is a run directory: using its best checkpoint {best} (lowest val loss{at})"
    steps = sorted((p for p in (run / "checkpoints").glob("step_*") if (p / ".complete").is_file()), key=lambda p: p.name)
    if steps:
        return steps[-1], f"{run} is a run directory without a best checkpoint: using its newest checkpoint {steps[-1]}"
    raise UsageError(f"{run}: a run directory with no complete checkpoint yet (checkpoints/best or checkpoints/step_N)")


def _recorded_step(ckpt: Path) -> Optional[int]:
    try:
        state = json.loads((ckpt / "training_state.json").read_text("utf-8"))
        return int(state["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def resolve_checkpoint_arg(src: str, log: Callable[[str], None], flag: str = "CHECKPOINT") -> str:
    """A CHECKPOINT argument made loadable before the model loads: a run directory becomes its
    best checkpoint (said in one line through ``log``), a missing local path is refused with
    "did you mean …" (:func:`check_input`), anything else (a checkpoint, a Hub id) is returned
    as given.

    Raises:
        PathCheckError, UsageError: see :func:`check_input`, :func:`run_best_checkpoint`.
    """
    if is_run_directory(src):
        ckpt, line = run_best_checkpoint(src)
        log(line)
        return str(ckpt)
    check_input(src, flag, what="checkpoint directory")
    return src
