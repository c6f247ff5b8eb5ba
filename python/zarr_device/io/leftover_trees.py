"""The trees that atomic saves, converts and copies leave beside a destination when they are
killed (:mod:`zarr_device.io.atomic_trees` makes and places them): which are there, which a record
proves to be this package's, and removing those (``zarr_device.torch.remove_partials``,
``zarr-device fsck --fix``). A tree no record proves is listed, never removed."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zarr_device.errors import StoreError
from zarr_device.io.atomic_trees import (
    RECORD,
    RECORD_LIMIT,
    beside_path,
    local_destination,
    partial_path,
    read_record,
    read_record_at,
    record_names,
    remove_stage,
    remove_tree,
    replaced_path,
    tree_names,
)

__all__ = [
    "leftovers", "remnants", "examine_leftover", "Leftover", "remove_leftovers", "remove_remnants",
    "process_alive",
]


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
    return _listed(dest, tree_names(dest).tree)


def remnants(destination: Any) -> list[Path]:
    """The hidden bookkeeping of killed writers beside ``destination``: ``.<name>.zdstage-*``
    folders (a tree being made or removed when the writer was killed: they hold nothing, or only
    a record) and ``.<name>.zdplace-*.json`` records (each proves the trees of its token, and is
    left over once they are gone). They take no space to speak of; :func:`remove_leftovers`
    removes them. Sorted by name."""
    dest = local_destination(destination)
    names = tree_names(dest)
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
    names = tree_names(dest)
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
    record = read_record(path)
    if not record_names(record, dest, token):
        # Not proven by a record of its own: maybe by the record beside it, moved out while the
        # tree was being placed (then this is the new tree not yet in place, or the previous
        # store on its way out).
        beside = beside_path(dest, token)
        placing = read_record_at(beside)
        if record_names(placing, dest, token):
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
    if not stat.S_ISREG(record_info.st_mode) or record_info.st_size > RECORD_LIMIT:
        return Leftover(path, False, f"its {RECORD} is not a record zarr-device writes; kept",
                        modified=modified)
    record = read_record(path)
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
    record = read_record_at(path)
    if not stat.S_ISREG(info.st_mode) or not record_names(record, dest, token):
        return Leftover(path, False, f"not a record zarr-device writes for {dest.name} with this "
                        "name's token; kept", modified=info.st_mtime)
    for tree in (partial_path(dest, token), replaced_path(dest, token)):
        if os.path.lexists(tree):
            return Leftover(path, False, f"zarr-device's record of ../{tree.name}, which it proves; "
                            "kept while that is there (it is removed with it)", modified=info.st_mtime)
    return Leftover(path, True, "zarr-device's record of a placement that did not finish, whose "
                    "trees are gone", _writer(record), info.st_mtime)

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
            remove_tree(path)
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
                remove_stage(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise StoreError(f"{path}: cannot remove it: {e}") from None
        removed.append(path)
    return removed
