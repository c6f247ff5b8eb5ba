"""``python -m bench plot DIR --out PNGDIR``: charts of the suites' results in DIR (SUITE.json, as
``python -m bench run`` writes them), drawn by the package's ``zarr_device.tools.bench_plots`` (the
same code ``zarr-device bench --plot`` draws with)."""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable
from typing import Any

from zarr_device.tools.bench_plots import plot_records, require_matplotlib


def plot_dir(results_dir: str, out_dir: str, *, log: Callable[[str], Any] = print) -> list[str]:
    """Charts of every SUITE.json in ``results_dir``, written into ``out_dir``; the paths
    written. A skipped suite, or one with nothing to draw, gets a note and no chart."""
    require_matplotlib()
    written: list[str] = []
    paths = sorted(glob.glob(os.path.join(results_dir, "*.json")))
    if not paths:
        log(f"no results (SUITE.json) in {results_dir}")
    for path in paths:
        try:
            with open(path) as f:
                document: dict[str, Any] = json.load(f)
        except (OSError, ValueError) as e:
            log(f"{path}: not read ({e})")
            continue
        name = str(document.get("suite") or os.path.splitext(os.path.basename(path))[0])
        if document.get("skipped"):
            log(f"{name}: skipped when run ({document['skipped']}): no chart")
            continue
        charts = plot_records(document.get("results") or [], name, out_dir,
                              machine=document.get("machine"), date=document.get("date"))
        if not charts:
            log(f"{name}: no results to draw")
        for chart in charts:
            log(f"{name}: {chart}")
        written += charts
    return written
