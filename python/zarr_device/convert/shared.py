"""What every conversion shares (``zarr-device convert``: Zarr to Zarr in :mod:`zarr_device.convert.zarr_to_zarr`,
PyTorch checkpoints in :mod:`zarr_device.torch.interop`): the summary it returns, the source it
reads as one tree of nodes, which kind of source a path holds, and the destination it may write."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy.typing as npt

from zarr_device.io import atomic_trees
from zarr_device.core.array import Array
from zarr_device.errors import UsageError
from zarr_device.io.chunk_keys import ChunkKeys, v2_chunk_keys, v3_chunk_keys
from zarr_device.core.group import Group
from zarr_device.core.group import open as open_node
from zarr_device.core.nodes import join_path
from zarr_device.io.stores import LocalStore, MemoryStore, StoreLike, ZarrStoreAdapter, as_store

__all__ = [
    "ConvertSummary",
    "SourceGroup",
    "SourceArray",
    "SourceTree",
    "stored_chunks",
    "read_zarr",
    "read_source",
    "local_path",
    "checkpoint_kind",
    "path_inside",
    "check_destination",
]


@dataclass(frozen=True)
class ConvertSummary:
    """What a conversion did. ``bytes_read``: the decoded bytes of every array copied;
    ``bytes_written``: the size of the destination's files (chunks and metadata)."""

    source: str
    destination: str
    arrays: int
    groups: int
    bytes_read: int
    bytes_written: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# -- sources ------------------------------------------------------------------------------------
# Every kind of input is read as one SourceTree: nodes, groups before their members, with paths
# relative to the node converted (""). Zarr is the one kind so far; another (a safetensors file, a
# Hugging Face folder) is one more reader giving the same nodes, and one entry in _SOURCE_KINDS.


@dataclass(frozen=True)
class SourceGroup:
    path: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class SourceArray:
    path: str
    shape: tuple[int, ...]
    data_type: str  # the package's name: a Zarr v3 name, or NumPy's for a time type
    itemsize: int
    fill_value: Any  # as Zarr v3 JSON
    chunks: tuple[int, ...]  # the source's (inner) chunks, kept unless others are asked for
    attributes: dict[str, Any]
    dimension_names: list[str | None] | None
    read: Callable[[tuple[slice, ...]], npt.NDArray[Any]]
    # The grid indices of the units the source stores (shards when sharded, else chunks), each
    # of ``stored_shape`` elements, found by listing the store: only what exists is visited.
    # None where the store cannot list: every region of the declared shape is then read.
    stored: Callable[[], Iterator[tuple[int, ...]]] | None = None
    stored_shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class SourceTree:
    description: str  # for messages and the summary
    local_root: str | None  # the directory read, when local: nothing may be written into it
    nodes: list[SourceGroup | SourceArray]


def _zarr_nodes(node: Array | Group, relative: str) -> Iterator[SourceGroup | SourceArray]:
    """The source's nodes, each group before its members (Group.walk: iterative, with its depth
    limit, so that a tree nested without end is a FormatError, not a RecursionError)."""
    if not isinstance(node, Group):
        yield _source_array(node, relative)
        return
    yield SourceGroup(relative, dict(node.attrs))
    for path, member in node.walk():
        where = join_path(relative, path)
        yield SourceGroup(where, dict(member.attrs)) if isinstance(member, Group) else _source_array(member, where)


def _lists(store: object) -> bool:
    """Whether the store can list its keys (zarr-python stores say so; some cannot: HTTP)."""
    if isinstance(store, (LocalStore, MemoryStore)):
        return True
    return isinstance(store, ZarrStoreAdapter) and bool(getattr(store.store, "supports_listing", False))


def stored_chunks(node: Array) -> Callable[[], Iterator[tuple[int, ...]]] | None:
    """A function listing the grid indices of the chunks (shards, when sharded) that ``node``
    stores, or None where its store cannot list or its chunk keys are not ones known here."""
    metadata = node.metadata
    keys = v3_chunk_keys(metadata) if node.zarr_format == 3 else v2_chunk_keys(metadata)
    if keys is None or keys.ndim != len(node.shape) or not _lists(node.store):
        return None
    handle, base = node.store.handle, node.path
    grid = tuple(-(-s // c) if c else 0 for s, c in zip(node.shape, node._core.chunk_shape))  # noqa: SLF001
    return lambda: _listed(handle, base, keys, grid)


def _listed(handle: Any, base: str, keys: ChunkKeys, grid: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """The indices inside ``grid`` of the chunk keys stored under the node at ``base``: one
    listing of its folder ("." separated keys), or a walk down the folders of "/" separated keys
    (iterative, visiting only those that exist)."""

    def key_of(*parts: str) -> str:
        return "/".join(p for p in (base, *parts) if p)

    def inside(index: tuple[int, ...]) -> bool:
        return all(i < n for i, n in zip(index, grid))

    if keys.ndim == 0:
        if ("c" if keys.prefix else "0") in handle.list_dir(base):  # a file, or what stands there
            yield ()
        return
    if keys.separator == ".":
        for name in handle.list_dir(base):
            # Whatever stands at a chunk key counts (a folder or another non-file too): reading
            # it then says what is wrong, where skipping it would copy fill values in its place.
            if keys.pattern.fullmatch(name) and inside(index := keys.index(name)):
                yield index
        return
    start = ("c",) if keys.prefix else ()
    folders: list[tuple[str, ...]] = [start]
    while folders:
        parts = folders.pop()
        depth = len(parts) - len(start)
        for name in handle.list_dir(key_of(*parts)):
            if not (name.isascii() and name.isdigit()) or int(name) >= grid[depth]:
                continue
            if depth + 1 < keys.ndim:
                folders.append((*parts, name))
                continue
            key = "/".join((*parts, name))
            if keys.pattern.fullmatch(key):
                yield keys.index(key)


def _source_array(node: Array, relative: str) -> SourceArray:
    return SourceArray(
        path=relative,
        shape=node.shape,
        data_type=str(node._core.dtype),  # noqa: SLF001 - the package's own
        itemsize=node.dtype.itemsize,
        fill_value=node.fill_value,
        chunks=node.chunks,
        attributes=dict(node.attrs),
        dimension_names=node.metadata.get("dimension_names") if node.zarr_format == 3 else None,
        read=node.read,
        stored=stored_chunks(node),
        stored_shape=tuple(node._core.chunk_shape),  # noqa: SLF001 - the package's own
    )


def read_zarr(source: StoreLike | Array | Group, path: str) -> SourceTree:
    """A Zarr array or group (v3, or v2) in any store the engine reads, or an opened node."""
    if isinstance(source, (Array, Group)):
        store, path = source.store, join_path(source.path, path)
    else:
        store = as_store(source)
    node = open_node(store, path=path, mode="r")
    root = None
    if isinstance(store, LocalStore):
        root = str(store.root)
    elif isinstance(store, ZarrStoreAdapter) and hasattr(store.store, "root"):
        root = str(store.store.root)
    where = store.handle.describe() + (f" :: /{node.path}" if node.path else "")
    return SourceTree(where, root, list(_zarr_nodes(node, "")))


# Input kinds, tried in order: the first whose test takes the source reads it. Zarr comes last,
# since any path or store may hold Zarr; more specific kinds go before it.
_SOURCE_KINDS: list[tuple[str, Callable[[Any], bool], Callable[[Any, str], SourceTree]]] = [
    ("zarr", lambda source: True, read_zarr),
]


def local_path(source: Any) -> Path | None:
    """A local path or ``file://`` URL as a Path; None for a store or another scheme's URL."""
    if not isinstance(source, (str, os.PathLike)):
        return None
    text = os.fspath(source)
    return None if "://" in text and not text.startswith("file://") else Path(text.removeprefix("file://"))


def _is_model_folder(path: Path) -> bool:
    has_weights = (path / "model.safetensors.index.json").is_file() or (path / "model.safetensors").is_file()
    return path.is_dir() and has_weights and not (path / "zarr.json").exists()


# PyTorch checkpoint conversions (zarr_device.torch.interop): these inputs are not copied node by
# node as Zarr is, but written as a checkpoint (docs/checkpoint-format.md) by the checkpoint
# writer. Tried in order, before _SOURCE_KINDS.
_CHECKPOINT_KINDS: list[tuple[str, Callable[[Path], bool]]] = [
    ("safetensors", lambda path: path.is_file() and path.name.endswith(".safetensors")),
    ("huggingface", _is_model_folder),
    ("torch", lambda path: path.is_file() and path.suffix in (".pt", ".pth", ".bin", ".ckpt")),
]


def checkpoint_kind(source: Any, destination: Any) -> str | None:
    """The checkpoint conversion ``convert`` does from ``source`` to ``destination``: "safetensors",
    "huggingface" or "torch" (into a checkpoint), "to-safetensors" (a checkpoint into a
    ``*.safetensors`` file), or None (Zarr to Zarr)."""
    path = local_path(source)
    kind = next((k for k, takes in _CHECKPOINT_KINDS if takes(path)), None) if path else None
    dest = local_path(destination)
    if dest is not None and dest.name.endswith(".safetensors"):
        if kind is not None:
            raise UsageError(f"{source} is a {kind} file or folder, not a checkpoint to write as safetensors")
        return "to-safetensors"
    return kind


def read_source(source: Any, path: str = "") -> SourceTree:
    return next(reader for _kind, takes, reader in _SOURCE_KINDS if takes(source))(source, path)


# -- the destination ----------------------------------------------------------------------------


def path_inside(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies below it (both resolved by the caller)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_destination(destination: Any, source: SourceTree, overwrite: bool) -> Path:
    """The local folder a conversion of ``source`` writes: never inside the source, nor holding
    it; an existing node only with ``overwrite``."""
    dest = atomic_trees.local_destination(destination)
    if source.local_root is not None:
        real, root = os.path.realpath(dest), os.path.realpath(source.local_root)
        if path_inside(real, root) or path_inside(root, real):
            raise UsageError(f"{dest}: the destination must lie outside the source store {root}, and not hold it")
    atomic_trees.check_replaceable(dest, overwrite)
    return dest
