"""``zarr-device fsck``: leftovers of killed writes and damage in a local store."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from zarr_device.tools.cli.common import progress


def run_fsck(args: argparse.Namespace, out: TextIO) -> int:
    """``zarr-device fsck``: prints what is wrong with a store; 1 when something is left to fix."""
    from zarr_device.tools.store_check import check_store

    with progress(0, "chunks", quiet=args.quiet or not args.data, unit="chunk") as bar:

        def set_total(total: int) -> None:
            bar.total = total
            bar.refresh()

        report = check_store(args.store, fix=args.fix, data=args.data, progress=bar.update, total=set_total)
    for problem in report.problems:
        print(problem, file=out)
    left = sum(not p.fixed for p in report.problems)
    fixed = len(report.problems) - left
    checked = f", {report.chunks_checked} chunks read" if args.data else ""
    print(
        f"{report.root}: {report.nodes} node{'' if report.nodes == 1 else 's'}{checked}; "
        + (f"{left} problem{'' if left == 1 else 's'}" if left else "no problems")
        + (f", {fixed} fixed" if fixed else ""),
        file=out,
    )
    return 0 if report.clean else 1


def add_command(commands: Any) -> None:
    fsck = commands.add_parser(
        "fsck",
        help="check a local store for leftovers and damage",
        description="Check the local store at PATH: temporary files left by writes that did not "
        "finish (inside it, and the partial trees of killed saves, converts and copies beside "
        "it), links out of the store, files that cannot be values, metadata that does not "
        "parse and, with --data, stored chunks that do not decode. Exit status 1 when a "
        "problem is left (a PATH with no Zarr node in it is one).",
    )
    fsck.add_argument("store", metavar="PATH", help="a local directory holding a Zarr store")
    fsck.add_argument(
        "--fix", action="store_true",
        help="remove what is provably zarr-device's and no longer written: temporary files the "
        "engine names exactly so, in a Zarr node, for a file it writes there, whose writer is "
        "gone; and partial trees beside the store older than an hour whose record names the "
        "store (look-alike names are reported, never removed; nothing else is changed)",
    )
    fsck.add_argument("--data", action="store_true", help="also read every stored chunk of every array")
    fsck.add_argument("--quiet", action="store_true", help="no progress bar")
    fsck.set_defaults(run=run_fsck)
