"""``zarr-device bench``: a sample array written, then read back with zarr-device and zarr-python
in the same run."""

from __future__ import annotations

import argparse
import functools
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt

import zarr_device as zd
from zarr_device.tools.cli.common import compression_ratio, int_at_least, parse_size, progress
from zarr_device.tools.cli.info import plural, shape_text, stored_bytes
from zarr_device.basics.sizes import format_bytes
from zarr_device.errors import UsageError


@dataclass(frozen=True)
class SampleLayout:
    """A 2-d float32 sample array: its shape and its chunk shape."""

    shape: tuple[int, int]
    chunks: tuple[int, int]
    dtype: str = "float32"

    @property
    def itemsize(self) -> int:
        return int(np.dtype(self.dtype).itemsize)

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * self.itemsize

    @property
    def chunk_nbytes(self) -> int:
        return self.chunks[0] * self.chunks[1] * self.itemsize

    @property
    def n_chunks(self) -> int:
        return math.prod(-(-s // c) for s, c in zip(self.shape, self.chunks))


def sample_layout(size: int, chunk: int) -> SampleLayout:
    """A float32 array of about ``size`` bytes in square-ish chunks of about ``chunk`` bytes,
    laid out as a near-square grid of chunks (so reads scatter chunks into the output, as they
    do with images and fields)."""
    chunk_elems = max(1, chunk // 4)
    cols = 1 << (math.isqrt(chunk_elems).bit_length() - 1)  # a power of two <= sqrt
    rows = max(1, chunk_elems // cols)
    n_chunks = max(1, round(size / (rows * cols * 4)))
    # The largest divisor of n_chunks up to its square root: the grid's rows of chunks.
    grid_rows = max(d for d in range(1, math.isqrt(n_chunks) + 1) if n_chunks % d == 0)
    grid_cols = n_chunks // grid_rows
    return SampleLayout(shape=(grid_rows * rows, grid_cols * cols), chunks=(rows, cols))


_NOISE_PERIOD = 1 << 22  # noise table length; rows start 8191 apart in it, so rows of a chunk
_ROW_STRIDE = 8191  # never share noise (for chunks up to 512 rows)
_KEEP_MANTISSA_BITS = 10


@functools.lru_cache(maxsize=4)
def _noise_table(width: int) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(20240611)
    table = rng.random(_NOISE_PERIOD + width, dtype=np.float32)
    table -= np.float32(0.5)
    table *= np.float32(0.1)
    return table


def sample_block(
    layout: SampleLayout, rows: tuple[int, int], cols: tuple[int, int]
) -> npt.NDArray[np.float32]:
    """The sample values in ``[rows[0]:rows[1], cols[0]:cols[1]]``: a smooth field plus noise,
    rounded to a few mantissa bits, so that it compresses the way measured data does. The same
    region always holds the same values, however the array is cut into blocks."""
    r0, r1 = rows
    c0, c1 = cols
    i = np.arange(r0, r1, dtype=np.float32)
    j = np.arange(c0, c1, dtype=np.float32)
    field: npt.NDArray[np.float32] = np.empty((r1 - r0, c1 - c0), dtype=np.float32)
    np.multiply.outer(
        np.sin(i * np.float32(0.0031)) + np.float32(2.0),
        np.cos(j * np.float32(0.0047)) + np.float32(1.5),
        out=field,
    )
    table = _noise_table(layout.shape[1])
    for k, row in enumerate(range(r0, r1)):
        start = (row * _ROW_STRIDE) % _NOISE_PERIOD + c0
        field[k] += table[start : start + (c1 - c0)]
    bits = field.view(np.uint32)
    bits &= np.uint32((0xFFFFFFFF << (23 - _KEEP_MANTISSA_BITS)) & 0xFFFFFFFF)
    return field


def iter_sample_blocks(
    layout: SampleLayout, max_block_bytes: int = 64 << 20
) -> Iterator[tuple[tuple[slice, slice], npt.NDArray[np.float32]]]:
    """Yields (selection, values) covering the sample array in blocks of whole chunks, each at
    most about ``max_block_bytes`` (at least one chunk)."""
    rows, cols = layout.shape
    crow, ccol = layout.chunks
    chunks_per_block = max(1, max_block_bytes // layout.chunk_nbytes)
    col_step = ccol * max(1, min(-(-cols // ccol), chunks_per_block))
    row_step = crow * max(1, chunks_per_block // max(1, -(-cols // ccol)))
    for r0 in range(0, rows, row_step):
        r1 = min(rows, r0 + row_step)
        for c0 in range(0, cols, col_step):
            c1 = min(cols, c0 + col_step)
            yield (slice(r0, r1), slice(c0, c1)), sample_block(layout, (r0, r1), (c0, c1))


def write_sample(
    path: str, layout: SampleLayout, compressors: str | None, *, quiet: bool
) -> zd.Array:
    """Writes the sample array with zarr-device and returns it."""
    array = zd.create(
        path,
        shape=layout.shape,
        dtype=layout.dtype,
        chunks=layout.chunks,
        compressors=compressors,
        mode="w",
    )
    label = f"writing ({compressors or 'uncompressed'})"
    with progress(layout.nbytes, label, quiet=quiet) as bar:
        for selection, values in iter_sample_blocks(layout):
            array[selection] = values
            bar.update(values.nbytes)
    return array


@dataclass
class Timing:
    """The best of several timed reads, and the data the last one returned."""

    reader: str
    seconds: float
    nbytes: int
    result: npt.NDArray[Any]

    @property
    def gbps(self) -> float:
        return self.nbytes / self.seconds / 1e9


def time_reads(
    reader: str, read: Callable[[], npt.NDArray[Any]], *, repeat: int, quiet: bool
) -> Timing:
    """One untimed warm-up read, then the best of ``repeat`` timed reads."""
    with progress(repeat + 1, f"reading with {reader}", quiet=quiet, unit="read") as bar:
        result = read()
        bar.update(1)
        best = math.inf
        for _ in range(repeat):
            del result  # let the previous output go before the next one is allocated
            start = time.perf_counter()
            result = read()
            best = min(best, time.perf_counter() - start)
            bar.update(1)
    return Timing(reader, best, int(result.nbytes), result)


def _have_zarr() -> bool:
    try:
        import zarr  # noqa: F401
    except ImportError:
        return False
    return True


class ReadMismatchError(RuntimeError):
    """Two readers returned different values for the same array."""


def _zarr_python_reader(path: str, threads: int) -> Callable[[], npt.NDArray[Any]] | None:
    """A reader through zarr-python, or None where zarr-python is not installed."""
    try:
        import zarr
    except ImportError:
        return None
    if threads:
        zarr.config.set({"threading.max_workers": threads})

    def read() -> npt.NDArray[Any]:
        return np.asarray(zarr.open_array(path, mode="r")[...])

    return read


@dataclass
class CodecResult:
    """What ``bench`` measured for one codec."""

    codec: str
    stored: int
    raw: int
    timings: list[Timing]


def bench_codec(
    root: str, codec: str, layout: SampleLayout, args: argparse.Namespace
) -> CodecResult:
    """Writes the sample with one codec, then times both readers on it."""
    path = os.path.join(root, f"sample-{codec}.zarr")
    compressors = None if codec == "none" else codec
    write_sample(path, layout, compressors, quiet=args.quiet)
    stored = stored_bytes(zd.LocalStore(path), "")
    timings = [
        time_reads(
            "zarr-device", lambda: zd.open_array(path)[...], repeat=args.repeat, quiet=args.quiet
        )
    ]
    zarr_read = _zarr_python_reader(path, args.threads)
    if zarr_read is not None:
        theirs = time_reads("zarr-python", zarr_read, repeat=args.repeat, quiet=args.quiet)
        if not np.array_equal(timings[0].result, theirs.result):
            raise ReadMismatchError(
                f"zarr-device and zarr-python read different values from {path} ({codec})"
            )
        timings.append(theirs)
    for timing in timings:
        timing.result = np.empty(0, dtype=np.float32)  # free the outputs
    return CodecResult(codec, stored, layout.nbytes, timings)


def format_bench_table(results: Sequence[CodecResult]) -> str:
    """The table ``bench`` prints: one row per codec and reader."""
    header = ("codec", "stored", "ratio", "reader", "GB/s", "vs zarr-python")
    rows: list[tuple[str, ...]] = []
    for result in results:
        base = next((t for t in result.timings if t.reader == "zarr-python"), None)
        for k, timing in enumerate(result.timings):
            versus = f"{timing.gbps / base.gbps:.2f}x" if base is not None else "n/a"
            ratio = compression_ratio(result.raw, result.stored)
            rows.append(
                (
                    result.codec if k == 0 else "",
                    format_bytes(result.stored) if k == 0 else "",
                    (f"{ratio:.2f}" if ratio else "n/a") if k == 0 else "",
                    timing.reader,
                    f"{timing.gbps:.2f}",
                    versus,
                )
            )
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    right = {1, 2, 4, 5}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def _bench_header(layout: SampleLayout, args: argparse.Namespace) -> str:
    threads = args.threads or os.cpu_count() or 1
    return (
        f"sample: {format_bytes(layout.nbytes)} {layout.dtype} array of shape "
        f"{shape_text(layout.shape)}, {layout.n_chunks} chunks of {shape_text(layout.chunks)} "
        f"({format_bytes(layout.chunk_nbytes)}); page cache warm, "
        f"best of {plural(args.repeat, 'read')}; "
        f"{threads} threads for zarr-device"
        + (" and zarr-python" if args.threads else "")
    )


def bench_records(results: Sequence[CodecResult], layout: SampleLayout) -> list[dict[str, Any]]:
    """What ``bench`` measured, as the records ``zarr_device.tools.bench_plots`` draws."""
    return [
        {"loader": t.reader, "codec": r.codec, "chunk_bytes": layout.chunk_nbytes, "gbps": t.gbps,
         "cache": "warm"}
        for r in results
        for t in r.timings
    ]


def plot_bench(path: str, results: Sequence[CodecResult], layout: SampleLayout) -> str | None:
    """Draws ``bench``'s readers side by side into ``path``; the path, or None with nothing to
    draw."""
    import datetime

    from zarr_device.tools.bench_plots import plot_loaders, title_of
    from zarr_device.tools.machine import machine_info

    what = (f"zarr-device bench: {format_bytes(layout.nbytes)} float32 in "
            f"{format_bytes(layout.chunk_nbytes)} chunks, page cache warm")
    today = datetime.date.today().isoformat()
    return plot_loaders(bench_records(results, layout), title_of(what, machine_info(), today), path)


def run_bench(args: argparse.Namespace, out: TextIO) -> int:
    """``zarr-device bench``."""
    if args.plot is not None:
        # Before the run: a missing matplotlib should not cost the minutes the run takes.
        from zarr_device.tools.bench_plots import require_matplotlib

        require_matplotlib()
    if args.size < args.chunk:
        raise UsageError(
            f"--size {format_bytes(args.size)} is smaller than one --chunk "
            f"({format_bytes(args.chunk)}): give a --size of at least one chunk, or a smaller --chunk")
    layout = sample_layout(args.size, args.chunk)
    if args.threads:
        zd.set_config(threads=args.threads)
    codecs = ["none", "zstd"] if args.codec == "both" else [args.codec]
    if args.dir is not None:
        os.makedirs(args.dir, exist_ok=True)
    root = tempfile.mkdtemp(prefix="zarr-device-bench-", dir=args.dir)
    try:
        out.write(_bench_header(layout, args) + "\n")
        out.flush()
        if not _have_zarr():
            out.write(
                "zarr-python is not installed: it is skipped "
                "(install it with: pip install 'zarr-device[bench]')\n"
            )
        results = [bench_codec(root, codec, layout, args) for codec in codecs]
        out.write("\n" + format_bench_table(results) + "\n")
        out.write(
            "\nGB/s: decoded bytes (10^9) per second of a whole-array read into a new NumPy "
            "array.\n"
        )
        if len(results[0].timings) > 1:
            out.write("zarr-device and zarr-python returned identical values.\n")
        if args.plot is not None and plot_bench(args.plot, results, layout) is not None:
            out.write(f"chart written to {args.plot}\n")
    finally:
        if args.keep:
            out.write(f"kept the sample arrays in {root}\n")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


_BENCH_EPILOG = """\
The sample is a smooth float32 field plus noise, rounded to 10 mantissa bits so that it
compresses about as well as measured data does (about 2.7x with zstd). It is written with
zarr-device, then read back whole with zarr-device and with zarr-python (default settings),
page cache warm: one untimed read, then the best of --repeat. Both readers' results are checked
to be identical.

examples:
  zarr-device bench
  zarr-device bench --size 256MiB --chunk 256KiB --repeat 5
  zarr-device bench --codec both --dir /mnt/nvme/tmp --keep
  zarr-device bench --codec both --plot bench.png   (needs matplotlib)"""


def add_command(commands: Any) -> None:
    bench = commands.add_parser(
        "bench",
        help="measure read speed against zarr-python",
        description="Write a sample array, then time reading it with zarr-device and zarr-python.",
        epilog=_BENCH_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument(
        "--size", type=parse_size, default=1 << 30, metavar="BYTES",
        help="size of the sample array (default: 1GiB)",
    )
    bench.add_argument(
        "--chunk", type=parse_size, default=1 << 20, metavar="BYTES",
        help="size of its chunks (default: 1MiB)",
    )
    bench.add_argument(
        "--codec", choices=("zstd", "none", "both"), default="zstd",
        help="compress with zstd (level 0), store uncompressed, or both (default: zstd)",
    )
    bench.add_argument(
        "--dir", default=None, metavar="DIR",
        help="where to write the sample (default: the system's temporary directory)",
    )
    bench.add_argument(
        "--repeat", type=int_at_least(1), default=3, metavar="N",
        help="timed reads per reader; the best counts (default: 3)",
    )
    bench.add_argument(
        "--threads", type=int_at_least(0), default=0, metavar="N",
        help="threads for zarr-device and zarr-python (default: 0, each reader's own default; "
        "zarr-device uses one per core)",
    )
    bench.add_argument(
        "--plot", default=None, metavar="FILE.png",
        help="also draw the readers' GB/s into this PNG file (needs matplotlib)",
    )
    bench.add_argument("--quiet", action="store_true", help="no progress bars")
    bench.add_argument("--keep", action="store_true", help="keep the sample arrays afterwards")
    bench.set_defaults(run=run_bench)
