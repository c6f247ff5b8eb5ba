"""``zarr-device load``: reads a checkpoint (or every array of any Zarr group) onto a device and
reports how fast it came, the read a training or serving process does at start-up."""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any, TextIO

from zarr_device.core.array import Array
from zarr_device.core.group import Group
from zarr_device.core.group import open as open_node
from zarr_device.tools.cli.info import plural
from zarr_device.errors import UsageError
from zarr_device.core.many import read_many
from zarr_device.basics.sizes import format_bytes


def _nbytes(value: Any) -> int:
    if hasattr(value, "element_size"):  # a torch tensor
        return int(value.numel() * value.element_size())
    return int(getattr(value, "nbytes", 0))


def _is_checkpoint(node: Array | Group) -> bool:
    return isinstance(node, Group) and "zarr_device_checkpoint" in node.attrs


def _synchronize(device: str) -> None:
    # CUDA reads may return before the copies land; the time should count them.
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def _read(node: Array | Group, path: str, device: str, keys: list[str] | None) -> tuple[dict[str, Any], str]:
    """The tensors (or arrays) read, and what was read: "checkpoint" or "zarr"."""
    if _is_checkpoint(node):
        import zarr_device.torch as zt

        return zt.load(path, device=device, keys=keys), "checkpoint"
    arrays = node.all_arrays() if isinstance(node, Group) else {node.path or "/": node}
    if keys is not None:
        unknown = sorted(set(keys) - set(arrays))
        if unknown:
            raise UsageError(f"--keys names arrays {path} does not hold: {', '.join(map(repr, unknown))}")
        arrays = {k: v for k, v in arrays.items() if k in set(keys)}
    if device == "cpu":
        return read_many(arrays), "zarr"
    return read_many(arrays, device=device, like="torch"), "zarr"


def run_load(args: argparse.Namespace, out: TextIO) -> int:
    """``zarr-device load``."""
    node = open_node(args.path, mode="r")
    if _is_checkpoint(node) or args.device != "cpu":
        import zarr_device.torch  # noqa: F401 - imported before the clock starts, not timed
    started = time.perf_counter()
    results, kind = _read(node, args.path, args.device, args.keys)
    _synchronize(args.device)
    seconds = time.perf_counter() - started
    # Tied names are one tensor: its bytes were read once.
    total = sum(_nbytes(v) for v in {id(v): v for v in results.values()}.values())
    rate = total / seconds / 1e9 if seconds > 0 else math.inf
    summary = {"path": args.path, "kind": kind, "device": args.device, "tensors": len(results),
               "bytes": total, "seconds": seconds, "gb_per_s": rate}
    if args.json:
        json.dump(summary, out, indent=2)
        out.write("\n")
        return 0
    out.write(f"{args.path}: {plural(len(results), 'tensor')}, {format_bytes(total)} onto {args.device} "
              f"in {seconds:.3f} s ({rate:.2f} GB/s)\n")
    return 0


_LOAD_EPILOG = """\
A checkpoint (zarr_device.torch.save, or zarr-device convert from safetensors) loads as
zarr_device.torch.load does: every tensor in one pipeline, tied names once. Any other Zarr group
loads every array below it (zarr_device.read_many); an array loads whole. The time counts the
read only, from the opened metadata to the last byte on the device; GB/s is 10^9 bytes per
second.

examples:
  zarr-device load model.zarr
  zarr-device load model.zarr --device cuda:0 --json
  zarr-device load model.zarr --keys embed.weight lm_head.weight"""


def add_command(commands: Any) -> None:
    command = commands.add_parser(
        "load",
        help="read a checkpoint or group onto a device and report GB/s",
        description="Read the checkpoint (or every array of the Zarr group) at PATH onto a device, "
        "and report the tensors, bytes, seconds and GB/s.",
        epilog=_LOAD_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.add_argument("path", metavar="PATH", help="a checkpoint, or any Zarr group or array")
    command.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    command.add_argument("--keys", nargs="+", default=None, metavar="NAME",
                         help="load only these tensors (array paths, for a plain group)")
    command.add_argument("--json", action="store_true", help="print the summary as JSON")
    command.set_defaults(run=run_load)
