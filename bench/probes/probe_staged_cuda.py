"""Reads through the bounded host staging onto a real accelerator: CUDA driven by torch's copies
(the path Apple MPS, Intel XPU and ROCm devices take, run here as a "framework" device), against
the engine's own CUDA read of the same arrays, bit for bit, at several staging sizes.

    python bench/probes/probe_staged_cuda.py      # writes 24 bf16 tensors (~0.9 GiB) to /tmp/staged_sd.zarr

Prints GB/s (decoded bytes per second, 10^9; best of 3, synchronised) for each staging size and
for the engine's own read, whether read_many's and iter_many's results equal the engine's, and
the process's peak RSS.
"""
import resource
import time

import ml_dtypes
import numpy as np
import torch

import zarr_device as zd
from zarr_device.io.devices import DeviceSpec

root = "/tmp/staged_sd.zarr"
g = zd.create_group(root, mode="w")
rng = np.random.default_rng(0)
for i in range(24):
    rows = int(rng.choice([1024, 2048, 4096, 8192]))
    v = (rng.standard_normal((rows, 4096), dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)
    codecs = [{"name": "zstd", "configuration": {"level": 1}}, {"name": "crc32c"}] if i % 2 else None
    a = g.create_array(f"t{i:02d}", shape=v.shape, dtype="bfloat16", chunks=(512, 4096), compressors=codecs)
    a[...] = v
arrays = zd.open_group(root).all_arrays()
nbytes = sum(a.nbytes for a in (arrays.values() if isinstance(arrays, dict) else arrays))
ref = zd.read_many(arrays, device="cuda:0", like="torch")
torch.cuda.synchronize()
target = DeviceSpec("framework", 0, "cuda:0")
for staging in ["768MiB", "64MiB", "2MiB"]:
    zd.set_config(staging_bytes=staging)
    best = 1e9
    for _ in range(3):
        t = time.perf_counter(); got = zd.read_many(arrays, device=target, like="torch"); torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    same = all(torch.equal(got[k].view(torch.int16), ref[k].view(torch.int16)) for k in ref)
    it = dict(zd.iter_many(arrays, device=target, like="torch")); torch.cuda.synchronize()
    same_iter = all(torch.equal(it[k].view(torch.int16), ref[k].view(torch.int16)) for k in ref)
    print(f"staged onto cuda:0 via torch, staging {staging}: {nbytes/best/1e9:.2f} GB/s, equal to the engine's read: {same}, iter_many equal: {same_iter}", flush=True)
zd.set_config(staging_bytes="768MiB")
best = 1e9
for _ in range(3):
    t = time.perf_counter(); got = zd.read_many(arrays, device="cuda:0", like="torch"); torch.cuda.synchronize()
    best = min(best, time.perf_counter() - t)
print(f"engine's own CUDA read: {nbytes/best/1e9:.2f} GB/s ({nbytes/2**30:.2f} GiB)")
print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024:.0f} MiB")
