"""Output files written whole or not at all: a staging sibling renamed into place, and a check that
a path can be written before a long computation starts."""

from __future__ import annotations

from pawn.errors import PawnError
import contextlib
import dataclasses
import errno
import json
import math
import os
import re
from pathlib import Path
from typing import Iterator, Optional


class OutputPathError(PawnError, ValueError):
    """An output path that cannot be written; the message names the path and the reason."""


def check_output_file(path: str | os.PathLike, what: str = "output") -> Path:
    """Make sure ``path`` can be created as a file: its parent directories are created, and a
    staging file is opened (and removed) beside it. Call before the work whose result goes there.

    Returns:
        ``path`` as a :class:`Path`.

    Raises:
        OutputPathError: ``path`` is a directory, or its directory cannot be created or written.
    """
    p = Path(path)
    if p.is_dir():
        raise OutputPathError(f"{what} {p}: is a directory, not a file")
    for parent in p.parents:  # mkdir would say "File exists" for a file on the way
        if parent.exists():
            if not parent.is_dir():
                raise OutputPathError(f"{what} {p}: {parent} is a file, not a directory")
            break
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        probe = _staging_name(p)
        with open(probe, "wb"):
            pass
        probe.unlink()
    except OSError as e:
        raise OutputPathError(f"{what} {p}: cannot write there ({e.strerror or e.__class__.__name__})") from None
    return p


class OutputWriteError(OutputPathError, OSError):
    """A write of an output file failed for want of space (``ENOSPC``, ``EDQUOT``, ``EFBIG``) or
    on a read-only file system: one line naming the file, the reason and the space left; an
    :class:`OSError` too (``errno``/``strerror`` kept), so code that catches ``OSError`` still does."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else super().__str__()


WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})
"""The errnos :func:`atomic_output` reports as :class:`OutputWriteError`."""


def _staging_name(path: Path) -> Path:
    # Keep the suffix so writers that pick a format from it (matplotlib, pyarrow) still work.
    return path.with_name(f".{path.stem}.tmp-{os.getpid()}{path.suffix}")


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a staging path beside ``path``; when the block succeeds the staging file is fsynced
    and renamed onto ``path``, otherwise it is removed and ``path`` is left as it was.

    Raises:
        OutputWriteError: the disk (or quota) was full, the file too large or the file system
            read-only while writing (one line naming ``path`` and the space left there).
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = _staging_name(p)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(e, OSError) and not isinstance(e, OutputWriteError) and e.errno in WRITE_ERRNOS:
            err = OutputWriteError(f"{p}: cannot write ({write_error(e, p)}); nothing was replaced")
            err.errno, err.strerror, err.filename = e.errno, e.strerror, str(p)
            raise err from None
        raise


def json_safe(value):
    """Convert a nested structure to plain JSON values: NumPy/JAX scalars and arrays become
    Python numbers and lists, paths strings, dict keys strings, dataclasses dicts, and NaN/±Inf
    ``None`` (JSON has no NaN). The one JSON sanitizer of PAWN's report files."""

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_safe(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "shape") and hasattr(value, "dtype"):  # numpy / jax arrays and scalars
        import numpy as np

        arr = np.asarray(value)
        return json_safe(arr.item() if arr.ndim == 0 else arr.tolist())
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value


def write_json(path: str | os.PathLike, data, what: str = "output") -> Path:
    """Write ``data`` (through :func:`json_safe`) as indented JSON to ``path``, whole or not at all.

    Raises:
        OutputPathError: the file cannot be written (the message names ``what`` and ``path``).
    """

    p = Path(path)
    try:
        with atomic_output(p) as tmp:
            tmp.write_text(json.dumps(json_safe(data), indent=2) + "\n", encoding="utf-8")
    except OSError as e:
        raise OutputPathError(f"{what} {p}: cannot write ({write_error(e, p)})") from None
    return p


def _umask() -> int:
    """The process umask (read without changing it where /proc tells it; else set and restored)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def save_safetensors(tensors: dict, path: str | os.PathLike, metadata: Optional[dict[str, str]] = None) -> Path:
    """``safetensors.numpy.save_file(tensors, path, metadata)`` with the file's mode set as for any file
    this process creates (``0o666 & ~umask``, usually 0644). ``save_file`` itself leaves mode
    0600 (it writes through a private temporary file), so checkpoints and caches were unreadable
    to other users of a shared machine.

    Arrays that are not C-contiguous (a transpose, a strided slice) are copied to C order first:
    safetensors 0.8 writes such an array's raw memory, so its values came back reordered on load.

    Args:
        tensors: name -> numpy array (any dtype safetensors stores; any memory layout).
        path: the file to write.
        metadata: the header's string -> string ``__metadata__`` (e.g. PEFT's ``{"format": "pt"}``), or None.

    Raises:
        OSError: the write or the chmod failed (safetensors' own error for a failed write, e.g.
            a full disk, is raised as the OSError it reports, with its errno).
    """
    import numpy as np
    from safetensors import SafetensorError
    from safetensors.numpy import save_file

    try:
        save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(path), metadata=metadata)
    except SafetensorError as e:  # its own error type, also for a full disk: made an OSError with the errno
        text = " ".join(str(e).split())
        m = re.search(r"\(os error (\d+)\)", text)
        if m is None:
            raise
        code = int(m.group(1))
        raise OSError(code, os.strerror(code), str(path)) from None
    os.chmod(path, 0o666 & ~_umask())
    return Path(path)


def free_space(path: str | os.PathLike) -> Optional[int]:
    """Bytes free to this user on the file system holding ``path`` (its nearest existing
    ancestor), or None when it cannot be told."""
    import shutil

    p = Path(path)
    for q in (p, *p.parents):
        if q.exists():
            try:
                return shutil.disk_usage(q).free
            except OSError:
                return None
    return None


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n}"


def write_error(e: OSError, path: str | os.PathLike) -> str:
    """The reason of a failed write in a few words: ``e.strerror``, and for a full disk (or quota)
    the space left there: ``No space left on device; 1.2 MiB free on /scratch``."""
    reason = e.strerror or str(e) or e.__class__.__name__
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        free = free_space(path)
        if free is not None:
            reason += f"; {_size(free)} free there"
    return reason
