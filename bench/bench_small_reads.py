#!/usr/bin/env python
"""Single-chunk reads, one thread and many at once: what Dask's per-chunk tasks and a loop over
small selections do. A float32 array as zarr-python writes it (zstd level 1, no checksum: decoded
on CPU threads under the default gpu_decode="checked") and the same chunks uncompressed, each
chunk read on its own by 1, 4 and 16 threads, onto the CPU and onto the GPU; beside them the same
array in one call, through the zarr-python plug-in, and through Dask with one block per chunk.

    python bench/bench_small_reads.py [--size 512MiB] [--layout unsharded:1MiB] [--device cuda:0]
        [--checksum]

--checksum writes zstd + crc32c (which reads onto the GPU may decode there under "checked").
--device cpu reads into NumPy only (no CuPy needed): the engine's reads, the plug-in's
(``zarr.open_array(p)[rows]`` under ``enable(like="numpy")``) and Dask's.

Prints GB/s (decoded bytes per second, 10^9), best of --repeat, warm (the files are read once
before any figure), and each way's median latency of one read on one thread.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_common import parse_size  # noqa: E402
from bench_plugin import parse_layout, write_group  # noqa: E402


def timed_rounds(read: Callable[[Any], Any], selections: list[Any], threads: int, sync: Callable[[], None],
                 repeat: int) -> float:
    """Best seconds of `repeat` rounds reading every selection on `threads` threads."""
    read(selections[0])
    sync()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        if threads == 1:
            for s in selections:
                read(s)
        else:
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(read, selections))
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


def median_latency(read: Callable[[Any], Any], selections: list[Any], sync: Callable[[], None]) -> float:
    times = []
    for s in selections[:64]:
        t0 = time.perf_counter()
        read(s)
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=512 << 20)
    parser.add_argument("--layout", default="unsharded:1MiB", help="unsharded:CHUNK or sharded:CHUNK/SHARD")
    parser.add_argument("--out", default="/tmp/zd-bench-small-reads", help="where the arrays are (written when absent)")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--threads", default="1,4,16")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--engine-only", action="store_true", help="leave out the plug-in and Dask")
    parser.add_argument("--checksum", action="store_true", help="zstd + crc32c instead of zstd alone")
    args = parser.parse_args(argv)

    import zarr

    import zarr_device as zd

    layout = parse_layout(args.layout, args.size)
    name = args.layout.replace(":", "-").replace("/", "-") + ("-crc32c" if args.checksum else "")
    path = write_group(os.path.join(args.out, name), layout, 1, args.checksum)
    compressed = zd.open_array(path)
    plain_path = path + "-plain"
    if not os.path.exists(os.path.join(plain_path, "zarr.json")):
        plain = zd.create(plain_path, shape=compressed.shape, dtype="float32", chunks=compressed.chunks,
                          compressors=None, mode="w")
        plain[...] = compressed.read()
    plain = zd.open_array(plain_path)
    rows = compressed.chunks[0]
    selections = [slice(i * rows, (i + 1) * rows) for i in range(compressed.shape[0] // rows)]
    nbytes = len(selections) * rows * compressed.shape[1] * 4
    device = args.device
    on_gpu = device != "cpu"
    like = "cupy" if on_gpu else "numpy"
    where = "GPU" if on_gpu else "CPU"

    def sync() -> None:
        if on_gpu:
            import cupy

            cupy.cuda.Device(int(device.partition(":")[2] or 0)).synchronize()

    print(f"array: {compressed.shape} float32, chunks of {rows} rows ({args.layout}), {nbytes / 2**20:.0f} MiB; "
          f"{len(selections)} single-chunk reads a round; {os.cpu_count()} cores", flush=True)
    codec = "zstd+crc32c" if args.checksum else "zstd"
    ways: dict[str, Callable[[Any], Any]] = {
        f"{codec}, CPU": lambda s: compressed.read(s),
        "uncompressed, CPU": lambda s: plain.read(s),
    }
    if on_gpu:
        ways[f"{codec}, GPU"] = lambda s: compressed.read(s, device=device, like="cupy")
        ways["uncompressed, GPU"] = lambda s: plain.read(s, device=device, like="cupy")
    with zd.enable(device=device, like=like):
        through_zarr = zarr.open_array(path, mode="r")
        plain_through_zarr = zarr.open_array(plain_path, mode="r")
        if not args.engine_only:
            ways[f"{codec}, {where}, plug-in"] = lambda s: through_zarr[s]
            ways[f"uncompressed, {where}, plug-in"] = lambda s: plain_through_zarr[s]
        for way, read in ways.items():
            latency = median_latency(read, selections, sync)
            figures = [f"{nbytes / timed_rounds(read, selections, int(t), sync, args.repeat) / 1e9:6.2f}"
                       for t in args.threads.split(",")]
            print(f"{way:28s} median {1e3 * latency:6.3f} ms; GB/s with {args.threads} threads: "
                  + " / ".join(figures), flush=True)
    best = timed_rounds(lambda _: compressed.read(device=device, like=like), [None], 1, sync, 3)
    print(f"{codec + f', {where}, one call':28s} {nbytes / best / 1e9:6.2f} GB/s", flush=True)
    if args.engine_only:
        return 0
    try:
        import dask.array as da
    except ImportError:
        print("dask: not installed")
        return 0
    for plugin in (False, True):
        def compute() -> Any:
            if plugin:
                with zd.enable(device=device, like=like):
                    return da.from_zarr(zarr.open_array(path, mode="r")).compute()
            return da.from_zarr(zarr.open_array(path, mode="r")).compute()

        seconds = timed_rounds(lambda _: compute(), [None], 1, sync, args.repeat)
        print(f"dask, a block per chunk, plug-in {'on ' if plugin else 'off'}: {nbytes / seconds / 1e9:6.2f} GB/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
