"""Concurrent writers and readers of one array: threads (through one handle or many) and separate
processes writing different parts of the same chunk or shard lose none of each other's updates;
concurrent attribute changes all land; reads racing whole-shard rewrites see one version whole;
and a stateful model test (serial, threaded, two processes) agrees with NumPy bit for bit.

The other processes are two long-lived workers (crash_helpers.py ``serve``), so a concurrent step
costs a message rather than an interpreter start.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import crash_helpers as ch
import zarr_device as zd
from conftest import assert_bits_equal

zarr = pytest.importorskip("zarr")

Sel = tuple[Any, ...]

# The regression tests' array: one 64x64 shard of 64 inner chunks of 8x8.
SHAPE = (64, 64)
INNER = (8, 8)


def _inner_region(i: int) -> tuple[slice, slice]:
    r, c = divmod(i, SHAPE[1] // INNER[1])
    return slice(r * INNER[0], (r + 1) * INNER[0]), slice(c * INNER[1], (c + 1) * INNER[1])


def _lost_chunks(data: npt.NDArray[Any], expected: dict[int, int]) -> list[int]:
    """The inner chunks not holding the value written to them."""
    return [i for i, v in sorted(expected.items()) if not np.all(data[_inner_region(i)] == v)]


def _new_store(kind: str, tmp_path: Path) -> Any:
    return zd.MemoryStore() if kind == "memory" else zd.LocalStore(tmp_path / "store")


def _run_threads(n: int, target: Callable[[int], None]) -> None:
    """Runs target(0..n-1) on n threads released together; re-raises the first failure."""
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def run(t: int) -> None:
        try:
            barrier.wait()
            target(t)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


# ---------------------------------------------------------------------------------------------
# Worker processes


_WORKERS: list[ch.Worker] = []


def workers() -> list[ch.Worker]:
    """Two worker processes, started on first use and kept for the module."""
    if not _WORKERS:
        started = [ch.Worker(), ch.Worker()]  # both import at once
        _WORKERS.extend(w.wait_ready() for w in started)
    return _WORKERS


@pytest.fixture(scope="module", autouse=True)
def _close_workers() -> Iterator[None]:
    yield
    while _WORKERS:
        _WORKERS.pop().close()


def in_both(commands: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sends commands[p] to worker p, both at once, and returns both results."""
    pair = workers()
    for worker, command in zip(pair, commands):
        worker.send(command)
    answers = [worker.receive() for worker in pair]  # both, before either is checked
    return [ch.Worker.check(a) for a in answers]


def _sel_json(*sel: slice) -> list[list[int | None]]:
    return ch.selection_to_json(tuple(sel))


# ---------------------------------------------------------------------------------------------
# Lost updates: partial writes of one shard or chunk


@pytest.mark.parametrize("store_kind", ["local", "memory"])
@pytest.mark.parametrize("handles", ["one-handle", "handle-per-thread"])
def test_threads_writing_inner_chunks_of_one_shard_lose_nothing(
    store_kind: str, handles: str, tmp_path: Path
) -> None:
    """8 threads each write 8 distinct inner chunks of the same shard (each write a
    read-modify-write of the shard): every inner chunk holds its value afterwards."""
    store = _new_store(store_kind, tmp_path)
    for round_ in range(3):
        path = f"r{round_}"
        arr = zd.create(store, path=path, shape=SHAPE, dtype="int32", chunks=INNER, shards=SHAPE,
                        compressors=ch.ZSTD_CRC, fill_value=-1)
        expected = {i: round_ * 1000 + i for i in range(64)}

        def write(t: int) -> None:
            mine = arr if handles == "one-handle" else zd.open_array(store, path=path, mode="r+")
            for i in range(t, 64, 8):
                mine[_inner_region(i)] = expected[i]

        _run_threads(8, write)
        data = zd.open_array(store, path=path)[...]
        lost = _lost_chunks(data, expected)
        assert not lost, f"round {round_}: {len(lost)} of 64 inner chunks lost their update: {lost}"
        if store_kind == "local":
            by_zarr = np.asarray(zarr.open_array(str(tmp_path / "store" / path), mode="r")[...])
            np.testing.assert_array_equal(by_zarr, data)


def _handles_on_the_same_data(setup: str, root: Path) -> list[zd.Array]:
    """Handles on the array at root/g/a through separate store objects."""
    def native(at: Path, path: str) -> zd.Array:
        return zd.open_array(zd.LocalStore(at), path=path, mode="r+")

    def adapter(at: Path, path: str) -> zd.Array:
        return zd.open_array(zd.ZarrStoreAdapter(zarr.storage.LocalStore(str(at))), path=path, mode="r+")

    if setup == "local-stores-rooted-apart":
        return [native(root, "g/a"), native(root / "g", "a"), native(root / "g" / "a", "")]
    if setup == "adapters-rooted-apart":
        return [adapter(root, "g/a"), adapter(root / "g", "a")]
    return [native(root, "g/a"), adapter(root, "g/a")]  # "local-store-and-adapter"


@pytest.mark.parametrize("setup", ["local-stores-rooted-apart", "adapters-rooted-apart", "local-store-and-adapter"])
def test_threads_through_separate_store_objects_lose_nothing(setup: str, tmp_path: Path) -> None:
    """Threads writing inner chunks of one shard, and attributes, through handles from separate
    store objects on the same data (zd.LocalStore rooted at different levels; zarr-python
    LocalStores through ZarrStoreAdapter; both kinds at once): the store contract serialises
    threads of one process "through any store object on the same data", so nothing is lost."""
    root = tmp_path / "root"
    zd.create_group(root)
    zd.create_group(root / "g")
    zd.create(root, path="g/a", shape=SHAPE, dtype="int32", chunks=INNER, shards=SHAPE, compressors=ch.ZSTD_CRC,
              fill_value=-1)
    handles = _handles_on_the_same_data(setup, root)
    expected = {i: 5000 + i for i in range(64)}

    def write(t: int) -> None:
        mine = handles[t % len(handles)]
        for i in range(t, 64, 8):
            mine[_inner_region(i)] = expected[i]
        for j in range(5):
            mine.attrs[f"t{t}_{j}"] = j

    _run_threads(8, write)
    arr = zd.open_array(root / "g" / "a")
    lost = _lost_chunks(arr[...], expected)
    missing = sorted({f"t{t}_{j}" for t in range(8) for j in range(5)} - set(arr.attrs))
    assert not lost and not missing, (
        f"{len(lost)} of 64 inner chunks lost their update ({lost[:10]}); "
        f"{len(missing)} of 40 attributes lost ({missing[:10]})"
    )


@pytest.mark.parametrize("store_kind", ["local", "memory"])
@pytest.mark.parametrize("pattern", ["rows", "strided-columns"])
def test_threads_writing_parts_of_one_chunk_lose_nothing(store_kind: str, pattern: str, tmp_path: Path) -> None:
    """Unsharded: 8 threads (half through one shared handle, half through their own) update
    different parts of the same chunks (single rows, or columns t::8 across both chunks): no
    update is lost."""
    store = _new_store(store_kind, tmp_path)
    arr = zd.create(store, path="a", shape=SHAPE, dtype="int32", chunks=(32, 64), compressors="zstd", fill_value=-1)
    expected = np.full(SHAPE, -1, np.int32)
    for round_ in range(3):
        if pattern == "rows":
            parts = [[(r, round_ * 100 + r) for r in range(t, 64, 8)] for t in range(8)]
        else:
            parts = [[(t, round_ * 100 + t)] for t in range(8)]

        def write(t: int) -> None:
            mine = arr if t % 2 == 0 else zd.open_array(store, path="a", mode="r+")
            for where, value in parts[t]:
                if pattern == "rows":
                    mine[where] = np.arange(64, dtype=np.int32) + value
                else:
                    for block in range(4):  # 16 rows a write, in chunks every thread writes
                        mine[block * 16:(block + 1) * 16, where::8] = value + block

        _run_threads(8, write)
        for t in range(8):
            for where, value in parts[t]:
                if pattern == "rows":
                    expected[where] = np.arange(64, dtype=np.int32) + value
                else:
                    for block in range(4):
                        expected[block * 16:(block + 1) * 16, where::8] = value + block
        data = zd.open_array(store, path="a")[...]
        bad = np.argwhere(data != expected)
        assert bad.size == 0, f"round {round_}: {len(bad)} elements lost their update, first at {bad[0]}"


def test_two_processes_writing_alternate_inner_chunks_lose_nothing(tmp_path: Path) -> None:
    """Two processes write alternate inner chunks of one shard, ten times over (640 inner chunks):
    none is lost."""
    lost_total: list[tuple[int, int]] = []
    for trial in range(10):
        path = tmp_path / f"t{trial}"
        zd.create(path, shape=SHAPE, dtype="int32", chunks=INNER, shards=SHAPE, compressors=ch.ZSTD_CRC,
                  fill_value=-1)
        expected = {i: trial * 1000 + i for i in range(64)}
        in_both([
            {"op": "writes", "path": str(path),
             "writes": [{"sel": _sel_json(*_inner_region(i)), "value": expected[i]} for i in range(p, 64, 2)]}
            for p in range(2)
        ])
        lost_total += [(trial, i) for i in _lost_chunks(zd.open_array(path)[...], expected)]
    assert not lost_total, f"{len(lost_total)} of 640 inner chunks lost their update: {lost_total[:20]}"


def test_two_processes_writing_rows_of_one_chunk_lose_nothing(tmp_path: Path) -> None:
    """Unsharded: two processes write alternate rows of one chunk, one row a write: every row
    lands."""
    for trial in range(5):
        path = tmp_path / f"t{trial}"
        zd.create(path, shape=SHAPE, dtype="int32", chunks=SHAPE, compressors="zstd", fill_value=-1)
        in_both([
            {"op": "writes", "path": str(path),
             "writes": [{"sel": _sel_json(slice(r, r + 1), slice(0, 64)), "value": trial * 100 + r}
                        for r in range(p, 64, 2)]}
            for p in range(2)
        ])
        data = zd.open_array(path)[...]
        lost = [r for r in range(64) if not np.all(data[r] == trial * 100 + r)]
        assert not lost, f"trial {trial}: rows {lost} lost their update"


# ---------------------------------------------------------------------------------------------
# Attributes


@pytest.mark.parametrize("store_kind", ["local", "memory"])
def test_threads_updating_attributes_all_land(store_kind: str, tmp_path: Path) -> None:
    """8 threads set their own attribute keys (one by one and by update) on one array and one
    group, half through shared handles, half through their own, which also set and delete a key:
    every key lands, every deleted key is gone, the attributes there before stay, the data is
    untouched."""
    store = _new_store(store_kind, tmp_path)
    group = zd.create_group(store, attributes={"init": "g"})
    arr = group.create_array("a", shape=(16,), dtype="int16", chunks=(4,), attributes={"init": "a"})
    arr[...] = np.arange(16, dtype=np.int16)

    def update(t: int) -> None:
        nodes: list[zd.Array | zd.Group]
        if t % 2 == 0:
            nodes = [arr, group]
        else:
            nodes = [zd.open_array(store, path="a", mode="r+"), zd.open_group(store, mode="r+")]
        for j in range(6):
            for node in nodes:
                node.attrs[f"t{t}_{j}"] = [t, j]
        for node in nodes:
            node.attrs.update({f"u{t}_a": t, f"u{t}_b": {"t": t}})
            if t % 2:  # (deleting through a shared handle: the next test)
                node.attrs[f"tmp{t}"] = t
                del node.attrs[f"tmp{t}"]

    _run_threads(8, update)
    for name, init in (("a", "a"), ("", "g")):
        expected: dict[str, Any] = {"init": init}
        for t in range(8):
            expected.update({f"t{t}_{j}": [t, j] for j in range(6)})
            expected.update({f"u{t}_a": t, f"u{t}_b": {"t": t}})
        node = zd.open(store, path=name)
        got = node.attrs.asdict()
        missing = sorted(set(expected) - set(got))
        assert got == expected, f"node {name!r}: missing {missing}, extra {sorted(set(got) - set(expected))}"
    np.testing.assert_array_equal(zd.open_array(store, path="a")[...], np.arange(16, dtype=np.int16))
    if store_kind == "local":
        assert zarr.open_array(str(tmp_path / "store" / "a"), mode="r").attrs.asdict() == zd.open_array(
            store, path="a"
        ).attrs.asdict()


@pytest.mark.parametrize("store_kind", ["local", "memory"])
def test_threads_sharing_a_handle_can_delete_keys_they_set(store_kind: str, tmp_path: Path) -> None:
    """4 threads share one array handle; each sets its own key and deletes it again, many times
    (enough rounds to take well under a second): no delete raises KeyError for the key the thread
    has just set through that handle, and no key is left behind."""
    store = _new_store(store_kind, tmp_path)
    arr = zd.create(store, path="a", shape=(4,), dtype="uint8", attributes={"init": 1})
    rounds = 100 if store_kind == "local" else 2000
    failures: list[str] = []

    def set_and_delete(t: int) -> None:
        for j in range(rounds):
            arr.attrs[f"tmp{t}"] = j
            try:
                del arr.attrs[f"tmp{t}"]
            except KeyError:
                failures.append(f"thread {t}, round {j}")

    _run_threads(4, set_and_delete)
    stored = zd.open_array(store, path="a").attrs.asdict()
    assert not failures, (
        f"{len(failures)} of {4 * rounds} deletes raised KeyError for a key just set through the same handle "
        f"({failures[:5]}); stored afterwards: {stored}"
    )
    assert stored == {"init": 1}


def test_two_processes_and_a_thread_updating_attributes_all_land(tmp_path: Path) -> None:
    """Two processes and the test itself set (and delete) their own keys on one array and one
    group at the same time: all keys are there at the end, deleted ones are gone."""
    root = tmp_path / "g"
    group = zd.create_group(root, attributes={"init": 1})
    arr = group.create_array("a", shape=(8,), dtype="uint8", attributes={"init": 2})
    for node_name, node in (("array", arr), ("group", group)):
        path = str(root / "a") if node_name == "array" else str(root)
        pair = workers()
        for p, worker in enumerate(pair):
            worker.send({"op": "attrs", "path": path, "node": node_name,
                         "set": {f"p{p}_{j}": j for j in range(15)}, "delete": [f"p{p}_0"]})
        for j in range(15):
            node.attrs[f"parent_{j}"] = j
        answers = [worker.receive() for worker in pair]
        for answer in answers:
            ch.Worker.check(answer)
    for node_name, init in (("array", 2), ("group", 1)):
        expected = {"init": init} | {f"parent_{j}": j for j in range(15)}
        expected |= {f"p{p}_{j}": j for p in range(2) for j in range(1, 15)}
        node = zd.open_array(root / "a") if node_name == "array" else zd.open_group(root)
        got = node.attrs.asdict()
        assert got == expected, (
            f"{node_name}: missing {sorted(set(expected) - set(got))}, extra {sorted(set(got) - set(expected))}"
        )
        by_zarr = (zarr.open_array(str(root / "a"), mode="r") if node_name == "array"
                   else zarr.open_group(str(root), mode="r")).attrs.asdict()
        assert by_zarr == expected


# ---------------------------------------------------------------------------------------------
# Reads racing whole-shard rewrites

VERSIONS = 6


def _check_versions(block: npt.NDArray[np.int32], sel: tuple[slice, slice],
                    versions: list[npt.NDArray[np.int32]]) -> str | None:
    """None when ``block`` is ``versions[k][sel]`` for one k, or all the fill value (-1), else
    what is wrong."""
    if np.all(block == -1):
        return None
    k = int(block.flat[0]) >> 20
    if not 0 <= k < len(versions):
        return f"{sel}: first element {int(block.flat[0])} is from no version"
    if not np.array_equal(block, versions[k][sel]):
        mixed = sorted({int(v) >> 20 for v in np.unique(block)})
        return f"{sel}: a mix of versions {mixed}"
    return None


@pytest.mark.parametrize("io", ["buffered", "direct"])
@pytest.mark.parametrize("writer", ["process", "thread"])
def test_reads_during_whole_shard_rewrites_see_one_version(writer: str, io: str, tmp_path: Path) -> None:
    """While another process (or thread) rewrites a whole shard again and again with versions
    that compress to different sizes, or with the fill value (removing it), partial reads of its
    inner chunks (through the page cache or around it) never fail (checksum, decoding) and always
    return one whole version, or the fill value."""
    path = tmp_path / "a"
    versions = [ch.version_data(k, SHAPE) for k in range(VERSIONS)]
    arr = zd.create(path, shape=SHAPE, dtype="int32", chunks=INNER, shards=SHAPE, compressors=ch.ZSTD_CRC,
                    fill_value=-1)
    arr[...] = versions[0]
    stop = tmp_path / "stop"
    rewrites: list[int] = []
    thread: threading.Thread | None = None
    if writer == "process":
        worker = workers()[0]
        worker.send({"op": "rewrite_loop", "path": str(path), "versions": VERSIONS, "stop": str(stop)})
        assert worker.receive().get("started"), "the writer did not start"
    else:
        def rewrite() -> None:
            rewrites.append(ch.rewrite_versions(zd.open_array(path, mode="r+"), VERSIONS, stop.exists))

        thread = threading.Thread(target=rewrite)
        thread.start()
    rng = random.Random(f"torn-{writer}-{io}")
    reader = zd.open_array(zd.LocalStore(path, io=io))  # type: ignore[arg-type]
    problems: list[str] = []
    reads = 0
    seen: set[int] = set()
    deadline = time.monotonic() + 1.0
    try:
        while time.monotonic() < deadline:
            kind = reads % 3
            if kind == 0:  # one inner chunk
                sel = _inner_region(rng.randrange(64))
            elif kind == 1:  # 2x2 inner chunks
                r, c = rng.randrange(7) * 8, rng.randrange(7) * 8
                sel = (slice(r, r + 16), slice(c, c + 16))
            else:  # any rectangle
                r0, c0 = rng.randrange(64), rng.randrange(64)
                sel = (slice(r0, rng.randrange(r0, 64) + 1), slice(c0, rng.randrange(c0, 64) + 1))
            reads += 1
            try:
                block = reader[sel]
            except Exception as e:  # noqa: BLE001 - counted, reported below
                problems.append(f"{sel}: {type(e).__name__}: {e}")
                continue
            seen.add(-1 if np.all(block == -1) else int(block.flat[0]) >> 20)
            problem = _check_versions(block, sel, versions)
            if problem:
                problems.append(problem)
    finally:
        stop.touch()
        if thread is not None:
            thread.join()
        else:
            rewrites.append(workers()[0].result()["count"])
    assert not problems, f"{len(problems)} of {reads} reads went wrong, e.g. {problems[:5]}"
    assert rewrites[0] >= 20 and len(seen) >= 3, (
        f"too little overlap to test anything: {rewrites[0]} rewrites, versions seen {sorted(seen)}"
    )
    final = zd.open_array(path)[...]
    assert _check_versions(final, (slice(None), slice(None)), versions) is None


# ---------------------------------------------------------------------------------------------
# Stateful model tests

SM_SHAPE = (16, 24)
SM_SHARDS = (8, 12)
SM_CHUNKS = (4, 4)
SM_FILL = -7

ATTR_KEYS = st.sampled_from(["a", "b", "c", "d"])
JSON_VALUES = st.one_of(
    st.integers(-(2**31), 2**31), st.booleans(), st.none(), st.text(max_size=6),
    st.lists(st.integers(-100, 100), max_size=3),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
)
VALUE_SPECS = st.tuples(st.sampled_from(["fill", "scalar", "random", "sparse"]), st.integers(0, 2**32 - 1))


def _axis_selections(n: int) -> st.SearchStrategy[Any]:
    bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
    return st.one_of(
        st.integers(-n, n - 1),
        st.builds(slice, bound, bound, st.one_of(st.none(), st.integers(1, 5))),
    )


def selections(shape: tuple[int, ...] = SM_SHAPE) -> st.SearchStrategy[Sel]:
    """Basic selections: per axis an int or a slice (any bounds, steps 1-5), sometimes with an
    Ellipsis standing for the last axes."""
    full = st.tuples(*(_axis_selections(n) for n in shape))
    return st.one_of(full, full.map(lambda s: s[:1] + (Ellipsis,)), st.just((Ellipsis,)))


def make_values(spec: tuple[str, int], shape: tuple[int, ...]) -> Any:
    kind, seed = spec
    rng = np.random.default_rng(seed)
    if kind == "fill":
        return SM_FILL
    if kind == "scalar":
        return int(rng.integers(-100, 100))
    values = rng.integers(-(2**31), 2**31, shape, dtype=np.int32)
    if kind == "sparse":  # mostly the fill value: chunks come and go
        values[rng.random(shape) < 0.9] = SM_FILL
    return values


def _grid_regions(block: tuple[int, int]) -> list[ch.Selection]:
    return [ch.chunk_region(c, block, SM_SHAPE) for c in ch.chunk_grid(SM_SHAPE, block)]


class _ModelMachine(RuleBasedStateMachine):
    """One sharded array (zstd + crc32c inner chunks, a fill value) and its NumPy model; the
    rules every variant shares: attribute changes, reads, reopening."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="zd-model-")
        self.path = os.path.join(self.dir, "a")
        self.arr = zd.create(self.path, shape=SM_SHAPE, dtype="int32", chunks=SM_CHUNKS, shards=SM_SHARDS,
                             compressors=ch.ZSTD_CRC, fill_value=SM_FILL, attributes={"init": True})
        self.model = np.full(SM_SHAPE, SM_FILL, dtype=np.int32)
        self.attrs: dict[str, Any] = {"init": True}

    def apply(self, sel: Sel, values: Any) -> None:
        self.model[sel] = values

    @rule(key=ATTR_KEYS, value=JSON_VALUES)
    def set_attribute(self, key: str, value: Any) -> None:
        self.arr.attrs[key] = value
        self.attrs[key] = value

    @rule(changes=st.dictionaries(ATTR_KEYS, JSON_VALUES, max_size=3))
    def update_attributes(self, changes: dict[str, Any]) -> None:
        self.arr.attrs.update(changes)
        self.attrs.update(changes)

    @rule(key=ATTR_KEYS)
    def delete_attribute(self, key: str) -> None:
        self.arr.attrs.refresh()
        if key in self.attrs:
            del self.arr.attrs[key]
            del self.attrs[key]
        else:
            with pytest.raises(KeyError):
                del self.arr.attrs[key]

    @rule(attrs=st.dictionaries(ATTR_KEYS, JSON_VALUES, max_size=2))
    def put_attributes(self, attrs: dict[str, Any]) -> None:
        self.arr.attrs.put({"init": True, **attrs})
        self.attrs = {"init": True, **attrs}

    @rule(sel=selections())
    def read(self, sel: Sel) -> None:
        assert_bits_equal(self.arr[sel], self.model[sel], f"read {sel}")

    @rule()
    def reopen(self) -> None:
        self.arr = zd.open_array(self.path, mode="r+")
        assert self.arr.attrs.asdict() == self.attrs

    @invariant()
    def attributes_match(self) -> None:
        self.arr.attrs.refresh()
        assert self.arr.attrs.asdict() == self.attrs

    def teardown(self) -> None:
        try:
            assert_bits_equal(zd.open_array(self.path)[...], self.model, "final read")
            by_zarr = zarr.open_array(self.path, mode="r")
            assert_bits_equal(np.asarray(by_zarr[...]), self.model, "final read by zarr-python")
            assert by_zarr.attrs.asdict() == self.attrs
            listed = zd.LocalStore(self.dir).handle.list_dir("a")
            assert set(listed) <= {"c", "zarr.json"}, f"the array's listing shows {listed}"
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class SerialMachine(_ModelMachine):
    """(a) One writer: random selections, whole inner chunks and whole shards."""

    @rule(sel=selections(), spec=VALUE_SPECS)
    def write(self, sel: Sel, spec: tuple[str, int]) -> None:
        values = make_values(spec, self.model[sel].shape)
        self.arr[sel] = values
        self.apply(sel, values)

    @rule(data=st.data(), block=st.sampled_from([SM_CHUNKS, SM_SHARDS]), spec=VALUE_SPECS)
    def write_whole(self, data: st.DataObject, block: tuple[int, int], spec: tuple[str, int]) -> None:
        sel = data.draw(st.sampled_from(_grid_regions(block)))
        values = make_values(spec, self.model[sel].shape)
        self.arr[sel] = values
        self.apply(sel, values)


def _disjoint_selections(data: st.DataObject, n: int) -> list[Sel]:
    """n selections in disjoint bands of one axis (cut anywhere: through chunks and shards)."""
    axis = data.draw(st.integers(0, 1))
    length = SM_SHAPE[axis]
    cuts = sorted(data.draw(st.sets(st.integers(1, length - 1), min_size=n - 1, max_size=n - 1)))
    bounds = [0, *cuts, length]
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        start = data.draw(st.integers(lo, hi - 1))
        along = slice(start, hi, data.draw(st.integers(1, 3)))
        other = data.draw(_axis_selections(SM_SHAPE[1 - axis]))
        out.append((along, other) if axis == 0 else (other, along))
    return out


class ThreadedMachine(_ModelMachine):
    """(b) Every write step is made by several threads at once (through one shared handle or one
    handle each): disjoint selections, or overlapping ones all writing the same target values, so
    that any order gives one result; attribute steps likewise with distinct keys."""

    def __init__(self) -> None:
        super().__init__()
        self.handles = [zd.open_array(self.path, mode="r+") for _ in range(4)]

    def _writers(self, shared: bool, n: int) -> list[zd.Array]:
        return [self.arr] * n if shared else self.handles[:n]

    @rule(data=st.data(), n=st.integers(2, 4), shared=st.booleans(), specs=st.lists(VALUE_SPECS, min_size=4, max_size=4))
    def write_disjoint(self, data: st.DataObject, n: int, shared: bool, specs: list[tuple[str, int]]) -> None:
        sels = _disjoint_selections(data, n)
        values = [make_values(spec, self.model[sel].shape) for sel, spec in zip(sels, specs)]
        writers = self._writers(shared, n)

        def write(t: int) -> None:
            writers[t][sels[t]] = values[t]

        _run_threads(n, write)
        for sel, v in zip(sels, values):
            self.apply(sel, v)

    @rule(sels=st.lists(selections(), min_size=2, max_size=4), shared=st.booleans(), spec=VALUE_SPECS)
    def write_overlapping_same_target(self, sels: list[Sel], shared: bool, spec: tuple[str, int]) -> None:
        target = np.broadcast_to(np.asarray(make_values(spec, SM_SHAPE), dtype=np.int32), SM_SHAPE)
        writers = self._writers(shared, len(sels))

        def write(t: int) -> None:
            writers[t][sels[t]] = target[sels[t]]

        _run_threads(len(sels), write)
        for sel in sels:
            self.apply(sel, target[sel])

    @rule(n=st.integers(2, 4), shared=st.booleans(), value=JSON_VALUES, sel=selections(), spec=VALUE_SPECS)
    def attributes_and_data_at_once(self, n: int, shared: bool, value: Any, sel: Sel, spec: tuple[str, int]) -> None:
        """Thread 0 writes data while the others set their own attribute keys."""
        values = make_values(spec, self.model[sel].shape)
        writers = self._writers(shared, n)

        def work(t: int) -> None:
            if t == 0:
                writers[0][sel] = values
            else:
                writers[t].attrs[f"thread{t}"] = value

        _run_threads(n, work)
        self.apply(sel, values)
        self.attrs.update({f"thread{t}": value for t in range(1, n)})


class TwoProcessMachine(_ModelMachine):
    """(c) Write steps are made by two processes at once, each writing random selections inside
    its own random set of inner chunks (drawn from a seed); attribute steps set keys of their own
    in both processes at once."""

    @rule(seed=st.integers(0, 2**32 - 1))
    def write_in_two_processes(self, seed: int) -> None:
        in_both([{"op": "plan", "path": self.path, "seed": seed, "proc": p, "nprocs": 2} for p in range(2)])
        for p in range(2):
            for sel, values in ch.plan_writes(seed, p, 2, SM_SHAPE, SM_CHUNKS, SM_FILL):
                self.apply(sel, values)
        assert_bits_equal(zd.open_array(self.path)[...], self.model, f"after the processes' writes (seed {seed})")

    @rule(value=JSON_VALUES)
    def attributes_in_two_processes(self, value: Any) -> None:
        in_both([{"op": "attrs", "path": self.path, "node": "array", "set": {f"proc{p}": value}} for p in range(2)])
        self.attrs.update({"proc0": value, "proc1": value})


_COMMON = dict(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
SerialMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=40, **_COMMON)  # type: ignore[arg-type]
ThreadedMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=30, **_COMMON)  # type: ignore[arg-type]
TwoProcessMachine.TestCase.settings = settings(max_examples=15, stateful_step_count=25, **_COMMON)  # type: ignore[arg-type]

TestSerialModel = SerialMachine.TestCase
TestThreadedModel = ThreadedMachine.TestCase
TestTwoProcessModel = TwoProcessMachine.TestCase
