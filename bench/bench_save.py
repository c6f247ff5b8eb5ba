#!/usr/bin/env python
"""Saving a model's state dict from GPU tensors, against the disk's write rate, in the same run.

A model-like state dict (bf16 [rows, 4096] tensors of 16-128 MiB adding up to --size, made on the
GPU) is saved by each writer into --out; every save ends with its data on the disk (fsync), and
each is timed from the call to its return:

    disk                one file of the same bytes written from pinned memory in 64 MiB writes
                        and fsynced: the rate the disk takes
    zarr-device         zt.save(state, p): chunks laid out on the GPU, one crossing, fsync, rename
    zarr-device zstd    zt.save(state, p, compressors="zstd"): compressed on the GPU
    zarr-device auto    zt.save(state, p, compressors="auto"): byte-shuffled and compressed on
                        the GPU
    safetensors         safetensors.torch.save_file({k: v.cpu()}) + fsync of the file
    torch.save          torch.save(state, f) + fsync (torch copies GPU tensors to the host)

Reported: GB/s of tensor bytes (10^9/s), each writer over the disk's rate, and the bytes it stored
over the tensors' bytes. Each save is read
back (zt.load / safetensors / torch.load) and compared bit for bit once.

    python bench/bench_save.py --size 6GiB --out /tmp/bs [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_common import MIB, log, machine_info  # noqa: E402
from bench_many import COLS, tensor_rows  # noqa: E402


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def stored_bytes(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def disk_rate(folder: str, nbytes: int) -> float:
    import torch

    block = torch.empty(64 * MIB, dtype=torch.uint8, pin_memory=True)
    view = memoryview(block.numpy())
    path = os.path.join(folder, "disk-probe.bin")
    start = time.perf_counter()
    with open(path, "wb", buffering=0) as f:
        written = 0
        while written < nbytes:
            written += f.write(view)
        os.fsync(f.fileno())
    seconds = time.perf_counter() - start
    os.remove(path)
    return written / seconds / 1e9


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--size", default="6GiB")
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    import torch

    import zarr_device.torch as zt
    from zarr_device.basics.sizes import parse_size

    os.makedirs(args.out, exist_ok=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    state = {f"layer{i:03d}": (torch.randn(n, COLS, generator=g, device="cuda") * 0.02).to(torch.bfloat16)
             for i, n in enumerate(tensor_rows(parse_size(args.size), seed=0))}
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    torch.cuda.synchronize()
    log(f"{len(state)} tensors, {nbytes / 2**30:.2f} GiB on the GPU")

    def zarr_device_save(compressors: Any) -> Callable[[str], None]:
        return lambda p: zt.save(state, p, compressors=compressors, overwrite=True, progress=False)

    def safetensors_save(p: str) -> None:
        from safetensors.torch import save_file

        save_file({k: v.cpu() for k, v in state.items()}, p)
        fsync_path(p)

    def torch_save(p: str) -> None:
        torch.save(state, p)
        fsync_path(p)

    writers: dict[str, tuple[Callable[[str], None], Callable[[str], dict[str, Any]]]] = {
        "zarr-device": (zarr_device_save(None), lambda p: zt.load(p, device="cuda")),
        "zarr-device zstd": (zarr_device_save("zstd"), lambda p: zt.load(p, device="cuda")),
        "zarr-device auto": (zarr_device_save("auto"), lambda p: zt.load(p, device="cuda")),
        "safetensors": (safetensors_save, lambda p: __import__("safetensors.torch").torch.load_file(p, device="cuda")),
        "torch.save": (torch_save, lambda p: torch.load(p, map_location="cuda", weights_only=True)),
    }
    rows = [("disk", max(disk_rate(args.out, nbytes) for _ in range(args.repeat)))]
    stored: dict[str, float] = {}
    for name, (save, load) in writers.items():
        path = os.path.join(args.out, name.replace(" ", "-").replace(".", "-"))
        best = float("inf")
        try:
            for i in range(args.repeat):
                if os.path.isdir(path):
                    shutil.rmtree(path)
                elif os.path.exists(path):
                    os.remove(path)
                torch.cuda.synchronize()
                start = time.perf_counter()
                save(path)
                best = min(best, time.perf_counter() - start)
                if i == 0:
                    back = load(path)
                    for k, v in state.items():
                        if not torch.equal(back[k].view(torch.int16), v.view(torch.int16)):
                            raise AssertionError(f"{name}: tensor {k} read back differs")
                    del back
        except ImportError as e:
            log(f"{name}: skipped ({e})")
            continue
        stored[name] = stored_bytes(path) / nbytes
        rows.append((name, nbytes / best / 1e9))
        log(f"{name}: {rows[-1][1]:.2f} GB/s, stored at {stored[name]:.3f} of raw")
    disk = rows[0][1]
    print(f"\n{'writer':18s} {'GB/s':>7s} {'of disk':>8s} {'stored':>7s}")
    for name, rate in rows:
        print(f"{name:18s} {rate:7.2f} {rate / disk:8.2f} {stored.get(name, 1.0):7.3f}")
    if args.json:
        results = [{"loader": name, "direction": "save", "gbps": rate, "of_disk": rate / disk, "cache": "warm",
                    "stored": stored.get(name, 1.0)} for name, rate in rows]
        with open(args.json, "w") as f:
            json.dump({"machine": machine_info(), "nbytes": nbytes, "repeat": args.repeat, "results": results}, f,
                      indent=1)
    shutil.rmtree(args.out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
