#!/usr/bin/env python3
"""Mutation fuzzing of stored Zarr data read by zarr_device (engine: python/tests/mutation_fuzz/).

Writes a corpus of arrays with zarr-python, then repeatedly mutates a copy of one array's files
(chunks, shards, shard indexes, metadata) and reads it with zarr_device in a worker process; prints
the outcomes per mutation kind and every violation of the rule (crash, hang, exception outside
zarr_device.ZarrDeviceError, different data under a failing crc32c), grouped by cause, each with a
reproducer script. Exits 1 when there are violations.

Usage:
    python scripts/mutation_fuzz.py --seconds 600 --seed 1
    python scripts/mutation_fuzz.py --iterations 5000 --kinds meta_value,meta_flip
    python scripts/mutation_fuzz.py --seed 1 --first 1234 --iterations 1 -v    # replay one case
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent.parent / "python" / "tests"
sys.path.insert(0, str(TESTS_DIR))  # before this script's own directory: this file has the same name

from mutation_fuzz import (  # noqa: E402
    Case,
    FuzzConfig,
    FuzzReport,
    Mutator,
    Outcome,
    Selection,
    format_selection,
    run_fuzz,
    run_reproducer,
)


def _progress(report: FuzzReport) -> None:
    print(f"  ... {report.summary()}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--iterations", type=int, default=None, help="cases to run (default: until --seconds)")
    parser.add_argument("--seconds", type=float, default=None, help="stop after this long (default 60 without --iterations)")
    parser.add_argument("--first", type=int, default=0, help="first iteration (replays start there)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds a read may take before it counts as a hang")
    parser.add_argument("--kinds", default=None, help="comma-separated mutation kinds (default: all)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the corpus and worker logs here")
    parser.add_argument("--no-reproducers", action="store_true", help="leave the reproducer scripts out")
    parser.add_argument("--check-reproducers", action="store_true",
                        help="run each group's reproducer in a fresh interpreter and print what it does")
    parser.add_argument("--json", type=Path, default=None, help="also write the counts and groups as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each case's mutation and reads")
    args = parser.parse_args(argv)

    kinds = args.kinds.split(",") if args.kinds else None
    known = set(Mutator([]).kinds)
    if kinds is not None and not set(kinds) <= known:
        parser.error(f"unknown kinds {sorted(set(kinds) - known)}; known: {', '.join(sorted(known))}")
    seconds = args.seconds if args.seconds is not None or args.iterations is not None else 60.0
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    config = FuzzConfig(seed=args.seed, iterations=args.iterations, first_iteration=args.first,
                        max_seconds=seconds, timeout=args.timeout, workdir=args.workdir, kinds=kinds,
                        progress=_progress)
    if args.verbose:
        config.on_read = print_read
    report = run_fuzz(config)

    print(report.summary())
    print()
    print(report.table())
    print()
    print(report.details())
    if report.violations:
        print()
        print("VIOLATIONS, grouped by cause:")
        print(report.format_violations(reproducers=not args.no_reproducers))
    if args.check_reproducers:
        print()
        print("reproducers, run in a fresh interpreter:")
        for n, group in enumerate(sorted(report.groups.values(), key=lambda g: -g.count)):
            print(f"[{n + 1}] {run_reproducer(group.reproducer)}")
    if args.json is not None:
        args.json.write_text(json.dumps({
            "summary": report.summary(),
            "counts": {k: dict(v) for k, v in report.counts.items()},
            "typed": {k: dict(v) for k, v in report.typed.items()},
            "generic": dict(report.generic),
            "unverified_checksums": dict(report.unverified),
            "baseline_failures": report.baseline_failures,
            "groups": [{"signature": g.signature, "count": g.count, "kinds": dict(g.kinds),
                        "arrays": dict(g.arrays), "example": g.mutation, "array": g.array,
                        "selection": g.selection, "case": list(g.case), "detail": g.detail,
                        "reproducer": g.reproducer} for g in report.groups.values()],
        }, indent=2))
    return 1 if report.violations else 0


_last_case: list[int] = [-1]


def print_read(case: Case, selection: Selection, outcome: Outcome) -> None:
    """Prints one read of a case (--verbose), after the case's mutation."""
    if _last_case[0] != case.iteration:
        _last_case[0] = case.iteration
        print(f"case {case.iteration}: {case.array.spec.name} ({case.array.spec.describe()}): "
              f"{case.mutation.kind}: {case.mutation.detail}")
    detail = outcome.detail.splitlines()[0][:200] if outcome.detail else ""
    flag = f"  VIOLATION: {outcome.violation}" if outcome.violation else ""
    print(f"    [{format_selection(selection)}] -> {outcome.outcome} {detail}{flag}")


if __name__ == "__main__":
    sys.exit(main())
