"""What a GPU timeline says about a read: a summary of a Chrome trace that `torch.profiler` wrote
with CUDA activity (CUPTI records every kernel and copy of the process, the engine's included).

The questions it answers are the ones that explain a slow pipeline: how long the GPU's work
spanned, how many decode kernels ran at once on average, and what held the host (stream, event
and device synchronisations; allocations and frees, which synchronise too). Pure Python, so the
tests check it on a trace made by hand.

    from gpu_timeline import summarize, format_summary
    print(format_summary(summarize(json.load(open("trace.json")))))
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

__all__ = ["HOST_WAITS", "summarize", "format_summary"]

#: CUDA runtime calls that can hold the calling thread until the device catches up.
HOST_WAITS = (
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cudaDeviceSynchronize",
    "cudaMalloc",
    "cudaFree",
    "cudaHostAlloc",
    "cudaFreeHost",
    "cudaMallocHost",
)

_DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def summarize(trace: dict[str, Any], decode_kernel: str = "decompress", long_ms: float = 1.0) -> dict[str, Any]:
    """The timeline's span (ms, first device event to last), the device time by kind of work,
    the average and the most `decode_kernel` kernels running at once, their mean and longest ms
    (a decoder the device saturates runs more kernels at once, each longer; one held back by the
    host runs few), and the host's waits: count and total ms of each call in HOST_WAITS, and the
    calls longer than `long_ms` (start ms from the first device event, duration ms, name)."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    device = [e for e in events if e.get("cat") in _DEVICE]
    if not device:
        return {"span_ms": 0.0, "device": {}, "decode_concurrency": 0.0, "decode_peak": 0, "decode_kernels": 0,
                "decode_ms": {"mean": 0.0, "max": 0.0}, "waits": {}, "long": []}
    start = min(e["ts"] for e in device)
    end = max(e["ts"] + e["dur"] for e in device)
    span_us = max(end - start, 1e-9)
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e in device:
        kind = e["cat"] if e["cat"] != "kernel" else f"kernel {e.get('name', '')[:40]}"
        by_kind[kind][0] += 1
        by_kind[kind][1] += e["dur"] / 1e3
    decodes = [e for e in device if e["cat"] == "kernel" and decode_kernel in e.get("name", "")]
    # The most running at once: starts and ends in time order, an end before a start at the same
    # instant (kernels one after the other on a stream do not overlap).
    edges = sorted([(e["ts"], 1) for e in decodes] + [(e["ts"] + e["dur"], -1) for e in decodes])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    durations = [e["dur"] / 1e3 for e in decodes]
    waits: dict[str, list[float]] = {}
    long: list[tuple[float, float, str]] = []
    for e in events:
        if e.get("cat") not in ("cuda_runtime", "cuda_driver"):
            continue
        name = e.get("name", "")
        if name in HOST_WAITS:
            entry = waits.setdefault(name, [0, 0.0])
            entry[0] += 1
            entry[1] += e["dur"] / 1e3
        if e["dur"] / 1e3 > long_ms:
            long.append(((e["ts"] - start) / 1e3, e["dur"] / 1e3, name))
    return {
        "span_ms": span_us / 1e3,
        "device": {k: {"count": int(v[0]), "ms": v[1]} for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1][1])},
        "decode_kernels": len(decodes),
        "decode_concurrency": sum(e["dur"] for e in decodes) / span_us,
        "decode_peak": peak,
        "decode_ms": {
            "mean": sum(durations) / len(durations) if durations else 0.0,
            "max": max(durations, default=0.0),
        },
        "waits": {k: {"count": int(v[0]), "ms": v[1]} for k, v in waits.items()},
        "long": sorted(long),
    }


def format_summary(summary: dict[str, Any], top: int = 6) -> str:
    lines = [
        f"  GPU span {summary['span_ms']:.1f} ms; {summary['decode_kernels']} decode kernels, "
        f"{summary['decode_concurrency']:.1f} running at once on average, {summary['decode_peak']} at most; "
        f"{summary['decode_ms']['mean']:.1f} ms each on average, {summary['decode_ms']['max']:.1f} at most"
    ]
    for kind, v in list(summary["device"].items())[:top]:
        lines.append(f"    {kind:48s} {v['count']:5d} x  {v['ms']:8.1f} ms")
    if summary["waits"]:
        lines.append("  host waits: " + ", ".join(f"{k} {v['count']} x {v['ms']:.1f} ms" for k, v in summary["waits"].items()))
    else:
        lines.append("  host waits: none")
    for at, duration, name in summary["long"][:top]:
        lines.append(f"    at {at:8.2f} ms: {name} {duration:.2f} ms")
    return "\n".join(lines)
