"""Code that runs in other processes for the concurrency and crash-safety tests, and the data
those processes write (computed the same way by the test that checks it).

Two ways in:

- ``python crash_helpers.py serve``: a worker that reads one JSON command a line on stdin and
  answers one JSON line on stdout (``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``).
  test_concurrent_writers.py keeps two of them for the whole module, so that each concurrent
  step costs a message, not an interpreter start.
- :func:`crash_child`: the body of a child that writes in a loop until it is killed with SIGKILL.
  test_crash_safety.py has a worker fork it (``{"op": "fork"}``): the worker has imported numpy
  and zarr_device but never run the engine, so a child starts in a millisecond, with no engine
  thread inherited. The child appends its progress to a file, one ``write(2)`` a line, so nothing
  it reported is lost with it.
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import zarr_device as zd

Selection = tuple[slice, ...]
Write = tuple[Selection, "npt.NDArray[Any]"]

ZSTD_CRC: list[dict[str, Any]] = [
    {"name": "zstd", "configuration": {"level": 1, "checksum": False}},
    {"name": "crc32c"},
]


# ---------------------------------------------------------------------------------------------
# Selections as JSON


def selection_to_json(sel: Selection) -> list[list[int | None]]:
    return [[s.start, s.stop, s.step] for s in sel]


def selection_from_json(data: list[list[int | None]]) -> Selection:
    return tuple(slice(a, b, c) for a, b, c in data)


# ---------------------------------------------------------------------------------------------
# Data whose every version is known


@functools.lru_cache(maxsize=64)
def _base_block(index: int, n: int) -> npt.NDArray[np.uint32]:
    block = np.random.default_rng([7919, index, n]).integers(0, 2**32, n, dtype=np.uint32)
    block.flags.writeable = False
    return block


def generation_data(gen: int, index: int, n: int) -> npt.NDArray[np.uint32]:
    """The n uint32 values chunk ``index`` holds in generation ``gen`` (gen >= 1): incompressible
    (so writes are as large as the chunk), different in every generation and never all zero (the
    fill value of the crash-test arrays)."""
    mix = np.uint32((gen * 2654435761 + 40503) & 0xFFFFFFFF)
    out = _base_block(index, n) ^ mix
    out[0] = np.uint32(gen)  # never 0: a chunk is never all fill value
    return out


def version_data(k: int, shape: tuple[int, ...]) -> npt.NDArray[np.int32]:
    """Version ``k`` of a whole array for the torn-read test: every element's high bits are k, its
    low bits noise whose width changes with k, so the versions compress to different sizes and a
    shard's inner chunks sit at different offsets in each."""
    n = math.prod(shape)
    bits = (2, 6, 12, 18)[k % 4]
    noise = np.random.default_rng([104729, k]).integers(0, 1 << bits, n, dtype=np.int32)
    return ((np.int32(k) << np.int32(20)) | noise).reshape(shape)


def rewrite_versions(arr: zd.Array, n_versions: int, stopped: Callable[[], bool]) -> int:
    """Rewrites the whole array until ``stopped()``: versions 0, 1, ... in turn, and every third
    time the fill value (which removes the stored chunks). Returns how many rewrites it made."""
    versions = [version_data(k, arr.shape) for k in range(n_versions)]
    count = 0
    while not stopped():
        arr[...] = arr.fill_value if count % 3 == 2 else versions[count % n_versions]
        count += 1
    return count


def blob(gen: int) -> str:
    """A large attribute value tied to its generation (metadata rewrites of ~256 KiB)."""
    return (f"{gen}:" * 60000)[: 256 * 1024]


# ---------------------------------------------------------------------------------------------
# Random writes to disjoint sets of inner chunks


def chunk_region(index: tuple[int, ...], chunks: tuple[int, ...], shape: tuple[int, ...]) -> Selection:
    return tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, chunks, shape))


def chunk_grid(shape: tuple[int, ...], chunks: tuple[int, ...]) -> list[tuple[int, ...]]:
    grid = [math.ceil(s / c) for s, c in zip(shape, chunks)]
    return [tuple(int(v) for v in i) for i in np.ndindex(*grid)]


def assign_chunks(seed: int, nprocs: int, shape: tuple[int, ...], chunks: tuple[int, ...]) -> list[list[tuple[int, ...]]]:
    """A random partition of the inner chunks into ``nprocs`` disjoint sets (and some left to
    nobody), drawn from ``seed``."""
    rng = np.random.default_rng([seed, 0])
    owners = rng.integers(0, nprocs + 1, len(chunk_grid(shape, chunks)))
    return [[c for c, o in zip(chunk_grid(shape, chunks), owners) if o == p] for p in range(nprocs)]


def plan_writes(
    seed: int, proc: int, nprocs: int, shape: tuple[int, ...], chunks: tuple[int, ...], fill: int
) -> list[Write]:
    """The writes process ``proc`` makes: each a random rectangle (steps 1 or 2) inside one of its
    own inner chunks, or the whole chunk, with random values or the fill value."""
    mine = assign_chunks(seed, nprocs, shape, chunks)[proc]
    rng = np.random.default_rng([seed, 1, proc])
    writes: list[Write] = []
    if not mine:
        return writes
    for _ in range(int(rng.integers(4, 16))):
        region = chunk_region(mine[int(rng.integers(len(mine)))], chunks, shape)
        if rng.random() < 0.3:
            sel = region
        else:
            parts = []
            for r in region:
                lo = int(rng.integers(r.start, r.stop))
                hi = int(rng.integers(lo + 1, r.stop + 1))
                parts.append(slice(lo, hi, int(rng.integers(1, 3))))
            sel = tuple(parts)
        out_shape = tuple(len(range(s.start, s.stop, s.step or 1)) for s in sel)
        if rng.random() < 0.2:
            values = np.full(out_shape, fill, dtype=np.int32)
        else:
            values = rng.integers(-1000, 1000, out_shape, dtype=np.int32)
        writes.append((sel, values))
    return writes


# ---------------------------------------------------------------------------------------------
# The worker


def _open(path: str, node: str) -> Any:
    return zd.open_group(path, mode="r+") if node == "group" else zd.open_array(path, mode="r+")


def _serve_one(command: dict[str, Any], reply: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    op = command["op"]
    if op == "writes":
        arr = zd.open_array(command["path"], mode="r+")
        for w in command["writes"]:
            arr[selection_from_json(w["sel"])] = w["value"]
        return {"n": len(command["writes"])}
    if op == "plan":
        arr = zd.open_array(command["path"], mode="r+")
        writes = plan_writes(
            command["seed"], command["proc"], command["nprocs"], arr.shape, arr.chunks, int(arr.fill_value)
        )
        for sel, values in writes:
            arr[sel] = values
        return {"n": len(writes)}
    if op == "attrs":
        node = _open(command["path"], command["node"])
        for key, value in command["set"].items():
            node.attrs[key] = value
        for key in command.get("delete", []):
            del node.attrs[key]
        return {}
    if op == "rewrite_loop":
        # Rewrites the whole array with version after version until the stop file appears.
        arr = zd.open_array(command["path"], mode="r+")
        reply({"started": True})
        return {"count": rewrite_versions(arr, command["versions"], lambda: os.path.exists(command["stop"]))}
    if op == "fork":
        # A crash child, forked from this process (which has only imported the engine, never run
        # it) so that it starts in a millisecond. The data it writes is made here first, once.
        crash_op = command["crash_op"]
        full_data(crash_op, lambda i: 1)
        pid = os.fork()
        if pid == 0:
            try:
                devnull = os.open(os.devnull, os.O_RDWR)
                os.dup2(devnull, 0)
                os.dup2(devnull, 1)
                crash_child(crash_op, command["root"], command["progress"], command["base"])
            finally:
                os._exit(1)
        return {"pid": pid}
    if op == "fork_call":
        # Any child: module.function(**kwargs), forked as "fork" forks (the module is imported
        # here first, once, so the child starts in a millisecond with everything loaded). The
        # module must not run the engine at import: its threads would not survive the fork.
        function = getattr(importlib.import_module(command["module"]), command["function"])
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                devnull = os.open(os.devnull, os.O_RDWR)
                os.dup2(devnull, 0)
                os.dup2(devnull, 1)
                function(**command["kwargs"])
                code = 0
            finally:
                os._exit(code)
        return {"pid": pid}
    if op == "wait":
        _, status = os.waitpid(command["pid"], 0)
        return {
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        }
    raise ValueError(f"unknown op {op!r}")


def serve() -> None:
    """Answers the commands read from stdin until it closes."""

    def reply(message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    reply({"ready": True, "pid": os.getpid()})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            result = _serve_one(json.loads(line), reply)
            reply({"ok": True, **result})
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the test
            reply({"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()})


class Worker:
    """The test's end of a ``serve`` worker: a separate Python process taking JSON commands."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._ready = False

    def wait_ready(self) -> Worker:
        """Waits for the worker's imports to finish (start several workers, then wait)."""
        if not self._ready:
            self.receive(120)
            self._ready = True
        return self

    def send(self, command: dict[str, Any]) -> None:
        self.wait_ready()
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def receive(self, timeout: float = 120) -> dict[str, Any]:
        """The next message; fails when none comes within ``timeout`` seconds."""
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"worker {self.process.pid} sent nothing in {timeout} s")
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.process.pid} exited ({self.process.wait()})")
        message: dict[str, Any] = json.loads(line)
        return message

    def result(self, timeout: float = 120) -> dict[str, Any]:
        """The answer to the last command, which must have succeeded."""
        return self.check(self.receive(timeout))

    @staticmethod
    def check(message: dict[str, Any]) -> dict[str, Any]:
        if not message.get("ok"):
            raise AssertionError(f"worker failed: {message.get('error')}\n{message.get('traceback')}")
        return message

    def request(self, command: dict[str, Any], timeout: float = 120) -> dict[str, Any]:
        self.send(command)
        return self.result(timeout)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


# ---------------------------------------------------------------------------------------------
# Crash-safety geometry and the child that is killed

# op -> (shape, inner chunks, shards or None, compressors)
CRASH_GEOMETRY: dict[str, tuple[tuple[int, int], tuple[int, int], tuple[int, int] | None, Any]] = {
    "create": ((4, 262144), (1, 262144), None, None),  # 4 chunks of 1 MiB, stored raw
    "chunks": ((8, 262144), (1, 262144), None, None),  # 8 chunks of 1 MiB, stored raw
    "shards": ((512, 2048), (256, 256), (256, 2048), ZSTD_CRC),  # 2 shards of 8 chunks, 2 MiB each
    "partial": ((512, 2048), (256, 256), (256, 2048), ZSTD_CRC),
    "attrs": ((4, 262144), (1, 262144), None, None),
}


def never_written(index: int) -> bool:
    """The inner chunks a "partial" child never writes: they must stay the fill value."""
    return index % 5 == 3


def create_crash_array(path: str, op: str, attributes: dict[str, Any] | None = None) -> zd.Array:
    shape, chunks, shards, compressors = CRASH_GEOMETRY[op]
    return zd.create(
        path,
        shape=shape,
        dtype="uint32",
        chunks=chunks,
        shards=shards,
        compressors=compressors,
        fill_value=0,
        attributes=attributes,
        mode="w",
    )


def inner_chunks(op: str) -> list[tuple[int, Selection]]:
    """(flat index, region) of every inner chunk of the op's array."""
    shape, chunks, _, _ = CRASH_GEOMETRY[op]
    return [(i, chunk_region(c, chunks, shape)) for i, c in enumerate(chunk_grid(shape, chunks))]


def full_data(op: str, gen_of: Callable[[int], int]) -> npt.NDArray[np.uint32]:
    """The whole array when inner chunk i holds generation gen_of(i) (0: the fill value)."""
    shape, _, _, _ = CRASH_GEOMETRY[op]
    out = np.zeros(shape, dtype=np.uint32)
    for i, region in inner_chunks(op):
        g = gen_of(i)
        if g:
            size = math.prod(len(range(*s.indices(n))) for s, n in zip(region, shape))
            out[region] = generation_data(g, i, size).reshape(out[region].shape)
    return out


def shard_regions(op: str) -> list[Selection]:
    shape, _, shards, _ = CRASH_GEOMETRY[op]
    assert shards is not None
    return [chunk_region(c, shards, shape) for c in chunk_grid(shape, shards)]


def write_generation(op: str, root: str, gen: int, step: int) -> None:
    """What one generation of ``op`` writes (also used by the test for its follow-up write)."""
    if op == "create":
        arr = create_crash_array(os.path.join(root, f"a{gen}"), op, attributes={"gen": gen})
        arr[...] = full_data(op, lambda i: gen)
    elif op == "chunks":
        arr = zd.open_array(os.path.join(root, "a"), mode="r+")
        data = full_data(op, lambda i: gen)
        if step % 2 == 0:
            arr[...] = data  # every chunk at once, in parallel
        else:
            for _, region in inner_chunks(op):
                arr[region] = data[region]
    elif op == "shards":
        arr = zd.open_array(os.path.join(root, "a"), mode="r+")
        data = full_data(op, lambda i: gen)
        if step % 2 == 0:
            arr[...] = data
        else:
            for region in shard_regions(op):
                arr[region] = data[region]
    elif op == "partial":
        arr = zd.open_array(os.path.join(root, "a"), mode="r+")
        data = full_data(op, lambda i: gen)
        order = [c for c in inner_chunks(op) if not never_written(c[0])]
        rng = np.random.default_rng([gen, 3])
        for k in rng.permutation(len(order)):
            region = order[int(k)][1]
            arr[region] = data[region]  # one inner chunk: a read-modify-write of its shard
    elif op == "attrs":
        arr = zd.open_array(os.path.join(root, "a"), mode="r+")
        group = zd.open_group(root, mode="r+")
        kind = step % 3
        if kind == 0:
            arr.attrs.update({"gen": gen, "blob": blob(gen)})
        elif kind == 1:
            arr.attrs.put({"gen": gen, "blob": blob(gen), "fixed": "keep"})
        else:
            arr.attrs["tmp"] = gen
            arr.attrs.update({"gen": gen, "blob": blob(gen)})
            del arr.attrs["tmp"]
        group.attrs.update({"gen": gen, "blob": blob(gen)})
    else:
        raise ValueError(op)


def crash_child(op: str, root: str, progress: str, base_gen: int) -> None:
    """Writes generation after generation (base_gen + 1, + 2, ...) until killed, appending
    ``ready``, ``start G`` and ``done G`` lines to the progress file."""
    fd = os.open(progress, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def say(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    try:
        full_data(op, lambda i: 1)  # the random blocks (made by the forking worker already)
        say("ready")
        step = 0
        while True:
            gen = base_gen + 1 + step
            say(f"start {gen}")
            write_generation(op, root, gen, step)
            say(f"done {gen}")
            step += 1
    except BaseException:  # noqa: BLE001 - reported to the test through the progress file
        say("error " + traceback.format_exc().replace("\n", " | "))
        raise


def progress_writer(progress: str) -> Callable[[str], None]:
    """A child's way to report to the test: appends a line to the file in one ``write(2)``, so a
    line written before a SIGKILL is never lost or torn."""
    fd = os.open(progress, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def say(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    return say


def fork_and_kill(worker: Worker, command: dict[str, Any], progress: Path, after: str, delay: float) -> list[str]:
    """Has ``worker`` fork a child for ``command``, waits for a progress line starting with
    ``after``, SIGKILLs the child ``delay`` seconds later and returns its progress lines. Fails if
    the child reported an ``error`` line or ended other than by the kill (a child meant to be
    killed must not exit by itself)."""
    pid = worker.request(command)["pid"]
    try:
        deadline = time.monotonic() + 60
        while not (progress.exists() and any(line.startswith(after) for line in read_progress(str(progress)))):
            assert time.monotonic() < deadline, f"the child never reported {after!r}"
            time.sleep(0.001)
        time.sleep(delay)
    finally:
        os.kill(pid, signal.SIGKILL)
        ended = worker.request({"op": "wait", "pid": pid})
    lines = list(read_progress(str(progress)))
    errors = [line for line in lines if line.startswith("error")]
    assert not errors, f"the child failed before it was killed: {errors[0]}"
    assert ended["signal"] == signal.SIGKILL, f"the child ended with {ended}, not by SIGKILL"
    return lines


def fork_call_and_kill(
    worker: Worker, module: str, function: str, kwargs: dict[str, Any], progress: Path, after: str, delay: float
) -> list[str]:
    """:func:`fork_and_kill` of a child running ``module.function(**kwargs)``."""
    command = {"op": "fork_call", "module": module, "function": function, "kwargs": kwargs}
    return fork_and_kill(worker, command, progress, after, delay)


def read_progress(progress: str) -> Iterator[str]:
    with open(progress) as f:
        yield from (line.rstrip("\n") for line in f)


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        serve()
    else:
        raise SystemExit(f"usage: {sys.argv[0]} serve")
