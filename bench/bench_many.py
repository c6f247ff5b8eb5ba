"""Model-sized loads: a state dict of many bf16 arrays (one Zarr array per tensor, sizes like a
transformer's layers) read onto a GPU in one call (``zd.read_many``) and one array after another,
uncompressed and with zstd + crc32c, against the machine's limits measured in the same run
(page cache -> pinned memory with many threads, pinned -> GPU copy).

    python bench/bench_many.py --size 6GiB --out /tmp/bm [--cold [--cold-repeat 2]] [--json results.json]

Prints a table of GB/s (decoded bytes per second, 10^9) and the ratio of each figure to
min(page cache, pinned copy), and to both at once: the page cache read while pinned -> GPU copies
run, which is what a staged read does to the host's memory (its copies into pinned memory and the
GPU's reads of it share it); every read is checked against the first one's fingerprint.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import (  # noqa: E402 - what the benchmarks share
    GIB,
    MIB,
    child_limits,
    drop_caches,
    engine_info,
    fmt_bytes,
    log,
    machine_info,
    package_versions,
    parse_size,
)

COLS = 4096  # a hidden size; rows vary


def tensor_rows(total: int, seed: int) -> list[int]:
    """Rows of bf16 [rows, 4096] tensors of 16-128 MiB (a layer's weights) adding up to ~total."""
    rng = np.random.default_rng(seed)
    rows: list[int] = []
    left = total
    while left > 16 * MIB:
        size = int(min(left, rng.choice([16, 32, 48, 64, 90, 128]) * MIB))
        rows.append(max(1, size // (COLS * 2)))
        left -= rows[-1] * COLS * 2
    return rows


def state_dict_values(rows: Sequence[int]) -> Iterator[tuple[str, Any]]:
    """(name, bf16 [rows, 4096] values like a layer's weights) for each tensor, the same every run."""
    import ml_dtypes

    rng = np.random.default_rng(0)
    for i, n in enumerate(rows):
        yield f"layer{i:03d}", (rng.standard_normal((n, COLS), dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)


def write_state_dict(path: str, rows: Sequence[int], codec: str, chunk_rows: int,
                     values: Iterable[tuple[str, Any]] | None = None, inner_rows: int = 0) -> float:
    """One array per tensor (``values``, or :func:`state_dict_values` of ``rows``); seconds taken.
    ``inner_rows``: shards of ``chunk_rows`` rows holding chunks of this many (0: unsharded)."""
    import zarr_device as zd

    from zarr_device.core.create import weight_codecs

    # "auto": what zt.save(compressors="auto") writes for bf16 (byte shuffle, zstd 1, crc32c).
    compressors: Any = {"none": None, "zstd": [{"name": "zstd", "configuration": {"level": 1}}, {"name": "crc32c"}],
                        "auto": [*weight_codecs("bfloat16"), {"name": "crc32c"}]}[codec]
    group = zd.create_group(path, mode="w")
    start = time.perf_counter()
    for name, value in state_dict_values(rows) if values is None else values:
        n = value.shape[0]
        if inner_rows:
            shard = -(-min(chunk_rows, n) // inner_rows) * inner_rows
            arr = group.create_array(name, shape=(n, COLS), dtype="bfloat16", chunks=(inner_rows, COLS),
                                     shards=(shard, COLS), compressors=compressors)
        else:
            arr = group.create_array(name, shape=(n, COLS), dtype="bfloat16", chunks=(min(chunk_rows, n), COLS),
                                     compressors=compressors)
        arr[...] = value
    return time.perf_counter() - start


def fingerprint(tensors: dict[str, Any]) -> list[float]:
    import torch

    return [float(t.view(torch.int16).to(torch.int64).sum().item()) for _, t in sorted(tensors.items())]


def timed(read: Any) -> tuple[float, dict[str, Any]]:
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    result = read()
    torch.cuda.synchronize()
    return time.perf_counter() - start, result


def one_by_one_non_blocking(arrays: dict[str, Any], device: str) -> dict[str, Any]:
    """A loop of single reads that do not wait for the GPU's decoders, then one synchronisation
    that reports any chunk the GPU failed to decode."""
    import zarr_device as zd

    result = {n: a.read(device=device, like="torch", non_blocking=True) for n, a in arrays.items()}
    zd.synchronize(device)
    return result


def in_threads(arrays: dict[str, Any], device: str, threads: int, non_blocking: bool = False) -> dict[str, Any]:
    """The arrays shared round-robin among `threads` threads, each reading its own one by one
    (with ``non_blocking``, reads that do not wait for the GPU's decoders, then one synchronisation)."""
    from concurrent.futures import ThreadPoolExecutor

    import zarr_device as zd

    names = list(arrays)
    shares = [names[i::threads] for i in range(threads)]

    def read_share(share: list[str]) -> dict[str, Any]:
        return {n: arrays[n].read(device=device, like="torch", non_blocking=non_blocking) for n in share}

    with ThreadPoolExecutor(threads) as pool:
        parts = list(pool.map(read_share, shares))
    if non_blocking:
        zd.synchronize(device)
    return {n: t for part in parts for n, t in part.items()}


class MemoryPeaks:
    """Peak host RSS and device memory in use (from the driver, so the engine's own allocations
    count) while a read runs, sampled every few milliseconds beside it."""

    def __init__(self, device: str) -> None:
        import threading

        import psutil
        import torch

        self._process = psutil.Process()
        self._index = torch.device(device).index or 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self.rss_base = self._process.memory_info().rss
        self.gpu_base = self._gpu_used()
        self.rss_peak = self.rss_base
        self.gpu_peak = self.gpu_base

    def _gpu_used(self) -> int:
        import torch

        free, total = torch.cuda.mem_get_info(self._index)
        return int(total - free)

    def _sample(self) -> None:
        while not self._stop.wait(0.004):
            self.rss_peak = max(self.rss_peak, self._process.memory_info().rss)
            self.gpu_peak = max(self.gpu_peak, self._gpu_used())

    def __enter__(self) -> "MemoryPeaks":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def both_at_once(path: str, device: str) -> dict[str, float]:
    """The page cache read into pinned memory by every core while pinned -> GPU copies run, and
    those copies' rate: min of the two is what a staged read can reach when the host's memory,
    not either stage alone, is the bound."""
    from bench_layouts import concurrent_limits

    limits = concurrent_limits(path, device, os.cpu_count() or 16)
    return {**limits, "gbps": min(limits["read_while_copying"], limits["copy_while_reading"])}


def measure(path: str, device: str, repeat: int, cold: int, ways_wanted: Sequence[str]) -> dict[str, Any]:
    """Each way's best warm read of ``repeat``, and the best of ``cold`` cold reads (each after
    dropping the page cache; the first cold read after the data were written is often the
    slowest, while the disk's host still writes them back)."""
    import zarr_device as zd

    group = zd.open_group(path)
    arrays = group.all_arrays()
    nbytes = sum(a.nbytes for a in arrays.values())
    all_ways = {
        "one call": lambda: zd.read_many(arrays, device=device, like="torch"),
        "iter_many": lambda: dict(zd.iter_many(arrays, device=device, like="torch")),
        "one by one": lambda: {n: a.read(device=device, like="torch") for n, a in arrays.items()},
        "one by one non_blocking": lambda: one_by_one_non_blocking(arrays, device),
    }
    ways = {}
    for name in ways_wanted:
        threaded = re.fullmatch(r"(\d+) threads( non_blocking)?", name)
        if threaded:
            count, non_blocking = int(threaded.group(1)), bool(threaded.group(2))
            ways[name] = lambda count=count, non_blocking=non_blocking: in_threads(arrays, device, count, non_blocking)
        elif name in all_ways:
            ways[name] = all_ways[name]
        else:
            raise SystemExit(f"unknown way {name!r}: one of {', '.join(all_ways)}, or 'N threads [non_blocking]'")
    out: dict[str, Any] = {"arrays": len(arrays), "bytes": nbytes}
    reference = None
    for name, read in ways.items():
        read()  # warm: the page cache holds the files, the ring is allocated
        runs = []
        for _ in range(repeat):
            seconds, result = timed(read)
            runs.append(seconds)
            got = fingerprint(result)
            reference = reference or got
            if got != reference:
                raise AssertionError(f"{name} returned other values")
            del result
        entry = {"warm_seconds": min(runs), "warm_gbps": nbytes / min(runs) / 1e9}
        with MemoryPeaks(device) as peaks:
            result = read()
        del result
        entry.update(rss_growth=peaks.rss_peak - peaks.rss_base, gpu_growth=peaks.gpu_peak - peaks.gpu_base)
        cold_runs = []
        for _ in range(cold):
            if drop_caches() is not None:
                break
            seconds, result = timed(read)
            del result
            cold_runs.append(seconds)
        if cold_runs:
            entry.update(cold_seconds=min(cold_runs), cold_gbps=nbytes / min(cold_runs) / 1e9,
                         cold_runs_gbps=[nbytes / s / 1e9 for s in cold_runs])
        out[name] = entry
        log(f"  {name}: {entry['warm_gbps']:.2f} GB/s warm; host RSS +{fmt_bytes(entry['rss_growth'])}, "
            f"GPU +{fmt_bytes(entry['gpu_growth'])} for {fmt_bytes(nbytes)} of output")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=parse_size, default=6 * GIB, help="state dict size (default 6GiB)")
    parser.add_argument("--chunk-rows", type=int, default=256, help="rows per chunk (256 x 4096 bf16: 2 MiB)")
    parser.add_argument("--inner-rows", type=int, default=0,
                        help="shards of --chunk-rows rows holding chunks of this many (default 0: unsharded)")
    parser.add_argument("--codecs", default="none,zstd", help="none,zstd (zstd level 1 + crc32c)")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="also one cold read each (drops the page cache)")
    parser.add_argument("--cold-repeat", type=int, default=1, help="with --cold: the best of this many cold reads each")
    parser.add_argument("--out", default=None, help="where to write the data (default: a temp dir)")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--ways", default="one call,iter_many,one by one,one by one non_blocking,4 threads",
                        help="comma-separated: one call, iter_many, one by one, one by one non_blocking, "
                             "N threads (each reading its share one by one), N threads non_blocking")
    parser.add_argument("--reuse", action="store_true", help="read the data already in --out instead of writing it")
    args = parser.parse_args(argv)

    out_dir = args.out or tempfile.mkdtemp(prefix="zd-bench-many-")
    rows = tensor_rows(args.size, seed=1)
    machine, versions, engine = machine_info(), package_versions(), engine_info()
    print(f"machine:  {machine['cpu']}; {machine['usable_cores']} cores; {fmt_bytes(machine['memory_bytes'] or 0)} RAM")
    for gpu in machine["gpus"] or ["no GPU found"]:
        print(f"gpu:      {gpu}")
    print("versions: " + ", ".join(f"{k} {v or '-'}" for k, v in versions.items()))
    print(f"engine:   {json.dumps(engine)}")
    print(f"data:     {len(rows)} bf16 arrays of [rows, {COLS}], {fmt_bytes(sum(rows) * COLS * 2)}; "
          f"chunks of {args.chunk_rows} rows ({fmt_bytes(args.chunk_rows * COLS * 2)})"
          + (f" as shards of chunks of {args.inner_rows} rows" if args.inner_rows else ""), flush=True)
    document: dict[str, Any] = {"machine": machine, "versions": versions, "engine": engine, "rows": rows,
                                "chunk_rows": args.chunk_rows, "results": {}}
    table = []
    for codec in args.codecs.split(","):
        path = os.path.join(out_dir, f"state-{codec}-{args.chunk_rows}-{args.inner_rows}.zarr")
        if args.reuse and os.path.exists(path):
            written = 0.0
        else:
            log(f"writing {codec} state dict to {path}")
            written = write_state_dict(path, rows, codec, args.chunk_rows, inner_rows=args.inner_rows)
            os.sync()  # the disk's writeback of fresh data would compete with the reads measured
        stored = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
        limits = child_limits(path, args.device, 2 * GIB, os.cpu_count() or 16, cold=args.cold)
        limits["both_at_once"] = both_at_once(path, args.device)
        ways = [w.strip() for w in args.ways.split(",")]
        result = measure(path, args.device, args.repeat, args.cold_repeat if args.cold else 0, ways)
        result.update(limits=limits, stored_bytes=stored, write_seconds=written)
        document["results"][codec] = result
        bound = min(limits["page_cache_to_pinned"]["gbps"], limits["h2d_pinned"]["gbps"])
        for way in ways:
            r = result[way]
            together = limits["both_at_once"]["gbps"]
            table.append((codec, fmt_bytes(stored), way, r["warm_gbps"], r["warm_gbps"] / bound,
                          # stored bytes are what the page cache and the copy move: decoded
                          # rates of compressed data are not compared with them
                          r["warm_gbps"] / together if codec == "none" else None,
                          r.get("cold_gbps"), limits.get("disk_to_pinned_cold", {}).get("gbps"),
                          limits["page_cache_to_pinned"]["gbps"], limits["h2d_pinned"]["gbps"], together))
    print()
    print(f"{'codec':5}  {'stored':>9}  {'read':10}  {'warm GB/s':>9}  {'of limit':>8}  {'of both':>7}  {'cold GB/s':>9}  "
          f"{'disk GB/s':>9}  {'cache GB/s':>10}  {'copy GB/s':>9}  {'both GB/s':>9}")
    for codec, stored_text, way, warm, ratio, ratio_both, cold, disk, cache, copy, both in table:
        print(f"{codec:5}  {stored_text:>9}  {way:10}  {warm:9.2f}  {ratio:8.1%}  "
              f"{(f'{ratio_both:.1%}' if ratio_both is not None else '-'):>7}  "
              f"{(f'{cold:.2f}' if cold else '-'):>9}  {(f'{disk:.2f}' if disk else '-'):>9}  {cache:10.2f}  "
              f"{copy:9.2f}  {both:9.2f}")
    print("\nlimit: min(page cache -> pinned with many threads, pinned -> GPU copy), measured in this run; "
          "both: min(page cache -> pinned while the copies run, those copies), at once (uncompressed only: "
          "the limits move stored bytes); "
          "every read returned the same values.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(document, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
