"""Writing a directory tree whole or not at all, shared by ``convert`` and checkpoint saving.

Everything is written into ``<destination>.partial-<random>`` beside the destination (on the same
file system, so that the final rename is atomic), every file and directory in it is fsynced, and
it is then renamed into place (or, replacing, exchanged with the old tree) and the parent
directory fsynced: after a crash the destination is the old tree or all of the new one.

A name proves nothing (anyone can make ``data.zarr.partial-deadbeef``), so every tree this module
makes beside a destination holds a record, :data:`RECORD`, naming the destination and the random
token of its name; :func:`remove_leftovers` (and ``zarr-device fsck --fix``) removes only trees
whose record matches. Trees without one (a user's, or an earlier release's) are listed, never
removed.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zarr_device.errors import StoreError, UsageError
from zarr_device.stores import LocalStore

__all__ = [
    "MARKERS", "LOCK_FILE", "RECORD", "local_destination", "check_replaceable", "atomic_directory",
    "check_replaceable_file", "atomic_file", "leftovers", "examine_leftover", "Leftover",
    "remove_leftovers", "start_writeback",
]

MARKERS = ("zarr.json", ".zarray", ".zgroup")
LOCK_FILE = ".zarr-device.lock"
#: The record in each tree made beside a destination. It is removed just before the tree is
#: renamed into place, so a placed store holds only what its writer wrote: a name that readers
#: ignore would still be copied, listed and uploaded by every other tool. The cost is one
#: rename's window in which a killed writer leaves a tree without a record, which is then
#: listed and kept (the safe way to be wrong).
RECORD = ".zarr-device-placement.json"
_RECORD_LIMIT = 4096  # a record is about 150 bytes; a bigger file is not one


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
    return re.compile(re.escape(dest.name) + r"\.(?:partial|replaced)-(?P<token>[0-9a-f]{8})")


def leftovers(destination: Any) -> list[Path]:
    """What writers killed while writing ``destination`` may have left beside it, by name:
    ``<name>.partial-*`` (a tree or file being written, or, killed just after an exchange, the
    old tree on its way out) and ``<name>.replaced-*`` (the old tree, where the file system
    cannot exchange). None of them is ever read in place of ``destination``; they only take
    space. A name alone proves nothing: :func:`examine_leftover` tells which are provably
    zarr-device's, and only those are removed. Sorted by name."""
    dest = local_destination(destination)
    pattern = _leftover_pattern(dest)
    try:
        names = os.listdir(dest.parent)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise StoreError(f"{dest.parent}: cannot list it: {e}") from None
    return sorted(dest.parent / name for name in names if pattern.fullmatch(name))


@dataclass(frozen=True)
class Leftover:
    """What :func:`examine_leftover` found: ``proven`` when the tree's record shows that a
    zarr-device writer of this destination made it (then it may be removed), and in words what
    it is or why it is kept. ``writer``: the process that made it, where that process still runs
    on this machine (it may be writing still)."""

    path: Path
    proven: bool
    detail: str
    writer: int | None = None
    modified: float = 0.0


def _read_record(tree: Path) -> dict[str, Any] | None:
    # Opened without following a link, and only as a small regular file: a record is data
    # written by this module, never something a link or a FIFO could stand in for.
    try:
        fd = os.open(tree / RECORD, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _RECORD_LIMIT:
            return None
        text = os.read(fd, _RECORD_LIMIT + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        record = json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def _write_record(tree: Path, dest: Path, token: str, role: str) -> None:
    """Writes the record that proves ``tree`` is this module's: ``role`` is "new" (a tree being
    written), "file" (a folder holding a file being written) or "old" (the previous tree, moved
    aside to be removed)."""
    text = json.dumps({
        "zarr_device": "placement", "destination": dest.name, "token": token, "role": role,
        "pid": os.getpid(), "host": socket.gethostname(),
    }).encode()
    fd = os.open(tree / RECORD, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, text)
    finally:
        os.close(fd)


def _drop_record(tree: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tree / RECORD)


def _process_alive(pid: int) -> bool:
    if pid <= 0:  # 0 and negative numbers name process groups, not a writer
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError):
        return False
    return True


def examine_leftover(destination: Any, path: Path) -> Leftover:
    """Whether ``path`` (one of :func:`leftovers`) is provably a tree zarr-device made while
    writing ``destination``: a real directory holding a record that names this destination and
    the token in ``path``'s name. Anything else (a file or link of that name, a tree without a
    record or with another's, the previous store when the destination is missing) is not."""
    dest = local_destination(destination)
    match = _leftover_pattern(dest).fullmatch(path.name)
    if match is None or path.parent != dest.parent:
        return Leftover(path, False, "not a name zarr-device gives beside this destination")
    try:
        info = path.lstat()
    except FileNotFoundError:
        return Leftover(path, False, "gone")
    except OSError as e:
        return Leftover(path, False, f"cannot look at it: {e}")
    if not stat.S_ISDIR(info.st_mode):
        return Leftover(path, False, "not a directory: no record can show that zarr-device made "
                        "it (earlier releases wrote files like this); kept, remove it yourself if it "
                        "is not wanted", modified=info.st_mtime)
    record = _read_record(path)
    if record is None:
        return Leftover(path, False, "no record of zarr-device's in it (a tree of an earlier "
                        "release, or not zarr-device's); kept, remove it yourself if it is not "
                        "wanted", modified=info.st_mtime)
    if (record.get("zarr_device") != "placement" or record.get("destination") != dest.name
            or record.get("token") != match["token"]):
        return Leftover(path, False, f"its record {RECORD} is not for {dest.name} with this name's "
                        "token; kept", modified=info.st_mtime)
    role = record.get("role")
    with contextlib.suppress(OSError):
        info = max(info, (path / RECORD).lstat(), key=lambda i: i.st_mtime)
    if role == "file":
        try:
            extra = sorted(set(os.listdir(path)) - {RECORD, dest.name})
        except OSError as e:
            return Leftover(path, False, f"cannot list it: {e.strerror or e}; kept", modified=info.st_mtime)
        if extra:
            return Leftover(path, False, f"holds files zarr-device did not put there ({extra[0]!r}); "
                            "kept", modified=info.st_mtime)
    elif role == "old":
        if not os.path.lexists(dest):
            return Leftover(path, False, f"the previous {dest.name}, moved aside by a replacement "
                            f"that did not finish, and {dest.name} is missing: kept; rename it back "
                            "to restore the old store", modified=info.st_mtime)
    elif role != "new":
        return Leftover(path, False, f"its record {RECORD} is not one zarr-device writes; kept",
                        modified=info.st_mtime)
    writer: int | None = None
    pid = record.get("pid")
    if (isinstance(pid, int) and not isinstance(pid, bool) and record.get("host") == socket.gethostname()
            and _process_alive(pid)):
        writer = pid
    what = {"new": "a tree being written", "file": "a file being written",
            "old": "the previous store, on its way out"}[role]
    return Leftover(path, True, f"{what} by a save, convert or copy that did not finish "
                    "(zarr-device's record is in it); never read as the store", writer, info.st_mtime)


def _remove_tree(root: Path, *, ignore_errors: bool = False) -> None:
    """Removes the directory ``root`` and what is in it, its record (when there) last, so that a
    removal cut short leaves a tree that is still provably this module's. Iterative (depth is
    not bounded by the interpreter's stack) and never follows a link: a link is removed, not
    entered."""
    def attempt(action: Any, *args: Any) -> None:
        try:
            action(*args)
        except FileNotFoundError:
            pass
        except OSError:
            if not ignore_errors:
                raise

    stack: list[tuple[str, bool]] = [(str(root), False)]
    while stack:
        folder, emptied = stack.pop()
        if emptied:
            if folder != str(root):
                attempt(os.rmdir, folder)
            continue
        stack.append((folder, True))
        try:
            with os.scandir(folder) as entries:
                children = list(entries)
        except FileNotFoundError:
            continue
        except OSError:
            if not ignore_errors:
                raise
            continue
        for entry in children:
            if folder == str(root) and entry.name == RECORD:
                continue
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if is_dir:
                stack.append((entry.path, False))
            else:
                attempt(os.unlink, entry.path)
    attempt(os.unlink, str(root / RECORD))
    attempt(os.rmdir, str(root))


def remove_leftovers(destination: Any, *, older_than_s: float = 0.0) -> list[Path]:
    """Removes the :func:`leftovers` of ``destination`` that :func:`examine_leftover` proves are
    zarr-device's, last modified at least ``older_than_s`` seconds ago, and returns them; the
    others are left (list them with :func:`leftovers`). A running writer's partial directory
    looks like a killed one's: call this when no write to ``destination`` is running, or pass an
    age longer than any write takes (with an age, a tree whose writer still runs on this machine
    is kept too)."""
    removed: list[Path] = []
    now = time.time()
    for path in leftovers(destination):
        found = examine_leftover(destination, path)
        if not found.proven or now - found.modified < older_than_s:
            continue
        if older_than_s > 0 and found.writer is not None:
            continue
        try:
            _remove_tree(path)
        except OSError as e:
            raise StoreError(f"{path}: cannot remove it: {e}") from None
        removed.append(path)
    return removed


def _make_recorded(dest: Path, role: str) -> Path:
    # os.mkdir (not mkdtemp, which makes it 0700) gives it the permissions any new directory gets.
    # The record follows at once: only the moment between the two leaves a tree without one.
    dest.parent.mkdir(parents=True, exist_ok=True)
    while True:
        token = secrets.token_hex(4)
        partial = dest.with_name(f"{dest.name}.partial-{token}")
        with contextlib.suppress(FileExistsError):
            partial.mkdir()
            break
    try:
        _write_record(partial, dest, token, role)
    except BaseException:
        with contextlib.suppress(OSError):
            os.rmdir(partial)
        raise
    return partial


def make_partial(dest: Path) -> Path:
    """A new directory beside ``dest`` to write the tree into, with its record (removed by
    :func:`place`)."""
    try:
        return _make_recorded(dest, "new")
    except OSError as e:
        raise StoreError(f"{dest}: cannot make a directory beside it to write into: {e}") from None


def _token_of(partial: Path) -> str:
    return partial.name.rsplit("-", 1)[-1]


def _retire(old: Path, dest: Path, token: str) -> None:
    """Removes the previous tree, moved aside to ``old``: first a record goes into it, so that a
    removal cut short (a large tree takes a while) leaves a tree fsck can finish removing."""
    with contextlib.suppress(OSError):
        _write_record(old, dest, token, "old")
    _remove_tree(old, ignore_errors=True)


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
    new directories, so that the destination is never missing; then makes the rename durable.
    The tree's record comes out just before (the store holds only what was written), and the
    old tree gets one of its own before it is removed."""
    token = _token_of(partial)
    try:
        if not (overwrite and os.path.lexists(dest)):
            if os.path.lexists(dest):  # it appeared meanwhile (rename would replace an empty folder)
                raise FileExistsError(errno.EEXIST, "it appeared while writing", str(dest))
            _drop_record(partial)
            os.rename(partial, dest)
        else:
            _drop_record(partial)
            if exchange(partial, dest):
                _retire(partial, dest, token)  # the old tree, now under the partial name
            else:
                # Without an exchange the destination is missing for a moment, never half written.
                aside = partial.with_name(partial.name.replace(".partial-", ".replaced-"))
                os.rename(dest, aside)
                try:
                    os.rename(partial, dest)
                except OSError:
                    os.rename(aside, dest)  # the old tree back where it was
                    raise
                _retire(aside, dest, token)
        _fsync(dest.parent, directory=True)
        # The record's removal, made durable with the tree: a crash must not bring it back
        # inside the placed store.
        _fsync(dest, directory=True)
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
                if name == RECORD and folder == str(root):  # not part of the result: place removes it
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
        _remove_tree(partial, ignore_errors=True)
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
    """Yields a new empty file to write, ``<dest>.partial-<random>/<dest's name>`` (the folder
    holds the record that proves it is zarr-device's: a file cannot hold one); when the block
    completes the file is fsynced and renamed over ``dest`` (one rename: readers see the old file
    or the whole new one), and when the block raises it is removed and ``dest`` is as it was."""
    try:
        folder = _make_recorded(dest, "file")
    except OSError as e:
        raise StoreError(f"{dest}: cannot make a file beside it to write into: {e}") from None
    partial = folder / dest.name
    try:
        os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))
    except OSError as e:
        _remove_tree(folder, ignore_errors=True)
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
        _remove_tree(folder, ignore_errors=True)
        raise
    # What is left is the folder and its record; cut short here, it is still provably ours.
    _remove_tree(folder, ignore_errors=True)
