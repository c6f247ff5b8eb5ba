"""The ``zarr-device`` command: look inside Zarr stores and measure how fast they read.

``zarr-device info PATH`` prints the tree of arrays and groups in a store; ``zarr-device bench``
writes a sample array and reads it back with zarr-device and with zarr-python; ``zarr-device
fsck PATH`` checks a store for leftovers of killed writes and for damage; ``zarr-device convert
SOURCE DEST`` rewrites an array or group with other codecs and chunks (crc32c for GPU decoding),
or converts PyTorch checkpoints from and to safetensors; ``zarr-device load PATH`` reads a
checkpoint or group onto a device and reports how fast.
"""

from __future__ import annotations

import argparse
import os
import sys

import zarr_device as zd
from zarr_device.tools.cli import bench, convert, fsck, info, load
from zarr_device.tools.cli.bench import (
    ReadMismatchError,
    SampleLayout,
    iter_sample_blocks,
    sample_block,
    sample_layout,
)
from zarr_device.tools.cli.common import PROG, parse_size
from zarr_device.tools.cli.info import codec_summary, describe_node
from zarr_device.errors import ZarrDeviceError
from zarr_device.basics.sizes import format_bytes

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

_DESCRIPTION = """\
zarr-device reads and writes Zarr arrays (v3; v2 for reading) with a parallel C++ engine.
This command looks inside Zarr stores, converts them to other codecs and chunk layouts, and
measures how fast they read on this machine."""

_EPILOG = """\
examples:
  zarr-device info data.zarr                  the tree of arrays and groups in data.zarr
  zarr-device info data.zarr --path temp      just the node 'temp' inside it
  zarr-device info data.zarr --json           the same, as JSON
  zarr-device bench                           1 GiB sample: zarr-device vs zarr-python
  zarr-device bench --size 4GiB --codec both  bigger, compressed and uncompressed
  zarr-device convert in.zarr out.zarr --chunks 2MiB --shards 64MiB
                                              rewritten as zstd + crc32c (GPU decoding)
  zarr-device convert model.safetensors model.zarr
                                              a safetensors file (or model folder) as a checkpoint
  zarr-device load model.zarr --device cuda   read it onto the GPU and report GB/s

run 'zarr-device COMMAND --help' for a command's options."""


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
    info.add_command(commands)
    bench.add_command(commands)
    fsck.add_command(commands)
    convert.add_command(commands)
    load.add_command(commands)
    return parser


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
