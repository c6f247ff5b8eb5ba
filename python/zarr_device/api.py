"""Opening, creating, reading and writing Zarr arrays and groups."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal, Union

import numpy as np
import numpy.typing as npt

from zarr_device import _core
from zarr_device.attributes import Attributes
from zarr_device.casting import check_cast, is_python_values
from zarr_device.adapters.base import Like
from zarr_device.devices import DeviceLike
from zarr_device.transfers import host_values, read, write_from_device
from zarr_device.dtypes import float_fill_from_json, float_fill_to_json, to_numpy_dtype, to_zarr_name
from zarr_device.errors import NodeNotFoundError, UsageError
from zarr_device.selection import normalize_selection
from zarr_device.stores import LocalStore, MemoryStore, StoreLike, ZarrStoreAdapter, as_store

__all__ = [
    "Array",
    "Group",
    "open",
    "open_array",
    "open_group",
    "create",
    "create_group",
    "OpenMode",
    "CreateMode",
]

OpenMode = Literal["r", "r+", "a"]
CreateMode = Literal["w", "w-"]
Compressors = Union[None, str, Mapping[str, Any], Sequence[Mapping[str, Any]]]
EngineStore = Union[LocalStore, MemoryStore, ZarrStoreAdapter]


def _join(a: str, b: str) -> str:
    return "/".join(p for p in (a.strip("/"), b.strip("/")) if p)


def _read_json(store: EngineStore, key: str) -> Any | None:
    # Parsed by the engine, with its limits on size and nesting (FormatError naming the key).
    text = _core.read_document(store.handle, key)
    return None if text is None else json.loads(text)


def _write_json(store: EngineStore, key: str, document: Any) -> None:
    try:
        text = json.dumps(document, indent=2, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise UsageError(f"'{key}': metadata must be JSON (no NaN or infinity): {e}") from None
    store.handle.set(key, text.encode())


def _node_path(path: str) -> str:
    """A node path as given ("/a/b/" is "a/b"), checked by the engine's one path rule."""
    if not isinstance(path, str):
        raise UsageError(f"path must be a string, not {path!r}")
    return _core.normalize_node_path(path)


class Array:
    """A Zarr array (v3, or v2 for reading). Reads return NumPy arrays, which hand over to torch,
    JAX or CuPy through DLPack without a copy (``torch.from_dlpack(arr[...])``)."""

    def __init__(self, core: _core.Array, store: EngineStore, *, read_only: bool) -> None:
        self._core = core
        self._store = store
        self._read_only = read_only or store.read_only
        self._dtype = to_numpy_dtype(core.dtype)
        self._attrs: Attributes | None = None

    # -- description -------------------------------------------------------------------------
    @property
    def store(self) -> EngineStore:
        return self._store

    @property
    def path(self) -> str:
        return str(self._core.path)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._core.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._dtype

    @property
    def nbytes(self) -> int:
        return self.size * self._dtype.itemsize

    @property
    def chunks(self) -> tuple[int, ...]:
        """The shape of the chunks a read decodes (the inner chunks when sharded)."""
        return tuple(self._core.inner_chunk_shape)

    @property
    def shards(self) -> tuple[int, ...] | None:
        """The shape of the shards, or None for an unsharded array."""
        sharded = any(c.get("name") == "sharding_indexed" for c in self.codecs)
        return tuple(self._core.chunk_shape) if sharded else None

    @property
    def zarr_format(self) -> int:
        return int(self._core.zarr_format)

    @property
    def fill_value(self) -> Any:
        return json.loads(self._core.fill_value_json)

    @property
    def attrs(self) -> Attributes:
        """The array's attributes, a mapping that writes every change through to the store
        (``arr.attrs["units"] = "m"``); see :class:`~zarr_device.attributes.Attributes`."""
        if self._attrs is None:
            self._attrs = Attributes(
                self._store.handle,
                self.path,
                json.loads(self._core.attributes_json),
                read_only=self._read_only,
                what=f"array '{self.path}'",
                on_change=self._reopen,
            )
        return self._attrs

    def _reopen(self) -> None:
        # The metadata document changed: the engine's view of it (attributes, document) follows.
        self._core = _core.Array.open(self._store.handle, self.path)

    @property
    def codecs(self) -> list[dict[str, Any]]:
        """The codec chain, every default filled in."""
        return list(json.loads(self._core.codecs_json))

    @property
    def metadata(self) -> dict[str, Any]:
        """The metadata document as stored (zarr.json, or .zarray for v2)."""
        return dict(json.loads(self._core.document_json))

    @property
    def read_only(self) -> bool:
        return self._read_only

    def __repr__(self) -> str:
        return (
            f"<zarr_device.Array {self.path or '/'!r} shape={self.shape} dtype={self.dtype} "
            f"chunks={self.chunks}{f' shards={self.shards}' if self.shards else ''}>"
        )

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    # -- data -----------------------------------------------------------------------------------
    def read(
        self,
        selection: Any = Ellipsis,
        *,
        out: Any = None,
        like: Like | None = None,
        device: DeviceLike = None,
    ) -> Any:
        """Reads a basic selection (ints, slices with step >= 1, Ellipsis).

        ``device``: where the result lives. None or "cpu": host memory. "cuda", "cuda:N", an int
        N or ``torch.device("cuda", N)``: CUDA device N, which the engine fills directly
        (decoding on the GPU where it can). Other torch devices ("mps", "xpu", "cuda" with a ROCm
        build of torch): the engine fills pinned host memory and torch copies it over without
        blocking. Without ``device``, a read lands where ``out`` lives.

        ``like``: the kind of result. On the CPU: "numpy" (the default), "torch" (which also
        serves bfloat16 and float8 to torch), "mlx" (no float8 or complex128: MLX has none) or
        "tensorflow". On a CUDA device: "torch", "cupy" (no bfloat16 or float8: CuPy has no such
        types), "jax", "tensorflow" (no float8), or None, the default: a framework-neutral array
        that hands its memory over through DLPack (``torch.from_dlpack``, ``cupy.from_dlpack``,
        ``jax.dlpack.from_dlpack``) without a copy. On other torch devices: "torch".

        ``out``: fills this array instead of allocating one: a C-contiguous NumPy array, torch
        tensor or MLX array on the CPU, a C-contiguous torch tensor or CuPy array on a CUDA device,
        a torch tensor on another torch device, or a ``tf.Variable`` (assigned the result); it
        must have the result's shape and dtype. Returns it.

        Chunks are fetched and decoded in parallel straight into the result. Raises UsageError
        for a bad ``like``/``device``/``out`` combination (or a missing framework, naming the
        package to install) and DeviceError when the device does not exist.
        """
        sel = normalize_selection(selection, self.shape)
        return read(self._core, sel.slices, sel.shape, device, like, out)

    def write(self, selection: Any, values: Any) -> None:
        """Writes values (broadcast to the selection's shape) into a basic selection. Chunks that
        are only partly written are read, updated and written back; each chunk is replaced
        atomically. ``values``: anything NumPy takes, or a torch tensor, CuPy or JAX array on any
        device. From a CUDA device, chunks the selection covers whole are laid out (and zstd
        chunks compressed: ``gpu_encode``) on the GPU and cross to the host once, encoded; other
        devices' values are copied to the host once, then encoded on CPU threads."""
        if self._read_only:
            raise UsageError(f"array '{self.path}' is open read-only (open it with mode='r+')")
        sel = normalize_selection(selection, self.shape)
        what = f"array '{self.path}'"
        if write_from_device(self._core, list(sel.slices), sel.shape, values, what):
            return
        python_values = is_python_values(values)
        try:
            array = host_values(values)
        except (ValueError, TypeError, OverflowError) as e:
            raise UsageError(f"{what}: values cannot be written: {e}") from None
        if array.dtype != self._dtype:
            check_cast(
                array.dtype,
                self._dtype,
                python_values=python_values,
                what=what,
                bounds=lambda: (array.min(), array.max()) if array.size else (0, 0),
            )
            array = array.astype(self._dtype)
        try:
            array = np.broadcast_to(array, sel.shape)
        except ValueError:
            raise UsageError(
                f"values of shape {np.shape(values)} do not fit a selection of shape {sel.shape}"
            ) from None
        array = np.ascontiguousarray(array.reshape(sel.full_shape))
        self._core.write(list(sel.slices), array.reshape(-1).view(np.uint8))

    def __getitem__(self, selection: Any) -> Any:
        return self.read(selection)

    def __setitem__(self, selection: Any, values: Any) -> None:
        self.write(selection, values)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> npt.NDArray[Any]:
        data: npt.NDArray[Any] = self.read()
        return data if dtype is None else data.astype(dtype)

    def update_attributes(self, attributes: Mapping[str, Any]) -> None:
        """Merges ``attributes`` into the stored ones in one atomic rewrite (``attrs.update``)."""
        self.attrs.update(attributes)


class Group(Mapping[str, Union["Array", "Group"]]):
    """A Zarr group: a mapping of names to arrays and groups."""

    def __init__(
        self, store: EngineStore, path: str, document: dict[str, Any], *, read_only: bool
    ) -> None:
        self._store = store
        self._path = path
        self._document = document
        self._read_only = read_only or store.read_only
        self._attrs = Attributes(
            store.handle,
            path,
            document.get("attributes", {}),
            read_only=self._read_only,
            what=f"group '{path}'",
        )

    @property
    def store(self) -> EngineStore:
        return self._store

    @property
    def path(self) -> str:
        return self._path

    @property
    def zarr_format(self) -> int:
        return int(self._document.get("zarr_format", 3))

    @property
    def attrs(self) -> Attributes:
        """The group's attributes, a mapping that writes every change through to the store."""
        return self._attrs

    @property
    def read_only(self) -> bool:
        return self._read_only

    def __repr__(self) -> str:
        return f"<zarr_device.Group {self.path or '/'!r}>"

    def __getitem__(self, name: str) -> Array | Group:
        if not isinstance(name, str):
            raise KeyError(name)
        try:
            return open(self._store, path=_join(self._path, _node_path(name)), mode="r" if self._read_only else "r+")
        except NodeNotFoundError:
            raise KeyError(name) from None

    def __iter__(self) -> Iterator[str]:
        for name in self._store.handle.list_dir(self._path):
            child = _join(self._path, name)
            if any(
                self._store.handle.exists(_join(child, marker))
                for marker in ("zarr.json", ".zarray", ".zgroup")
            ):
                yield name

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def read(
        self, *, device: DeviceLike = None, like: Like | None = None, out: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Reads every array of the group and of its subgroups in one call
        (:func:`zarr_device.read_many`); returns ``{"sub/name": result}``, paths relative to the
        group."""
        from zarr_device.many import read_many

        return read_many(self.all_arrays(), device=device, like=like, out=out)

    def all_arrays(self) -> dict[str, Array]:
        """Every array of the group and of its subgroups, by path relative to the group."""
        found: dict[str, Array] = {}
        for name, node in self.members().items():
            if isinstance(node, Array):
                found[name] = node
            else:
                found.update({f"{name}/{sub}": a for sub, a in node.all_arrays().items()})
        return found

    def members(self) -> dict[str, Array | Group]:
        return {name: self[name] for name in self}

    def arrays(self) -> dict[str, Array]:
        return {k: v for k, v in self.members().items() if isinstance(v, Array)}

    def groups(self) -> dict[str, Group]:
        return {k: v for k, v in self.members().items() if isinstance(v, Group)}

    def create_array(self, name: str, **kwargs: Any) -> Array:
        """Creates an array inside the group; takes :func:`create`'s keyword arguments."""
        if self._read_only:
            raise UsageError(f"group '{self.path}' is open read-only")
        return create(self._store, path=_join(self._path, name), **kwargs)

    def create_group(
        self, name: str, *, attributes: Mapping[str, Any] | None = None, mode: CreateMode = "w-"
    ) -> Group:
        if self._read_only:
            raise UsageError(f"group '{self.path}' is open read-only")
        return create_group(self._store, path=_join(self._path, name), attributes=attributes, mode=mode)


def open(  # noqa: A001 - mirrors zarr.open
    store: StoreLike, *, path: str = "", mode: OpenMode = "r"
) -> Array | Group:
    """Opens the array or group at ``path`` in ``store`` (a directory path, a zarr_device store or
    a zarr-python store). ``mode``: "r" read-only, "r+"/"a" read and write.
    Raises NodeNotFoundError when nothing is there."""
    if mode not in ("r", "r+", "a"):
        raise UsageError(f"mode {mode!r} is not one of 'r', 'r+', 'a' (use create() to make arrays)")
    engine_store = as_store(store)
    path = _node_path(path)
    read_only = mode == "r"
    if not read_only and engine_store.read_only:
        raise UsageError(
            f"{engine_store.handle.describe()} is a read-only store: open its nodes with mode='r'"
        )
    kind = _core.node_kind(engine_store.handle, path)
    if kind == "group":
        document = _read_json(engine_store, _join(path, "zarr.json"))
        if document is None:  # Zarr v2
            attrs = _read_json(engine_store, _join(path, ".zattrs")) or {}
            document = {"zarr_format": 2, "attributes": attrs}
        return Group(engine_store, path, document, read_only=read_only)
    if kind is None and not engine_store.handle.exists(_join(path, "zarr.json")):
        raise NodeNotFoundError(
            f"no array or group at '{path}' in {engine_store.handle.describe()} "
            "(no zarr.json, .zarray or .zgroup)"
        )
    # An array, or a zarr.json that is neither: the engine says what is wrong with it.
    return Array(_core.Array.open(engine_store.handle, path), engine_store, read_only=read_only)


def open_array(store: StoreLike, *, path: str = "", mode: OpenMode = "r") -> Array:
    """Opens the array at ``path``; NodeNotFoundError when there is none (or a group)."""
    node = open(store, path=path, mode=mode)
    if not isinstance(node, Array):
        raise NodeNotFoundError(f"'{path}' in {node.store.handle.describe()} is a group, not an array")
    return node


def open_group(store: StoreLike, *, path: str = "", mode: OpenMode = "r") -> Group:
    """Opens the group at ``path``; NodeNotFoundError when there is none (or an array)."""
    node = open(store, path=path, mode=mode)
    if not isinstance(node, Group):
        raise NodeNotFoundError(f"'{path}' in {node.store.handle.describe()} is an array, not a group")
    return node


def _fill_value_json(value: Any, dtype: np.dtype[Any]) -> Any:
    if dtype.kind == "c" or isinstance(value, complex):
        c = complex(0 if value is None else value)
        half = np.dtype(f"f{dtype.itemsize // 2}") if dtype.kind == "c" else np.dtype(np.float64)
        return [float_fill_to_json(c.real, half), float_fill_to_json(c.imag, half)]
    if value is None:
        return False if dtype.kind == "b" else (0.0 if dtype.kind in "fV" else 0)
    if dtype.kind == "b":
        return bool(value)
    if dtype.kind in "iu":
        return int(value)
    # A NaN keeps its payload (as hex), as tensorstore and zarr-python (zarr_dtypes) write it.
    return float_fill_to_json(float_fill_from_json(value, dtype) if isinstance(value, str) else value, dtype)


def _compressor_codecs(compressors: Compressors, itemsize: int) -> list[dict[str, Any]]:
    if compressors is None:
        return []
    if isinstance(compressors, str):
        presets: dict[str, dict[str, Any]] = {
            "zstd": {"name": "zstd", "configuration": {"level": 0, "checksum": False}},
            "gzip": {"name": "gzip", "configuration": {"level": 5}},
            "blosc": {
                "name": "blosc",
                "configuration": {
                    "cname": "zstd",
                    "clevel": 5,
                    "shuffle": "bitshuffle" if itemsize == 1 else "shuffle",
                    "typesize": itemsize,
                    "blocksize": 0,
                },
            },
            "crc32c": {"name": "crc32c"},
        }
        if compressors not in presets:
            raise UsageError(f"unknown compressor {compressors!r}: use one of {sorted(presets)}")
        return [presets[compressors]]
    if isinstance(compressors, Mapping):
        return [dict(compressors)]
    return [dict(c) for c in compressors]


def _default_chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    # Halve the largest dimension until a chunk is at most 1 MiB: a size that keeps many chunks in
    # flight without making partial reads expensive.
    chunks = [max(1, s) for s in shape]
    while math.prod(chunks) * itemsize > (1 << 20) and max(chunks) > 1:
        i = chunks.index(max(chunks))
        chunks[i] = (chunks[i] + 1) // 2
    return tuple(chunks)


def create(
    store: StoreLike,
    *,
    path: str = "",
    shape: Sequence[int] | int,
    dtype: Any,
    chunks: Sequence[int] | None = None,
    shards: Sequence[int] | None = None,
    compressors: Compressors = "zstd",
    codecs: Sequence[Mapping[str, Any]] | None = None,
    fill_value: Any = None,
    order: Literal["C", "F"] = "C",
    dimension_names: Sequence[str | None] | None = None,
    attributes: Mapping[str, Any] | None = None,
    chunk_key_encoding: Mapping[str, Any] | None = None,
    mode: CreateMode = "w-",
) -> Array:
    """Creates a Zarr v3 array and returns it open for reading and writing.

    ``dtype``: a NumPy dtype or a Zarr name ("bfloat16", "float8_e4m3fn", ...); a big-endian NumPy
    dtype stores big-endian chunks. ``chunks``: the chunk shape (inner chunks when ``shards`` is
    given). ``compressors``: None, "zstd", "gzip", "blosc", or codec dicts. ``codecs``: the whole
    v3 codec chain, overriding ``compressors``, ``shards`` and ``order``. ``mode``: "w-" fails
    when a node exists at ``path``; "w" replaces it.
    """
    if mode not in ("w", "w-"):
        raise UsageError(f"mode {mode!r} is not 'w' or 'w-'")
    engine_store = as_store(store)
    shape_t = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
    name = to_zarr_name(dtype)
    np_dtype = to_numpy_dtype(name)
    big_endian = not isinstance(dtype, str) and np.dtype(dtype).byteorder == ">"
    chunks_t = tuple(int(c) for c in chunks) if chunks is not None else _default_chunks(shape_t, np_dtype.itemsize)
    if codecs is None:
        chain: list[dict[str, Any]] = []
        if order == "F" and len(shape_t) > 1:
            chain.append({"name": "transpose", "configuration": {"order": list(range(len(shape_t)))[::-1]}})
        elif order not in ("C", "F"):
            raise UsageError(f"order {order!r} is not 'C' or 'F'")
        chain.append({"name": "bytes", "configuration": {"endian": "big" if big_endian else "little"}})
        chain += _compressor_codecs(compressors, np_dtype.itemsize)
        if shards is not None:
            chain = [
                {
                    "name": "sharding_indexed",
                    "configuration": {
                        "chunk_shape": list(chunks_t),
                        "codecs": chain,
                        "index_codecs": [
                            {"name": "bytes", "configuration": {"endian": "little"}},
                            {"name": "crc32c"},
                        ],
                        "index_location": "end",
                    },
                }
            ]
    else:
        chain = [dict(c) for c in codecs]
    grid = tuple(int(s) for s in shards) if shards is not None and codecs is None else chunks_t
    document: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape_t),
        "data_type": name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(grid)}},
        "chunk_key_encoding": dict(chunk_key_encoding)
        if chunk_key_encoding is not None
        else {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": _fill_value_json(fill_value, np_dtype),
        "codecs": chain,
        "attributes": dict(attributes or {}),
        "storage_transformers": [],
    }
    if dimension_names is not None:
        document["dimension_names"] = list(dimension_names)
    try:
        text = json.dumps(document, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise UsageError(f"the array's metadata must be JSON (attributes included): {e}") from None
    core = _core.Array.create(engine_store.handle, _node_path(path), text, mode == "w")
    return Array(core, engine_store, read_only=False)


def create_group(
    store: StoreLike,
    *,
    path: str = "",
    attributes: Mapping[str, Any] | None = None,
    mode: CreateMode = "w-",
) -> Group:
    """Creates a Zarr v3 group. ``mode``: "w-" fails when a node exists at ``path``; "w" replaces it."""
    engine_store = as_store(store)
    path = _node_path(path)
    exists = any(engine_store.handle.exists(_join(path, m)) for m in ("zarr.json", ".zarray", ".zgroup"))
    if exists and mode == "w-":
        raise UsageError(f"a node already exists at '{path}' (use mode='w' to replace it)")
    if exists:
        # Only Zarr data goes: this node and the nodes below it, never other files.
        _core.erase_node(engine_store.handle, path)
    document = {"zarr_format": 3, "node_type": "group", "attributes": dict(attributes or {})}
    _write_json(engine_store, _join(path, "zarr.json"), document)
    return Group(engine_store, path, document, read_only=False)
