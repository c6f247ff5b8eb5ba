"""The checkpoint format (docs/checkpoint-format.md): tensor names as array paths, the root
attribute that lists the tensors, and the chunk layout tensors are written with.

Nothing here imports torch: a checkpoint's description is plain JSON, checked before any array
is opened, so that a hostile one fails with a FormatError naming the tensor, never with a read
outside the checkpoint or a crash.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarr_device.core.create import chunks_for_bytes, weight_codecs
from zarr_device.errors import FormatError, UsageError

__all__ = [
    "FORMAT_VERSION",
    "ROOT_ATTRIBUTE",
    "TENSOR_ATTRIBUTE",
    "FILES_KEY",
    "FILL_CHUNKS_KEY",
    "Manifest",
    "encode_name",
    "decode_name",
    "check_path",
    "parse_manifest",
    "layout",
    "checkpoint_codecs",
    "ChunkCodecs",
    "chunk_keys",
    "check_storage",
]

FORMAT_VERSION = 1
#: The root group's attribute that makes a Zarr group a checkpoint.
ROOT_ATTRIBUTE = "zarr_device_checkpoint"
#: The root attribute's key, beside the manifest's, naming the checkpoint's folder of other files
#: (a model's config.json and tokenizer files, copied from a Hugging Face folder):
#: ``{"folder": "files", "names": ["config.json", ...]}``. Readers of tensors ignore it.
FILES_KEY = "files"
#: The root attribute's key, beside the manifest's, listing the chunk files (shard files, for
#: sharded tensors) a writer left out because every element in them is zero (Zarr's rule: a
#: missing chunk reads as the fill value): ``{stored name: ["c/3/0", ...]}``, keys relative to the
#: tensor's array, only tensors with some. Written (``{}`` when none are left out) by every
#: checkpoint writer since it was added; a reader of a checkpoint that has it refuses any other
#: missing chunk file (MissingChunkError). Checkpoints written before have no such record: their
#: missing chunk files read as zeros, as Zarr's rule has it.
FILL_CHUNKS_KEY = "fill_chunks"
#: Each tensor array's attribute: its tensor name, Zarr data type and shape, checked on load.
TENSOR_ATTRIBUTE = "zarr_device_tensor"

#: About 1 MiB inner chunks inside about 64 MiB shards: GPU reads of 1 MiB chunks are the fastest
#: for zstd + crc32c and for uncompressed data, and shards keep the number of files to about one
#: per 64 MiB (the benchmark notebook, "Many arrays: batch sizes, lookahead, stream-ordered reads,
#: threads, layouts").
CHUNK_BYTES = 1 << 20
SHARD_BYTES = 64 << 20
CRC32C: dict[str, Any] = {"name": "crc32c"}  # lets GPU reads decode chunks on the GPU
ZSTD_CODECS: list[dict[str, Any]] = [{"name": "zstd", "configuration": {"level": 1, "checksum": False}}, CRC32C]
#: Uncompressed chunks that reads check: a changed byte is a ChecksumError, not a wrong value.
CHECKED_CODECS: list[dict[str, Any]] = [CRC32C]


#: The codecs after ``bytes`` of one tensor's chunks, by the tensor's Zarr data type.
ChunkCodecs = Callable[[str], "list[dict[str, Any]] | None"]


def checkpoint_codecs(compressors: str | None, checksum: str | None) -> ChunkCodecs:
    """The codecs after ``bytes`` of a checkpoint's chunks, by data type: ``compressors`` None
    (stored as they are), "zstd" (level 1, always with a crc32c) or "auto" (floating point
    weights of two bytes or more byte-shuffled before zstd level 1, other types zstd level 1;
    always with a crc32c), ``checksum`` None or "crc32c" (a crc32c on uncompressed chunks too).
    UsageError for anything else."""
    if compressors not in (None, "zstd", "auto"):
        raise UsageError(f"compressors must be None, 'zstd' or 'auto', not {compressors!r}")
    if checksum not in (None, "crc32c"):
        raise UsageError(f"checksum must be None or 'crc32c', not {checksum!r}")
    if compressors == "auto":
        return lambda dtype: [*weight_codecs(dtype), CRC32C]
    fixed = ZSTD_CODECS if compressors == "zstd" else CHECKED_CODECS if checksum == "crc32c" else None
    return lambda dtype: fixed

# Characters kept as they are in a path; every other is %-encoded (UTF-8 bytes, upper-case hex).
_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_MAX_SEGMENT_BYTES = 255  # one directory entry, on every common file system


def _percent(text: str) -> str:
    return "".join(f"%{b:02X}" for b in text.encode("utf-8"))


def encode_name(name: str, *, escape_upper: bool = False) -> str:
    """The array path of a tensor name: one path segment, readable for ordinary names
    (``layers.0.attn.weight`` stays as it is), reversible by :func:`decode_name`.

    Characters outside ``[A-Za-z0-9._-]`` are %-encoded ('/' as %2F, '%' as %25). The first
    character is encoded too where the segment would otherwise mean something else to a store: a
    leading '.' (``.``, ``..``, hidden and v2 metadata files, the engine's lock file), a leading
    ``__`` (reserved by Zarr v3) and ``zarr.json`` (the group's own metadata document).
    ``escape_upper`` encodes upper-case letters too: for names that differ only in case, which
    would be one file on a case-insensitive file system.
    """
    if not isinstance(name, str) or not name:
        raise FormatError(f"tensor names must be non-empty strings, not {name!r}")
    try:
        path = "".join(c if c in _PLAIN and not (escape_upper and c.isupper()) else _percent(c) for c in name)
    except UnicodeEncodeError:
        raise FormatError(f"tensor name {name!r} is not valid Unicode text") from None
    if path.startswith((".", "__")) or path.casefold() == "zarr.json":
        path = _percent(name[0]) + path[1:]
    return path


def decode_name(path: str) -> str:
    """The tensor name of an array path made by :func:`encode_name`."""
    raw = bytearray()
    i = 0
    while i < len(path):
        if path[i] == "%":
            digits = path[i + 1 : i + 3]
            if len(digits) != 2 or any(c not in "0123456789ABCDEFabcdef" for c in digits):
                raise FormatError(f"array path {path!r} holds a bad %-escape")
            raw.append(int(digits, 16))
            i += 3
        else:
            raw += path[i].encode("utf-8")
            i += 1
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(f"array path {path!r} does not decode to UTF-8") from None


def check_path(name: str, path: Any) -> str:
    """``path`` when it is a safe array path for tensor ``name``: one segment directly under the
    root, not '.' or '..', not a reserved or metadata name, no NUL, backslash or slash."""
    bad = (
        not isinstance(path, str)
        or not path
        or len(path.encode("utf-8", "surrogatepass")) > _MAX_SEGMENT_BYTES
        or any(c in path for c in "/\\\0")
        or path.startswith((".", "__"))
        or path.casefold() == "zarr.json"
    )
    if bad:
        raise FormatError(f"tensor '{name}': array path {path!r} is not a safe name directly under the checkpoint")
    assert isinstance(path, str)
    return path


@dataclass(frozen=True)
class Manifest:
    """A checkpoint's root attribute, checked: stored tensors by name (their array paths, in the
    order written), tied names (the stored name each one shares), the user's metadata, and the
    chunk files left out as all zeros (:data:`FILL_CHUNKS_KEY`; None for a checkpoint written
    before they were recorded)."""

    tensors: dict[str, str]
    tied: dict[str, str]
    metadata: Any
    fill_chunks: dict[str, tuple[str, ...]] | None = None

    def to_json(self) -> dict[str, Any]:
        document = {
            "format_version": FORMAT_VERSION,
            "framework": "torch",
            "tensors": dict(self.tensors),
            "tied": dict(self.tied),
            "metadata": self.metadata,
        }
        if self.fill_chunks is not None:
            document[FILL_CHUNKS_KEY] = {name: list(keys) for name, keys in self.fill_chunks.items()}
        return document

    def names(self) -> list[str]:
        """Every tensor name: the stored ones, then the tied ones."""
        return [*self.tensors, *self.tied]

    def stored(self, name: str) -> str:
        """The stored tensor that holds ``name``'s values."""
        return self.tied.get(name, name)


def _string_map(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise FormatError(f"checkpoint attribute '{what}' must be a JSON object, not {type(value).__name__}")
    for key, item in value.items():
        if not isinstance(key, str) or not key or not isinstance(item, str):
            raise FormatError(f"checkpoint attribute '{what}': entry {key!r}: {item!r} is not a name and a string")
    return dict(value)


def parse_manifest(attributes: Mapping[str, Any], where: str) -> Manifest:
    """The checked description of the checkpoint at ``where`` (its root group's attributes)."""
    root = attributes.get(ROOT_ATTRIBUTE)
    if root is None:
        raise FormatError(
            f"{where} is not a zarr_device checkpoint: its root group has no '{ROOT_ATTRIBUTE}' attribute"
        )
    if not isinstance(root, Mapping):
        raise FormatError(f"{where}: '{ROOT_ATTRIBUTE}' must be a JSON object, not {type(root).__name__}")
    version = root.get("format_version")
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise FormatError(
            f"{where}: checkpoint format_version {version!r} is not one this zarr_device reads "
            f"({FORMAT_VERSION}); a newer zarr_device may read it"
        )
    if root.get("framework") != "torch":
        raise FormatError(f"{where}: a checkpoint of framework {root.get('framework')!r}, not 'torch'")
    tensors = _string_map(root.get("tensors", {}), "tensors")
    tied = _string_map(root.get("tied", {}), "tied")
    owners: dict[str, str] = {}
    for name, path in tensors.items():
        folded = check_path(name, path).casefold()  # distinct on Linux may be one file elsewhere
        if folded in owners:
            raise FormatError(f"tensors '{owners[folded]}' and '{name}' are stored at one array path {path!r}")
        owners[folded] = name
    for name, target in tied.items():
        if name in tensors:
            raise FormatError(f"tensor '{name}' is listed both as stored and as tied to '{target}'")
        if target not in tensors:
            raise FormatError(f"tensor '{name}' is tied to '{target}', which is not a stored tensor")
    fill_chunks = _fill_chunks(root[FILL_CHUNKS_KEY], tensors) if FILL_CHUNKS_KEY in root else None
    return Manifest(tensors, tied, root.get("metadata"), fill_chunks)


# A chunk key of the checkpoint's key encoding (Zarr v3 "default", separator "/"), as written.
_CHUNK_KEY = re.compile(r"c(/(0|[1-9][0-9]*))*")


def _fill_chunks(value: Any, tensors: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """The checked FILL_CHUNKS_KEY record: stored names to lists of distinct chunk keys (whether
    each is a key of its tensor's array is checked once the array is open)."""
    if not isinstance(value, Mapping):
        raise FormatError(f"checkpoint attribute '{FILL_CHUNKS_KEY}' must be a JSON object, not {type(value).__name__}")
    record: dict[str, tuple[str, ...]] = {}
    for name, keys in value.items():
        if name not in tensors:
            raise FormatError(f"checkpoint attribute '{FILL_CHUNKS_KEY}' names {name!r}, which is not a stored tensor")
        if not isinstance(keys, list) or not all(isinstance(k, str) and _CHUNK_KEY.fullmatch(k) for k in keys):
            raise FormatError(f"tensor '{name}': '{FILL_CHUNKS_KEY}' holds {keys!r}, not a list of chunk keys")
        if len(set(keys)) != len(keys):
            raise FormatError(f"tensor '{name}': '{FILL_CHUNKS_KEY}' lists a chunk key twice")
        record[name] = tuple(keys)
    return record


def chunk_keys(shape: Sequence[int], chunk_shape: Sequence[int]) -> Iterator[str]:
    """The keys of an array's chunk files (its shard files, when sharded: ``chunk_shape`` is then
    the shard shape), relative to the array, in C order, under the checkpoint's key encoding:
    ``c`` for a 0-d array, ``c/0/1`` for the second chunk along the last of two dimensions. None
    for an empty array."""
    grid = [-(-s // c) for s, c in zip(shape, chunk_shape)]
    for index in itertools.product(*(range(n) for n in grid)):
        yield "/".join(["c", *map(str, index)])


_DEFAULT_KEY_ENCODINGS = ({"name": "default", "configuration": {"separator": "/"}}, {"name": "default"})
# The codecs after ``bytes`` (little-endian) in a chunk, as checkpoint_codecs writes them (the
# shuffle's element size checked apart: the data type's).
_CHAINS = ((), ("crc32c",), ("zstd", "crc32c"), ("numcodecs.shuffle", "zstd", "crc32c"))


def _zero_bits(value: Any, dtype: np.dtype[Any]) -> bool:
    """Whether the fill value ``value`` (as Zarr v3 JSON) is all zero bits in ``dtype`` (0.0,
    not -0.0; float8_e8m0fnu, which has no zero, its smallest value)."""
    if isinstance(value, list):  # a complex number: [real, imaginary]
        parts = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
        value = complex(*parts) if len(parts) == len(value) == 2 else None
    if value is None or isinstance(value, str):  # NaN, infinities and raw bits are strings
        return False
    try:
        return not any(np.asarray(value, dtype=dtype).tobytes())
    except (TypeError, ValueError, OverflowError):
        return False


def _names(codecs: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(c.get("name") if isinstance(c, Mapping) else None for c in codecs)


def _elementsize(codec: Mapping[str, Any]) -> Any:
    configuration = codec.get("configuration")
    return configuration.get("elementsize") if isinstance(configuration, Mapping) else None


def _endian(codec: Mapping[str, Any]) -> Any:
    configuration = codec.get("configuration")
    return configuration.get("endian") if isinstance(configuration, Mapping) else None


def check_storage(
    name: str,
    path: str,
    *,
    shape: Sequence[int],
    dtype: np.dtype[Any],
    chunks: Sequence[int],
    codecs: Sequence[Mapping[str, Any]],
    fill_value: Any,
    key_encoding: Any,
) -> None:
    """Refuses (FormatError naming the tensor) an array whose stored bytes would read as other
    values without any check failing: only the storage checkpoint writers make is read. Fill
    value of zero bits (what left-out chunks read as), the default chunk key encoding (the keys
    FILL_CHUNKS_KEY lists), little-endian ``bytes`` followed by one of the codec chains of
    :func:`checkpoint_codecs`, inside ``sharding_indexed`` with a crc32c index at the end or not,
    and (inner) ``chunks`` that are each one contiguous run of the tensor (leading dimensions
    split, trailing ones whole), which makes a chunk's shape follow from its size."""

    def refuse(what: str) -> FormatError:
        return FormatError(f"tensor '{name}': array '{path}' {what}, which checkpoint writers do not write "
                           "(docs/checkpoint-format.md): it was changed after it was written, or written by "
                           "a newer zarr_device")

    if not _zero_bits(fill_value, dtype):
        raise refuse(f"has the fill value {fill_value!r}, not zero")
    if key_encoding not in _DEFAULT_KEY_ENCODINGS:
        raise refuse(f"has the chunk key encoding {key_encoding!r}")
    chain: list[Any] = list(codecs)
    if len(chain) == 1 and _names(chain) == ("sharding_indexed",):
        configuration = chain[0].get("configuration")
        configuration = configuration if isinstance(configuration, Mapping) else {}
        index = configuration.get("index_codecs")
        index = list(index) if isinstance(index, list) else []
        if (_names(index) != ("bytes", "crc32c") or _endian(index[0]) != "little"
                or configuration.get("index_location") != "end"):
            raise refuse(f"has the shard index codecs {index!r} at {configuration.get('index_location')!r}")
        inner = configuration.get("codecs")
        chain = list(inner) if isinstance(inner, list) else []
    names = _names(chain)
    if (not names or names[0] != "bytes" or names[1:] not in _CHAINS
            or (dtype.itemsize > 1 and _endian(chain[0]) != "little")
            or (names[1:2] == ("numcodecs.shuffle",) and _elementsize(chain[1]) != dtype.itemsize)):
        raise refuse(f"has the codecs {list(codecs)!r}")
    split = next((d for d, c in enumerate(chunks) if c != 1), len(chunks))
    if any(c != max(1, s) for c, s in zip(chunks[split + 1 :], shape[split + 1 :])):
        raise refuse(f"has chunks {list(chunks)} that are not contiguous runs of its shape {list(shape)}")


#: Chunks split into more than one are made a whole number of these bytes where that keeps them
#: near CHUNK_BYTES: uncompressed chunks then start at multiples of it in their shard files, so
#: O_DIRECT and GPUDirect Storage reads (which need 4 KiB-aligned offsets and lengths) take them
#: as they are stored.
DIRECT_IO_ALIGNMENT = 4096


def _aligned(shape: tuple[int, ...], chunks: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """``chunks`` with its split dimension rounded up so that a chunk holds a whole number of
    DIRECT_IO_ALIGNMENT bytes, where the result stays within four times CHUNK_BYTES and the
    tensor's extent; else ``chunks``."""
    split = next((d for d, (c, s) in enumerate(zip(chunks, shape)) if c < s), None)
    if split is None:
        return chunks
    row = math.prod(chunks[split + 1 :]) * itemsize  # bytes per step along the split dimension
    step = DIRECT_IO_ALIGNMENT // math.gcd(row, DIRECT_IO_ALIGNMENT)
    rounded = -(-chunks[split] // step) * step
    if rounded >= shape[split] or rounded * row > 4 * CHUNK_BYTES:
        return chunks
    return (*chunks[:split], rounded, *chunks[split + 1 :])


def layout(shape: tuple[int, ...], itemsize: int) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """(chunk shape, shard shape or None) for a tensor: chunks of about 1 MiB that split the
    leading dimensions only (each chunk one contiguous run of rows, a whole number of 4 KiB where
    that keeps it near 1 MiB), in shards of about 64 MiB of whole chunks; unsharded when one chunk
    holds the whole tensor."""
    chunks = _aligned(shape, chunks_for_bytes(shape, itemsize, CHUNK_BYTES), itemsize)
    grid = [-(-max(1, s) // c) for s, c in zip(shape, chunks)]
    if math.prod(grid) <= 1:
        return chunks, None
    per_shard = chunks_for_bytes(grid, math.prod(chunks) * itemsize, SHARD_BYTES)
    return chunks, tuple(n * c for n, c in zip(per_shard, chunks))
