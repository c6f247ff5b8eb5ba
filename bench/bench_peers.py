#!/usr/bin/env python
# The GPU machine has no network: the peers' cp312 manylinux x86-64 wheels and their non-torch
# dependencies are in .device/whl-peers (`pip download --only-binary=:all: --python-version 3.12
# --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
# --no-deps NAME`, per package). Install them there (torch, numpy, safetensors and the nvidia-* CUDA
# wheels are the machine's own) with
#
#     pip install --no-index --find-links .device/whl-peers fastsafetensors runai-model-streamer instanttensor
"""Model-weight loaders onto one GPU, on the same tensors in the same run: zarr-device against
safetensors, fastsafetensors, runai-model-streamer, instanttensor and torch.load(mmap=True).

A model-like state dict (bf16 [rows, 4096] tensors of 16-128 MiB adding up to --size, bench_many.py's
values) is written once as a zarr-device group (one array per tensor; uncompressed, and zstd +
crc32c where --codecs names zstd), one safetensors file and one torch.save file. Each loader runs in
processes of its own: warm (an untimed load fills the page cache, then --repeats timed loads: best
and median) and cold (the page cache is dropped, then a fresh process loads once, its set-up
included; skipped, with a note, where the cache cannot be dropped). A load is timed from the call
to every tensor on the device, synchronised, and checked: per-tensor fingerprints (position-weighted
sums of the bf16 bits by row and by column, computed on the device) must equal the generated data's,
or the loader is reported FAILED, not timed.

    zarr-device             zd.read_many(zd.open_group(p).all_arrays(), device=d, like="torch")
    safetensors             safetensors.torch.load_file(f, device=d)
    fastsafetensors         SafeTensorsFileLoader(None, d) + add_filenames + copy_files_to_device + get_tensor;
                            GDS first (the library falls back to its nogds copier where GDS is missing),
                            nogds=True where that fails; the copier used is reported
    runai-model-streamer    SafetensorsStreamer: stream_file(f, device=d) + get_tensors, each .to(d)
    instanttensor           instanttensor.safe_open(f, framework="pt", device=d).tensors(): its default
                            backend (direct I/O, which bypasses the page cache even when warm)
    instanttensor-buffered  the same with backend=BackendPolicy.BUFFERED
    torch.load-mmap         torch.load(f, mmap=True, weights_only=True), then .to(d) for each tensor

Reported: GB/s (10^9 bytes of tensor data per second), each loader's speed over zarr-device's (on
uncompressed arrays), the peak RSS of each loader's process (VmHWM, measured in it) and how much of
it the loads added (the peak less the RSS once torch, the CUDA context and the loader were set up).

    python bench/bench_peers.py --size 6GiB --out /tmp/bp [--codecs none,zstd] [--json peers.json]
    python bench/bench_peers.py --device cpu --size 256MiB --no-cold     # a smoke run without a GPU
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

LOADERS = ("zarr-device", "safetensors", "fastsafetensors", "runai-model-streamer", "instanttensor",
           "instanttensor-buffered", "torch.load-mmap")
NEEDS = {"zarr-device": "zarr_device", "safetensors": "safetensors", "fastsafetensors": "fastsafetensors",
         "runai-model-streamer": "runai_model_streamer", "instanttensor": "instanttensor",
         "instanttensor-buffered": "instanttensor", "torch.load-mmap": "torch"}
PEER_PACKAGES = ("safetensors", "fastsafetensors", "runai-model-streamer", "instanttensor", "ml_dtypes")
SAFETENSORS_FILE, TORCH_FILE, MARKER = "state.safetensors", "state.pt", "peers.json"


# --- fingerprints: the same two numbers per tensor from NumPy (the generated data) and torch (a load) ---


def host_fingerprint(values: Any) -> list[int]:
    """Sums of the bf16 bits (as int16) by row and by column, each weighted by position % 1021 + 1."""
    import numpy as np

    bits = values.view(np.int16)
    rows, cols = bits.sum(axis=1, dtype=np.int64), bits.sum(axis=0, dtype=np.int64)
    return [int((sums * (np.arange(sums.size) % 1021 + 1)).sum()) for sums in (rows, cols)]


def device_fingerprint(torch: Any, tensor: Any) -> Any:
    """:func:`host_fingerprint` computed where ``tensor`` lives; a 2-element int64 tensor there."""
    bits = tensor.view(torch.int16)
    rows, cols = bits.sum(dim=1, dtype=torch.int64), bits.sum(dim=0, dtype=torch.int64)
    weight = [torch.arange(n.numel(), device=tensor.device) % 1021 + 1 for n in (rows, cols)]
    return torch.stack([(rows * weight[0]).sum(), (cols * weight[1]).sum()])


def check(torch: Any, tensors: dict[str, Any], expected: dict[str, Any], device: str) -> str | None:
    """None when ``tensors`` are the expected ones, bit for bit, on ``device``; else what differs."""
    if set(tensors) != set(expected):
        missing, extra = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
        return f"names differ: missing {missing[:3]}, extra {extra[:3]}"
    names = sorted(expected)
    for name in names:
        t = tensors[name]
        if t.dtype != torch.bfloat16 or list(t.shape) != expected[name]["shape"] or t.device != torch.device(device):
            return (f"{name}: {t.dtype} {list(t.shape)} on {t.device}, expected bfloat16 {expected[name]['shape']} "
                    f"on {device}")
    got = torch.stack([device_fingerprint(torch, tensors[n]) for n in names]).tolist()
    wrong = [n for n, g in zip(names, got) if g != expected[n]["fingerprint"]]
    return f"values differ in {len(wrong)} of {len(names)} tensors ({', '.join(wrong[:3])})" if wrong else None


# --- the loaders (in the child) ---


def _fastsafetensors(path: str, device: str, nogds: bool, info: dict[str, str]) -> dict[str, Any]:
    from fastsafetensors import SafeTensorsFileLoader

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = SafeTensorsFileLoader(None, device, nogds=nogds)  # pg=None: one process, one device
    try:
        loader.add_filenames({0: [path]})
        buffer = loader.copy_files_to_device()
        try:  # tensors share ownership of the device buffer and outlive buffer.close()
            tensors = {name: buffer.get_tensor(name) for name in loader.get_keys()}
        finally:
            buffer.close()
        copier = loader.copier_class.__name__
    finally:
        loader.close()
    asked = "nogds=True" if nogds else "GDS asked"
    notes = "; ".join(sorted({str(w.message).split(";")[0] for w in caught}))
    info["mode"] = f"{copier} ({asked}{'; ' + notes if notes else ''})"
    return tensors


def _instanttensor(path: str, device: str, buffered: bool, info: dict[str, str]) -> dict[str, Any]:
    from instanttensor import BackendPolicy, safe_open

    with safe_open(path, framework="pt", device=device,
                   backend=BackendPolicy.BUFFERED if buffered else None) as f:  # copy=True: tensors own memory
        tensors = dict(f.tensors())
        info["mode"] = f"backend {getattr(getattr(f, 'backend', None), 'name', '?')}"
    return tensors


def _runai(path: str, device: str, info: dict[str, str]) -> dict[str, Any]:
    import inspect

    from runai_model_streamer import SafetensorsStreamer

    tensors = {}
    with SafetensorsStreamer() as streamer:
        if "device" in inspect.signature(streamer.stream_file).parameters:  # 0.17 has it; older ones not
            streamer.stream_file(path, device=device)
            info["mode"] = f"stream_file(device={device!r})"
        else:
            streamer.stream_file(path)
            info["mode"] = "stream_file() to host, then .to(device)"
        for name, tensor in streamer.get_tensors():
            tensors[name] = tensor.to(device)
    return tensors


def make_loader(name: str, data: str, codec: str, device: str,
                nogds: bool) -> tuple[Callable[[], dict[str, Any]], dict[str, str]]:
    """The loader as a function returning {name: tensor on device}, and a dict it notes its mode in.
    Raises ImportError where its package does not import."""
    import torch

    importlib.import_module(NEEDS[name])  # an ImportError here: the loader is skipped
    info: dict[str, str] = {}
    st_path, pt_path = os.path.join(data, SAFETENSORS_FILE), os.path.join(data, TORCH_FILE)
    if name == "zarr-device":
        import zarr_device as zd

        path = os.path.join(data, f"state-{codec}.zarr")
        return lambda: zd.read_many(zd.open_group(path).all_arrays(), device=device, like="torch"), info
    if name == "safetensors":
        from safetensors.torch import load_file

        return lambda: load_file(st_path, device=device), info
    if name == "fastsafetensors":
        return lambda: _fastsafetensors(st_path, device, nogds, info), info
    if name == "runai-model-streamer":
        return lambda: _runai(st_path, device, info), info
    if name.startswith("instanttensor"):
        return lambda: _instanttensor(st_path, device, name.endswith("buffered"), info), info
    if name == "torch.load-mmap":

        def load() -> dict[str, Any]:
            state = torch.load(pt_path, mmap=True, weights_only=True, map_location="cpu")
            return {k: v.to(device) for k, v in state.items()}

        return load, info
    raise ValueError(f"unknown loader {name!r}")


def max_rss() -> int:
    from bench_read import peak_rss

    return peak_rss()


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One loader in this process: ``--mode warm`` (an untimed load, then --repeats timed loads) or
    ``cold`` (one timed load; the parent dropped the page cache just before starting it)."""
    import torch

    with open(os.path.join(args.data, MARKER)) as f:
        expected = json.load(f)["tensors"]
    on_gpu = args.device.startswith("cuda")
    if on_gpu:
        torch.zeros(1, device=args.device)  # the CUDA context exists before anything is timed
    sync: Callable[[], None] = (lambda: torch.cuda.synchronize(args.device)) if on_gpu else (lambda: None)
    try:
        load, info = make_loader(args.child, args.data, args.codec, args.device, args.nogds)
    except (ImportError, OSError) as e:
        return {"skipped": f"cannot import: {e}"}
    rss_start = max_rss()
    seconds: list[float] = []
    for i in range(1 + args.repeats if args.mode == "warm" else 1):
        sync()
        start = time.perf_counter()
        tensors = load()
        sync()
        elapsed = time.perf_counter() - start
        why = check(torch, tensors, expected, args.device)
        if why is not None:
            return {"failed": why, "info": info}
        if args.mode == "cold" or i > 0:
            seconds.append(elapsed)
        del tensors
        if on_gpu:
            torch.cuda.empty_cache()
    return {"seconds": seconds, "rss_start_bytes": rss_start, "peak_rss_bytes": max_rss(), "info": info}


# --- the parent ---


def prepare(data: str, rows: list[int], codecs: Sequence[str], chunk_rows: int) -> dict[str, Any]:
    """Writes the state dict in every format (skipped where an earlier run left the same); returns
    the marker: each tensor's shape and fingerprint, and notes on formats that could not be written."""
    from bench_common import log
    from bench_many import state_dict_values, write_state_dict

    key = {"version": 1, "rows": rows, "chunk_rows": chunk_rows, "codecs": sorted(codecs)}
    try:
        with open(os.path.join(data, MARKER)) as f:
            marker: dict[str, Any] = json.load(f)
        if {k: marker.get(k) for k in key} == key:
            log(f"reusing the state dict in {data}")
            return marker
    except (OSError, ValueError):
        pass
    import numpy as np
    import torch

    shutil.rmtree(data, ignore_errors=True)
    os.makedirs(data)
    log(f"generating {len(rows)} tensors")
    values = list(state_dict_values(rows))
    marker = dict(key, tensors={n: {"shape": list(v.shape), "fingerprint": host_fingerprint(v)} for n, v in values},
                  notes={})
    for codec in codecs:
        seconds = write_state_dict(os.path.join(data, f"state-{codec}.zarr"), rows, codec, chunk_rows, values)
        log(f"  zarr-device group, {codec}: {seconds:.1f} s")
    as_torch = {n: torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) for n, v in values}
    start = time.perf_counter()
    try:
        from safetensors.torch import save_file

        save_file(as_torch, os.path.join(data, SAFETENSORS_FILE))
        log(f"  safetensors file: {time.perf_counter() - start:.1f} s")
    except ImportError as e:
        marker["notes"]["safetensors-file"] = f"no safetensors file: cannot import safetensors ({e})"
    start = time.perf_counter()
    torch.save(as_torch, os.path.join(data, TORCH_FILE))
    log(f"  torch.save file: {time.perf_counter() - start:.1f} s")
    with open(os.path.join(data, MARKER), "w") as f:
        json.dump(marker, f)
    return marker


def cuda_library_links(folder: str) -> str | None:
    """fastsafetensors dlopens "libcudart.so" (and "libcufile.so.0"), which pip's CUDA wheels hold
    only under versioned names: a folder of links to the libraries torch uses, for that child's
    LD_LIBRARY_PATH; None where the names resolve already or nothing is found."""
    import ctypes
    import glob

    import torch

    major = (torch.version.cuda or "").split(".")[0]
    specs = [importlib.util.find_spec(package) for package in ("nvidia", "torch")]
    roots = [root for spec in specs if spec for root in spec.submodule_search_locations or []]
    links = {}
    for name, pattern in (("libcudart.so", f"libcudart.so.{major}*"), ("libcufile.so.0", "libcufile.so.0")):
        try:
            ctypes.CDLL(name)
            continue
        except OSError:
            pass
        found = [p for root in roots for p in sorted(glob.glob(os.path.join(root, "**", pattern), recursive=True))]
        if major and found:
            links[name] = found[0]
    if not links:
        return None
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    for name, target in links.items():
        os.symlink(target, os.path.join(folder, name))
    return folder


def run_loader(args: argparse.Namespace, loader: str, codec: str, mode: str, data: str, out_dir: str,
               env: dict[str, str], nogds: bool) -> dict[str, Any]:
    from bench_common import drop_caches, run_child

    argv = ["--child", loader, "--data", data, "--codec", codec, "--mode", mode, "--device", args.device,
            "--repeats", str(args.repeats)] + (["--nogds"] if nogds else [])
    if mode == "cold" and (why := drop_caches()) is not None:
        return {"skipped": why}
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        return run_child(argv, args.child_timeout, os.path.join(out_dir, "children.log"), script=__file__)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def fmt_gbps(value: float | None) -> str:
    return f"{value:.2f}" if value else "-"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="6GiB", help="state dict size (default 6GiB)")
    parser.add_argument("--codecs", default="none",
                        help="zarr-device arrays: none, zstd (zstd 1 + crc32c) and/or auto (byte shuffle, zstd 1, crc32c)")
    parser.add_argument("--chunk-rows", type=int, default=256, help="rows per chunk (256 x 4096 bf16: 2 MiB)")
    parser.add_argument("--loaders", default=",".join(LOADERS), help=f"default: {','.join(LOADERS)}")
    parser.add_argument("--device", default="cuda:0", help="cuda:N, or cpu for a smoke run")
    parser.add_argument("--repeats", type=int, default=3, help="timed warm loads per loader (3)")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold loads")
    parser.add_argument("--child-timeout", type=float, default=600.0, help="seconds per child process (600)")
    parser.add_argument("--out", default=None, help="directory for the files (kept, and reused when they match)")
    parser.add_argument("--keep", action="store_true", help="keep the files written in the default temp dir")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--data", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--codec", default="none", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="warm", help=argparse.SUPPRESS)
    parser.add_argument("--nogds", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.device = "cuda:0" if args.device == "cuda" else args.device
    if args.child is not None:  # imports only what its loader needs
        print(json.dumps(child(args)))
        return 0
    from zarr_device.tools.cli import parse_size  # the package's size parser, as bench_gpu.py uses

    try:
        args.size = parse_size(args.size)
    except Exception as e:
        parser.error(f"--size: {e}")
    args.loaders = [name for name in args.loaders.split(",") if name]
    args.codecs = [c for c in args.codecs.split(",") if c]
    for name in args.loaders:
        if name not in LOADERS:
            parser.error(f"unknown loader {name!r} (one of {', '.join(LOADERS)})")
    if not args.codecs or set(args.codecs) - {"none", "zstd", "auto"} or args.repeats < 1:
        parser.error("--codecs takes none, zstd and/or auto; --repeats must be >= 1")
    return run(args)


def run(args: argparse.Namespace) -> int:
    from importlib import metadata

    from bench_common import drop_caches, engine_info, fmt_bytes, log, machine_info, package_versions, print_machine
    from bench_many import COLS, tensor_rows

    started = time.perf_counter()
    own_dir = args.out is None
    out_dir = tempfile.mkdtemp(prefix="bench-peers-") if own_dir else args.out
    data = os.path.join(out_dir, "data")
    rows = tensor_rows(args.size, seed=1)
    nbytes = sum(rows) * COLS * 2
    machine, versions, engine = machine_info(), package_versions(), engine_info()
    for name in PEER_PACKAGES:
        versions[name] = metadata.version(name) if importlib.util.find_spec(name.replace("-", "_")) else None
    print_machine(machine, versions, engine)
    print(f"data:     {len(rows)} bf16 tensors of [rows, {COLS}], {fmt_bytes(nbytes)} ({nbytes / 1e9:.3f} GB); zarr "
          f"chunks of {args.chunk_rows} rows ({fmt_bytes(args.chunk_rows * COLS * 2)}); device {args.device}",
          flush=True)
    document: dict[str, Any] = {"machine": machine, "versions": versions, "engine": engine, "rows": rows,
                                "nbytes": nbytes, "args": {k: v for k, v in vars(args).items() if k in (
                                    "size", "codecs", "chunk_rows", "loaders", "device", "repeats", "no_cold")}}
    try:
        marker = prepare(data, rows, args.codecs, args.chunk_rows)
        cold_note = None
        if not args.no_cold:
            cold_note = drop_caches()
            if cold_note is not None:
                print(f"note:     {cold_note}; cold loads are skipped")
        document["cold_note"] = cold_note
        cold = not args.no_cold and cold_note is None
        links = cuda_library_links(os.path.join(out_dir, "cuda-links")) if args.device.startswith("cuda") else None
        if links:
            print(f"note:     fastsafetensors runs with LD_LIBRARY_PATH={links} "
                  f"(links to {', '.join(os.listdir(links))})")

        results = [measure(args, loader, codec, marker, data, out_dir, links, cold, nbytes)
                   for loader in args.loaders for codec in (args.codecs if loader == "zarr-device" else ["none"])]
        reference = next((r for r in results if r["loader"] == "zarr-device" and r["codec"] == "none"
                          and "warm_best_gbps" in r), None)
        for r in results:
            if reference is not None and "warm_best_gbps" in r:
                r["warm_vs_zd"] = r["warm_best_gbps"] / reference["warm_best_gbps"]
                if r.get("cold_gbps") and reference.get("cold_gbps"):
                    r["cold_vs_zd"] = r["cold_gbps"] / reference["cold_gbps"]
        document["results"] = results
        print()
        print(format_table(results, fmt_bytes))
        print(f"\nGB/s: 10^9 bytes of tensor data ({nbytes / 1e9:.3f} GB per load) per second, from the call to the "
              f"tensors on {args.device}, synchronised; warm: best and median of {args.repeats} after an untimed load; "
              "cold: one load by a fresh process after the page cache was dropped. vs zd: the loader's GB/s over "
              "zarr-device's (uncompressed arrays). Peak RSS: VmHWM of the loader's process (torch and its "
              "CUDA context included); added warm: that peak less the RSS before the first load. Every load "
              "with figures returned the generated values, bit for bit (FAILED: other values).")
        if args.device == "cpu":
            print("device cpu: a smoke run of the logic, not a measurement: safetensors' and torch.load's tensors "
                  "stay mapped from their files (nothing is copied), and instanttensor needs CUDA.")
        document["total_seconds"] = time.perf_counter() - started
        if args.json:
            with open(args.json, "w") as f:
                json.dump(document, f, indent=2)
        print(f"{document['total_seconds']:.0f} s in all" + (f"; results in {args.json}" if args.json else "")
              + (f"; files kept in {data}" if not own_dir or args.keep else ""))
        return 0
    finally:
        if own_dir and not args.keep:
            shutil.rmtree(out_dir, ignore_errors=True)


def measure(args: argparse.Namespace, loader: str, codec: str, marker: dict[str, Any], data: str, out_dir: str,
            links: str | None, cold: bool, nbytes: int) -> dict[str, Any]:
    """One loader's row: its warm child, then (``cold``) its cold child, summarised."""
    from bench_common import log

    file = "torch.save" if loader == "torch.load-mmap" else "safetensors"
    row: dict[str, Any] = {"loader": loader, "codec": codec, "file": file if loader != "zarr-device" else
                           "zarr" if codec == "none" else f"zarr {codec}"}
    if importlib.util.find_spec(NEEDS[loader]) is None:
        row["skipped"] = f"{NEEDS[loader]} is not installed"
    elif loader.startswith("instanttensor") and not args.device.startswith("cuda"):
        row["skipped"] = "instanttensor loads to CUDA devices only"
    elif row["file"] == "safetensors" and "safetensors-file" in marker["notes"]:
        row["skipped"] = marker["notes"]["safetensors-file"]
    if "skipped" in row:
        print(f"{loader}: skipped: {row['skipped']}", flush=True)
        return row
    env = {"LD_LIBRARY_PATH": ":".join(filter(None, [links, os.environ.get("LD_LIBRARY_PATH")]))} \
        if links and loader == "fastsafetensors" else {}
    log(f"{loader} ({row['file']}): warm ...")
    warm = run_loader(args, loader, codec, "warm", data, out_dir, env, nogds=False)
    nogds = loader == "fastsafetensors" and "error" in warm
    if nogds:  # GDS asked for, and the load failed outright: again with nogds=True
        log(f"  failed with GDS asked for ({warm['error']}); again with nogds=True")
        row["gds_error"] = warm["error"]
        warm = run_loader(args, loader, codec, "warm", data, out_dir, env, nogds=True)
    row["warm"] = warm
    if cold and not any(k in warm for k in ("skipped", "failed", "error")):
        log(f"{loader} ({row['file']}): cold ...")
        row["cold"] = run_loader(args, loader, codec, "cold", data, out_dir, env, nogds)
    summarise(row, nbytes)
    figures = f"{fmt_gbps(row.get('warm_best_gbps'))} GB/s warm, {fmt_gbps(row.get('cold_gbps'))} GB/s cold"
    print(f"{loader} ({row['file']}): " + (figures if "warm_best_gbps" in row else row["status"]), flush=True)
    return row


def summarise(row: dict[str, Any], nbytes: int) -> None:
    warm, cold = row.get("warm", {}), row.get("cold", {})
    for key, label in (("skipped", "skipped"), ("failed", "FAILED"), ("error", "error")):
        if key in warm:
            row["status"] = f"{label}: {warm[key]}"
            return
    seconds = warm["seconds"]
    row.update(warm_best_gbps=nbytes / min(seconds) / 1e9, warm_median_gbps=nbytes / statistics.median(seconds) / 1e9,
               peak_rss_warm=warm["peak_rss_bytes"], rss_added_warm=warm["peak_rss_bytes"] - warm["rss_start_bytes"],
               mode=warm["info"].get("mode", ""))
    if "seconds" in cold:
        row.update(cold_gbps=nbytes / cold["seconds"][0] / 1e9, peak_rss_cold=cold["peak_rss_bytes"])
    elif cold:
        row["cold_status"] = f"FAILED: {cold['failed']}" if "failed" in cold else \
            cold.get("error") or cold.get("skipped")


def format_table(rows: Sequence[dict[str, Any]], fmt_bytes: Callable[[float], str]) -> str:
    header = ["loader", "file", "warm GB/s", "median", "cold GB/s", "warm vs zd", "cold vs zd", "peak RSS warm",
              "peak RSS cold", "added warm", "notes"]
    table = []
    for r in rows:
        if "warm_best_gbps" not in r:
            table.append([r["loader"], r["file"]] + [""] * 8 + [r.get("status") or f"skipped: {r.get('skipped')}"])
            continue
        notes = "; ".join(filter(None, [r.get("mode"), r.get("gds_error") and f"with GDS: {r['gds_error']}",
                                        r.get("cold_status") and f"cold: {r['cold_status']}"]))
        table.append([r["loader"], r["file"], fmt_gbps(r["warm_best_gbps"]), fmt_gbps(r["warm_median_gbps"]),
                      fmt_gbps(r.get("cold_gbps")), f"{r['warm_vs_zd']:.2f}x" if "warm_vs_zd" in r else "-",
                      f"{r['cold_vs_zd']:.2f}x" if "cold_vs_zd" in r else "-", fmt_bytes(r["peak_rss_warm"]),
                      fmt_bytes(r["peak_rss_cold"]) if "peak_rss_cold" in r else "-", fmt_bytes(r["rss_added_warm"]),
                      notes])
    widths = [max(len(x[i]) for x in [header] + table) for i in range(len(header) - 1)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))) \
            + "  " + cells[-1]

    return "\n".join([line(header).rstrip(), *(line(c).rstrip() for c in table)])


if __name__ == "__main__":
    sys.exit(main())
