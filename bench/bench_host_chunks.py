#!/usr/bin/env python
"""Host reads by chunk size: one array per chunk size (1-64 MiB by default), written by
zarr-python (float32, its default zstd without a checksum) and by zarr-device (bf16 weights, zstd
+ crc32c), read whole into NumPy by zarr-device and its peers in one process, warm (and, with
--cold, once more after dropping the page cache: root).

    python bench/bench_host_chunks.py --out /tmp/bhc [--size 2GiB] [--chunks 1MiB,4MiB,16MiB,64MiB]
        [--shards 256MiB] [--budgets 256MiB,1GiB] [--readers zarr-device,zarr-python,tensorstore]
        [--repeat 3] [--cold]

With --shards, the chunks are the inner chunks of shards of that size.

zarr-device reads with each in-flight budget of --budgets (``max_inflight_bytes``), into a new
array each time (``a[...]``, as the peers do) and into one it is given (``read(out=)``). Prints
GB/s (decoded bytes, 10^9 per second; best of --repeat after a warm-up read) and each figure's
ratio to the best peer's; every result is compared with zarr-device's first one.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import GIB, MIB, drop_caches, fmt_bytes, machine_info, parse_size  # noqa: E402
from bench_layouts import ZSTD_CRC, weights  # noqa: E402

COLS = 4096


def best_of(read: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    result = read()  # warm: page cache, allocator
    best = float("inf")
    for _ in range(repeat):
        del result
        start = time.perf_counter()
        result = read()
        best = min(best, time.perf_counter() - start)
    return best, result


def write_arrays(out: str, size: int, chunk: int, shard: int) -> dict[str, str]:
    """{"zarr-python": path, "zarr-device": path} of arrays of `size` bytes in `chunk`-byte chunks
    (rows of 4096 elements; inner chunks of `shard`-byte shards unless 0), kept in `out` and
    reused."""
    import zarr
    import zarr_device as zd

    paths = {}
    rows = max(1, size // (COLS * 4))
    chunk_rows = max(1, chunk // (COLS * 4))
    shard_rows = max(chunk_rows, shard // (COLS * 4) // chunk_rows * chunk_rows) if shard else 0
    p = os.path.join(out, f"zarr-python-f32-{rows}-c{chunk_rows}-s{shard_rows}.zarr")
    if not os.path.exists(os.path.join(p, "zarr.json")):
        rng = np.random.default_rng(1)
        a = zarr.create_array(p, shape=(rows, COLS), chunks=(chunk_rows, COLS), dtype="float32",
                              shards=(shard_rows, COLS) if shard else None)
        step = max(chunk_rows * 8, shard_rows)
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            a[start:stop] = rng.standard_normal((stop - start, COLS), dtype=np.float32)
    paths["zarr-python"] = p
    rows = max(1, size // (COLS * 2))
    chunk_rows = max(1, chunk // (COLS * 2))
    shard_rows = max(chunk_rows, shard // (COLS * 2) // chunk_rows * chunk_rows) if shard else 0
    p = os.path.join(out, f"zarr-device-bf16-{rows}-c{chunk_rows}-s{shard_rows}.zarr")
    if not os.path.exists(os.path.join(p, "zarr.json")):
        a = zd.create(p, shape=(rows, COLS), chunks=(chunk_rows, COLS), dtype="bfloat16", compressors=ZSTD_CRC,
                      **({"shards": (shard_rows, COLS)} if shard else {}))
        a[:] = weights(rows)
    paths["zarr-device"] = p
    return paths


def readers(path: str, wanted: Sequence[str], budgets: Sequence[int]) -> list[tuple[str, Callable[[], Any]]]:
    import zarr_device as zd

    found: list[tuple[str, Callable[[], Any]]] = []
    if "zarr-device" in wanted:
        array = zd.open_array(path)
        out = np.empty(array.shape, array.dtype)
        for budget in budgets:
            def fresh(budget: int = budget) -> Any:
                zd.set_config(max_inflight_bytes=budget)
                return array[...]

            def given(budget: int = budget) -> Any:
                zd.set_config(max_inflight_bytes=budget)
                array.read(out=out)
                return out

            found.append((f"zarr-device, budget {fmt_bytes(budget)}", fresh))
            found.append((f"zarr-device, budget {fmt_bytes(budget)}, out=", given))
    if "zarr-python" in wanted:
        import zarr

        zd.register_with_zarr()  # bfloat16
        z = zarr.open_array(path, mode="r")
        found.append(("zarr-python", lambda: z[...]))
    if "tensorstore" in wanted:
        import tensorstore as ts

        store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": path}}).result()
        found.append(("tensorstore", lambda: store.read().result()))
    return found


def cold_read(read: Callable[[], Any]) -> tuple[float, Any]:
    why = drop_caches()
    if why is not None:
        raise SystemExit(f"--cold: {why}")
    start = time.perf_counter()
    result = read()
    return time.perf_counter() - start, result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory for the arrays (reused when present)")
    parser.add_argument("--size", type=parse_size, default=2 * GIB)
    parser.add_argument("--chunks", default="1MiB,4MiB,16MiB,64MiB")
    parser.add_argument("--shards", type=parse_size, default=0, help="shard size (default: unsharded)")
    parser.add_argument("--budgets", default="256MiB,1GiB", help="zarr-device's max_inflight_bytes values")
    parser.add_argument("--readers", default="zarr-device,zarr-python,tensorstore")
    parser.add_argument("--writers", default="zarr-python,zarr-device", help="whose arrays to read")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="also one read after dropping the page cache (root)")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)

    import zarr_device as zd

    os.makedirs(args.out, exist_ok=True)
    budgets = [parse_size(b) for b in args.budgets.split(",")]
    wanted = args.readers.split(",")
    machine = machine_info()
    print(f"machine: {machine['cpu']}; {machine['usable_cores']} cores; zarr-device threads {zd.get_config().threads or 'one per core'}")
    rows: list[tuple[str, str, str, float, float]] = []
    records: list[dict[str, Any]] = []
    previous = zd.get_config().max_inflight_bytes
    try:
        for chunk in (parse_size(c) for c in args.chunks.split(",")):
            paths = write_arrays(args.out, args.size, chunk, args.shards)
            for writer in args.writers.split(","):
                path = paths[writer]
                expected = None
                results: list[tuple[str, float]] = []
                timings: list[tuple[str, Callable[[], tuple[float, Any]]]] = []
                for name, read in readers(path, wanted, budgets):
                    timings.append((name, functools.partial(best_of, read, args.repeat)))
                    if args.cold:
                        timings.append((f"{name}, cold", functools.partial(cold_read, read)))
                for name, timed in timings:
                    seconds, value = timed()
                    value = np.asarray(value)
                    if expected is None:
                        expected = value.copy()
                    elif not np.array_equal(value.view(np.uint8), expected.view(np.uint8)):
                        raise AssertionError(f"{name} read other values from {path}")
                    results.append((name, value.nbytes / seconds / 1e9))
                    print(f"  {fmt_bytes(chunk):>8}  {writer:11}  {name:38} {results[-1][1]:6.2f} GB/s", flush=True)
                    del value
                for cold in (False, True):  # each figure against the best peer read the same way
                    same = [(n, g) for n, g in results if n.endswith(", cold") == cold]
                    peers = [gbps for name, gbps in same if not name.startswith("zarr-device")]
                    best_peer = max(peers) if peers else float("nan")
                    for name, gbps in same:
                        rows.append((fmt_bytes(chunk), writer, name, gbps, gbps / best_peer))
                        records.append({"loader": name.removesuffix(", cold"), "written_by": writer,
                                        "chunk_bytes": chunk, "shard_bytes": args.shards or None, "gbps": gbps,
                                        "cache": "cold" if cold else "warm", "vs_best_peer": gbps / best_peer})
    finally:
        zd.set_config(max_inflight_bytes=previous)
    if args.shards:
        print(f"\nchunks are the inner chunks of shards of {fmt_bytes(args.shards)}")
    print(f"\n{'chunk':>8}  {'written by':11}  {'reader':38} {'GB/s':>6}  vs best peer")
    for chunk_text, writer, name, gbps, ratio in rows:
        print(f"{chunk_text:>8}  {writer:11}  {name:38} {gbps:6.2f}  {ratio:5.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "size": args.size, "repeat": args.repeat, "results": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
