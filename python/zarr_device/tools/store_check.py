"""Checking a local store for what damage or killed writers leave behind (``zarr-device fsck``):
leftover temporary files (inside it, and partial trees of atomic saves beside it), links that
lead out of the store, files that cannot be values, metadata that does not parse and, with
``data=True``, stored chunks that do not decode.

What ``fix`` removes is only what can be shown to be zarr-device's, never by its name alone:

- inside the store, a temporary file named exactly as the engine names them
  (``.<name>.zdtmp-<pid>-<n>``, or an earlier release's ``.<name>.tmp<pid>.<n>``), in a Zarr node
  (the folder of a zarr.json, .zarray or .zgroup, or an array's chunk folders), where ``<name>``
  is a file the engine writes there (the node's metadata, or a chunk key of that array), whose
  writer is gone;
- beside the store, a partial tree whose record (:data:`zarr_device.io.atomic_trees.RECORD`, in the
  tree, or moved beside it while it was being placed) names the store and the token in the
  tree's name; and the hidden bookkeeping of such trees that a killed writer can leave (a
  ``.<name>.zdstage-*`` folder holding nothing but, at most, a record; a record beside whose
  trees are gone), which holds nothing of anyone's.

Names that only look like these (a user's ``.draft.tmp2024.01``, a ``.partial-`` folder without a
record) are reported where they sit in a node (readers skip them) and otherwise left alone; a
folder with no Zarr node in it has nothing removed at all.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zarr_device._core as _core
from zarr_device.io.leftover_trees import process_alive
from zarr_device.tools.store_walk import Folder, walk
from zarr_device.io.chunk_keys import ChunkKeys, v2_chunk_keys, v3_chunk_keys
from zarr_device.errors import ZarrDeviceError

__all__ = ["Problem", "FsckReport", "check_store", "MAX_DEPTH"]

#: A temporary file older than this is a leftover even when its writer's process id is in use
#: again (named temporaries live as long as one value takes to write; unnamed ones, microseconds).
STALE_AFTER_S = 3600.0
#: Folders deeper than this below the store's root are reported, not entered: an array's chunk
#: folders are at most 65 levels below it (64 dimensions and "c"), which leaves room for deep
#: hierarchies, while a tree made to exhaust memory or file descriptors is cut off.
MAX_DEPTH = 128
_METADATA = ("zarr.json", ".zarray", ".zgroup")
#: The files the engine writes into a node's folder through a temporary file.
_NODE_FILES = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})
#: The engine's lock file (cpp/src/stores/file_tree.hpp, kLockFileName), in an array's folder.
_LOCK_FILE = ".zarr-device.lock"
_METADATA_LIMIT = 64 << 20  # a metadata document larger than this is not parsed here
# The engine's temporary names (cpp/src/stores/file_tree.cpp, temporary_name): a process id and
# a 64-bit number, both as std::to_string writes them; and the form earlier releases wrote.
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.zdtmp-(?P<pid>[1-9][0-9]{0,9})-(?:0|[1-9][0-9]{0,19})")
_LEGACY_TEMPORARY = re.compile(r"\.(?P<name>.+)\.tmp(?P<pid>[1-9][0-9]{0,9})\.(?:0|[1-9][0-9]{0,19})")


@dataclass(frozen=True)
class Problem:
    """One finding: what kind, where (relative to the store's root), and what it means."""

    # "leftover", "hidden", "escaping-link", "not-a-file", "bad-name", "metadata", "chunk",
    # "too-deep", "unreadable", "not-a-store"
    kind: str
    path: str
    detail: str
    fixed: bool = False

    def __str__(self) -> str:
        return f"{self.kind}: {self.path or '/'}: {self.detail}{' (removed)' if self.fixed else ''}"


@dataclass
class FsckReport:
    root: str
    problems: list[Problem] = field(default_factory=list)
    nodes: int = 0
    chunks_checked: int = 0

    @property
    def clean(self) -> bool:
        """Nothing left to fix."""
        return all(p.fixed for p in self.problems)


# ----------------------------------------------------------------------------------------------
# Nodes, their chunk keys, and the engine's temporary files


def _read_small(fd: int, name: str) -> Any:
    """The JSON in ``name`` (a regular file beneath ``fd``), or None when it is not that."""
    try:
        file = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return None
    try:
        info = os.fstat(file)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _METADATA_LIMIT:
            return None
        with os.fdopen(os.dup(file), "rb") as stream:
            text = stream.read(_METADATA_LIMIT + 1)
        return json.loads(text)
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    finally:
        os.close(file)


@dataclass(frozen=True)
class _Node:
    path: str
    array: bool
    keys: ChunkKeys | None  # None for groups, and for arrays whose metadata does not parse here


def _node_of(folder: Folder) -> _Node | None:
    """The node whose folder this is, from its metadata (read again later through the engine;
    this reading only tells the chunk keys, to know which temporary names are the engine's)."""
    present = [m for m in _METADATA if m in folder.files and stat.S_ISREG(folder.files[m].st_mode)]
    if not present:
        return None
    if "zarr.json" in present:
        document = _read_small(folder.fd, "zarr.json")
        if not isinstance(document, dict):
            return _Node(folder.relative, False, None)
        if document.get("node_type") != "array":
            return _Node(folder.relative, False, None)
        return _Node(folder.relative, True, v3_chunk_keys(document))
    if ".zarray" in present:
        document = _read_small(folder.fd, ".zarray")
        return _Node(folder.relative, True, v2_chunk_keys(document) if isinstance(document, dict) else None)
    return _Node(folder.relative, False, None)


@dataclass(frozen=True)
class _Where:
    """Where a folder lies: in ``node``'s folder (``below`` empty) or in one of its chunk
    folders (``below``: the path from the node's folder)."""

    node: _Node
    below: tuple[str, ...] = ()


def _where(folder: Folder) -> _Where | None:
    node = _node_of(folder)
    if node is not None:
        return _Where(node)
    parent = folder.parent.context if folder.parent is not None else None
    if isinstance(parent, _Where) and parent.node.array:
        return _Where(parent.node, parent.below + (folder.parts[-1],))
    return None  # a folder that is no Zarr node's: none of its names are the engine's


def _temporary(name: str) -> re.Match[str] | None:
    return _TEMPORARY.fullmatch(name) or _LEGACY_TEMPORARY.fullmatch(name)


def _engine_temporary(where: _Where | None, name: str) -> re.Match[str] | None:
    """The match when ``name`` is a temporary file the engine writes at ``where``."""
    found = _temporary(name)
    if found is None or where is None:
        return None
    target = found["name"]
    if not where.below and (target in _NODE_FILES or (where.node.array and target == _LOCK_FILE)):
        return found
    keys = where.node.keys
    if keys is not None and keys.pattern.fullmatch("/".join(where.below + (target,))):
        return found
    return None


# ----------------------------------------------------------------------------------------------
# The checks


@dataclass
class _Found:
    """What the file walk learnt: the nodes, and how many chunks each array stores."""

    nodes: list[_Node] = field(default_factory=list)
    stored: dict[str, int] = field(default_factory=dict)


def _escapes(root: Path, relative: str) -> Path | None:
    # The link's target, when it lies outside the store.
    try:
        target = (root / relative).resolve()
        inside = target.is_relative_to(root.resolve())
    except (OSError, RuntimeError, ValueError):
        return None
    return None if inside else target


def _check_files(root: Path, fix: bool, report: FsckReport) -> _Found:
    """The file-level checks; returns the nodes found."""
    found = _Found()
    for folder in walk(root, MAX_DEPTH):
        if folder.error is not None:
            if folder.error == "too-deep":
                report.problems.append(Problem("too-deep", folder.relative, f"more than {MAX_DEPTH} "
                                               "levels below the store's root: not looked into"))
            else:
                report.problems.append(Problem("unreadable", folder.relative, folder.error))
            continue
        where = folder.context = _where(folder)
        if where is not None and not where.below:
            found.nodes.append(where.node)
        for name in itertools.chain(folder.dirs, folder.files):
            relative = f"{folder.relative}/{name}" if folder.parts else name
            if "\\" in name or not name.isprintable():
                report.problems.append(Problem("bad-name", relative, "a name no Zarr key can have"))
            if where is not None and _core.is_temporary_name(name) and _engine_temporary(where, name) is None:
                # The engine's listings skip it, yet nothing shows it is the engine's: the user's.
                report.problems.append(Problem(
                    "hidden", relative, "named like a temporary file, so zarr-device's listings "
                    "skip it, but not one zarr-device writes here; left in place"))
        for name, info in folder.files.items():
            relative = f"{folder.relative}/{name}" if folder.parts else name
            if stat.S_ISLNK(info.st_mode):
                target = _escapes(root, relative)
                if target is not None:
                    report.problems.append(
                        Problem("escaping-link", relative, f"a link out of the store, to {target}; "
                                "zarr-device refuses to follow it")
                    )
                continue
            if not stat.S_ISREG(info.st_mode):
                report.problems.append(
                    Problem("not-a-file", relative, "neither a file nor a directory (a FIFO, "
                            "socket or device); reading it as a value is an error")
                )
                continue
            if where is not None and where.node.keys is not None and \
                    where.node.keys.pattern.fullmatch("/".join(where.below + (name,))):
                found.stored[where.node.path] = found.stored.get(where.node.path, 0) + 1
            _check_temporary(folder, where, name, info, relative, fix, report)
    return found


def _check_temporary(folder: Folder, where: _Where | None, name: str, info: os.stat_result,
                     relative: str, fix: bool, report: FsckReport) -> None:
    ours = _engine_temporary(where, name)
    if ours is None:
        found = _temporary(name)
        if where is None and found is not None and found["name"] in _NODE_FILES:
            report.problems.append(Problem(
                "leftover", relative, "named like a temporary file of Zarr metadata, outside any "
                "Zarr node (maybe a node whose creation did not finish); left in place: fsck "
                "removes only what it can tell is zarr-device's"))
        return
    age = time.time() - info.st_mtime
    if process_alive(int(ours["pid"])) and age < STALE_AFTER_S:
        report.problems.append(Problem("leftover", relative, "a write in progress (its process is alive)"))
        return
    detail = f"a temporary file of a write that did not finish ({info.st_size} bytes); reads ignore it"
    removed = False
    if fix:
        try:
            os.unlink(name, dir_fd=folder.fd)  # beneath the folder's descriptor: never through a link
            removed = True
        except FileNotFoundError:  # another cleaner got there first
            removed = True
        except OSError as e:
            detail += f"; cannot remove it: {e.strerror or e}"
    report.problems.append(Problem("leftover", relative, detail, fixed=removed))


def _stored_chunks(root: Path, node: _Node) -> Iterator[tuple[str, int]]:
    """The keys and sizes of the chunks (shards, when sharded) stored for the array ``node``,
    found by listing its folders: only what exists is visited, however many chunks the grid
    declares."""
    keys = node.keys
    if keys is None:
        return
    start = tuple(node.path.split("/")) if node.path else ()
    for folder in walk(root, keys.ndim + 1, start):
        if folder.error is not None:
            continue
        below = folder.parts[len(start):]
        if below and any(m in folder.files for m in _METADATA):
            folder.dirs.clear()  # another node's folder, not a chunk folder
            continue
        for name, info in folder.files.items():
            key = "/".join(below + (name,))
            if stat.S_ISREG(info.st_mode) and keys.pattern.fullmatch(key):
                yield key, info.st_size


def _regions(array: Any, index: tuple[int, ...]) -> Iterator[tuple[slice, ...]]:
    """The read chunks of the stored chunk at grid ``index``: itself, or the inner chunks of a
    shard, one at a time (memory stays one chunk's)."""
    shape = array.shape
    outer = tuple(array._core.chunk_shape)
    inner = array.chunks
    starts = [i * o for i, o in zip(index, outer)]
    stops = [min(s + o, n) for s, o, n in zip(starts, outer, shape)]
    ranges = [range(a, b, c) if c else range(0) for a, b, c in zip(starts, stops, inner)]
    for corner in itertools.product(*ranges):
        yield tuple(slice(a, min(a + c, b)) for a, c, b in zip(corner, inner, stops))


def _reads_per_stored(array: Any) -> int:
    outer = tuple(array._core.chunk_shape)
    return math.prod(math.ceil(o / i) if i else 0 for o, i in zip(outer, array.chunks))


#: The bytes a shard's index takes per inner chunk (an offset and a size, 8 bytes each).
_INDEX_ENTRY_BYTES = 16


def _check_chunks(root: Path, node: _Node, array: Any, progress: Callable[[int], None],
                  report: FsckReport) -> None:
    """Reads every stored chunk of ``array`` (one at a time: memory stays one chunk's)."""
    keys = node.keys
    assert keys is not None
    shape = array.shape
    outer = tuple(array._core.chunk_shape)
    grid = [math.ceil(s / c) if c else 0 for s, c in zip(shape, outer)]
    per_shard = _reads_per_stored(array) if array.shards is not None else 1
    for key, size in _stored_chunks(root, node):
        index = keys.index(key)
        if len(index) != len(grid) or any(i >= n for i, n in zip(index, grid)):
            continue  # outside the array's shape (a resize left it): never read
        # A shard whose file is too small to hold its index cannot hold any inner chunk: its
        # first read says why, and the others (maybe more than could ever be read) are skipped.
        short = per_shard > 1 and per_shard * _INDEX_ENTRY_BYTES > size
        regions = _regions(array, index) if shape else iter([()])
        for region in itertools.islice(regions, 1) if short else regions:
            try:
                array.read(region if region else Ellipsis)
            except ZarrDeviceError as e:
                report.problems.append(Problem("chunk", array.path, str(e)))
            report.chunks_checked += 1
            progress(1)


def _check_siblings(path: Path, fix: bool, report: FsckReport) -> None:
    """What atomic saves, converts and copies into ``path`` left beside it when killed (their
    ``.partial-*`` and ``.replaced-*`` trees, and their hidden bookkeeping): never read in place of
    the store, only taking space. ``fix`` removes those that zarr-device's record proves its own
    (the bookkeeping: that holds nothing but a record) and that are older than STALE_AFTER_S (a
    younger one, or one whose writer still runs, may be a running writer's). The trees go first:
    a record beside them goes only once they are gone."""
    from zarr_device.io.leftover_trees import (
        examine_leftover, leftovers, remnants, remove_leftovers, remove_remnants,
    )

    removed: set[Path] = set()
    if fix:
        removed |= set(remove_leftovers(path, older_than_s=STALE_AFTER_S, hidden=False))
        removed |= set(remove_remnants(path, older_than_s=STALE_AFTER_S))
    for sibling in sorted(set(leftovers(path)) | set(remnants(path)) | removed):
        relative = f"../{sibling.name}"
        if sibling in removed:
            report.problems.append(Problem("leftover", relative, "left beside the store by a save, "
                                           "convert or copy that did not finish", fixed=True))
            continue
        found = examine_leftover(path, sibling)
        detail = found.detail
        if found.proven and fix:
            detail += ("; kept: its writer (process " + str(found.writer) + ") still runs"
                       if found.writer is not None else
                       f"; kept: changed less than {STALE_AFTER_S:.0f} s ago (a writer may be running)")
        report.problems.append(Problem("leftover", relative, detail))


#: The root attribute of a PyTorch checkpoint (zarr_device.torch.format.ROOT_ATTRIBUTE), named
#: here so that fsck needs no torch to find one.
_CHECKPOINT_ATTRIBUTE = "zarr_device_checkpoint"


def _check_checkpoint(root: Path, node: str, report: FsckReport) -> None:
    """A checkpoint declares which chunk files it left out (all zeros): every other one must be
    stored, unlike a plain array's, where a missing chunk is the fill value. Checked as a load
    checks it (the manifest, each tensor's array and its chunk files)."""
    try:
        from zarr_device.torch.load import open_checkpoint
    except (ImportError, ZarrDeviceError) as e:  # without torch: zarr_device.torch's UsageError
        report.problems.append(Problem("chunk", node, f"a checkpoint, not checked: {e}"))
        return
    try:
        open_checkpoint(root / node if node else root)
    except ZarrDeviceError as e:
        report.problems.append(Problem("chunk", node, f"checkpoint: {e}"))


def check_store(
    root: str | os.PathLike[str],
    *,
    fix: bool = False,
    data: bool = False,
    progress: Callable[[int], None] | None = None,
    total: Callable[[int], None] | None = None,
) -> FsckReport:
    """Checks the local store at ``root``. ``fix`` removes the leftovers that are provably
    zarr-device's (see the module's description); ``data`` also reads every stored chunk of
    every array (``progress`` is told of each; ``total``, when given, of how many there are
    once that is known) and checks that PyTorch checkpoints hold every chunk file they were
    written with (they list the all-zero ones they left out; needs torch)."""
    from zarr_device.core.array import Array
    from zarr_device.core.group import open

    path = Path(root)
    report = FsckReport(str(path))
    if not os.path.lexists(path):
        _check_siblings(path, fix, report)
        report.problems.append(Problem("not-a-store", "", f"{path} does not exist"))
        return report
    if not path.is_dir():
        _check_siblings(path, False, report)
        report.problems.append(Problem("not-a-store", "", "not a directory"))
        return report
    # Only files in a Zarr node are ever removed: a folder without one has nothing removed.
    found = _check_files(path, fix, report)
    report.nodes = len(found.nodes)
    # Beside a folder that is no Zarr store nothing is removed either: fix only where fsck can
    # tell that the path is a store (or that nothing is at it, after a killed first save).
    _check_siblings(path, fix and report.nodes > 0, report)
    if not found.nodes:
        report.problems.append(Problem(
            "not-a-store", "", "no Zarr node in it (no zarr.json, .zarray or .zgroup)"
            + ("; nothing was changed" if fix else "")))
        return report
    opened: list[tuple[_Node, Array]] = []
    for node in sorted(found.nodes, key=lambda n: n.path):
        try:
            item = open(path, path=node.path, mode="r")
        except ZarrDeviceError as e:
            report.problems.append(Problem("metadata", node.path, str(e)))
            continue
        if data and not isinstance(item, Array) and _CHECKPOINT_ATTRIBUTE in item.attrs:
            _check_checkpoint(path, node.path, report)
        if data and isinstance(item, Array):
            if node.keys is None:
                report.problems.append(Problem("chunk", node.path, "its chunk key encoding is not "
                                               "one fsck knows: chunks not read"))
            else:
                opened.append((node, item))
    if data:
        if total is not None:
            total(sum(found.stored.get(n.path, 0) * _reads_per_stored(a) for n, a in opened))
        for node, item in opened:
            _check_chunks(path, node, item, progress or (lambda _: None), report)
    return report

