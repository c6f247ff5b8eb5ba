"""zarr-device's benchmarks as a few suites behind one entry point, run from the repository's root:

    python -m bench list                                 # the suites and what each measures
    python -m bench run host gpu --out results [--quick] # DIR/SUITE.json for each suite
    python -m bench plot results --out charts            # PNG charts of those results
    python -m bench report [--check]                     # BENCHMARKS.md from bench/results/

Each suite runs some of the measurement scripts beside this file (each also runs on its own, with
more options: ``python bench/bench_gpu.py --help``) and writes ``DIR/SUITE.json``:

    {"suite", "machine": {"cpu", "cores", "memory_bytes", "gpu"}, "date", "command",
     "results": [{"loader" or "case", "gbps", "cache": "warm" | "cold", "chunk_bytes"?,
                  "threads"?, "codec"?, "part": the script, ...}],
     "parts": [{"script", "args", "seconds" | "skipped" | "error"}],
     "skipped": why (only when no part could run here), "error": (only when a part failed)}

The runs whose figures stand are kept as ``bench/results/SUITE.json``; ``python -m bench report``
writes BENCHMARKS.md's tables and charts (``docs/images/bench/``) from them (bench/report.py).
``bench/probes/`` holds measurements made once to settle a design question (its README.md).
"""
