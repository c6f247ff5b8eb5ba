"""Chunks larger than a staging slot, read onto a GPU: one array per chunk size and codec chain,
read whole by zarr-device and, in the same run, by its host read followed by one copy to the
device (what a reader without a device path does). Chunks decoded on the CPU that fill most of a
slot (zstd without a checksum under ``gpu_decode="checked"``), chunks larger than a slot and
chunks larger than the whole ring are staged a part at a time; the build before that refused the
last and cut the ring into fewer, larger slots for the others.

    python bench/bench_chunk_parts.py --out /tmp/bcp --size 2GiB --chunks 64MiB,256MiB,2GiB

Prints GB/s (decoded bytes per second, 10^9), best of ``--repeat`` warm reads, each read checked
against the host read; "refused" where the read raises OutOfMemoryError. ``--codecs`` picks from
zstd (no checksum, as zarr-python writes it), plain (no codecs), plain+crc32c and zstd+crc32c.

With ``--ranks N``, each array is instead read as a tensor-parallel rank reads it: N row slices,
each on its own (best of ``--repeat`` each), GB/s of the slices' bytes over their times; a slice
of a chunk larger than the whole staging is staged in parts of its selected rows.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import MIB, fmt_bytes, parse_size  # noqa: E402
from bench_layouts import COLS, best_of, weights  # noqa: E402

CODECS: dict[str, dict[str, Any]] = {
    "zstd": {"compressors": {"name": "zstd", "configuration": {"level": 1}}},
    "plain": {"compressors": None},
    "plain+crc32c": {"codecs": [{"name": "bytes"}, {"name": "crc32c"}]},
    "zstd+crc32c": {"compressors": [{"name": "zstd", "configuration": {"level": 1}}, {"name": "crc32c"}]},
}


def array_at(zd: Any, path: str, rows: int, chunk_rows: int, codec: str) -> Any:
    marker = os.path.join(path, ".written")
    if os.path.exists(marker):
        return zd.open_array(path)
    arr = zd.create(path, shape=(rows, COLS), dtype="bfloat16", chunks=(chunk_rows, COLS), mode="w",
                    **CODECS[codec])
    step = max(1, (256 * MIB) // (COLS * 2))
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        arr[start:stop] = weights(stop - start, seed=start)
    open(marker, "w").close()
    return zd.open_array(path)


def digest(torch: Any, t: Any) -> str:
    return hashlib.sha256(t.contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for the arrays (reused when present)")
    parser.add_argument("--size", type=parse_size, default=parse_size("2GiB"))
    parser.add_argument("--chunks", default="64MiB,256MiB,2GiB")
    parser.add_argument("--codecs", default="zstd,plain+crc32c,zstd+crc32c")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--ranks", type=int, default=0, help="read N row slices, one at a time")
    args = parser.parse_args()

    import torch

    import zarr_device as zd

    rows = max(1, args.size // (COLS * 2))
    config = zd.get_config()
    print(f"zarr-device {zd.__version__}; staging {fmt_bytes(config.staging_bytes)} in "
          f"{config.staging_slots} slots; {os.cpu_count()} cores; {torch.cuda.get_device_name(0)}", flush=True)
    print(f"{'codecs':14} {'chunks':>8} {'stored':>7} {'zarr-device':>12} {'host + copy':>12} {'ratio':>6}", flush=True)
    for codec in args.codecs.split(","):
        for chunk in (parse_size(c) for c in args.chunks.split(",")):
            chunk_rows = max(1, min(rows, chunk // (COLS * 2)))
            path = os.path.join(args.out, f"{codec}-{chunk}")
            arr = array_at(zd, path, rows, chunk_rows, codec)
            stored = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
            nbytes = rows * COLS * 2

            ranks = max(1, args.ranks)
            slices = [slice(r * rows // ranks, (r + 1) * rows // ranks) for r in range(ranks)]
            if args.ranks:
                nbytes = rows * COLS * 2  # all slices together

            def host_then_copy(sel: slice, a: Any = arr) -> Any:
                return torch.from_numpy(a.read((sel,), device="cpu", like="numpy").view(np.int16)).to(args.device)

            s_host = s_dev = 0.0
            equal = True
            try:
                for sel in slices:
                    s, ref = best_of(lambda sel=sel: host_then_copy(sel), args.repeat)
                    s_host += s
                    s, got = best_of(lambda a=arr, sel=sel: a.read((sel,), device=args.device, like="torch"),
                                     args.repeat)
                    s_dev += s
                    equal = equal and digest(torch, got.view(torch.int16)) == digest(torch, ref)
                    del got, ref
            except zd.OutOfMemoryError as e:
                print(f"{codec:14} {fmt_bytes(chunk_rows * COLS * 2):>8} {stored / nbytes:7.3f} "
                      f"{'refused':>12} {'':>12}      -   ({str(e)[-60:]})", flush=True)
                continue
            print(f"{codec:14} {fmt_bytes(chunk_rows * COLS * 2):>8} {stored / nbytes:7.3f} "
                  f"{nbytes / s_dev / 1e9:12.2f} {nbytes / s_host / 1e9:12.2f} {s_host / s_dev:5.2f}x"
                  f"{'' if equal else '  MISMATCH'}", flush=True)


if __name__ == "__main__":
    main()
