#!/usr/bin/env python
"""A checkpoint loaded onto several GPUs of one host, in the same run, with the limits beside it.

A model-like state dict (bf16 [rows, 4096] tensors of 16-128 MiB adding up to --size, bench_many.py's
values) is saved once as a zarr-device checkpoint (uncompressed, or zstd + crc32c). Then one process
per GPU (NCCL, --world of them) times, warm (an untimed round fills the page cache first):

    tensor-parallel     zt.load(p, device=cuda:r, shard_plan={"*": 0}, rank=r, world_size=W):
                        each rank reads its 1/W of every tensor (chunk-aligned slices)
    fan-out             zt.load_distributed(p, device=cuda:r): each rank reads about 1/W of the
                        tensors and broadcasts them as they land; every rank ends with all of them
    W full loads        zt.load(p, device=cuda:r) on every rank at once
    one full load       zt.load on rank 0 alone

and the limits: the page cache read by all cores (files held open, threads reading into pinned
memory) and the pinned -> GPU copy of every rank at once. A round's time is the slowest rank's,
from a barrier to its last tensor on its device. Reported: aggregate GB/s (bytes that landed on
all GPUs together, 10^9/s) and the ratios the targets name. Every result is checked against the
full load (per-tensor sums of the bits, on the device).

    python bench/bench_distributed.py --size 6GiB --out /tmp/bd [--codecs none,zstd] [--json d.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_common import GIB, fmt_bytes, log  # noqa: E402
from bench_many import tensor_rows  # noqa: E402


def save_checkpoint(path: str, rows: Sequence[int], codec: str) -> None:
    """The state dict as a checkpoint at ``path`` (reused when an earlier run left the same)."""
    import numpy as np
    import torch

    import zarr_device.torch as zt
    from bench_many import state_dict_values

    marker = os.path.join(path + ".json")
    key = {"rows": list(rows), "codec": codec}
    try:
        with open(marker) as f:
            if json.load(f) == key and os.path.isdir(path):
                log(f"reusing {path}")
                return
    except (OSError, ValueError):
        pass
    start = time.perf_counter()
    state = {n: torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) for n, v in state_dict_values(rows)}
    zt.save(state, path, compressors=None if codec == "none" else "zstd", overwrite=True, progress=False)
    with open(marker, "w") as f:
        json.dump(key, f)
    log(f"saved {path} ({codec}) in {time.perf_counter() - start:.1f} s")


def sums(torch: Any, tensors: dict[str, Any]) -> Any:
    """One number per tensor, from its bits, on its device."""
    return torch.stack([t.reshape(-1).view(torch.int16).to(torch.int64).sum() for _, t in sorted(tensors.items())])


def gpu_local_cpus(index: int) -> set[int] | None:
    """The cores of the NUMA node CUDA device ``index`` hangs off (from sysfs), or None when the
    machine does not say or has one node."""
    import subprocess

    try:
        bus = subprocess.run(["nvidia-smi", "-i", str(index), "--query-gpu=pci.bus_id", "--format=csv,noheader"],
                             capture_output=True, text=True, check=True).stdout.strip().lower()
        domain, rest = bus.split(":", 1)
        with open(f"/sys/bus/pci/devices/{domain[-4:]}:{rest}/numa_node") as f:
            node = int(f.read())
        if node < 0 or len([d for d in os.listdir("/sys/devices/system/node") if d.startswith("node")]) < 2:
            return None
        with open(f"/sys/devices/system/node/node{node}/cpulist") as f:
            cpus: set[int] = set()
            for part in f.read().strip().split(","):
                lo, _, hi = part.partition("-")
                cpus.update(range(int(lo), int(hi or lo) + 1))
        return cpus
    except (OSError, ValueError, subprocess.CalledProcessError):
        return None


def bind_threads(cpus: set[int]) -> None:
    """Every thread of this process (and those it starts later) onto ``cpus``."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass


def worker(rank: int, args: argparse.Namespace, port: int, results: Any) -> None:
    import torch
    import torch.distributed as dist

    import zarr_device.torch as zt
    from zarr_device.torch.load import open_checkpoint

    torch.cuda.set_device(rank)
    device = f"cuda:{rank}"
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.world,
                            device_id=torch.device(device))
    world = args.world

    def timed_round(run: Any, ranks: Sequence[int] | None = None) -> tuple[float, Any]:
        """The slowest rank's seconds from a barrier to its result on its device."""
        dist.barrier()
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = run() if ranks is None or rank in ranks else None
        torch.cuda.synchronize()
        seconds = torch.tensor([time.perf_counter() - start], device=device)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
        return float(seconds.item()), result

    # The pinned copy of every rank at once.
    src = torch.empty(GIB, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(GIB, dtype=torch.uint8, device=device)
    dst.copy_(src)
    copy_seconds = min(timed_round(lambda: [dst.copy_(src, non_blocking=True) for _ in range(4)])[0]
                       for _ in range(3))
    del src, dst
    out: dict[str, Any] = {"copy_all_gbps": 4 * GIB * world / copy_seconds / 1e9}

    for codec in args.codecs:
        path = os.path.join(args.out, f"ck-{codec}.zarr")
        nbytes = sum(a.nbytes for a in open_checkpoint(path).arrays.values())
        ways = {
            "tensor-parallel": (lambda p=path: zt.load(p, device=device, shard_plan={"*": 0}, rank=rank,
                                                       world_size=world, progress=False), None, 1),
            "fan-out": (lambda p=path: zt.load_distributed(p, device=device), None, world),
            f"{world} full loads": (lambda p=path: zt.load(p, device=device, progress=False), None, world),
            "one full load": (lambda p=path: zt.load(p, device=device, progress=False), [0], 1),
        }
        full = zt.load(path, device=device, progress=False)
        reference = sums(torch, full)
        parts = {n: t.chunk(world, 0)[rank] for n, t in full.items()}
        entry: dict[str, Any] = {}
        for name, (run, ranks, copies) in ways.items():
            timed_round(run, ranks)  # warm
            best = float("inf")
            for _ in range(args.repeats):
                seconds, result = timed_round(run, ranks)
                best = min(best, seconds)
                if result is not None:
                    expected = sums(torch, parts) if name == "tensor-parallel" else reference
                    if not torch.equal(sums(torch, result), expected):
                        raise AssertionError(f"{name} on rank {rank} returned other values")
                del result
            entry[name] = {"seconds": best, "gbps": nbytes * copies / best / 1e9}
        entry["bytes"] = nbytes
        if codec == args.codecs[0]:
            # Tensor-parallel again with each rank's threads limited to its share of the cores, then
            # also bound to its GPU's NUMA node (the first variants of a later default).
            import zarr_device as zd

            cores = os.cpu_count() or 1
            local = gpu_local_cpus(rank)
            variants: dict[str, Any] = {}
            for label, threads, bind in (("threads=cores/world", cores // world, False),
                                         ("threads=cores/world, NUMA-bound", cores // world, True)):
                if bind and local is None:
                    variants[label] = {"skipped": "one NUMA node, or the GPU's node unknown"}
                    continue
                previous = zd.set_config(threads=threads)
                if bind and local is not None:
                    bind_threads(local)
                run = ways["tensor-parallel"][0]
                timed_round(run)
                best = min(timed_round(run)[0] for _ in range(args.repeats))
                variants[label] = {"seconds": best, "gbps": nbytes / best / 1e9, "threads": threads,
                                   "cpus": None if not bind or local is None else len(local)}
                zd.set_config(threads=previous.threads)
            bind_threads(set(range(cores)))
            entry["tensor-parallel variants"] = variants
        del full, parts
        out[codec] = entry
    if rank == 0:
        results.put(out)
    dist.barrier()
    dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--size", default="6GiB")
    parser.add_argument("--codecs", default="none,zstd")
    parser.add_argument("--world", type=int, default=0, help="GPUs (default: all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", required=True)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    import socket

    import torch
    import torch.multiprocessing as mp

    from bench_layouts import concurrent_limits
    from zarr_device.basics.sizes import parse_size

    args.world = args.world or torch.cuda.device_count()
    if args.world < 2:
        print("needs 2 or more CUDA devices", file=sys.stderr)
        return 2
    args.codecs = args.codecs.split(",")
    os.makedirs(args.out, exist_ok=True)
    rows = tensor_rows(parse_size(args.size), seed=0)
    for codec in args.codecs:
        save_checkpoint(os.path.join(args.out, f"ck-{codec}.zarr"), rows, codec)
    cores = os.cpu_count() or 1
    limits = concurrent_limits(os.path.join(args.out, f"ck-{args.codecs[0]}.zarr"),
                               [f"cuda:{i}" for i in range(args.world)], cores)
    log(f"page cache, {cores} threads: {limits['read_alone']:.1f} GB/s alone, {limits['read_while_copying']:.1f} while "
        f"pinned -> GPU copies to all {args.world} GPUs run (at {limits['copy_while_reading']:.1f} GB/s)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    mp.start_processes(worker, args=(args, port, results), nprocs=args.world, join=True, start_method="spawn")
    out = results.get()
    out["page_cache_gbps"] = limits["read_alone"]
    out["page_cache_while_copying_gbps"] = limits["read_while_copying"]
    out["copy_while_reading_gbps"] = limits["copy_while_reading"]
    ceiling = min(out["page_cache_gbps"], out["copy_all_gbps"])
    # A staged read does both at once: the host's memory serves the page cache's copy into pinned
    # buffers and the GPUs' DMA from them together.
    together = min(limits["read_while_copying"], limits["copy_while_reading"])
    print(f"\n{args.world} GPUs, {cores} cores. Page cache {out['page_cache_gbps']:.1f} GB/s, pinned copy to all "
          f"GPUs at once {out['copy_all_gbps']:.1f} GB/s; ceiling {ceiling:.1f}. Both at once: page cache "
          f"{limits['read_while_copying']:.1f} while the copies run at {limits['copy_while_reading']:.1f}: "
          f"{together:.1f}")
    for codec in args.codecs:
        entry = out[codec]
        print(f"\n{codec}: {fmt_bytes(entry['bytes'])} checkpoint")
        for name in ("tensor-parallel", "fan-out", f"{args.world} full loads", "one full load"):
            e = entry[name]
            print(f"  {name:18s} {e['seconds'] * 1e3:8.1f} ms  {e['gbps']:6.2f} GB/s landed")
        tp = entry["tensor-parallel"]["gbps"]
        print(f"  tensor-parallel aggregate / ceiling: {tp / ceiling:.2f}; / both at once: {tp / together:.2f}")
        for label, v in entry.get("tensor-parallel variants", {}).items():
            if "gbps" in v:
                print(f"  tensor-parallel, {label}: {v['gbps']:6.2f} GB/s landed, {v['gbps'] / ceiling:.2f} of the ceiling")
            else:
                print(f"  tensor-parallel, {label}: skipped ({v['skipped']})")
        print(f"  {args.world} full loads at once / fan-out (time): "
              f"{entry[f'{args.world} full loads']['seconds'] / entry['fan-out']['seconds']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
