"""Writing a directory tree whole or not at all, shared by ``convert`` and checkpoint saving.

Everything is written into ``<destination>.partial-<random>`` beside the destination (on the same
file system, so that the final rename is atomic), every file and directory in it is fsynced, and
it is then renamed into place (or, replacing, exchanged with the old tree) and the parent
directory fsynced: after a crash the destination is the old tree or all of the new one.

A name proves nothing (anyone can make ``data.zarr.partial-deadbeef``), so every tree this module
makes beside a destination is proven by a record, :data:`RECORD`, naming the destination and the
random token ``T`` of its name; :func:`zarr_device.io.leftover_trees.remove_leftovers` (and ``zarr-device fsck --fix``) removes
only trees that a record proves. Trees without one (a user's, or an earlier release's) are
listed, never removed. A writer may be killed between any two system calls, so a record is
never written into, nor deleted from, a tree under a leftover's name: it only moves, each time
by one atomic rename, and at every instant a record proves each tree under such a name:

- a tree is made as a hidden folder, ``.<name>.zdstage-T``, the record is written into it, and
  only then is it renamed to ``<name>.partial-T`` (without replacing anything of that name);
- placing it, the record is first renamed out, to ``.<name>.zdplace-T.json`` beside the tree
  (the "record beside"), which proves both ``<name>.partial-T`` and ``<name>.replaced-T``: the new
  tree before the rename or exchange, the previous store after it, and the previous store moved
  aside where the file system cannot exchange. The record beside goes once neither is left;
- a tree is removed with its record last: when only the record is left the folder is renamed
  to a hidden ``.<name>.zdstage-*`` name, then emptied and removed (a tree the record beside
  proves is removed first, then that record).

What a kill can leave that is not a proven tree is hidden and holds nothing of anyone's: a
``.<name>.zdstage-*`` folder holding nothing or only a record, and a record beside whose trees
are gone. :func:`~zarr_device.io.leftover_trees.remnants` lists them and
:func:`~zarr_device.io.leftover_trees.remove_leftovers` removes them too. The placed
store never holds a record: no reader skips it (this package's listings skip only the engine's
lock and ``.zdtmp-`` files; zarr-python lists it and warns of an object it does not know), and
every other tool would copy and upload it.

The renames themselves (one that never replaces, the exchange, and the fsyncs that make them
durable) are :mod:`zarr_device.io.renames`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import socket
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zarr_device.errors import StoreError, UsageError
from zarr_device.io import renames
from zarr_device.io.stores import LocalStore

__all__ = [
    "MARKERS", "LOCK_FILE", "RECORD", "RECORD_LIMIT", "local_destination", "check_replaceable",
    "atomic_directory", "check_replaceable_file", "atomic_file", "discard", "start_writeback",
    "tree_names", "partial_path", "replaced_path", "beside_path", "read_record", "read_record_at",
    "record_names", "remove_tree", "remove_stage",
]

MARKERS = ("zarr.json", ".zarray", ".zgroup")
LOCK_FILE = ".zarr-device.lock"
#: The record that proves a tree beside a destination is this module's: inside each tree it
#: makes, until the tree is placed, when it moves out beside it (see the module's description).
RECORD = ".zarr-device-placement.json"
RECORD_LIMIT = 4096  # a record is about 150 bytes; a bigger file is not one
_TOKEN = r"(?P<token>[0-9a-f]{8})"  # the 8 hex digits of secrets.token_hex(4)


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


@dataclass(frozen=True)
class _Names:
    """The names this module gives beside a destination, as patterns: ``tree`` (what
    :func:`leftovers` lists), ``stage`` (a hidden folder a tree is made or removed under) and
    ``beside`` (a tree's record, moved beside it while it is placed)."""

    tree: re.Pattern[str]
    stage: re.Pattern[str]
    beside: re.Pattern[str]


def tree_names(dest: Path) -> _Names:
    # Exactly the names this module gives (8 hex digits), so that nothing else beside the
    # destination (another store named "<dest>.partial-notes") is ever matched.
    name = re.escape(dest.name)
    return _Names(
        re.compile(name + r"\.(?P<kind>partial|replaced)-" + _TOKEN),
        re.compile(r"\." + name + r"\.zdstage-" + _TOKEN),
        re.compile(r"\." + name + r"\.zdplace-" + _TOKEN + r"\.json"),
    )


def partial_path(dest: Path, token: str) -> Path:
    return dest.with_name(f"{dest.name}.partial-{token}")


def replaced_path(dest: Path, token: str) -> Path:
    return dest.with_name(f"{dest.name}.replaced-{token}")


def _stage_path(dest: Path, token: str) -> Path:
    return dest.with_name(f".{dest.name}.zdstage-{token}")


def beside_path(dest: Path, token: str) -> Path:
    return dest.with_name(f".{dest.name}.zdplace-{token}.json")


def read_record_at(path: Path) -> dict[str, Any] | None:
    # Opened without following a link, and only as a small regular file: a record is data
    # written by this module, never something a link or a FIFO could stand in for.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > RECORD_LIMIT:
            return None
        text = os.read(fd, RECORD_LIMIT + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        record = json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def read_record(tree: Path) -> dict[str, Any] | None:
    return read_record_at(tree / RECORD)


def record_names(record: dict[str, Any] | None, dest: Path, token: str) -> bool:
    """Whether ``record`` is one of this module's for ``dest`` and ``token``."""
    return (record is not None and record.get("zarr_device") == "placement"
            and record.get("destination") == dest.name and record.get("token") == token)


def _write_record(tree: Path, dest: Path, token: str, role: str) -> None:
    """Writes the record that proves ``tree`` is this module's: ``role`` is "new" (a tree being
    written) or "file" (a folder holding a file being written). Earlier versions also wrote
    "old" (the previous tree, moved aside to be removed), still recognised."""
    text = json.dumps({
        "zarr_device": "placement", "destination": dest.name, "token": token, "role": role,
        "pid": os.getpid(), "host": socket.gethostname(),
    }).encode()
    fd = os.open(tree / RECORD, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, text)
    finally:
        os.close(fd)


def remove_tree(root: Path, *, ignore_errors: bool = False) -> None:
    """Removes the directory ``root`` and what is in it, its record (when there) last, so that a
    removal cut short leaves a tree that is still provably this module's: once only the record
    is left, the folder is renamed to a hidden ``.zdstage-`` name and emptied and removed there
    (killed in between, a writer leaves an empty folder under that name, never one of a
    leftover's name without a record). Iterative (depth is not bounded by the interpreter's
    stack) and never follows a link: a link is removed, not entered."""
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
    if not os.path.lexists(root / RECORD):
        attempt(os.rmdir, str(root))  # nothing in it proves it: the record beside does, or none
        return
    attempt(_remove_recorded_root, root)


def _remove_recorded_root(root: Path) -> None:
    """Removes ``root``, emptied of all but its record: renamed to a hidden ``.zdstage-`` name
    first, so that no moment leaves a folder of a leftover's name without its record."""
    match = re.fullmatch(r"(?P<dest>.+)\.(?:partial|replaced)-[0-9a-f]{8}", root.name)
    if match is None or os.listdir(root) != [RECORD]:
        # Not a name of this module's, or something could not be removed: the record stays.
        raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY), str(root))
    dest = root.with_name(match["dest"])
    while True:
        stage = _stage_path(dest, secrets.token_hex(4))
        try:
            renames.rename_new(root, stage)
            break
        except FileExistsError:
            continue
    remove_stage(stage)


def remove_stage(stage: Path, *, ignore_errors: bool = False) -> None:
    """Removes a hidden ``.zdstage-`` folder and the record in it (nothing else is ever there:
    rmdir refuses a folder that holds anything more)."""
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stage / RECORD)
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(stage)
    except OSError:
        if not ignore_errors:
            raise


def _drop_beside(dest: Path, token: str) -> None:
    """Removes the record beside the trees of ``token`` once neither is left."""
    if not any(os.path.lexists(p) for p in (partial_path(dest, token), replaced_path(dest, token))):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(beside_path(dest, token))


def discard(tree: Path, destination: Any, *, ignore_errors: bool = True) -> None:
    """Removes ``tree``, a partial tree of :func:`make_partial` (or ``atomic_file``'s folder)
    for ``destination`` that is not to be placed (its writer failed), and the record beside it
    where placing had begun; killed part-way, it leaves only what :func:`remove_leftovers`
    finishes. Use this, not shutil.rmtree, which removes the record in whatever order it lists."""
    dest = local_destination(destination)
    remove_tree(tree, ignore_errors=ignore_errors)
    _drop_beside(dest, _token_of(tree))


def _fresh_token(dest: Path) -> str:
    # A token none of whose names is taken (a user's folder may have any of them).
    while True:
        token = secrets.token_hex(4)
        taken = (partial_path(dest, token), replaced_path(dest, token), _stage_path(dest, token),
                 beside_path(dest, token))
        if not any(os.path.lexists(p) for p in taken):
            return token


def _make_recorded(dest: Path, role: str) -> Path:
    """A new directory ``<dest>.partial-<token>`` that holds its record from the moment it has
    that name: made under a hidden name, recorded there and renamed (killed before the rename, a
    writer leaves a hidden folder holding nothing or only the record)."""
    # os.mkdir (not mkdtemp, which makes it 0700) gives it the permissions any new directory gets.
    dest.parent.mkdir(parents=True, exist_ok=True)
    while True:
        token = _fresh_token(dest)
        stage, partial = _stage_path(dest, token), partial_path(dest, token)
        try:
            stage.mkdir()
        except FileExistsError:
            continue
        try:
            _write_record(stage, dest, token, role)
            renames.rename_new(stage, partial)
        except FileExistsError:  # another (a user) took the name meanwhile: another token
            remove_stage(stage, ignore_errors=True)
            continue
        except BaseException:
            remove_stage(stage, ignore_errors=True)
            raise
        return partial


def make_partial(dest: Path) -> Path:
    """A new directory beside ``dest`` to write the tree into, with its record (moved out beside
    it by :func:`place`)."""
    try:
        return _make_recorded(dest, "new")
    except OSError as e:
        raise StoreError(f"{dest}: cannot make a directory beside it to write into: {e}") from None


def _token_of(partial: Path) -> str:
    return partial.name.rsplit("-", 1)[-1]


def place(partial: Path, dest: Path, overwrite: bool, what: str = "store") -> None:
    """Moves the finished tree into place: one rename or, replacing, one exchange of the old and
    new directories, so that the destination is never missing; then makes the rename durable
    and removes the old tree.

    The tree's record first moves out beside it (``.<name>.zdplace-<token>.json``), by one
    rename: from then on it proves both ``partial``'s name and the ``.replaced-`` one, whichever
    tree is under them, and it goes once both are gone. The other ways were each worse: a
    record removed just before the rename leaves the whole new tree unproven when the writer is
    killed in between; one renamed into place with the tree and removed after leaves it in the
    placed store (zarr-device's listings and zarr-python's show it, zarr-python warning of an
    object it does not know; other tools copy it), and, replacing, the old tree still comes out
    under the partial name with no record of its own."""
    token = _token_of(partial)
    beside = beside_path(dest, token)
    old: Path | None = None
    try:
        replacing = overwrite and os.path.lexists(dest)
        if not replacing and os.path.lexists(dest):  # it appeared meanwhile
            raise FileExistsError(errno.EEXIST, "it appeared while writing", str(dest))
        with contextlib.suppress(FileNotFoundError):  # no record: nothing to prove it by
            renames.rename_new(partial / RECORD, beside)
        if not replacing:
            renames.rename_new(partial, dest)  # never over a folder that appeared meanwhile
        elif renames.exchange(partial, dest):
            old = partial  # the old tree, now under the partial name
        else:
            # Without an exchange the destination is missing for a moment, never half written.
            aside = replaced_path(dest, token)
            renames.rename_new(dest, aside)
            try:
                os.rename(partial, dest)
            except OSError:
                os.rename(aside, dest)  # the old tree back where it was
                raise
            old = aside
        renames.fsync_path(dest.parent, directory=True)
        # The record's move out of the tree, made durable with it: a crash must not bring it
        # back inside the placed store.
        renames.fsync_path(dest, directory=True)
    except OSError as e:
        raise StoreError(f"{dest}: cannot move the {what} into place: {e}") from None
    if old is not None:
        remove_tree(old, ignore_errors=True)  # proven by the record beside until it is gone
    with contextlib.suppress(OSError):
        _drop_beside(dest, token)

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
    only with its contents) and returns the size of the files (the record not counted)."""
    total = 0
    try:
        for folder, _dirs, files in os.walk(root, topdown=False):  # children before their folder
            for name in files:
                path = os.path.join(folder, name)
                if name == LOCK_FILE:
                    os.unlink(path)
                    continue
                if not (name == RECORD and folder == str(root)):  # not part of the result
                    total += os.path.getsize(path)
                renames.fsync_path(path, directory=False)
            renames.fsync_path(folder, directory=True)
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
        discard(partial, dest)
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
        remove_tree(folder, ignore_errors=True)
        raise StoreError(f"{dest}: cannot make a file beside it to write into: {e}") from None
    try:
        yield partial
        try:
            renames.fsync_path(partial, directory=False)
            if not overwrite and os.path.lexists(dest):  # rename would replace it
                raise FileExistsError(errno.EEXIST, "it appeared while writing", str(dest))
            os.replace(partial, dest)
            renames.fsync_path(dest.parent, directory=True)
        except OSError as e:
            raise StoreError(f"{dest}: cannot move the {what} into place: {e}") from None
    except BaseException:
        remove_tree(folder, ignore_errors=True)
        raise
    # What is left is the folder and its record; cut short here, it is still provably ours.
    remove_tree(folder, ignore_errors=True)
