#!/usr/bin/env python
"""How fast does the ``compressors="auto"`` checkpoint layout (byte shuffle + zstd level 1 +
crc32c) read onto a GPU, by inner chunk size and by who wrote its frames (nvCOMP, from a GPU
write; libzstd, from a CPU write), beside raw and plain zstd chunks of the same weights?

    python bench/probes/probe_auto_layout.py OUT [GIB] ["LAYOUT,LAYOUT,..."]

The weights are normal(0, 0.02) bf16, [rows, 4096], GIB GiB (default 1), in shards of 64 MiB.
LAYOUT is one of: raw 1M, zstd 1M, auto 64K, auto 128K, auto 256K, auto 512K, auto 1M, auto 2M
(written from the GPU), auto 256K cpu, auto 1M cpu, zstd 1M cpu (written from host memory).
Prints, per layout, its write rate and stored fraction, then the best of 4 warm reads into a CUDA
tensor (after one untimed read), bit-checked against the weights, at the default settings and,
for auto 256K and auto 1M, with 24 staging slots, 8 GiB of decode memory and 2 GiB of staging.
The last read of each runs with ``ZARR_DEVICE_TRACE=1``: the engine's trace of it goes to stderr.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import torch

import zarr_device as zd

COLS = 4096
ROWS_PER_MIB = (1 << 20) // (COLS * 2)
B = {"name": "bytes", "configuration": {"endian": "little"}}
Z = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}
C = {"name": "crc32c"}
S = {"name": "numcodecs.shuffle", "configuration": {"elementsize": 2}}
SHARD = (64 * ROWS_PER_MIB, COLS)
LAYOUTS: dict[str, tuple[list[dict[str, Any]], tuple[int, int], str]] = {
    "raw 1M": ([B, C], (ROWS_PER_MIB, COLS), "gpu"),
    "zstd 1M": ([B, Z, C], (ROWS_PER_MIB, COLS), "gpu"),
    "auto 64K": ([B, S, Z, C], (ROWS_PER_MIB // 16, COLS), "gpu"),
    "auto 128K": ([B, S, Z, C], (ROWS_PER_MIB // 8, COLS), "gpu"),
    "auto 256K": ([B, S, Z, C], (ROWS_PER_MIB // 4, COLS), "gpu"),
    "auto 512K": ([B, S, Z, C], (ROWS_PER_MIB // 2, COLS), "gpu"),
    "auto 1M": ([B, S, Z, C], (ROWS_PER_MIB, COLS), "gpu"),
    "auto 2M": ([B, S, Z, C], (2 * ROWS_PER_MIB, COLS), "gpu"),
    "auto 256K cpu": ([B, S, Z, C], (ROWS_PER_MIB // 4, COLS), "cpu"),
    "auto 1M cpu": ([B, S, Z, C], (ROWS_PER_MIB, COLS), "cpu"),
    "zstd 1M cpu": ([B, Z, C], (ROWS_PER_MIB, COLS), "cpu"),
}
CONFIGS: dict[str, dict[str, Any]] = {"default": {}, "slots24": {"staging_slots": 24},
                                      "decode8G": {"decode_bytes": 8 << 30}, "staging2G": {"staging_bytes": 2 << 30}}


def main() -> None:
    out = sys.argv[1]
    size = int(float(sys.argv[2]) * 2**30) if len(sys.argv) > 2 else 1 << 30
    only = sys.argv[3].split(",") if len(sys.argv) > 3 else list(LAYOUTS)
    rows = size // (COLS * 2)
    g = torch.Generator(device="cuda").manual_seed(0)
    values = (torch.randn(rows, COLS, generator=g, device="cuda") * 0.02).to(torch.bfloat16)
    host = values.cpu()
    defaults = zd.get_config()
    for name in only:
        codecs, chunks, writer = LAYOUTS[name]
        path = os.path.join(out, name.replace(" ", "_"))
        zd.set_config(gpu_encode="on" if writer == "gpu" else "off")
        t = time.perf_counter()
        zd.create(path, shape=(rows, COLS), dtype="bfloat16", chunks=chunks, shards=SHARD, codecs=codecs,
                  mode="w")[...] = values if writer == "gpu" else host
        torch.cuda.synchronize()
        written = time.perf_counter() - t
        zd.set_config(gpu_encode=defaults.gpu_encode)
        stored = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
        print(f"== {name}: written at {size / written / 1e9:.2f} GB/s, stored {stored / size:.3f}", flush=True)
        for cname, cfg in CONFIGS.items():
            if cname != "default" and name not in ("auto 256K", "auto 1M"):
                continue
            zd.set_config(**cfg)
            arr = zd.open_array(path)
            arr.read(device="cuda:0", like="torch")
            best = float("inf")
            for i in range(4):
                torch.cuda.synchronize()
                if i == 3:
                    os.environ["ZARR_DEVICE_TRACE"] = "1"
                t = time.perf_counter()
                got = arr.read(device="cuda:0", like="torch")
                torch.cuda.synchronize()
                best = min(best, time.perf_counter() - t)
                os.environ.pop("ZARR_DEVICE_TRACE", None)
            equal = torch.equal(got.view(torch.int16), values.view(torch.int16))
            print(f"   {cname}: {size / best / 1e9:.2f} GB/s, equal {equal}", flush=True)
            del got
            zd.set_config(staging_slots=defaults.staging_slots, decode_bytes=defaults.decode_bytes,
                          staging_bytes=defaults.staging_bytes)


if __name__ == "__main__":
    main()
