#!/usr/bin/env python
"""How long nvCOMP takes to decode one tensor's chunks in one call, the compressed chunks already
on the GPU (the engine's decode measurement, without staging, copies or checks): what a read that
waits for its decodes cannot end sooner than.

    python bench/probe_decode_latency.py GROUP [GROUP ...]

GROUP: a state dict written by ``bench/bench_many.py`` (``--out DIR`` holds
``state-zstd-R-I.zarr``), zstd chunks. Prints, for its arrays of 16, 64 and 128 MiB among the
first 60, the chunks and the best of 5 calls.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    import zarr_device as zd

    roots = list(sys.argv[1:] if argv is None else argv)
    if not roots:
        print(__doc__)
        return 2
    for root in roots:
        group = zd.open_group(root)
        for name, array in list(group.all_arrays().items())[:60]:
            if array.nbytes not in (16 << 20, 64 << 20, 128 << 20):
                continue
            selection = [(0, 1, n) for n in array.shape]
            result = array._core.bench_decode_cuda(selection, 0, 5, None)  # noqa: SLF001 - the engine's measurement
            print(f"{root.rstrip('/').split('/')[-1]} {name} {array.nbytes >> 20} MiB, chunks {array.chunks}: "
                  f"{result['chunks']} chunks in one call, best {result['seconds'] * 1e3:.2f} ms, "
                  f"failed {result['failed_chunks']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
