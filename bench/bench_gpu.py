#!/usr/bin/env python
"""Reading a Zarr array into GPU memory: zarr-device against the machine's limits and its peers.

One run measures, on this machine:

limits
    pinned host -> device copy rate (torch, one --copy-size buffer, non-blocking copy),
    pageable host -> device copy rate (for the peers that copy from NumPy arrays),
    page cache -> pinned memory (--io-threads threads preadv the array's chunk files, cache warm),
    disk -> pinned memory, cold (after ``echo 3 > /proc/sys/vm/drop_caches``; skipped, with a note,
    where that is not permitted).

readers, on one --size array (float32 or bfloat16; --data weights: N(0, 0.02) values, like model
weights, which zstd shrinks to about 0.92; --data field: a smooth field with noise, kept to 0.01
as measured data often is, which zstd shrinks to about 0.48) written once uncompressed and once
with zstd, sharded (--inner-chunk chunks in --shard shards) or not
(--chunk chunks); each reader runs in a process of its own, and reads the whole array to a torch
tensor on the GPU:

    zarr-device          zd.open_array(p).read(device="cuda:0", like="torch")
    zarr-python-gpu      zarr.config.enable_gpu(); zarr.open_array(p)[...]   (CuPy)
    zarr-python+cuda     torch.from_numpy(zarr.open_array(p)[...]).cuda()
    tensorstore+cuda     torch.from_numpy(ts.open(...).read().result()).cuda()
    kvikio-gds           zarr.config.enable_gpu(); zarr.open_array(kvikio.zarr.GDSStore(p))[...]
    czarr                czarr.configure_gpu(); zarr.open_array(p)[...]       (CuPy; nvCOMP decode)

warm: the best of --repeat reads (--peer-repeat for the peers) after one untimed read; cold: the
page cache is dropped before each of --cold-repeat reads. Open + read + synchronisation is timed.
Every reader's result is fingerprinted on the GPU and must agree. Reported per reader: GB/s
(decoded bytes, 10^9 per second), zarr-device's speed as a multiple of the reader's, the reader
process's peak RSS (VmHWM), and its peak GPU memory (the largest drop of cudaMemGetInfo's free
memory, sampled every few milliseconds, which counts every allocator; and torch's own peak).

    python bench/bench_gpu.py                                  # 6 GiB float32, sharded
    python bench/bench_gpu.py --dtype bfloat16 --layout unsharded --chunk 4MiB --json out.json
    python bench/bench_gpu.py --decode-only                    # the engine's GPU decode alone

``--decode-only`` times the engine's GPU decoding of chunks already in memory, when the engine
offers it (``_core.Array.bench_decode_cuda``); otherwise it says so and stops.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from bench_common import (  # noqa: E402 - what the benchmarks share
    child_limits,
    chunk_files,
    CODECS,
    drop_caches,
    DTYPES,
    engine_info,
    fingerprint,
    fmt_bytes,
    GIB,
    layout_of,
    LAYOUTS,
    log,
    machine_info,
    MIB,
    package_versions,
    parse_size,
    print_header,
    read_proc_status,
    run_child,
    write_array,
)

READERS = ("zarr-device", "zarr-device-direct", "zarr-device-gds", "zarr-python-gpu", "zarr-python+cuda",
           "tensorstore+cuda", "kvikio-gds", "czarr")
PEERS = READERS[3:]


# ------------------------------------------------------------------------------------------------
# small helpers
# ------------------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------------------
# the machine
# ------------------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------------------
# the data (written once by zarr-device; every reader reads the same files)
# ------------------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------------------
# children: each measurement runs in a process of its own
# ------------------------------------------------------------------------------------------------


class GpuMemoryWatch:
    """The largest drop of the device's free memory (cudaMemGetInfo) since start, sampled on a
    thread; counts torch's, CuPy's and the engine's allocations alike."""

    def __init__(self, torch: Any, device: int, interval: float = 0.005) -> None:
        self.torch, self.device, self.interval = torch, device, interval
        self.baseline = int(torch.cuda.mem_get_info(device)[0])
        self.lowest = self.baseline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.lowest = min(self.lowest, int(self.torch.cuda.mem_get_info(self.device)[0]))
            self._stop.wait(self.interval)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.lowest = min(self.lowest, int(self.torch.cuda.mem_get_info(self.device)[0]))
        return self.baseline - self.lowest


def _to_torch(torch: Any, values: Any, device: str) -> Any:
    """A NumPy result (bfloat16 through its bits) as a torch tensor on ``device`` (pageable copy)."""
    import numpy as np

    if values.dtype.itemsize == 2 and values.dtype.kind == "V":  # ml_dtypes bfloat16
        return torch.from_numpy(np.ascontiguousarray(values).view(np.int16)).to(device).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(values)).to(device)


def make_reader(name: str, path: str, device: str, threads: int) -> Callable[[], Any]:
    """A function that opens the array and reads it whole into a torch tensor on ``device``."""
    import torch

    if name.startswith("zarr-device"):
        import zarr_device as zd

        if threads:
            zd.set_config(threads=threads)
        # The store's io mode: page cache, O_DIRECT, or cuFile (GPUDirect Storage) into the GPU.
        io = {"zarr-device": "buffered", "zarr-device-direct": "direct", "zarr-device-gds": "gds"}[name]
        return lambda: zd.open_array(zd.LocalStore(path, io=io)).read(device=device, like="torch")
    if name in ("zarr-python-gpu", "kvikio-gds"):
        import zarr

        if threads:
            zarr.config.set({"threading.max_workers": threads})
        zarr.config.enable_gpu()
        if name == "kvikio-gds":
            import kvikio.defaults
            from kvikio.zarr import GDSStore

            if threads:
                # kvikio splits each file read over its own thread pool, apart from zarr's workers
                kvikio.defaults.set("num_threads", threads)
            # GDSStore is a zarr LocalStore (root, *, read_only); opening it read-only up front spares
            # zarr's with_read_only copy that mode="r" makes of a writable store. Where the machine
            # has no GDS, kvikio falls back to POSIX reads into a bounce buffer (compat mode).
            return lambda: torch.from_dlpack(zarr.open_array(GDSStore(path, read_only=True), mode="r")[...])
        return lambda: torch.from_dlpack(zarr.open_array(path, mode="r")[...])
    if name == "czarr":
        import czarr
        import zarr

        if threads:
            zarr.config.set({"threading.max_workers": threads})
        czarr.configure_gpu()  # its batched pipeline, GPU buffers and nvCOMP codecs in zarr-python
        return lambda: torch.from_dlpack(zarr.open_array(path, mode="r")[...])
    if name == "zarr-python+cuda":
        import zarr

        if threads:
            zarr.config.set({"threading.max_workers": threads})
        return lambda: _to_torch(torch, zarr.open_array(path, mode="r")[...], device)
    if name == "tensorstore+cuda":
        import tensorstore as ts

        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": os.path.abspath(path)}}
        context = ts.Context({"data_copy_concurrency": {"limit": threads},
                              "file_io_concurrency": {"limit": threads}}) if threads else None
        return lambda: _to_torch(torch, ts.open(spec, read=True, context=context).result().read().result(), device)
    raise ValueError(f"unknown reader {name!r}")


def child_reader(name: str, path: str, device: str, repeat: int, cold_repeat: int, threads: int) -> dict[str, Any]:
    import torch

    on_gpu = device.startswith("cuda")
    index = torch.device(device).index or 0
    if on_gpu:
        torch.cuda.init()
        torch.zeros(1, device=device)  # the CUDA context exists before the baseline is taken
    sync: Callable[[], None] = torch.cuda.synchronize if on_gpu else (lambda: None)
    read = make_reader(name, path, device, threads)
    rss_start = read_proc_status("VmRSS")
    watch = GpuMemoryWatch(torch, index) if on_gpu else None

    def timed() -> tuple[float, Any]:
        start = time.perf_counter()
        result = read()
        sync()
        return time.perf_counter() - start, result

    first_seconds, result = timed()  # warm-up (untimed for the warm figures)
    nbytes = int(result.numel() * result.element_size())
    shape, dtype = list(result.shape), str(result.dtype).removeprefix("torch.")
    warm: list[float] = []
    cold: list[float] = []
    for kind in ["warm"] * repeat + ["cold"] * cold_repeat:
        result = None  # every read allocates its own output, as a first load does
        if on_gpu:
            torch.cuda.empty_cache()
        if kind == "cold" and drop_caches() is not None:
            break
        seconds, result = timed()
        (warm if kind == "warm" else cold).append(seconds)
    if result is None:
        seconds, result = timed()
    gpu_peak = watch.stop() if watch is not None else None
    torch_peak = int(torch.cuda.max_memory_allocated(index)) if on_gpu else None
    peak_rss = read_proc_status("VmHWM")
    digest = fingerprint(torch, result)  # the last read's values, outside the timed reads
    return {
        "reader": name, "nbytes": nbytes, "shape": shape, "dtype": dtype,
        "first_seconds": first_seconds, "warm_seconds": warm, "cold_seconds": cold,
        "rss_start_bytes": rss_start, "peak_rss_bytes": peak_rss,
        "gpu_peak_bytes": gpu_peak, "torch_peak_bytes": torch_peak, "fingerprint": digest,
    }  # fmt: skip


def child_decode(path: str, device: str, repeat: int) -> dict[str, Any]:
    from zarr_device import _core
    import zarr_device as zd

    if not hasattr(_core.Array, "bench_decode_cuda"):
        return {"skipped": "this build of the engine has no _core.Array.bench_decode_cuda"}
    arr = zd.open_array(path)
    index = int(device.split(":")[1]) if ":" in device else 0
    selection = [(0, 1, n) for n in arr.shape]
    runs = []
    for _ in range(repeat + 1):
        start = time.perf_counter()
        reported = _core_of(arr).bench_decode_cuda(selection, index)
        runs.append({"wall_seconds": time.perf_counter() - start, "reported": reported})
    best = min(runs[1:] or runs, key=lambda r: float(r["wall_seconds"]))
    return {"nbytes": arr.nbytes, "runs": runs, "best_wall_seconds": best["wall_seconds"],
            "gbps_wall": arr.nbytes / best["wall_seconds"] / 1e9, "reported": best["reported"]}


def _core_of(arr: Any) -> Any:
    return arr._core


# ------------------------------------------------------------------------------------------------
# the parent
# ------------------------------------------------------------------------------------------------


def reader_available(name: str) -> str | None:
    """None when the reader's packages import, else why it is skipped."""
    import importlib.util

    needs = {"zarr-device": ["zarr_device", "torch"], "zarr-device-direct": ["zarr_device", "torch"],
             "zarr-device-gds": ["zarr_device", "torch"], "zarr-python-gpu": ["zarr", "cupy", "torch"],
             "zarr-python+cuda": ["zarr", "torch"], "tensorstore+cuda": ["tensorstore", "torch"],
             "kvikio-gds": ["zarr", "kvikio", "cupy", "torch"], "czarr": ["czarr", "zarr", "cupy", "torch"]}  # fmt: skip
    missing = [m for m in needs[name] if importlib.util.find_spec(m) is None]
    return f"not installed: {', '.join(missing)}" if missing else None


def summarise(row: dict[str, Any]) -> None:
    if "error" in row or "skipped" in row:
        return
    n = row["nbytes"]
    row["warm_best_seconds"] = min(row["warm_seconds"]) if row["warm_seconds"] else row["first_seconds"]
    row["warm_gbps"] = n / row["warm_best_seconds"] / 1e9
    row["cold_gbps"] = n / min(row["cold_seconds"]) / 1e9 if row["cold_seconds"] else None


def format_limits(limits: dict[str, Any]) -> str:
    lines = ["limits:"]
    names = {"h2d_pinned": "host -> GPU, pinned", "h2d_pageable": "host -> GPU, pageable",
             "page_cache_to_pinned": "page cache -> pinned (preadv)", "disk_to_pinned_cold": "disk -> pinned, cold"}
    for key, label in names.items():
        entry = limits.get(key)
        if entry is None:
            continue
        if "skipped" in entry:
            lines.append(f"  {label:32s} skipped: {entry['skipped']}")
            continue
        extra = f", {entry['threads']} threads" if "threads" in entry else ""
        lines.append(f"  {label:32s} {entry['gbps']:7.2f} GB/s  ({fmt_bytes(entry['bytes'])}{extra})")
    if "error" in limits:
        lines.append(f"  failed: {limits['error']}")
    return "\n".join(lines)


def format_sweep(reported: dict[str, Any]) -> str:
    """The decode rate by chunks per call, calls running at once (streams, each with its own
    temporary memory) and where the compressed input lies."""
    lines = ["decode rate by batch: input, chunks per call x streams, nvCOMP temp per stream, GB/s of output"]
    for s in reported["sweep"]:
        gbps = reported["decoded_bytes"] / s["seconds"] / 1e9
        lines.append(f"  {s['input']:<11}  {s['batch']:>5} x {s['streams']:<2}  "
                     f"{fmt_bytes(s['temp_bytes_each']):>10}  {gbps:6.1f}")
    return "\n".join(lines)


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    header = ["codec", "stored", "reader", "warm GB/s", "cold GB/s", "zd warm x", "zd cold x",
              "RSS start", "peak RSS", "GPU peak", "torch peak"]
    table: list[tuple[list[str], str]] = []
    last = None
    for row in rows:
        first = row["codec"] != last
        last = row["codec"]
        cells = [row["codec"] if first else "", fmt_bytes(row["stored"]) if first else "", row["reader"]]
        if "error" in row or "skipped" in row:
            note = f"failed: {row['error']}" if "error" in row else f"skipped: {row['skipped']}"
            table.append((cells + [""] * (len(header) - 3), note))
            continue

        def ratio(key: str) -> str:
            value = row.get(key)
            return f"{value:.2f}x" if value else "-"

        def size(key: str) -> str:
            value = row.get(key)
            return fmt_bytes(value) if value is not None else "-"

        cold = f"{row['cold_gbps']:.2f}" if row.get("cold_gbps") else "-"
        table.append((cells + [f"{row['warm_gbps']:.2f}", cold, ratio("zd_warm_ratio"), ratio("zd_cold_ratio"),
                               size("rss_start_bytes"), size("peak_rss_bytes"), size("gpu_peak_bytes"),
                               size("torch_peak_bytes")], ""))
    widths = [max(len(r[i]) for r in [header] + [c for c, _ in table]) for i in range(len(header))]

    def line(cells: Sequence[str], note: str = "") -> str:
        text = "  ".join(c.rjust(w) if i >= 3 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        return (text.rstrip() + ("  " + note if note else "")).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(c, n) for c, n in table])


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=6 * GIB, help="array size (default 6GiB)")
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="default float32 (zarr-python has no bfloat16)")
    parser.add_argument("--layout", choices=LAYOUTS, default="sharded")
    parser.add_argument("--inner-chunk", type=parse_size, default=256 * 1024, help="sharded: inner chunk size (256KiB)")
    parser.add_argument("--shard", type=parse_size, default=64 * MIB, help="sharded: shard size (64MiB)")
    parser.add_argument("--chunk", type=parse_size, default=4 * MIB, help="unsharded: chunk size (4MiB)")
    parser.add_argument("--cols", type=int, default=8192, help="columns of the 2-d array (default 8192)")
    parser.add_argument("--codecs", default=",".join(CODECS), help="none,zstd (default both)")
    parser.add_argument("--zstd-level", type=int, default=1)
    parser.add_argument("--no-checksum", action="store_true",
                        help="zstd chunks without a crc32c after them, as zarr-python and tensorstore write them")
    parser.add_argument("--data", choices=("weights", "field"), default="weights",
                        help="the values: weights (N(0, 0.02)) or field (smooth, to 0.01; compresses)")
    parser.add_argument("--readers", default=",".join(READERS), help=f"default: {','.join(READERS)}")
    parser.add_argument("--repeat", type=int, default=3, help="zarr-device's warm reads, best taken (3)")
    parser.add_argument("--peer-repeat", type=int, default=1, help="each peer's warm reads (1)")
    parser.add_argument("--cold-repeat", type=int, default=1, help="cold reads per reader (1; 0: none)")
    parser.add_argument("--threads", type=int, default=0, help="threads for every reader (0: their defaults)")
    parser.add_argument("--io-threads", type=int, default=os.cpu_count() or 8, help="threads of the preadv limit")
    parser.add_argument("--copy-size", type=parse_size, default=2 * GIB, help="host -> GPU copy size (2GiB)")
    parser.add_argument("--device", default="cuda:0", help="cuda:N (or cpu, for a smoke run on a machine without a GPU)")
    parser.add_argument("--skip-limits", action="store_true")
    parser.add_argument("--decode-only", action="store_true", help="time the engine's GPU decode alone")
    parser.add_argument("--child-timeout", type=float, default=240.0, help="seconds per child process")
    parser.add_argument("--budget", type=float, default=420.0,
                        help="seconds for the whole run; readers not started by then are skipped (420)")
    parser.add_argument("--out", default=None, help="directory for the data and results (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the arrays written in the default temp dir")
    parser.add_argument("--json", metavar="OUT", default=None, help="also write the results to OUT")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--path", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-cold", action="store_true", help="skip every cold measurement")
    args = parser.parse_args(argv)
    args.readers = [r for r in args.readers.split(",") if r]
    args.codecs = [c for c in args.codecs.split(",") if c]
    for name in args.readers:
        if name not in READERS:
            parser.error(f"unknown reader {name!r} (one of {', '.join(READERS)})")
    for name in args.codecs:
        if name not in CODECS:
            parser.error(f"unknown codec {name!r} (one of {', '.join(CODECS)})")
    if args.repeat < 1 or args.peer_repeat < 0 or args.cold_repeat < 0:
        parser.error("--repeat must be >= 1, --peer-repeat and --cold-repeat >= 0")
    return args


def child_main(args: argparse.Namespace) -> dict[str, Any]:
    kind, _, name = args.child.partition(":")
    cold = not args.no_cold
    if kind == "reader":
        repeat = args.repeat if name.startswith("zarr-device") else args.peer_repeat
        return child_reader(name, args.path, args.device, repeat, args.cold_repeat if cold else 0, args.threads)
    if kind == "limits":
        return child_limits(args.path, args.device, args.copy_size, args.io_threads, cold)
    if kind == "decode":
        return child_decode(args.path, args.device, args.repeat)
    raise SystemExit(f"unknown child {args.child!r}")


def _child_args(args: argparse.Namespace, child: str, path: str) -> list[str]:
    out = ["--child", child, "--path", path, "--device", args.device, "--repeat", str(args.repeat),
           "--peer-repeat", str(args.peer_repeat), "--cold-repeat", str(args.cold_repeat),
           "--threads", str(args.threads), "--io-threads", str(args.io_threads), "--copy-size", str(args.copy_size)]
    return out + (["--no-cold"] if args.no_cold else [])


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        print(json.dumps(child_main(args)))
        return 0
    started = time.perf_counter()
    machine, versions, engine = machine_info(), package_versions(), engine_info()
    layout = layout_of(args)
    print_header(machine, versions, engine, layout, args.codecs, args.zstd_level,
                 f"{args.data} values, written by zarr-device"
                 + (", zstd without a checksum" if args.no_checksum else ""))
    if args.device.startswith("cuda") and not engine.get("devices"):
        print("note:     zarr_device sees no CUDA device; its reads will fail with DeviceError")

    own_dir = args.out is None
    out_dir = tempfile.mkdtemp(prefix="bench-gpu-") if own_dir else args.out
    os.makedirs(out_dir, exist_ok=True)
    data_dir = os.path.join(out_dir, "data")
    shape_tag = f"{layout['dtype']}-{layout['shape'][0]}x{layout['shape'][1]}-c{layout['chunks'][0]}" + (
        f"-s{layout['shards'][0]}" if layout["shards"] else "") + ("" if args.data == "weights" else f"-{args.data}") + (
        "-nocrc" if args.no_checksum else "")
    paths = {codec: os.path.join(data_dir, f"{shape_tag}-{codec}.zarr") for codec in args.codecs}
    document: dict[str, Any] = {"machine": machine, "versions": versions, "engine": engine, "layout": layout,
                                "args": {k: v for k, v in vars(args).items() if k not in ("child", "path")}}
    try:
        for codec, path in paths.items():
            log(f"writing {codec} array to {path}")
            seconds = write_array(path, layout, codec, args.zstd_level, args.data, checksum=not args.no_checksum)
            if seconds:
                log(f"  written in {seconds:.1f} s")
        cold_note = None
        if not args.no_cold and (args.cold_repeat > 0 or not args.skip_limits):
            log("writing back dirty pages and checking that the page cache can be dropped")
            cold_note = drop_caches()
            if cold_note is not None:
                print(f"note:     {cold_note}; cold figures are skipped")
                args.no_cold = True
        document["cold_note"] = cold_note

        if args.decode_only:
            document["decode_only"] = {}
            for codec, path in paths.items():
                result = run_child(_child_args(args, "decode", path), args.child_timeout, script=__file__)
                document["decode_only"][codec] = result
                if "skipped" in result or "error" in result:
                    print(f"decode-only {codec}: {result.get('skipped') or result.get('error')}")
                else:
                    rep = result["reported"]
                    gpu_gbps = rep["decoded_bytes"] / rep["seconds"] / 1e9 if rep.get("seconds") else 0.0
                    print(f"decode-only {codec}: nvCOMP decode {gpu_gbps:.1f} GB/s of output "
                          f"({rep['chunks']} chunks, {rep['compressed_bytes'] / 2**30:.2f} GiB in, "
                          f"{rep['decoded_bytes'] / 2**30:.2f} GiB out, GPU time by CUDA events, best of "
                          f"{args.repeat}; {rep['failed_chunks']} failed)", flush=True)
                    if rep.get("sweep"):
                        print(format_sweep(rep), flush=True)
            return _finish(document, args, out_dir, own_dir, data_dir, started)

        if not args.skip_limits:
            log("measuring limits ...")
            limits_path = paths.get("none") or next(iter(paths.values()))
            limits = run_child(_child_args(args, "limits", limits_path), args.child_timeout, script=__file__)
            document["limits"] = limits
            print(format_limits(limits), flush=True)

        # zarr-device on every codec first, then the peers, so that a slow peer running out the
        # time budget costs only the peers' figures
        done: dict[tuple[str, str], dict[str, Any]] = {}
        order = [r for r in args.readers if r == "zarr-device"] + [r for r in args.readers if r != "zarr-device"]
        for reader in order:
            for codec, path in paths.items():
                left = args.budget - (time.perf_counter() - started)
                why = reader_available(reader)
                if why is None and left < 20:
                    why = f"time budget of {args.budget:.0f} s spent (--budget)"
                if why is not None:
                    row: dict[str, Any] = {"reader": reader, "skipped": why}
                else:
                    log(f"reading {codec} with {reader} ...")
                    # each child's stderr (a failed reader's traceback) goes to readers.log
                    row = run_child(_child_args(args, f"reader:{reader}", path), min(args.child_timeout, left + 60),
                                    os.path.join(out_dir, "readers.log"), script=__file__)
                    row["reader"] = reader
                done[(codec, reader)] = row
        rows: list[dict[str, Any]] = []
        for codec, path in paths.items():
            stored = sum(size for _, size in chunk_files(path))
            codec_rows = []
            for reader in args.readers:
                row = done[(codec, reader)]
                row.update(codec=codec, stored=stored)
                summarise(row)
                codec_rows.append(row)
            prints = {r["reader"]: r["fingerprint"] for r in codec_rows if "fingerprint" in r}
            if len(set(prints.values())) > 1:
                print(f"WARNING: readers disagree on the values of {path}: {prints}")
            document.setdefault("disagreements", {})[codec] = prints if len(set(prints.values())) > 1 else None
            zd_row = next((r for r in codec_rows if r["reader"] == "zarr-device" and "warm_gbps" in r), None)
            for r in codec_rows:
                if zd_row is not None and r is not zd_row and "warm_gbps" in r:
                    r["zd_warm_ratio"] = zd_row["warm_gbps"] / r["warm_gbps"]
                    if zd_row.get("cold_gbps") and r.get("cold_gbps"):
                        r["zd_cold_ratio"] = zd_row["cold_gbps"] / r["cold_gbps"]
            rows += codec_rows
        document["results"] = rows
        print()
        print(format_table(rows))
        print()
        print(f"GB/s: decoded bytes ({fmt_bytes(layout['nbytes'])} per read) per second, 10^9. 'zd warm x': "
              "zarr-device's speed as a multiple of the row's. Peak RSS: VmHWM of the reader's own process "
              "(imports included; RSS start: after imports, before reading). GPU peak: largest drop of free device memory during the timed reads "
              "(output included); torch peak: torch's allocator alone. The '+cuda' peers copy from pageable "
              "memory, as torch.from_numpy(x).cuda() does.")
        if len({r.get("fingerprint") for r in rows if "fingerprint" in r}) <= len(args.codecs):
            print("Every reader that ran returned the same values (fingerprinted on the device).")
        return _finish(document, args, out_dir, own_dir, data_dir, started)
    finally:
        if own_dir and not args.keep:
            shutil.rmtree(data_dir, ignore_errors=True)


def _finish(document: dict[str, Any], args: argparse.Namespace, out_dir: str, own_dir: bool, data_dir: str,
            started: float) -> int:
    document["total_seconds"] = time.perf_counter() - started
    results_path = os.path.join(out_dir, "results.json")
    for target in [results_path] + ([args.json] if args.json else []):
        with open(target, "w") as f:
            json.dump(document, f, indent=2)
    print(f"results: {results_path}" + (f" and {args.json}" if args.json else "")
          + (f"; data kept in {data_dir}" if (not own_dir or args.keep) else "")
          + f"; {document['total_seconds']:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
