"""Writing a directory tree whole or not at all, shared by ``convert`` and checkpoint saving.

Everything is written into ``<destination>.partial-<random>`` beside the destination (on the same
file system, so that the final rename is atomic), every file and directory in it is fsynced, and
it is then renamed into place (or, replacing, exchanged with the old tree) and the parent
directory fsynced: after a crash the destination is the old tree or all of the new one.

A name proves nothing (anyone can make ``data.zarr.partial-deadbeef``), so every tree this module
makes beside a destination is proven by a record, :data:`RECORD`, naming the destination and the
random token ``T`` of its name; :func:`remove_leftovers` (and ``zarr-device fsck --fix``) removes
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
are gone. :func:`remnants` lists them and :func:`remove_leftovers` removes them too. The placed
store never holds a record: no reader skips it (this package's listings skip only the engine's
lock and ``.zdtmp-`` files; zarr-python lists it and warns of an object it does not know), and
every other tool would copy and upload it.
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
    "check_replaceable_file", "atomic_file", "leftovers", "remnants", "examine_leftover", "Leftover",
    "remove_leftovers", "remove_remnants", "discard", "start_writeback",
]

MARKERS = ("zarr.json", ".zarray", ".zgroup")
LOCK_FILE = ".zarr-device.lock"
#: The record that proves a tree beside a destination is this module's: inside each tree it
#: makes, until the tree is placed, when it moves out beside it (see the module's description).
RECORD = ".zarr-device-placement.json"
_RECORD_LIMIT = 4096  # a record is about 150 bytes; a bigger file is not one
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


def _names(dest: Path) -> _Names:
    # Exactly the names this module gives (8 hex digits), so that nothing else beside the
    # destination (another store named "<dest>.partial-notes") is ever matched.
    name = re.escape(dest.name)
    return _Names(
        re.compile(name + r"\.(?P<kind>partial|replaced)-" + _TOKEN),
        re.compile(r"\." + name + r"\.zdstage-" + _TOKEN),
        re.compile(r"\." + name + r"\.zdplace-" + _TOKEN + r"\.json"),
    )


def _partial_path(dest: Path, token: str) -> Path:
    return dest.with_name(f"{dest.name}.partial-{token}")


def _replaced_path(dest: Path, token: str) -> Path:
    return dest.with_name(f"{dest.name}.replaced-{token}")


def _stage_path(dest: Path, token: str) -> Path:
    return dest.with_name(f".{dest.name}.zdstage-{token}")


def _beside_path(dest: Path, token: str) -> Path:
    return dest.with_name(f".{dest.name}.zdplace-{token}.json")


def _listed(dest: Path, *patterns: re.Pattern[str]) -> list[Path]:
    try:
        names = os.listdir(dest.parent)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise StoreError(f"{dest.parent}: cannot list it: {e}") from None
    return sorted(dest.parent / name for name in names if any(p.fullmatch(name) for p in patterns))


def leftovers(destination: Any) -> list[Path]:
    """What writers killed while writing ``destination`` may have left beside it, by name:
    ``<name>.partial-*`` (a tree or file being written, or, killed just after an exchange, the
    old tree on its way out) and ``<name>.replaced-*`` (the old tree, where the file system
    cannot exchange). None of them is ever read in place of ``destination``; they only take
    space. A name alone proves nothing: :func:`examine_leftover` tells which are provably
    zarr-device's, and only those are removed. Sorted by name. The hidden bookkeeping a kill
    may leave (holding at most a record) is listed by :func:`remnants`."""
    dest = local_destination(destination)
    return _listed(dest, _names(dest).tree)


def remnants(destination: Any) -> list[Path]:
    """The hidden bookkeeping of killed writers beside ``destination``: ``.<name>.zdstage-*``
    folders (a tree being made or removed when the writer was killed: they hold nothing, or only
    a record) and ``.<name>.zdplace-*.json`` records (each proves the trees of its token, and is
    left over once they are gone). They take no space to speak of; :func:`remove_leftovers`
    removes them. Sorted by name."""
    dest = local_destination(destination)
    names = _names(dest)
    return _listed(dest, names.stage, names.beside)


@dataclass(frozen=True)
class Leftover:
    """What :func:`examine_leftover` found: ``proven`` when zarr-device's record shows that a
    writer of this destination made it and that it may be removed, and in words what it is or
    why it is kept. ``writer``: the process that made it, where that process still runs on this
    machine (it may be writing still)."""

    path: Path
    proven: bool
    detail: str
    writer: int | None = None
    modified: float = 0.0


def _read_record_at(path: Path) -> dict[str, Any] | None:
    # Opened without following a link, and only as a small regular file: a record is data
    # written by this module, never something a link or a FIFO could stand in for.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
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


def _read_record(tree: Path) -> dict[str, Any] | None:
    return _read_record_at(tree / RECORD)


def _names_this(record: dict[str, Any] | None, dest: Path, token: str) -> bool:
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


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` (of this machine) may still be running: a writer whose leftovers
    must not be touched yet."""
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


def _writer(record: dict[str, Any] | None) -> int | None:
    """The process that wrote ``record``, where it still runs on this machine."""
    if record is None:
        return None
    pid = record.get("pid")
    if (isinstance(pid, int) and not isinstance(pid, bool) and record.get("host") == socket.gethostname()
            and process_alive(pid)):
        return pid
    return None


def _mtime(*paths: Path) -> float:
    """The latest modification time of those of ``paths`` that are there (0 when none is)."""
    latest = 0.0
    for path in paths:
        with contextlib.suppress(OSError):
            latest = max(latest, path.lstat().st_mtime)
    return latest


def examine_leftover(destination: Any, path: Path) -> Leftover:
    """Whether ``path`` (one of :func:`leftovers` or :func:`remnants`) is provably something
    zarr-device made while writing ``destination`` and may be removed. A tree is when it is a
    real directory holding a record that names this destination and the token in ``path``'s
    name, or when the record beside it (``.<name>.zdplace-<token>.json``) does. Anything else
    (a file or link of that name, a tree without a record or with another's, the previous store
    when the destination is missing) is not. A hidden ``.zdstage-`` folder is when it holds
    nothing but, at most, a record; a record beside, when the trees it proves are gone."""
    dest = local_destination(destination)
    names = _names(dest)
    if path.parent != dest.parent:
        return Leftover(path, False, "not a name zarr-device gives beside this destination")
    if (match := names.tree.fullmatch(path.name)) is not None:
        return _examine_tree(dest, path, match["token"], match["kind"])
    if names.stage.fullmatch(path.name) is not None:
        return _examine_stage(dest, path)
    if (match := names.beside.fullmatch(path.name)) is not None:
        return _examine_beside(dest, path, match["token"])
    return Leftover(path, False, "not a name zarr-device gives beside this destination")


def _examine_tree(dest: Path, path: Path, token: str, kind: str) -> Leftover:
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
    if not _names_this(record, dest, token):
        # Not proven by a record of its own: maybe by the record beside it, moved out while the
        # tree was being placed (then this is the new tree not yet in place, or the previous
        # store on its way out).
        beside = _beside_path(dest, token)
        placing = _read_record_at(beside)
        if _names_this(placing, dest, token):
            modified = _mtime(path, beside)
            if kind == "replaced" and not os.path.lexists(dest):
                return Leftover(path, False, f"the previous {dest.name}, moved aside by a replacement "
                                f"that did not finish, and {dest.name} is missing: kept; rename it "
                                "back to restore the old store", modified=modified)
            what = "the previous store, on its way out" if kind == "replaced" else \
                "a tree being placed (the new one, or the previous store on its way out)"
            return Leftover(path, True, f"{what}, by a save, convert or copy that did not finish "
                            f"(zarr-device's record is beside it, {beside.name}); never read as the "
                            "store", _writer(placing), modified)
        if record is None:
            return Leftover(path, False, "no record of zarr-device's in it (a tree of an earlier "
                            "release, or not zarr-device's); kept, remove it yourself if it is not "
                            "wanted", modified=info.st_mtime)
        return Leftover(path, False, f"its record {RECORD} is not for {dest.name} with this name's "
                        "token; kept", modified=info.st_mtime)
    assert record is not None
    role = record.get("role")
    modified = _mtime(path, path / RECORD)
    if role == "file":
        try:
            extra = sorted(set(os.listdir(path)) - {RECORD, dest.name})
        except OSError as e:
            return Leftover(path, False, f"cannot list it: {e.strerror or e}; kept", modified=modified)
        if extra:
            return Leftover(path, False, f"holds files zarr-device did not put there ({extra[0]!r}); "
                            "kept", modified=modified)
    elif role == "old":
        if not os.path.lexists(dest):
            return Leftover(path, False, f"the previous {dest.name}, moved aside by a replacement "
                            f"that did not finish, and {dest.name} is missing: kept; rename it back "
                            "to restore the old store", modified=modified)
    elif role != "new":
        return Leftover(path, False, f"its record {RECORD} is not one zarr-device writes; kept",
                        modified=modified)
    what = {"new": "a tree being written", "file": "a file being written",
            "old": "the previous store, on its way out"}[role]
    return Leftover(path, True, f"{what} by a save, convert or copy that did not finish "
                    "(zarr-device's record is in it); never read as the store", _writer(record), modified)


def _examine_stage(dest: Path, path: Path) -> Leftover:
    # The folder a tree is made in before it gets its name, and the one it is emptied in after
    # everything but its record is gone: killed there, a writer leaves it empty or holding a
    # record (torn, when killed while writing it). Nothing else is ever in it, so removing such
    # a folder removes nothing of anyone's; one holding anything else is kept.
    try:
        info = path.lstat()
        if not stat.S_ISDIR(info.st_mode):
            return Leftover(path, False, "not a directory: not one zarr-device makes; kept",
                            modified=info.st_mtime)
        inside = os.listdir(path)
    except FileNotFoundError:
        return Leftover(path, False, "gone")
    except OSError as e:
        return Leftover(path, False, f"cannot look at it: {e.strerror or e}; kept")
    modified = _mtime(path, path / RECORD)
    if not inside:
        return Leftover(path, True, "an empty folder a writer killed while making or removing a tree "
                        "left (zarr-device's hidden name); it holds nothing", modified=modified)
    if inside != [RECORD]:
        return Leftover(path, False, f"holds files zarr-device did not put there ({sorted(inside)[0]!r}); "
                        "kept", modified=modified)
    try:
        record_info = (path / RECORD).lstat()
    except OSError as e:
        return Leftover(path, False, f"cannot look at it: {e.strerror or e}; kept", modified=modified)
    if not stat.S_ISREG(record_info.st_mode) or record_info.st_size > _RECORD_LIMIT:
        return Leftover(path, False, f"its {RECORD} is not a record zarr-device writes; kept",
                        modified=modified)
    record = _read_record(path)
    # A torn record (killed while it was written) does not parse; one that does must be ours.
    if record is not None and (record.get("zarr_device") != "placement" or record.get("destination") != dest.name):
        return Leftover(path, False, f"its record {RECORD} is not for {dest.name}; kept", modified=modified)
    return Leftover(path, True, "a folder holding only zarr-device's record, left by a writer killed "
                    "while making or removing a tree", _writer(record), modified)


def _examine_beside(dest: Path, path: Path, token: str) -> Leftover:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return Leftover(path, False, "gone")
    except OSError as e:
        return Leftover(path, False, f"cannot look at it: {e}")
    record = _read_record_at(path)
    if not stat.S_ISREG(info.st_mode) or not _names_this(record, dest, token):
        return Leftover(path, False, f"not a record zarr-device writes for {dest.name} with this "
                        "name's token; kept", modified=info.st_mtime)
    for tree in (_partial_path(dest, token), _replaced_path(dest, token)):
        if os.path.lexists(tree):
            return Leftover(path, False, f"zarr-device's record of ../{tree.name}, which it proves; "
                            "kept while that is there (it is removed with it)", modified=info.st_mtime)
    return Leftover(path, True, "zarr-device's record of a placement that did not finish, whose "
                    "trees are gone", _writer(record), info.st_mtime)


def _remove_tree(root: Path, *, ignore_errors: bool = False) -> None:
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
            _rename_new(root, stage)
            break
        except FileExistsError:
            continue
    _remove_stage(stage)


def _remove_stage(stage: Path, *, ignore_errors: bool = False) -> None:
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
    if not any(os.path.lexists(p) for p in (_partial_path(dest, token), _replaced_path(dest, token))):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_beside_path(dest, token))


def discard(tree: Path, destination: Any, *, ignore_errors: bool = True) -> None:
    """Removes ``tree``, a partial tree of :func:`make_partial` (or ``atomic_file``'s folder)
    for ``destination`` that is not to be placed (its writer failed), and the record beside it
    where placing had begun; killed part-way, it leaves only what :func:`remove_leftovers`
    finishes. Use this, not shutil.rmtree, which removes the record in whatever order it lists."""
    dest = local_destination(destination)
    _remove_tree(tree, ignore_errors=ignore_errors)
    _drop_beside(dest, _token_of(tree))


def _removable(found: Leftover, now: float, older_than_s: float) -> bool:
    if not found.proven or now - found.modified < older_than_s:
        return False
    return not (older_than_s > 0 and found.writer is not None)


def remove_leftovers(destination: Any, *, older_than_s: float = 0.0, hidden: bool = True) -> list[Path]:
    """Removes the :func:`leftovers` of ``destination`` that :func:`examine_leftover` proves are
    zarr-device's, last modified at least ``older_than_s`` seconds ago, and returns them; the
    others are left (list them with :func:`leftovers`). With ``hidden`` (the default) the
    :func:`remnants` that may be removed go too, after the trees (a record beside goes with the
    trees it proves), and are not in the list returned (see :func:`remove_remnants`). A running
    writer's partial directory looks like a killed one's: call this when no write to
    ``destination`` is running, or pass an age longer than any write takes (with an age, a tree
    whose writer still runs on this machine is kept too)."""
    removed: list[Path] = []
    now = time.time()
    for path in leftovers(destination):
        if not _removable(examine_leftover(destination, path), now, older_than_s):
            continue
        try:
            _remove_tree(path)
        except OSError as e:
            raise StoreError(f"{path}: cannot remove it: {e}") from None
        removed.append(path)
    if hidden:
        remove_remnants(destination, older_than_s=older_than_s)
    return removed


def remove_remnants(destination: Any, *, older_than_s: float = 0.0) -> list[Path]:
    """Removes the :func:`remnants` of ``destination`` that :func:`examine_leftover` shows may
    go (with the same ``older_than_s`` as :func:`remove_leftovers`, which calls this after it
    removes trees) and returns them."""
    removed: list[Path] = []
    now = time.time()
    for path in remnants(destination):
        if not _removable(examine_leftover(destination, path), now, older_than_s):
            continue
        try:
            if path.name.endswith(".json"):
                os.unlink(path)
            else:
                _remove_stage(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise StoreError(f"{path}: cannot remove it: {e}") from None
        removed.append(path)
    return removed


def _fresh_token(dest: Path) -> str:
    # A token none of whose names is taken (a user's folder may have any of them).
    while True:
        token = secrets.token_hex(4)
        taken = (_partial_path(dest, token), _replaced_path(dest, token), _stage_path(dest, token),
                 _beside_path(dest, token))
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
        stage, partial = _stage_path(dest, token), _partial_path(dest, token)
        try:
            stage.mkdir()
        except FileExistsError:
            continue
        try:
            _write_record(stage, dest, token, role)
            _rename_new(stage, partial)
        except FileExistsError:  # another (a user) took the name meanwhile: another token
            _remove_stage(stage, ignore_errors=True)
            continue
        except BaseException:
            _remove_stage(stage, ignore_errors=True)
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


def _rename_new(src: Path, dst: Path) -> None:
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


def _fsync(path: str | Path, directory: bool) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
    beside = _beside_path(dest, token)
    old: Path | None = None
    try:
        replacing = overwrite and os.path.lexists(dest)
        if not replacing and os.path.lexists(dest):  # it appeared meanwhile
            raise FileExistsError(errno.EEXIST, "it appeared while writing", str(dest))
        with contextlib.suppress(FileNotFoundError):  # no record: nothing to prove it by
            _rename_new(partial / RECORD, beside)
        if not replacing:
            _rename_new(partial, dest)  # never over a folder that appeared meanwhile
        elif exchange(partial, dest):
            old = partial  # the old tree, now under the partial name
        else:
            # Without an exchange the destination is missing for a moment, never half written.
            aside = _replaced_path(dest, token)
            _rename_new(dest, aside)
            try:
                os.rename(partial, dest)
            except OSError:
                os.rename(aside, dest)  # the old tree back where it was
                raise
            old = aside
        _fsync(dest.parent, directory=True)
        # The record's move out of the tree, made durable with it: a crash must not bring it
        # back inside the placed store.
        _fsync(dest, directory=True)
    except OSError as e:
        raise StoreError(f"{dest}: cannot move the {what} into place: {e}") from None
    if old is not None:
        _remove_tree(old, ignore_errors=True)  # proven by the record beside until it is gone
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
