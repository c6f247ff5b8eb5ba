"""bench/probes/gpu_timeline.py, the summary of a GPU timeline the benchmarks print, on a trace
made by hand: the span, decode kernels at once, and the host's waits."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "probes"))

from gpu_timeline import format_summary, summarize  # noqa: E402


def _event(cat: str, name: str, ts: float, dur: float) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}


def test_a_timeline_is_summarised() -> None:
    trace = {
        "traceEvents": [
            _event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 0, 1000),
            # two decode kernels: 8 ms each, overlapping for 4 of the span's 13 ms
            _event("kernel", "zstd::decompression_kernel(...)", 1000, 8000),
            _event("kernel", "zstd::decompression_kernel(...)", 5000, 8000),
            _event("kernel", "place(...)", 12000, 1000),
            _event("cuda_runtime", "cudaStreamSynchronize", 2000, 6000),
            _event("cuda_runtime", "cudaStreamSynchronize", 9000, 500),
            _event("cuda_runtime", "cudaMalloc", 9600, 200),
            _event("cuda_runtime", "cudaLaunchKernel", 1000, 2000),  # long, but not a wait
            _event("cpu_op", "aten::empty", 0, 50000),  # host work is not the GPU's span
            {"ph": "i", "cat": "kernel", "name": "instant", "ts": 99999},
        ]
    }
    summary = summarize(trace)
    assert summary["span_ms"] == 13.0
    assert summary["decode_kernels"] == 2
    assert abs(summary["decode_concurrency"] - 16 / 13) < 1e-9
    assert summary["decode_peak"] == 2
    assert summary["decode_ms"] == {"mean": 8.0, "max": 8.0}
    assert summary["waits"] == {"cudaStreamSynchronize": {"count": 2, "ms": 6.5}, "cudaMalloc": {"count": 1, "ms": 0.2}}
    assert [(name, duration) for _, duration, name in summary["long"]] == [
        ("cudaLaunchKernel", 2.0),
        ("cudaStreamSynchronize", 6.0),
    ]
    assert summary["device"]["kernel zstd::decompression_kernel(...)"] == {"count": 2, "ms": 16.0}
    text = format_summary(summary)
    assert "2 decode kernels, 1.2 running at once on average, 2 at most; 8.0 ms each" in text
    assert "cudaStreamSynchronize 2 x 6.5 ms" in text


def test_an_empty_timeline() -> None:
    summary = summarize({"traceEvents": []})
    assert summary["span_ms"] == 0.0 and summary["waits"] == {}
    assert "host waits: none" in format_summary(summary)


def test_kernels_one_after_another_do_not_overlap() -> None:
    """A kernel that starts as another ends is not running beside it; three at once are three."""
    trace = {
        "traceEvents": [
            _event("kernel", "decompress_a", 0, 1000),
            _event("kernel", "decompress_a", 1000, 3000),
            _event("kernel", "decompress_b", 1500, 1000),
            _event("kernel", "decompress_b", 2000, 1000),
        ]
    }
    summary = summarize(trace)
    assert summary["decode_peak"] == 3
    assert summary["decode_ms"] == {"mean": 1.5, "max": 3.0}
    alone = summarize({"traceEvents": trace["traceEvents"][:2]})
    assert alone["decode_peak"] == 1
