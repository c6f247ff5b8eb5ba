#!/usr/bin/env python
"""Time to the first GPU read in a fresh process, stage by stage: importing torch and making its
CUDA context, importing zarr_device, the first reads of one chunk, the first whole-array read
(which allocates the rest of the pinned staging), and the same read again.

    python bench/bench_first_read.py PATH_OF_AN_ARRAY [--device cuda:0]

Run it once per process: what it measures happens once per process.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("path")
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args(argv)
    marks = [time.perf_counter()]

    def mark(what: str) -> None:
        marks.append(time.perf_counter())
        print(f"  {what}: {1e3 * (marks[-1] - marks[-2]):.0f} ms", flush=True)

    import torch

    mark("import torch")
    torch.zeros(1, device=args.device)
    torch.cuda.synchronize()
    mark("torch's CUDA context")
    import zarr_device as zd

    mark("import zarr_device")
    a = zd.open_array(args.path)
    rows = a.chunks[0]
    a.read(slice(0, rows), device=args.device, like="torch")
    torch.cuda.synchronize()
    mark("first read, one chunk")
    a.read(slice(rows, 2 * rows), device=args.device, like="torch")
    torch.cuda.synchronize()
    mark("second read, one chunk")
    whole = a.read(device=args.device, like="torch")
    torch.cuda.synchronize()
    mark(f"whole array, {whole.nbytes >> 20} MiB (the rest of the staging allocated)")
    del whole
    whole = a.read(device=args.device, like="torch")
    torch.cuda.synchronize()
    mark("whole array again")
    return 0


if __name__ == "__main__":
    sys.exit(main())
