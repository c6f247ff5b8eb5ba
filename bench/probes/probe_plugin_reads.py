#!/usr/bin/env python
"""Where a plug-in read's time goes beside the engine's own read, on a CUDA device with CuPy
(BENCHMARKS.md, "The plug-in on 4 GiB arrays"): float32 in 1 MiB zstd + crc32c chunks (written
once under /tmp/probe), read whole by zarr-device's API (its own allocation, a given `out=`, a
fresh `out=` each time, a DeviceArray) and by zarr-python with the plug-in on (`open_array(p)[:]`,
and `z[:]` of an array opened once). The ways take turns, round after round, so that a drift of
the machine falls on all of them alike; each is read once untimed first. Prints each way's best
and median milliseconds (the device synchronised around each read) and GB/s of the best;
--trace then reads each way once more with ZARR_DEVICE_TRACE set (the engine's plan, batches and
waits on stderr).

    python bench/probes/probe_plugin_reads.py [--size 2GiB] [--rounds 6] [--trace]
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/: the shared modules

import cupy as cp  # noqa: E402
import zarr  # noqa: E402

import zarr_device as zd  # noqa: E402
from bench_common import parse_size, write_array  # noqa: E402
from bench_plugin import parse_layout  # noqa: E402

parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
parser.add_argument("--size", type=parse_size, default=2 << 30)
parser.add_argument("--rounds", type=int, default=6)
parser.add_argument("--trace", action="store_true")
args = parser.parse_args()

layout = parse_layout("unsharded:1MiB", args.size)
p = f"/tmp/probe/v{args.size >> 20}"
os.makedirs("/tmp/probe", exist_ok=True)
write_array(p, layout, "zstd", 1, checksum=True)

a = zd.open_array(p)
out = cp.empty(a.shape, dtype=a.dtype)
zd.enable(device="cuda:0", like="cupy")  # on for the rest: the engine's own reads do not see it
z = zarr.open_array(p)
ways = {
    "own: open + read (like=cupy)": lambda: zd.open_array(p).read(device="cuda:0", like="cupy"),
    "own: read (like=cupy)": lambda: a.read(device="cuda:0", like="cupy"),
    "own: read into one out=": lambda: a.read(out=out),
    "own: read into a fresh out=": lambda: a.read(out=cp.empty(a.shape, dtype=a.dtype)),
    "own: read (DeviceArray)": lambda: a.read(device="cuda:0"),
    "plug-in: open_array(p)[:]": lambda: zarr.open_array(p)[:],
    "plug-in: z[:]": lambda: z[:],
    "cupy.empty alone": lambda: cp.empty(a.shape, dtype=a.dtype),
}
times: dict[str, list[float]] = {name: [] for name in ways}
for f in ways.values():
    f()
for _ in range(args.rounds):
    for name, f in ways.items():
        cp.cuda.runtime.deviceSynchronize()
        s = time.perf_counter()
        f()
        cp.cuda.runtime.deviceSynchronize()
        times[name].append(time.perf_counter() - s)
print(f"{args.size / 2**30:g} GiB of 1 MiB zstd + crc32c chunks, {args.rounds} rounds")
for name, t in times.items():
    print(f"{name:32s} best {min(t) * 1e3:7.1f} ms  median {statistics.median(t) * 1e3:7.1f} ms  "
          f"{args.size / min(t) / 1e9:6.2f} GB/s")
if args.trace:
    os.environ["ZARR_DEVICE_TRACE"] = "1"
    for name, f in ways.items():
        print(f"-- {name}", file=sys.stderr, flush=True)
        f()
        cp.cuda.runtime.deviceSynchronize()
