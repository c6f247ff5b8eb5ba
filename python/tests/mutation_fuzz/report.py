"""The report: outcome counts per mutation kind, violations grouped by cause (signature), each
group with a self-contained reproducer script, and running a reproducer in a fresh interpreter."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field

from .arrays import _CODEC_IMPORTS, ArraySpec
from .cases import Case, Selection, format_selection
from .judging import CRASH, DIFFERENT, DIFFERENT_META, GENERIC, HANG, OUTCOMES, SAME, TYPED, Outcome


REPRO_PATH = "/tmp/zd-mutation-repro.zarr"


def reproducer(case: Case, selection: Selection) -> str:
    """A self-contained script: write the array with zarr-python, mutate it, read it."""
    lines = [
        "import json, pathlib",
        "import numcodecs, numpy as np, zarr",
        _CODEC_IMPORTS,
        "import zarr_device as zd",
        "",
        f"path = {REPRO_PATH!r}",
        *case.array.spec.creation_code(),
        "root = pathlib.Path(path)",
        *case.mutation.code(),
        f"print(zd.open_array(path)[{format_selection(selection)}])",
    ]
    return "\n".join(lines)


@dataclass
class ViolationGroup:
    """Violations with one cause (signature); the first example in full."""

    signature: str
    count: int
    kinds: Counter[str]
    arrays: Counter[str]
    outcome: str
    detail: str
    mutation: str
    array: str
    selection: str
    case: tuple[int, int]
    reproducer: str


def _normalize(text: str, workdir: str) -> str:
    """A message with its varying parts (paths, numbers, bytes) replaced, for grouping."""
    text = text.replace(workdir, "<dir>")
    text = re.sub(r"case-\d+", "case-*", text)
    text = re.sub(r"'c[/.][0-9/.]*'|'[0-9][0-9/.]*'", "'<key>'", text)
    text = re.sub(r"0x[0-9a-fA-F]+|\b\d+\b", "N", text)
    text = re.sub(r"b'[^']*'|b\"[^\"]*\"", "b'...'", text)
    return text[:240]


def _signature(outcome: Outcome, kind: str, spec: ArraySpec, workdir: str) -> str:
    """The grouping key of a violation: its kind of failure and what it names."""
    if outcome.outcome == GENERIC:  # type, where (no line), the message's first words
        text, _, where = outcome.detail.rpartition(" (at ")
        where = re.sub(r":\d+", "", where.rstrip(")"))
        kind_, _, message = text.partition(": ")
        words = " ".join(_normalize(message, workdir).split()[:6])
        return f"{GENERIC}: {kind_} at {where}: {words} ..."
    if outcome.outcome in (CRASH, HANG):
        first = outcome.detail.splitlines()[0] if outcome.detail else ""
        return f"{outcome.outcome}: {kind}: {_normalize(first, workdir)}"
    head, _, where = outcome.violation.partition(": ")
    where = re.sub(r" \(\d+(, \d+)*,?\)| \(\)", "", where.split(";")[0])
    layout = f"{spec.compressor or 'no compressor'}{'+crc32c' if spec.crc32c else ''}"
    if spec.shards is not None:
        layout += f", sharded (index {spec.index_location}{'+crc32c' if spec.index_crc32c else ''})"
    return f"{head} ({kind}; {layout}){': ' + _normalize(where, workdir) if where else ''}"


@dataclass
class FuzzReport:
    """Counts of outcomes per mutation kind, typed error classes and grouped violations."""

    seed: int
    workdir: str = ""
    cases: int = 0
    reads: int = 0
    seconds: float = 0.0
    worker_starts: int = 0
    counts: dict[str, Counter[str]] = field(default_factory=dict)
    typed: dict[str, Counter[str]] = field(default_factory=dict)
    generic: Counter[str] = field(default_factory=Counter)
    unverified: Counter[str] = field(default_factory=Counter)
    groups: dict[str, ViolationGroup] = field(default_factory=dict)
    baseline_failures: list[str] = field(default_factory=list)

    @property
    def violations(self) -> int:
        return sum(g.count for g in self.groups.values()) + len(self.baseline_failures)

    def add(self, case: Case, selection: Selection, outcome: Outcome) -> None:
        kind = case.mutation.kind
        self.reads += 1
        self.counts.setdefault(kind, Counter())[outcome.outcome] += 1
        if outcome.outcome == TYPED:
            self.typed.setdefault(kind, Counter())[outcome.detail] += 1
        if outcome.outcome == GENERIC:
            self.generic[_normalize(outcome.detail, self.workdir)] += 1
        if outcome.unverified:
            self.unverified[kind] += 1
        if not outcome.violation:
            return
        self.counts[kind]["violations"] += 1
        signature = _signature(outcome, kind, case.array.spec, self.workdir)
        group = self.groups.get(signature)
        if group is None:
            group = self.groups[signature] = ViolationGroup(
                signature, 0, Counter(), Counter(), outcome.outcome,
                outcome.detail if outcome.outcome != DIFFERENT else outcome.violation,
                case.mutation.detail, case.array.spec.describe(), format_selection(selection),
                (case.seed, case.iteration), reproducer(case, selection))
        group.count += 1
        group.kinds[kind] += 1
        group.arrays[case.array.spec.describe()] += 1

    def table(self) -> str:
        """Outcomes per mutation kind (one row each, and the totals)."""
        columns = ("reads", SAME, TYPED, DIFFERENT, DIFFERENT_META, GENERIC, CRASH, HANG, "violations")
        heads = ("reads", "same", "typed", "diff", "diff(meta)", "generic", "crash", "hang", "VIOLATIONS")
        rows: list[tuple[str, list[int]]] = []
        total: Counter[str] = Counter()
        for kind in sorted(self.counts):
            c = self.counts[kind]
            c_reads = sum(c[o] for o in OUTCOMES)
            total.update(c)
            rows.append((kind, [c_reads] + [c[o] for o in columns[1:]]))
        rows.append(("TOTAL", [sum(total[o] for o in OUTCOMES)] + [total[o] for o in columns[1:]]))
        width = max(len(k) for k, _ in rows)
        lines = [f"{'mutation':<{width}} " + " ".join(f"{h:>10}" for h in heads)]
        for kind, values in rows:
            lines.append(f"{kind:<{width}} " + " ".join(f"{v:>10}" for v in values))
        return "\n".join(lines)

    def details(self) -> str:
        """Typed error classes per kind, generic exceptions and unverified checksums."""
        lines = ["typed errors by class:"]
        for kind in sorted(self.typed):
            lines.append(f"  {kind}: " + ", ".join(f"{k} {n}" for k, n in self.typed[kind].most_common()))
        if self.generic:
            lines.append("generic exceptions:")
            lines += [f"  {n:6d}  {text}" for text, n in self.generic.most_common()]
        if self.unverified:
            lines.append("same data although a crc32c check the read covers fails (checksum not verified):")
            lines += [f"  {kind}: {n}" for kind, n in self.unverified.most_common()]
        return "\n".join(lines)

    def summary(self) -> str:
        return (f"seed {self.seed}: {self.cases} cases, {self.reads} reads in {self.seconds:.1f} s "
                f"({self.worker_starts} worker starts); {self.violations} violations in "
                f"{len(self.groups) + len(self.baseline_failures)} groups")

    def format_violations(self, reproducers: bool = True, limit: int | None = None) -> str:
        """The violation groups, most frequent first, each with one example."""
        lines = [f"baseline: {b}" for b in self.baseline_failures]
        groups = sorted(self.groups.values(), key=lambda g: -g.count)
        for n, g in enumerate(groups[:limit]):
            lines += [
                f"[{n + 1}] {g.signature}",
                f"    {g.count} reads; kinds: " + ", ".join(f"{k} {c}" for k, c in g.kinds.most_common()),
                f"    arrays: {len(g.arrays)} configurations, e.g. {g.array}",
                f"    example (seed {g.case[0]}, iteration {g.case[1]}): {g.mutation}; read [{g.selection}]",
                "    " + "\n    ".join(g.detail.splitlines()[:12]),
            ]
            if reproducers:
                lines += ["    reproducer:", "        " + "\n        ".join(g.reproducer.splitlines())]
        if limit is not None and len(groups) > limit:
            lines.append(f"... and {len(groups) - limit} more groups")
        return "\n".join(lines)


def run_reproducer(code: str, timeout: float = 60.0) -> str:
    """Runs a reproducer in a fresh interpreter; returns its exit status and last output lines."""
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:g} s"
    status = f"signal {signal.Signals(-proc.returncode).name}" if proc.returncode < 0 else f"exit {proc.returncode}"
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
    return f"{status}: " + " | ".join(line[:300] for line in tail)
