"""Loading a checkpoint: its description is checked and every array it names opened (metadata
only) before any data is read; then the tensors are read in one pipeline (zd.read_many) or
handed on as they arrive (zd.iter_many). Loading reads JSON and array data only, and runs no
code."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

import torch

from zarr_device.io.adapters import torch as torch_adapter
from zarr_device.core.array import Array
from zarr_device.core.group import Group, open_array, open_group
from zarr_device.errors import FormatError, MissingChunkError, NodeNotFoundError, UsageError, ZarrDeviceError
from zarr_device.basics.progress import Progress, progress_bar, wanted
from zarr_device.core.many import iter_many, read_many
from zarr_device.basics.sizes import parse_size
from zarr_device.torch.auto_map import AUTO_STRATEGIES, MaxMemory, memory_budgets, plan_auto_device_map
from zarr_device.torch.device_map import DeviceMap, plan_device_map
from zarr_device.torch.parts import Part, ShardPlan, part_selection, resolve_rank, tensor_parallel_parts
from zarr_device.core.nodes import parse_json
from zarr_device.torch.format import TENSOR_ATTRIBUTE, Manifest, check_storage, chunk_keys, parse_manifest

__all__ = ["Checkpoint", "open_checkpoint", "load", "iter_load", "auto_device_map", "metadata", "Keys", "DeviceArg"]

PathLike = Union[str, "os.PathLike[str]"]
#: The tensors to load: every one (None), these names, or those a function accepts.
Keys = Union[None, Iterable[str], Callable[[str], bool]]
DeviceArg = Union[str, int, torch.device]


@dataclass(frozen=True)
class Checkpoint:
    """An opened checkpoint: its checked description and its stored tensors' arrays by name."""

    where: str
    manifest: Manifest
    arrays: dict[str, Array]

    def shape(self, name: str) -> tuple[int, ...]:
        return self.arrays[self.manifest.stored(name)].shape

    def dtype(self, name: str) -> torch.dtype:
        dtype: torch.dtype = torch_adapter.torch_dtype(_zarr_dtype(self.arrays[self.manifest.stored(name)]))
        return dtype


def _zarr_dtype(array: Array) -> str:
    return str(array._core.dtype)  # noqa: SLF001 - the package's own


def _open_array(checkpoint_group: Any, name: str, path: str) -> Array:
    try:
        array = open_array(checkpoint_group.store, path=path)
    except NodeNotFoundError:
        raise FormatError(f"tensor '{name}': its array '{path}' is missing from the checkpoint") from None
    except ZarrDeviceError as e:
        raise type(e)(f"tensor '{name}' (array '{path}'): {e}") from e
    data_type = _zarr_dtype(array)
    info = array.attrs.get(TENSOR_ATTRIBUTE)
    expected = {"name": name, "dtype": data_type, "shape": list(array.shape)}
    if info != expected:
        raise FormatError(
            f"tensor '{name}': array '{path}' does not match what the checkpoint recorded for it "
            f"(recorded {info!r}; the array holds {expected!r})"
        )
    try:
        torch_adapter.torch_dtype(data_type)
    except UsageError as e:
        raise FormatError(f"tensor '{name}': {e}") from None
    check_storage(name, path, shape=array.shape, dtype=array.dtype, chunks=array.chunks,
                  codecs=array.codecs, fill_value=array.fill_value,
                  key_encoding=array.metadata.get("chunk_key_encoding"))
    return array


def _check_chunk_files(name: str, array: Array, left_out: tuple[str, ...]) -> None:
    """Every chunk file (shard file) of a stored tensor's array is in the store, except those
    the checkpoint lists as left out (all zeros), which are not: a missing file is a
    MissingChunkError naming the tensor and the key, never zeros. Stops at the first missing
    key, so that it costs one look-up per file there (or listed), whatever the array's metadata
    claims."""
    store = array.store.handle
    listed = set(left_out)
    for key in chunk_keys(array.shape, array.shards or array.chunks):
        here = store.exists(f"{array.path}/{key}")
        if key in listed:
            listed.discard(key)
            if here:
                raise FormatError(f"tensor '{name}': chunk '{key}' of array '{array.path}' is recorded as left "
                                  "out (all zeros) but is in the store: the checkpoint was changed after it "
                                  "was written")
        elif not here:
            raise MissingChunkError(f"tensor '{name}': chunk '{key}' of array '{array.path}' is missing from "
                                    "the checkpoint (it is not one of the chunks left out as all zeros)")
    if listed:
        raise FormatError(f"tensor '{name}': the checkpoint lists chunks {sorted(listed)[:3]} of array "
                          f"'{array.path}' as left out, which the array does not have")


def _attributes_in_order(group: Group) -> dict[str, Any]:
    """The root group's attributes with JSON objects in the order stored (the engine's copy of
    the document keeps no order, and the tensors load in the order they were saved in). The text
    is parsed here only after the engine has parsed it within its limits on size and nesting."""
    text = group.store.handle.get("zarr.json")
    try:
        document = parse_json(text, "zarr.json") if text is not None else None
    except FormatError:
        document = None
    attributes = document.get("attributes") if isinstance(document, dict) else None
    return attributes if isinstance(attributes, dict) else dict(group.attrs)


def open_checkpoint(path: PathLike) -> Checkpoint:
    """Opens and checks a checkpoint: its root attribute, and every stored tensor's array
    (present, of the data type and shape recorded for it, stored as checkpoints are, and with
    every chunk file it was written with). Reads metadata, and looks up each chunk file."""
    where = os.fspath(path)
    try:
        group = open_group(path, mode="r")
    except NodeNotFoundError:
        raise NodeNotFoundError(f"{where}: no checkpoint there (no Zarr group)") from None
    manifest = parse_manifest(_attributes_in_order(group), where)
    arrays = {name: _open_array(group, name, p) for name, p in manifest.tensors.items()}
    if manifest.fill_chunks is not None:  # None: written before left-out chunks were recorded
        for name, array in arrays.items():
            _check_chunk_files(name, array, manifest.fill_chunks.get(name, ()))
    return Checkpoint(where, manifest, arrays)


def _select(manifest: Manifest, keys: Keys) -> list[str]:
    names = manifest.names()
    if keys is None:
        return names
    if callable(keys):
        return [name for name in names if keys(name)]
    if isinstance(keys, str):
        raise UsageError("keys must be a list of names (or a function), not one string")
    wanted = list(keys)
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise UsageError(f"keys names tensors the checkpoint does not hold: {', '.join(map(repr, unknown))}")
    chosen = set(wanted)
    return [name for name in names if name in chosen]


def _caster(dtype: torch.dtype | None) -> Callable[[torch.Tensor], torch.Tensor]:
    if dtype is None:
        return lambda tensor: tensor
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise UsageError(f"dtype must be a floating torch dtype (floating tensors are cast to it), not {dtype!r}")
    return lambda tensor: tensor.to(dtype) if tensor.is_floating_point() else tensor


def _plan(
    checkpoint: Checkpoint, names: list[str], parts: Mapping[str, Part] | None = None
) -> tuple[dict[str, tuple[Array, Any]], dict[str, list[str]]]:
    """The reads, ``{key: (array, selection)}``, and the names each read serves (itself, tied
    ones). A whole tensor's key is its stored name; tied names with different parts (split
    differently by a shard plan) are separate reads."""
    reads: dict[str, tuple[Array, Any]] = {}
    serves: dict[str, list[str]] = {}
    keys: dict[tuple[str, Part], str] = {}
    for name in names:
        stored = checkpoint.manifest.stored(name)
        part = parts.get(name) if parts else None
        key = keys.get((stored, part))
        if key is None:
            key = stored if part is None else f"{stored}[{part[0]}:{part[1]}:{part[2]}]"
            while key in reads:  # only a hostile choice of names collides; any distinct key will do
                key += "'"
            keys[(stored, part)] = key
            array = checkpoint.arrays[stored]
            reads[key] = (array, part_selection(array.shape, part))
        serves.setdefault(key, []).append(name)
    return reads, serves


def _nbytes(read: tuple[Array, Any]) -> int:
    array, selection = read
    if selection is Ellipsis:
        return array.nbytes
    counts = [max(0, s.indices(e)[1] - s.indices(e)[0]) for s, e in zip(selection, array.shape)]
    return int(math.prod(counts)) * int(array.dtype.itemsize)


def read_tensors(
    checkpoint: Checkpoint,
    names: list[str],
    device: DeviceArg,
    dtype: torch.dtype | None,
    progress: Progress,
    parts: Mapping[str, Part] | None = None,
) -> dict[str, torch.Tensor]:
    """``names``' tensors (or their ``parts``) on ``device``; tied names are one tensor object."""
    cast = _caster(dtype)
    reads, serves = _plan(checkpoint, names, parts)
    if wanted(progress):  # handed on as they land; one read_many otherwise
        results: dict[str, torch.Tensor] = {}
        with progress_bar(sum(_nbytes(r) for r in reads.values()), progress, "loading") as advance:
            for key, tensor in iter_many(reads, device=device, like="torch"):
                results[key] = tensor
                advance(_nbytes(reads[key]))
    else:
        results = read_many(reads, device=device, like="torch")
    out: dict[str, torch.Tensor] = {}
    for key, served in serves.items():
        tensor = cast(results.pop(key))
        for name in served:
            out[name] = tensor
    return {name: out[name] for name in names}


def _parts(
    checkpoint: Checkpoint, names: list[str], shard_plan: ShardPlan | None, rank: int | None, world_size: int | None
) -> dict[str, Part] | None:
    """This rank's part of each name under ``shard_plan`` (None without a plan)."""
    if shard_plan is None:
        if rank is not None or world_size is not None:
            raise UsageError("rank= and world_size= go with a shard_plan= (for a plain load, pass neither)")
        return None
    rank, world_size = resolve_rank(rank, world_size)
    return tensor_parallel_parts({name: checkpoint.shape(name) for name in names}, shard_plan, rank, world_size)


def planned_bytes(tensor_bytes: int, itemsize: int, stored_floating: bool, dtype: torch.dtype | None) -> int:
    """The device memory a tensor of ``tensor_bytes`` takes while it loads: cast to ``dtype``
    (floating tensors), it is read as stored and then cast, so the larger of the two counts."""
    if dtype is None or not stored_floating or not itemsize:
        return tensor_bytes
    return max(tensor_bytes, tensor_bytes // itemsize * dtype.itemsize)


def place_auto(
    sizes: Mapping[str, int],
    storage: Mapping[str, str],
    strategy: str,
    max_memory: MaxMemory | None,
    modules: Sequence[str] | None,
) -> dict[str, str]:
    """The device map ``device_map=strategy`` ("auto", "balanced", "sequential") makes of these
    sizes (:func:`zarr_device.torch.auto_map.plan_auto_device_map`)."""
    return plan_auto_device_map(sizes, memory_budgets(max_memory), storage=storage, modules=modules,
                                strategy=AUTO_STRATEGIES[strategy])


def _auto_map(
    checkpoint: Checkpoint,
    names: list[str],
    strategy: str,
    max_memory: MaxMemory | None,
    modules: Sequence[str] | None,
    dtype: torch.dtype | None,
    parts: Mapping[str, Part] | None = None,
) -> dict[str, str]:
    """The device map for loading ``names`` (or their ``parts``), cast to ``dtype``: each read's
    bytes count once, for all the names it serves."""
    _caster(dtype)  # a bad dtype is refused before the machine's memory is looked at
    reads, serves = _plan(checkpoint, names, parts)
    sizes: dict[str, int] = {}
    storage: dict[str, str] = {}
    for key, served in serves.items():
        array = reads[key][0]
        floating = checkpoint.dtype(served[0]).is_floating_point
        size = planned_bytes(_nbytes(reads[key]), int(array.dtype.itemsize), floating, dtype)
        for name in served:
            sizes[name], storage[name] = size, key
    return place_auto({name: sizes[name] for name in names}, storage, strategy, max_memory, modules)


def check_auto_options(device_map: object, max_memory: object, modules: object) -> str | None:
    """The strategy when ``device_map`` is one planned by size ("auto", ...), else None; refuses
    ``max_memory``/``modules`` without one."""
    if isinstance(device_map, str) and device_map in AUTO_STRATEGIES:
        return device_map
    if max_memory is not None or modules is not None:
        raise UsageError(f"max_memory= and modules= go with device_map='auto' (or 'balanced', 'sequential'), "
                         f"not with device_map={device_map!r}")
    return None


def auto_device_map(
    path: PathLike,
    *,
    strategy: str = "auto",
    max_memory: MaxMemory | None = None,
    modules: Sequence[str] | None = None,
    dtype: torch.dtype | None = None,
    keys: Keys = None,
) -> dict[str, str]:
    """The device map ``load(path, device_map=strategy, ...)`` uses: ``{module prefix: device}``,
    for inspection or to pass on. Reads metadata only (and, without ``max_memory``, the GPUs'
    free memory). See :func:`load` for the arguments."""
    if strategy not in AUTO_STRATEGIES:
        raise UsageError(f"strategy must be one of {', '.join(map(repr, AUTO_STRATEGIES))}, not {strategy!r}")
    checkpoint = open_checkpoint(path)
    return _auto_map(checkpoint, _select(checkpoint.manifest, keys), strategy, max_memory, modules, dtype)


def load(
    path: PathLike,
    *,
    device: DeviceArg | None = None,
    device_map: DeviceMap | None = None,
    dtype: torch.dtype | None = None,
    keys: Keys = None,
    progress: Progress = None,
    shard_plan: ShardPlan | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    max_memory: MaxMemory | None = None,
    modules: Sequence[str] | None = None,
) -> dict[str, torch.Tensor]:
    """Loads a checkpoint's tensors as ``{name: tensor}`` on ``device`` ("cpu", the default,
    "cuda", "cuda:N", or any torch device).

    ``device_map`` (instead of ``device``): each tensor on its own device, as accelerate and
    transformers place a model: ``{prefix: device}`` where a prefix is a module path
    ("model.layers.0"), a tensor name, or "" for everything; the longest prefix that matches
    on a dot boundary wins ("model.layers.1" does not match "model.layers.10.w"). A device is
    "cpu", "cuda:N", an int N (a CUDA index) or a torch.device; "meta" and "disk" are refused.
    Every tensor must be matched (UsageError listing those that are not); keys that match
    nothing are ignored. Each device's tensors are read in one
    pipeline of their own. A tied name is loaded where its own name maps: tied names on one device
    are one tensor object, on different devices separate copies. The result is in the
    checkpoint's order, as without a map.

    ``device_map="auto"`` plans the map by size, as accelerate and transformers do
    (:func:`auto_device_map` returns it): modules are kept whole (by default each layer, the
    shortest prefix ending in a number such as "model.layers.7", and otherwise each tensor's own
    module; ``modules=``: glob patterns of the modules kept whole instead), placed in order on
    the GPUs and then, for what does not fit, the CPU; tied tensors count once and go with their
    first user. "auto" (also "balanced") shares the model among the GPUs in proportion to their
    memory when it fits on them; "sequential" fills each GPU before the next. ``max_memory``:
    ``{device: bytes or "10GiB"}``, the devices to use (only those named) and what each offers;
    by default every GPU's free memory less a reserve (a tenth of its memory, and at least twice
    the ``staging_bytes`` setting, for activations, buffers and the read's own working memory)
    and the host's available memory. A module larger than any device, or a model larger than
    them all, is a UsageError naming the module and the sizes. Sizes count ``dtype`` (the larger
    of the stored and the cast size, since a tensor is read and then cast) and ``shard_plan``.

    Every tensor is read in one pipeline (:func:`zarr_device.read_many`): on the host, all chunks
    of all tensors by one pool of threads; onto a CUDA device, straight into the tensors through
    the staging ring. ``dtype``: a floating dtype that floating tensors are cast to after
    loading. ``keys``: the names to load (a list), or a function that accepts names. Tied names
    are one tensor object, as they were one tensor when saved. ``progress``: a bar on stderr,
    advanced as each tensor completes (None, the default: where stderr is a terminal; False:
    none; or a function told of each tensor's bytes). With a bar, tensors are handed on as they
    land (:func:`iter_load`); without, in one read. Reads onto a GPU keep their staging and
    decode memory for the reads after them; :func:`zarr_device.empty_cache` gives it back (after
    loading a model whose GPU memory is wanted for other things).

    ``shard_plan``: tensor-parallel loading. ``{pattern: dim}`` with fnmatch-style patterns of
    tensor names (``"*.q_proj.weight": 0``); for each loaded tensor the first pattern (in the
    plan's order) that matches it splits it along ``dim`` (negative counts from the end), and this
    rank gets ``torch.chunk(tensor, world_size, dim)[rank]``: ``ceil(size / world_size)`` elements
    along ``dim`` per rank, the last non-empty part possibly smaller, and ranks past the end of
    the tensor (as when it is smaller than ``world_size``) an empty part. Only the chunks a part
    touches are read, in the same one pipeline as the whole tensors; when the parts fall on chunk
    boundaries the ranks together read each byte once. Tensors no pattern matches are loaded
    whole. ``rank``, ``world_size``: this rank's, by default those of the initialised
    torch.distributed default process group. A tied name split differently from the tensor it
    shares is read (and returned) separately.

    Raises FormatError for a damaged or hostile checkpoint (naming the tensor), UsageError for
    keys it does not hold, for a shard plan pattern that matches no loaded tensor or splits one
    along a dimension it lacks, or a rank outside ``[0, world_size)``; NodeNotFoundError when
    there is no checkpoint at ``path``.
    """
    if device is not None and device_map is not None:
        raise UsageError("pass device= or device_map=, not both")
    strategy = check_auto_options(device_map, max_memory, modules)
    checkpoint = open_checkpoint(path)
    names = _select(checkpoint.manifest, keys)
    parts = _parts(checkpoint, names, shard_plan, rank, world_size)
    if strategy is not None:
        device_map = _auto_map(checkpoint, names, strategy, max_memory, modules, dtype, parts)
    # Planned before anything is read, so that a map missing a tensor costs no reads.
    placed: list[tuple[DeviceArg, list[str]]] = (
        [("cpu" if device is None else device, names)] if device_map is None
        else list(plan_device_map(names, device_map).items())
    )
    loaded: dict[str, torch.Tensor] = {}
    for where, on_it in placed:
        loaded.update(read_tensors(checkpoint, on_it, where, dtype, progress, parts))
    return {name: loaded[name] for name in names}


def iter_load(
    path: PathLike,
    *,
    device: DeviceArg = "cpu",
    dtype: torch.dtype | None = None,
    keys: Keys = None,
    shard_plan: ShardPlan | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    window_bytes: int | str | None = None,
) -> Iterator[tuple[str, torch.Tensor]]:
    """Loads a checkpoint as :func:`load` does, yielding ``(name, tensor)`` as each tensor is
    complete (:func:`zarr_device.iter_many`), in the checkpoint's order; a tied name comes right
    after the tensor it shares, as the same object. ``shard_plan``, ``rank``, ``world_size``: as
    for :func:`load`, each rank's part of the tensors a plan names.

    ``window_bytes`` (a byte count or a size such as "1GiB"): onto a GPU, the tensors are read in
    consecutive windows of about that many bytes (a larger tensor is a window of its own), each
    allocated when its read starts, so that a consumer that copies each tensor away and drops it
    holds at most about one window beyond what it keeps; None reads them all in one pipeline,
    allocating every tensor up front. On the host tensors are read one after another anyway.

    The checkpoint is opened and the arguments checked when this is called, before the first
    tensor is asked for."""
    checkpoint = open_checkpoint(path)
    cast = _caster(dtype)
    names = _select(checkpoint.manifest, keys)
    parts = _parts(checkpoint, names, shard_plan, rank, world_size)
    reads, serves = _plan(checkpoint, names, parts)
    limit = None if window_bytes is None else parse_size(window_bytes, what="window_bytes")
    return _landing(reads, serves, device, cast, limit)


def _windows(reads: dict[str, tuple[Array, Any]], limit: int) -> Iterator[dict[str, tuple[Array, Any]]]:
    """``reads`` in order, cut into runs of at most ``limit`` bytes (or one larger read)."""
    window: dict[str, tuple[Array, Any]] = {}
    size = 0
    for key, read in reads.items():
        nbytes = _nbytes(read)
        if window and size + nbytes > limit:
            yield window
            window, size = {}, 0
        window[key] = read
        size += nbytes
    if window:
        yield window


def _landing(
    reads: dict[str, tuple[Array, Any]],
    serves: dict[str, list[str]],
    device: DeviceArg,
    cast: Callable[[torch.Tensor], torch.Tensor],
    limit: int | None,
) -> Iterator[tuple[str, torch.Tensor]]:
    for window in [reads] if limit is None else _windows(reads, limit):
        for key, tensor in iter_many(window, device=device, like="torch"):
            tensor = cast(tensor)
            for name in serves[key]:
                yield name, tensor
            del tensor  # so that the next window is allocated without this one's last tensor


def metadata(path: PathLike) -> Any:
    """The JSON metadata saved with a checkpoint (None when none was given)."""
    return open_checkpoint(path).manifest.metadata
