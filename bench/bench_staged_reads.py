"""Reads onto devices torch drives itself (Apple MPS, Intel XPU, ROCm) go through a host staging:
what that costs in host memory and time, on any machine.

A state dict of bf16 tensors (``bench_many.py``'s, one array per tensor, 512-row chunks of 4 MiB)
is read by ``zd.read_many`` in a fresh process for each way:

- ``cpu``: into host memory (the results are the host memory), for reference;
- ``staged``: onto torch's ``meta`` device, which allocates nothing and whose copies move nothing,
  so that what the process holds is the host side of a read onto such a device: the engine's
  read, the staging and torch's copies from it.

    python bench/bench_staged_reads.py --size 2GiB --out /tmp/bsr [--staging 768MiB,64MiB]
    [--packages DIR,DIR]  # alternate package folders (PYTHONPATH entries) in the same run

Prints GB/s (decoded bytes per second, 10^9) and the peak resident memory of each process
beyond what it held before the read (``ru_maxrss``), against the state dict's size.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import MIB, parse_size  # noqa: E402 - what the benchmarks share
from bench_many import tensor_rows, write_state_dict  # noqa: E402

_CHILD = r"""
import json, resource, sys, time
import zarr_device as zd
path, way, staging = sys.argv[1], sys.argv[2], int(sys.argv[3])
zd.set_config(staging_bytes=staging)
arrays = zd.open_group(path).all_arrays()
import torch  # imported before the baseline, as a loader has it
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
start = time.perf_counter()
out = zd.read_many(arrays, device="meta" if way == "staged" else "cpu", like="torch")
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
nbytes = sum(t.numel() * t.element_size() for t in out.values())
print(json.dumps({"seconds": seconds, "nbytes": nbytes, "peak_beyond": peak - before}))
"""


def run_one(path: str, way: str, staging: int, package: str | None) -> dict[str, Any]:
    env = dict(os.environ)
    if package:
        env["PYTHONPATH"] = package + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", _CHILD, path, way, str(staging)], env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{way} failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="2GiB")
    parser.add_argument("--out", default=None, help="where the state dict is written (a temporary folder)")
    parser.add_argument("--staging", default="768MiB", help="staging_bytes values, comma-separated")
    parser.add_argument("--packages", default="", help="package folders to alternate, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="bench-staged-")
    path = os.path.join(out, "sd.zarr")
    if not os.path.exists(path):
        write_state_dict(path, tensor_rows(parse_size(args.size), 1), "none", 512)
    packages = [p for p in args.packages.split(",") if p] or [None]
    print(f"{'package':28}  {'way':6}  {'staging':>8}  {'GB/s (best)':>11}  {'peak beyond, MiB':>16}  {'data, MiB':>9}")
    for staging_text in args.staging.split(","):
        staging = parse_size(staging_text)
        for way in ("cpu", "staged"):
            runs: dict[str | None, list[dict[str, Any]]] = {p: [] for p in packages}
            for _ in range(args.repeat):
                for package in packages:  # alternated, so drift spreads over all
                    runs[package].append(run_one(path, way, staging, package))
            for package, results in runs.items():
                best = min(r["seconds"] for r in results)
                nbytes = results[0]["nbytes"]
                peak = max(r["peak_beyond"] for r in results)
                print(f"{(package or 'installed')[-28:]:28}  {way:6}  {staging_text:>8}  {nbytes / best / 1e9:11.2f}  "
                      f"{peak / MIB:16.0f}  {nbytes / MIB:9.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
