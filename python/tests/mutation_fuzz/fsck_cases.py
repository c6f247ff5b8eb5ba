"""``zarr-device fsck --fix`` over mutated stores: each case copies an array of the corpus,
applies one mutation (as :func:`draw_case` draws it), then plants user files whose names look
like zarr-device's temporaries and partial trees (in the array's folder, in its chunk folders,
in a folder of the user's inside it, and beside it) together with things that are zarr-device's
(an engine temporary in a chunk folder and one of metadata, a stale partial tree with its
record), and runs the command line in a child process.

The rule: the command ends (no hang, no crash, no traceback) with exit status 0 or 1 and its
summary line; every file except those planted as zarr-device's is still there, byte for byte,
and nothing is added; where the mutation left the metadata alone, what was planted as
zarr-device's is gone.

Every case is derived from ``(seed, iteration)`` alone, like the read fuzzer's.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .arrays import StoredArray, read_files
from .cases import draw_case
from .edits import Mutation
from .mutations import Mutator

#: The placement record's name (zarr_device.io.atomic_trees.RECORD), spelt out so that the planted
#: files do not depend on the code under test.
RECORD = ".zarr-device-placement.json"
DEAD_PID = 999_999_999  # above any Linux pid_max: no process has it

# Names that only look like the engine's temporaries, for a node's folder or a chunk folder:
# none is ``.<a file the engine writes there>.zdtmp-<pid>-<n>`` (or the older ``.tmp<pid>.<n>``).
_LOOK_ALIKE_TARGETS = ("backup", "draft", "thesis.tex", "notes", "zarr.json.bak", "zarr.jsonx", "c.txt",
                       "plan", "x", ".zgroupx", "zattrs")
_LOOK_ALIKE_SUFFIXES = (".zdtmp-{pid}-{n}", ".tmp{pid}.{n}", ".zdtmp-keep", ".zdtmp-abc", ".zdtmp-{pid}",
                        ".tmp{pid}.{n}x", ".zdtmp-0{pid}-{n}", ".zdtmp--{pid}-{n}", ".tmp{pid}")
_MALFORMED_ENGINE = (".zarr.json.zdtmp-123", ".zarr.json.zdtmp-keep", ".zarr.json.zdtmp-0012-3",
                     ".zarr.json.zdtmp-1-2-3", ".zarr.json.tmp12", ".zarr.json.tmp.1", ".zattrs.zdtmp-x-1",
                     ".zarray.zdtmp-1-", ".zarr.json.zdtmp-1-02", ".zarr.json.tmp1.02")


def _look_alike(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return rng.choice(_MALFORMED_ENGINE)
    suffix = rng.choice(_LOOK_ALIKE_SUFFIXES).format(pid=rng.randint(1, 99999), n=rng.randint(0, 99))
    return "." + rng.choice(_LOOK_ALIKE_TARGETS) + suffix


@dataclass
class FsckCase:
    """One case: the array, its mutation, and what was planted (paths relative to ``folder``,
    which holds the store ``folder/<array name>`` and its siblings)."""

    seed: int
    iteration: int
    array: StoredArray
    mutation: Mutation
    folder: Path
    user: list[str] = field(default_factory=list)
    ours: list[str] = field(default_factory=list)

    @property
    def store(self) -> Path:
        return self.folder / self.array.spec.name

    def describe(self) -> str:
        return (f"fsck case seed={self.seed} iteration={self.iteration}: {self.array.spec.describe()}; "
                f"{self.mutation.kind}: {self.mutation.detail}")


@dataclass
class FsckOutcome:
    case: FsckCase
    returncode: int | None  # None: it hung
    stdout: str
    stderr: str
    violations: list[str]

    def describe(self) -> str:
        return "\n".join([self.case.describe(), *(f"  - {v}" for v in self.violations),
                          f"  exit status {self.returncode}", "  stdout: " + self.stdout[-2000:],
                          "  stderr: " + self.stderr[-2000:]])


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _record(tree: Path, destination: str, token: str, role: str = "new") -> None:
    _write(tree / RECORD, json.dumps({"zarr_device": "placement", "destination": destination,
                                      "token": token, "role": role}).encode())


def _engine_temporary(key: str) -> str:
    """The engine's temporary for the chunk at ``key`` (in the same folder)."""
    folder, _, name = key.rpartition("/")
    temporary = f".{name}.zdtmp-{DEAD_PID}-{random.Random(key).randint(0, 2**64 - 1)}"
    return f"{folder}/{temporary}" if folder else temporary


def plant(rng: random.Random, case: FsckCase) -> None:
    """Plants user look-alikes and zarr-device's own leftovers into ``case``'s folder."""
    arr, store, name = case.array, case.store, case.array.spec.name

    def user(relative: str, data: bytes | None = None) -> None:
        _write(case.folder / relative, data if data is not None else rng.randbytes(rng.randint(0, 40)))
        case.user.append(relative)

    def ours(relative: str) -> None:
        _write(case.folder / relative, rng.randbytes(rng.randint(1, 40)))
        case.ours.append(relative)

    chunk_folders = sorted({k.rpartition("/")[0] for k in arr.key_index})
    for _ in range(rng.randint(2, 5)):  # in the array's folder and its chunk folders
        where = rng.choice(["", *chunk_folders])
        user(f"{name}/{where}/{_look_alike(rng)}".replace("//", "/"))
    # A folder of the user's inside the store: even the engine's exact names are not its there.
    notes = f"{name}/notes"
    user(f"{notes}/.zarr.json.zdtmp-{DEAD_PID}-1")
    user(f"{notes}/.0.zdtmp-{DEAD_PID}-2")
    user(f"{notes}/.draft.tmp2024.01")
    user(f"{notes}/{_look_alike(rng)}")
    # Beside the store: trees and files named like partial trees that no record proves.
    hexes = [rng.randbytes(4).hex() for _ in range(6)]
    user(f"{name}.partial-{hexes[0]}/mine.txt", b"the user's")
    user(f"{name}.replaced-{hexes[1]}/zarr.json", b"{}")
    user(f"{name}.partial-{hexes[2]}", b"a file")
    _record(case.folder / f"{name}.partial-{hexes[3]}", name, "0" * 8)  # another tree's token
    case.user.append(f"{name}.partial-{hexes[3]}/{RECORD}")
    user(f"{name}.partial-{hexes[3]}/c/0")
    _record(case.folder / f"{name}.partial-{hexes[4]}", name, hexes[4], "file")  # holds a user file
    case.user.append(f"{name}.partial-{hexes[4]}/{RECORD}")
    user(f"{name}.partial-{hexes[4]}/notes.txt")
    # zarr-device's own: an engine temporary of a chunk and of the metadata, a stale partial tree.
    if arr.key_index:
        ours(f"{name}/{_engine_temporary(rng.choice(sorted(arr.key_index)))}")
    ours(f"{name}/.{arr.metadata_keys[0].rpartition('/')[2]}.zdtmp-{DEAD_PID}-{rng.randint(0, 999)}")
    stale = case.folder / f"{name}.partial-{hexes[5]}"
    _record(stale, name, hexes[5])
    case.ours.append(f"{name}.partial-{hexes[5]}/{RECORD}")
    ours(f"{name}.partial-{hexes[5]}/c/1")
    old = time.time() - 2 * 3600
    for path in (stale / "c" / "1", stale / RECORD, stale / "c", stale):
        os.utime(path, (old, old))
    for relative in case.ours:
        if relative.startswith(f"{name}/"):
            os.utime(case.folder / relative, (old, old))


# The child: runs the command line on each store named, one JSON line per store.
_CHILD = """
import contextlib, io, json, sys, traceback
from zarr_device.tools import cli
for store in sys.argv[1:]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = cli.main(["fsck", store, "--fix", "--data", "--quiet"])
        except BaseException:
            traceback.print_exc()
            status = -1
    print(json.dumps({"status": status, "stdout": out.getvalue(), "stderr": err.getvalue()}), flush=True)
"""


def _judge(case: FsckCase, before: dict[str, bytes], status: int | None, stdout: str, stderr: str) -> list[str]:
    violations: list[str] = []
    if status is None:
        return ["the command hung or its process died"]
    if status not in (0, 1):
        violations.append(f"exit status {status}")
    if "Traceback" in stderr or "Traceback" in stdout:
        violations.append("a traceback")
    last = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    if not last.startswith(f"{case.store}: ") or " node" not in last:
        violations.append(f"no summary line (last line {last!r})")
    after = read_files(case.folder)
    removed = sorted(set(before) - set(after))
    if [r for r in removed if r not in case.ours]:
        violations.append(f"removed files that are not zarr-device's: {[r for r in removed if r not in case.ours]}")
    changed = [k for k in after if k in before and after[k] != before[k]]
    if changed:
        violations.append(f"changed files: {changed}")
    if set(after) - set(before):
        violations.append(f"added files: {sorted(set(after) - set(before))}")
    if not case.mutation.is_metadata:
        left = [o for o in case.ours if o in after]
        if left:
            violations.append(f"zarr-device's leftovers not removed: {left}")
    return violations


def run_fsck_cases(seed: int, iterations: range, corpus: Sequence[StoredArray], workdir: Path, *,
                   max_seconds: float = 60.0, timeout: float = 60.0) -> list[FsckOutcome]:
    """Builds the cases of ``iterations``, runs ``zarr-device fsck --fix --data`` on each in
    one child process (a hang or crash ends it: the case it was on is reported, the rest run in
    a new one), and judges them."""
    mutator = Mutator(corpus)
    started = time.monotonic()
    cases: list[FsckCase] = []
    snapshots: list[dict[str, bytes]] = []
    for iteration in iterations:
        if time.monotonic() - started > max_seconds / 2:
            break
        drawn = draw_case(seed, iteration, corpus, mutator)
        folder = workdir / f"fsck-{iteration}"
        shutil.rmtree(folder, ignore_errors=True)
        case = FsckCase(seed, iteration, drawn.array, drawn.mutation, folder)
        shutil.copytree(drawn.array.root, case.store)
        drawn.mutation.apply(case.store)
        plant(random.Random(f"fsck:{seed}:{iteration}"), case)
        cases.append(case)
        snapshots.append(read_files(folder))
    outcomes: list[FsckOutcome] = []
    while len(outcomes) < len(cases):
        pending = cases[len(outcomes):]
        child = subprocess.Popen([sys.executable, "-c", _CHILD, *(str(c.store) for c in pending)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = child.communicate(timeout=timeout * len(pending))
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        for result in lines:
            case = cases[len(outcomes)]
            outcomes.append(FsckOutcome(case, result["status"], result["stdout"], result["stderr"], _judge(
                case, snapshots[len(outcomes)], result["status"], result["stdout"], result["stderr"])))
        if len(outcomes) < len(cases):  # the child died or hung on this case
            case = cases[len(outcomes)]
            outcomes.append(FsckOutcome(case, None, "", err[-4000:], ["the command hung or its process died"]))
    return outcomes
