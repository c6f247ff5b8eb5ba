"""The ``zarr-device`` command: look inside Zarr stores and measure how fast they read.

``zarr-device info PATH`` prints the tree of arrays and groups in a store; ``zarr-device bench``
writes a sample array and reads it back with zarr-device and with zarr-python; ``zarr-device
fsck PATH`` checks a store for leftovers of killed writes and for damage.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt

import zarr_device as zd
from zarr_device import sizes
from zarr_device.errors import UsageError, ZarrDeviceError
from zarr_device.sizes import format_bytes

__all__ = [
    "main",
    "build_parser",
    "parse_size",
    "format_bytes",
    "codec_summary",
    "describe_node",
    "SampleLayout",
    "sample_layout",
    "sample_block",
    "iter_sample_blocks",
]

PROG = "zarr-device"

# Files that hold metadata rather than chunks.
_METADATA_FILES = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})
_NODE_MARKERS = ("zarr.json", ".zarray", ".zgroup")

# ------------------------------------------------------------------------------------------------
# Sizes
# ------------------------------------------------------------------------------------------------

def parse_size(text: str) -> int:
    """An argparse type: a byte count such as ``1GiB``, ``256KiB``, ``1.5GB`` or ``1048576``
    (the package's one size parser, :func:`zarr_device.sizes.parse_size`)."""
    try:
        return sizes.parse_size(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _ratio(raw: int, stored: int) -> float | None:
    return raw / stored if stored > 0 else None


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer no smaller than ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r}: must be at least {minimum}")
        return value

    return parse


# ------------------------------------------------------------------------------------------------
# info: describing arrays and groups
# ------------------------------------------------------------------------------------------------


def _join(a: str, b: str) -> str:
    return "/".join(p for p in (a.strip("/"), b.strip("/")) if p)


def _codec_name_and_config(codec: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """Splits a v3 codec (``name``/``configuration``) or a v2 numcodecs entry (``id``, keys)."""
    if "name" in codec:
        return str(codec["name"]), dict(codec.get("configuration") or {})
    return str(codec.get("id", "?")), {k: v for k, v in codec.items() if k != "id"}


def _format_value(value: Any) -> str:
    if isinstance(value, list):
        return "(" + ", ".join(_format_value(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _codec_text(codec: Mapping[str, Any]) -> str:
    """One codec, compactly: ``zstd(level=0)``, ``bytes(little)``, ``crc32c``."""
    name, config = _codec_name_and_config(codec)
    if name == "sharding_indexed":
        inner = codec_summary(config.get("codecs", []))
        index = codec_summary(config.get("index_codecs", []))
        shape = _format_value(list(config.get("chunk_shape", [])))
        where = config.get("index_location", "end")
        return f"sharding(inner chunks {shape}: {inner}; index at {where}: {index})"
    if name == "bytes":
        endian = config.get("endian")
        return f"bytes({endian})" if endian else "bytes"
    if name in ("zstd", "gzip", "zlib") and "checksum" in config and not config["checksum"]:
        config.pop("checksum")
    if name == "blosc":
        config.pop("typesize", None)
        if config.get("blocksize") == 0:
            config.pop("blocksize")
    if not config:
        return name
    return f"{name}(" + ", ".join(f"{k}={_format_value(v)}" for k, v in config.items()) + ")"


def codec_summary(codecs: Sequence[Mapping[str, Any]]) -> str:
    """A codec chain on one line: ``bytes(little) -> zstd(level=0)``."""
    return " -> ".join(_codec_text(c) for c in codecs) if codecs else "(none)"


def _is_local(store: Any) -> bool:
    return isinstance(store, zd.LocalStore)


def _list_names(store: Any, prefix: str) -> list[str]:
    """The names directly below ``prefix`` in a store (files and folders alike)."""
    if _is_local(store):
        folder = os.path.join(store.root, prefix) if prefix else str(store.root)
        try:
            return sorted(os.listdir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return []
    return list(store.handle.list_dir(prefix))


def _key_size(store: Any, key: str) -> int | None:
    """The size of the value at ``key``, or None where there is none (a folder)."""
    if _is_local(store):
        full = os.path.join(store.root, key)
        return os.path.getsize(full) if os.path.isfile(full) else None
    value = store.handle.get(key)
    return None if value is None else len(value)


def _has_key(store: Any, key: str) -> bool:
    if _is_local(store):
        return os.path.isfile(os.path.join(store.root, key))
    return store.handle.get(key) is not None


def stored_bytes(store: Any, path: str) -> int:
    """The sum of the sizes of an array's chunk (or shard) files, metadata left out."""
    if _is_local(store):
        total = 0
        for folder, _dirs, files in os.walk(os.path.join(store.root, path)):
            top = os.path.samefile(folder, os.path.join(store.root, path))
            for name in files:
                if top and name in _METADATA_FILES:
                    continue
                if name.startswith(".") and ".tmp" in name:
                    continue  # a write in progress
                total += os.path.getsize(os.path.join(folder, name))
        return total
    return _walk_sizes(store, path, top=True)


def _walk_sizes(store: Any, prefix: str, *, top: bool) -> int:
    total = 0
    for name in _list_names(store, prefix):
        if top and name in _METADATA_FILES:
            continue
        key = _join(prefix, name)
        size = _key_size(store, key)
        total += _walk_sizes(store, key, top=False) if size is None else size
    return total


def _child_names(store: Any, path: str) -> list[str]:
    """The names of the arrays and groups directly inside the group at ``path``."""
    return [
        name
        for name in _list_names(store, path)
        if name not in _METADATA_FILES
        and any(_has_key(store, _join(_join(path, name), m)) for m in _NODE_MARKERS)
    ]


def describe_array(array: zd.Array) -> dict[str, Any]:
    """What ``info`` reports about an array, as plain JSON-ready values."""
    raw = array.nbytes
    stored = stored_bytes(array.store, array.path)
    ratio = _ratio(raw, stored)
    return {
        "node_type": "array",
        "path": "/" + array.path,
        "zarr_format": array.zarr_format,
        "shape": list(array.shape),
        "dtype": str(array.dtype),
        "chunks": list(array.chunks),
        "shards": list(array.shards) if array.shards is not None else None,
        "codecs": codec_summary(array.codecs),
        "codec_chain": array.codecs,
        "fill_value": array.fill_value,
        "attributes": len(array.attrs),
        "stored_bytes": stored,
        "nbytes": raw,
        "ratio": None if ratio is None else round(ratio, 3),
    }


def describe_group(group: zd.Group) -> dict[str, Any]:
    """What ``info`` reports about a group and, recursively, everything inside it."""
    members = [
        describe_node(zd.open(group.store, path=_join(group.path, name)))
        for name in _child_names(group.store, group.path)
    ]
    stored = sum(int(m["stored_bytes"]) for m in members)
    raw = sum(int(m["nbytes"]) for m in members)
    ratio = _ratio(raw, stored)
    return {
        "node_type": "group",
        "path": "/" + group.path,
        "zarr_format": group.zarr_format,
        "attributes": len(group.attrs),
        "stored_bytes": stored,
        "nbytes": raw,
        "ratio": None if ratio is None else round(ratio, 3),
        "members": members,
    }


def describe_node(node: zd.Array | zd.Group) -> dict[str, Any]:
    """Describes an array or a group (see :func:`describe_array`, :func:`describe_group`)."""
    return describe_array(node) if isinstance(node, zd.Array) else describe_group(node)


def _shape_text(shape: Sequence[int]) -> str:
    return _format_value(list(shape))


def _ratio_text(ratio: Any) -> str:
    return "n/a" if ratio is None else f"{ratio:.2f}x"


def _array_lines(info: Mapping[str, Any]) -> list[str]:
    shards = f"  shards {_shape_text(info['shards'])}" if info["shards"] else ""
    return [
        f"array (zarr v{info['zarr_format']})  shape {_shape_text(info['shape'])}  "
        f"{info['dtype']}  chunks {_shape_text(info['chunks'])}{shards}",
        f"codecs: {info['codecs']}",
        f"stored {format_bytes(info['stored_bytes'])}, raw {format_bytes(info['nbytes'])}, "
        f"ratio {_ratio_text(info['ratio'])}",
    ]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _group_line(info: Mapping[str, Any]) -> str:
    text = (
        f"group (zarr v{info['zarr_format']})  {_plural(len(info['members']), 'member')}, "
        f"{_plural(info['attributes'], 'attribute')}"
    )
    if info["nbytes"]:
        text += (
            f"; arrays stored {format_bytes(info['stored_bytes'])}, raw "
            f"{format_bytes(info['nbytes'])}, ratio {_ratio_text(info['ratio'])}"
        )
    return text


def _tree_lines(info: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """The lines under a node, drawn with box characters."""
    members = info.get("members", [])
    for i, member in enumerate(members):
        last = i == len(members) - 1
        branch, cont = ("└── ", "    ") if last else ("├── ", "│   ")
        name = member["path"].rsplit("/", 1)[-1]
        if member["node_type"] == "group":
            yield f"{prefix}{branch}{name}/  {_group_line(member)}"
            yield from _tree_lines(member, prefix + cont)
        else:
            first, *rest = _array_lines(member)
            yield f"{prefix}{branch}{name}  {first}"
            for line in rest:
                yield f"{prefix}{cont}    {line}"


def format_tree(info: Mapping[str, Any], root_label: str) -> str:
    """The text ``info`` prints: the node at the top, then its members as a tree."""
    if info["node_type"] == "array":
        first, *rest = _array_lines(info)
        return "\n".join([f"{root_label}  {first}", *("    " + line for line in rest)])
    return "\n".join([f"{root_label}  {_group_line(info)}", *_tree_lines(info)])


def run_info(args: argparse.Namespace, out: TextIO) -> int:
    """``zarr-device info``."""
    node = zd.open(args.store, path=args.path)
    info = describe_node(node)
    if args.json:
        json.dump(info, out, indent=2)
        out.write("\n")
    else:
        label = args.store + (f" :: /{args.path.strip('/')}" if args.path.strip("/") else "")
        out.write(format_tree(info, label) + "\n")
    return 0


# ------------------------------------------------------------------------------------------------
# bench: sample data
# ------------------------------------------------------------------------------------------------


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


# ------------------------------------------------------------------------------------------------
# bench: measuring
# ------------------------------------------------------------------------------------------------


def _progress(total: int, desc: str, *, quiet: bool, unit: str = "B") -> Any:
    """A tqdm bar on stderr (hidden with --quiet, and when stderr is not a terminal)."""
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=unit == "B",
        unit_divisor=1024,
        disable=True if quiet else None,
        leave=False,
        file=sys.stderr,
        dynamic_ncols=True,
    )


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
    with _progress(layout.nbytes, label, quiet=quiet) as bar:
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
    with _progress(repeat + 1, f"reading with {reader}", quiet=quiet, unit="read") as bar:
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
            ratio = _ratio(result.raw, result.stored)
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
        f"{_shape_text(layout.shape)}, {layout.n_chunks} chunks of {_shape_text(layout.chunks)} "
        f"({format_bytes(layout.chunk_nbytes)}); page cache warm, "
        f"best of {_plural(args.repeat, 'read')}; "
        f"{threads} threads for zarr-device"
        + (" and zarr-python" if args.threads else "")
    )


def run_bench(args: argparse.Namespace, out: TextIO) -> int:
    """``zarr-device bench``."""
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
    finally:
        if args.keep:
            out.write(f"kept the sample arrays in {root}\n")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


# ------------------------------------------------------------------------------------------------
# the command line
# ------------------------------------------------------------------------------------------------

_DESCRIPTION = """\
zarr-device reads and writes Zarr arrays (v3; v2 for reading) with a parallel C++ engine.
This command looks inside Zarr stores and measures how fast they read on this machine."""

_EPILOG = """\
examples:
  zarr-device info data.zarr                  the tree of arrays and groups in data.zarr
  zarr-device info data.zarr --path temp      just the node 'temp' inside it
  zarr-device info data.zarr --json           the same, as JSON
  zarr-device bench                           1 GiB sample: zarr-device vs zarr-python
  zarr-device bench --size 4GiB --codec both  bigger, compressed and uncompressed

run 'zarr-device COMMAND --help' for a command's options."""

_INFO_EPILOG = """\
For every array: shape, dtype, chunks, shards, the codec chain, the bytes its chunk files take
(stored), its decoded size (raw) and their ratio. For every group: its attributes and members.

examples:
  zarr-device info data.zarr
  zarr-device info data.zarr --path measurements/temperature
  zarr-device info data.zarr --json | python -m json.tool"""

_BENCH_EPILOG = """\
The sample is a smooth float32 field plus noise, rounded to 10 mantissa bits so that it
compresses about as well as measured data does (about 2.7x with zstd). It is written with
zarr-device, then read back whole with zarr-device and with zarr-python (default settings),
page cache warm: one untimed read, then the best of --repeat. Both readers' results are checked
to be identical.

examples:
  zarr-device bench
  zarr-device bench --size 256MiB --chunk 256KiB --repeat 5
  zarr-device bench --codec both --dir /mnt/nvme/tmp --keep"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for ``zarr-device``."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {zd.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_info(commands)
    _add_bench(commands)
    _add_fsck(commands)
    return parser


def _add_info(commands: Any) -> None:
    info = commands.add_parser(
        "info",
        help="print the arrays and groups in a store",
        description="Print the tree of the array or group at PATH.",
        epilog=_INFO_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    info.add_argument("store", metavar="PATH", help="a local directory holding a Zarr store")
    info.add_argument(
        "--path", default="", metavar="INNER", help="the node inside PATH to describe (default: the root)"
    )
    info.add_argument("--json", action="store_true", help="print JSON instead of a tree")
    info.set_defaults(run=run_info)


def _add_bench(commands: Any) -> None:
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
        "--repeat", type=_int_at_least(1), default=3, metavar="N",
        help="timed reads per reader; the best counts (default: 3)",
    )
    bench.add_argument(
        "--threads", type=_int_at_least(0), default=0, metavar="N",
        help="threads for zarr-device and zarr-python (default: 0, each reader's own default; "
        "zarr-device uses one per core)",
    )
    bench.add_argument("--quiet", action="store_true", help="no progress bars")
    bench.add_argument("--keep", action="store_true", help="keep the sample arrays afterwards")
    bench.set_defaults(run=run_bench)


def run_fsck(args: argparse.Namespace, out: TextIO) -> int:
    """``zarr-device fsck``: prints what is wrong with a store; 1 when something is left to fix."""
    from zarr_device.fsck import check_store

    with _progress(0, "chunks", quiet=args.quiet or not args.data, unit="chunk") as bar:
        report = check_store(args.store, fix=args.fix, data=args.data, progress=bar.update)
    for problem in report.problems:
        print(problem, file=out)
    left = sum(not p.fixed for p in report.problems)
    fixed = len(report.problems) - left
    checked = f", {report.chunks_checked} chunks read" if args.data else ""
    print(
        f"{report.root}: {report.nodes} nodes{checked}; "
        + (f"{left} problems" if left else "no problems") + (f", {fixed} fixed" if fixed else ""),
        file=out,
    )
    return 0 if report.clean else 1


def _add_fsck(commands: Any) -> None:
    fsck = commands.add_parser(
        "fsck",
        help="check a local store for leftovers and damage",
        description="Check the local store at PATH: temporary files left by writes that did not "
        "finish, links out of the store, files that cannot be values, metadata that does not "
        "parse and, with --data, chunks that do not decode. Exit status 1 when a problem is left.",
    )
    fsck.add_argument("store", metavar="PATH", help="a local directory holding a Zarr store")
    fsck.add_argument(
        "--fix", action="store_true",
        help="remove temporary files whose writers are gone (nothing else is changed)",
    )
    fsck.add_argument("--data", action="store_true", help="also read every chunk of every array")
    fsck.add_argument("--quiet", action="store_true", help="no progress bar")
    fsck.set_defaults(run=run_fsck)


def main(argv: list[str] | None = None) -> int:
    """Runs ``zarr-device`` with ``argv`` (default: the process's arguments); returns the exit
    status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        status: int = args.run(args, sys.stdout)
        return status
    except (ZarrDeviceError, ReadMismatchError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (``zarr-device info ... | head``)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
