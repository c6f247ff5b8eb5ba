#!/usr/bin/env python
"""Where a plug-in read's time goes beside the engine's own read, on a CUDA device with CuPy
(BENCHMARKS.md, "The plug-in on 4 GiB arrays", run 8): 2 GiB of float32 in 1 MiB zstd + crc32c
chunks (written once under /tmp/probe), read whole by zarr-device's API (its own allocation, a
given `out=`) and by `zarr.open_array(p)[:]` with the plug-in on; best of 4 after one untimed
read, milliseconds, the device synchronised around each.

    python bench/probe_plugin_reads.py
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cupy as cp  # noqa: E402
import zarr  # noqa: E402

import zarr_device as zd  # noqa: E402
from bench_gpu import write_array  # noqa: E402
from bench_plugin import parse_layout  # noqa: E402

layout = parse_layout("unsharded:1MiB", 2 << 30)
p = "/tmp/probe/v"
os.makedirs("/tmp/probe", exist_ok=True)
write_array(p, layout, "zstd", 1, checksum=True)


def best(f, n=4):
    f()
    t = []
    for _ in range(n):
        cp.cuda.runtime.deviceSynchronize()
        s = time.perf_counter()
        f()
        cp.cuda.runtime.deviceSynchronize()
        t.append(time.perf_counter() - s)
    return min(t) * 1e3


a = zd.open_array(p)
out = cp.empty(a.shape, dtype=a.dtype)
print("own: open+read %.1f ms" % best(lambda: zd.open_array(p).read(device="cuda:0", like="cupy")))
print("own: read only %.1f ms" % best(lambda: a.read(device="cuda:0", like="cupy")))
print("own: read into cupy out %.1f ms" % best(lambda: a.read(out=out)))
print("own: read [:] into out %.1f ms" % best(lambda: a.read((slice(None), slice(None)), out=out)))
with zd.enable(device="cuda:0", like="cupy"):
    z = zarr.open_array(p)
    print("plugin: open %.1f ms" % best(lambda: zarr.open_array(p)))
    print("plugin: open+read %.1f ms" % best(lambda: zarr.open_array(p)[:]))
    print("plugin: read only %.1f ms" % best(lambda: z[:]))
    print("cupy empty %.1f ms" % best(lambda: cp.empty(a.shape, dtype=a.dtype)))
