#!/usr/bin/env python
"""Compares two runs of zarr-python's suite from their JUnit XML files (pytest --junitxml): the
tests that fail (or error) in one run and pass in the other, grouped by the first words of their
message. Used for the suite on a GPU, where zarr-python's own GPU mode (the baseline,
ZARR_DEVICE_SUITE_BASELINE=zarr-gpu) fails many tests written for host buffers: what counts is
what the plug-in changes.

    python scripts/zarr_python_suite/compare_runs.py baseline.xml plugin.xml
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence

BAD = ("failure", "error")


def outcomes(path: str) -> dict[str, tuple[str, str]]:
    """Test id -> (outcome, message): outcome "failure", "error", "skipped" or "passed"."""
    found: dict[str, tuple[str, str]] = {}
    for case in ET.parse(path).iter("testcase"):
        test = f"{case.get('classname') or ''}::{case.get('name') or ''}"
        outcome, message = "passed", ""
        for tag in (*BAD, "skipped"):
            element = case.find(tag)
            if element is not None:
                outcome, message = tag, (element.get("message") or "").strip()
                break
        found[test] = (outcome, message)
    return found


def _group(message: str) -> str:
    return re.sub(r"\d+", "N", message.splitlines()[0] if message else "")[:110]


def report(name: str, tests: list[str], runs: dict[str, tuple[str, str]], out: list[str]) -> None:
    out.append(f"{len(tests)} {name}")
    for message, count in Counter(_group(runs[t][1]) for t in tests).most_common():
        out.append(f"  {count:5d}  {message}")
    for test in tests[:40]:
        out.append(f"         {test}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("baseline", help="JUnit XML of the run to compare against")
    parser.add_argument("other", help="JUnit XML of the run with the change (the plug-in)")
    args = parser.parse_args(argv)
    base, other = outcomes(args.baseline), outcomes(args.other)
    both = sorted(set(base) & set(other))
    lines = [
        f"baseline: {len(base)} tests, {sum(base[t][0] in BAD for t in base)} failed or errors",
        f"other:    {len(other)} tests, {sum(other[t][0] in BAD for t in other)} failed or errors",
        f"in both:  {len(both)}; failing in both: {sum(base[t][0] in BAD and other[t][0] in BAD for t in both)}",
    ]
    report("fail in the other run only (pass in the baseline)",
           [t for t in both if other[t][0] in BAD and base[t][0] == "passed"], other, lines)
    report("fail in the baseline only (pass in the other run)",
           [t for t in both if base[t][0] in BAD and other[t][0] == "passed"], base, lines)
    report("fail in the other run, not run in the baseline",
           sorted(t for t in set(other) - set(base) if other[t][0] in BAD), other, lines)
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
