#!/usr/bin/env python
"""What a model load leaves behind, and what ``zd.empty_cache()`` gives back: a state dict of
bf16 tensors (``bench_many.py``'s, zstd + crc32c or uncompressed) read onto a GPU in one call and
one tensor at a time from 4 threads (up to four rings), then the device's free memory and the
host's RSS before and after ``zd.empty_cache()``, and the next load's time against a load into
the kept rings (what the freed memory costs the next read: pinning the staging again).

    python bench/bench_empty_cache.py --out /tmp/bec [--size 2GiB] [--codec zstd]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import GIB, MIB, parse_size, read_proc_status  # noqa: E402
from bench_many import tensor_rows, write_state_dict  # noqa: E402


def rss_bytes() -> int:
    return read_proc_status("VmRSS") or 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", required=True, help="where the state dict is written (reused when present)")
    parser.add_argument("--size", type=parse_size, default=2 * GIB)
    parser.add_argument("--codec", default="zstd", choices=("zstd", "none"))
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args(argv)
    import torch

    import zarr_device as zd

    path = os.path.join(args.out, f"state-{args.codec}-{args.size}.zarr")
    if not os.path.isdir(path):
        write_state_dict(path, tensor_rows(args.size, 0), args.codec, 256)
        os.sync()
    group = zd.open_group(path)
    arrays = dict(group.all_arrays())
    nbytes = sum(a.nbytes for a in arrays.values())

    def load() -> dict[str, Any]:
        result = zd.read_many(arrays, device=args.device, like="torch")
        with ThreadPoolExecutor(4) as pool:  # as four loader threads would: up to four rings
            list(pool.map(lambda a: a.read(device=args.device, like="torch"), arrays.values()))
        return result

    def timed_load() -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        loaded = load()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        del loaded
        return seconds

    index = torch.device(args.device).index or 0
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    free_start = torch.cuda.mem_get_info(index)[0]
    rss_start = rss_bytes()
    kept = min(timed_load() for _ in range(3))  # the rings made, then kept
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # torch's own cache of the outputs is not the reads'
    free_loaded, rss_loaded = torch.cuda.mem_get_info(index)[0], rss_bytes()
    zd.empty_cache(args.device)
    free_after, rss_after = torch.cuda.mem_get_info(index)[0], rss_bytes()
    after_release = timed_load()
    zd.empty_cache(args.device)
    print(f"{len(arrays)} tensors, {nbytes / GIB:.2f} GiB, {args.codec}; loads: read_many, then 4 threads one by one")
    print(f"kept after loading (the reads' rings and decode memory, and the kernels CUDA loaded): device {(free_start - free_loaded) / MIB:.0f} MiB, "
          f"host RSS {(rss_loaded - rss_start) / MIB:.0f} MiB")
    print(f"given back by zd.empty_cache(): device {(free_after - free_loaded) / MIB:.0f} MiB, "
          f"host RSS {(rss_loaded - rss_after) / MIB:.0f} MiB")
    print(f"a load into kept rings {kept * 1e3:.1f} ms; the next load after empty_cache {after_release * 1e3:.1f} ms "
          f"({after_release / kept:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
