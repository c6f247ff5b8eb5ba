"""Checkpoints from and to other formats (``zarr-device convert``): a safetensors file, a Hugging
Face model folder (sharded safetensors and its other files) or a ``torch.save`` state dict into a
checkpoint; a checkpoint into one safetensors file.

Tensors move a few at a time (memory holds those being written, within ``max_inflight_bytes``,
not the model) and every value is copied
bit for bit. Checkpoints are written by the writer behind :func:`zarr_device.torch.save`, and
both kinds of output are placed atomically (zarr_device.io.atomic_trees).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import pickle
import shutil
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from zarr_device.io import atomic_trees
from zarr_device.convert.shared import ConvertSummary, SourceTree, check_destination, local_path, path_inside
from zarr_device.errors import FormatError, UsageError
from zarr_device.core.nodes import parse_json
from zarr_device.torch.format import FILES_KEY, checkpoint_codecs, encode_name
from zarr_device.torch.load import iter_load, open_checkpoint
from zarr_device.basics.progress import Progress, progress_bar
from zarr_device.torch.save import TensorEntry, _plan, check_metadata, write_checkpoint

__all__ = [
    "ST_DTYPES", "TIED_KEY", "METADATA_KEY", "INDEX_NAME", "NotAStateDictError",
    "convert", "convert_to_checkpoint", "convert_to_safetensors", "checkpoint_files",
]

#: safetensors' data type codes, for every dtype both it and Zarr have.
ST_DTYPES: dict[str, torch.dtype] = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "U16": torch.uint16, "I16": torch.int16,
    "U32": torch.uint32, "I32": torch.int32, "U64": torch.uint64, "I64": torch.int64,
    "F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "F8_E4M3FNUZ": torch.float8_e4m3fnuz,
    "F8_E5M2FNUZ": torch.float8_e5m2fnuz, "C64": torch.complex64,
}
_ST_CODES = {dtype: code for code, dtype in ST_DTYPES.items()}
#: ``__metadata__`` keys a checkpoint's safetensors file carries: its tied names as JSON
#: ``{name: stored name}``, and its metadata as JSON where it is not a mapping of strings.
TIED_KEY = "zarr_device.tied"
METADATA_KEY = "zarr_device.metadata"
INDEX_NAME = "model.safetensors.index.json"
# Files of a model folder that are not copied: other serializations of the same weights.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".onnx")
# In its subfolders, torch weights belong to other modules (a sentence-transformers 2_Dense/) and
# are copied; these are the model again in another framework's format (onnx/, a TF or Flax copy).
# OpenVINO's model is an .xml and a .bin of one stem: both are left out too.
_OTHER_FORMATS = (".h5", ".msgpack", ".gguf", ".onnx", ".onnx_data", ".tflite")


class NotAStateDictError(FormatError):
    """A ``torch.save`` file that is not a flat mapping of names to tensors."""


@dataclass
class _Source:
    entries: list[TensorEntry]
    tied: dict[str, str]
    metadata: Any
    other_files: list[Path] = field(default_factory=list)
    nested_files: list[tuple[str, Path]] = field(default_factory=list)  # ("sub/name", source)


def checkpoint_files(path: str | os.PathLike[str]) -> dict[str, Path]:
    """The other files a checkpoint carries (a converted model folder's config.json, tokenizer
    files, ...) by name: their paths inside the checkpoint; empty when it carries none. The
    folder's own files come first, then those of its subfolders, named by their path in it
    ("1_Pooling/config.json")."""
    from zarr_device.core.group import open_group

    root = open_group(path, mode="r").attrs.get("zarr_device_checkpoint")
    files = root.get(FILES_KEY) if isinstance(root, Mapping) else None
    if not isinstance(files, Mapping):
        return {}
    folder, names = files.get("folder"), files.get("names")
    if not isinstance(folder, str) or not isinstance(names, list):
        raise FormatError(f"{path}: the checkpoint's '{FILES_KEY}' record is not a folder and a list of names")
    nested = files.get("nested", [])
    if not isinstance(nested, list) or not all(isinstance(n, str) for n in nested):
        raise FormatError(f"{path}: the checkpoint's '{FILES_KEY}' record has 'nested' that is not a list of paths")
    for name in [folder, *names, *(part for n in nested for part in n.split("/"))]:
        if not isinstance(name, str) or not name or any(c in name for c in "/\\\0") or name in (".", ".."):
            raise FormatError(f"{path}: '{FILES_KEY}' names {name!r}, which is not a plain file name")
    return {name: Path(path) / folder / name for name in [*names, *nested]}


# -- reading safetensors ------------------------------------------------------------------------


def _as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's elements as a flat uint8 tensor (its raw bytes, C order)."""
    return tensor.contiguous().reshape(-1).view(torch.uint8)


def _open_safetensors(stack: contextlib.ExitStack, file: Path, names: list[str] | None,
                      source: _Source) -> dict[str, str]:
    """Adds one safetensors file's tensors (``names``, or all) to ``source`` as entries read when
    written; returns its ``__metadata__``."""
    from safetensors import safe_open

    try:
        handle = stack.enter_context(safe_open(str(file), framework="pt"))
    except Exception as e:  # safetensors raises its own types, and OSError
        raise FormatError(f"{file}: not a readable safetensors file: {e}") from None
    present = set(handle.keys())
    for name in names if names is not None else list(handle.keys()):
        if name not in present:
            raise FormatError(f"{file}: tensor '{name}' is listed in {INDEX_NAME} but not in the file")
        piece = handle.get_slice(name)
        code = piece.get_dtype()
        if code not in ST_DTYPES:
            raise UsageError(f"tensor '{name}': safetensors type {code} has no Zarr data type")
        get: Callable[[], torch.Tensor] = functools.partial(handle.get_tensor, name)
        source.entries.append(TensorEntry(name, ST_DTYPES[code], tuple(piece.get_shape()), get))
    metadata = handle.metadata()
    return dict(metadata) if metadata is not None else {}


def _ties(text: str | None, file: Path) -> dict[str, Any]:
    # JSON from a file goes through the engine's bounded parser: FormatError, never RecursionError.
    tied = parse_json(text, f"{file}: __metadata__ '{TIED_KEY}'") if text else {}
    if not isinstance(tied, dict):
        raise FormatError(f"{file}: __metadata__ '{TIED_KEY}' is not a JSON object")
    return tied


def _restore_ties(source: _Source, tied: Mapping[str, Any]) -> None:
    """Names a checkpoint's safetensors file wrote as copies of another become tied again, when
    the copy still holds the same bytes (the file may have been edited since)."""
    entries = {e.name: e for e in source.entries}
    for name, target in tied.items():
        copy, kept = entries.get(name), entries.get(target) if isinstance(target, str) else None
        if copy is None or kept is None or name == target or target in source.tied or name in source.tied.values():
            continue
        if (copy.dtype, copy.shape) == (kept.dtype, kept.shape) and torch.equal(
            _as_bytes(copy.get()), _as_bytes(kept.get())
        ):
            source.tied[name] = target
    source.entries = [e for e in source.entries if e.name not in source.tied]


def _metadata_from(metadata: dict[str, str], file: Path) -> Any:
    """A checkpoint's metadata from a safetensors ``__metadata__`` of ``file``: the checkpoint's
    own where the file came from a checkpoint, else the mapping as it is. FormatError naming the
    file for JSON the engine's parser refuses, or that would nest too deep for it in the
    checkpoint."""
    value: Any = metadata
    if METADATA_KEY in metadata:
        value = parse_json(metadata[METADATA_KEY], f"{file}: __metadata__ '{METADATA_KEY}'")
    try:
        return check_metadata(value, f"{file}: __metadata__")
    except UsageError as e:
        raise FormatError(str(e)) from None


def _read_folder(stack: contextlib.ExitStack, folder: Path, source: _Source) -> dict[str, str]:
    """A Hugging Face model folder: its shards (by the index, or model.safetensors), the other
    top-level files to carry along, and its subfolders' files (a sentence-transformers model's
    1_Pooling/)."""
    index = folder / INDEX_NAME
    shards: dict[str, list[str] | None] = {"model.safetensors": None}
    if index.is_file():
        try:
            weight_map = parse_json(index.read_bytes(), str(index)).get("weight_map")
        except (OSError, AttributeError) as e:
            raise FormatError(f"{index}: not a safetensors index: {e}") from None
        if not isinstance(weight_map, Mapping):
            raise FormatError(f"{index}: 'weight_map' is not a JSON object")
        shards = {}
        for name, shard in weight_map.items():
            if not isinstance(shard, str) or any(c in shard for c in "/\\\0") or shard in ("", ".", ".."):
                raise FormatError(f"{index}: tensor '{name}' is in {shard!r}, not a file of the folder")
            listed = shards.setdefault(shard, [])
            assert listed is not None
            listed.append(name)
    metadata: dict[str, str] = {}
    ties: dict[str, Any] = {}
    for shard, names in shards.items():
        found = _open_safetensors(stack, folder / shard, names, source)
        ties.update(_ties(found.pop(TIED_KEY, None), folder / shard))
        metadata = metadata or found  # shards carry the same __metadata__ ({"format": "pt"})
    _restore_ties(source, ties)
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or path.name == INDEX_NAME or path.name.endswith(_WEIGHT_SUFFIXES):
            continue
        if path.is_file() and path.name not in atomic_trees.MARKERS:  # a model cache links files
            source.other_files.append(path)
        elif path.is_dir() and not path.is_symlink():
            source.nested_files += _subfolder_files(path, path.name)
    return metadata


def _subfolder_files(folder: Path, name: str) -> list[tuple[str, Path]]:
    """The files to copy of a model folder's subfolder (``name``: its path in the model folder),
    at every depth: all but hidden ones, Zarr's markers and other formats' copies of the model.
    Links to files are followed (a model cache links them); links to folders are not."""
    entries = sorted(folder.iterdir())
    stems = {p.stem for p in entries if p.suffix == ".xml" and p.with_suffix(".bin").is_file()}
    found: list[tuple[str, Path]] = []
    for path in entries:
        if path.name.startswith(".") or path.name in atomic_trees.MARKERS or path.name.endswith(_OTHER_FORMATS):
            continue
        if path.stem in stems and path.suffix in (".xml", ".bin"):
            continue
        if path.is_file():
            found.append((f"{name}/{path.name}", path))
        elif path.is_dir() and not path.is_symlink():
            found += _subfolder_files(path, f"{name}/{path.name}")
    return found


def _read_torch(file: Path, source: _Source) -> None:
    # weights_only: tensors and plain containers only, no code run; mmap: tensors are paged in
    # from the file as each is written, not all read first.
    try:
        state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as e:
        raise NotAStateDictError(f"{file}: holds objects other than tensors (refused by weights_only "
                                 f"loading): {str(e).splitlines()[0]}") from None
    except (RuntimeError, OSError, ValueError, EOFError) as e:
        raise FormatError(f"{file}: not a torch.save file that can be mapped: {e}") from None
    if not isinstance(state, Mapping):
        raise NotAStateDictError(f"{file}: holds a {type(state).__name__}, not a state dict of tensors")
    for name, value in state.items():
        if not isinstance(name, str) or not name or not isinstance(value, torch.Tensor):
            raise NotAStateDictError(f"{file}: entry {name!r} is a {type(value).__name__}, not a tensor: "
                                     "a checkpoint holds a flat state dict of tensors only")
    source.entries, source.tied = _plan(dict(state))


# -- converting ---------------------------------------------------------------------------------


def _summary(source: Any, dest: Path, tensors: int, groups: int, read: int, written: int,
             started: float) -> ConvertSummary:
    return ConvertSummary(str(source), str(dest), tensors, groups, read, written, time.perf_counter() - started)


def _files_folder(entries: list[TensorEntry]) -> str:
    """A folder name no tensor's array path takes (a tensor may be called 'files')."""
    taken = {encode_name(e.name).casefold() for e in entries}
    folder, n = "files", 0
    while folder in taken:
        n += 1
        folder = f"files-{n}"
    return folder


def _tree_size(root: Path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _s, files in os.walk(root) for f in files)


def convert_to_checkpoint(
    source: Path, kind: str, dest: Path, *, compressors: str | None, checksum: bool | None = None,
    overwrite: bool, progress: Progress,
) -> ConvertSummary:
    """Writes the safetensors file, model folder or torch.save file (``kind``: "safetensors",
    "huggingface", "torch") at ``source`` as a checkpoint at ``dest`` (checked replaceable by
    the caller); returns a :class:`zarr_device.convert.shared.ConvertSummary`. ``checksum``: a crc32c
    on every chunk (True), which zstd checkpoints always have; None: the checkpoint's default
    (as ``zarr_device.torch.save``: sizes only for uncompressed chunks)."""
    if compressors not in (None, "none", "zstd", "auto"):
        raise UsageError(f"a checkpoint's chunks are stored as they are, with zstd or 'auto', not {compressors!r}")
    if checksum is False and compressors in ("zstd", "auto"):
        raise UsageError("a compressed checkpoint's chunks always end with a crc32c: leave the checksum on")
    # Before anything is read: a bad combination fails at once.
    codecs = checkpoint_codecs(None if compressors == "none" else compressors, checksum="crc32c" if checksum else None)
    started = time.perf_counter()
    data = _Source([], {}, None)
    with contextlib.ExitStack() as stack:
        if kind == "torch":
            _read_torch(source, data)
        else:
            if kind == "huggingface":
                found = _read_folder(stack, source, data)
            else:
                found = _open_safetensors(stack, source, None, data)
                _restore_ties(data, _ties(found.pop(TIED_KEY, None), source))
            data.metadata = _metadata_from(found, source) if found or kind == "huggingface" else None
        extra: dict[str, Any] = {}
        add_files: Callable[[Path], None] | None = None
        if data.other_files or data.nested_files:
            folder = _files_folder(data.entries)
            extra[FILES_KEY] = {"folder": folder, "names": [p.name for p in data.other_files]}
            if data.nested_files:  # a key of its own: readers that know only 'names' still read those
                extra[FILES_KEY]["nested"] = [name for name, _ in data.nested_files]

            def add_files(partial: Path) -> None:
                (partial / folder).mkdir()
                for path in data.other_files:
                    shutil.copyfile(path, partial / folder / path.name)
                for name, path in data.nested_files:
                    (partial / folder / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, partial / folder / name)

        write_checkpoint(dest, data.entries, data.tied, data.metadata, codecs=codecs, overwrite=overwrite,
                         progress=progress, desc="converting", extra=extra, add_files=add_files)
    total = sum(e.nbytes for e in data.entries)
    return _summary(source, dest, len(data.entries), 1, total, _tree_size(dest), started)


def _st_metadata(metadata: Any, tied: Mapping[str, str]) -> dict[str, str]:
    """A checkpoint's metadata as safetensors ``__metadata__`` (strings to strings): a mapping of
    strings as it is; anything else as JSON under METADATA_KEY, beside {"format": "pt"} (which
    Hugging Face loaders look for). Tied names are listed under TIED_KEY."""
    plain = isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
    if plain and METADATA_KEY not in metadata and TIED_KEY not in metadata:
        out = dict(metadata)
    else:
        out = {"format": "pt", METADATA_KEY: json.dumps(metadata)}
    if tied:
        out[TIED_KEY] = json.dumps(dict(tied))
    return out


def convert_to_safetensors(
    source: Path, dest: Path, *, overwrite: bool, progress: Progress
) -> ConvertSummary:
    """Writes the checkpoint at ``source`` as one safetensors file at ``dest`` (checked
    replaceable by the caller). Tied names are written as copies of the tensor they share, since
    safetensors refuses shared storage, and listed under TIED_KEY so that converting back ties
    them again; every name holds its values in the file, for every reader."""
    started = time.perf_counter()
    checkpoint = open_checkpoint(source)
    manifest = checkpoint.manifest
    header: dict[str, Any] = {"__metadata__": _st_metadata(manifest.metadata, manifest.tied)}
    offset = 0
    for stored in manifest.tensors:  # each tied name right after its tensor, as iter_load yields them
        for name in [stored, *(t for t, s in manifest.tied.items() if s == stored)]:
            if name in header:
                raise UsageError(f"tensor '{name}': a name safetensors reserves")
            dtype, shape = checkpoint.dtype(name), checkpoint.shape(name)
            if dtype not in _ST_CODES:
                raise UsageError(f"tensor '{name}': safetensors has no type for {dtype}")
            size = math.prod(shape) * dtype.itemsize
            header[name] = {"dtype": _ST_CODES[dtype], "shape": list(shape), "data_offsets": [offset, offset + size]}
            offset += size
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    base = 8 + len(text)
    with atomic_trees.atomic_file(dest, overwrite, "safetensors file") as partial:
        with open(partial, "r+b") as out, progress_bar(offset, progress, "converting") as advance:
            out.write(struct.pack("<Q", len(text)) + text)
            for name, tensor in iter_load(source, device="cpu"):
                start, end = header[name]["data_offsets"]
                raw = _as_bytes(tensor).numpy()
                if raw.nbytes != end - start:  # the checkpoint changed since it was opened
                    raise FormatError(f"tensor '{name}' holds {raw.nbytes} bytes, not the {end - start} listed")
                out.seek(base + start)
                out.write(raw.data)
                advance(raw.nbytes)
            out.truncate(base + offset)
    stored_bytes = sum(checkpoint.arrays[n].nbytes for n in manifest.tensors)
    return _summary(source, dest, len(header) - 1, 0, stored_bytes, base + offset, started)


def convert(kind: str, source: Any, destination: Any, options: Mapping[str, Any],
            compressors: Any, checksum: bool | None, overwrite: bool, progress: Progress) -> ConvertSummary:
    """``zarr_device.convert.zarr_to_zarr.convert`` for a checkpoint conversion (``kind``, from
    :func:`zarr_device.convert.shared.checkpoint_kind`): ``options`` are convert's options that do not
    apply here, refused when given; ``checksum`` applies to conversions into a checkpoint."""
    if kind == "to-safetensors":
        options = {**options, "checksum": checksum}
    unused = [name for name, value in options.items() if value not in (None, "")]
    if unused:
        raise UsageError(f"{', '.join(unused)} do not apply to checkpoint conversions (they have one layout)")
    local = local_path(source)
    if local is None:
        raise UsageError(f"a checkpoint conversion reads a local file or directory, not {source!r}")
    path = Path(os.path.abspath(local))
    if kind == "to-safetensors":
        dest = atomic_trees.local_destination(destination)
        if path_inside(os.path.realpath(dest), os.path.realpath(path)):
            raise UsageError(f"{dest}: the destination must lie outside the checkpoint {path}")
        atomic_trees.check_replaceable_file(dest, overwrite, ".safetensors")
        return convert_to_safetensors(path, dest, overwrite=overwrite, progress=progress)
    folder = str(path) if kind == "huggingface" else None
    dest = check_destination(destination, SourceTree(str(path), folder, []), overwrite)
    if not isinstance(compressors, (str, type(None))):
        raise UsageError("a checkpoint's compressors are 'zstd' or none, not codec dicts")
    return convert_to_checkpoint(path, kind, dest, compressors=compressors, checksum=checksum, overwrite=overwrite,
                                 progress=progress)
