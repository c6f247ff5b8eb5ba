"""Zarr arrays: description, reads (to any device and framework, :mod:`zarr_device.io.transfers`)
and writes."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

import zarr_device._core as _core
from zarr_device.io.adapters.base import Like
from zarr_device.core.attributes import Attributes
from zarr_device.basics.casting import check_cast, is_python_values, native_byte_order
from zarr_device.io.devices import DeviceLike
from zarr_device.basics.numpy_dtypes import to_numpy_dtype
from zarr_device.errors import UsageError
from zarr_device.core.nodes import EngineStore
from zarr_device.core.selection import normalize_selection
from zarr_device.io.transfers import host_values, read, write_from_device

__all__ = ["Array"]


class Array:
    """A Zarr array (v3, or v2 for reading). Reads return NumPy arrays, which hand over to torch,
    JAX or CuPy through DLPack without a copy (``torch.from_dlpack(arr[...])``)."""

    def __init__(self, core: _core.Array, store: EngineStore, *, read_only: bool) -> None:
        self._core = core
        self._store = store
        self._read_only = read_only or store.read_only
        self._dtype = to_numpy_dtype(core.dtype)
        self._attrs: Attributes | None = None
        self._shards = self._shards_of(core)

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
        return self._shards

    @staticmethod
    def _shards_of(core: _core.Array) -> tuple[int, ...] | None:
        # Found once per opening: the plug-in asks for every read it serves.
        return tuple(core.chunk_shape) if core.is_sharded else None

    @property
    def zarr_format(self) -> int:
        return int(self._core.zarr_format)

    @property
    def fill_value(self) -> Any:
        return json.loads(self._core.fill_value_json)

    @property
    def attrs(self) -> Attributes:
        """The array's attributes, a mapping that writes every change through to the store
        (``arr.attrs["units"] = "m"``); see :class:`~zarr_device.core.attributes.Attributes`."""
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
        self._shards = self._shards_of(self._core)

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

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as its store and path, opened again where unpickled (a dask worker, a
        multiprocessing pool): a LocalStore by its directory, a zarr-python store as that store
        pickles; a MemoryStore cannot leave its process (UsageError)."""
        return (_reopened, (self._store, self.path, self._read_only))

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
        non_blocking: bool = False,
    ) -> Any:
        """Reads a basic selection (ints, slices with step >= 1, Ellipsis).

        ``device``: where the result lives. None or "cpu": host memory. "cuda", "cuda:N", an int
        N or ``torch.device("cuda", N)``: CUDA device N, which the engine fills directly
        (decoding on the GPU where it can). Other torch devices ("mps", "xpu", "cuda" with a ROCm
        build of torch): the engine fills a pinned host staging of at most ``staging_bytes`` and
        torch copies it over, half of it at a time for a larger read; the read returns once the
        copies have finished. Without ``device``, a read lands where ``out`` lives.

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

        ``non_blocking``: on a CUDA device, into torch or CuPy, return once the work is queued
        instead of waiting for the GPU's decoders: the result is ready in stream order on the
        framework's current stream, as after ``tensor.to("cuda", non_blocking=True)``, and the host
        goes on (to the next read, which then overlaps this one). Chunks are still checked on the
        host first (crc32c, framing); a chunk the GPU then fails to decode is reported late, by
        :func:`zarr_device.synchronize` or the next read onto the device, as a CodecError naming
        the array and the chunk. Other reads wait as always.

        Chunks are fetched and decoded in parallel straight into the result. Raises UsageError
        for a bad ``like``/``device``/``out`` combination (or a missing framework, naming the
        package to install) and DeviceError when the device does not exist.
        """
        sel = normalize_selection(selection, self.shape)
        return read(self._core, sel.slices, sel.shape, device, like, out, non_blocking=non_blocking)

    def write(self, selection: Any, values: Any) -> None:
        """Writes values (broadcast to the selection's shape) into a basic selection. Chunks that
        are only partly written are read, updated and written back; each chunk is replaced
        atomically. ``values``: anything NumPy takes, or a torch tensor, CuPy or JAX array on any
        device. From a CUDA device, chunks the selection covers whole are laid out (and zstd
        chunks compressed, except byte-shuffled ones by default: ``gpu_encode``) on the GPU and
        cross to the host once; other devices' values are copied to the host once, then encoded
        on CPU threads."""
        if self._read_only:
            raise UsageError(f"array '{self.path}' is open read-only (open it with mode='r+')")
        sel = normalize_selection(selection, self.shape)
        what = f"array '{self.path}'"
        if write_from_device(self._core, list(sel.slices), sel.shape, values, what):
            return
        python_values = is_python_values(values)
        try:
            # In this machine's byte order first: astype keeps generic datetime64's foreign bytes.
            array = native_byte_order(host_values(values))
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


def _reopened(store: EngineStore, path: str, read_only: bool) -> Array:
    """An array unpickled: opened again in its store."""
    return Array(_core.Array.open(store.handle, path), store, read_only=read_only)
