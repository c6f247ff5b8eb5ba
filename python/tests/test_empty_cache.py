"""zd.empty_cache: the memory reads and writes keep between calls (the staging ring, pinned and
on the device, and the decode memory) is given back on request, and reads and writes after it,
or whose results were still arriving when it ran, give the same values."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import lying_chunk_array, rss_bytes

import zarr_device as zd

MIB = 1 << 20
ZSTD_CRC = [{"name": "zstd", "configuration": {"level": 1}}, {"name": "crc32c"}]
N_GPUS = zd.cuda_device_count()
gpu = pytest.mark.skipif(N_GPUS == 0, reason="no CUDA device visible to zarr_device (or a build without CUDA)")


def test_empty_cache_without_gpu_memory_is_a_no_op() -> None:
    zd.empty_cache()
    zd.empty_cache()


def test_empty_cache_refuses_devices_it_keeps_nothing_for() -> None:
    with pytest.raises(zd.UsageError, match="CUDA"):
        zd.empty_cache("cpu")


def _weights(rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, 4096)) * 0.02).astype(np.float32)


@pytest.mark.gpu
@gpu
def test_empty_cache_gives_the_rings_and_decode_memory_back(tmp_path: Path) -> None:
    """After a GPU read and a GPU write, the device's free memory rises by at least the staging's
    device copies and the host's RSS falls by at least the pinned staging; reading and writing
    again afterwards gives the same values."""
    torch = pytest.importorskip("torch")
    previous = zd.set_config(staging_bytes="256MiB", staging_slots=8)
    try:
        values = _weights(8192, 1)  # 128 MiB in 1 MiB zstd + crc32c chunks: every slot used
        array = zd.create(tmp_path / "a.zarr", shape=values.shape, dtype="float32", chunks=(64, 4096),
                          compressors=ZSTD_CRC)
        array[...] = values
        first = array.read(device="cuda:0", like="torch")
        written = zd.create(tmp_path / "w.zarr", shape=values.shape, dtype="float32", chunks=(64, 4096),
                            compressors=ZSTD_CRC)
        written[...] = first  # from the GPU: the write ring too
        torch.cuda.synchronize()
        free_before = torch.cuda.mem_get_info(0)[0]
        rss_before = rss_bytes()
        zd.empty_cache("cuda:0")
        freed_device = torch.cuda.mem_get_info(0)[0] - free_before
        freed_host = rss_before - rss_bytes()
        assert freed_device >= 256 * MIB, f"device memory freed: {freed_device / MIB:.1f} MiB"
        assert freed_host >= 200 * MIB, f"host memory freed: {freed_host / MIB:.1f} MiB"
        zd.empty_cache()  # nothing left: a no-op
        again = array.read(device="cuda:0", like="torch")
        assert torch.equal(again, first)
        np.testing.assert_array_equal(again.cpu().numpy(), values)
        np.testing.assert_array_equal(written[...], values)
        written[...] = again
        np.testing.assert_array_equal(written[...], values)
    finally:
        zd.set_config(staging_bytes=previous.staging_bytes, staging_slots=previous.staging_slots)


@pytest.mark.gpu
@gpu
def test_reads_that_did_not_wait_end_before_their_ring_is_freed(tmp_path: Path) -> None:
    """Reads that return before their GPU decodes end (non_blocking), followed at once by
    empty_cache: every result is complete and right, and a chunk the GPU fails to decode is still
    reported by zd.synchronize afterwards, once, not lost with the ring."""
    torch = pytest.importorskip("torch")
    values = _weights(4096, 2)
    array = zd.create(tmp_path / "a.zarr", shape=values.shape, dtype="float32", chunks=(64, 4096),
                      compressors=[{"name": "zstd", "configuration": {"level": 1}}])
    array[...] = values
    previous = zd.set_config(gpu_decode="trusted", decode_sharing="off")  # decoded on the GPU
    try:
        for _ in range(3):
            outs = [array.read(device="cuda:0", like="torch", non_blocking=True) for _ in range(4)]
            zd.empty_cache()
            torch.cuda.synchronize()
            for out in outs:
                np.testing.assert_array_equal(out.cpu().numpy(), values)
        # A chunk only the GPU's decoder finds short: its failure outlives the freed ring.
        bad = lying_chunk_array(tmp_path)
        bad.read(device="cuda:0", like="torch", non_blocking=True)
        zd.empty_cache()
        with pytest.raises(zd.CodecError, match=r"did not wait.*chunk 'c/0'"):
            zd.synchronize()
        zd.synchronize()  # reported once
    finally:
        zd.set_config(gpu_decode=previous.gpu_decode, decode_sharing=previous.decode_sharing)


@pytest.mark.gpu
@gpu
def test_empty_cache_beside_reads_on_other_threads(tmp_path: Path) -> None:
    """Threads reading while another empties the cache over and over: every read is right (rings
    in use are kept; idle ones are freed and made again)."""
    pytest.importorskip("torch")
    values = _weights(2048, 3)
    array = zd.create(tmp_path / "a.zarr", shape=values.shape, dtype="float32", chunks=(128, 4096),
                      compressors=ZSTD_CRC)
    array[...] = values
    failures: list[BaseException] = []
    done = threading.Event()

    def read(_: int) -> None:
        try:
            for _ in range(15):
                got = array.read(device="cuda:0", like="torch")
                np.testing.assert_array_equal(got.cpu().numpy(), values)
        except BaseException as error:  # noqa: BLE001 - reported below
            failures.append(error)

    def empty() -> None:
        while not done.is_set():
            zd.empty_cache()

    readers = [threading.Thread(target=read, args=(j,)) for j in range(4)]
    emptier = threading.Thread(target=empty)
    emptier.start()
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    done.set()
    emptier.join()
    assert not failures, failures[0]
