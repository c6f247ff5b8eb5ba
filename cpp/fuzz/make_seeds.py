#!/usr/bin/env python3
"""Seed corpora for the libFuzzer targets in cpp/fuzz (called by scripts/fuzz.sh).

Reads each target's table (written by the target itself: ZARR_DEVICE_FUZZ_TABLE=<file>) and
writes, per target, seed inputs in that target's input layout:

* from the golden files of python/tests/golden (written by zarr-python and tensorstore): metadata
  documents for fuzz_metadata, stored chunks and shards for the decoding targets, prefixed with
  the selector of every table entry whose codecs they fit;
* chunks encoded by zarr-python / numcodecs (when importable) for every table entry, so that the
  fuzzer starts from valid data written by an independent implementation;
* metadata documents made from the tables' entries (v3) and one Zarr v2 document per compressor;
* decompression bombs for the table entries that stack compressors: a few KiB that the outer
  compressor expands to hundreds of MiB before the inner one sees it (the known weak spot).

Seeds longer than --max-len for their target are left out. Nothing here needs more than the
standard library; zarr-python, numcodecs, numpy and google-crc32c are used when present.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import sys
import tempfile
import warnings
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable

COMPRESSORS = {"zstd", "gzip", "numcodecs.zstd", "numcodecs.gzip", "numcodecs.zlib"}
ARRAY_TO_ARRAY = {"transpose"}
ARRAY_TO_BYTES = {"bytes", "sharding_indexed"}


def log(message: str) -> None:
    print(f"make_seeds: {message}", file=sys.stderr)


class SeedWriter:
    """Writes seeds of one target, named by their content, skipping those over max_len."""

    def __init__(self, directory: Path, max_len: int) -> None:
        self.directory = directory
        self.max_len = max_len
        self.count = 0
        self.too_long = 0
        directory.mkdir(parents=True, exist_ok=True)

    def add(self, prefix: str, data: bytes) -> None:
        if len(data) > self.max_len:
            self.too_long += 1
            return
        name = f"{prefix}_{hashlib.sha1(data).hexdigest()[:12]}"
        (self.directory / name).write_bytes(data)
        self.count += 1


# --- optional third-party encoders -----------------------------------------------------------


def try_import(name: str) -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return __import__(name)
    except Exception:  # noqa: BLE001 - any failure means "not available"
        return None


np = try_import("numpy")
zarr = try_import("zarr")
numcodecs = try_import("numcodecs")
google_crc32c = try_import("google_crc32c")


def crc32c(data: bytes) -> int | None:
    if google_crc32c is not None:
        return int(google_crc32c.value(data))
    if numcodecs is not None:
        try:
            codec = numcodecs.get_codec({"id": "crc32c"})
            return int(struct.unpack("<I", bytes(codec.encode(data))[-4:])[0])
        except Exception:  # noqa: BLE001
            return None
    return None


def numpy_dtype(name: str) -> Any:
    if np is None:
        return None
    try:
        return np.dtype(name)
    except TypeError:
        ml = try_import("ml_dtypes")
        return np.dtype(getattr(ml, name)) if ml is not None and hasattr(ml, name) else None


def sample(shape: list[int], dtype: Any, fill: Any, kind: int, seed: int) -> Any:
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape)) if shape else 1
    if kind == 0:
        raw = rng.integers(0, 256, size=n * dtype.itemsize, dtype=np.uint8)
        values = raw.view(dtype)
        if dtype.kind == "b":
            values = rng.integers(0, 2, size=n).astype(dtype)
    elif kind == 1:
        values = (np.arange(n) % 13).astype(dtype)
    else:
        values = np.full(n, fill_scalar(fill, dtype), dtype=dtype)
        values[n // 2] = np.array(1).astype(dtype)
    return values.reshape(shape)


def fill_scalar(fill: Any, dtype: Any) -> Any:
    if isinstance(fill, list):
        return complex(float(fill[0]), float(fill[1]))
    if isinstance(fill, str):
        return float(fill.replace("Infinity", "inf"))
    return fill


def array_document(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": entry["shape"],
        "data_type": entry["data_type"],
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": entry["shape"]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": entry["fill_value"],
        "codecs": entry["codecs"],
        "attributes": {},
    }


def encode_with_zarr(entry: dict[str, Any], kinds: Iterable[int]) -> list[bytes]:
    """The one chunk of an array whose chunk is the entry's, written by zarr-python."""
    if zarr is None or np is None:
        return []
    dtype = numpy_dtype(entry["data_type"])
    if dtype is None:
        return []
    chunks: list[bytes] = []
    for kind in kinds:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                Path(tmp, "zarr.json").write_text(json.dumps(array_document(entry)))
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with zarr.config.set({"array.write_empty_chunks": True}):
                        array = zarr.open_array(tmp, mode="r+")
                        array[...] = sample(entry["shape"], dtype, entry["fill_value"], kind, kind)
            except Exception as e:  # noqa: BLE001 - zarr-python lacks some types and codecs
                log(f"zarr-python cannot write '{entry['label']}': {type(e).__name__}: {e}")
                return chunks
            for root, _, files in os.walk(tmp):
                for f in files:
                    if f != "zarr.json":
                        chunks.append(Path(root, f).read_bytes())
    return chunks


# --- decompression bombs ---------------------------------------------------------------------

BOMB_BYTES = {"zstd": 320 << 20, "deflate": 1 << 30}


def deflate_stream(size: int, wbits: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, wbits)
    zeros = bytes(1 << 20)
    parts = [compressor.compress(zeros) for _ in range(size >> 20)]
    parts.append(compressor.flush())
    return b"".join(parts)


def zstd_encode(data: bytes) -> bytes | None:
    if numcodecs is None:
        return None
    return bytes(numcodecs.Zstd(level=19).encode(data))


def encode_stage(name: str, data: bytes) -> bytes | None:
    if name in ("zstd", "numcodecs.zstd"):
        return zstd_encode(data)
    if name in ("gzip", "numcodecs.gzip"):
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if name == "numcodecs.zlib":
        return zlib.compress(data, 9)
    if name == "crc32c":
        crc = crc32c(data)
        return None if crc is None else data + struct.pack("<I", crc)
    return None


def bomb_for(b2b: list[str]) -> bytes | None:
    """Stored bytes for a chain of bytes->bytes codecs `b2b` (in metadata order) whose stage 1
    (the first decoded without a known size) expands to a few hundred MiB or more."""
    if len(b2b) < 2 or b2b[0] not in COMPRESSORS or b2b[1] not in COMPRESSORS:
        return None
    if b2b[1] in ("zstd", "numcodecs.zstd"):
        data = zstd_encode(bytes(BOMB_BYTES["zstd"]))
    else:
        data = deflate_stream(BOMB_BYTES["deflate"], 15 if b2b[1] == "numcodecs.zlib" else 31)
    for name in b2b[2:]:
        if data is None:
            return None
        data = encode_stage(name, data)
    return data


def split_chain(codecs: list[Any]) -> tuple[list[str], str | None, list[str]]:
    names = [c if isinstance(c, str) else c["name"] for c in codecs]
    for i, n in enumerate(names):
        if n in ARRAY_TO_BYTES:
            return names[:i], n, names[i + 1 :]
    return names, None, []


def shard_around(entry: dict[str, Any], inner_chunk: bytes) -> bytes | None:
    """A shard of `entry` (one sharding_indexed codec) holding `inner_chunk` as its first inner
    chunk and no other."""
    config = entry["codecs"][0]["configuration"]
    count = 1
    for s, c in zip(entry["shape"], config["chunk_shape"]):
        count *= s // c
    index_codecs = [c if isinstance(c, str) else c["name"] for c in config["index_codecs"]]
    endian = ">" if any(
        isinstance(c, dict) and c.get("configuration", {}).get("endian") == "big"
        for c in config["index_codecs"]
    ) else "<"
    at_start = config.get("index_location", "end") == "start"
    index_size = 16 * count + 4 * index_codecs.count("crc32c")
    offset = index_size if at_start else 0
    missing = 2**64 - 1
    entries = [(offset, len(inner_chunk))] + [(missing, missing)] * (count - 1)
    index = b"".join(struct.pack(endian + "QQ", o, n) for o, n in entries)
    for name in index_codecs[1:]:
        encoded = encode_stage(name, index)
        if encoded is None:
            return None
        index = encoded
    return index + inner_chunk if at_start else inner_chunk + index


# --- golden files ----------------------------------------------------------------------------


def golden_nodes(golden: Path) -> Iterable[tuple[Path, dict[str, Any], str]]:
    for root, dirs, files in os.walk(golden):
        dirs.sort()
        if "zarr.json" in files:
            yield Path(root), json.loads(Path(root, "zarr.json").read_text()), "v3"
        elif ".zarray" in files:
            yield Path(root), json.loads(Path(root, ".zarray").read_text()), "v2"


def chunk_files(node: Path, limit: int) -> list[Path]:
    found = []
    for root, dirs, files in os.walk(node):
        dirs.sort()
        for f in sorted(files):
            if f in ("zarr.json", ".zarray", ".zattrs", ".zgroup"):
                continue
            found.append(Path(root, f))
    return found[:limit]


def v2_codecs(zarray: dict[str, Any]) -> list[dict[str, Any]]:
    codecs: list[dict[str, Any]] = [{"name": "bytes"}]
    compressor = zarray.get("compressor")
    if compressor:
        config = {k: v for k, v in compressor.items() if k != "id"}
        codecs.append({"name": "numcodecs." + compressor["id"], "configuration": config})
    return codecs


def plain_chunk_size(doc: dict[str, Any], version: str, codecs: list[Any]) -> int:
    """The size the last bytes->bytes codec decodes to, when that is the chunk's raw size."""
    a2a, a2b, b2b = split_chain(codecs)
    if a2b != "bytes" or len(b2b) != 1:
        return 0
    if version == "v3":
        shape = doc["chunk_grid"]["configuration"]["chunk_shape"]
        dtype = numpy_dtype(doc["data_type"])
    else:
        shape = doc["chunks"]
        dtype = numpy_dtype(doc["dtype"]) if np is not None else None
    if dtype is None:
        return 0
    n = dtype.itemsize
    for s in shape:
        n *= s
    return n if n < 65536 else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", type=Path, required=True, help="folder of <target>.json")
    parser.add_argument("--golden", type=Path, help="python/tests/golden")
    parser.add_argument("--out", type=Path, required=True, help="seeds go to OUT/<target>/")
    parser.add_argument("--max-len", action="append", default=[], metavar="TARGET=N")
    parser.add_argument("--no-bombs", action="store_true", help="leave out decompression bombs")
    parser.add_argument("--only", help="space-separated targets to write seeds for (default: all)")
    args = parser.parse_args()

    max_len = {k: int(v) for k, v in (item.split("=", 1) for item in args.max_len)}
    tables = {p.stem: json.loads(p.read_text()) for p in sorted(args.tables.glob("*.json"))}
    wanted = set(args.only.split()) if args.only else set(tables)
    writers = {t: SeedWriter(args.out / t, max_len.get(t, 1 << 20)) for t in tables if t in wanted}
    entries = {t: tables[t]["entries"] for t in tables}

    def selectors(target: str, predicate: Callable[[dict[str, Any]], bool]) -> list[int]:
        return [i for i, e in enumerate(entries.get(target, [])) if predicate(e)]

    if numcodecs is None or zarr is None:
        log("zarr-python/numcodecs not importable: only golden and engine-made seeds")

    # Table entries encoded by zarr-python, and their metadata documents.
    for target in ("fuzz_codec_chain", "fuzz_shard_index"):
        for i, entry in enumerate(entries.get(target, [])):
            if target in writers:
                for chunk in encode_with_zarr(entry, (0, 1, 2)):
                    writers[target].add(f"zarr_python_{i}", bytes([i, 0x11]) + chunk)
            if "fuzz_metadata" in writers:
                text = json.dumps(array_document(entry)).encode()
                writers["fuzz_metadata"].add("table", b"\x00" + text)
    for i, entry in enumerate(entries.get("fuzz_decoders", []) if "fuzz_decoders" in writers else []):
        as_array = {
            "label": entry["label"],
            "shape": [1024],
            "data_type": "uint8",
            "fill_value": 0,
            "codecs": [{"name": "bytes"}, {"name": entry["name"],
                                           "configuration": entry["configuration"]}],
        }
        for chunk in encode_with_zarr(as_array, (0, 1)):
            writers["fuzz_decoders"].add(f"zarr_python_{i}", bytes([i]) + struct.pack("<H", 1024)
                                         + chunk)

    # Zarr v2 documents, one per compressor.
    if "fuzz_metadata" in writers:
        compressors = [None, {"id": "zlib", "level": 1}, {"id": "gzip", "level": 5},
                       {"id": "zstd", "level": 3, "checksum": True}, {"id": "lz4", "acceleration": 1},
                       {"id": "blosc", "cname": "lz4hc", "clevel": 9, "shuffle": 2,
                        "blocksize": 0}]
        for j, compressor in enumerate(compressors):
            zarray = {"zarr_format": 2, "shape": [9, 4, 3], "chunks": [4, 4, 2],
                      "dtype": ["<i2", ">f4", "|u1", "<c8", ">u8", "|b1"][j],
                      "compressor": compressor, "fill_value": 0, "order": "CF"[j % 2],
                      "filters": None, "dimension_separator": "./"[j % 2]}
            text = json.dumps(zarray).encode()
            writers["fuzz_metadata"].add("v2", b"\x01" + text)
            writers["fuzz_metadata"].add("v2_attrs", b"\x03" + text + b"\x00{\"a\": 1}")

    # Decompression bombs for stacked compressors.
    if not args.no_bombs:
        for target in ("fuzz_codec_chain", "fuzz_shard_index"):
            for i, entry in enumerate(entries.get(target, []) if target in writers else []):
                codecs = entry["codecs"]
                if target == "fuzz_shard_index":
                    codecs = codecs[0]["configuration"]["codecs"]
                _, a2b, b2b = split_chain(codecs)
                if a2b != "bytes":
                    continue
                bomb = bomb_for(b2b)
                if bomb is None:
                    continue
                if target == "fuzz_shard_index":
                    bomb = shard_around(entry, bomb)
                    if bomb is None:
                        continue
                log(f"{target}: decompression bomb of {len(bomb)} bytes for '{entry['label']}'")
                writers[target].add(f"bomb_{i}", bytes([i, 0]) + bomb)

    # Golden files.
    if args.golden is not None and args.golden.is_dir():
        for node, doc, version in golden_nodes(args.golden):
            name = node.name
            if "fuzz_metadata" in writers:
                if version == "v3":
                    text = (node / "zarr.json").read_bytes()
                    writers["fuzz_metadata"].add(f"golden_{name}", b"\x00" + text)
                    writers["fuzz_metadata"].add(f"golden_{name}", b"\x02" + text)
                else:
                    text = (node / ".zarray").read_bytes()
                    attrs = node / ".zattrs"
                    writers["fuzz_metadata"].add(f"golden_{name}", b"\x01" + text)
                    if attrs.exists():
                        writers["fuzz_metadata"].add(
                            f"golden_{name}", b"\x03" + text + b"\x00" + attrs.read_bytes())
            if version == "v3" and doc.get("node_type") != "array":
                continue
            codecs = doc["codecs"] if version == "v3" else v2_codecs(doc)
            a2a, a2b, b2b = split_chain(codecs)
            chunks = [p.read_bytes() for p in chunk_files(node, 4)]
            if a2b == "sharding_indexed" and "fuzz_shard_index" in writers:
                location = codecs[len(a2a)]["configuration"].get("index_location", "end")
                for sel in selectors("fuzz_shard_index", lambda e: e["codecs"][0][
                        "configuration"].get("index_location", "end") == location)[:4]:
                    for chunk in chunks:
                        writers["fuzz_shard_index"].add(f"golden_{name}", bytes([sel, 0]) + chunk)
            if not b2b:
                continue
            last = b2b[-1]
            size = plain_chunk_size(doc, version, codecs)
            if "fuzz_decoders" in writers:
                for sel in selectors("fuzz_decoders", lambda e: e["name"] == last):
                    for chunk in chunks:
                        writers["fuzz_decoders"].add(
                            f"golden_{name}", bytes([sel]) + struct.pack("<H", size) + chunk)
            if "fuzz_codec_chain" in writers:
                for sel in selectors("fuzz_codec_chain",
                                     lambda e: split_chain(e["codecs"])[2][-1:] == [last])[:3]:
                    for chunk in chunks:
                        writers["fuzz_codec_chain"].add(f"golden_{name}", bytes([sel, 0]) + chunk)

    for target, writer in sorted(writers.items()):
        extra = f" ({writer.too_long} over -max_len left out)" if writer.too_long else ""
        log(f"{target}: {writer.count} seeds{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
