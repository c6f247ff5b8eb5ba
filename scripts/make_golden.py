#!/usr/bin/env python3
"""(Re)creates the golden fixtures under python/tests/golden/.

Each case is a small array (or group) written by a reference implementation, zarr-python or
tensorstore, next to the values it must read back as:

    python/tests/golden/<writer>/<case>/        the Zarr store (array or group at its root)
    python/tests/golden/<writer>/<case>.npy     the expected values of the array
    python/tests/golden/manifest.json           one entry per case (see `Case` below)

Types NumPy has no native type for (bfloat16, float8_*) are stored in the .npy as their raw bits
(uint16 / uint8); the manifest gives the dtype name, and `expected_bits` is true for them.

The data is deterministic (seeded), and every array leaves regions unwritten, so that some chunks
(and some inner chunks of shards) are missing from the store and read as the fill value.

The cases and how each reference implementation writes them are in scripts/golden/ (one module
per implementation, the values and the golden directory shared); this script runs them and writes
the manifest.

Usage:
    python scripts/make_golden.py [--out DIR]
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import ml_dtypes
import numcodecs
import numpy as np
import zarr

from golden.fixtures import Golden
from golden.tensorstore_cases import make_tensorstore, tensorstore_other_dtype_names
from golden.zarr_python_cases import make_zarr_python_v2, make_zarr_python_v3

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "python" / "tests" / "golden"


def _reproducible_gzip() -> None:
    """gzip streams carry a modification time; pin it to 0 so reruns give identical files."""
    init = gzip.GzipFile.__init__

    @functools.wraps(init)
    def patched(self: gzip.GzipFile, *args: Any, **kwargs: Any) -> None:
        if len(args) < 5:
            kwargs.setdefault("mtime", 0)
        init(self, *args, **kwargs)

    gzip.GzipFile.__init__ = patched  # type: ignore[method-assign]


def main() -> None:
    _reproducible_gzip()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    out: Path = args.out
    for writer in ["zarr-python", "tensorstore"]:
        if (out / writer).exists():
            shutil.rmtree(out / writer)
    out.mkdir(parents=True, exist_ok=True)
    g = Golden(out)
    make_zarr_python_v3(g)
    make_zarr_python_v2(g)
    ts_names = make_tensorstore(g)
    with tempfile.TemporaryDirectory() as tmp:
        other_names = tensorstore_other_dtype_names(Path(tmp))
    manifest = {
        "format": 1,
        "generator": "scripts/make_golden.py",
        "versions": {
            "zarr-python": zarr.__version__,
            "numcodecs": numcodecs.__version__,
            "numpy": np.__version__,
            "ml_dtypes": ml_dtypes.__version__,
        },
        "tensorstore_dtype_names": ts_names,
        "tensorstore_other_dtype_names": other_names,
        "cases": [c.to_json() for c in g.cases],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n")
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{len(g.cases)} cases, {total / 1024:.0f} KiB in {out}")


if __name__ == "__main__":
    main()
