"""Checking a local store for what damage or killed writers leave behind (``zarr-device fsck``):
leftover temporary files (inside it, and partial trees of atomic saves beside it), links that lead out of the store, files that cannot be values,
metadata that does not parse and, with ``data=True``, chunks that do not decode."""

from __future__ import annotations

import itertools
import math
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zarr_device import _core
from zarr_device.errors import ZarrDeviceError

__all__ = ["Problem", "FsckReport", "check_store"]

#: A temporary file older than this is a leftover even when its writer's process id is in use
#: again (named temporaries live as long as one value takes to write; unnamed ones, microseconds).
STALE_AFTER_S = 3600.0
_METADATA = ("zarr.json", ".zarray", ".zgroup")


@dataclass(frozen=True)
class Problem:
    """One finding: what kind, where (relative to the store's root), and what it means."""

    kind: str  # "leftover", "escaping-link", "not-a-file", "bad-name", "metadata", "chunk"
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


def _writer_alive(name: str) -> bool:
    """Whether the process that named this temporary may still be writing it."""
    for part in name.split(".zdtmp-", 1)[1:] or name.rsplit(".tmp", 1)[1:]:
        digits = part.split("-", 1)[0].split(".", 1)[0]
        if digits.isdigit():
            try:
                os.kill(int(digits), 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return True
    return False


def _walk(root: Path) -> Iterator[tuple[Path, list[str], list[str]]]:
    # Never follows links: a link is looked at, not entered.
    yield from ((Path(d), dirs, files) for d, dirs, files in os.walk(root, followlinks=False))


def _check_files(root: Path, fix: bool, report: FsckReport) -> list[str]:
    """The file-level checks; returns the node paths found."""
    nodes: list[str] = []
    real_root = root.resolve()
    for folder, dirs, files in _walk(root):
        relative_folder = folder.relative_to(root).as_posix()
        relative_folder = "" if relative_folder == "." else relative_folder
        if any(m in files for m in _METADATA):
            nodes.append(relative_folder)
        for name in itertools.chain(dirs, files):
            path = folder / name
            relative = f"{relative_folder}/{name}" if relative_folder else name
            if "\\" in name or not name.isprintable():
                report.problems.append(Problem("bad-name", relative, "a name no Zarr key can have"))
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                target = path.resolve()
                if not target.is_relative_to(real_root):
                    report.problems.append(
                        Problem("escaping-link", relative, f"a link out of the store, to {target}; "
                                "zarr-device refuses to follow it")
                    )
                continue
            if name in dirs:
                continue
            if not stat.S_ISREG(info.st_mode):
                report.problems.append(
                    Problem("not-a-file", relative, "neither a file nor a directory (a FIFO, "
                            "socket or device); reading it as a value is an error")
                )
                continue
            if _core.is_temporary_name(name):
                age = time.time() - info.st_mtime
                if _writer_alive(name) and age < STALE_AFTER_S:
                    report.problems.append(
                        Problem("leftover", relative, "a write in progress (its process is alive)")
                    )
                    continue
                removed = False
                if fix:
                    path.unlink(missing_ok=True)
                    removed = True
                report.problems.append(
                    Problem("leftover", relative,
                            f"a temporary file of a write that did not finish ({info.st_size} bytes); "
                            "reads ignore it", fixed=removed)
                )
    return nodes


def _check_chunks(array: Any, progress: Callable[[int], None], report: FsckReport) -> None:
    """Reads every chunk of `array` (one at a time: memory stays one chunk's)."""
    shape = array.shape
    chunks = array.chunks
    grid = [range(math.ceil(s / c)) if c else range(0) for s, c in zip(shape, chunks)]
    for index in itertools.product(*grid):
        selection = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, chunks, shape))
        try:
            array.read(selection)
        except ZarrDeviceError as e:
            report.problems.append(Problem("chunk", array.path, str(e)))
        report.chunks_checked += 1
        progress(1)


def _check_siblings(path: Path, fix: bool, report: FsckReport) -> None:
    """What atomic saves, converts and copies into ``path`` left beside it when killed (their
    ``.partial-*`` and ``.replaced-*`` trees): never read in place of the store, only taking space.
    ``fix`` removes those older than STALE_AFTER_S; a younger one may be a running writer's."""
    from zarr_device.placement import leftovers, remove_leftovers

    removed = set(remove_leftovers(path, older_than_s=STALE_AFTER_S)) if fix else set()
    for sibling in leftovers(path) + sorted(removed):
        fixed = sibling in removed
        detail = ("left beside the store by a save, convert or copy that did not finish; never read "
                  "as the store" + ("" if fixed or not fix else
                                    f"; kept: changed less than {STALE_AFTER_S:.0f} s ago (a writer may be running)"))
        report.problems.append(Problem("leftover", f"../{sibling.name}", detail, fixed=fixed))


def check_store(
    root: str | os.PathLike[str],
    *,
    fix: bool = False,
    data: bool = False,
    progress: Callable[[int], None] | None = None,
) -> FsckReport:
    """Checks the local store at ``root``. ``fix`` removes leftover temporary files of writers that
    are gone; ``data`` also reads every chunk of every array (``progress`` is told of each)."""
    from zarr_device.array import Array
    from zarr_device.group import open

    path = Path(root)
    report = FsckReport(str(path))
    _check_siblings(path, fix, report)
    if not path.is_dir():
        report.problems.append(Problem("metadata", "", "not a directory"))
        return report
    nodes = _check_files(path, fix, report)
    report.nodes = len(nodes)
    for node in sorted(nodes):
        try:
            opened = open(path, path=node, mode="r")
        except ZarrDeviceError as e:
            report.problems.append(Problem("metadata", node, str(e)))
            continue
        if data and isinstance(opened, Array):
            _check_chunks(opened, progress or (lambda _: None), report)
    return report
