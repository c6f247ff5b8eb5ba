"""Writing a directory tree whole or not at all, shared by ``convert`` and checkpoint saving.

Everything is written into ``<destination>.partial-<random>`` beside the destination (on the same
file system, so that the final rename is atomic), every file and directory in it is fsynced, and
it is then renamed into place (or, replacing, exchanged with the old tree) and the parent
directory fsynced: after a crash the destination is the old tree or all of the new one.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import secrets
import time
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from zarr_device.errors import StoreError, UsageError
from zarr_device.stores import LocalStore

__all__ = [
    "MARKERS", "LOCK_FILE", "local_destination", "check_replaceable", "atomic_directory",
    "check_replaceable_file", "atomic_file", "leftovers", "remove_leftovers", "start_writeback",
]

MARKERS = ("zarr.json", ".zarray", ".zgroup")
LOCK_FILE = ".zarr-device.lock"


def local_destination(destination: Any) -> Path:
    """The absolute path of a local directory to write (a path, ``file://`` URL or LocalStore)."""
    if isinstance(destination, LocalStore):
        destination = destination.root
    text = os.fspath(destination) if isinstance(destination, (str, os.PathLike)) else ""
    if not text or ("://" in text and not text.startswith("file://")):
        raise UsageError(f"the destination must be a local directory, not {destination!r}")
    return Path(os.path.abspath(text.removeprefix("file://")))


def check_replaceable(dest: Path, overwrite: bool) -> None:
    """UsageError when ``dest`` exists and may not be replaced: without ``overwrite``, or when it
    is not a Zarr store (replacing is removing, and only Zarr data is ever removed)."""
    if not os.path.lexists(dest):
        return
    if not overwrite:
        raise UsageError(f"{dest} exists (pass overwrite=True, or --overwrite, to replace it)")
    if dest.is_symlink() or not any((dest / marker).is_file() for marker in MARKERS):
        raise UsageError(f"{dest} is not a Zarr store (no zarr.json, .zarray or .zgroup): refusing to replace it")


def _leftover_pattern(dest: Path) -> re.Pattern[str]:
    # Exactly the names make_partial, atomic_file and place give (8 hex digits), so that nothing
    # else beside the destination (another store named "<dest>.partial-notes") is ever matched.
    return re.compile(re.escape(dest.name) + r"\.(?:partial|replaced)-[0-9a-f]{8}")


def leftovers(destination: Any) -> list[Path]:
    """What writers killed while writing ``destination`` left beside it: ``<name>.partial-*``
    (a tree or file being written, or, killed just after an exchange, the old tree on its way
    out) and ``<name>.replaced-*`` (the old tree, where the file system cannot exchange). None of
    them is ever read in place of ``destination``; they only take space. Sorted by name."""
    dest = local_destination(destination)
    pattern = _leftover_pattern(dest)
    try:
        names = os.listdir(dest.parent)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise StoreError(f"{dest.parent}: cannot list it: {e}") from None
    return sorted(dest.parent / name for name in names if pattern.fullmatch(name))


def remove_leftovers(destination: Any, *, older_than_s: float = 0.0) -> list[Path]:
    """Removes :func:`leftovers` of ``destination`` last modified at least ``older_than_s``
    seconds ago, and returns them. A running writer's partial directory has the same name as a
    killed one's: call this when no write to ``destination`` is running, or pass an age longer
    than any write takes."""
    removed: list[Path] = []
    now = time.time()
    for path in leftovers(destination):
        try:
            if now - path.lstat().st_mtime < older_than_s:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:  # another cleaner got there first
            continue
        except OSError as e:
            raise StoreError(f"{path}: cannot remove it: {e}") from None
        removed.append(path)
    return removed


def make_partial(dest: Path) -> Path:
    # os.mkdir (not mkdtemp, which makes it 0700) gives it the permissions any new directory gets.
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        while True:
            partial = dest.with_name(f"{dest.name}.partial-{secrets.token_hex(4)}")
            with contextlib.suppress(FileExistsError):
                partial.mkdir()
                return partial
    except OSError as e:
        raise StoreError(f"{dest}: cannot make a directory beside it to write into: {e}") from None


def exchange(src: Path, dst: Path) -> bool:
    """Swaps two directories in one step (renameat2 with RENAME_EXCHANGE): True when done, False
    where libc or the file system lacks it."""
    function = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if function is None:
        return False
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_cwd, rename_exchange = -100, 2
    if function(at_cwd, os.fsencode(src), at_cwd, os.fsencode(dst), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(dst))


def _fsync(path: str | Path, directory: bool) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def place(partial: Path, dest: Path, overwrite: bool, what: str = "store") -> None:
    """Moves the finished tree into place: one rename or, replacing, one exchange of the old and
    new directories, so that the destination is never missing; then makes the rename durable."""
    try:
        if not (overwrite and os.path.lexists(dest)):
            if os.path.lexists(dest):  # it appeared meanwhile (rename would replace an empty folder)
                raise FileExistsError(errno.EEXIST, "it appeared while writing", str(dest))
            os.rename(partial, dest)
        elif exchange(partial, dest):
            shutil.rmtree(partial, ignore_errors=True)  # the old tree, now under the partial name
        else:
            # Without an exchange the destination is missing for a moment, never half written.
            aside = partial.with_name(partial.name.replace(".partial-", ".replaced-"))
            os.rename(dest, aside)
            try:
                os.rename(partial, dest)
            except OSError:
                os.rename(aside, dest)  # the old tree back where it was
                raise
            shutil.rmtree(aside, ignore_errors=True)
        _fsync(dest.parent, directory=True)
    except OSError as e:
        raise StoreError(f"{dest}: cannot move the {what} into place: {e}") from None


def start_writeback(root: Path) -> None:
    """Asks the kernel to start writing the files under ``root`` to disk now, without waiting:
    a writer that fsyncs only at the end (finish_files) otherwise leaves the disk idle while it
    fills the page cache, then waits for all of it. POSIX_FADV_DONTNEED starts the writeback of
    dirty pages and keeps those still dirty or being written (Linux); elsewhere, or where it
    fails, nothing happens: finish_files flushes everything in any case."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            except OSError:
                continue
            try:
                advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass
            finally:
                os.close(fd)


def finish_files(root: Path) -> int:
    """Removes the engine's lock files (no other writer knows the partial directory, and the
    result should hold Zarr data only), fsyncs every file and directory left (a rename is durable
    only with its contents) and returns the size of the files."""
    total = 0
    try:
        for folder, _dirs, files in os.walk(root, topdown=False):  # children before their folder
            for name in files:
                path = os.path.join(folder, name)
                if name == LOCK_FILE:
                    os.unlink(path)
                    continue
                total += os.path.getsize(path)
                _fsync(path, directory=False)
            _fsync(folder, directory=True)
    except OSError as e:
        raise StoreError(f"{root}: cannot flush the written files to disk: {e}") from None
    return total


@contextlib.contextmanager
def atomic_directory(dest: Path, overwrite: bool, what: str = "store") -> Iterator[Path]:
    """Yields a partial directory to write into; places it at ``dest`` when the block completes,
    removes it when the block raises (``dest`` is then as it was)."""
    partial = make_partial(dest)
    try:
        yield partial
        finish_files(partial)
        place(partial, dest, overwrite, what)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def check_replaceable_file(dest: Path, overwrite: bool, suffix: str) -> None:
    """UsageError when the file ``dest`` exists and may not be replaced: without ``overwrite``,
    or when it is not a regular file named ``*suffix`` (only such a file is ever replaced)."""
    if not os.path.lexists(dest):
        return
    if not overwrite:
        raise UsageError(f"{dest} exists (pass overwrite=True, or --overwrite, to replace it)")
    if dest.is_symlink() or not dest.is_file() or not dest.name.endswith(suffix):
        raise UsageError(f"{dest} is not a {suffix} file: refusing to replace it")


@contextlib.contextmanager
def atomic_file(dest: Path, overwrite: bool, what: str = "file") -> Iterator[Path]:
    """Yields a new empty file beside ``dest`` to write; when the block completes it is fsynced
    and renamed over ``dest`` (one rename: readers see the old file or the whole new one), and
    when the block raises it is removed and ``dest`` is as it was."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        while True:
            partial = dest.with_name(f"{dest.name}.partial-{secrets.token_hex(4)}")
            with contextlib.suppress(FileExistsError):
                os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
                break
    except OSError as e:
        raise StoreError(f"{dest}: cannot make a file beside it to write into: {e}") from None
    try:
        yield partial
        try:
            _fsync(partial, directory=False)
            if not overwrite and os.path.lexists(dest):  # rename would replace it
                raise FileExistsError(errno.EEXIST, "it appeared while writing", str(dest))
            os.replace(partial, dest)
            _fsync(dest.parent, directory=True)
        except OSError as e:
            raise StoreError(f"{dest}: cannot move the {what} into place: {e}") from None
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        raise
