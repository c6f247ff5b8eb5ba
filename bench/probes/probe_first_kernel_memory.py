"""Device memory a read holds beyond its bound (output + staging + decode_bytes), by what ran on the
GPU before it in the process: each case in a fresh process, on one CUDA device.

    python bench/probes/probe_first_kernel_memory.py [--device cuda:0]

The array: 4096 x 4096 float32 in (64, 256) chunks, zstd + crc32c (64 MiB, 1024 chunks); staging
8 MiB in 4 slots, decode_bytes 8 MiB. A warm read of two of its chunks (same codecs and values)
runs first unless the case says otherwise. For each case it prints how far the device's free memory
fell during the measured read, what stays held after the output and then the engine's memory
(`zd.empty_cache`) are freed, and the fall of a second read. The case "torch kernel alone" has no
read: the fall of free memory at the first kernel a process launches.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

MIB = 1 << 20

# case name -> (flags, extra environment)
CASES: dict[str, tuple[str, dict[str, str]]] = {
    "read first (warm read decoded on the CPU)": ("", {}),
    "torch context first, no kernel": ("torch-context", {}),
    "torch kernel first": ("torch-kernel-first", {}),
    "torch kernel after the warm read": ("kernel-after", {}),
    "warm read decoded on the GPU (decode_sharing off)": ("noshare", {}),
    "no warm read": ("nowarm", {}),
    "read first, CUDA_MODULE_LOADING=EAGER": ("", {"CUDA_MODULE_LOADING": "EAGER"}),
    "torch kernel alone": ("kernel-alone", {}),
}


def measure(flags: set[str], device: str) -> dict[str, float]:
    import numpy as np
    import torch

    import zarr_device as zd

    def free() -> int:
        torch.cuda.synchronize(device)
        return int(torch.cuda.mem_get_info(device)[0])

    if "kernel-alone" in flags:
        torch.empty(1, device=device)
        before = free()
        (torch.zeros(1, device=device) + 1).item()
        return {"first_kernel_fall_mib": (before - free()) / MIB}
    folder = Path(tempfile.mkdtemp())
    shape, chunks = (4096, 4096), (64, 256)
    codecs = [{"name": "zstd"}, {"name": "crc32c"}]
    x = np.arange(shape[0] * shape[1], dtype=np.float64).reshape(shape)
    values = np.round(280 + 10 * np.sin(x / 5000), 2).astype(np.float32)
    arr = zd.create(folder / "a", shape=shape, dtype="float32", chunks=chunks, compressors=codecs)
    arr[...] = values
    settings: dict[str, object] = {"staging_bytes": 8 * MIB, "staging_slots": 4, "decode_bytes": 8 * MIB}
    if "noshare" in flags:
        settings["decode_sharing"] = "off"
    zd.set_config(**settings)
    if "torch-context" in flags:
        torch.empty(1, device=device)
    if "torch-kernel-first" in flags:
        torch.zeros(1, device=device)
    if "nowarm" not in flags:
        first = (slice(0, 128), slice(0, 256))
        warm = zd.create(folder / "w", shape=values[first].shape, dtype="float32", chunks=chunks, compressors=codecs)
        warm[...] = values[first]
        got = warm.read(device=device, like="torch")
        assert np.array_equal(got.cpu().numpy(), values[first])
        del got
    if "kernel-after" in flags:
        (torch.zeros(1, device=device) + 1).item()
    gc.collect()
    torch.cuda.empty_cache()
    before = free()
    out = arr.read(device=device, like="torch")
    fall = before - free()
    assert np.array_equal(out.cpu().numpy(), values)
    del out
    gc.collect()
    torch.cuda.empty_cache()
    held_without_output = before - free()
    zd.empty_cache(device)
    held_without_engine = before - free()
    again = free()
    out = arr.read(device=device, like="torch")
    second = again - free()
    return {
        "read_fall_mib": fall / MIB,
        "held_without_output_mib": held_without_output / MIB,
        "held_without_engine_memory_mib": held_without_engine / MIB,
        "second_read_fall_mib": second / MIB,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--case-flags", default=None, help=argparse.SUPPRESS)  # one case, in this process
    args = parser.parse_args()
    if args.case_flags is not None:
        print(json.dumps(measure(set(filter(None, args.case_flags.split("+"))), args.device)))
        return
    print("bound: 64 MiB output + 8 MiB staging + 8 MiB decode_bytes + 2 MiB granularity = 82 MiB")
    print(f"{'case':52} {'read falls':>10} {'held -out':>10} {'held -engine':>13} {'2nd read':>9}")
    for name, (flags, env) in CASES.items():
        done = subprocess.run(
            [sys.executable, __file__, "--device", args.device, "--case-flags", flags],
            capture_output=True, text=True, env={**os.environ, **env}, timeout=300,
        )
        if done.returncode != 0:
            print(f"{name:52} failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        got = json.loads(done.stdout.strip().splitlines()[-1])
        if "first_kernel_fall_mib" in got:
            print(f"{name:52} {got['first_kernel_fall_mib']:>9.0f}M (no read: the first kernel's fall)")
            continue
        print(f"{name:52} {got['read_fall_mib']:>9.0f}M {got['held_without_output_mib']:>9.0f}M "
              f"{got['held_without_engine_memory_mib']:>12.0f}M {got['second_read_fall_mib']:>8.0f}M")


if __name__ == "__main__":
    main()
