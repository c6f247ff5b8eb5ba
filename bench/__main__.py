"""``python -m bench list | run SUITE... --out DIR [--quick] | plot DIR --out PNGDIR |
report [--check]`` (see ``bench/__init__.py``)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import textwrap
from collections.abc import Sequence


def _list() -> int:
    from bench.suites import SUITES

    for suite in SUITES.values():
        scripts = ", ".join(dict.fromkeys(p.script for p in suite.parts))
        print(f"{suite.name}\n" + textwrap.fill(suite.measures, 96, initial_indent="    ", subsequent_indent="    ")
              + f"\n    ({scripts})")
    return 0


def _run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from bench.suites import SUITES, run_suite

    unknown = [s for s in args.suites if s not in SUITES]
    if unknown:
        print(f"unknown suite {', '.join(unknown)}: one of {', '.join(SUITES)} (python -m bench list)",
              file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    command = shlex.join(["python", "-m", "bench", *argv])
    failed = []
    for name in dict.fromkeys(args.suites):
        outcome = run_suite(SUITES[name], args.out, quick=args.quick, command=command, only=args.only or (),
                            timeout=args.timeout, log=lambda line: print(line, flush=True))
        document = outcome.document
        if outcome.failed:
            failed.append(name)
        elif document.get("skipped"):
            print(f"{name}: skipped ({document['skipped']})")
        print(f"{name}: {len(document['results'])} results in {os.path.join(args.out, name + '.json')}", flush=True)
    if failed:
        logs = ", ".join(os.path.join(args.out, f"{name}.log") for name in failed)
        print(f"failed: {', '.join(failed)} (logs: {logs})", file=sys.stderr)
    return 1 if failed else 0


def _plot(args: argparse.Namespace) -> int:
    from zarr_device.errors import UsageError

    from bench.plot import plot_dir

    try:
        plot_dir(args.dir, args.out)
    except UsageError as e:
        print(f"python -m bench plot: {e}", file=sys.stderr)
        return 2
    return 0


def _report(args: argparse.Namespace) -> int:
    from zarr_device.errors import UsageError

    from bench.report import report

    try:
        return report(check=args.check)
    except UsageError as e:
        print(f"python -m bench report: {e}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m bench", description="zarr-device's benchmark suites")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the suites and what each measures")
    run = commands.add_parser("run", help="run suites; each writes OUT/SUITE.json")
    run.add_argument("suites", nargs="+", metavar="SUITE")
    run.add_argument("--out", required=True, help="folder for SUITE.json and SUITE.log")
    run.add_argument("--quick", action="store_true", help="small sizes: about a minute a suite on a laptop")
    run.add_argument("--only", action="append", metavar="SCRIPT",
                     help="run only this script of the suites (bench_read.py, or bench_read; repeatable)")
    run.add_argument("--timeout", type=float, default=None, help="seconds each script may run")
    plot = commands.add_parser("plot", help="PNG charts of the SUITE.json files in DIR")
    plot.add_argument("dir")
    plot.add_argument("--out", required=True, help="folder for the charts")
    report = commands.add_parser(
        "report", help="rewrite BENCHMARKS.md's results blocks and charts from bench/results/")
    report.add_argument("--check", action="store_true",
                        help="only say whether BENCHMARKS.md is what bench/results/ make (exit 1 if not)")
    args = parser.parse_args(argv)
    if args.command == "list":
        return _list()
    if args.command == "run":
        return _run(args, argv)
    if args.command == "report":
        return _report(args)
    return _plot(args)


if __name__ == "__main__":
    sys.exit(main())
