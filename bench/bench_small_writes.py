#!/usr/bin/env python
"""Single-chunk writes, one thread and many at once: what Dask's ``to_zarr`` tasks and a loop
that writes rows do. Each chunk of a float32 array (uncompressed, and zstd level 1 as zarr-python
writes it) is written on its own, by 1 and N threads, through zarr-device's own API
(``a.write(rows, v)``), through the zarr-python plug-in (``z[rows] = v`` under ``enable()``) and
through zarr-python alone; on the CPU from NumPy values, or with ``--device cuda:0`` from CuPy
values (zarr-python alone is then left out: it writes host buffers only).

    python bench/bench_small_writes.py [--size 256MiB] [--chunk-rows 32] [--threads 1,2]
        [--device cpu] [--out /tmp/zd-bench-small-writes]

Prints GB/s (bytes written per second, 10^9), best of --repeat rounds, and the median time of one
write on one thread. Every way's array is read back and compared with the values written.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_common import parse_size  # noqa: E402
from bench_small_reads import median_latency, timed_rounds  # noqa: E402

COLS = 8192


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=256 << 20)
    parser.add_argument("--chunk-rows", type=int, default=32, help="rows of 8192 float32 a chunk (32: 1 MiB)")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="/tmp/zd-bench-small-writes")
    args = parser.parse_args(argv)

    import zarr

    import zarr_device as zd

    on_gpu = args.device != "cpu"
    rows = args.chunk_rows
    total_rows = max(rows, args.size // (COLS * 4) // rows * rows)
    selections = [slice(i, i + rows) for i in range(0, total_rows, rows)]
    nbytes = total_rows * COLS * 4
    host = (np.random.default_rng(0).standard_normal((total_rows, COLS)) * 0.02).astype(np.float16).astype(np.float32)
    if on_gpu:
        import cupy

        with cupy.cuda.Device(int(args.device.partition(":")[2] or 0)):
            values: Any = cupy.asarray(host)

        def sync() -> None:
            cupy.cuda.Device(int(args.device.partition(":")[2] or 0)).synchronize()
    else:
        values = host

        def sync() -> None:
            pass

    like = "cupy" if on_gpu else "numpy"
    print(f"{len(selections)} single-chunk writes of {rows * COLS * 4 / 2**20:g} MiB a round, {nbytes / 2**20:.0f} MiB; "
          f"{os.cpu_count()} cores; values on {args.device}", flush=True)
    codecs: dict[str, Any] = {"uncompressed": None, "zstd": [{"name": "zstd", "configuration": {"level": 1}}]}
    for codec, compressors in codecs.items():
        def fresh(way: str) -> str:
            path = os.path.join(args.out, f"{codec}-{way}.zarr")
            zd.create(path, shape=(total_rows, COLS), dtype="float32", chunks=(rows, COLS),
                      compressors=compressors, mode="w")
            return path

        ways: dict[str, tuple[str, Callable[[slice], Any]]] = {}
        own_path = fresh("own")
        own = zd.open_array(own_path, mode="r+")
        ways["own API a.write"] = (own_path, lambda s: own.write(s, values[s]))
        plugin_path = fresh("plugin")
        with zd.enable(device=args.device, like=like):
            through_plugin = zarr.open_array(plugin_path, mode="r+")
        ways["plug-in z[rows] = v"] = (plugin_path, lambda s: through_plugin.__setitem__(s, values[s]))
        if not on_gpu:
            plain_path = fresh("zarr-python")
            plain = zarr.open_array(plain_path, mode="r+")
            ways["zarr-python z[rows] = v"] = (plain_path, lambda s: plain.__setitem__(s, values[s]))
        for way, (path, write) in ways.items():
            latency = median_latency(write, selections, sync)
            figures = []
            for threads in (int(t) for t in args.threads.split(",")):
                seconds = timed_rounds(write, selections, threads, sync, args.repeat)
                figures.append(f"{nbytes / seconds / 1e9:6.2f}")
            written = zd.open_array(path).read()
            if not np.array_equal(written, host):
                raise SystemExit(f"{codec} {way}: the values read back differ from those written")
            print(f"{codec:12s} {way:26s} median {1e3 * latency:6.3f} ms; GB/s with {args.threads} threads: "
                  + " / ".join(figures), flush=True)
    return 0


if __name__ == "__main__":
    t0 = time.perf_counter()
    code = main()
    print(f"({time.perf_counter() - t0:.0f} s)")
    sys.exit(code)
