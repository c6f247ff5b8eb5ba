#!/usr/bin/env python
"""How long nvCOMP takes to decode one tensor's chunks in one call, the compressed chunks already
on the GPU (the engine's decode measurement, without staging, copies or checks): what a read that
waits for its decodes cannot end sooner than.

    python bench/probes/probe_decode_latency.py [--timeline DIR] [--busy] GROUP [GROUP ...]

GROUP: a state dict written by ``bench/bench_many.py`` (``--out DIR`` holds
``state-zstd-R-I.zarr``), zstd chunks. Prints, for its arrays of 16, 64 and 128 MiB among the
first 60, the chunks and the best of 5 calls. With ``--timeline``, one waiting read of each
(``array.read(device="cuda:0")``, after a warm-up read) is recorded through ``torch.profiler``
(CUDA activity) and its device work listed in order (kernel, copy or memset: start from the
read's first device event, duration), with the host's CUDA calls of over 0.2 ms: where a waiting
read's time goes. With ``--busy``, a spinning kernel keeps the GPU occupied on a stream of its
own while the calls run (so an idle GPU's clocks cannot explain a slow call).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

_DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def in_order(trace: dict[str, Any], long_ms: float = 0.2) -> list[tuple[float, float, str]]:
    """The device events of `trace` and its host CUDA calls longer than `long_ms`: (start ms from
    the first device event, duration ms, name), in time order."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    device = [e for e in events if e.get("cat") in _DEVICE]
    if not device:
        return []
    host = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver") and e["dur"] / 1e3 > long_ms]
    start = min(e["ts"] for e in device)
    chosen = sorted(device + host, key=lambda e: e["ts"])
    return [((e["ts"] - start) / 1e3, e["dur"] / 1e3,
             ("host " if e.get("cat") in ("cuda_runtime", "cuda_driver") else "") + str(e.get("name", ""))[:70])
            for e in chosen]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--timeline", default=None, help="record each array's calls here and list the last one's work")
    parser.add_argument("--busy", action="store_true", help="keep the GPU busy on another stream while measuring")
    parser.add_argument("roots", nargs="+")
    args = parser.parse_args(argv)
    import zarr_device as zd

    side = None
    if args.busy:
        import torch

        side = torch.cuda.Stream()
    repeats = 5
    for root in args.roots:
        group = zd.open_group(root)
        for name, array in list(group.all_arrays().items())[:60]:
            if array.nbytes not in (16 << 20, 64 << 20, 128 << 20):
                continue
            selection = [(0, 1, n) for n in array.shape]

            def measure() -> dict[str, Any]:
                if side is not None:
                    import torch

                    with torch.cuda.stream(side):
                        torch.cuda._sleep(2_000_000_000)  # about a second at the H200's clocks
                result: dict[str, Any] = array._core.bench_decode_cuda(selection, 0, repeats, None)  # noqa: SLF001
                return result

            result = measure()
            print(f"{root.rstrip('/').split('/')[-1]} {name} {array.nbytes >> 20} MiB, chunks {array.chunks}: "
                  f"{result['chunks']} chunks in one call, best {result['seconds'] * 1e3:.2f} ms, "
                  f"failed {result['failed_chunks']}", flush=True)
            if args.timeline:
                from torch.profiler import ProfilerActivity, profile

                os.makedirs(args.timeline, exist_ok=True)
                array.read(device="cuda:0")
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    array.read(device="cuda:0")
                path = os.path.join(args.timeline, f"read-{name.replace('/', '_')}.json")
                prof.export_chrome_trace(path)
                with open(path) as f:
                    trace: dict[str, Any] = json.load(f)
                print(f"  one waiting read of {name}, in order:", flush=True)
                for at, duration, what in in_order(trace):
                    if "sleep" in what.lower() or "spin" in what.lower():
                        continue
                    print(f"    at {at:8.3f} ms  {duration:8.3f} ms  {what}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
