"""The loop: :func:`run_fuzz` builds the corpus, checks that every array reads back unmutated,
then draws, applies, reads and judges the cases into a :class:`FuzzReport`."""

from __future__ import annotations

import itertools
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from .arrays import ArraySpec, StoredArray, build_corpus, default_specs, read_files
from .cases import Case, Selection, draw_case
from .judging import Outcome, bits_equal, classify
from .mutations import Mutator
from .report import FuzzReport
from .runner import ReadRunner


@dataclass
class FuzzConfig:
    """What :func:`run_fuzz` does."""

    seed: int = 0
    iterations: int | None = 1000  # None: until max_seconds
    first_iteration: int = 0
    max_seconds: float | None = None
    timeout: float = 10.0  # per read
    memory_limit: int = 4 << 30  # the worker's address space (RLIMIT_AS)
    workdir: Path | None = None  # kept (with up to 100 violating cases); default: a temporary one, removed
    specs: Sequence[ArraySpec] | None = None
    kinds: Sequence[str] | None = None  # restrict the mutation kinds
    progress: Callable[[FuzzReport], None] | None = None  # called about every 10 s
    on_read: Callable[[Case, Selection, Outcome], None] | None = None  # called after every read


def run_fuzz(config: FuzzConfig) -> FuzzReport:
    """Builds the corpus, checks that every array reads back unmutated, then runs the cases."""
    own_dir = config.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="zd-mutation-")) if config.workdir is None else Path(config.workdir)
    report = FuzzReport(config.seed, workdir=str(workdir))
    start = time.monotonic()
    runner = ReadRunner(workdir, config.timeout, config.memory_limit)
    try:
        corpus = build_corpus(workdir / "corpus", config.specs or default_specs())
        good: list[StoredArray] = []
        for arr in corpus:
            result = runner.read(arr.root, Ellipsis)
            if result.status == "ok" and result.value is not None and bits_equal(result.value, arr.values):
                good.append(arr)
            else:
                report.baseline_failures.append(
                    f"{arr.spec.describe()}: unmutated read gives {result.status} {result.error_type} "
                    f"{result.message[:300]}")
        mutator = Mutator(corpus)
        if config.kinds is not None:
            mutator.kinds = {k: v for k, v in mutator.kinds.items() if k in config.kinds}
            good = [a for a in good if mutator.applicable(a)]
        scratch = workdir / "scratch"
        scratch.mkdir(exist_ok=True)
        last_progress = time.monotonic()
        kept = 0
        for iteration in itertools.count(config.first_iteration):
            if config.iterations is not None and iteration >= config.first_iteration + config.iterations:
                break
            if config.max_seconds is not None and time.monotonic() - start > config.max_seconds:
                break
            if not good:
                break
            case = draw_case(config.seed, iteration, good, mutator)
            root = scratch / f"case-{iteration}"
            shutil.rmtree(root, ignore_errors=True)  # left by an interrupted run in the same workdir
            shutil.copytree(case.array.root, root)
            case.mutation.apply(root)
            after = read_files(root)
            violated = False
            for selection in case.selections:
                outcome = classify(case.array, case.mutation, after, selection, runner.read(root, selection))
                report.add(case, selection, outcome)
                violated = violated or bool(outcome.violation)
                if config.on_read is not None:
                    config.on_read(case, selection, outcome)
            if violated and not own_dir and kept < 100:
                kept += 1  # the mutated copy stays in the given workdir, for a look
            else:
                shutil.rmtree(root)
            report.cases += 1
            if config.progress is not None and time.monotonic() - last_progress > 10:
                last_progress = time.monotonic()
                report.seconds = last_progress - start
                report.worker_starts = runner.starts
                config.progress(report)
    finally:
        runner.close()
        report.seconds = time.monotonic() - start
        report.worker_starts = runner.starts
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)
    return report
