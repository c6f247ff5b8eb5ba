#!/usr/bin/env python
"""Single-chunk reads onto a GPU from 1, 4 and 16 threads: the package's read beside the engine's
own read of the same chunk into a fresh CuPy array, with no consumer stream and with the legacy
default stream (CuPy's null stream and torch's default stream, which every thread shares), so that
what lies between them shows.

    python bench/probes/probe_thread_reads.py [--rows 32] [--threads 1,4,16] [--out /tmp/zd-probe-thread-reads] [--layers]
        [--diagnose] [--only-package]

Two float32 arrays of 16384 x 8192 (512 MiB), chunks of --rows rows (32: 1 MiB), uncompressed and
zstd + crc32c, written once. Each way reads every chunk once a round, one read per chunk; prints
GB/s and microseconds of wall time per read, best of 3 rounds after one untimed read. --layers
adds the package's read taken apart, uncompressed only: with the device parsed and the selection
resolved beforehand, the adapter's allocation with the engine's read, and the allocation alone.
--diagnose adds, uncompressed only, the engine's read with one thing beside it each: a busy loop of
pure Python as long as the package's own work on one thread, a CuPy device context, CuPy's
current-stream lookup, the CUDA runtime calls a device context makes (cudaGetDevice, cudaSetDevice)
and cudaGetDeviceCount, each made holding the GIL, and the package's read under a GIL switch
interval of 0.1 ms instead of 5. --only-package: the package's two reads alone (to compare two
versions of the package, run once with each). Every figure comes with the process's CPU time and
context switches per read (getrusage), which say whether the threads wait or spin.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/: the shared modules
from bench_small_reads import timed_rounds  # noqa: E402

ROWS, COLS = 16384, 8192
LEGACY_STREAM = 1  # cudaStreamLegacy


def make_arrays(root: str, rows: int) -> dict[str, Any]:
    import zarr_device as zd

    codecs: dict[str, Any] = {
        "uncompressed": None,
        "zstd+crc32c": [{"name": "zstd", "configuration": {"level": 1}}, {"name": "crc32c"}],
    }
    arrays = {}
    for name, compressors in codecs.items():
        path = os.path.join(root, f"{name}-{rows}.zarr")
        if not os.path.exists(os.path.join(path, "zarr.json")):
            array = zd.create(path, shape=(ROWS, COLS), dtype="float32", chunks=(rows, COLS),
                              compressors=compressors, mode="w")
            rng = np.random.default_rng(0)
            for start in range(0, ROWS, 2048):  # weight-like values: half-precision mantissas
                values = rng.standard_normal((2048, COLS)) * 0.02
                array[start:start + 2048] = values.astype(np.float16).astype(np.float32)
        arrays[name] = zd.open_array(path)
    return arrays


def layers(array: Any, rows: int) -> dict[str, Callable[[slice], Any]]:
    """The package's read onto cuda:0 as CuPy, a layer at a time."""
    from zarr_device import _core
    from zarr_device.io import transfers
    from zarr_device.io.adapters import adapter
    from zarr_device.io.adapters.base import Target
    from zarr_device.io.devices import parse_device
    from zarr_device.core.selection import normalize_selection

    core = array._core  # noqa: SLF001 - the layers beneath the package's read
    device = parse_device("cuda:0")
    resolved = {start: normalize_selection(slice(start, start + rows), array.shape) for start in range(0, ROWS, rows)}
    cupy_adapter = adapter("cupy")
    what = core.describe()

    def parsed(s: slice) -> Any:
        selection = resolved[s.start]
        return transfers.read(core, selection.slices, selection.shape, device, "cupy", None)

    def allocate(s: slice) -> Any:
        return cupy_adapter.allocate(Target(resolved[s.start].shape, core.dtype, device, what))

    def allocate_and_read(s: slice) -> Any:
        selection = resolved[s.start]
        into = allocate(s)
        core.read_cuda(list(selection.slices), 0, into.ptr, into.nbytes, _core.ReadOptions(consumer_stream=into.stream))
        return into.result

    return {
        "package, parsed and resolved": parsed,
        "adapter allocation + engine": allocate_and_read,
        "adapter allocation alone": allocate,
    }


def busy_python(microseconds: float) -> Callable[[], None]:
    """A loop of pure Python (no call that lets the GIL go) taking about ``microseconds`` on one
    thread."""
    def spin(n: int) -> int:
        total = 0
        for i in range(n):
            total += i
        return total

    n = 1000
    t0 = time.perf_counter()
    for _ in range(100):
        spin(n)
    per_iteration = (time.perf_counter() - t0) / (100 * n)
    count = max(1, int(microseconds * 1e-6 / per_iteration))
    return lambda: None if spin(count) < 0 else None


def diagnose(array: Any, rows: int, python_us: float) -> dict[str, Callable[[slice], Any]]:
    """The engine's read with one suspect beside it (see the module's docstring)."""
    import cupy

    core = array._core  # noqa: SLF001 - the engine's read, beneath the package
    spin = busy_python(python_us)

    def engine_read(s: slice, stream: int = LEGACY_STREAM) -> Any:
        out = cupy.empty((rows, COLS), dtype=cupy.float32)
        core.read_cuda([(s.start, 1, rows), (0, 1, COLS)], 0, out.data.ptr, out.nbytes, _core.ReadOptions(consumer_stream=stream))
        return out

    def with_python(s: slice) -> Any:
        spin()
        return engine_read(s)

    def in_device_context(s: slice) -> Any:
        with cupy.cuda.Device(0):
            return engine_read(s)

    def with_stream_lookup(s: slice) -> Any:
        return engine_read(s, int(cupy.cuda.get_current_stream().ptr) or LEGACY_STREAM)

    def package_short_switch(s: slice) -> Any:
        return array.read(s, device="cuda:0", like="cupy")

    import torch

    from zarr_device import _core

    runtime = cupy.cuda.runtime

    def beside(call: Callable[[], Any]) -> Callable[[slice], Any]:
        def read(s: slice) -> Any:
            call()
            return engine_read(s)

        return read

    return {
        f"engine + {python_us:g} us of pure Python": with_python,
        "engine in a CuPy device context": in_device_context,
        "engine + CuPy stream lookup": with_stream_lookup,
        # What a device context is made of, each CUDA runtime call made holding the GIL:
        "engine + cudaGetDevice": beside(runtime.getDevice),
        "engine + cudaSetDevice(0)": beside(lambda: runtime.setDevice(0)),
        "engine + cudaGetDeviceCount": beside(_core.cuda_device_count),
        "engine + CuPy stream of device 0": beside(lambda: cupy.cuda.get_current_stream(0)),
        "engine + torch current_stream(0)": beside(lambda: torch.cuda.current_stream(0)),
        "a.read(like='cupy'), switch 0.1 ms": package_short_switch,
    }


def timed(read: Callable[[Any], Any], selections: list[Any], threads: int, sync: Callable[[], None],
          switch_interval: float | None = None) -> tuple[float, float, float]:
    """Best seconds of 3 rounds (timed_rounds), with the CPU microseconds and context switches
    (voluntary + involuntary) of the process per read over all of them."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    default_interval = sys.getswitchinterval()
    if switch_interval is not None:
        sys.setswitchinterval(switch_interval)
    try:
        seconds = timed_rounds(read, selections, threads, sync, 3)
    finally:
        sys.setswitchinterval(default_interval)
    after = resource.getrusage(resource.RUSAGE_SELF)
    reads = 3 * len(selections) + 1  # timed_rounds: one untimed read, then 3 rounds
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / reads * 1e6
    switches = (after.ru_nvcsw + after.ru_nivcsw - before.ru_nvcsw - before.ru_nivcsw) / reads
    return seconds, cpu, switches


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=32, help="rows per chunk (32 x 8192 float32: 1 MiB)")
    parser.add_argument("--threads", default="1,4,16")
    parser.add_argument("--out", default="/tmp/zd-probe-thread-reads")
    parser.add_argument("--layers", action="store_true", help="also the package's read taken apart")
    parser.add_argument("--diagnose", action="store_true", help="also the engine's read beside each suspect")
    parser.add_argument("--python-us", type=float, default=40.0, help="--diagnose: the busy loop's length")
    parser.add_argument("--only-package", action="store_true", help="the package's reads alone")
    args = parser.parse_args(argv)

    import cupy

    arrays = make_arrays(args.out, args.rows)
    rows = args.rows
    selections = [slice(i, i + rows) for i in range(0, ROWS, rows)]
    nbytes = ROWS * COLS * 4
    device = cupy.cuda.Device(0)

    def package(array: Any, like: str) -> Callable[[slice], Any]:
        return lambda s: array.read(s, device="cuda:0", like=like)

    def engine(array: Any, stream: int) -> Callable[[slice], Any]:
        from zarr_device import _core

        core = array._core  # noqa: SLF001 - the engine's read, beneath the package

        def read(s: slice) -> Any:
            out = cupy.empty((rows, COLS), dtype=cupy.float32)
            core.read_cuda([(s.start, 1, rows), (0, 1, COLS)], 0, out.data.ptr, out.nbytes, _core.ReadOptions(consumer_stream=stream))
            return out

        return read

    print(f"{len(selections)} single-chunk reads of {rows * COLS * 4 / 2**20:g} MiB a round; {os.cpu_count()} cores",
          flush=True)
    for codec, array in arrays.items():
        ways = {
            "a.read(like='cupy')": package(array, "cupy"),
            "a.read(like='torch')": package(array, "torch"),
        }
        if not args.only_package:
            ways["engine, no consumer stream"] = engine(array, 0)
            ways["engine, legacy default stream"] = engine(array, LEGACY_STREAM)
        if args.layers and codec == "uncompressed":
            ways.update(layers(array, rows))
        if args.diagnose and codec == "uncompressed":
            ways.update(diagnose(array, rows, args.python_us))
        for way, read in ways.items():
            figures = []
            for threads in (int(t) for t in args.threads.split(",")):
                interval = 1e-4 if "switch 0.1 ms" in way else None
                seconds, cpu, switches = timed(read, selections, threads, device.synchronize, interval)
                figures.append(f"{threads:2d} threads {nbytes / seconds / 1e9:6.2f} GB/s "
                               f"({seconds / len(selections) * 1e6:7.1f} us; cpu {cpu:6.1f} us, "
                               f"{switches:5.1f} cs)")
            print(f"{codec:12s}  {way:30s}  " + " | ".join(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
