"""Loaded by a test's child process (this folder first on PYTHONPATH) where no small tmpfs can be
mounted: makes Python's writes to one file name fail as a full disk does (``OSError`` ENOSPC at
the write call), after an optional byte budget.

``PAWN_TEST_ENOSPC=NAME`` fails every write to a file called NAME; ``NAME@BYTES`` lets BYTES bytes
through first (counted over every file called NAME the process opens).
"""

from __future__ import annotations

import builtins
import errno
import os
from pathlib import Path

_SPEC = os.environ.get("PAWN_TEST_ENOSPC")

if _SPEC:
    _name, _, _after = _SPEC.partition("@")
    _left = [int(_after or 0)]
    _open = builtins.open

    class _FullDisk:
        """A file object whose writes fail with ENOSPC once the budget is spent."""

        def __init__(self, f):
            self._f = f

        def write(self, data):
            n = len(memoryview(data).cast("B")) if not isinstance(data, str) else len(data.encode())
            if n > _left[0]:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self._f.name)
            _left[0] -= n
            return self._f.write(data)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._f.close()

        def __getattr__(self, attr):
            return getattr(self._f, attr)

    def _open_full(file, mode="r", *args, **kwargs):
        f = _open(file, mode, *args, **kwargs)
        if isinstance(file, (str, os.PathLike)) and Path(file).name == _name and any(c in mode for c in "wax+"):
            return _FullDisk(f)
        return f

    builtins.open = _open_full
