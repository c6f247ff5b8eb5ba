#!/usr/bin/env python
"""Where single reads spend their time: a state dict of zstd + crc32c tensors (2 MiB chunks,
bench_many.py's values) read one tensor at a time and in one call, with the engine's per-read
trace and, with --timeline, a GPU timeline of each (CUDA activity through torch.profiler)
summarised by gpu_timeline.py: the GPU's span, decode kernels at once, and what held the host.

    python bench/probes/trace_reads.py [--size 1GiB] [--non-blocking] [--timeline DIR]
    ZARR_DEVICE_DECODE_SHARING=off python bench/probes/trace_reads.py   # every chunk to the GPU
    python bench/probes/trace_reads.py --threads 4   # also 4 threads, each reading its share one by one

Two warm-up rounds of each way, then one timed round of each, traced by the engine
(ZARR_DEVICE_TRACE=1, one line per read on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/: the shared modules

from bench_common import GIB, parse_size  # noqa: E402
from bench_many import tensor_rows, write_state_dict  # noqa: E402
from gpu_timeline import format_summary, summarize  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=GIB)
    parser.add_argument("--out", default="/tmp/trace-zstd", help="the state dict (written when absent)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--non-blocking", action="store_true", help="one-by-one reads with non_blocking=True")
    parser.add_argument("--timeline", default=None, help="write and summarise a GPU timeline of each way here")
    parser.add_argument("--threads", type=int, default=0,
                        help="also read the tensors dealt among this many threads, each one by one")
    args = parser.parse_args(argv)
    import torch

    import zarr_device as zd

    if not os.path.isdir(args.out):
        write_state_dict(args.out, tensor_rows(args.size, seed=0), "zstd", 256)
        os.sync()  # the disk's writeback of fresh data would compete with the reads traced
    arrays = zd.open_group(args.out).all_arrays()
    nbytes = sum(a.nbytes for a in arrays.values())

    per_read: list[float] = []  # seconds each read of the last one-by-one round took to return

    def one_by_one() -> None:
        per_read.clear()
        for a in arrays.values():
            start = time.perf_counter()
            a.read(device=args.device, like="torch", non_blocking=args.non_blocking)
            per_read.append(time.perf_counter() - start)
        torch.cuda.synchronize()

    def one_call() -> None:
        zd.read_many(arrays, device=args.device, like="torch")
        torch.cuda.synchronize()

    def in_threads() -> None:
        from concurrent.futures import ThreadPoolExecutor

        listed = list(arrays.values())
        shares = [listed[i :: args.threads] for i in range(args.threads)]

        def read_share(share: list[Any]) -> None:
            for a in share:
                a.read(device=args.device, like="torch", non_blocking=args.non_blocking)

        with ThreadPoolExecutor(args.threads) as pool:
            list(pool.map(read_share, shares))
        torch.cuda.synchronize()

    ways: list[tuple[str, Callable[[], None]]] = [("one by one", one_by_one), ("one call", one_call)]
    if args.threads:
        ways.append((f"{args.threads} threads", in_threads))
    for _ in range(2):
        for _, read in ways:
            read()
    for label, read in ways:
        os.environ["ZARR_DEVICE_TRACE"] = "1"
        start = time.perf_counter()
        read()
        seconds = time.perf_counter() - start
        os.environ.pop("ZARR_DEVICE_TRACE", None)
        print(f"{label}: {nbytes / seconds / 1e9:.2f} GB/s ({len(arrays)} tensors, {nbytes / GIB:.2f} GiB)", flush=True)
        if read is one_by_one:
            sizes = [a.nbytes / 2**20 for a in arrays.values()]
            print("  per read (MiB: ms): " + ", ".join(f"{n:.0f}: {t * 1e3:.1f}" for n, t in zip(sizes[:12], per_read)),
                  flush=True)
    if args.timeline:
        from torch.profiler import ProfilerActivity, profile

        os.makedirs(args.timeline, exist_ok=True)
        for label, read in ways:
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                read()
            path = os.path.join(args.timeline, f"timeline-{label.replace(' ', '-')}.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                trace: dict[str, Any] = json.load(f)
            print(f"{label}, profiled ({path}):\n{format_summary(summarize(trace))}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
