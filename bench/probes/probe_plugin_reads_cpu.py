#!/usr/bin/env python
"""A read of many small chunks through the plug-in against zarr-device's own read, on the CPU
(BENCHMARKS.md, "The plug-in on 4 GiB arrays"): 256 MiB of float32 in 4096 uncompressed chunks
of 64 KiB (written once at /tmp/pp.zarr), read whole, best of 5, seconds; then where the plug-in
read's time goes (cProfile of the calling thread).

    python bench/probes/probe_plugin_reads_cpu.py
"""

import cProfile
import os
import pstats
import time

import numpy as np
import zarr

import zarr_device as zd

p = "/tmp/pp.zarr"
if not os.path.exists(p):
    a = zd.create(p, shape=(4096 * 8, 2048), dtype="float32", chunks=(8, 2048), compressors=None, mode="w")
    a[...] = np.random.default_rng(0).standard_normal((4096 * 8, 2048)).astype("float32")
za = zd.open_array(p)


def best(f, n=5):
    t = []
    for _ in range(n):
        s = time.perf_counter()
        f()
        t.append(time.perf_counter() - s)
    return min(t)


print("own", best(lambda: za.read(device="cpu")))
with zd.enable(device="cpu", like="numpy"):
    z = zarr.open_array(p)
    print("plugin", best(lambda: z[:]))
    cProfile.run("z[:]", "/tmp/pp.prof")
pstats.Stats("/tmp/pp.prof").sort_stats("cumulative").print_stats(30)
