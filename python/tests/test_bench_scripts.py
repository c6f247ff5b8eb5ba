"""The benchmarks start, and their entry point works here. Each script prints its usage
(``--help``) in a process of its own, which imports everything it takes at module level from the
package and from ``bench/bench_common.py``: the benchmarks run on the GPU machine, and this catches
a broken import before a run is spent on it. ``python -m bench`` lists its suites, runs a host
suite into JSON, writes a skipped JSON for a GPU suite on a machine without a GPU, and draws
charts; ``zarr-device bench --plot`` draws one, or says how to install matplotlib."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import zarr_device as zd
from zarr_device.tools import cli

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
SCRIPTS = sorted(
    [p.name for p in BENCH.glob("bench_*.py") if p.name != "bench_common.py"]
    + [f"probes/{p.name}" for p in BENCH.glob("probes/trace_*.py")]
)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_every_benchmark_is_listed() -> None:
    assert {"bench_gpu.py", "bench_many.py", "bench_peers.py", "bench_staged_reads.py",
            "probes/trace_reads.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_benchmark_prints_its_usage(script: str) -> None:
    done = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


def bench(*argv: str, timeout: float = 120, prelude: str = "") -> subprocess.CompletedProcess[str]:
    """``python -m bench ARGV`` from the repository's root; ``prelude``: Python run before it."""
    # The package these tests import (installed, or the source tree with its built module), first.
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(zd.__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")])}
    code = (f"{prelude}\nimport runpy, sys\nsys.argv = ['bench', *{list(argv)!r}]\n"
            "runpy.run_module('bench', run_name='__main__', alter_sys=True)")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_bench_lists_its_suites() -> None:
    done = bench("list")
    assert done.returncode == 0, done.stderr[-2000:]
    for suite in ("host", "gpu", "many", "peers", "plugin", "checkpoints", "remote", "layouts"):
        assert f"\n{suite}\n" in f"\n{done.stdout}"


def test_a_host_suite_writes_its_results(tmp_path: Path) -> None:
    pytest.importorskip("zarr")
    pytest.importorskip("tensorstore")
    # One script of the suite: the whole quick suite takes over a minute on two cores.
    done = bench("run", "host", "--quick", "--out", str(tmp_path), "--only", "bench_host_chunks")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    document = json.loads((tmp_path / "host.json").read_text())
    assert document["suite"] == "host" and "skipped" not in document and "error" not in document
    assert document["machine"]["cores"] >= 1 and document["machine"]["cpu"]
    assert document["date"].startswith("20") and "--quick" in document["command"]
    results = document["results"]
    assert {r["loader"] for r in results} >= {"zarr-device, budget 256 MiB", "zarr-python", "tensorstore"}
    assert {r["chunk_bytes"] for r in results} == {256 << 10, 1 << 20, 4 << 20}
    assert all(r["gbps"] > 0 and r["cache"] == "warm" for r in results)
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]  # the arrays are removed


def test_a_gpu_suite_is_skipped_without_a_gpu(tmp_path: Path) -> None:
    if zd.cuda_device_count() > 0:
        pytest.skip("this machine has a GPU: the suite would run")
    done = bench("run", "gpu", "many", "--quick", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for suite in ("gpu", "many"):
        document = json.loads((tmp_path / f"{suite}.json").read_text())
        assert document["suite"] == suite and document["results"] == []
        assert "needs a CUDA GPU" in document["skipped"]


def results_document(suite: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    machine = {"cpu": "Test CPU", "cores": 8, "memory_bytes": 1 << 34, "gpu": None}
    return {"suite": suite, "machine": machine, "date": "2026-12-07T06:00:00+00:00", "command": "test",
            "results": results}


def test_bench_plot_draws_each_suite(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    results = [
        {"loader": loader, "chunk_bytes": chunk, "gbps": gbps * (chunk >> 20) ** 0.5, "cache": cache}
        for loader, gbps in (("zarr-device", 2.0), ("zarr-python", 0.5))
        for chunk in (1 << 20, 4 << 20, 16 << 20)
        for cache in ("warm", "cold")
    ] + [{"loader": "zarr-device", "threads": n, "gbps": 0.5 * n, "cache": "warm"} for n in (1, 2, 4)]
    (tmp_path / "host.json").write_text(json.dumps(results_document("host", results)))
    (tmp_path / "gpu.json").write_text(json.dumps({**results_document("gpu", []), "skipped": "needs a CUDA GPU"}))
    done = bench("plot", str(tmp_path), "--out", str(tmp_path / "png"))
    assert done.returncode == 0, done.stderr[-2000:]
    charts = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert charts == ["host-chunks.png", "host-loaders.png", "host-threads.png"]
    for chart in charts:
        data = (tmp_path / "png" / chart).read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000
    assert "gpu: skipped when run (needs a CUDA GPU): no chart" in done.stdout


def test_bench_plot_without_matplotlib_says_how_to_install_it(tmp_path: Path) -> None:
    done = bench("plot", str(tmp_path), "--out", str(tmp_path / "png"),
                 prelude="import sys; sys.modules['matplotlib'] = None  # makes `import matplotlib` fail")
    assert done.returncode == 2
    assert "pip install matplotlib" in done.stderr and "Traceback" not in done.stderr


def test_cli_bench_plot_draws_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    chart = tmp_path / "bench.png"
    status = cli.main(["bench", "--size", "1MiB", "--chunk", "64KiB", "--repeat", "1", "--quiet", "--codec", "both",
                       "--dir", str(tmp_path), "--plot", str(chart)])
    out = capsys.readouterr().out
    assert status == 0 and f"chart written to {chart}" in out
    data = chart.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000


def test_cli_bench_plot_without_matplotlib_fails_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    status = cli.main(["bench", "--size", "1MiB", "--chunk", "64KiB", "--repeat", "1", "--quiet",
                       "--dir", str(tmp_path), "--plot", str(tmp_path / "bench.png")])
    captured = capsys.readouterr()
    assert status == 1
    assert "pip install matplotlib" in captured.err and "Traceback" not in captured.err
    assert captured.out == ""  # nothing was measured
    assert list(tmp_path.iterdir()) == []


def test_the_scripts_results_take_one_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from bench.suites import normalize

    document = {
        "machine": {"gbps": 1.0},  # not a result
        "limits": {"h2d_pinned": {"gbps": 50.0}, "disk_to_pinned_cold": {"gbps": 3.0, "threads": 16}},
        "results": [
            {"reader": "zarr-device", "codec": "zstd", "warm_gbps": 12.0, "cold_gbps": 4.0, "warm_median_gbps": 11.0},
            {"layout": "shards 64MiB of 16 KiB", "codec": "none", "policy": "checked", "gbps": 3.0},
            {"case": "limits/one_call", "gbps": 0.5, "chunks_per_s": 900.0, "latency_ms": 20.0},
        ],
        "layouts": [{"layout": "x", "readers": {"plug-in": {"warm": {"gbps": 5.0}, "cold": {"gbps": 1.0}}}}],
    }
    records = normalize(document, "bench_x.py")
    assert {"case": "limits/h2d_pinned", "gbps": 50.0, "cache": "warm", "part": "bench_x.py"} in records
    assert {"case": "limits/disk_to_pinned_cold", "gbps": 3.0, "cache": "cold", "threads": 16,
            "part": "bench_x.py"} in records
    assert [(r["gbps"], r["cache"]) for r in records if r.get("loader") == "zarr-device"] == [(12.0, "warm"),
                                                                                            (4.0, "cold")]
    # A way of reading a layout: the codec and the policy name the reader, the layout's series is a setting.
    (layout,) = [r for r in records if r.get("loader") == "none, checked"]
    assert layout["series"] == "shards 64MiB of" and layout["chunk_bytes"] == 16 << 10
    assert [(r["gbps"], r["cache"]) for r in records if r.get("loader") == "plug-in"] == [(5.0, "warm"), (1.0, "cold")]
    # A case the script names itself (a bound it measured) keeps its name and its own figures.
    assert {"case": "limits/one_call", "gbps": 0.5, "chunks_per_s": 900.0, "latency_ms": 20.0, "cache": "warm",
            "part": "bench_x.py"} in records
    assert len(records) == 8


def test_a_failed_suite_fails_the_run_and_the_others_go_on(tmp_path: Path) -> None:
    done = bench("run", "host", "gpu", "--quick", "--out", str(tmp_path), "--only", "bench_host_chunks",
                 "--timeout", "0.5")
    assert done.returncode == 1
    assert "failed: host" in done.stderr
    host = json.loads((tmp_path / "host.json").read_text())
    assert "timed out after" in host["error"] and host["results"] == []
    gpu = json.loads((tmp_path / "gpu.json").read_text())
    assert "chosen by --only" in gpu["skipped"]


def test_benchmarks_md_is_what_its_results_make() -> None:
    # BENCHMARKS.md's results blocks are written by `python -m bench report` from bench/results/;
    # an edit of either without the other fails here.
    done = bench("report", "--check")
    assert done.returncode == 0, done.stdout + done.stderr


def _report_case(tmp_path: Path, results: list[dict[str, Any]]) -> tuple[Path, Path]:
    (tmp_path / "results").mkdir()
    document = {"suite": "many", "machine": {"cpu": "Test CPU", "cores": 16, "gpu": "Test GPU"},
                "date": "2026-12-07T08:00:00+00:00", "command": "python -m bench run many --out r",
                "results": results}
    (tmp_path / "results" / "many.json").write_text(json.dumps(document))
    text = tmp_path / "B.md"
    text.write_text("# Figures\n\nWritten by hand.\n\n<!-- results: many -->\nstale\n<!-- end results -->\n\nAfter.\n")
    return text, tmp_path / "results"


def test_report_writes_tables_with_same_run_ratios(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from bench.report import report

    results = [
        {"loader": "zarr-device", "gbps": 40.0, "cache": "warm", "chunk_bytes": 1 << 20, "part": "bench_many.py"},
        {"loader": "zarr-device", "gbps": 30.0, "cache": "warm", "chunk_bytes": 4 << 20, "part": "bench_many.py"},
        {"loader": "safetensors", "gbps": 10.0, "cache": "warm", "chunk_bytes": 1 << 20, "part": "bench_many.py"},
        {"loader": "safetensors", "gbps": 12.0, "cache": "warm", "chunk_bytes": 4 << 20, "part": "bench_many.py"},
        {"loader": "safetensors", "gbps": 8.0, "cache": "warm", "chunk_bytes": 4 << 20, "part": "bench_many.py"},
    ]
    text, folder = _report_case(tmp_path, results)
    messages: list[str] = []
    assert report(check=True, document=str(text), results=str(folder), charts_dir=str(tmp_path / "c"),
                  log=messages.append) == 1
    assert "run `python -m bench report`" in messages[-1]
    assert report(check=False, document=str(text), results=str(folder), charts_dir=str(tmp_path / "c"),
                  log=messages.append) == 0
    written = text.read_text()
    assert written.startswith("# Figures\n\nWritten by hand.\n") and written.endswith("\nAfter.\n")
    assert "stale" not in written
    assert "| reader | 1 MiB | 4 MiB |" in written
    assert "| zarr-device | 40.00 | 30.00 |" in written
    assert "| safetensors | 10.00 | 12.00 |" in written  # the best of its runs
    assert "| zarr-device / best other | 4.00x | 2.50x |" in written
    assert "Machine: Test GPU, 16 cores of Test CPU; 2026-12-07; `python -m bench run many --out r`." in written
    charts = sorted(p.name for p in (tmp_path / "c").iterdir())
    assert charts == ["many-chunks.png", "many-loaders.png"]
    assert all(f"]({os.path.relpath(tmp_path / 'c' / name, ROOT)})" in written for name in charts)
    assert report(check=True, document=str(text), results=str(folder), charts_dir=str(tmp_path / "c"),
                  log=messages.append) == 0


def test_report_counts_tiny_chunks_a_second_by_added_latency(monkeypatch: pytest.MonkeyPatch) -> None:
    # The remote suite's records: chunks per second, a column per added latency, zarr-device's
    # thread counts as rows, and one batched call for every key shown as a bound, not a reader.
    monkeypatch.syspath_prepend(str(ROOT))
    from bench.report import render_suite

    def row(who: dict[str, Any], latency: float, rate: float, threads: int | None = None) -> dict[str, Any]:
        out = {**who, "read": "whole", "store": "obstore", "latency_ms": latency, "chunk_bytes": 64,
               "chunks_per_s": rate, "gbps": rate * 64 / 1e9, "cache": "warm", "part": "bench_remote.py"}
        return out if threads is None else {**out, "threads": threads}

    results = [row({"loader": "zarr-python"}, 0.0, 1200.4), row({"loader": "zarr-python"}, 20.0, 400.0),
               row({"case": "limits/one_get_partial_values_call"}, 0.0, 9000.0),
               row({"case": "limits/one_get_partial_values_call"}, 20.0, 8000.0),
               row({"loader": "zarr-device"}, 0.0, 2400.8, 2), row({"loader": "zarr-device"}, 20.0, 410.0, 2),
               row({"loader": "zarr-device"}, 0.0, 2000.0, 32), row({"loader": "zarr-device"}, 20.0, 1600.0, 32)]
    text = render_suite({"suite": "remote", "results": results}, [])
    assert "`bench_remote.py`, read whole, store obstore (chunks/s)" in text
    assert "| reader | no latency added | 20 ms added |" in text
    assert "| zarr-python | 1,200 | 400 |" in text
    assert "| zarr-device, 2 threads | 2,401 | 410 |" in text
    assert "| zarr-device, 32 threads | 2,000 | 1,600 |" in text
    assert "| zarr-device / best other | 2.00x | 4.00x |" in text  # the bound is no other reader
    assert "| one get_partial_values call for every key | 9,000 | 8,000 |" in text
    assert "GB/s" not in text


def test_report_names_a_block_without_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from bench.report import report

    text, folder = _report_case(tmp_path, [])
    (folder / "many.json").unlink()
    messages: list[str] = []
    assert report(check=True, document=str(text), results=str(folder), log=messages.append) == 1
    assert any("many: no many.json in" in m for m in messages)
