"""Saving a state dict as a checkpoint: one Zarr array per stored tensor, written whole into a
partial directory and placed atomically (zarr_device.io.atomic_trees)."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union

import torch

from zarr_device.io import atomic_trees
from zarr_device.basics.config import get_config
from zarr_device.basics.progress import Progress, progress_bar
from zarr_device.core.create import create
from zarr_device.core.group import create_group
from zarr_device.basics.numpy_dtypes import ZARR_DTYPE_NAMES
from zarr_device.errors import FormatError, UsageError, ZarrDeviceError
from zarr_device.core.nodes import check_attributes, json_text
from zarr_device.io.stores import LocalStore
from zarr_device.torch.format import (
    ROOT_ATTRIBUTE,
    TENSOR_ATTRIBUTE,
    Manifest,
    check_path,
    ChunkCodecs,
    checkpoint_codecs,
    chunk_keys,
    encode_name,
    layout,
)

__all__ = ["save", "zarr_dtype", "TensorEntry", "write_checkpoint", "check_metadata"]

PathLike = Union[str, "os.PathLike[str]"]


def zarr_dtype(dtype: torch.dtype) -> str:
    """The Zarr data type name of a torch dtype; UsageError for types Zarr has no name for."""
    name = str(dtype).removeprefix("torch.")
    if name not in ZARR_DTYPE_NAMES:
        raise UsageError(f"torch dtype {name} has no Zarr data type")
    return name


@dataclass(frozen=True)
class TensorEntry:
    """One tensor to store: its name, dtype and shape, known before any values are, and a
    function giving its values, called once while it is written. A converter hands its tensors
    over this way so that memory holds the tensors being written (a few, within
    ``max_inflight_bytes``), not the whole state dict."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    get: Callable[[], torch.Tensor]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


@dataclass(frozen=True)
class _Stored:
    entry: TensorEntry
    path: str
    dtype: str

    @property
    def name(self) -> str:
        return self.entry.name


def _state_dict(state: torch.nn.Module | Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    if isinstance(state, torch.nn.Module):
        state = state.state_dict()
    if not isinstance(state, Mapping):
        raise UsageError(f"save takes an nn.Module or a mapping of names to tensors, not {type(state).__name__}")
    for name, value in state.items():
        if not isinstance(name, str) or not name:
            raise UsageError(f"tensor names must be non-empty strings, not {name!r}")
        if not isinstance(value, torch.Tensor):
            raise UsageError(f"'{name}' is a {type(value).__name__}, not a tensor: checkpoints hold tensors only")
        if value.device.type == "meta":
            raise UsageError(f"tensor '{name}' is on the meta device: it has no values to save")
    return dict(state)


def _paths(names: list[str]) -> dict[str, str]:
    """Array paths by name. Names that differ only in case get their upper-case letters encoded
    as well, so that no two paths are one file on a case-insensitive file system."""
    try:
        plain = {name: encode_name(name) for name in names}
        folds: dict[str, int] = {}
        for path in plain.values():
            folds[path.casefold()] = folds.get(path.casefold(), 0) + 1
        paths = {n: encode_name(n, escape_upper=True) if folds[p.casefold()] > 1 else p for n, p in plain.items()}
        owners: dict[str, str] = {}
        for name, path in paths.items():
            check_path(name, path)
            if path.casefold() in owners:
                raise FormatError(f"tensors '{owners[path.casefold()]}' and '{name}' map to one array path")
            owners[path.casefold()] = name
    except FormatError as e:
        raise UsageError(str(e)) from None
    return paths


def _plan(state: dict[str, torch.Tensor]) -> tuple[list[TensorEntry], dict[str, str]]:
    """The tensors to store, and the tied names: a tensor that views the very same elements as
    one before it (storage, offset, shape, strides and dtype) is stored once."""
    stored: list[TensorEntry] = []
    tied: dict[str, str] = {}
    seen: dict[tuple[Any, ...], str] = {}
    for name, tensor in state.items():
        key: tuple[Any, ...] | None = None
        if tensor.numel():  # empty tensors may share a null address without sharing anything
            key = (tensor.device, tensor.untyped_storage().data_ptr(), tensor.storage_offset(),
                   tuple(tensor.shape), tensor.stride(), tensor.dtype)
            if key in seen:
                tied[name] = seen[key]
                continue
            seen[key] = name
        stored.append(TensorEntry(name, tensor.dtype, tuple(tensor.shape), functools.partial(_same, tensor)))
    return stored, tied


def _same(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def _check_entries(entries: Sequence[TensorEntry], tied: Mapping[str, str]) -> list[_Stored]:
    """Every stored tensor's array path and Zarr data type, checked before anything is written."""
    paths = _paths([*(e.name for e in entries), *tied])
    stored: list[_Stored] = []
    for entry in entries:
        try:
            dtype = zarr_dtype(entry.dtype)
        except UsageError as e:
            raise UsageError(f"tensor '{entry.name}': {e}") from None
        stored.append(_Stored(entry, paths[entry.name], dtype))
    return stored


def _write(store: LocalStore, item: _Stored, codecs: ChunkCodecs) -> int:
    # A CUDA tensor is written from the device: the engine lays its chunks out (and compresses
    # zstd chunks) on the GPU and they cross to the host once, through its bounded staging. Other
    # devices' tensors cross to the host as they are written (_write_all bounds how many at once).
    # A non-contiguous tensor is stored as its contiguous values.
    tensor = item.entry.get().detach()
    if tensor.device.type != "cuda":
        tensor = tensor.to("cpu")
    tensor = tensor.contiguous()
    shape = tuple(tensor.shape)
    if tensor.dtype != item.entry.dtype or shape != item.entry.shape:  # a source that changed under us
        raise FormatError(f"holds {tensor.dtype} {list(shape)}, not the {item.entry.dtype} "
                          f"{list(item.entry.shape)} it was listed as")
    chunks, shards = layout(shape, tensor.element_size())
    info = {"name": item.name, "dtype": item.dtype, "shape": list(shape)}
    array = create(store, path=item.path, shape=shape, dtype=item.dtype, chunks=chunks, shards=shards,
                   compressors=codecs(item.dtype), attributes={TENSOR_ATTRIBUTE: info})
    if tensor.numel():
        array.write(Ellipsis, tensor)
        # The disk starts on this tensor's files while the next ones are written.
        atomic_trees.start_writeback(store.root / item.path)
    return math.prod(shape) * tensor.element_size()


#: Tensors written at once. A tensor is one or a few shard files, each written and fsynced by one
#: thread: one tensor at a time leaves the disk idle while each file is flushed.
_WRITERS = 4


def _write_all(store: LocalStore, stored: Sequence[_Stored], codecs: ChunkCodecs,
               advance: Callable[[int], object]) -> None:
    """Writes the tensors, up to _WRITERS at once while the tensors in flight hold at most
    ``max_inflight_bytes`` (a larger tensor is written alone): host memory stays bounded by the
    setting whatever the checkpoint's size. The first error is raised, naming its tensor, once
    the writes under way have ended."""
    budget = get_config().max_inflight_bytes
    running: dict[Future[int], _Stored] = {}
    held = 0

    def settle() -> None:
        nonlocal held
        done, _ = wait(running, return_when=FIRST_COMPLETED)
        for future in done:
            item = running.pop(future)
            held -= item.entry.nbytes
            try:
                advance(future.result())
            except ZarrDeviceError as e:
                raise type(e)(f"saving tensor '{item.name}': {e}") from e

    with ThreadPoolExecutor(max_workers=_WRITERS, thread_name_prefix="zarr-device-save") as pool:
        try:
            for item in stored:
                while running and (len(running) >= _WRITERS or held + item.entry.nbytes > budget):
                    settle()
                running[pool.submit(_write, store, item, codecs)] = item
                held += item.entry.nbytes
            while running:
                settle()
        except BaseException:
            for future in running:
                future.cancel()
            raise


def check_metadata(metadata: Any, what: str = "metadata") -> Any:
    """``metadata`` as the JSON a checkpoint stores (tuples become lists), checked where the
    checkpoint's zarr.json holds it: UsageError naming ``what``, before anything is written, for
    what is not JSON and for what readers would refuse (nesting too deep for their parser once
    inside the root document)."""
    value = json.loads(json_text(metadata, what))
    check_attributes({ROOT_ATTRIBUTE: Manifest({}, {}, value, fill_chunks={}).to_json()},
                     f"{what}, in the checkpoint's zarr.json,")
    return value


def save(
    state_dict_or_module: torch.nn.Module | Mapping[str, torch.Tensor],
    path: PathLike,
    *,
    compressors: Literal["zstd", "auto"] | None = None,
    checksum: Literal["crc32c"] | None = None,
    metadata: Any = None,
    overwrite: bool = False,
    progress: Progress = None,
) -> None:
    """Saves a module's state dict (or a mapping of names to tensors) as a checkpoint: a Zarr v3
    group at ``path`` (a local directory), one array per tensor (docs/checkpoint-format.md).

    Tensors may live on any device and have any layout (their values are stored contiguous):
    CUDA tensors are encoded on the GPU and cross to the host once, encoded; other devices'
    tensors are copied to the host in turn. Tied tensors (views of the same elements, such as a
    shared embedding and output layer) are stored once. ``compressors``: None stores the bytes as
    they are (the fastest to read); "zstd" stores zstd level 1 chunks with a crc32c each (which
    GPU reads decode on the GPU); "auto" picks by data type: floating point weights of two bytes
    or more byte-shuffled before zstd level 1 (bf16 weights in about 0.69 of their bytes instead
    of zstd's 0.78; the GPU undoes the shuffle as it places them), other types zstd level 1, all
    with a crc32c. ``checksum``: "crc32c" ends uncompressed chunks with a crc32c
    too, which every read verifies, so that a byte changed on the disk is a ChecksumError naming
    the tensor rather than a wrong weight (without it a load checks sizes, not values, as
    safetensors and torch.save files do); such chunks are no longer 4 KiB-aligned for O_DIRECT
    reads. ``metadata``: JSON the checkpoint carries (read it with
    :func:`zarr_device.torch.metadata`). ``overwrite``: replace a checkpoint (any Zarr store) at
    ``path``, once the new one is complete. ``progress``: a bar on stderr while writing (None, the default: where stderr is a
    terminal; False: none; or a function told of each tensor's bytes).

    The checkpoint appears whole or not at all: it is written beside ``path``, flushed to disk
    and renamed into place; a failure leaves ``path`` as it was. Raises UsageError for what
    cannot be saved (naming the tensor) or an existing ``path`` without ``overwrite``.
    """
    codecs = checkpoint_codecs(compressors, checksum)
    metadata_json = check_metadata(metadata)
    state = _state_dict(state_dict_or_module)
    dest = atomic_trees.local_destination(path)
    atomic_trees.check_replaceable(dest, overwrite)
    entries, tied = _plan(state)
    write_checkpoint(dest, entries, tied, metadata_json, codecs=codecs, overwrite=overwrite, progress=progress)


def write_checkpoint(
    dest: Path,
    entries: Sequence[TensorEntry],
    tied: Mapping[str, str],
    metadata: Any,
    *,
    codecs: ChunkCodecs,
    overwrite: bool,
    progress: Progress,
    desc: str = "saving",
    extra: Mapping[str, Any] | None = None,
    add_files: Callable[[Path], None] | None = None,
) -> None:
    """Writes a checkpoint at ``dest`` (checked by :func:`atomic_trees.check_replaceable`) from
    tensors handed over a few at a time: the writer behind :func:`save` and the converters
    (zarr_device.torch.interop). ``metadata``: JSON, already checked. ``extra``: more keys for
    the root attribute (``files``). ``add_files``: called with the partial directory once the
    tensors are written, to put other files in it before it is placed."""
    stored = _check_entries(entries, tied)
    manifest = Manifest({s.name: s.path for s in stored}, dict(tied), metadata, fill_chunks={})
    # The root document as it will be, but for the chunks left out (a shallow record): what
    # readers would refuse (metadata nested too deep for their parser) is refused before anything
    # is written, so that a good checkpoint at ``dest`` stays as it was.
    check_attributes({ROOT_ATTRIBUTE: {**manifest.to_json(), **(extra or {})}},
                     "metadata, in the checkpoint's zarr.json,")
    total = sum(s.entry.nbytes for s in stored)
    with atomic_trees.atomic_directory(dest, overwrite, "checkpoint") as partial:
        store = LocalStore(partial)
        with progress_bar(total, progress, desc) as advance:
            _write_all(store, stored, codecs, advance)
        # Written last, once the engine has left out the chunks all zeros: readers refuse any
        # other chunk file missing, rather than read it as zeros.
        left_out = {s.name: keys for s in stored if (keys := _left_out(store, s))}
        manifest = dataclasses.replace(manifest, fill_chunks=left_out)
        create_group(store, attributes={ROOT_ATTRIBUTE: {**manifest.to_json(), **(extra or {})}})
        if add_files is not None:
            add_files(partial)


def _left_out(store: LocalStore, item: _Stored) -> tuple[str, ...]:
    """The chunk (shard) files of a written tensor that the engine left out, every element in
    them being zero (the fill value)."""
    chunks, shards = layout(item.entry.shape, item.entry.dtype.itemsize)
    handle = store.handle
    return tuple(k for k in chunk_keys(item.entry.shape, shards or chunks) if not handle.exists(f"{item.path}/{k}"))
