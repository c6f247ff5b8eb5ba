#!/usr/bin/env python
"""Whole-array read throughput of zarr-device and its peers, on this machine.

One float32 array (default 1 GiB in 1 MiB chunks) is written by zarr-python twice, uncompressed
and with zstd (level 0, zarr-python's default), so that every reader reads the same files. Each
reader then reads each array whole into a new NumPy array, in a fresh process of its own (so that
its peak memory can be told apart): one untimed warm-up read (the page cache is warm), then the
best of --repeat timed reads. Open + read is timed, the way a user calls it:

    zarr-device   zd.open_array(p)[...]
    zarr-python   zarr.open_array(p)[...]                      (default settings)
    zarrs         the same, with codec_pipeline.path = zarrs.ZarrsCodecPipeline
    tensorstore   ts.open({"driver": "zarr3", ...}).result().read().result()

Every reader's values are hashed and must agree. Run:

    python bench/bench_read.py                      # 1 GiB, about 2-4 minutes on 2 cores
    python bench/bench_read.py --size 4GiB --repeat 5 --json results.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from zarr_device.tools.cli import SampleLayout, format_bytes, iter_sample_blocks, parse_size, sample_layout

READERS = ("zarr-device", "zarr-python", "zarrs", "tensorstore")
CODECS = ("none", "zstd")
SAMPLE_VERSION = 1  # bump when the sample data changes, so kept arrays are rewritten
MIB = 1 << 20


# ------------------------------------------------------------------------------------------------
# the machine
# ------------------------------------------------------------------------------------------------


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (or the platform's word for it)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def total_memory() -> int:
    """Physical memory in bytes (0 when unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def machine_info() -> dict[str, Any]:
    """Cores, CPU, memory, system and Python."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "memory_bytes": total_memory(),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def package_version(name: str) -> str | None:
    """A package's installed version, or None where it is not installed."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    """The versions of everything measured."""
    names = ("zarr-device", "zarr", "numcodecs", "zarrs", "tensorstore", "numpy")
    return {name: package_version(name) for name in names}


# ------------------------------------------------------------------------------------------------
# the data (written once, by zarr-python)
# ------------------------------------------------------------------------------------------------


def _marker(layout: SampleLayout, codec: str) -> dict[str, Any]:
    return {
        "version": SAMPLE_VERSION,
        "shape": list(layout.shape),
        "chunks": list(layout.chunks),
        "codec": codec,
    }


def _is_complete(path: str, layout: SampleLayout, codec: str) -> bool:
    """Whether ``path`` holds this sample, written to the end by an earlier run."""
    try:
        with open(os.path.join(path, "zarr.json")) as f:
            attributes = json.load(f).get("attributes", {})
    except (OSError, ValueError):
        return False
    return bool(attributes.get("bench_read") == _marker(layout, codec))


def write_sample(path: str, layout: SampleLayout, codec: str, *, quiet: bool) -> None:
    """Writes the sample array at ``path`` with zarr-python (skipped when already there)."""
    if _is_complete(path, layout, codec):
        log(f"reusing {path}", quiet=quiet)
        return
    import zarr
    from tqdm import tqdm
    from zarr.codecs import ZstdCodec

    array = zarr.create_array(
        store=path,
        shape=layout.shape,
        chunks=layout.chunks,
        dtype=layout.dtype,
        compressors=None if codec == "none" else ZstdCodec(level=0),
        fill_value=0.0,
        zarr_format=3,
        overwrite=True,
    )
    with tqdm(
        total=layout.nbytes,
        desc=f"writing {codec} (zarr-python)",
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        disable=True if quiet else None,
        leave=False,
    ) as bar:
        for selection, values in iter_sample_blocks(layout):
            array[selection] = values
            bar.update(values.nbytes)
    array.update_attributes({"bench_read": _marker(layout, codec)})


def stored_bytes(path: str) -> int:
    """The bytes an array's chunk files take."""
    total = 0
    for folder, _dirs, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(folder, f)) for f in files if f != "zarr.json")
    return total


# ------------------------------------------------------------------------------------------------
# the readers (each runs in a child process)
# ------------------------------------------------------------------------------------------------


def make_reader(reader: str, path: str, threads: int) -> Callable[[], npt.NDArray[Any]]:
    """A function that opens the array at ``path`` and reads it whole with ``reader``."""
    if reader == "zarr-device":
        import zarr_device as zd

        if threads:
            zd.set_config(threads=threads)
        return lambda: zd.open_array(path)[...]
    if reader in ("zarr-python", "zarrs"):
        import zarr

        if threads:
            zarr.config.set({"threading.max_workers": threads})
        if reader == "zarrs":
            import zarrs  # noqa: F401  (fails here when it is not installed)

            # strict: fail rather than quietly fall back to zarr-python's own pipeline.
            zarr.config.set(
                {"codec_pipeline.path": "zarrs.ZarrsCodecPipeline", "codec_pipeline.strict": True}
            )
            pipeline = type(zarr.open_array(path, mode="r")._async_array.codec_pipeline).__name__
            if "Zarrs" not in pipeline:
                raise RuntimeError(f"zarrs is not in use (codec pipeline {pipeline})")
        return lambda: np.asarray(zarr.open_array(path, mode="r")[...])
    if reader == "tensorstore":
        import tensorstore as ts

        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": os.path.abspath(path)}}
        context = (
            ts.Context(
                {
                    "data_copy_concurrency": {"limit": threads},
                    "file_io_concurrency": {"limit": threads},
                }
            )
            if threads
            else None
        )

        def read() -> npt.NDArray[Any]:
            store = ts.open(spec, read=True, context=context).result()
            return np.asarray(store.read().result())

        return read
    raise ValueError(f"unknown reader {reader!r}")


def current_rss() -> int:
    """This process's resident memory now, in bytes."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return peak_rss()


def peak_rss() -> int:
    """This process's peak resident memory so far, in bytes. On Linux this is VmHWM, the peak of
    this process image alone (ru_maxrss there also counts the parent it was forked from, which
    keeps its value across exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def child_main(reader: str, path: str, repeat: int, threads: int) -> dict[str, Any]:
    """Measures one reader on one array: warm-up, then ``repeat`` timed reads."""
    read = make_reader(reader, path, threads)
    rss_start = current_rss()
    result = read()  # warm-up, untimed
    digest = hashlib.blake2b(np.ascontiguousarray(result).data, digest_size=16).hexdigest()
    nbytes = int(result.nbytes)
    shape, dtype = list(result.shape), str(result.dtype)
    del result
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = read()
        seconds.append(time.perf_counter() - start)
        del result  # the next read allocates its own output
    return {
        "reader": reader,
        "seconds": seconds,
        "best_seconds": min(seconds),
        "nbytes": nbytes,
        "shape": shape,
        "dtype": dtype,
        "digest": digest,
        "rss_start_bytes": rss_start,
        "peak_rss_bytes": peak_rss(),
    }


def run_child(reader: str, path: str, repeat: int, threads: int) -> dict[str, Any]:
    """Runs :func:`child_main` in a fresh Python process and returns what it measured (or why
    it could not)."""
    command = [
        sys.executable, os.path.abspath(__file__), "--child", reader, "--path", path,
        "--repeat", str(repeat), "--threads", str(threads),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["exit status %d" % done.returncode])[-1]
        return {"reader": reader, "error": reason}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# ------------------------------------------------------------------------------------------------
# reporting
# ------------------------------------------------------------------------------------------------


def log(message: str, *, quiet: bool) -> None:
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def format_header(
    machine: dict[str, Any], packages: dict[str, str | None], layout: SampleLayout, args: Any
) -> str:
    memory = machine["memory_bytes"] / (1 << 30)
    load = machine["load_average"]
    lines = [
        f"machine:  {machine['cpu']}, {machine['usable_cores']} cores usable of "
        f"{machine['cores']}, {memory:.1f} GiB RAM, {machine['system']}, Python "
        f"{machine['python']}" + (f", load {load[0]:.2f}" if load else ""),
        "versions: " + ", ".join(f"{k} {v or '(not installed)'}" for k, v in packages.items()),
        f"array:    {format_bytes(layout.nbytes)} {layout.dtype}, shape {tuple(layout.shape)}, "
        f"{layout.n_chunks} chunks of {tuple(layout.chunks)} ({format_bytes(layout.chunk_nbytes)}), "
        "written by zarr-python",
        f"method:   whole-array open + read into a new NumPy array, one process per reader, "
        f"page cache warm, best of {args.repeat} after a warm-up; threads: "
        + (str(args.threads) if args.threads else "each reader's default"),
    ]
    return "\n".join(lines)


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """One row per codec and reader: GB/s, ratio to zarr-python, memory."""
    header = ("codec", "stored", "reader", "GB/s", "vs zarr-python", "RSS start", "peak RSS")
    lines: list[tuple[str, ...]] = []
    last_codec = None
    for row in rows:
        first = row["codec"] != last_codec
        last_codec = row["codec"]
        cells = [row["codec"] if first else "", format_bytes(row["stored"]) if first else ""]
        if "error" in row:
            lines.append((*cells, row["reader"], "-", "-", "-", f"failed: {row['error']}"))
            continue
        versus = f"{row['vs_zarr_python']:.2f}x" if row.get("vs_zarr_python") else "n/a"
        lines.append(
            (
                *cells,
                row["reader"],
                f"{row['gbps']:.2f}",
                versus,
                f"{row['rss_start_bytes'] / MIB:.0f} MiB",
                f"{row['peak_rss_bytes'] / MIB:.0f} MiB",
            )
        )
    widths = [max(len(r[i]) for r in (header, *lines) if i < len(r)) for i in range(len(header))]
    right = {1, 3, 4, 5, 6}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, lines)])


def measure(
    paths: dict[str, str], readers: Sequence[str], layout: SampleLayout, args: Any
) -> list[dict[str, Any]]:
    """Runs every reader on every array; checks that they all read the same values."""
    rows: list[dict[str, Any]] = []
    for codec, path in paths.items():
        stored = stored_bytes(path)
        digests: dict[str, str] = {}
        codec_rows = []
        for reader in readers:
            log(f"reading {codec} with {reader} ...", quiet=args.quiet)
            result = run_child(reader, path, args.repeat, args.threads)
            result.update(codec=codec, stored=stored, raw=layout.nbytes)
            if "error" not in result:
                result["gbps"] = result["nbytes"] / result["best_seconds"] / 1e9
                digests[reader] = result["digest"]
            codec_rows.append(result)
        if len(set(digests.values())) > 1:
            raise SystemExit(f"readers disagree on the values of {path}: {digests}")
        base = next((r for r in codec_rows if r["reader"] == "zarr-python" and "gbps" in r), None)
        for row in codec_rows:
            if base is not None and "gbps" in row:
                row["vs_zarr_python"] = row["gbps"] / base["gbps"]
        rows += codec_rows
    return rows


# ------------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="The array is written once per run (kept and reused with --dir).",
    )
    parser.add_argument("--size", type=parse_size, default=1 << 30, help="array size (default 1GiB)")
    parser.add_argument("--chunk", type=parse_size, default=1 << 20, help="chunk size (default 1MiB)")
    parser.add_argument("--repeat", type=int, default=3, help="timed reads per reader (default 3)")
    parser.add_argument(
        "--dir", default=None,
        help="where to write the arrays; they are kept there and reused by later runs "
        "(default: a temporary directory, removed afterwards)",
    )  # fmt: skip
    parser.add_argument(
        "--threads", type=int, default=0,
        help="threads for every reader (default 0: each reader's own default)",
    )  # fmt: skip
    parser.add_argument(
        "--readers", default=",".join(READERS),
        help=f"comma-separated readers to run (default: {','.join(READERS)})",
    )  # fmt: skip
    parser.add_argument(
        "--codecs", default=",".join(CODECS), help="comma-separated: none,zstd (default: both)"
    )
    parser.add_argument("--json", metavar="OUT", default=None, help="also write results to OUT")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--path", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    args.readers = [r for r in args.readers.split(",") if r]
    args.codecs = [c for c in args.codecs.split(",") if c]
    for name in args.readers:
        if name not in READERS:
            parser.error(f"unknown reader {name!r} (one of {', '.join(READERS)})")
    for name in args.codecs:
        if name not in CODECS:
            parser.error(f"unknown codec {name!r} (one of {', '.join(CODECS)})")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        print(json.dumps(child_main(args.child, args.path, args.repeat, args.threads)))
        return 0

    import zarr_device as zd

    layout = sample_layout(args.size, args.chunk)
    machine, packages = machine_info(), versions()
    print(format_header(machine, packages, layout, args), flush=True)

    root = args.dir if args.dir is not None else tempfile.mkdtemp(prefix="bench-read-")
    os.makedirs(root, exist_ok=True)
    try:
        paths = {}
        for codec in args.codecs:
            paths[codec] = os.path.join(
                root, f"sample-{layout.shape[0]}x{layout.shape[1]}-c{layout.chunks[0]}-{codec}.zarr"
            )
            write_sample(paths[codec], layout, codec, quiet=args.quiet)
        rows = measure(paths, args.readers, layout, args)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)

    budget = zd.get_config().max_inflight_bytes
    print()
    print(format_table(rows))
    print()
    print(
        f"GB/s: decoded bytes (10^9) per second. RSS start: the process after imports, before "
        f"reading. Output: {layout.nbytes / MIB:.0f} MiB per read; zarr-device's in-flight "
        f"budget: {budget / MIB:.0f} MiB (so its peak should stay under start + output + budget)."
    )
    read_ok = [r for r in rows if "error" not in r]
    if len({r["reader"] for r in read_ok}) > 1:
        print("All readers that ran returned identical values (checked by hash).")
    if args.json:
        document = {
            "machine": machine,
            "versions": packages,
            "layout": {"shape": list(layout.shape), "chunks": list(layout.chunks),
                       "dtype": layout.dtype, "nbytes": layout.nbytes},
            "repeat": args.repeat,
            "threads": args.threads,
            "zarr_device_max_inflight_bytes": budget,
            "results": rows,
        }  # fmt: skip
        with open(args.json, "w") as f:
            json.dump(document, f, indent=2)
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
