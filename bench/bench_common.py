"""What the benchmarks share: sizes and their parsing, the machine's description, the sample
arrays they write, the machine's limits measured in a child process (page cache -> pinned memory,
pinned -> GPU copy, cold disk), and running a measurement in a process of its own."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from zarr_device.tools.cli import parse_size  # the package's size parser, as an argparse type
from zarr_device.tools.machine import machine_info  # the machine, as `zarr-device bench --plot` names it

__all__ = ["machine_info", "parse_size"]  # re-exported for the benchmarks; the rest are used by name

CODECS = ("none", "zstd")
LAYOUTS = ("sharded", "unsharded")
DTYPES = ("float32", "bfloat16")
SAMPLE_VERSION = 1
MIB = 1 << 20
GIB = 1 << 30


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


def print_machine(machine: dict[str, Any], versions: dict[str, str | None], engine: dict[str, Any]) -> None:
    """The run's machine, package versions and engine build, as the benchmarks print them."""
    print(f"machine:  {machine['cpu']}; {machine['usable_cores']} cores usable of {machine['cores']}; "
          f"{fmt_bytes(machine['memory_bytes'] or 0)} RAM; {machine['system']}; Python {machine['python']}")
    for gpu in machine["gpus"] or ["no GPU found by nvidia-smi"]:
        print(f"gpu:      {gpu}")
    print("versions: " + ", ".join(f"{k} {v or '(not installed)'}" for k, v in versions.items()))
    print(f"engine:   {json.dumps(engine)}")


def print_header(machine: dict[str, Any], versions: dict[str, str | None], engine: dict[str, Any],
                 layout: dict[str, Any], codecs: Sequence[str], level: int, source: str) -> None:
    """The run's machine, versions, engine build and array, as both GPU benchmarks print them."""
    print_machine(machine, versions, engine)
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


def run_child(arguments: list[str], timeout: float, log_path: str | None = None, *,
              script: str) -> dict[str, Any]:
    """Runs ``script`` as a child with ``arguments``; its last output line is a JSON object. Its
    stderr goes to ``log_path`` when given."""
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
