"""Mutation fuzzing of checkpoints (zarr_device.torch.save / load): the array fuzzer's file edits
applied to a saved checkpoint's files, loaded with ``zarr_device.torch.load`` in a worker process.

The corpus (:func:`build_checkpoints`) is one small state dict saved raw, with crc32c, with
zstd and with ``compressors="auto"`` (floats byte-shuffled before zstd): an unsharded tensor, a sharded one (three inner chunks in one shard file), one all zeros
(left out, listed in ``fill_chunks``), one half zeros (an inner chunk left out of its shard), a
0-d zero, an empty tensor, a bf16 and an int tensor, and a tied name. Each case copies one
checkpoint, applies one mutation drawn by the array fuzzer's :class:`~mutation_fuzz.Mutator`
(data files play the part of chunks, every zarr.json that of metadata) or by this module (a file
put where a chunk was left out), loads the copy in the worker and judges the load
(:func:`judge`). The rule:

- never a crash, a hang or an exception other than a ``zarr_device.ZarrDeviceError``;
- a deleted chunk or shard file is a ``MissingChunkError``; a file put at a key the checkpoint
  lists as left out is a ``ZarrDeviceError``;
- a load that succeeds gives the tensors the checkpoint's (possibly edited) manifest names, with
  the values saved: a manifest edited into another valid one (a tied name pointed at another
  tensor) is no damage a reader can see, so the expectation follows the edited manifest;
- other values are allowed only where no check can see the change: a whole data file swapped
  for or overwritten by another valid one, and changed bytes of raw chunks (without crc32c a
  load checks sizes, not values).

Every case follows from ``(seed, iteration)``; :func:`run_checkpoint_fuzz` with
``first_iteration=i, iterations=1`` replays one.
"""

from __future__ import annotations

import faulthandler
import json
import multiprocessing.connection
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .arrays import METADATA_KEYS, read_files
from .edits import CreateFile, Mutation
from .mutations import Mutator
from .runner import ReadResult, ReadRunner, _log_tail

#: The save options of the corpus, and whether their chunks carry a crc32c.
SPECS: dict[str, tuple[dict[str, Any], bool]] = {
    "raw": ({}, False),
    "crc32c": ({"checksum": "crc32c"}, True),
    "zstd": ({"compressors": "zstd"}, True),
    "auto": ({"compressors": "auto"}, True),  # floats byte-shuffled before zstd
}

#: The array fuzzer's kinds that apply to a checkpoint's files (those that need an ArraySpec,
#: the shard layout or another array's chunks do not).
MUTATOR_KINDS = (
    "bitflip", "bitflip_every_chunk", "byteflip", "truncate", "extend", "duplicate_bytes", "swap_chunks",
    "replace_same_array", "empty_file", "delete_chunk", "make_directory", "meta_flip", "meta_truncate",
    "meta_value", "meta_plausible", "meta_remove_key", "meta_add_key", "meta_non_utf8",
)
#: This module's own kinds.
OWN_KINDS = ("add_left_out", "add_outside_grid")
KINDS = MUTATOR_KINDS + OWN_KINDS

# Whole data files replaced by other valid ones: their checksums hold, other values may load.
_WHOLE_FILE_KINDS = frozenset({"swap_chunks", "replace_same_array"})
# Bytes of data files changed: other values may load only where the chunks have no crc32c.
_DATA_BYTE_KINDS = frozenset({"bitflip", "bitflip_every_chunk", "byteflip", "truncate", "extend", "duplicate_bytes"})


def state_dict() -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(5)
    sd: dict[str, Any] = {
        "small": torch.randn(10, 7, generator=g),
        "sharded": torch.randn(600, 1024, generator=g),  # inner chunks of 256 rows, one shard file
        "zeros": torch.zeros(300, 1024),
        "half": torch.cat([torch.zeros(300, 1024), torch.randn(300, 1024, generator=g)]),
        "scalar": torch.tensor(0.0),
        "empty": torch.zeros(0, 4),
        "bf16": torch.randn(64, 33, generator=g).to(torch.bfloat16),
        "ints": torch.arange(-50, 50, dtype=torch.int64),
    }
    sd["tied"] = sd["small"]
    return sd


def tensor_bytes(tensor: Any) -> tuple[str, tuple[int, ...], bytes]:
    """A tensor as what the worker sends back: dtype, shape and its raw bytes."""
    import torch

    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return str(tensor.dtype), tuple(tensor.shape), flat.view(torch.uint8).numpy().tobytes()


@dataclass
class StoredCheckpoint:
    """One saved checkpoint of the corpus: its files and the tensors saved."""

    name: str
    checked: bool  # its chunks carry a crc32c
    root: Path
    files: dict[str, bytes]
    tensors: dict[str, tuple[str, tuple[int, ...], bytes]]
    left_out: list[str]  # data-file keys listed in fill_chunks, relative to the root
    chunk_keys: list[str] = field(default_factory=list)  # data files (chunks and shards)
    metadata_keys: list[str] = field(default_factory=list)  # every zarr.json


def build_checkpoints(folder: Path) -> list[StoredCheckpoint]:
    import zarr_device.torch as zt

    sd = state_dict()
    expected = {name: tensor_bytes(t) for name, t in sd.items()}
    corpus = []
    for name, (options, checked) in SPECS.items():
        root = folder / name
        zt.save(sd, root, progress=False, **options)
        files = read_files(root)
        attribute = json.loads(files["zarr.json"])["attributes"]["zarr_device_checkpoint"]
        paths = attribute["tensors"]
        left_out = [f"{paths[t]}/{k}" for t, keys in attribute["fill_chunks"].items() for k in keys]
        corpus.append(StoredCheckpoint(
            name, checked, root, files, expected, left_out,
            chunk_keys=sorted(k for k in files if Path(k).name not in METADATA_KEYS),
            metadata_keys=sorted(k for k in files if Path(k).name in METADATA_KEYS)))
    return corpus


# ----------------------------------------------------------------------------------------------
# Drawing cases


@dataclass(frozen=True)
class _Files:
    """What the array fuzzer's generators read of an array, for a checkpoint (duck-typed)."""

    chunk_keys: list[str]
    metadata_keys: list[str]
    files: dict[str, bytes]


@dataclass
class CheckpointCase:
    iteration: int
    checkpoint: StoredCheckpoint
    mutation: Mutation


def _own(rng: random.Random, ck: StoredCheckpoint, kind: str) -> Mutation | None:
    donor = rng.choice(ck.chunk_keys)
    data = rng.choice((ck.files[donor], rng.randbytes(rng.randint(0, 64))))
    if kind == "add_left_out":
        key = rng.choice(ck.left_out)
        return Mutation(kind, key, f"create {key!r} (listed as left out) holding {len(data)} bytes",
                        (CreateFile(key, data),))
    key = rng.choice(("small/c/5/0", "small/c/0/9", "bf16/c/1/0", "ints/c/3", "zeros/c/0/1", "sharded/c/2/0"))
    return Mutation(kind, key, f"create {key!r} (outside the chunk grid) holding {len(data)} bytes",
                    (CreateFile(key, data),))


def draw_case(seed: int, iteration: int, corpus: list[StoredCheckpoint]) -> CheckpointCase:
    """The case of ``(seed, iteration)``: depends on nothing else (given the same corpus)."""
    rng = random.Random(f"checkpoints:{seed}:{iteration}")
    mutator = Mutator([])
    while True:
        ck = rng.choice(corpus)
        kind = rng.choice(KINDS)
        if kind in OWN_KINDS:
            mutation = _own(rng, ck, kind)
        else:
            # Metadata kinds edit the root document as often as all the arrays' together.
            meta = "zarr.json" if rng.random() < 0.5 else rng.choice(ck.metadata_keys)
            view = _Files(ck.chunk_keys, [meta], ck.files)
            mutation = mutator.draw(rng, view, kind)  # type: ignore[arg-type]  # duck-typed
        if mutation is not None:
            return CheckpointCase(iteration, ck, mutation)


# ----------------------------------------------------------------------------------------------
# The worker (loads with zarr_device.torch; may crash or hang)


def _load_once(path: str) -> ReadResult:
    try:
        import zarr_device as zd
        import zarr_device.torch as zt

        loaded = zt.load(path, progress=False)
        return ReadResult("ok", value={name: tensor_bytes(t) for name, t in loaded.items()})  # type: ignore[arg-type]
    except BaseException as e:  # noqa: B036 - every exception is an outcome to record
        tb = traceback.extract_tb(e.__traceback__)
        where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno} in {tb[-1].name}" if tb else ""
        return ReadResult("error", error_type=f"{type(e).__module__}.{type(e).__qualname__}",
                          typed=isinstance(e, zd.ZarrDeviceError), message=str(e)[:2000], where=where)


def _worker_main(read_fd: int, write_fd: int, memory_limit: int) -> None:
    """Serves loads until told to stop (as runner._worker_main serves reads)."""
    import resource

    conn_in = multiprocessing.connection.Connection(read_fd, writable=False)
    conn = multiprocessing.connection.Connection(write_fd, readable=False)
    faulthandler.enable(all_threads=True)
    if memory_limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    try:
        import zarr_device.torch  # noqa: F401 - torch's import is the slow part: done once
    except BaseException as e:  # noqa: B036 - e.g. the package being reinstalled right now
        conn.send(("failed", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", ""))
    while True:
        try:
            message = conn_in.recv()
        except (EOFError, OSError):
            return
        if message[0] == "stop":
            return
        _, path, _selection, dump_after = message
        sys.stderr.write(f"--- read {path}\n")
        sys.stderr.flush()
        faulthandler.dump_traceback_later(dump_after, exit=False)
        try:
            result = _load_once(path)
        finally:
            faulthandler.cancel_dump_traceback_later()
        conn.send(result)


_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from mutation_fuzz.checkpoints import _worker_main; "
         "_worker_main(*map(int, sys.argv[2:]))")


class LoadRunner(ReadRunner):
    """:class:`ReadRunner` whose worker loads checkpoints: ``read(path, None)`` is one
    ``zarr_device.torch.load(path)``, its crash or hang reported as the result."""

    def _start(self) -> None:
        last = ""
        for _attempt in range(10):
            self.starts += 1
            self._log = self.log_dir / f"load-worker-{self.starts}.log"
            to_child_r, to_child_w = os.pipe()
            from_child_r, from_child_w = os.pipe()
            with open(self._log, "ab") as log:
                process = subprocess.Popen(
                    [sys.executable, "-c", _BOOT, str(Path(__file__).resolve().parent.parent), str(to_child_r),
                     str(from_child_w), str(self.memory_limit)],
                    pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    env=self.env)
            os.close(to_child_r)
            os.close(from_child_w)
            send = multiprocessing.connection.Connection(to_child_w, readable=False)
            recv = multiprocessing.connection.Connection(from_child_r, writable=False)
            status, detail = "failed", ""
            if recv.poll(120):
                try:
                    status, detail = recv.recv()
                except (EOFError, OSError):
                    detail = f"exit code {process.wait(10)}: {_log_tail(self._log)}"
            if status == "ready":
                self._process, self._send, self._recv = process, send, recv
                return
            last = detail
            send.close()
            recv.close()
            self._kill(process)
            time.sleep(2.0)
        raise RuntimeError(f"the load worker does not start: {last}")


# ----------------------------------------------------------------------------------------------
# Judging


def expected_tensors(ck: StoredCheckpoint, root_text: bytes) -> dict[str, tuple[str, tuple[int, ...], bytes]] | None:
    """The tensors a successful load of the mutated checkpoint must give: those its (possibly
    edited) manifest names, each with the values saved under its name (a tied name: those of the
    tensor it is tied to; every array still holds the tensor its record names, or loading
    fails). None where the edited manifest is not one a reader takes."""
    from zarr_device.errors import FormatError
    from zarr_device.torch.format import parse_manifest

    try:
        document = json.loads(root_text)
        manifest = parse_manifest(document["attributes"], "mutated")
        return {name: ck.tensors[manifest.stored(name)] for name in manifest.names()}
    except (ValueError, KeyError, TypeError, FormatError, RecursionError):
        return None


@dataclass(frozen=True)
class Judgement:
    outcome: str  # "same", "typed error", "different (allowed)", "violation"
    reason: str = ""


def judge(ck: StoredCheckpoint, mutation: Mutation, files_after: dict[str, bytes], result: ReadResult) -> Judgement:
    """One load's outcome under the rule (the module's docstring)."""
    kind = mutation.kind
    if result.status in ("crash", "hang"):
        return Judgement("violation", f"{result.status}: {result.message[:500]}")
    if result.status == "error":
        if not result.typed:
            return Judgement("violation", f"generic exception {result.error_type} at {result.where}: {result.message}")
        if kind == "delete_chunk" and not result.error_type.endswith("MissingChunkError"):
            return Judgement("violation", f"a deleted data file gave {result.error_type}, not MissingChunkError: "
                                          f"{result.message}")
        return Judgement("typed error")
    if kind in ("delete_chunk", "add_left_out", "make_directory", "empty_file"):
        return Judgement("violation", f"loaded although {mutation.detail}")
    root_text = files_after.get("zarr.json")
    expected = ck.tensors if root_text == ck.files["zarr.json"] else expected_tensors(ck, root_text or b"")
    loaded = result.value
    assert isinstance(loaded, dict)
    if expected is not None and loaded == expected:
        return Judgement("same")
    if kind in _WHOLE_FILE_KINDS:
        return Judgement("different (allowed)", "a whole data file replaced by another valid one")
    if kind in _DATA_BYTE_KINDS and not ck.checked:
        return Judgement("different (allowed)", "changed bytes of chunks without a crc32c")
    if expected is None:
        return Judgement("violation", "loaded a checkpoint whose manifest no reader takes")
    differ = sorted(set(loaded) ^ set(expected)) + sorted(n for n in set(loaded) & set(expected)
                                                           if loaded[n] != expected[n])
    return Judgement("violation", f"loaded other tensors or values: {differ[:5]}")


# ----------------------------------------------------------------------------------------------
# The loop


@dataclass
class CheckpointFuzzReport:
    seed: int
    cases: int = 0
    seconds: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)
    by_kind: Counter[tuple[str, str]] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    baseline_failures: list[str] = field(default_factory=list)

    def summary(self) -> str:
        kinds: dict[str, list[str]] = {}
        for (kind, outcome), n in sorted(self.by_kind.items()):
            kinds.setdefault(kind, []).append(f"{outcome} {n}")
        lines = [f"{self.cases} checkpoint cases in {self.seconds:.1f} s (seed {self.seed}): {dict(self.outcomes)}"]
        lines += [f"  {kind}: {', '.join(parts)}" for kind, parts in kinds.items()]
        return "\n".join(lines)


def run_checkpoint_fuzz(seed: int, iterations: int, *, first_iteration: int = 0, max_seconds: float | None = None,
                        timeout: float = 20.0, workdir: Path | None = None) -> CheckpointFuzzReport:
    """Saves the corpus, checks that every checkpoint loads unmutated, then runs the cases."""
    own_dir = workdir is None
    folder = Path(tempfile.mkdtemp(prefix="zd-checkpoint-fuzz-")) if workdir is None else workdir
    report = CheckpointFuzzReport(seed)
    start = time.monotonic()
    # No address-space limit: torch's import maps more than the array worker's 4 GiB, and no
    # mutation can make a load allocate more than the tensors saved (records fix every shape).
    runner = LoadRunner(folder, timeout, memory_limit=0)
    try:
        corpus = build_checkpoints(folder / "corpus")
        for ck in corpus:
            result = runner.read(ck.root, None)  # type: ignore[arg-type]  # the load takes no selection
            if result.status != "ok" or result.value != ck.tensors:
                report.baseline_failures.append(
                    f"{ck.name}: {result.status} {result.error_type} {result.message[:300]}")
        if report.baseline_failures:
            return report
        scratch = folder / "scratch"
        scratch.mkdir(exist_ok=True)
        for iteration in range(first_iteration, first_iteration + iterations):
            if max_seconds is not None and time.monotonic() - start > max_seconds:
                break
            case = draw_case(seed, iteration, corpus)
            root = scratch / f"case-{iteration}"
            shutil.rmtree(root, ignore_errors=True)
            shutil.copytree(case.checkpoint.root, root)
            case.mutation.apply(root)
            after = read_files(root)
            verdict = judge(case.checkpoint, case.mutation, after, runner.read(root, None))  # type: ignore[arg-type]
            report.outcomes[verdict.outcome] += 1
            report.by_kind[(case.mutation.kind, verdict.outcome)] += 1
            if verdict.outcome == "violation":
                report.violations.append(
                    f"iteration {iteration} ({case.checkpoint.name}): {case.mutation.detail}\n  -> {verdict.reason}\n"
                    "  edits:\n    " + "\n    ".join(case.mutation.code()))
            shutil.rmtree(root)
            report.cases += 1
    finally:
        runner.close()
        report.seconds = time.monotonic() - start
        if own_dir:
            shutil.rmtree(folder, ignore_errors=True)
    return report
