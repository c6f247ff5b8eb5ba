"""The codec pipeline zarr-python uses once :func:`zarr_device.enable` is on: each batch of chunks
zarr-python asks for is one call into the engine.

zarr-python describes a read as one item per chunk (the chunk's store path, its spec, which of its
elements, where they go in the output). The pipeline finds the array the chunk keys belong to,
opens it once in the engine on the same store, and reads the batch in one engine call: straight
into the output when the batch is one box of the array (basic, block and orthogonal selections of
slices and integers), else the box around each chunk's elements, all chunks in one parallel pass,
scattered into the output with the chunk selections zarr-python gave (integer arrays, masks,
coordinates). Writes go through the engine's ``Array.write`` (read-modify-write of partial chunks,
atomic replacement, chunks left all fill value removed).

An array the engine does not serve (a data type or codec it lacks, Zarr v2 writes, ...) is read
and written by zarr-python's own ``BatchedCodecPipeline``, with one warning per array naming the
reason; with ``strict`` (``zarr.config`` key ``codec_pipeline.strict``) that is a FormatError.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from zarr.abc.codec import Codec, CodecPipeline
from zarr.codecs._v2 import V2Codec
from zarr.core.buffer import cpu as cpu_buffer
from zarr.core.codec_pipeline import BatchedCodecPipeline, fill_value_or_default
from zarr.core.config import config
from zarr.registry import register_pipeline
from zarr.storage import StorePath

from zarr_device.core import many
from zarr_device.io.adapters import Like, adapter_of
from zarr_device.core.array import Array
from zarr_device.io.devices import DeviceSpec
from zarr_device.errors import FormatError, UsageError, ZarrDeviceError
from zarr_device.basics.casting import native_byte_order
from zarr_device.zarr_plugin.buffers import assign, copy_from_host, host_view, select, working_array
from zarr_device.zarr_plugin.locate import EngineArrays, key_layout, split_chunk_key, split_chunk_keys, stand_in_reason
from zarr_device.zarr_plugin import box_reads, box_writes, coordinate_reads
from zarr_device.zarr_plugin.box_reads import refuses_missing_chunks
from zarr_device.zarr_plugin.regions import ChunkPart, Region, as_slices, chunk_part, single_box, tiling_part
from zarr_device.zarr_plugin.fallback_limits import BoundedGetter, chunk_limit, decoded_size_guard
from zarr_device.zarr_plugin.support import native_dtype, unsupported_reason

if TYPE_CHECKING:
    from zarr.abc.store import ByteGetter, ByteSetter, Store
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.chunk_grids import ChunkGrid
    from zarr.core.indexing import SelectorTuple
    from zarr.core.metadata import ArrayMetadata

__all__ = ["DevicePipeline", "FallbackWarning", "STRICT_KEY"]

#: The zarr.config key that turns falling back to zarr-python's codecs into an error.
STRICT_KEY = "codec_pipeline.strict"

BatchItem = tuple[Any, "ArraySpec", Any, Any, bool]


class FallbackWarning(UserWarning):
    """An array is read or written by zarr-python's codecs, not by the engine (the message says
    why). Raised once per array opened."""


def _codecs(metadata: ArrayMetadata) -> list[Codec]:
    if metadata.zarr_format == 2:
        return [V2Codec(filters=metadata.filters, compressor=metadata.compressor)]
    return list(metadata.codecs)


def _on_host(batch: Sequence[BatchItem]) -> list[BatchItem]:
    """The batch with every chunk spec's buffers in host memory (NumPy): zarr-python's codecs
    then never see a tensor or a device array."""
    host = cpu_buffer.buffer_prototype
    return [
        (getter, spec if spec.prototype == host else replace(spec, prototype=host), *rest)
        for getter, spec, *rest in batch
    ]


class _Located:
    """A batch resolved against the engine: the array and what each chunk asks of it."""

    def __init__(self, array: Array, parts: list[ChunkPart]) -> None:
        self.array = array
        self.parts = parts


class DevicePipeline(CodecPipeline):
    """zarr-python's codec pipeline, served by the zarr-device engine (see the module's notes).
    Built per array by zarr-python (:meth:`from_array_metadata_and_store`)."""

    def __init__(self, metadata: ArrayMetadata, store: Store | None, *, strict: bool) -> None:
        self.metadata = metadata
        self.store = store
        self.strict = strict
        self.fallback = BatchedCodecPipeline.from_codecs(_codecs(metadata))
        self.reason = unsupported_reason(metadata)
        self._guard = decoded_size_guard(metadata) if self.reason is not None else None
        self._itemsize = _fixed_itemsize(metadata) if self._guard is not None else 0
        self._layout = key_layout(metadata)
        self._arrays = EngineArrays()
        self._warned = False
        self._lock = threading.Lock()
        if self.reason is not None and strict:
            raise FormatError(f"zarr_device cannot serve the array {self._describe()}: {self.reason}")

    def __getstate__(self) -> dict[str, Any]:
        # zarr-python pickles an array with its pipeline (dask sends arrays to its workers so):
        # what it was built from travels, and it is built again there, with engine handles of
        # its own.
        return {"metadata": self.metadata, "store": self.store, "strict": self.strict}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["metadata"], state["store"], strict=state["strict"])  # type: ignore[misc]

    # zarr-python's arrays compare (and so do a group's members, and an array with its pickled
    # copy) by their fields, the pipeline among them: pipelines built from the same things are
    # equal, as zarr-python's own (a dataclass) are. The engine handles are caches, not identity.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DevicePipeline):
            return NotImplemented
        return (self.metadata, self.store, self.strict) == (other.metadata, other.store, other.strict)

    def __hash__(self) -> int:
        return hash((tuple(self.metadata.shape), self.strict))

    def _describe(self, path: str | None = None) -> str:
        where = f"'{path or '/'}' in {self.store}" if path is not None else f"in {self.store}"
        return f"{where} (shape {tuple(self.metadata.shape)}, zarr_format {self.metadata.zarr_format})"

    # -- construction, as zarr-python asks for it ------------------------------------------------
    @classmethod
    def from_codecs(cls, codecs: Iterable[Codec]) -> BatchedCodecPipeline:  # type: ignore[override]
        # Inner pipelines (a shard's chunks) and arrays built without a store: zarr-python's own.
        return BatchedCodecPipeline.from_codecs(codecs)

    @classmethod
    def from_array_metadata_and_store(cls, array_metadata: ArrayMetadata, store: Store) -> DevicePipeline:
        return cls(array_metadata, store, strict=bool(config.get(STRICT_KEY, False)))

    def evolve_from_array_spec(self, array_spec: ArraySpec) -> DevicePipeline:
        return self

    @property
    def supports_partial_decode(self) -> bool:
        return False

    @property
    def supports_partial_encode(self) -> bool:
        return False

    def __iter__(self) -> Iterator[Codec]:
        return iter(self.fallback)

    def validate(self, *, shape: tuple[int, ...], dtype: Any, chunk_grid: ChunkGrid) -> None:
        self.fallback.validate(shape=shape, dtype=dtype, chunk_grid=chunk_grid)

    def compute_encoded_size(self, byte_length: int, array_spec: ArraySpec) -> int:
        return self.fallback.compute_encoded_size(byte_length, array_spec)

    async def decode(self, chunk_bytes_and_specs: Iterable[tuple[Buffer | None, ArraySpec]]) -> Iterable[NDBuffer | None]:
        return await self.fallback.decode(chunk_bytes_and_specs)

    async def encode(self, chunk_arrays_and_specs: Iterable[tuple[NDBuffer | None, ArraySpec]]) -> Iterable[Buffer | None]:
        return await self.fallback.encode(chunk_arrays_and_specs)

    # -- reads and writes -------------------------------------------------------------------------
    async def read(  # type: ignore[override]  # zarr-python 3.1 declares None, 3.2+ the results
        self,
        batch_info: Iterable[tuple[ByteGetter, ArraySpec, SelectorTuple, SelectorTuple, bool]],
        out: NDBuffer,
        drop_axes: tuple[int, ...] = (),
    ) -> tuple[dict[str, str], ...]:
        """Reads the batch into ``out``; returns one result per chunk, as zarr-python 3.2+ asks
        (3.1 ignores it): whether its key is stored (``{"status": "present"}`` or ``"missing"``).
        The engine fills missing chunks itself, so the statuses are looked up in the store only
        where an array's config makes zarr-python read them (``read_missing_chunks=False``);
        elsewhere every chunk reads as "present", which zarr-python then never looks at."""
        batch: list[BatchItem] = list(batch_info)
        if not batch:
            return ()
        # The engine (and stores it calls back into zarr-python's event loop for) runs off the loop.
        if await asyncio.to_thread(self._read_engine, batch, out, drop_axes):
            if refuses_missing_chunks(batch[0][1].config):  # the array's config: every chunk shares it
                return tuple([{"status": "present" if await item[0].exists() else "missing"} for item in batch])
            return _all_present(len(batch))
        host, copied = host_view(out)
        if self._guard is not None and self._itemsize:  # bombs refused before zarr-python decodes
            batch = [
                (BoundedGetter(getter, self._guard, chunk_limit(tuple(spec.shape), self._itemsize)), spec, *rest)
                for getter, spec, *rest in batch
            ]
        fallback: Any = self.fallback  # returns the results from zarr-python 3.2 on, None before
        results = await fallback.read(_on_host(batch), host, drop_axes)
        if copied:
            copy_from_host(out, host)
        return tuple(results) if results is not None else _all_present(len(batch))

    async def write(
        self,
        batch_info: Iterable[tuple[ByteSetter, ArraySpec, SelectorTuple, SelectorTuple, bool]],
        value: NDBuffer,
        drop_axes: tuple[int, ...] = (),
    ) -> None:
        batch: list[BatchItem] = list(batch_info)
        if not batch:
            return
        if not await asyncio.to_thread(self._write_engine, batch, value, drop_axes):
            host, _ = host_view(value)
            await self.fallback.write(_on_host(batch), host, drop_axes)
            return
        if batch[0][1].config.write_empty_chunks:
            await self._store_fill_chunks(batch)

    # -- the engine's side --------------------------------------------------------------------------
    def _fall_back(self, reason: str, batch: Sequence[BatchItem]) -> bool:
        """Records that zarr-python's codecs serve this call; warns once per array (or raises,
        when strict). Returns False, for the caller to return."""
        path = self._path_of(batch[0][0])
        if self.strict:
            raise FormatError(f"zarr_device cannot serve the array {self._describe(path)}: {reason}")
        with self._lock:
            warned, self._warned = self._warned, True
        if not warned:
            warnings.warn(
                f"zarr_device: zarr-python's codecs, not the engine, serve the array {self._describe(path)}: {reason}",
                FallbackWarning,
                stacklevel=2,
            )
        return False

    def _path_of(self, getter: Any) -> str | None:
        """The array's path, as well as a chunk's store path tells it (for messages)."""
        key = getattr(getter, "path", None)
        if not isinstance(key, str):
            return None
        split = None if self._layout is None else split_chunk_key(self._layout, self.metadata, key)
        return key if split is None else split[0]

    def _locate(self, batch: Sequence[BatchItem], out_shape: tuple[int, ...] | None = None) -> _Located | str:
        """The engine's array for a batch, or why the batch cannot go to the engine. ``out_shape``:
        the shape of what the batch reads into or writes from, when no dimension is dropped (a
        batch of plain slices then becomes one part at once)."""
        if self._layout is None:
            return "chunk key encoding not known to zarr_device"
        getters = [item[0] for item in batch]
        for getter in getters:
            if not isinstance(getter, StorePath):
                return f"chunks are not in a store ({type(getter).__name__})"
        store: Any = getters[0].store
        split_all = None
        if all(getter.store is store for getter in getters):
            split_all = split_chunk_keys(self._layout, self.metadata, [getter.path for getter in getters])
        if split_all is not None:
            prefix, coords = split_all
        else:  # one at a time, to say which key is not the array's
            found = self._split_one_by_one(getters)
            if isinstance(found, str):
                return found
            store, prefix, coords = found
        grid = _chunk_grid(self.metadata)
        whole = None
        if out_shape is not None:
            whole = tiling_part(coords, grid, [(item[2], item[3]) for item in batch], out_shape)
        parts = [] if whole is None else [whole]
        if whole is None:  # a part per chunk: index arrays, steps, integers, dropped dimensions
            for chunk, (_, spec, chunk_selection, out_selection, _) in zip(coords, batch):
                origin = tuple(c * g for c, g in zip(chunk, grid))
                part = chunk_part(origin, spec.shape, chunk_selection, out_selection)
                if part is not None:
                    parts.append(part)
        array = self._engine_array(store, prefix, [part.region for part in parts])
        return array if isinstance(array, str) else _Located(array, parts)

    def _engine_array(self, store: Any, prefix: str, regions: Sequence[Region]) -> Array | str:
        """The engine's array at ``prefix`` in ``store``, holding every region with zarr-python's
        chunk grid, or why there is none."""
        stand_in = stand_in_reason(store)
        if stand_in is not None:
            return stand_in
        grid = _chunk_grid(self.metadata)
        # The engine's view of the stored metadata is read again when it does not hold the regions
        # (zarr-python resized the array since, say).
        try:
            array = self._arrays.get(store, prefix)
            if not _serves(array, grid, regions):
                array = self._arrays.get(store, prefix, reopen=True)
        except ZarrDeviceError as e:
            return str(e)
        if not _serves(array, grid, regions):
            return (
                f"the metadata stored at '{prefix}' (shape {array.shape}, chunks {array.shards or array.chunks}) "
                f"does not hold this handle's (shape {tuple(self.metadata.shape)}, chunks {grid})"
            )
        return array

    def _split_one_by_one(self, getters: Sequence[StorePath]) -> tuple[Any, str, list[tuple[int, ...]]] | str:
        """The store, array path and chunk coordinates of a batch's keys, or what is wrong."""
        assert self._layout is not None
        store: Any = None
        prefix: str | None = None
        coords: list[tuple[int, ...]] = []
        for getter in getters:
            split = split_chunk_key(self._layout, self.metadata, getter.path)
            if split is None:
                return f"'{getter.path}' is not one of the array's chunk keys"
            if prefix is None:
                store, prefix = getter.store, split[0]
            elif getter.store is not store or split[0] != prefix:
                return "one batch holds chunks of two arrays"
            coords.append(split[1])
        assert prefix is not None
        return store, prefix, coords

    def _read_engine(self, batch: Sequence[BatchItem], out: NDBuffer, drop_axes: tuple[int, ...]) -> bool:
        """Reads a batch through the engine into ``out``; False when zarr-python's codecs must."""
        if self.reason is not None:
            return self._fall_back(self.reason, batch)
        located = self._locate(batch, None if drop_axes else tuple(out.shape))
        if isinstance(located, str):
            return self._fall_back(located, batch)
        array, parts = located.array, located.parts
        box = single_box(parts, tuple(out.shape)) if not drop_axes else None
        if box is not None:
            _read_into(array, box, out)
            return True
        target = working_array(out)
        where, like = _target_of(target)
        results = many.read_many(
            {str(i): (array, as_slices(part.region)) for i, part in enumerate(parts)}, device=where, like=like
        )
        for i, part in enumerate(parts):
            values = select(results[str(i)], part.local)
            if drop_axes:
                values = values.reshape(tuple(n for d, n in enumerate(values.shape) if d not in drop_axes))
            assign(target, part.out_selection, values)
        return True

    def read_box(self, store: Any, path: str, box: tuple[int | slice, ...], region: Region, out: NDBuffer) -> bool:
        """Reads one box of the array (zarr-python's selection, without its batch of chunks: see
        :mod:`box_reads`) into ``out``; False when the batch path must serve the read (an array
        zarr-python's codecs serve, metadata the engine's does not match)."""
        if self.reason is not None or self._layout is None:
            return False
        array = self._engine_array(store, path, [region])
        if isinstance(array, str):
            return False
        _read_into(array, box, out)
        return True

    def write_box(self, store: Any, path: str, box: tuple[int | slice, ...], region: Region, value: NDBuffer) -> bool:
        """Writes ``value`` (of the box's shape and the array's data type) into one box of the array
        from the calling thread (see :mod:`box_writes`); False when the batch path must serve the
        write (an array zarr-python's codecs serve, which it then says, or metadata the engine's
        does not match)."""
        if self.reason is not None or self._layout is None or self.metadata.zarr_format == 2:
            return False
        array = self._engine_array(store, path, [region])
        if isinstance(array, str):
            return False
        array.write(box, native_byte_order(working_array(value)))
        return True

    def _write_engine(self, batch: Sequence[BatchItem], value: NDBuffer, drop_axes: tuple[int, ...]) -> bool:
        """Writes a batch through the engine; False when zarr-python's codecs must."""
        if self.reason is not None:
            return self._fall_back(self.reason, batch)
        if self.metadata.zarr_format == 2:
            return self._fall_back("the engine writes Zarr v3 arrays only", batch)
        located = self._locate(batch)
        if isinstance(located, str):
            return self._fall_back(located, batch)
        array, parts = located.array, located.parts
        # zarr-python hands over values in the data type its metadata names, big-endian ones
        # included; the engine takes them in this machine's byte order (see native_byte_order).
        source = native_byte_order(working_array(value))
        shape = tuple(source.shape)
        box = single_box(parts, shape if shape else None) if not drop_axes else None
        if box is not None:
            array.write(box, source)
            return True
        # Index arrays: the box around each chunk's elements is read (all in one pass), updated
        # as zarr-python updates a chunk, and written back.
        where, like = _target_of(source)
        boxes = many.read_many(
            {str(i): (array, as_slices(part.region)) for i, part in enumerate(parts)}, device=where, like=like
        )
        for i, part in enumerate(parts):
            chunk_value = source
            if len(shape) and len(part.region):
                chunk_value = select(source, part.out_selection)
                if drop_axes:
                    chunk_value = chunk_value[tuple(None if d in drop_axes else slice(None) for d in range(len(part.region)))]
            assign(boxes[str(i)], part.local, chunk_value)
            array.write(as_slices(part.region), boxes[str(i)])
        return True

    async def _store_fill_chunks(self, batch: Sequence[BatchItem]) -> None:
        """``write_empty_chunks``: the engine removes chunks left all fill value; zarr-python
        stores them, encoded by its codecs, and so does this."""
        for setter, spec, *_ in batch:
            if await setter.exists():
                continue
            host_spec = _on_host([(setter, spec, None, None, False)])[0][1]
            chunk = cpu_buffer.NDBuffer.create(
                shape=spec.shape,
                dtype=spec.dtype.to_native_dtype(),
                order=spec.order,
                fill_value=fill_value_or_default(spec),
            )
            (encoded,) = await self.fallback.encode([(chunk, host_spec)])
            if encoded is not None:
                await setter.set(encoded)


def _fixed_itemsize(metadata: ArrayMetadata) -> int:
    """The bytes of one element where every element takes the same (0: variable-length data)."""
    try:
        dtype = native_dtype(metadata)
    except (TypeError, ValueError):
        return 0
    return 0 if dtype.hasobject or dtype.kind == "T" else int(dtype.itemsize)


def _all_present(count: int) -> tuple[dict[str, str], ...]:
    return tuple({"status": "present"} for _ in range(count))


def _chunk_grid(metadata: ArrayMetadata) -> tuple[int, ...]:
    """The shape of the chunks zarr-python's keys name (shards, for sharded arrays)."""
    if metadata.zarr_format == 2:
        return tuple(int(c) for c in metadata.chunks)
    grid: Any = metadata.chunk_grid  # regular: the engine serves no other
    return tuple(int(c) for c in grid.chunk_shape)


def _serves(array: Array, grid: tuple[int, ...], regions: Sequence[Region]) -> bool:
    """Whether the engine's array has zarr-python's chunk grid and holds every region."""
    if (array.shards or array.chunks) != grid:
        return False
    shape = array.shape
    return all(
        len(region) == len(shape) and all(start + step * (count - 1) < extent
                                           for (start, step, count), extent in zip(region, shape))
        for region in regions
    )


def _read_into(array: Array, box: tuple[int | slice, ...], out: NDBuffer) -> None:
    """Reads one box of the array into zarr-python's output buffer of its shape."""
    target = working_array(out)
    try:
        array.read(box, out=target)
    except UsageError:  # memory the engine cannot fill in place (its layout or type): a copy
        where, like = _target_of(target)
        assign(target, Ellipsis, array.read(box, device=where, like=like))


def _target_of(array: Any) -> tuple[DeviceSpec | None, Like | None]:
    """The device and the kind of array (``like=``) reads for ``array`` should make: NumPy for
    arrays in host memory (which every framework there shares), the array's own framework on a
    device."""
    owner = adapter_of(array)
    where = None if owner is None else owner.device_of(array)
    if owner is None or where is None or where.kind == "cpu":
        return None, None
    return where, cast("Like | None", owner.like)


register_pipeline(DevicePipeline)
box_reads.install()
box_writes.install()
coordinate_reads.install()
