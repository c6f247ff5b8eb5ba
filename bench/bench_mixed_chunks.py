#!/usr/bin/env python
"""Arrays of large and of small chunks read one after another onto a GPU, as a loader reads a
state dict whose embedding was stored in chunks larger than a quarter of the staging: the same
arrays read grouped (all large-chunk arrays, then all small-chunk ones) and interleaved (large,
small, large, ...). Reads whose largest chunk does not fit the ring's slots cut its staging into
fewer, larger slots; the interleaved order shows what alternating between the two costs.

    python bench/bench_mixed_chunks.py --out /tmp/bmc [--large 96MiB] [--small-chunk 2MiB]

Prints GB/s (decoded bytes per second, 10^9), best of --repeat, for each order and codec, and the
ratio of interleaved to grouped. Every read is checked against the data written.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import MIB, machine_info, parse_size  # noqa: E402
from bench_layouts import COLS, ZSTD_CRC, rows_of, weights  # noqa: E402

CODECS: list[tuple[str, Any]] = [("none", None), ("zstd+crc32c", ZSTD_CRC)]


def make_arrays(out: str, label: str, compressors: Any, count: int, nbytes: int, chunk: int) -> list[Any]:
    import zarr_device as zd

    arrays = []
    for i in range(count):
        path = os.path.join(out, f"{label}-{nbytes // MIB}MiB-{chunk // MIB}MiB-{i}.zarr")
        rows = rows_of(nbytes)
        if not os.path.isdir(path):
            array = zd.create(path, shape=(rows, COLS), dtype="bfloat16", chunks=(rows_of(chunk), COLS),
                              compressors=compressors)
            array[...] = weights(rows, seed=i)
        arrays.append(zd.open_array(path))
    return arrays


def timed_loop(arrays: Sequence[Any], device: str, repeat: int) -> float:
    import torch

    best = float("inf")
    for _ in range(repeat + 1):  # the first warms the page cache and the rings
        torch.cuda.synchronize()
        start = time.perf_counter()
        outs = [a.read(device=device, like="torch") for a in arrays]
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
        del outs
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory for the arrays (reused when present)")
    parser.add_argument("--large", type=parse_size, default=96 * MIB,
                        help="size of each large-chunk array, stored as one chunk")
    parser.add_argument("--large-count", type=int, default=6)
    parser.add_argument("--small", type=parse_size, default=32 * MIB, help="size of each small-chunk array")
    parser.add_argument("--small-chunk", type=parse_size, default=2 * MIB)
    parser.add_argument("--small-count", type=int, default=18)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--codecs", default=",".join(label for label, _ in CODECS),
                        help="comma-separated, of: " + ", ".join(label for label, _ in CODECS))
    args = parser.parse_args(argv)
    import torch

    import zarr_device as zd

    machine = machine_info()
    print(f"# {', '.join(machine.get('gpus', []))} | {machine.get('cpu')} | zarr-device {zd.__version__} | "
          f"staging {zd.get_config().staging_bytes // MIB} MiB in {zd.get_config().staging_slots} slots")
    print(f"# {args.large_count} arrays of {args.large // MIB} MiB in one chunk, {args.small_count} of "
          f"{args.small // MIB} MiB in {args.small_chunk // MIB} MiB chunks, bf16")
    print(f"{'codec':<12} {'grouped GB/s':>13} {'interleaved GB/s':>17} {'ratio':>6}")
    for label, compressors in CODECS:
        if label not in args.codecs.split(","):
            continue
        large = make_arrays(args.out, label, compressors, args.large_count, args.large, args.large)
        small = make_arrays(args.out, label, compressors, args.small_count, args.small, args.small_chunk)
        for a in large + small:  # every array reads back what was written
            got = a.read(device=args.device, like="torch").cpu().view(torch.uint16).numpy()
            if not np.array_equal(got, np.asarray(a[...]).view(np.uint16)):
                raise SystemExit(f"{a.path}: the GPU read differs from the data written")
        grouped = large + small
        per = max(1, len(small) // max(1, len(large)))
        interleaved: list[Any] = []
        for i, a in enumerate(large):
            interleaved += [a, *small[i * per:(i + 1) * per]]
        interleaved += small[len(large) * per:]
        total = sum(a.nbytes for a in grouped)
        g = total / timed_loop(grouped, args.device, args.repeat) / 1e9
        i = total / timed_loop(interleaved, args.device, args.repeat) / 1e9
        print(f"{label:<12} {g:13.2f} {i:17.2f} {i / g:6.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
