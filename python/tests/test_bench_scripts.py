"""The benchmark scripts start: each prints its usage (``--help``) in a process of its own, which
imports everything it takes at module level from the package and from ``bench/bench_common.py``.
The benchmarks run on the GPU machine; this catches a broken import before a run is spent on it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(
    p.name for p in BENCH.glob("*.py") if p.name.startswith(("bench_", "trace_")) and p.name != "bench_common.py"
)


def test_every_benchmark_is_listed() -> None:
    assert {"bench_gpu.py", "bench_many.py", "bench_peers.py", "bench_staged_reads.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_benchmark_prints_its_usage(script: str) -> None:
    done = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
