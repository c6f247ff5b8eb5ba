#!/usr/bin/env python
"""The layouts of bench/bench_host_writes.cpp written by zarr-device's peers, for a comparison in the
same run: the same uint16 values (normal(0, 0.02) rounded to bfloat16), written whole into a fresh
array by tensorstore and, when it is installed, zarr-python (zstd level 1 + crc32c in 64 MiB
shards of 1 MiB chunks, the same uncompressed, and unsharded 1 MiB and 16 MiB zstd + crc32c
chunks). Prints GB/s (bytes of the array per second, 10^9, best of --repeat, into the page cache).

    python bench/bench_host_writes_peers.py --out /tmp/bhwp [--size 2GiB] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from collections.abc import Callable, Sequence

import numpy as np

COLS = 4096
GIB = 1 << 30


def parse_size(text: str) -> int:
    """'2GiB', '512MiB', '64KiB' or a number of bytes (the peers' run needs no zarr_device)."""
    for suffix, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * scale)
    return int(text)
LAYOUTS = [  # name, chunk rows, shard rows (0: unsharded), zstd
    ("64 MiB shards of 1 MiB chunks, zstd + crc32c", 128, 8192, True),
    ("64 MiB shards of 1 MiB chunks, uncompressed", 128, 8192, False),
    ("1 MiB chunks, zstd + crc32c", 128, 0, True),
    ("16 MiB chunks, zstd + crc32c", 2048, 0, True),
]


def values(rows: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    f = (rng.standard_normal((rows, COLS), dtype=np.float32) * 0.02).view(np.uint32)
    return (f >> 16).astype(np.uint16)


def best_of(write: Callable[[], None], path: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        shutil.rmtree(path, ignore_errors=True)
        start = time.perf_counter()
        write()
        best = min(best, time.perf_counter() - start)
    return best


def tensorstore_writer(path: str, data: np.ndarray, chunk_rows: int, shard_rows: int, zstd: bool) -> Callable[[], None]:
    import tensorstore as ts

    inner: list[dict[str, object]] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if zstd:
        inner += [{"name": "zstd", "configuration": {"level": 1}}, {"name": "crc32c"}]
    codecs = inner
    grid = chunk_rows
    if shard_rows:
        codecs = [{"name": "sharding_indexed",
                   "configuration": {"chunk_shape": [chunk_rows, COLS], "codecs": inner}}]
        grid = shard_rows
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": path},
            "metadata": {"shape": list(data.shape), "data_type": "uint16",
                         "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [grid, COLS]}},
                         "codecs": codecs}}

    def write() -> None:
        store = ts.open(spec, create=True, delete_existing=True).result()
        store[...] = data

    return write


def zarr_python_writer(path: str, data: np.ndarray, chunk_rows: int, shard_rows: int, zstd: bool) -> Callable[[], None]:
    import zarr

    compressors = [zarr.codecs.ZstdCodec(level=1), zarr.codecs.Crc32cCodec()] if zstd else None

    def write() -> None:
        if shard_rows:
            z = zarr.create_array(path, shape=data.shape, dtype="uint16", chunks=(chunk_rows, COLS),
                                  shards=(shard_rows, COLS), compressors=compressors, overwrite=True)
        else:
            z = zarr.create_array(path, shape=data.shape, dtype="uint16", chunks=(chunk_rows, COLS),
                                  compressors=compressors, overwrite=True)
        z[...] = data

    return write


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--size", type=parse_size, default=2 * GIB)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    data = values(max(1, args.size // (COLS * 2)))
    writers: list[tuple[str, Callable[..., Callable[[], None]]]] = []
    for name, make in (("tensorstore", tensorstore_writer), ("zarr-python", zarr_python_writer)):
        try:
            __import__(name.replace("-python", ""))
            writers.append((name, make))
        except ImportError:
            print(f"{name}: not installed, skipped")
    for layout, chunk_rows, shard_rows, zstd in LAYOUTS:
        for name, make in writers:
            path = os.path.join(args.out, name)
            seconds = best_of(make(path, data, chunk_rows, shard_rows, zstd), path, args.repeat)
            print(f"{layout:48} {name:12} {data.nbytes / seconds / 1e9:7.2f} GB/s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
