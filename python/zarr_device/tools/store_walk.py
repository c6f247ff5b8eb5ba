"""Walking a local store's folders for the store check (:mod:`zarr_device.tools.store_check`):
iteratively, with one open directory per level entered, never through a link, so a tree made to
exhaust memory, file descriptors or the stack is cut off where it goes too deep."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Folder", "walk"]




@dataclass
class Folder:
    """One directory of the walk. ``dirs``: the real subdirectories to enter (the caller may
    remove names, as with os.walk); ``files``: every other entry, with its lstat. ``context``
    is the caller's, read by the children through ``parent``."""

    parts: tuple[str, ...]
    fd: int
    files: dict[str, os.stat_result]
    dirs: list[str]
    parent: Folder | None
    error: str | None = None
    context: Any = None

    @property
    def relative(self) -> str:
        return "/".join(self.parts)


def _list(fd: int) -> tuple[dict[str, os.stat_result], list[str]]:
    files: dict[str, os.stat_result] = {}
    dirs: list[str] = []
    with os.scandir(fd) as entries:
        names = sorted(entry.name for entry in entries)
    for name in names:
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:  # removed meanwhile
            continue
        if stat.S_ISDIR(info.st_mode):
            dirs.append(name)
        else:
            files[name] = info
    return files, dirs


def walk(root: Path, max_depth: int, start: tuple[str, ...] = ()) -> Iterator[Folder]:
    """Every directory under ``root``, parents before children, without recursion: a tree of
    any depth costs one open directory per level entered, and levels past ``max_depth`` are
    yielded with ``error`` set and not entered. Directories are opened beneath their parent's
    descriptor without following links, so a folder swapped for a link meanwhile is not
    entered. The root itself (a path the caller named) may be a link."""
    frames: list[tuple[Folder, list[str]]] = []

    def enter(parts: tuple[str, ...], parent: Folder | None) -> Folder | None:
        # The folder at ``parts``: opened, listed and put on the frames (closed with its frame,
        # also when the caller stops early); when it cannot be, one with ``error`` set; None
        # when it was removed meanwhile.
        try:
            if parent is None:
                fd = os.open(root.joinpath(*parts), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            else:
                fd = os.open(parts[-1], os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                             dir_fd=parent.fd)
        except FileNotFoundError:
            if parent is None:
                return Folder(parts, -1, {}, [], parent, error="it does not exist")
            return None
        except OSError as e:
            return Folder(parts, -1, {}, [], parent, error=f"cannot open it: {e.strerror or e}")
        try:
            files, dirs = _list(fd)
        except OSError as e:
            os.close(fd)
            return Folder(parts, -1, {}, [], parent, error=f"cannot list it: {e.strerror or e}")
        folder = Folder(parts, fd, files, dirs, parent)
        frames.append((folder, []))
        return folder

    try:
        folder = enter(start, None)
        assert folder is not None
        yield folder
        if frames:
            frames[-1] = (folder, list(reversed(folder.dirs)))  # as the caller left them
        while frames:
            folder, pending = frames[-1]
            if not pending:
                os.close(folder.fd)
                frames.pop()
                continue
            name = pending.pop()
            parts = folder.parts + (name,)
            if len(parts) - len(start) > max_depth:
                yield Folder(parts, -1, {}, [], folder, error="too-deep")
                continue
            child = enter(parts, folder)
            if child is None:
                continue
            yield child
            if child.error is None:
                frames[-1] = (child, list(reversed(child.dirs)))
    finally:
        for folder, _ in frames:
            with contextlib.suppress(OSError):
                os.close(folder.fd)
