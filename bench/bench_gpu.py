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
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from zarr_device.cli import parse_size  # noqa: E402 - the package's size parser, as an argparse type

READERS = ("zarr-device", "zarr-device-direct", "zarr-device-gds", "zarr-python-gpu", "zarr-python+cuda",
           "tensorstore+cuda", "kvikio-gds")
PEERS = READERS[3:]
CODECS = ("none", "zstd")
LAYOUTS = ("sharded", "unsharded")
DTYPES = ("float32", "bfloat16")
SAMPLE_VERSION = 1
MIB = 1 << 20
GIB = 1 << 30


# ------------------------------------------------------------------------------------------------
# small helpers
# ------------------------------------------------------------------------------------------------


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def read_proc_status(field: str) -> int | None:
    """A ``kB`` field of /proc/self/status (VmRSS, VmHWM), in bytes."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def drop_caches() -> str | None:
    """Writes back dirty pages and drops the page cache. None on success, else why not."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as e:
        return f"cannot drop the page cache ({e.strerror or e}): cold figures need root and a writable /proc/sys"
    return None


# ------------------------------------------------------------------------------------------------
# the machine
# ------------------------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpu": platform.processor() or "unknown",
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_bytes": None,
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "gpus": [],
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["memory_bytes"] = int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        query = "name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current"
        done = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
        info["gpus"] = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError) as e:
        info["gpus"] = [f"nvidia-smi unavailable ({e})"]
    return info


def package_versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in ("zarr-device", "torch", "zarr", "tensorstore", "cupy-cuda13x", "cupy-cuda12x", "kvikio-cu13",
                 "kvikio-cu12", "kvikio", "numpy"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            if not name.startswith(("cupy", "kvikio")):
                out[name] = None
    return out


def engine_info() -> dict[str, Any]:
    try:
        from zarr_device import _core

        info = dict(_core.cuda_build_info()) if hasattr(_core, "cuda_build_info") else {"compiled": False}
        info["devices"] = int(_core.cuda_device_count()) if hasattr(_core, "cuda_device_count") else 0
        info["bench_decode_cuda"] = hasattr(_core.Array, "bench_decode_cuda")
        return info
    except Exception as e:  # report, don't fail: the header is informational
        return {"error": repr(e)}


# ------------------------------------------------------------------------------------------------
# the data (written once by zarr-device; every reader reads the same files)
# ------------------------------------------------------------------------------------------------


def layout_of(args: argparse.Namespace) -> dict[str, Any]:
    itemsize = 4 if args.dtype == "float32" else 2
    row_bytes = args.cols * itemsize
    if args.layout == "sharded":
        chunk_rows = max(1, args.inner_chunk // row_bytes)
        shard_rows = max(chunk_rows, args.shard // row_bytes // chunk_rows * chunk_rows)
        grid_rows = shard_rows
    else:
        chunk_rows = max(1, args.chunk // row_bytes)
        shard_rows = None
        grid_rows = chunk_rows
    rows = max(grid_rows, args.size // row_bytes // grid_rows * grid_rows)
    return {
        "dtype": args.dtype,
        "shape": [rows, args.cols],
        "chunks": [chunk_rows, args.cols],
        "shards": None if shard_rows is None else [shard_rows, args.cols],
        "nbytes": rows * row_bytes,
        "itemsize": itemsize,
    }


def _marker(layout: dict[str, Any], codec: str, level: int, data: str, checksum: bool = True) -> dict[str, Any]:
    marker = {"version": SAMPLE_VERSION, "layout": layout, "codec": codec, "level": level}
    if data != "weights":  # arrays written before --data existed hold weights
        marker["data"] = data
    if not checksum:  # nor did they leave the crc32c out
        marker["checksum"] = False
    return marker


def sample_block(rng: Any, size: int, data: str) -> Any:
    """``size`` float32 values of the kind ``data`` names (see the module's text)."""
    import numpy as np

    if data == "weights":
        return rng.standard_normal(size, dtype=np.float32) * np.float32(0.02)
    # A temperature-like field in kelvin: slow waves plus noise, kept to 0.01 K.
    x = np.arange(size, dtype=np.float64)
    field = 280.0 + 10.0 * np.sin(x / 5000.0) + 3.0 * np.sin(x / 377.0) + rng.standard_normal(size) * 0.5
    return np.round(field, 2).astype(np.float32)


def compressor_codecs(codec: str, level: int, checksum: bool = True) -> list[dict[str, Any]]:
    """The bytes-to-bytes codecs of ``codec``: the crc32c after zstd lets a reader reject a
    damaged chunk before a GPU decoder, which trusts its input, sees it; every peer reads and
    writes the same chain. ``checksum=False``: zstd alone."""
    if codec == "none":
        return []
    zstd = {"name": "zstd", "configuration": {"level": level, "checksum": False}}
    return [zstd, {"name": "crc32c"}] if checksum else [zstd]


def print_header(machine: dict[str, Any], versions: dict[str, str | None], engine: dict[str, Any],
                 layout: dict[str, Any], codecs: Sequence[str], level: int, source: str) -> None:
    """The run's machine, versions, engine build and array, as both GPU benchmarks print them."""
    print(f"machine:  {machine['cpu']}; {machine['usable_cores']} cores usable of {machine['cores']}; "
          f"{fmt_bytes(machine['memory_bytes'] or 0)} RAM; {machine['system']}; Python {machine['python']}")
    for gpu in machine["gpus"] or ["no GPU found by nvidia-smi"]:
        print(f"gpu:      {gpu}")
    print("versions: " + ", ".join(f"{k} {v or '(not installed)'}" for k, v in versions.items()))
    print(f"engine:   {json.dumps(engine)}")
    grid = f"shards of {layout['shards']} holding chunks of {layout['chunks']}" if layout["shards"] else \
        f"chunks of {layout['chunks']}"
    print(f"array:    {fmt_bytes(layout['nbytes'])} {layout['dtype']}, shape {tuple(layout['shape'])}, {grid} "
          f"({fmt_bytes(math.prod(layout['chunks']) * layout['itemsize'])} per chunk), codecs {list(codecs)} "
          f"(zstd level {level}), {source}", flush=True)


def write_array(path: str, layout: dict[str, Any], codec: str, level: int, data: str = "weights", *,
                checksum: bool = True, dimension_names: Sequence[str] | None = None) -> float:
    """Writes the sample array (skipped when an earlier run left it complete). Returns seconds.
    ``checksum``: crc32c after zstd; ``dimension_names``: for readers that need them (xarray)."""
    import numpy as np

    import zarr_device as zd

    marker = _marker(layout, codec, level, data, checksum)
    try:
        with open(os.path.join(path, "zarr.json")) as f:
            if json.load(f).get("attributes", {}).get("bench_gpu") == marker:
                log(f"reusing {path}")
                return 0.0
    except (OSError, ValueError):
        pass
    start = time.perf_counter()
    compressors: Any = compressor_codecs(codec, level, checksum) or None
    rows, cols = layout["shape"]
    grid_rows = (layout["shards"] or layout["chunks"])[0]
    arr = zd.create(path, shape=layout["shape"], dtype=layout["dtype"], chunks=layout["chunks"],
                    shards=layout["shards"], compressors=compressors, dimension_names=dimension_names, mode="w")
    # One 256 MiB block of weights-like values, rotated differently for every slab: no two
    # chunks hold the same bytes, and generating gigabytes of normal deviates takes no time.
    slab_rows = max(grid_rows, (256 * MIB // (cols * layout["itemsize"])) // grid_rows * grid_rows)
    rng = np.random.default_rng(20261130)
    base = sample_block(rng, slab_rows * cols, data)
    if layout["dtype"] == "bfloat16":
        import ml_dtypes

        base = base.astype(ml_dtypes.bfloat16)
    for i, r0 in enumerate(range(0, rows, slab_rows)):
        r1 = min(rows, r0 + slab_rows)
        block = np.roll(base, int(rng.integers(1, base.size)))[: (r1 - r0) * cols].reshape(r1 - r0, cols)
        arr[r0:r1] = block
        if i % 8 == 0:
            log(f"  writing {codec}: {fmt_bytes(r1 * cols * layout['itemsize'])} of {fmt_bytes(layout['nbytes'])}")
    arr.update_attributes({"bench_gpu": marker})
    return time.perf_counter() - start


def chunk_files(path: str) -> list[tuple[str, int]]:
    files = []
    for folder, _dirs, names in os.walk(path):
        for name in names:
            if name != "zarr.json":
                full = os.path.join(folder, name)
                files.append((full, os.path.getsize(full)))
    return sorted(files)


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


def fingerprint(torch: Any, tensor: Any) -> str:
    """A position-weighted sum of the result's bits, computed where the result lives."""
    flat = tensor.reshape(-1)
    flat = flat.view(torch.int16 if flat.element_size() == 2 else torch.int32)
    total = torch.zeros((), dtype=torch.int64, device=flat.device)
    step = 1 << 26
    for i in range(0, flat.numel(), step):
        part = flat[i:i + step].to(torch.int64)
        weight = torch.arange(i, i + part.numel(), dtype=torch.int64, device=flat.device) % 1021 + 1
        total += (part * weight).sum()
    return f"{int(total.item()) & (2**64 - 1):016x}"


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


def _threaded_read(files: Sequence[tuple[str, int]], buffers: Sequence[memoryview], slot: int) -> float:
    """Reads every file whole with one thread per buffer (files dealt out by size); seconds."""
    n = len(buffers)
    shares: list[list[tuple[str, int]]] = [[] for _ in range(n)]
    loads = [0] * n
    for path, size in sorted(files, key=lambda f: -f[1]):
        i = loads.index(min(loads))
        shares[i].append((path, size))
        loads[i] += size
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            buffer = buffers[i]
            for path, size in shares[i]:
                fd = os.open(path, os.O_RDONLY)
                try:
                    offset = 0
                    while offset < size:
                        got = os.preadv(fd, [buffer[: min(slot, size - offset)]], offset)
                        if got <= 0:
                            raise OSError(f"short read of {path} at {offset}")
                        offset += got
                finally:
                    os.close(fd)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    if errors:
        raise errors[0]
    return seconds


def child_limits(path: str, device: str, copy_size: int, io_threads: int, cold: bool) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {}
    on_gpu = device.startswith("cuda")
    if on_gpu:
        host = torch.empty(copy_size, dtype=torch.uint8, pin_memory=True)
        host.fill_(1)
        target = torch.empty(copy_size, dtype=torch.uint8, device=device)
        runs = []
        for i in range(6):
            torch.cuda.synchronize()
            start = time.perf_counter()
            target.copy_(host, non_blocking=True)
            torch.cuda.synchronize()
            if i:  # the first copy is a warm-up
                runs.append(time.perf_counter() - start)
        out["h2d_pinned"] = {"bytes": copy_size, "seconds": min(runs), "gbps": copy_size / min(runs) / 1e9}
        pageable_size = min(copy_size, GIB)
        pageable = torch.ones(pageable_size, dtype=torch.uint8)
        runs = []
        for i in range(3):
            torch.cuda.synchronize()
            start = time.perf_counter()
            target[:pageable_size].copy_(pageable)
            torch.cuda.synchronize()
            if i:
                runs.append(time.perf_counter() - start)
        out["h2d_pageable"] = {"bytes": pageable_size, "seconds": min(runs), "gbps": pageable_size / min(runs) / 1e9}
        del host, target, pageable
    files = chunk_files(path)
    total = sum(size for _, size in files)
    slot = 64 * MIB
    try:
        staging = torch.empty(io_threads * slot, dtype=torch.uint8, pin_memory=on_gpu)
    except RuntimeError:
        staging = torch.empty(io_threads * slot, dtype=torch.uint8)
    view = memoryview(staging.numpy())
    buffers = [view[i * slot:(i + 1) * slot] for i in range(io_threads)]
    _threaded_read(files, buffers, slot)  # the cache holds the files now
    runs = [_threaded_read(files, buffers, slot) for _ in range(2)]
    out["page_cache_to_pinned"] = {"bytes": total, "threads": io_threads, "files": len(files),
                                   "seconds": min(runs), "gbps": total / min(runs) / 1e9}
    if cold:
        why = drop_caches()
        if why is None:
            seconds = _threaded_read(files, buffers, slot)
            out["disk_to_pinned_cold"] = {"bytes": total, "threads": io_threads, "seconds": seconds,
                                          "gbps": total / seconds / 1e9}
        else:
            out["disk_to_pinned_cold"] = {"skipped": why}
    return out


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


def run_child(arguments: list[str], timeout: float, log_path: str | None = None,
              script: str = __file__) -> dict[str, Any]:
    """Runs ``script`` (this one by default) as a child with ``arguments``; its last output line
    is a JSON object. Its stderr goes to ``log_path`` when given."""
    command = [sys.executable, os.path.abspath(script), *arguments]
    done: subprocess.CompletedProcess[str] | None = None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        stderr = done.stderr
    except subprocess.TimeoutExpired as e:
        stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    if log_path is not None:
        with open(log_path, "a") as f:
            f.write(f"$ {' '.join(command)}\n{stderr}\n")
    if done is None:
        return {"error": f"timed out after {timeout:.0f} s"}
    if done.returncode != 0:
        lines = stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        return {"error": lines[-1][:300]}
    try:
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": f"no result from the child: {done.stdout[-300:]!r} {stderr[-300:]!r}"}
    return result


# ------------------------------------------------------------------------------------------------
# the parent
# ------------------------------------------------------------------------------------------------


def reader_available(name: str) -> str | None:
    """None when the reader's packages import, else why it is skipped."""
    import importlib.util

    needs = {"zarr-device": ["zarr_device", "torch"], "zarr-device-direct": ["zarr_device", "torch"],
             "zarr-device-gds": ["zarr_device", "torch"], "zarr-python-gpu": ["zarr", "cupy", "torch"],
             "zarr-python+cuda": ["zarr", "torch"], "tensorstore+cuda": ["tensorstore", "torch"],
             "kvikio-gds": ["zarr", "kvikio", "cupy", "torch"]}  # fmt: skip
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
                 f"{args.data} values, written by zarr-device")
    if args.device.startswith("cuda") and not engine.get("devices"):
        print("note:     zarr_device sees no CUDA device; its reads will fail with DeviceError")

    own_dir = args.out is None
    out_dir = tempfile.mkdtemp(prefix="bench-gpu-") if own_dir else args.out
    os.makedirs(out_dir, exist_ok=True)
    data_dir = os.path.join(out_dir, "data")
    shape_tag = f"{layout['dtype']}-{layout['shape'][0]}x{layout['shape'][1]}-c{layout['chunks'][0]}" + (
        f"-s{layout['shards'][0]}" if layout["shards"] else "") + ("" if args.data == "weights" else f"-{args.data}")
    paths = {codec: os.path.join(data_dir, f"{shape_tag}-{codec}.zarr") for codec in args.codecs}
    document: dict[str, Any] = {"machine": machine, "versions": versions, "engine": engine, "layout": layout,
                                "args": {k: v for k, v in vars(args).items() if k not in ("child", "path")}}
    try:
        for codec, path in paths.items():
            log(f"writing {codec} array to {path}")
            seconds = write_array(path, layout, codec, args.zstd_level, args.data)
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
                result = run_child(_child_args(args, "decode", path), args.child_timeout)
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
            limits = run_child(_child_args(args, "limits", limits_path), args.child_timeout)
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
                    row = run_child(_child_args(args, f"reader:{reader}", path), min(args.child_timeout, left + 60))
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
