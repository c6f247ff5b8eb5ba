"""Bad input: corrupt or malformed data and metadata raise the documented exception types, and the
message names the array's path (and, for chunk data, the chunk's key). Valid arrays are written
first, then their files are damaged on disk."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Callable

import numcodecs
import numpy as np
import pytest

from conftest import bytes_codec, random_values, write_v3_metadata, zarr_python_array

zd = pytest.importorskip("zarr_device")
zarr = pytest.importorskip("zarr")

ARRAY_PATH = "grp/bad_arr"
SHAPE = (8, 6)
CHUNKS = (4, 3)
KEY = "c/1/1"  # the chunk (or shard) that gets damaged
DTYPE = "int32"


def _crc32c(data: bytes) -> bytes:
    return bytes(numcodecs.CRC32C().encode(data))[-4:]


def _make(tmp_path: Path, codecs: list[dict[str, Any]], *, chunk_shape: tuple[int, ...] = CHUNKS,
          dtype: str = DTYPE, fill_value: Any = 0) -> Path:
    """A valid array at <store>/grp/bad_arr, every chunk written; returns the store root."""
    store = tmp_path / "store"
    zarr.create_group(str(store)).create_group("grp")
    write_v3_metadata(store / ARRAY_PATH, shape=SHAPE, dtype=dtype, chunk_shape=chunk_shape, codecs=codecs,
                      fill_value=fill_value)
    values = random_values(dtype, SHAPE, np.random.default_rng(1))
    if np.dtype(dtype).kind in "iu":
        values[values == 0] = 1  # no chunk equal to the fill value: every chunk is stored
    zarr_python_array(store / ARRAY_PATH)[...] = values
    assert (store / ARRAY_PATH / KEY).is_file()
    # sanity: the undamaged array reads fine with zarr_device
    np.testing.assert_array_equal(zd.open_array(str(store), path=ARRAY_PATH)[...], values)
    return store


def _chunk(store: Path, key: str = KEY) -> Path:
    return store / ARRAY_PATH / key


def _read_all(store: Path) -> Any:
    return zd.open_array(str(store), path=ARRAY_PATH)[...]


def _assert_raises(store: Path, exc: type[BaseException], key: str | None = KEY,
                   action: Callable[[Path], Any] = _read_all) -> Any:
    with pytest.raises(exc) as info:
        action(store)
    assert isinstance(info.value, zd.ZarrDeviceError)
    message = str(info.value)
    assert ARRAY_PATH in message, f"message does not name the array path: {message!r}"
    if key is not None:
        assert key in message, f"message does not name the chunk key {key!r}: {message!r}"
    return info.value


def _assert_other_chunks_still_readable(store: Path) -> None:
    """The damage is confined to KEY: a selection avoiding it reads normally."""
    arr = zd.open_array(str(store), path=ARRAY_PATH)
    part = np.asarray(arr[0:4, :])
    assert part.shape == (4, 6)


ZSTD = {"name": "zstd", "configuration": {"level": 3, "checksum": False}}
ZSTD_CHECKSUM = {"name": "zstd", "configuration": {"level": 3, "checksum": True}}
GZIP = {"name": "gzip", "configuration": {"level": 5}}
BLOSC = {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4, "blocksize": 0}}
CRC = {"name": "crc32c"}

CHAINS: dict[str, list[dict[str, Any]]] = {
    "bytes": [bytes_codec(DTYPE)],
    "zstd": [bytes_codec(DTYPE), ZSTD],
    "gzip": [bytes_codec(DTYPE), GZIP],
    "blosc": [bytes_codec(DTYPE), BLOSC],
    "crc32c": [bytes_codec(DTYPE), CRC],
}


# ----------------------------------------------------------------------------------------------
# Damaged chunk data


@pytest.mark.parametrize("chain", list(CHAINS))
@pytest.mark.parametrize("keep", [0.5, 0.0, "one byte short"])
def test_truncated_chunk(tmp_path: Path, chain: str, keep: Any) -> None:
    store = _make(tmp_path, CHAINS[chain])
    data = _chunk(store).read_bytes()
    n = len(data) - 1 if keep == "one byte short" else int(len(data) * keep)
    if n == 0 and chain == "bytes":
        n = 1  # an empty file could be read as "no data"; keep it clearly truncated
    _chunk(store).write_bytes(data[:n])
    _assert_raises(store, zd.CodecError)
    _assert_other_chunks_still_readable(store)


@pytest.mark.parametrize("chain", ["zstd", "gzip", "blosc"])
def test_garbage_stream(tmp_path: Path, chain: str) -> None:
    store = _make(tmp_path, CHAINS[chain])
    n = len(_chunk(store).read_bytes())
    garbage = np.random.default_rng(7).integers(0, 256, size=max(n, 32), dtype=np.uint8).tobytes()
    _chunk(store).write_bytes(b"\x13\x37" + garbage)  # no valid zstd/gzip magic, no sane blosc header
    err = _assert_raises(store, zd.CodecError)
    assert isinstance(err, ValueError)
    _assert_other_chunks_still_readable(store)


def test_corrupt_zstd_frame_with_checksum(tmp_path: Path) -> None:
    store = _make(tmp_path, [bytes_codec(DTYPE), ZSTD_CHECKSUM])
    data = bytearray(_chunk(store).read_bytes())
    data[-1] ^= 0xFF  # the frame's content checksum
    _chunk(store).write_bytes(bytes(data))
    _assert_raises(store, zd.CodecError)


def test_corrupt_zstd_frame_header(tmp_path: Path) -> None:
    store = _make(tmp_path, CHAINS["zstd"])
    data = bytearray(_chunk(store).read_bytes())
    data[0] ^= 0xFF  # magic number
    _chunk(store).write_bytes(bytes(data))
    _assert_raises(store, zd.CodecError)


def test_corrupt_gzip_trailer(tmp_path: Path) -> None:
    store = _make(tmp_path, CHAINS["gzip"])
    data = bytearray(_chunk(store).read_bytes())
    data[-8] ^= 0xFF  # CRC-32 of the gzip member
    _chunk(store).write_bytes(bytes(data))
    _assert_raises(store, zd.CodecError)


def test_corrupt_gzip_deflate_stream(tmp_path: Path) -> None:
    store = _make(tmp_path, CHAINS["gzip"])
    data = bytearray(_chunk(store).read_bytes())
    data[3] = 0  # flags
    for i in range(10, len(data) - 8):
        data[i] = 0xFF  # invalid deflate block type in the first block header
    _chunk(store).write_bytes(bytes(data))
    _assert_raises(store, zd.CodecError)


@pytest.mark.parametrize(
    "field,delta",
    [("cbytes", 100), ("nbytes", 4), ("nbytes", -4), ("blocksize", 1 << 30), ("version", None)],
)
def test_corrupt_blosc_header(tmp_path: Path, field: str, delta: int | None) -> None:
    store = _make(tmp_path, CHAINS["blosc"])
    data = bytearray(_chunk(store).read_bytes())
    version, versionlz, flags, typesize, nbytes, blocksize, cbytes = struct.unpack_from("<BBBBIII", data, 0)
    if field == "cbytes":
        struct.pack_into("<I", data, 12, cbytes + delta)
    elif field == "nbytes":
        struct.pack_into("<I", data, 4, nbytes + delta)
    elif field == "blocksize":
        struct.pack_into("<I", data, 8, blocksize + delta)
    else:
        data[0] = 0xEE  # unknown format version
    _chunk(store).write_bytes(bytes(data))
    _assert_raises(store, zd.CodecError)


def test_crc32c_mismatch_in_data(tmp_path: Path) -> None:
    store = _make(tmp_path, CHAINS["crc32c"])
    data = bytearray(_chunk(store).read_bytes())
    data[5] ^= 0x01
    _chunk(store).write_bytes(bytes(data))
    err = _assert_raises(store, zd.ChecksumError)
    assert isinstance(err, zd.CodecError) and isinstance(err, ValueError)
    _assert_other_chunks_still_readable(store)


def test_crc32c_mismatch_in_checksum(tmp_path: Path) -> None:
    store = _make(tmp_path, [bytes_codec(DTYPE), ZSTD, CRC])
    data = bytearray(_chunk(store).read_bytes())
    data[-2] ^= 0x80
    _chunk(store).write_bytes(bytes(data))
    _assert_raises(store, zd.ChecksumError)


# ----------------------------------------------------------------------------------------------
# Decoded size does not match the chunk


@pytest.mark.parametrize("delta", [-4, 4, 1])
def test_uncompressed_chunk_wrong_length(tmp_path: Path, delta: int) -> None:
    store = _make(tmp_path, CHAINS["bytes"])
    data = _chunk(store).read_bytes()
    assert len(data) == 4 * 3 * 4
    _chunk(store).write_bytes(data[:delta] if delta < 0 else data + b"\x01" * delta)
    _assert_raises(store, zd.CodecError)


@pytest.mark.parametrize("chain", ["zstd", "gzip", "blosc"])
@pytest.mark.parametrize("delta", [-4, 8])
def test_compressed_chunk_decodes_to_wrong_size(tmp_path: Path, chain: str, delta: int) -> None:
    store = _make(tmp_path, CHAINS[chain])
    raw = bytes(range(256)) * 2
    raw = raw[: 4 * 3 * 4 + delta]
    encoder: Any = {
        "zstd": numcodecs.Zstd(level=1),
        "gzip": numcodecs.GZip(level=1),
        "blosc": numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
    }[chain]
    _chunk(store).write_bytes(bytes(encoder.encode(raw)))
    _assert_raises(store, zd.CodecError)


def test_crc32c_valid_but_wrong_length(tmp_path: Path) -> None:
    store = _make(tmp_path, CHAINS["crc32c"])
    payload = b"\x07" * (4 * 3 * 4 - 4)
    _chunk(store).write_bytes(payload + _crc32c(payload))
    _assert_raises(store, zd.CodecError)


# ----------------------------------------------------------------------------------------------
# Shards

SHARD = (4, 6)  # outer chunk grid: 2 x 1 shards; KEY2 is the second one
INNER = [2, 3]  # 2 x 2 inner chunks per shard
SHARD_KEY = "c/1/0"
N_INNER = 4


def _sharded(tmp_path: Path, location: str, index_crc: bool, inner_codecs: list[dict[str, Any]] | None = None) -> Path:
    index_codecs = [{"name": "bytes", "configuration": {"endian": "little"}}] + ([CRC] if index_crc else [])
    codecs = [{
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": INNER,
            "codecs": inner_codecs or [bytes_codec(DTYPE)],
            "index_codecs": index_codecs,
            "index_location": location,
        },
    }]
    store = tmp_path / "store"
    zarr.create_group(str(store)).create_group("grp")
    write_v3_metadata(store / ARRAY_PATH, shape=SHAPE, dtype=DTYPE, chunk_shape=SHARD, codecs=codecs, fill_value=0)
    values = random_values(DTYPE, SHAPE, np.random.default_rng(2))
    values[values == 0] = 1
    zarr_python_array(store / ARRAY_PATH)[...] = values
    np.testing.assert_array_equal(zd.open_array(str(store), path=ARRAY_PATH)[...], values)
    return store


class ShardFile:
    """Reads and rewrites a shard's index in place (recomputing its crc32c where there is one)."""

    def __init__(self, path: Path, location: str, index_crc: bool) -> None:
        self.path = path
        self.location = location
        self.index_crc = index_crc
        self.data = bytearray(path.read_bytes())
        self.index_len = N_INNER * 16 + (4 if index_crc else 0)
        start = 0 if location == "start" else len(self.data) - self.index_len
        self.index_start = start
        raw = bytes(self.data[start : start + N_INNER * 16])
        if index_crc:
            assert bytes(self.data[start + N_INNER * 16 : start + self.index_len]) == _crc32c(raw)
        self.entries = [list(struct.unpack_from("<QQ", raw, 16 * i)) for i in range(N_INNER)]

    def save(self) -> None:
        raw = b"".join(struct.pack("<QQ", o, n) for o, n in self.entries)
        blob = raw + (_crc32c(raw) if self.index_crc else b"")
        self.data[self.index_start : self.index_start + self.index_len] = blob
        self.path.write_bytes(bytes(self.data))


SHARD_VARIANTS = [("end", True), ("start", True), ("end", False)]
SHARD_IDS = ["end-crc", "start-crc", "end-nocrc"]


@pytest.mark.parametrize("location,index_crc", SHARD_VARIANTS, ids=SHARD_IDS)
def test_shard_index_entry_out_of_bounds(tmp_path: Path, location: str, index_crc: bool) -> None:
    store = _sharded(tmp_path, location, index_crc)
    shard = ShardFile(_chunk(store, SHARD_KEY), location, index_crc)
    shard.entries[2][0] = len(shard.data) + 16  # offset past the end of the shard
    shard.save()
    _assert_raises(store, zd.CodecError, SHARD_KEY)


@pytest.mark.parametrize("location,index_crc", SHARD_VARIANTS, ids=SHARD_IDS)
def test_shard_index_entry_end_out_of_bounds(tmp_path: Path, location: str, index_crc: bool) -> None:
    store = _sharded(tmp_path, location, index_crc)
    shard = ShardFile(_chunk(store, SHARD_KEY), location, index_crc)
    shard.entries[3][1] += len(shard.data)  # starts inside, ends past the end
    shard.save()
    _assert_raises(store, zd.CodecError, SHARD_KEY)


@pytest.mark.parametrize("location,index_crc", SHARD_VARIANTS, ids=SHARD_IDS)
def test_shard_index_entries_overlap(tmp_path: Path, location: str, index_crc: bool) -> None:
    store = _sharded(tmp_path, location, index_crc)
    shard = ShardFile(_chunk(store, SHARD_KEY), location, index_crc)
    offsets = sorted(shard.entries, key=lambda e: e[0])
    first, second = offsets[0], offsets[1]
    # move the second chunk to start 4 bytes into the first one (lengths unchanged, in bounds)
    second[0] = first[0] + 4
    shard.save()
    _assert_raises(store, zd.CodecError, SHARD_KEY)


@pytest.mark.parametrize("location,index_crc", SHARD_VARIANTS, ids=SHARD_IDS)
def test_shard_index_entry_overlaps_index(tmp_path: Path, location: str, index_crc: bool) -> None:
    store = _sharded(tmp_path, location, index_crc)
    shard = ShardFile(_chunk(store, SHARD_KEY), location, index_crc)
    shard.entries[0][0] = shard.index_start  # a chunk "stored" inside the index itself
    shard.save()
    _assert_raises(store, zd.CodecError, SHARD_KEY)


@pytest.mark.parametrize("location,index_crc", SHARD_VARIANTS, ids=SHARD_IDS)
def test_shard_index_entry_wraps_around(tmp_path: Path, location: str, index_crc: bool) -> None:
    store = _sharded(tmp_path, location, index_crc)
    shard = ShardFile(_chunk(store, SHARD_KEY), location, index_crc)
    shard.entries[1] = [2**64 - 8, 32]  # offset + length wraps to 24
    shard.save()
    _assert_raises(store, zd.CodecError, SHARD_KEY)


@pytest.mark.parametrize("location,index_crc", SHARD_VARIANTS, ids=SHARD_IDS)
def test_shard_index_half_missing_entry(tmp_path: Path, location: str, index_crc: bool) -> None:
    store = _sharded(tmp_path, location, index_crc)
    shard = ShardFile(_chunk(store, SHARD_KEY), location, index_crc)
    shard.entries[0][0] = 2**64 - 1  # offset says "missing", length does not
    shard.save()
    _assert_raises(store, zd.CodecError, SHARD_KEY)


@pytest.mark.parametrize("location", ["start", "end"])
def test_shard_index_checksum_mismatch(tmp_path: Path, location: str) -> None:
    store = _sharded(tmp_path, location, True)
    path = _chunk(store, SHARD_KEY)
    data = bytearray(path.read_bytes())
    pos = 3 if location == "start" else len(data) - 20  # a byte of the index, not of its crc
    data[pos] ^= 0x10
    path.write_bytes(bytes(data))
    _assert_raises(store, zd.ChecksumError, SHARD_KEY)


@pytest.mark.parametrize("location,index_crc", SHARD_VARIANTS, ids=SHARD_IDS)
def test_truncated_shard(tmp_path: Path, location: str, index_crc: bool) -> None:
    store = _sharded(tmp_path, location, index_crc)
    path = _chunk(store, SHARD_KEY)
    data = path.read_bytes()
    path.write_bytes(data[: N_INNER * 16 - 3] if location == "start" else data[-(N_INNER * 16 - 3):])
    _assert_raises(store, zd.CodecError, SHARD_KEY)


def test_inner_chunk_checksum_mismatch(tmp_path: Path) -> None:
    store = _sharded(tmp_path, "end", True, [bytes_codec(DTYPE), ZSTD, CRC])
    shard = ShardFile(_chunk(store, SHARD_KEY), "end", True)
    offset, length = shard.entries[1]
    shard.data[offset + length - 6] ^= 0x01  # inside the inner chunk's zstd frame, before its crc
    shard.path.write_bytes(bytes(shard.data))
    _assert_raises(store, zd.ChecksumError, SHARD_KEY)


def test_inner_chunk_wrong_size(tmp_path: Path) -> None:
    """An index that is consistent but whose inner chunk is too short for the inner chunk shape."""
    store = _sharded(tmp_path, "end", True)
    shard = ShardFile(_chunk(store, SHARD_KEY), "end", True)
    shard.entries[0][1] -= 4
    shard.save()
    _assert_raises(store, zd.CodecError, SHARD_KEY)


# ----------------------------------------------------------------------------------------------
# Zarr v2 chunks


def test_v2_corrupt_chunk(tmp_path: Path) -> None:
    store = tmp_path / "store"
    g = zarr.create_group(str(store), zarr_format=2).create_group("grp")
    z = g.create_array("bad_arr", shape=SHAPE, chunks=CHUNKS, dtype=DTYPE, compressors=numcodecs.Zlib(level=1))
    z[...] = np.arange(48, dtype=np.int32).reshape(SHAPE) + 1
    (store / ARRAY_PATH / "1.1").write_bytes(b"not zlib at all" * 3)
    _assert_raises(store, zd.CodecError, "1.1")


def test_v2_uncompressed_chunk_wrong_length(tmp_path: Path) -> None:
    store = tmp_path / "store"
    g = zarr.create_group(str(store), zarr_format=2).create_group("grp")
    z = g.create_array("bad_arr", shape=SHAPE, chunks=CHUNKS, dtype=DTYPE, compressors=None)
    z[...] = np.arange(48, dtype=np.int32).reshape(SHAPE) + 1
    path = store / ARRAY_PATH / "1.1"
    path.write_bytes(path.read_bytes()[:-4])
    _assert_raises(store, zd.CodecError, "1.1")


# ----------------------------------------------------------------------------------------------
# Bad metadata


def _open_and_read(store: Path) -> Any:
    return zd.open_array(str(store), path=ARRAY_PATH)[...]


def _edit_metadata(store: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    path = store / ARRAY_PATH / "zarr.json"
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))


@pytest.mark.parametrize(
    "label,edit",
    [
        ("unknown_codec", lambda m: m["codecs"].append({"name": "no_such_codec", "configuration": {}})),
        ("unknown_serializer", lambda m: m["codecs"].__setitem__(0, {"name": "vlen-bytes"})),
        ("unknown_dtype", lambda m: m.__setitem__("data_type", "float128x")),
        ("negative_shape", lambda m: m.__setitem__("shape", [-1, 6])),
        ("shape_product_overflows_int64", lambda m: m.__setitem__("shape", [2**32, 2**32])),
        ("shape_dim_overflows_int64", lambda m: m.__setitem__("shape", [2**63, 6])),
        ("zero_chunk_dim", lambda m: m["chunk_grid"]["configuration"].__setitem__("chunk_shape", [0, 3])),
        ("chunk_rank_mismatch", lambda m: m["chunk_grid"]["configuration"].__setitem__("chunk_shape", [4])),
        ("unknown_chunk_grid", lambda m: m["chunk_grid"].__setitem__("name", "rectilinear_v9")),
        ("unknown_chunk_key_encoding", lambda m: m["chunk_key_encoding"].__setitem__("name", "v7")),
        ("no_serializer", lambda m: m.__setitem__("codecs", [ZSTD])),
        ("bad_zstd_config", lambda m: m["codecs"][1]["configuration"].__setitem__("level", "high")),
        ("bad_fill_value", lambda m: m.__setitem__("fill_value", "lots")),
        ("transpose_not_a_permutation", lambda m: m["codecs"].insert(0, {"name": "transpose", "configuration": {"order": [0, 0]}})),
        ("zarr_format_4", lambda m: m.__setitem__("zarr_format", 4)),
        ("unsupported_storage_transformer", lambda m: m.__setitem__("storage_transformers", [{"name": "magic"}])),
    ],
)
def test_bad_metadata(tmp_path: Path, label: str, edit: Callable[[dict[str, Any]], None]) -> None:
    store = _make(tmp_path, CHAINS["zstd"])
    _edit_metadata(store, edit)
    err = _assert_raises(store, zd.FormatError, None, _open_and_read)
    assert isinstance(err, ValueError)


def test_metadata_not_json(tmp_path: Path) -> None:
    store = _make(tmp_path, CHAINS["zstd"])
    (store / ARRAY_PATH / "zarr.json").write_text('{"zarr_format": 3, "node_type": "array", "shape": [8, ')
    _assert_raises(store, zd.FormatError, None, _open_and_read)


def test_v2_unknown_compressor(tmp_path: Path) -> None:
    store = tmp_path / "store"
    g = zarr.create_group(str(store), zarr_format=2).create_group("grp")
    g.create_array("bad_arr", shape=SHAPE, chunks=CHUNKS, dtype=DTYPE, compressors=numcodecs.Zlib(level=1))
    path = store / ARRAY_PATH / ".zarray"
    meta = json.loads(path.read_text())
    meta["compressor"] = {"id": "no_such_compressor"}
    path.write_text(json.dumps(meta))
    _assert_raises(store, zd.FormatError, None, _open_and_read)


def test_v2_unknown_dtype(tmp_path: Path) -> None:
    store = tmp_path / "store"
    g = zarr.create_group(str(store), zarr_format=2).create_group("grp")
    g.create_array("bad_arr", shape=SHAPE, chunks=CHUNKS, dtype=DTYPE)
    path = store / ARRAY_PATH / ".zarray"
    meta = json.loads(path.read_text())
    meta["dtype"] = "<q9"
    path.write_text(json.dumps(meta))
    _assert_raises(store, zd.FormatError, None, _open_and_read)


# ----------------------------------------------------------------------------------------------
# Usage errors


def test_missing_node(tmp_path: Path) -> None:
    store = _make(tmp_path, CHAINS["zstd"])
    with pytest.raises(zd.NodeNotFoundError) as info:
        zd.open_array(str(store), path="grp/nothing_here")
    assert isinstance(info.value, FileNotFoundError)
    assert "grp/nothing_here" in str(info.value)
    with pytest.raises(zd.NodeNotFoundError):
        zd.open(str(tmp_path / "no_store_at_all"))


@pytest.mark.parametrize(
    "sel",
    [(8, 0), (-9, 0), (0, 6), (0, -7), (0, 0, 0), (slice(None, None, -1),), (slice(None, None, 0),)],
    ids=["row_past_end", "row_before_start", "col_past_end", "col_before_start", "too_many", "negative_step", "zero_step"],
)
def test_bad_selection(tmp_path: Path, sel: Any) -> None:
    store = _make(tmp_path, CHAINS["zstd"])
    arr = zd.open_array(str(store), path=ARRAY_PATH, mode="r+")
    with pytest.raises(zd.SelectionError) as info:
        arr[sel]
    assert isinstance(info.value, IndexError)
    with pytest.raises(zd.SelectionError):
        arr[sel] = 1


def test_write_wrong_shape(tmp_path: Path) -> None:
    store = _make(tmp_path, CHAINS["zstd"])
    arr = zd.open_array(str(store), path=ARRAY_PATH, mode="r+")
    before = np.asarray(arr[...]).copy()
    with pytest.raises((zd.UsageError, zd.SelectionError)):
        arr[0:2, 0:2] = np.zeros((3, 3), dtype=np.int32)
    np.testing.assert_array_equal(arr[...], before)
