"""``zarr-device convert``: a Zarr array or group rewritten as a new Zarr v3 store with another
codec chain and chunk layout, or a PyTorch checkpoint converted from or to safetensors
(:func:`zarr_device.convert.zarr_to_zarr.convert`)."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from zarr_device.tools.cli.common import parse_size
from zarr_device.tools.cli.info import plural
from zarr_device.convert.zarr_to_zarr import COMPRESSORS, convert
from zarr_device.basics.sizes import format_bytes


def parse_layout(text: str) -> int | tuple[int, ...]:
    """An argparse type for --chunks and --shards: a shape when there is a comma (``1024,4096``;
    ``4096,`` for one dimension; -1 for a whole dimension), else a byte size (``2MiB``)."""
    if "," not in text:
        return parse_size(text)
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a shape (integers joined by commas, such as 1024,4096)"
        ) from None


def run_convert(args: argparse.Namespace, out: TextIO) -> int:
    """``zarr-device convert``."""
    summary = convert(
        args.source,
        args.destination,
        path=args.path,
        compressors=args.compressor,
        level=args.level,
        checksum=args.checksum,
        chunks=args.chunks,
        shards=args.shards,
        max_bytes=args.max_bytes,
        overwrite=args.overwrite,
        progress=not args.quiet,
    )
    if args.json:
        json.dump(summary.to_json(), out, indent=2)
        out.write("\n")
        return 0
    ratio = f" ({summary.bytes_read / summary.bytes_written:.2f}x)" if summary.bytes_written and summary.bytes_read else ""
    out.write(
        f"{summary.destination}: {plural(summary.arrays, 'array')}, {plural(summary.groups, 'group')}; "
        f"read {format_bytes(summary.bytes_read)}, wrote {format_bytes(summary.bytes_written)}{ratio} "
        f"in {summary.seconds:.2f} s\n"
    )
    return 0


_CONVERT_EPILOG = """\
Every array below the node converted keeps its data, data type, fill value, dimension names and
attributes, every group its attributes; the node becomes the root of DEST. Arrays are copied
region by region (whole shards or chunks, about --max-bytes at a time), so memory does not grow
with the data. DEST is written as DEST.partial-<random> beside it and renamed into place when
complete: it never holds part of a store.

Reads to a GPU decode a chunk there only when a crc32c checksum vouches for it: data written by
zarr-python or tensorstore (zstd, no checksum) decodes on the GPU once converted (the default
codecs are zstd level 1 and crc32c).

PyTorch checkpoints (docs/checkpoint-format.md): SOURCE may be a safetensors file, a Hugging
Face model folder (model.safetensors, or shards and model.safetensors.index.json; its other
files, config.json and tokenizer files, are copied into the checkpoint's files/ folder, and its
subfolders, such as a sentence-transformers model's 1_Pooling/, into files/ as they were, less
other formats' copies of the model: .onnx, .gguf, .h5, .msgpack, OpenVINO) or a
torch.save state dict (.pt, .pth, .bin, .ckpt; loaded with weights_only=True); DEST is then a
checkpoint. A DEST ending in .safetensors makes a checkpoint SOURCE one safetensors file. Values
are copied bit for bit, one tensor at a time; only --compressor (zstd, auto or none), --checksum,
--overwrite, --quiet and --json apply. A compressed checkpoint's chunks always end with a crc32c;
an uncompressed one's only with --checksum (checked on every read, as zstd's; without it, reads
check sizes only, as safetensors does).

--chunks and --shards take a shape (1024,4096; 4096, for one dimension; -1 for a whole
dimension) or a byte size (2MiB: about that many bytes, split along the leading dimensions).

examples:
  zarr-device convert in.zarr out.zarr
  zarr-device convert in.zarr out.zarr --chunks 2MiB --shards 64MiB
  zarr-device convert in.zarr out.zarr --path model/layers --compressor gzip --level 6
  zarr-device convert in.zarr out.zarr --compressor none --no-checksum --overwrite --json
  zarr-device convert model.safetensors model.zarr --compressor none
  zarr-device convert model.safetensors model.zarr --compressor none --checksum
  zarr-device convert ./Llama-3.2-1B model.zarr         (a Hugging Face model folder)
  zarr-device convert ./Llama-3.2-1B model.zarr --compressor auto   (floats shuffled before zstd)
  zarr-device convert model.zarr model.safetensors"""


def add_command(commands: Any) -> None:
    command = commands.add_parser(
        "convert",
        help="rewrite an array or group with other codecs and chunks; checkpoints from/to safetensors",
        description="Rewrite the Zarr array or group at SOURCE (v3 or v2) as a new Zarr v3 store "
        "at DEST, with the codecs and chunk layout chosen; or convert a PyTorch checkpoint from or "
        "to safetensors.",
        epilog=_CONVERT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.add_argument("source", metavar="SOURCE", help="a Zarr store, a safetensors file, a model folder or a torch.save file")
    command.add_argument("destination", metavar="DEST", help="the directory to write the new store to, or a .safetensors file")
    command.add_argument(
        "--path", default="", metavar="INNER", help="the node inside SOURCE to convert (default: the root)"
    )
    command.add_argument(
        "--compressor", choices=COMPRESSORS, default="zstd",
        help="the chunks' compressor (default: zstd); auto: zstd after a byte shuffle for floating "
        "point types of two bytes or more (smaller weights), zstd for the others"
    )
    command.add_argument(
        "--level", type=int, default=None, metavar="N",
        help="the compressor's level (default: 1 for zstd, 5 for gzip and blosc)",
    )
    command.add_argument(
        "--checksum", action=argparse.BooleanOptionalAction, default=None,
        help="end each chunk with a crc32c checksum, which GPU decoding needs (default: on; for "
        "checkpoints, on with zstd and off without)",
    )
    command.add_argument(
        "--chunks", type=parse_layout, default=None, metavar="SHAPE|BYTES",
        help="the chunk shape, or a size per chunk (default: each array's own chunks)",
    )
    command.add_argument(
        "--shards", type=parse_layout, default=None, metavar="SHAPE|BYTES",
        help="the shard shape, a multiple of the chunks, or a size per shard (default: none)",
    )
    command.add_argument(
        "--max-bytes", type=parse_size, default=256 << 20, metavar="BYTES",
        help="the most one copied region holds, unless a shard is larger (default: 256MiB)",
    )
    command.add_argument(
        "--overwrite", action="store_true", help="replace DEST, if it is a Zarr store, once done"
    )
    command.add_argument("--quiet", action="store_true", help="no progress bar")
    command.add_argument("--json", action="store_true", help="print the summary as JSON")
    command.set_defaults(run=run_convert)
