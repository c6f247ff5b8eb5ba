#!/usr/bin/env python
"""Where single reads spend their time: a 1 GiB state dict of zstd + crc32c tensors (2 MiB chunks,
bench_many.py's values) read one tensor at a time (three rounds; the third prints the engine's
per-read trace, ZARR_DEVICE_TRACE=1), then in one call (twice, then once traced).

    python bench/trace_reads.py                                  # decode_sharing as configured
    ZARR_DEVICE_DECODE_SHARING=off python bench/trace_reads.py   # every chunk to the GPU
"""


import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch, zarr_device as zd
from bench_many import tensor_rows, write_state_dict
path = "/tmp/trace-zstd"
if not os.path.isdir(path):
    write_state_dict(path, tensor_rows(1 << 30, seed=0), "zstd", 256)
arrays = zd.open_group(path).all_arrays()
nbytes = sum(a.nbytes for a in arrays.values())
for rnd in range(3):
    torch.cuda.synchronize(); t = time.perf_counter()
    if rnd == 2:
        os.environ["ZARR_DEVICE_TRACE"] = "1"
    per = []
    for n, a in arrays.items():
        s = time.perf_counter(); a.read(device="cuda", like="torch"); per.append(time.perf_counter() - s)
    torch.cuda.synchronize(); el = time.perf_counter() - t
    print(f"round {rnd}: one by one {nbytes/el/1e9:.2f} GB/s; per read ms: " + " ".join(f"{p*1e3:.1f}" for p in per[:12]), flush=True)
os.environ.pop("ZARR_DEVICE_TRACE")
for rnd in range(2):
    torch.cuda.synchronize(); t = time.perf_counter()
    zd.read_many(arrays, device="cuda", like="torch"); torch.cuda.synchronize()
    print(f"one call {nbytes/(time.perf_counter()-t)/1e9:.2f} GB/s", flush=True)
os.environ["ZARR_DEVICE_TRACE"] = "1"
zd.read_many(arrays, device="cuda", like="torch"); torch.cuda.synchronize()
