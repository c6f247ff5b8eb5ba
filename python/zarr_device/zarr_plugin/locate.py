"""From zarr-python's chunk keys back to the array they belong to.

zarr-python hands a codec pipeline one ``StorePath`` per chunk (``store``, ``"<array path>/<chunk
key>"``), never the array's path. The chunk key encoding in the array's metadata says how many
path components a key has and how it spells the chunk's coordinates, so the path splits into the
array's path and the chunk's coordinates; the key is then encoded again and compared, so a path
that is not one of this array's chunk keys is never taken for one. Each array is opened once in
the engine, on the same store, and kept.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import zarr_device._core as _core
from zarr_device.core.array import Array
from zarr_device.core.nodes import node_path
from zarr_device.io.stores import as_store

if TYPE_CHECKING:
    from zarr.core.metadata import ArrayMetadata

__all__ = ["KeyLayout", "key_layout", "split_chunk_key", "split_chunk_keys", "stand_in_reason", "EngineArrays"]


@dataclass(frozen=True)
class KeyLayout:
    """How an array spells its chunk keys: ``head`` ("c" for the default encoding, "" for v2),
    the ``separator``, the number of dimensions and of path components in one key."""

    head: str
    separator: str
    ndim: int
    components: int


def key_layout(metadata: ArrayMetadata) -> KeyLayout | None:
    """The chunk key layout of zarr-python's metadata (None for an encoding not known here)."""
    ndim = len(metadata.shape)
    if metadata.zarr_format == 2:
        head, separator = "", str(getattr(metadata, "dimension_separator", "."))
    else:
        encoding = metadata.chunk_key_encoding
        name = getattr(encoding, "name", None)
        if name not in ("default", "v2"):
            return None
        head, separator = ("c" if name == "default" else ""), str(getattr(encoding, "separator", ""))
    if separator not in (".", "/"):
        return None
    components = metadata.encode_chunk_key((0,) * ndim).count("/") + 1
    return KeyLayout(head, separator, ndim, components)


def split_chunk_key(layout: KeyLayout, metadata: ArrayMetadata, path: str) -> tuple[str, tuple[int, ...]] | None:
    """``path`` ("<array path>/<chunk key>") as the array's path and the chunk's coordinates,
    or None when its tail is not one of the array's chunk keys."""
    parts = path.split("/")
    if len(parts) < layout.components:
        return None
    prefix = "/".join(parts[: len(parts) - layout.components])
    key = "/".join(parts[len(parts) - layout.components :])
    rest = key
    if layout.head:
        if not rest.startswith(layout.head):
            return None
        rest = rest[len(layout.head) :]
        if layout.ndim:
            if not rest.startswith(layout.separator):
                return None
            rest = rest[1:]
    coords: tuple[int, ...] = ()
    if layout.ndim:
        try:
            coords = tuple(int(c) for c in rest.split(layout.separator))
        except ValueError:
            return None
    if len(coords) != layout.ndim or metadata.encode_chunk_key(coords) != key:
        return None
    return prefix, coords


def split_chunk_keys(
    layout: KeyLayout, metadata: ArrayMetadata, paths: Sequence[str]
) -> tuple[str, list[tuple[int, ...]]] | None:
    """Every path of a batch as one array's path and the chunks' coordinates, when all are
    chunk keys of that array as its encoding spells them; None otherwise (the caller then looks at
    each with :func:`split_chunk_key`, which says which one is not).

    A read of a whole array hands over thousands of keys: the first is split and checked in full,
    the rest only have to start as it does and spell their coordinates canonically (the key built
    again from the parsed integers is the key), which is the same check, done in C."""
    if not paths or layout.ndim == 0:
        return None
    first = split_chunk_key(layout, metadata, paths[0])
    if first is None:
        return None
    prefix, first_coords = first
    separator = layout.separator
    lead = paths[0][: len(paths[0]) - len(separator.join(map(str, first_coords)))]
    start = len(lead)
    coords = [first_coords]
    for path in paths[1:]:
        if not path.startswith(lead):
            return None
        tail = path[start:]
        try:
            chunk = tuple(map(int, tail.split(separator)))
        except ValueError:
            return None
        if len(chunk) != layout.ndim or separator.join(map(str, chunk)) != tail:
            return None
        coords.append(chunk)
    return prefix, coords


def stand_in_reason(store: Any) -> str | None:
    """Why the engine leaves ``store`` to zarr-python's codecs when it is an object standing in
    for a store class it is not an instance of (its ``__class__`` is not its type:
    ``unittest.mock`` objects made with ``spec=``, proxies), else None.

    Such an object passes ``isinstance`` checks for the class it names without having that
    class's attributes (a ``LocalStore`` mock has no ``root``), and whoever made it expects its
    own methods to be called: the engine, which reads a local directory's files itself and asks
    other stores for byte ranges its own way, would bypass them. zarr-python's codecs call them
    as zarr-python always does."""
    claimed = getattr(store, "__class__", type(store))
    if claimed is type(store):
        return None
    return (
        f"the store is a {type(store).__name__} standing in for {getattr(claimed, '__name__', claimed)} "
        "(a mock or proxy, whose own methods zarr-python's codecs call)"
    )


class EngineArrays:
    """The engine's handle on each (zarr-python store, array path) a pipeline has met, opened
    once (read-write unless the store is read-only) and kept. Safe to use from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Keyed by the store's identity and, for a local store, its directory (which
        # ``LocalStore.move`` changes); the store is kept with its array, so the key stays its.
        self._arrays: dict[tuple[int, str, str], tuple[Any, Array]] = {}

    def get(self, store: Any, path: str, *, reopen: bool = False) -> Array:
        """The engine array at ``path`` in ``store`` (a zarr-python store: local directories are
        read by the engine itself, other stores through :class:`zarr_device.ZarrStoreAdapter`).
        ``reopen``: read its metadata again."""
        key = (id(store), str(getattr(store, "root", "")), path)
        # Held while opening: zarr-python writes and reads batches from several threads at once,
        # and the array is opened (its metadata read) once, not once per thread. One pipeline
        # serves one array, so nothing else waits on this lock.
        with self._lock:
            found = self._arrays.get(key)
            if found is not None and not reopen:
                return found[1]
            # zarr-python has the array's metadata in hand: the engine opens it as an array
            # straight away, without first asking the store what kind of node is there.
            engine_store = as_store(store)
            read_only = bool(getattr(store, "read_only", False))
            array = Array(_core.Array.open(engine_store.handle, node_path(path)), engine_store, read_only=read_only)
            self._arrays[key] = (store, array)
            return array
