#!/usr/bin/env python
"""A 1 GiB float32 array (64 MiB shards of 256 KiB zstd level 1 + crc32c chunks) written from a
CUDA tensor with the GPU's zstd (gpu_encode="on") and with the CPU's ("off"), each read back to
the GPU (best of 4, checked equal to the tensor); then the CPU-decode read (gpu_decode="off") and
the engine's GPU decode stage alone. Prints each zstd frame's header descriptor byte.

    python bench/probes/gpu_zstd_roundtrip.py
"""
import time, sys
import numpy as np, torch
import zarr_device as zd

inner = [{"name": "bytes", "configuration": {"endian": "little"}},
         {"name": "zstd", "configuration": {"level": 1, "checksum": False}}, {"name": "crc32c"}]
codecs = [{"name": "sharding_indexed", "configuration": {"chunk_shape": [8, 8192], "codecs": inner,
          "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]
t = (torch.randn(32768, 8192, device="cuda:0") * 0.02)
for enc in ("on", "off"):
    zd.set_config(gpu_encode=enc)
    p = f"/tmp/fz-{enc}"
    a = zd.create(p, shape=t.shape, dtype="float32", chunks=(2048, 8192), codecs=codecs, mode="w")
    torch.cuda.synchronize(); s = time.perf_counter(); a[...] = t; w = time.perf_counter() - s
    b = open(f"{p}/c/0/0", "rb").read(8)
    print(enc, "write s", round(w, 3), "GB/s", round(t.numel() * 4 / w / 1e9, 2), "header", b[:4].hex(), "FHD", hex(b[4]))
    r = zd.open_array(p)
    best = 1e9
    for _ in range(4):
        torch.cuda.synchronize(); s = time.perf_counter(); x = r.read(device="cuda:0", like="torch"); torch.cuda.synchronize()
        best = min(best, time.perf_counter() - s)
    print(enc, "read GB/s", round(t.numel() * 4 / best / 1e9, 2), "equal", bool(torch.equal(x, t)))
zd.set_config(gpu_decode="off")
r = zd.open_array("/tmp/fz-off"); best = 1e9
for _ in range(3):
    torch.cuda.synchronize(); s = time.perf_counter(); x = r.read(device="cuda:0", like="torch"); torch.cuda.synchronize()
    best = min(best, time.perf_counter() - s)
print("cpu-decode read GB/s", round(t.numel() * 4 / best / 1e9, 2))
print(zd._core.Array.open(zd.LocalStore("/tmp/fz-off").handle, "").bench_decode_cuda([(0, 1, 32768), (0, 1, 8192)], 0, 3, "checked"))
