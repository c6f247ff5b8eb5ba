#!/usr/bin/env python
"""One array of large zstd + crc32c chunks onto a GPU under a few decode settings, with the
engine's per-read trace: how the decode memory (``decode_bytes``), the staging and decode sharing
bound what large chunks reach.

One bf16 array (default 1 GiB, weights-like values) is written per chunk size (4, 16, 64 MiB
unless --chunks says otherwise) and read whole onto the GPU, best of 3, under each variant; the
third read of each prints its ``ZARR_DEVICE_TRACE`` line on stderr (batches, decode regions,
chunks per call, nvCOMP's working memory per chunk).

    python bench/bench_large_chunks.py --out /tmp/blc [--size 1GiB] [--chunks 4MiB,16MiB,64MiB]
        [--variants "default;decode_bytes=8GiB,staging_bytes=4GiB"] [--scaling]

With --cold, each variant also reads each array once after the page cache is dropped (root
only), against the disk's cold rate for the array's files measured in the same run (16 threads
into pinned memory): a compressed array's cold read can deliver the disk rate divided by its
stored fraction.

With --scaling, each array is instead read in its first 1, 2, 4, ... chunks onto the GPU and into
host memory (after a warm-up read, best of 3 and of 2): how the device's rate grows with the chunks it decodes at once,
against the CPU threads'.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_common import GIB, MIB, child_limits, drop_caches, fmt_bytes, parse_size  # noqa: E402
from bench_layouts import COLS, ZSTD_CRC, best_of, weights  # noqa: E402

VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("default", {}),
    ("decode 768MiB", {"decode_bytes": "768MiB"}),
    ("decode 4GiB", {"decode_bytes": "4GiB"}),
    ("decode 4GiB, staging 2GiB", {"decode_bytes": "4GiB", "staging_bytes": "2GiB"}),
    ("decode 4GiB, staging 2GiB, sharing off", {"decode_bytes": "4GiB", "staging_bytes": "2GiB", "decode_sharing": "off"}),
]


def parse_variants(text: str) -> list[tuple[str, dict[str, Any]]]:
    """``default;name=value,name=value;...``: one variant per ``;``, settings by ``,``."""
    variants: list[tuple[str, dict[str, Any]]] = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        if part == "default":
            variants.append(("default", {}))
            continue
        settings = dict(item.split("=", 1) for item in part.split(","))
        variants.append((", ".join(f"{k} {v}" for k, v in settings.items()), settings))
    return variants


def scaling(array: Any, device: str) -> None:
    """Reads of the first k chunks: on the GPU, k = 1, 2, 4, ... (the device decodes them at
    once); into host memory, one chunk (one thread) and all of them."""
    rows = array.chunks[0]
    n = array.shape[0] // rows
    chunk = rows * math.prod(array.shape[1:]) * array.dtype.itemsize
    print(f"{fmt_bytes(chunk)} chunks, {n} of them:", flush=True)
    k = 1
    while k <= n:
        sel = (slice(0, k * rows),)
        s, _ = best_of(lambda: array.read(sel, device=device, like="torch"), 3)
        print(f"  {device}, {k} chunks: {k * chunk / s / 1e9:.2f} GB/s ({s * 1e3:.1f} ms)", flush=True)
        k *= 2
    for k in sorted({1, n}):
        sel = (slice(0, k * rows),)
        s, _ = best_of(lambda: array.read(sel, device="cpu", like="numpy"), 2)
        print(f"  host memory, {k} chunks: {k * chunk / s / 1e9:.2f} GB/s ({s * 1e3:.1f} ms)", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=GIB)
    parser.add_argument("--chunks", default="4MiB,16MiB,64MiB")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--out", required=True, help="directory for the arrays (reused when present)")
    parser.add_argument("--variants", default=None,
                        help="settings to read under, e.g. 'default;decode_bytes=8GiB' (default: the built-in five)")
    parser.add_argument("--cold", action="store_true",
                        help="also one read per variant after dropping the page cache, against the disk's cold rate")
    parser.add_argument("--scaling", action="store_true",
                        help="read the first 1, 2, 4, ... chunks of each array on the GPU and the CPU instead")
    args = parser.parse_args(argv)
    variants = parse_variants(args.variants) if args.variants else VARIANTS
    import torch

    import zarr_device as zd

    rows = args.size // (COLS * 2)
    values = weights(rows)
    for chunk in (parse_size(c) for c in args.chunks.split(",")):
        # Named by both sizes: a run of another size or chunking never reads this one's array.
        path = os.path.join(args.out, f"chunks-{chunk}-of-{rows * COLS * 2}.zarr")
        if not os.path.isdir(path):
            array = zd.create(path, shape=(rows, COLS), dtype="bfloat16", chunks=(chunk // (COLS * 2), COLS),
                              compressors=ZSTD_CRC)
            array[...] = values
        array = zd.open_array(path)
        disk = stored = 0.0
        if args.cold:
            limits = child_limits(path, args.device, 256 * MIB, os.cpu_count() or 16, cold=True)
            cold_limit = limits["disk_to_pinned_cold"]
            if "skipped" in cold_limit:
                raise SystemExit(f"--cold: {cold_limit['skipped']}")
            disk = float(cold_limit["gbps"])
            stored = float(cold_limit["bytes"]) / array.nbytes
            print(f"chunks of {fmt_bytes(chunk)}: disk -> pinned cold {disk:.2f} GB/s, stored {stored:.3f} of raw",
                  flush=True)
        if args.scaling:
            scaling(array, args.device)
            continue
        for label, settings in variants:
            previous = zd.set_config(**settings)
            try:
                best = float("inf")
                for attempt in range(3):
                    if attempt == 2:
                        os.environ["ZARR_DEVICE_TRACE"] = "1"
                    torch.cuda.synchronize()
                    start = time.perf_counter()
                    out = array.read(device=args.device, like="torch")
                    torch.cuda.synchronize()
                    best = min(best, time.perf_counter() - start)
                    os.environ.pop("ZARR_DEVICE_TRACE", None)
                    del out
                print(f"chunks of {fmt_bytes(chunk)}, {label}: {array.nbytes / best / 1e9:.2f} GB/s", flush=True)
                if args.cold:
                    why = drop_caches()
                    if why is not None:
                        raise SystemExit(f"--cold: {why}")
                    start = time.perf_counter()
                    out = array.read(device=args.device, like="torch")
                    torch.cuda.synchronize()
                    cold = array.nbytes / (time.perf_counter() - start) / 1e9
                    del out
                    print(f"chunks of {fmt_bytes(chunk)}, {label}, cold: {cold:.2f} GB/s, {cold / disk:.2f}x the disk "
                          f"rate ({cold * stored / disk:.2f} of what the stored fraction allows)", flush=True)
            finally:
                zd.set_config(**{name: getattr(previous, name) for name in settings})
    return 0


if __name__ == "__main__":
    sys.exit(main())
