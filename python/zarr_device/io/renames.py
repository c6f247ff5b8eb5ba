"""The renames a tree is placed with, and the fsync that makes them durable (Linux's
``renameat2`` through libc, where the C library and the file system have it): a rename that never
replaces what is at its destination, and an exchange of two directories in one step.

:mod:`zarr_device.io.atomic_trees` calls these as attributes of this module
(``renames.exchange``), never imported by name, so that the crash tests' patches here (of
``_renameat2`` and ``exchange``, to kill a writer at each step or to act as a file system without
the exchange) are what it calls."""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path
from typing import Any

__all__ = ["rename_new", "exchange", "fsync_path"]

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_renameat2_function: Any = None


def _renameat2(src: Path, dst: Path, flags: int) -> bool:
    """renameat2: True when done, False where libc or the file system lacks it (or the flag)."""
    global _renameat2_function
    if _renameat2_function is None:
        # Looked up once: a placement killed between its steps leaves the less, the fewer
        # instructions lie between them.
        function = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
        if function is not None:
            function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        _renameat2_function = function or False
    if _renameat2_function is False:
        return False
    if _renameat2_function(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(dst))


def rename_new(src: Path, dst: Path) -> None:
    """Renames ``src`` to ``dst``, which must not exist (FileExistsError when it does): one call
    with RENAME_NOREPLACE; where that is missing, a check just before the rename (then only an
    empty directory made at ``dst`` in between could be replaced)."""
    if _renameat2(src, dst, _RENAME_NOREPLACE):
        return
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst))
    os.rename(src, dst)


def exchange(src: Path, dst: Path) -> bool:
    """Swaps two directories in one step (renameat2 with RENAME_EXCHANGE): True when done, False
    where libc or the file system lacks it."""
    return _renameat2(src, dst, _RENAME_EXCHANGE)


def fsync_path(path: str | Path, directory: bool) -> None:
    """Makes a file's contents, or a directory's entries (the renames in it), durable."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
