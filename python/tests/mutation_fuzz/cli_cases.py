"""``zarr-device info`` and ``zarr-device convert`` over mutated stores: each case copies an
array of the corpus, applies one mutation (as :func:`draw_case` draws it), and runs, through the
command line's ``main`` in a child process, ``info PATH``, ``info PATH --json`` and ``convert
PATH DEST`` (with options drawn from the case's seed).

The rule: every command ends (no hang, no crash) with exit status 0 or 1, no exception escapes
``main`` (other than SystemExit) and no traceback is printed; ``info --json`` that succeeds
prints JSON; a failed convert leaves nothing beside DEST (no DEST, no ``DEST.partial-*`` tree,
no bookkeeping); a successful one leaves DEST alone, the mutated source reads (a read of all of it
may only fail for want of memory, and DEST's read then fails the same way), and DEST reads with
the same data type, shape and values (NaNs equal); and neither command changes, adds or removes a
file of the source.

Every case is derived from ``(seed, iteration)`` alone, like the read fuzzer's.
"""

from __future__ import annotations

import json
import queue
import random
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from .arrays import _CODEC_IMPORTS, StoredArray, read_files
from .cases import draw_case
from .edits import Mutation
from .mutations import Mutator

#: The options ``convert`` is run with, one set drawn per case.
CONVERT_OPTIONS: tuple[tuple[str, ...], ...] = (
    (),
    ("--json",),
    ("--compressor", "none", "--no-checksum"),
    ("--compressor", "gzip", "--level", "1"),
    ("--chunks", "64"),  # about 64 bytes a chunk: many chunks
    ("--chunks", "64", "--shards", "512"),
    ("--max-bytes", "1"),  # one region at a time
)

DEST_NAME = "out.zarr"


@dataclass
class CliCase:
    """One case: the array, its mutation, and where the store and DEST are: ``folder/src/<name>``
    and ``folder/out/out.zarr``."""

    seed: int
    iteration: int
    array: StoredArray
    mutation: Mutation
    folder: Path
    options: tuple[str, ...]

    @property
    def store(self) -> Path:
        return self.folder / "src" / self.array.spec.name

    @property
    def dest(self) -> Path:
        return self.folder / "out" / DEST_NAME

    def describe(self) -> str:
        return (f"cli case seed={self.seed} iteration={self.iteration}: {self.array.spec.describe()}; "
                f"{self.mutation.kind}: {self.mutation.detail}; convert options {list(self.options)}")

    def reproducer(self) -> str:
        """A self-contained script: write the array with zarr-python, mutate it, run the commands."""
        return "\n".join([
            "import json, pathlib, shutil",
            "import numcodecs, numpy as np, zarr",
            _CODEC_IMPORTS,
            "from zarr_device.tools import cli",
            "",
            "path = '/tmp/zd-cli-repro.zarr'",
            "shutil.rmtree(path, ignore_errors=True); shutil.rmtree('/tmp/zd-cli-repro-out.zarr', ignore_errors=True)",
            *self.array.spec.creation_code(),
            "root = pathlib.Path(path)",
            *self.mutation.code(),
            "print(cli.main(['info', path]), cli.main(['info', path, '--json']))",
            f"print(cli.main(['convert', path, '/tmp/zd-cli-repro-out.zarr', '--quiet', *{list(self.options)!r}]))",
        ])


@dataclass
class CliOutcome:
    case: CliCase
    result: dict[str, Any] | None  # None: the child hung or died on this case
    violations: list[str]

    def describe(self, reproducer: bool = True) -> str:
        lines = [self.case.describe(), *(f"  - {v}" for v in self.violations)]
        for name, run in (self.result or {}).get("commands", {}).items():
            lines.append(f"  {name}: exit status {run['status']}; stdout {run['stdout'][-600:]!r}; "
                         f"stderr {run['stderr'][-1500:]!r}")
        if self.result is not None:
            lines.append(f"  reads: {self.result.get('reads')}")
        if reproducer:
            lines += ["  reproducer:", *("    " + line for line in self.case.reproducer().splitlines())]
        return "\n".join(lines)


# The child: runs the commands on each case of a JSON file, one JSON line per case. Before each
# step it writes the step's name to stderr, so that a crash or hang shows where it was.
_CHILD = """
import contextlib, io, json, sys, traceback
import numpy as np
import zarr_device as zd
from zarr_device.tools import cli

def command(argv):
    out, err = io.StringIO(), io.StringIO()
    escaped = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = cli.main(argv)
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else 2
        except BaseException as e:
            escaped = f"{type(e).__name__}: {e}"[:2000] + "\\n" + traceback.format_exc()[-3000:]
            status = -1
    return {"status": status, "stdout": out.getvalue()[-20000:], "stderr": err.getvalue()[-20000:],
            "escaped": escaped}

def read(path):
    try:
        node = zd.open(path)
        if not isinstance(node, zd.Array):
            return None, f"not an array: {type(node).__name__}"
        return np.asarray(node[...]), None
    except BaseException as e:
        typed = isinstance(e, zd.ZarrDeviceError)
        return None, ("typed " if typed else "untyped ") + f"{type(e).__name__}: {e}"[:1000]

def native(a):
    if a.dtype.byteorder not in "=|":
        a = a.astype(a.dtype.newbyteorder("="))
    return np.ascontiguousarray(a)

def compare(source, dest):
    s, d = native(source), native(dest)
    if s.shape != d.shape:
        return f"shape {d.shape} where the source has {s.shape}"
    if s.dtype != d.dtype:
        return f"data type {d.dtype} where the source has {s.dtype}"
    if s.dtype.kind in "fc":
        same = np.array_equal(s, d, equal_nan=True)
    elif s.dtype.kind == "V":
        same = s.tobytes() == d.tobytes()
    else:
        same = np.array_equal(s, d)
    if same:
        return None
    where = np.argwhere(~((s == d) | ((s != s) & (d != d)))) if s.dtype.kind in "fc" else np.argwhere(s != d)
    first = tuple(int(i) for i in where[0]) if len(where) and s.ndim else ()
    return (f"{len(where)} values differ; first at {first}: source {s[first]!r}, destination {d[first]!r}"
            if s.ndim else f"source {s[()]!r}, destination {d[()]!r}")

jobs = json.load(open(sys.argv[1]))
for i, job in enumerate(jobs):
    store, dest = job["store"], job["dest"]
    commands = {}
    for name, argv in (("info", ["info", store]), ("info --json", ["info", store, "--json"]),
                       ("convert", ["convert", store, dest, "--quiet", *job["options"]])):
        print(f"case {i}: {name}", file=sys.stderr, flush=True)
        commands[name] = command(argv)
    reads = {}
    if commands["convert"]["status"] == 0:
        print(f"case {i}: reading the source", file=sys.stderr, flush=True)
        source, reads["source"] = read(store)
        print(f"case {i}: reading the destination", file=sys.stderr, flush=True)
        destination, reads["destination"] = read(dest)
        if source is not None and destination is not None:
            reads["differ"] = compare(source, destination)
    print(json.dumps({"commands": commands, "reads": reads}), flush=True)
"""


def _judge(case: CliCase, before: dict[str, bytes], result: dict[str, Any]) -> list[str]:
    violations: list[str] = []
    for name, run in result["commands"].items():
        if run["escaped"]:
            violations.append(f"{name}: an exception escaped main: {run['escaped'].splitlines()[0]}")
        elif run["status"] not in (0, 1):
            violations.append(f"{name}: exit status {run['status']}")
        if "Traceback" in run["stderr"] or "Traceback" in run["stdout"]:
            violations.append(f"{name}: a traceback")
    info_json = result["commands"]["info --json"]
    if info_json["status"] == 0:
        try:
            json.loads(info_json["stdout"])
        except ValueError as e:
            violations.append(f"info --json: exit status 0 but its output is not JSON ({e})")
    out_folder = case.dest.parent
    beside = sorted(p.name for p in out_folder.iterdir()) if out_folder.exists() else []
    if result["commands"]["convert"]["status"] == 0:
        if beside != [DEST_NAME]:
            violations.append(f"convert: succeeded but left {beside} where only {DEST_NAME} should be")
        reads = result["reads"]
        source_error, dest_error = reads.get("source"), reads.get("destination")
        if source_error and not source_error.startswith("typed OutOfMemoryError"):
            # The source is damaged where a read looks; a copy that hides it is other data.
            violations.append(f"convert: succeeded though the source does not read: {source_error}")
        if dest_error and (not source_error or not dest_error.startswith("typed ")
                           or dest_error.split(":")[0] != source_error.split(":")[0]):
            violations.append(f"convert: succeeded but the destination does not read: {dest_error}")
        if reads.get("differ"):
            violations.append(f"convert: the destination reads other values than the source: {reads['differ']}")
    elif beside:
        violations.append(f"convert: failed but left {beside} beside (or as) the destination")
    after = read_files(case.store)
    if after != before:
        removed = sorted(set(before) - set(after))
        added = sorted(set(after) - set(before))
        changed = sorted(k for k in after if k in before and after[k] != before[k])
        violations.append(f"the source's files changed: removed {removed}, added {added}, changed {changed}")
    return violations


def build_cli_cases(seed: int, iterations: Iterable[int], corpus: Sequence[StoredArray], workdir: Path, *,
                    max_seconds: float = 60.0) -> list[CliCase]:
    """The cases of ``iterations`` (fewer where building them takes more than ``max_seconds``),
    each with its mutated store written."""
    mutator = Mutator(corpus)
    started = time.monotonic()
    cases: list[CliCase] = []
    for iteration in iterations:
        if time.monotonic() - started > max_seconds:
            break
        drawn = draw_case(seed, iteration, corpus, mutator)
        folder = workdir / f"cli-{iteration}"
        shutil.rmtree(folder, ignore_errors=True)
        options = random.Random(f"cli:{seed}:{iteration}").choice(CONVERT_OPTIONS)
        case = CliCase(seed, iteration, drawn.array, drawn.mutation, folder, options)
        shutil.copytree(drawn.array.root, case.store)
        drawn.mutation.apply(case.store)
        case.dest.parent.mkdir(parents=True)
        cases.append(case)
    return cases


def run_cli_cases(seed: int, iterations: Iterable[int], corpus: Sequence[StoredArray], workdir: Path, *,
                  max_seconds: float = 60.0, timeout: float = 60.0) -> list[CliOutcome]:
    """Builds the cases of ``iterations``, runs ``info``, ``info --json`` and ``convert`` on each
    in one child process (a case that takes over ``timeout`` seconds or crashes ends it: the case
    is reported with the step it was on, the rest run in a new one), and judges them."""
    cases = build_cli_cases(seed, iterations, corpus, workdir, max_seconds=max_seconds / 2)
    snapshots = [read_files(case.store) for case in cases]
    outcomes: list[CliOutcome] = []
    while len(outcomes) < len(cases):
        pending = cases[len(outcomes):]
        jobs = workdir / f"cli-jobs-{len(outcomes)}.json"
        jobs.write_text(json.dumps([{"store": str(c.store), "dest": str(c.dest), "options": list(c.options)}
                                    for c in pending]))
        err_path = workdir / f"cli-jobs-{len(outcomes)}.err"
        with open(err_path, "w") as err_file:
            child = subprocess.Popen([sys.executable, "-c", _CHILD, str(jobs)],
                                     stdout=subprocess.PIPE, stderr=err_file, text=True)
            lines: queue.Queue[str | None] = queue.Queue()
            threading.Thread(target=_pump, args=(child, lines), daemon=True).start()
            while len(outcomes) < len(cases):  # one line a case, each within ``timeout`` seconds
                try:
                    line = lines.get(timeout=timeout)
                except queue.Empty:
                    child.kill()
                    break
                if line is None:
                    break
                if line.startswith("{"):
                    result = json.loads(line)
                    case = cases[len(outcomes)]
                    outcomes.append(CliOutcome(case, result, _judge(case, snapshots[len(outcomes)], result)))
            child.wait()
        if len(outcomes) < len(cases):  # the child died or hung on this case
            err = err_path.read_text(errors="replace")
            case = cases[len(outcomes)]
            steps = [line for line in err.splitlines() if line.startswith("case ")]
            step = steps[-1].partition(": ")[2] if steps else "starting"
            outcomes.append(CliOutcome(case, None, [
                f"the child took over {timeout:g} s or died (exit status {child.returncode}) at: {step}; "
                f"stderr: {err[-3000:]}"]))
    return outcomes


def _pump(child: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert child.stdout is not None
    for line in child.stdout:
        lines.put(line)
    lines.put(None)
