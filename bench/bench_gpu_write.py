#!/usr/bin/env python
"""Writing a torch CUDA tensor into a Zarr v3 array on local disk: zarr-device against its peers.

One --size tensor (float32 or bfloat16, N(0, 0.02) values, like model weights) is drawn on the GPU
from a seeded torch.Generator, so that every process holds the same values, and written once per
codec (none; zstd followed by crc32c), sharded (--inner-chunk chunks in --shard shards) or not
(--chunk chunks). Each writer runs in a process of its own:

    zarr-device        zd.create(p, shape=..., dtype=..., chunks=..., shards=..., compressors=...)[...] = tensor
    zarr-python+cpu    zarr.create_array(p, ...the same codecs...)[...] = tensor.cpu().numpy()
    tensorstore+cpu    ts.open({"driver": "zarr3", ...}, create=True).result().write(tensor.cpu().numpy()).result()

A write is timed from the tensor on the GPU (synchronised) to the write calls returning with every
file written; nobody calls fsync. Each writer writes --repeat times, the best taken; before each
write the array is deleted and the dirty pages are written back, untimed. The last array each writer
leaves is read back by zarr-device on the CPU, in another process that draws the tensor again, and
compared with it bit for bit. Reported per writer: GB/s (decoded bytes, 10^9 per second),
zarr-device's speed as a multiple of the writer's, the writer process's peak RSS (VmHWM), the stored
size of the chunk files and the compression ratio.

    python bench/bench_gpu_write.py                                  # 4 GiB float32, sharded
    python bench/bench_gpu_write.py --dtype bfloat16 --layout unsharded --chunk 4MiB --json out.json
    python bench/bench_gpu_write.py --size 64MiB --device cpu --repeat 1   # a smoke run without a GPU
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_common import (  # noqa: E402
    CODECS,
    DTYPES,
    GIB,
    LAYOUTS,
    MIB,
    chunk_files,
    compressor_codecs,
    engine_info,
    fmt_bytes,
    layout_of,
    log,
    machine_info,
    package_versions,
    parse_size,
    print_header,
    read_proc_status,
    run_child,
)

WRITERS = ("zarr-device", "zarr-python+cpu", "tensorstore+cpu")
DEFAULT_SEED = 20261130


# ------------------------------------------------------------------------------------------------
# what every writer writes: the tensor and the codec chain
# ------------------------------------------------------------------------------------------------


def make_tensor(torch: Any, layout: dict[str, Any], seed: int, device: str) -> Any:
    """The source tensor, the same in every process: drawn on ``device`` from a seeded generator."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    dtype = torch.float32 if layout["dtype"] == "float32" else torch.bfloat16
    tensor = torch.empty(layout["shape"], dtype=dtype, device=device)
    tensor.normal_(0.0, 0.02, generator=generator)
    return tensor


def codec_chain(layout: dict[str, Any], codec: str, level: int) -> list[dict[str, Any]]:
    """The array's whole v3 codec chain, as zarr-device's create writes it from chunks, shards and
    compressors; tensorstore gets it verbatim, and every stored zarr.json is checked against it."""
    inner: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    inner += compressor_codecs(codec, level)
    if layout["shards"] is None:
        return inner
    return [{
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": list(layout["chunks"]),
            "codecs": inner,
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": "end",
        },
    }]  # fmt: skip


def grid_of(layout: dict[str, Any]) -> list[int]:
    """The shape of one stored object: a shard, or a chunk when unsharded."""
    return list(layout["shards"] or layout["chunks"])


def tensorstore_spec(path: str, layout: dict[str, Any], codec: str, level: int) -> dict[str, Any]:
    return {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": os.path.abspath(path) + "/"},
        "metadata": {
            "shape": list(layout["shape"]),
            "data_type": layout["dtype"],
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": grid_of(layout)}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0.0,
            "codecs": codec_chain(layout, codec, level),
        },
    }


def normalize_codecs(codecs: Any) -> Any:
    """A codec chain with empty configurations dropped, so that writers that spell "no
    configuration" differently compare equal."""
    if isinstance(codecs, list):
        return [normalize_codecs(c) for c in codecs]
    if isinstance(codecs, dict):
        return {k: normalize_codecs(v) for k, v in codecs.items() if not (k == "configuration" and v == {})}
    return codecs


def codec_difference(stored: Any, expected: list[dict[str, Any]]) -> str | None:
    """None when ``stored`` is ``expected``, else both, for the report."""
    if normalize_codecs(stored) == normalize_codecs(expected):
        return None
    return f"stored codecs {json.dumps(stored)} differ from {json.dumps(expected)}"


# ------------------------------------------------------------------------------------------------
# children: each writer, and each check, runs in a process of its own
# ------------------------------------------------------------------------------------------------


def _host_numpy(torch: Any, tensor: Any) -> Any:
    """The tensor's values in a NumPy array in pageable host memory (bfloat16 through its bits,
    as ml_dtypes' bfloat16, which tensorstore's bfloat16 is)."""
    host = tensor.cpu()
    if host.dtype == torch.bfloat16:
        import ml_dtypes

        return host.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return host.numpy()


def make_writer(name: str, path: str, layout: dict[str, Any], codec: str, level: int,
                threads: int) -> Callable[[Any], None]:
    """A function that creates the array at ``path`` and writes the whole tensor into it."""
    import torch

    if name == "zarr-device":
        import zarr_device as zd

        if threads:
            zd.set_config(threads=threads)
        compressors = compressor_codecs(codec, level) or None

        def write_zd(tensor: Any) -> None:
            arr = zd.create(path, shape=layout["shape"], dtype=layout["dtype"], chunks=layout["chunks"],
                            shards=layout["shards"], compressors=compressors, fill_value=0.0, mode="w")
            arr[...] = tensor

        return write_zd
    if name == "zarr-python+cpu":
        import zarr
        from zarr.codecs import BytesCodec, Crc32cCodec, ZstdCodec

        if threads:
            zarr.config.set({"threading.max_workers": threads})
        zarr_compressors = None if codec == "none" else [ZstdCodec(level=level, checksum=False), Crc32cCodec()]

        def write_zarr(tensor: Any) -> None:
            arr = zarr.create_array(path, shape=tuple(layout["shape"]), dtype=layout["dtype"],
                                    chunks=tuple(layout["chunks"]),
                                    shards=None if layout["shards"] is None else tuple(layout["shards"]),
                                    serializer=BytesCodec(endian="little"), compressors=zarr_compressors,
                                    fill_value=0.0, zarr_format=3, overwrite=True)
            arr[...] = _host_numpy(torch, tensor)

        return write_zarr
    if name == "tensorstore+cpu":
        import tensorstore as ts

        spec = tensorstore_spec(path, layout, codec, level)
        context = ts.Context({"data_copy_concurrency": {"limit": threads},
                              "file_io_concurrency": {"limit": threads}}) if threads else None

        def write_ts(tensor: Any) -> None:
            store = ts.open(spec, create=True, delete_existing=True, context=context).result()
            # One write of a whole array: tensorstore gathers a shard's inner chunks into one write
            # of the shard by itself (no transaction needed). The host array is ours and never
            # changes, so tensorstore may keep referring to it instead of copying it first.
            store.write(_host_numpy(torch, tensor), can_reference_source_data_indefinitely=True).result()

        return write_ts
    raise ValueError(f"unknown writer {name!r}")


def child_writer(name: str, path: str, layout: dict[str, Any], codec: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    on_gpu = args.device.startswith("cuda")
    if on_gpu:
        torch.cuda.set_device(torch.device(args.device))
    sync: Callable[[], None] = torch.cuda.synchronize if on_gpu else (lambda: None)
    write = make_writer(name, path, layout, codec, args.zstd_level, args.threads)
    tensor = make_tensor(torch, layout, args.seed, args.device)
    sync()
    rss_start = read_proc_status("VmRSS")
    runs: list[float] = []
    for _ in range(args.repeat):
        shutil.rmtree(path, ignore_errors=True)
        # the previous repeat's dirty pages, written back during this one, would slow it down
        os.sync()
        start = time.perf_counter()
        write(tensor)
        runs.append(time.perf_counter() - start)
    return {
        "writer": name, "nbytes": int(tensor.numel() * tensor.element_size()), "seconds": runs,
        "rss_start_bytes": rss_start, "peak_rss_bytes": read_proc_status("VmHWM"),
    }  # fmt: skip


def child_verify(path: str, layout: dict[str, Any], codec: str, args: argparse.Namespace) -> dict[str, Any]:
    """Reads the array back with zarr-device on the CPU and compares it with the tensor, bit for bit."""
    import importlib.util

    if importlib.util.find_spec("zarr_device") is None:
        return {"skipped": "not installed: zarr_device"}
    import torch

    import zarr_device as zd

    arr = zd.open_array(path)
    out: dict[str, Any] = {"codec_note": codec_difference(arr.codecs, codec_chain(layout, codec, args.zstd_level))}
    if list(arr.shape) != list(layout["shape"]) or str(arr.metadata.get("data_type")) != layout["dtype"]:
        return {**out, "ok": False,
                "note": f"shape {list(arr.shape)} {arr.metadata.get('data_type')}, expected "
                        f"{layout['shape']} {layout['dtype']}"}  # fmt: skip
    got = arr.read(like="torch")  # on the CPU: a torch tensor serves bfloat16, NumPy does not
    expected = make_tensor(torch, layout, args.seed, args.device)
    bits = torch.int16 if expected.element_size() == 2 else torch.int32
    mismatched = 0
    step = max(1, (256 * MIB) // (layout["shape"][1] * expected.element_size()))
    # compared a slab at a time on the tensor's device, so that no second copy of the array is needed there
    for r0 in range(0, layout["shape"][0], step):
        part = got[r0:r0 + step].to(expected.device)
        mismatched += int((part.view(bits) != expected[r0:r0 + step].view(bits)).sum().item())
    return {**out, "ok": mismatched == 0, "mismatched_elements": mismatched}


# ------------------------------------------------------------------------------------------------
# the parent
# ------------------------------------------------------------------------------------------------


def gpu_problem(device: str) -> str | None:
    """None when ``device`` can hold the tensor, else why not, in a sentence."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed, and this benchmark writes a torch tensor"
    if device == "cpu":
        return None
    try:
        index = torch.device(device).index or 0
    except RuntimeError as e:
        return f"--device {device!r} is not a torch device ({e})"
    if not device.startswith("cuda"):
        return f"--device {device!r}: this benchmark writes from a CUDA device (or cpu, for a smoke run)"
    if not torch.cuda.is_available():
        build = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a build without CUDA"
        return (f"no CUDA GPU is visible to torch {torch.__version__} ({build}); this benchmark writes from GPU "
                "memory. On a machine without a GPU, --device cpu runs a smoke test of the writers")
    if index >= torch.cuda.device_count():
        return f"{device} does not exist: torch sees {torch.cuda.device_count()} CUDA device(s)"
    return None


def writer_available(name: str, dtype: str) -> str | None:
    """None when the writer can run, else why it is skipped."""
    import importlib.util

    needs = {"zarr-device": ["zarr_device", "torch"], "zarr-python+cpu": ["zarr", "torch"],
             "tensorstore+cpu": ["tensorstore", "torch"]}  # fmt: skip
    if dtype == "bfloat16":
        needs[name] = needs[name] + ["ml_dtypes"]
    missing = [m for m in needs[name] if importlib.util.find_spec(m) is None]
    if missing:
        return f"not installed: {', '.join(missing)}"
    if name == "zarr-python+cpu" and dtype == "bfloat16":
        return "zarr-python has no bfloat16 data type"
    return None


def stored_size(path: str) -> tuple[int, int]:
    """Bytes and number of the array's chunk (or shard) files, metadata left out."""
    files = chunk_files(path)
    return sum(size for _, size in files), len(files)


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    header = ["codec", "writer", "GB/s", "zd x", "best s", "first s", "peak RSS", "RSS start", "stored",
              "ratio", "files", "verified"]
    table: list[tuple[list[str], str]] = []
    last = None
    for row in rows:
        cells = [row["codec"] if row["codec"] != last else "", row["writer"]]
        last = row["codec"]
        if "error" in row or "skipped" in row:
            note = f"failed: {row['error']}" if "error" in row else f"skipped: {row['skipped']}"
            table.append((cells + [""] * (len(header) - 2), note))
            continue
        verify = row.get("verify", {})
        verified = "yes" if verify.get("ok") else (
            "skipped" if "skipped" in verify else "error" if "error" in verify else "NO")
        ratio = f"{row['zd_ratio']:.2f}x" if row.get("zd_ratio") else "-"
        notes = "; ".join(n for n in (verify.get("note"), verify.get("codec_note"), verify.get("error"),
                                      verify.get("skipped")) if n)
        table.append((cells + [
            f"{row['gbps']:.2f}", ratio, f"{row['best_seconds']:.2f}", f"{row['seconds'][0]:.2f}",
            fmt_bytes(row["peak_rss_bytes"]) if row.get("peak_rss_bytes") is not None else "-",
            fmt_bytes(row["rss_start_bytes"]) if row.get("rss_start_bytes") is not None else "-",
            fmt_bytes(row["stored"]), f"{row['compression_ratio']:.3f}", str(row["files"]), verified,
        ], notes))  # fmt: skip
    widths = [max(len(r[i]) for r in [header] + [c for c, _ in table]) for i in range(len(header))]

    def line(cells: Sequence[str], note: str = "") -> str:
        text = "  ".join(c.rjust(w) if i >= 2 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        return (text.rstrip() + ("  " + note if note else "")).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(c, n) for c, n in table])


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=4 * GIB, help="tensor size (default 4GiB)")
    parser.add_argument("--dtype", choices=DTYPES, default="float32",
                        help="default float32 (zarr-python has no bfloat16 and is skipped for it)")
    parser.add_argument("--layout", choices=LAYOUTS, default="sharded")
    parser.add_argument("--inner-chunk", type=parse_size, default=256 * 1024, help="sharded: inner chunk size (256KiB)")
    parser.add_argument("--shard", type=parse_size, default=64 * MIB, help="sharded: shard size (64MiB)")
    parser.add_argument("--chunk", type=parse_size, default=4 * MIB, help="unsharded: chunk size (4MiB)")
    parser.add_argument("--cols", type=int, default=8192, help="columns of the 2-d array (default 8192)")
    parser.add_argument("--codecs", default=",".join(CODECS), help="none,zstd (default both)")
    parser.add_argument("--zstd-level", type=int, default=1, help="zstd level (default 1, as bench_gpu.py)")
    parser.add_argument("--writers", default=",".join(WRITERS), help=f"default: {','.join(WRITERS)}")
    parser.add_argument("--repeat", type=int, default=3, help="writes per writer, best taken (3)")
    parser.add_argument("--threads", type=int, default=0, help="threads for every writer (0: their defaults)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the tensor's values")
    parser.add_argument("--device", default="cuda:0",
                        help="cuda:N (or cpu, for a smoke run on a machine without a GPU)")
    parser.add_argument("--dir", default=None, help="where the arrays are written (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep every writer's last array")
    parser.add_argument("--child-timeout", type=float, default=600.0, help="seconds per child process (600)")
    parser.add_argument("--out", metavar="LOGDIR", default=None,
                        help="also write results.json and the children's stderr (*.log) there")
    parser.add_argument("--json", metavar="OUT", default=None, help="also write the results to OUT")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--path", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.writers = [w for w in args.writers.split(",") if w]
    args.codecs = [c for c in args.codecs.split(",") if c]
    for name in args.writers:
        if name not in WRITERS:
            parser.error(f"unknown writer {name!r} (one of {', '.join(WRITERS)})")
    for name in args.codecs:
        if name not in CODECS:
            parser.error(f"unknown codec {name!r} (one of {', '.join(CODECS)})")
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    return args


def _child_args(args: argparse.Namespace, child: str, path: str, codec: str) -> list[str]:
    return ["--child", child, "--path", path, "--codecs", codec, "--size", str(args.size), "--dtype", args.dtype,
            "--layout", args.layout, "--inner-chunk", str(args.inner_chunk), "--shard", str(args.shard),
            "--chunk", str(args.chunk), "--cols", str(args.cols), "--zstd-level", str(args.zstd_level),
            "--repeat", str(args.repeat), "--threads", str(args.threads), "--seed", str(args.seed),
            "--device", args.device]  # fmt: skip


def child_main(args: argparse.Namespace) -> dict[str, Any]:
    kind, _, name = args.child.partition(":")
    layout, codec = layout_of(args), args.codecs[0]
    if kind == "writer":
        return child_writer(name, args.path, layout, codec, args)
    if kind == "verify":
        return child_verify(args.path, layout, codec, args)
    raise SystemExit(f"unknown child {args.child!r}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        print(json.dumps(child_main(args)))
        return 0
    problem = gpu_problem(args.device)
    if problem is not None:
        print(f"bench_gpu_write: {problem}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    machine, versions, engine = machine_info(), package_versions(), engine_info()
    layout = layout_of(args)
    print_header(machine, versions, engine, layout, args.codecs, args.zstd_level,
                 f"from a tensor on {args.device}")

    own_dir = args.dir is None
    data_dir = tempfile.mkdtemp(prefix="bench-gpu-write-") if own_dir else args.dir
    os.makedirs(data_dir, exist_ok=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    shape_tag = f"{layout['dtype']}-{layout['shape'][0]}x{layout['shape'][1]}-c{layout['chunks'][0]}" + (
        f"-s{layout['shards'][0]}" if layout["shards"] else "")
    document: dict[str, Any] = {"machine": machine, "versions": versions, "engine": engine, "layout": layout,
                                "codec_chains": {c: codec_chain(layout, c, args.zstd_level) for c in args.codecs},
                                "args": {k: v for k, v in vars(args).items() if k not in ("child", "path")}}
    rows: list[dict[str, Any]] = []
    try:
        for codec in args.codecs:
            codec_rows = []
            for writer in args.writers:
                row: dict[str, Any] = {"codec": codec, "writer": writer}
                why = writer_available(writer, args.dtype)
                if why is not None:
                    row["skipped"] = why
                    codec_rows.append(row)
                    continue
                path = os.path.join(data_dir, f"{shape_tag}-{codec}-{writer.replace('+', '-')}.zarr")
                log_path = os.path.join(args.out, f"{codec}-{writer.replace('+', '-')}.log") if args.out else None
                log(f"writing {codec} with {writer} ({args.repeat}x) to {path} ...")
                row.update(run_child(_child_args(args, f"writer:{writer}", path, codec), args.child_timeout,
                                     log_path, script=__file__))
                if "error" not in row:
                    row["best_seconds"] = min(row["seconds"])
                    row["gbps"] = row["nbytes"] / row["best_seconds"] / 1e9
                    row["stored"], row["files"] = stored_size(path)
                    row["compression_ratio"] = row["nbytes"] / row["stored"] if row["stored"] else 0.0
                    log(f"  best {row['best_seconds']:.2f} s ({row['gbps']:.2f} GB/s); reading it back ...")
                    row["verify"] = run_child(_child_args(args, "verify", path, codec), args.child_timeout, log_path,
                                              script=__file__)
                    if not row["verify"].get("ok"):
                        log(f"  verification: {json.dumps(row['verify'])}")
                if not args.keep:
                    shutil.rmtree(path, ignore_errors=True)
                codec_rows.append(row)
            zd_row = next((r for r in codec_rows if r["writer"] == "zarr-device" and "gbps" in r), None)
            for r in codec_rows:
                if zd_row is not None and r is not zd_row and "gbps" in r:
                    r["zd_ratio"] = zd_row["gbps"] / r["gbps"]
            rows += codec_rows
        document["results"] = rows
        print()
        print(format_table(rows))
        print()
        print(f"GB/s: decoded bytes ({fmt_bytes(layout['nbytes'])} per write) per second, 10^9, best of "
              f"{args.repeat}; a write is create + write, from the tensor on {args.device} to every file written "
              "(no fsync). 'zd x': zarr-device's speed as a multiple of the row's. first s: the first write, "
              "which pays for lazy initialisation. Peak RSS: VmHWM of the writer's own process (imports "
              "included; RSS start: after imports and drawing the tensor). stored: the chunk or shard files; "
              "ratio: decoded / stored. verified: read back by zarr-device on the CPU, equal bit for bit.")
        bad = [r for r in rows if "verify" in r and not r["verify"].get("ok")]
        if bad:
            print("WARNING: not verified: " + ", ".join(f"{r['codec']}/{r['writer']}" for r in bad))
        document["total_seconds"] = time.perf_counter() - started
        targets = ([os.path.join(args.out, "results.json")] if args.out else []) + ([args.json] if args.json else [])
        for target in targets:
            with open(target, "w") as f:
                json.dump(document, f, indent=2)
        print((f"results: {' and '.join(targets)}; " if targets else "")
              + (f"arrays kept in {data_dir}; " if args.keep else "")
              + f"{document['total_seconds']:.0f} s in all")
        return 1 if bad else 0
    finally:
        if own_dir and not args.keep:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
