"""Reading many arrays in one call (zd.read_many, Group.read): every result equals the array's own
read bit for bit, whatever mix of layouts, codecs and data types one call holds, on the host and
(marker ``gpu``) on a CUDA device; errors name the array; results fill given buffers in place."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import assert_bits_equal, lying_chunk_array

import zarr_device as zd

ZSTD_CRC = [{"name": "zstd"}, {"name": "crc32c"}]


def _flip_byte(path: Path, at: int) -> None:
    """Damages a stored chunk: one byte inverted."""
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def _run_threads(work: Callable[[int], None], count: int) -> None:
    """Runs ``work(0)`` ... ``work(count - 1)`` on threads of their own and waits for them all."""
    threads = [threading.Thread(target=work, args=(j,)) for j in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _mixed_arrays(root: Path) -> dict[str, zd.Array]:
    """Arrays of many layouts in one group: plain, zstd+crc32c, zstd alone, gzip, blosc, sharded,
    big-endian, F order, bfloat16, a never-written one and a 0-d one."""
    rng = np.random.default_rng(7)
    group = zd.create_group(root)
    specs: dict[str, dict[str, Any]] = {
        "plain": dict(shape=(40, 33), dtype="float32", chunks=(16, 16), compressors=None),
        "zstd_crc": dict(shape=(64, 32), dtype="int32", chunks=(8, 32), compressors=ZSTD_CRC),
        "zstd": dict(shape=(100,), dtype="uint16", chunks=(30,), compressors="zstd"),
        "gzip": dict(shape=(17, 5), dtype="float64", chunks=(4, 5), compressors="gzip"),
        "blosc": dict(shape=(50,), dtype="int8", chunks=(16,), compressors="blosc"),
        "sharded": dict(shape=(32, 24), dtype="float32", chunks=(4, 8), shards=(16, 24), compressors=ZSTD_CRC),
        "big_endian": dict(shape=(20,), dtype=">i4", chunks=(6,), compressors=ZSTD_CRC),
        "f_order": dict(shape=(9, 11), dtype="uint8", chunks=(4, 4), order="F"),
        "bf16": dict(shape=(12, 12), dtype="bfloat16", chunks=(5, 5), compressors=ZSTD_CRC),
        "empty": dict(shape=(10,), dtype="int64", chunks=(3,), fill_value=-5),
        "scalar": dict(shape=(), dtype="float32"),
    }
    arrays: dict[str, zd.Array] = {}
    for name, kwargs in specs.items():
        arr = group.create_array(name, **kwargs)
        if name != "empty":
            values = rng.integers(-100, 100, size=arr.shape).astype(arr.dtype)
            arr[...] = values
        arrays[name] = arr
    sub = group.create_group("sub")
    arrays["sub/inner"] = sub.create_array("inner", shape=(6,), dtype="int32", chunks=(4,))
    arrays["sub/inner"][...] = np.arange(6, dtype=np.int32)
    return arrays


def test_host_results_equal_each_arrays_own_read(tmp_path: Path) -> None:
    arrays = _mixed_arrays(tmp_path / "g.zarr")
    results = zd.read_many(arrays)
    assert set(results) == set(arrays)
    for name, arr in arrays.items():
        assert_bits_equal(results[name], arr[...], name)


def test_selections_lists_and_groups(tmp_path: Path) -> None:
    arrays = _mixed_arrays(tmp_path / "g.zarr")
    picked = zd.read_many({"a": (arrays["sharded"], (slice(3, 30, 4), 5)), "b": (arrays["zstd"], slice(None, None, 7))})
    assert_bits_equal(picked["a"], arrays["sharded"][3:30:4, 5], "a")
    assert_bits_equal(picked["b"], arrays["zstd"][::7], "b")
    by_path = zd.read_many([arrays["plain"], arrays["gzip"]])
    assert set(by_path) == {"plain", "gzip"}
    whole = zd.open_group(tmp_path / "g.zarr").read()
    assert set(whole) == set(arrays)
    assert_bits_equal(whole["sub/inner"], np.arange(6, dtype=np.int32), "sub/inner")


def test_out_fills_given_buffers_in_place(tmp_path: Path) -> None:
    arrays = _mixed_arrays(tmp_path / "g.zarr")
    buffer = np.empty((64, 32), dtype=np.int32)
    results = zd.read_many({"zstd_crc": arrays["zstd_crc"], "plain": arrays["plain"]}, out={"zstd_crc": buffer})
    assert results["zstd_crc"] is buffer
    assert_bits_equal(buffer, arrays["zstd_crc"][...], "zstd_crc")
    with pytest.raises(zd.UsageError, match="shape"):
        zd.read_many({"plain": arrays["plain"]}, out={"plain": np.empty((2, 2), np.float32)})
    with pytest.raises(zd.UsageError, match="not among"):
        zd.read_many({"plain": arrays["plain"]}, out={"other": buffer})


def test_torch_results_on_the_host(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    arrays = _mixed_arrays(tmp_path / "g.zarr")
    results = zd.read_many({"bf16": arrays["bf16"], "plain": arrays["plain"]}, like="torch")
    assert results["bf16"].dtype == torch.bfloat16
    assert_bits_equal(results["plain"].numpy(), arrays["plain"][...], "plain")


def test_an_error_names_the_array_and_chunk(tmp_path: Path) -> None:
    arrays = _mixed_arrays(tmp_path / "g.zarr")
    chunk = tmp_path / "g.zarr" / "zstd_crc" / "c" / "3" / "0"
    _flip_byte(chunk, 2)
    with pytest.raises(zd.ChecksumError, match=r"array 'zstd_crc'.*chunk 'zstd_crc/c/3/0'"):
        zd.read_many(arrays)


def test_bad_calls_are_usage_errors(tmp_path: Path) -> None:
    arrays = _mixed_arrays(tmp_path / "g.zarr")
    with pytest.raises(zd.UsageError, match="named"):
        zd.read_many([arrays["plain"], arrays["plain"]])
    with pytest.raises(zd.UsageError):
        zd.read_many({"x": "not an array"})  # type: ignore[dict-item]
    with pytest.raises(zd.UsageError):
        zd.read_many({"plain": arrays["plain"]}, like="cupy")
    assert zd.read_many({}) == {}


def test_iter_many_yields_every_array_once_on_the_host(tmp_path: Path) -> None:
    arrays = _mixed_arrays(tmp_path / "g.zarr")
    seen = dict(zd.iter_many(arrays))
    assert list(seen) == list(arrays)  # in the order given
    for name, arr in arrays.items():
        assert_bits_equal(seen[name], arr[...], name)
    target = np.empty((64, 32), dtype=np.int32)
    got = dict(zd.iter_many({"zstd_crc": arrays["zstd_crc"]}, out={"zstd_crc": target}))
    assert got["zstd_crc"] is target


# ----------------------------------------------------------------------------------------------
# On a CUDA device

N_GPUS = zd.cuda_device_count()
gpu = pytest.mark.skipif(N_GPUS == 0, reason="no CUDA device visible to zarr_device (or a build without CUDA)")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("gpu_decode", ["checked", "trusted", "off", "isolated"])
def test_device_results_equal_the_host_reads(tmp_path: Path, gpu_decode: str) -> None:
    torch = pytest.importorskip("torch")
    arrays = _mixed_arrays(tmp_path / "g.zarr")
    previous = zd.set_config(gpu_decode=gpu_decode)
    try:
        results = zd.read_many(arrays, device="cuda:0", like="torch")
    finally:
        zd.set_config(gpu_decode=previous.gpu_decode)
    for name, arr in arrays.items():
        tensor = results[name]
        assert tensor.device.type == "cuda"
        host = tensor.cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
        expected = np.ascontiguousarray(arr[...])
        assert host.tobytes() == expected.astype(expected.dtype.newbyteorder("=")).tobytes(), name


@pytest.mark.gpu
@gpu
def test_device_reads_fill_out_and_take_every_like(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    arrays = _mixed_arrays(tmp_path / "g.zarr")
    target = torch.empty((64, 32), dtype=torch.int32, device="cuda:0")
    results = zd.read_many({"zstd_crc": arrays["zstd_crc"], "plain": arrays["plain"]}, device="cuda:0", out={"zstd_crc": target})
    assert results["zstd_crc"] is target
    np.testing.assert_array_equal(target.cpu().numpy(), arrays["zstd_crc"][...])
    neutral = zd.read_many({"plain": arrays["plain"]}, device="cuda:0")["plain"]
    np.testing.assert_array_equal(torch.from_dlpack(neutral).cpu().numpy(), arrays["plain"][...])


@pytest.mark.gpu
@gpu
def test_device_read_errors_name_the_array(tmp_path: Path) -> None:
    arrays = _mixed_arrays(tmp_path / "g.zarr")
    chunk = tmp_path / "g.zarr" / "sharded" / "c" / "1" / "0"
    _flip_byte(chunk, 10)
    with pytest.raises(zd.CodecError, match="array 'sharded'"):
        zd.read_many(arrays, device="cuda:0", like="torch")
    # The engine is left whole: the next read works.
    del arrays["sharded"]
    assert len(zd.read_many(arrays, device="cuda:0", like="torch")) == len(arrays)


@pytest.mark.gpu
@gpu
def test_device_reads_from_several_threads(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    arrays = _mixed_arrays(tmp_path / "g.zarr")
    expected = {name: np.ascontiguousarray(arr[...]) for name, arr in arrays.items() if arr.dtype.kind != "V"}
    failures: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                got = zd.read_many({n: arrays[n] for n in expected}, device="cuda:0", like="torch")
                for name, want in expected.items():
                    np.testing.assert_array_equal(got[name].cpu().numpy(), want.astype(want.dtype.newbyteorder("=")))
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[0]
    torch.cuda.synchronize()


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("non_blocking", [False, True])
def test_single_chunk_reads_from_more_threads_than_rings(tmp_path: Path, non_blocking: bool) -> None:
    """Sixteen threads at once, each reading one chunk at a time (as Dask's per-chunk tasks do):
    more readers than a device's full staging rings, so most take the small ones."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    values = (rng.standard_normal((512, 256)) * 100).astype(np.float32)
    arrays = []
    for name, compressors in (("crc", ZSTD_CRC), ("zstd", "zstd"), ("plain", None)):
        arr = zd.create(tmp_path / name, shape=values.shape, dtype="float32", chunks=(8, 256), compressors=compressors)
        arr[...] = values
        arrays.append(arr)
    barrier = threading.Barrier(16)
    failures: list[BaseException] = []

    def work(job: int) -> None:
        try:
            barrier.wait()
            for i in range(job, 64, 4):
                arr = arrays[(job + i) % len(arrays)]
                rows = slice(8 * i, 8 * i + 8)
                got = arr.read(rows, device="cuda:0", like="torch", non_blocking=non_blocking)
                torch.cuda.current_stream().synchronize()
                np.testing.assert_array_equal(got.cpu().numpy(), values[rows], err_msg=f"{arr.path} rows {rows}")
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    _run_threads(work, 16)
    zd.synchronize()
    assert not failures, failures[0]


def _host_bytes(tensor: Any) -> bytes:
    import torch

    return bytes(tensor.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())


def _expected_bytes(arr: zd.Array) -> bytes:
    expected = np.ascontiguousarray(arr[...])
    return expected.astype(expected.dtype.newbyteorder("=")).tobytes()


@pytest.mark.gpu
@gpu
def test_iter_many_yields_each_array_complete_as_it_lands(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    arrays = _mixed_arrays(tmp_path / "g.zarr")
    order = []
    for name, tensor in zd.iter_many(arrays, device="cuda:0", like="torch"):
        # Complete when yielded: no synchronisation needed before reading it.
        assert _host_bytes(tensor) == _expected_bytes(arrays[name]), name
        order.append(name)
    assert sorted(order) == sorted(arrays)
    # Leaving early waits for the read in flight and leaves the engine whole.
    for _ in zd.iter_many(arrays, device="cuda:0", like="torch"):
        break
    assert len(zd.read_many(arrays, device="cuda:0", like="torch")) == len(arrays)


@pytest.mark.gpu
@gpu
def test_iter_many_error_after_complete_arrays(tmp_path: Path) -> None:
    """Many arrays in one pipeline, one damaged late in it: the ones yielded before the error are
    complete and right; the error names the damaged array."""
    pytest.importorskip("torch")
    group = zd.create_group(tmp_path / "g.zarr")
    arrays = {}
    rng = np.random.default_rng(3)
    for i in range(24):
        arr = group.create_array(f"a{i:02d}", shape=(256, 1024), dtype="float32", chunks=(64, 1024),
                                 compressors=ZSTD_CRC)
        arr[...] = rng.standard_normal((256, 1024), dtype=np.float32)
        arrays[arr.path] = arr
    chunk = tmp_path / "g.zarr" / "a20" / "c" / "2" / "0"
    _flip_byte(chunk, len(chunk.read_bytes()) // 2)
    got = {}
    with pytest.raises(zd.ChecksumError, match="array 'a20'"):
        for name, tensor in zd.iter_many(arrays, device="cuda:0", like="torch"):
            got[name] = _host_bytes(tensor)
    assert "a20" not in got
    for name, value in got.items():
        assert value == _expected_bytes(arrays[name]), name


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("compressors", [None, ZSTD_CRC])
def test_chunks_larger_than_a_slot_are_read(tmp_path: Path, compressors: Any) -> None:
    """A chunk larger than the configured slots: staged a part at a time (uncompressed), or the
    ring cut into fewer, larger slots (zstd + crc32c, decoded whole on the GPU), which then read
    small chunks too; one larger than the whole staging is read a part at a time (zstd + crc32c
    then decoded on the CPU)."""
    pytest.importorskip("torch")
    arr = zd.create(tmp_path / "big.zarr", shape=(3, 2 << 20), dtype="float32", chunks=(1, 2 << 20),
                    compressors=compressors)  # 8 MiB chunks
    arr[...] = np.random.default_rng(1).standard_normal(arr.shape, dtype=np.float32)
    small = zd.create(tmp_path / "small.zarr", shape=(64, 4096), dtype="float32", chunks=(4, 4096),
                      compressors=compressors)  # 64 KiB chunks: many in a slot
    small[...] = np.random.default_rng(2).standard_normal(small.shape, dtype=np.float32)
    previous = zd.set_config(staging_bytes="32MiB", staging_slots=12)  # slots of 2 MiB
    try:
        # Alternating with small chunks, blocking or not, on the ring cut for the large ones.
        for non_blocking in (False, True, False):
            assert _host_bytes(arr.read(device="cuda:0", like="torch")) == _expected_bytes(arr)
            out = small.read(device="cuda:0", like="torch", non_blocking=non_blocking)
            assert _host_bytes(out) == _expected_bytes(small)
        zd.set_config(staging_bytes="4MiB")
        assert _host_bytes(arr.read(device="cuda:0", like="torch")) == _expected_bytes(arr)
        assert _host_bytes(small.read(device="cuda:0", like="torch")) == _expected_bytes(small)
    finally:
        zd.set_config(staging_bytes=previous.staging_bytes, staging_slots=previous.staging_slots)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize(("compressors", "non_blocking"), [(None, False), (ZSTD_CRC, False), (ZSTD_CRC, True)])
def test_reads_complete_in_the_order_of_the_current_stream(tmp_path: Path, compressors: Any,
                                                           non_blocking: bool) -> None:
    """Reads without device decodes return once their copies are queued: work queued later on the
    current stream sees the data, and the engine's writes wait for work queued before (memory
    freed there is handed out again at once). Reads with decodes complete on the host, unless
    non_blocking, when they too return once queued, their decoding overlapping the stream's work
    and only their writes into the outputs waiting for it; every way must give every value, one
    read after another, with no synchronisation in between."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    arrays = []
    for i in range(12):
        arr = zd.create(tmp_path / f"a{i}.zarr", shape=(64, 4096), dtype="int32", chunks=(16, 4096),
                        compressors=compressors)
        arr[...] = rng.integers(-(2**31), 2**31 - 1, size=arr.shape, dtype=np.int32)
        arrays.append(arr)
    side = torch.cuda.Stream(device="cuda:0")
    sums = []
    with torch.cuda.stream(side):
        for arr in arrays:
            churn = torch.full((64 * 4096,), 7, dtype=torch.int32, device="cuda:0")
            for _ in range(20):  # long queued work on memory the next allocation may reuse
                churn.mul_(3)
            del churn
            tensor = arr.read(device="cuda:0", like="torch", non_blocking=non_blocking)
            sums.append(tensor.to(torch.int64).sum())
    side.synchronize()
    zd.synchronize()
    for arr, total in zip(arrays, sums):
        assert int(total.item()) == int(arr[...].astype(np.int64).sum())


@pytest.mark.gpu
@gpu
def test_failed_reads_leak_nothing(tmp_path: Path) -> None:
    """A read of many arrays that fails part-way hands out nothing and keeps nothing: the outputs
    it allocated are freed, and failing again and again does not grow the device's memory in use
    (the staging rings are kept and reused, nothing else stays)."""
    import gc

    torch = pytest.importorskip("torch")
    arrays = _mixed_arrays(tmp_path / "g.zarr")
    chunk = tmp_path / "g.zarr" / "zstd_crc" / "c" / "3" / "0"
    _flip_byte(chunk, len(chunk.read_bytes()) // 2)

    def fail() -> None:
        with pytest.raises(zd.ChecksumError, match="array 'zstd_crc'"):
            zd.read_many(arrays, device="cuda:0", like="torch")
        gc.collect()
        torch.cuda.synchronize()

    fail()  # the first read makes the ring
    allocated = torch.cuda.memory_allocated(0)
    free_before, _ = torch.cuda.mem_get_info(0)
    for _ in range(5):
        fail()
    assert torch.cuda.memory_allocated(0) == allocated
    free_after, _ = torch.cuda.mem_get_info(0)
    assert free_before - free_after < 8 << 20, (free_before, free_after)


# ----------------------------------------------------------------------------------------------
# Reads that do not wait for the GPU's decoders (non_blocking=True)


@pytest.mark.gpu
@gpu
def test_non_blocking_reads_equal_the_host_reads(tmp_path: Path) -> None:
    """A loop of reads that return before the GPU has decoded (every layout of the mixed group),
    then one synchronisation: every result equals the host's read, on the current stream."""
    pytest.importorskip("torch")
    arrays = _mixed_arrays(tmp_path / "g.zarr")
    previous = zd.set_config(decode_sharing="off")  # small reads' decodes stay on the GPU
    try:
        for _ in range(3):
            got = {n: a.read(device="cuda:0", like="torch", non_blocking=True) for n, a in arrays.items()}
            zd.synchronize("cuda:0")
            for name, arr in arrays.items():
                assert _host_bytes(got[name]) == _expected_bytes(arr), name
        many = zd.read_many(arrays, device="cuda:0", like="torch", non_blocking=True)
        zd.synchronize()
        for name, arr in arrays.items():
            assert _host_bytes(many[name]) == _expected_bytes(arr), name
    finally:
        zd.set_config(decode_sharing=previous.decode_sharing)


@pytest.mark.gpu
@gpu
def test_a_chunk_the_gpu_fails_on_is_reported(tmp_path: Path) -> None:
    """A chunk whose frame lies about its size: a read that waits raises CodecError naming it; a
    non-blocking read returns, and the failure is raised once, by zd.synchronize or by the next
    read onto the device, naming the chunk; reads after that work."""
    pytest.importorskip("torch")
    bad = lying_chunk_array(tmp_path)
    good = zd.create(tmp_path / "good.zarr", shape=(4096,), dtype="int32", chunks=(1024,), compressors=ZSTD_CRC)
    good[...] = np.arange(4096, dtype=np.int32)
    previous = zd.set_config(decode_sharing="off", gpu_decode="checked")
    try:
        with pytest.raises(zd.CodecError, match=r"bad\.zarr.*chunk 'c/0'.*GPU decoder"):
            bad.read(device="cuda:0", like="torch")
        zd.synchronize()  # nothing deferred: the read above waited

        bad.read(device="cuda:0", like="torch", non_blocking=True)
        reported = []
        for _ in range(30):  # reads that reuse the ring find the failure; a later one raises it
            try:
                good.read(device="cuda:0", like="torch", non_blocking=True)
            except zd.CodecError as e:
                reported.append(str(e))
        try:
            zd.synchronize("cuda:0")
        except zd.CodecError as e:
            reported.append(str(e))
        assert len(reported) == 1, reported
        assert "did not wait" in reported[0] and "chunk 'c/0'" in reported[0], reported[0]
        zd.synchronize()  # reported once
        assert _host_bytes(good.read(device="cuda:0", like="torch")) == _expected_bytes(good)
    finally:
        zd.set_config(decode_sharing=previous.decode_sharing, gpu_decode=previous.gpu_decode)


@pytest.mark.gpu
@gpu
def test_reads_that_wait_from_many_threads_each_get_their_own_failures(tmp_path: Path) -> None:
    """Twelve threads of reads that wait for the GPU's decoders, more than a device's rings: each
    gives its ring back while its decodes run and checks them itself. The thread reading the chunk
    the GPU fails on gets the CodecError every time; the others get their values, and nothing is
    left over for a later synchronisation."""
    torch = pytest.importorskip("torch")
    bad = lying_chunk_array(tmp_path)
    rng = np.random.default_rng(12)
    values = rng.integers(0, 1000, size=(64, 4096), dtype=np.int32)
    good = zd.create(tmp_path / "good.zarr", shape=values.shape, dtype="int32", chunks=(4, 4096), compressors=ZSTD_CRC)
    good[...] = values
    previous = zd.set_config(decode_sharing="off", gpu_decode="checked")
    barrier = threading.Barrier(12)
    failures: list[BaseException] = []
    raised = [0] * 12

    def work(job: int) -> None:
        try:
            barrier.wait()
            for i in range(20):
                if job % 6 == 0:
                    try:
                        bad.read(device="cuda:0", like="torch")
                    except zd.CodecError as e:
                        assert "bad.zarr" in str(e) and "chunk 'c/0'" in str(e), str(e)
                        raised[job] += 1
                    continue
                rows = slice(4 * ((job + i) % 16), 4 * ((job + i) % 16) + 8)
                got = good.read(rows, device="cuda:0", like="torch")
                np.testing.assert_array_equal(got.cpu().numpy(), values[rows], err_msg=f"rows {rows}")
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    try:
        _run_threads(work, 12)
        assert not failures, failures[0]
        assert raised == [20 if j % 6 == 0 else 0 for j in range(12)], raised
        zd.synchronize()  # every failure went to the read that met it
        torch.cuda.synchronize()
    finally:
        zd.set_config(decode_sharing=previous.decode_sharing, gpu_decode=previous.gpu_decode)


def test_synchronize_without_gpu_reads_is_a_no_op() -> None:
    zd.synchronize()


@pytest.mark.gpu
@gpu
def test_threads_reading_onto_the_shared_default_stream_get_their_values_after_its_work(tmp_path: Path) -> None:
    """Eight threads read chunks that need no GPU decode (copies, and zstd without a checksum,
    decoded on CPU threads) into torch's default stream, which every thread shares, and each read
    may complete in order on it. Each read still waits for the work queued there before writing:
    an ``out=`` that a fill queued before the read (behind a sleeping kernel) writes to holds the
    read's values, never the fill's, and every result equals the host's."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(21)
    values = rng.integers(-(2**31), 2**31 - 1, size=(256, 4096), dtype=np.int32)
    plain = zd.create(tmp_path / "plain.zarr", shape=values.shape, dtype="int32", chunks=(8, 4096), compressors=None)
    plain[...] = values
    packed = zd.create(tmp_path / "zstd.zarr", shape=values.shape, dtype="int32", chunks=(8, 4096), compressors="zstd")
    packed[...] = values
    expected = torch.from_numpy(values).to("cuda:0")
    barrier = threading.Barrier(8)
    failures: list[BaseException] = []

    def work(job: int) -> None:
        try:
            barrier.wait()
            for i in range(40):
                start = 8 * ((job * 5 + i) % 30)
                rows = slice(start, start + 16)
                source = plain if (job + i) % 2 else packed
                if i % 4 == 0:
                    out = torch.full((16, 4096), -7, dtype=torch.int32, device="cuda:0")
                    if hasattr(torch.cuda, "_sleep"):
                        torch.cuda._sleep(1_000_000)  # the stream is still busy when the read starts
                    out.fill_(-9)  # queued before the read: the read's values must land after it
                    got = source.read(rows, out=out)
                    assert got is out
                else:
                    got = source.read(rows, device="cuda:0", like="torch")
                assert torch.equal(got, expected[rows]), f"rows {rows} of {source.path}"
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    _run_threads(work, 8)
    torch.cuda.synchronize()
    assert not failures, failures[0]
