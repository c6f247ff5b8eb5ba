"""What one small read costs in Python and the engine: host reads of one 16 KiB uncompressed chunk,
``like="numpy"`` and ``like="torch"``, best of 5 rounds of 3000 calls (after 500 untimed).

    python bench/probes/probe_read_overhead.py [--calls 3000] [--label NAME]

Run it with two builds on PYTHONPATH in turn, alternated, to compare them in one sitting.
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

import zarr_device as zd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000, help="calls per round (3000)")
    parser.add_argument("--label", default=zd.__file__, help="a name for this build in the output")
    args = parser.parse_args()
    likes = ["numpy"]
    try:
        import torch  # noqa: F401

        likes.append("torch")
    except ImportError:
        pass
    folder = Path(tempfile.mkdtemp())
    try:
        arr = zd.create(folder / "a", shape=(64, 64), dtype="float32", chunks=(64, 64), compressors=None)
        arr[...] = np.ones((64, 64), np.float32)
        arr = zd.open_array(folder / "a")
        figures = []
        for like in likes:
            for _ in range(500):
                arr.read(like=like)
            best = float("inf")
            for _ in range(5):
                start = time.perf_counter()
                for _ in range(args.calls):
                    arr.read(like=like)
                best = min(best, (time.perf_counter() - start) / args.calls)
            figures.append(f"like={like}: {best * 1e6:.2f} us per read")
        print(f"{args.label}: " + "; ".join(figures))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
