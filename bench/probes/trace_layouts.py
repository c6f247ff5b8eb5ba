#!/usr/bin/env python
"""Where a read of one array spends its time, layout by layout: a 1 GiB bf16 array (zstd level 1 +
crc32c, normal(0, 0.02)) per chunk size, read onto the GPU with ``a.read(device=..., like="torch")``,
best of 3 warm reads, checked against the data written, with the engine's trace of every read
(ZARR_DEVICE_TRACE=1: plan, fetch waits, batches, drain, on stderr). Chunks of 16 MiB and more are
also read with larger staging and decode memory and without decode sharing; chunks of 1 MiB and
less also decoded on the CPU (``gpu_decode="off"``). Also prints nvCOMP's decode alone (the
compressed chunks already on the GPU) and how long 14 Python threads take to open and read the
chunk files.

    python bench/probes/trace_layouts.py --out /tmp/tl --chunks 64KiB,256KiB,1MiB 2> trace.log

Arrays are written once into --out and reused.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/: the shared modules

from bench_common import GIB, MIB, parse_size  # noqa: E402
from bench_layouts import COLS, ZSTD_CRC, rows_of, weights  # noqa: E402


def best_of(read: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    import torch

    result = read()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeat):
        del result
        sys.stderr.write("-- timed read\n")
        sys.stderr.flush()
        start = time.perf_counter()
        result = read()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best, result


def open_and_read_files(path: str, threads: int) -> tuple[int, int, float]:
    """(files, bytes, seconds) of `threads` Python threads opening and reading every chunk file."""
    files = [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs
             if not f.startswith(".") and f != "zarr.json"]
    buffers = [bytearray(64 << 20) for _ in range(threads)]
    lock = threading.Lock()
    next_file = [0]
    total = [0]

    def work(i: int) -> None:
        view = memoryview(buffers[i])
        n = 0
        while True:
            with lock:
                k = next_file[0]
                next_file[0] += 1
            if k >= len(files):
                break
            fd = os.open(files[k], os.O_RDONLY)
            try:
                n += os.readv(fd, [view])
            finally:
                os.close(fd)
        with lock:
            total[0] += n

    start = time.perf_counter()
    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return len(files), total[0], time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory for the arrays (reused when present)")
    parser.add_argument("--chunks", default="64KiB,1MiB,16MiB,64MiB")
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args(argv)
    import numpy as np
    import torch

    import zarr_device as zd

    os.environ["ZARR_DEVICE_TRACE"] = "1"
    rows = rows_of(GIB)
    data = weights(rows)
    for name in args.chunks.split(","):
        chunk = parse_size(name)
        path = os.path.join(args.out, f"trace-{name}.zarr")
        if not os.path.exists(path):
            zd.create(path, shape=(rows, COLS), dtype="bfloat16", mode="w", chunks=(rows_of(chunk), COLS),
                      compressors=ZSTD_CRC)[...] = data
            os.sync()  # writeback would compete with the reads measured
        array = zd.open_array(path)
        files, nbytes, seconds = open_and_read_files(path, 14)
        print(f"{name}: {files} chunk files ({nbytes / 1e9:.2f} GB) opened and read by 14 Python threads "
              f"in {seconds * 1e3:.1f} ms", flush=True)
        variants: list[tuple[str, dict[str, Any]]] = [("default", {})]
        if chunk >= 16 * MIB:
            variants += [("sharing off", {"decode_sharing": "off"}),
                         ("staging 2GiB decode 4GiB", {"staging_bytes": 2 * GIB, "decode_bytes": 4 * GIB}),
                         ("staging 2GiB decode 8GiB, sharing off",
                          {"staging_bytes": 2 * GIB, "decode_bytes": 8 * GIB, "decode_sharing": "off"})]
        if chunk <= MIB:
            variants.append(("CPU decode (gpu_decode=off)", {"gpu_decode": "off"}))
        for label, settings in variants:
            previous = zd.set_config(**settings) if settings else None
            sys.stderr.write(f"== {name} {label}\n")
            sys.stderr.flush()
            try:
                seconds, result = best_of(lambda: array.read(device=args.device, like="torch"))
                same = np.array_equal(result.view(torch.int16).cpu().numpy(), data.view(np.int16))
                del result
            finally:
                if previous is not None:
                    zd.set_config(**{k: getattr(previous, k) for k in settings})
            print(f"{name:7} {label:40} {array.nbytes / seconds / 1e9:7.2f} GB/s"
                  f"{'' if same else '  WRONG VALUES'}", flush=True)
        decode = array._core.bench_decode_cuda([(0, 1, n) for n in array.shape], 0)
        print(f"{name:7} {'nvCOMP decode alone':40} "
              f"{float(decode.get('decoded_bytes', 0)) / float(decode['seconds']) / 1e9:7.2f} GB/s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
