"""Chunks no checksum vouches for, decoded on a GPU in the decoder process (marker ``gpu``): the
data users have (zstd without a checksum, LZ4) read onto the GPU by default and equal to the
host's read bit for bit; damaged chunks cost the decoder process, never the caller's CUDA context,
and are reported as the CPU's decoders report them, naming the chunk. gzip and zlib chunks carry a
check (CRC-32, Adler-32) nvCOMP does not verify: under ``gpu_decode="isolated"`` the decoder
process verifies it on the GPU after its decode, and a chunk whose decoded bytes do not match
decodes on the CPU, which reports it; by default they decode on the CPU."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import assert_bits_equal, lying_chunk_array

import zarr_device as zd
from zarr_device import _core

N_GPUS = zd.cuda_device_count()
gpu = pytest.mark.skipif(N_GPUS == 0, reason="no CUDA device visible to zarr_device (or a build without CUDA)")

# The compressors users' data comes with and the decoder process takes without a checksum.
UNCHECKED = {
    "zstd": "zstd",
    "lz4": [{"name": "numcodecs.lz4", "configuration": {"acceleration": 1}}],
}
# Those whose own check nvCOMP skips and the decoder process verifies.
SELF_CHECKED = {
    "gzip": "gzip",
    "zlib": [{"name": "numcodecs.zlib", "configuration": {"level": 1}}],
}


def _decoder() -> dict[str, Any]:
    info: dict[str, Any] = _core.isolated_decoding_info(0)
    return info


@pytest.fixture
def decoder_process() -> Iterator[None]:
    """The decoder process is installed beside the engine (or the test skips); the default policy
    is in force."""
    if not _decoder()["available"]:
        pytest.skip(f"no decoder process: {zd.cuda_build_info().get('decoder_program')}")
    previous = zd.set_config(gpu_decode="checked", decode_sharing="off")
    try:
        yield
    finally:
        zd.set_config(gpu_decode=previous.gpu_decode, decode_sharing=previous.decode_sharing)


def _array(root: Path, compressors: Any, *, shape: tuple[int, ...] = (96, 1000), chunks: tuple[int, ...] = (8, 1000),
           shards: tuple[int, ...] | None = None, dtype: str = "float32", seed: int = 3) -> zd.Array:
    rng = np.random.default_rng(seed)
    arr = zd.create(root, shape=shape, dtype=dtype, chunks=chunks, shards=shards, compressors=compressors)
    arr[...] = rng.integers(-40, 40, size=shape).astype(dtype)
    return arr


def _on_device(arr: zd.Array, selection: Any = Ellipsis) -> np.ndarray:
    torch = pytest.importorskip("torch")
    tensor = arr.read(selection, device="cuda:0", like="torch")
    assert tensor.device.type == "cuda"
    host: np.ndarray = tensor.cpu().contiguous().view(torch.uint8).numpy()
    return host


@pytest.mark.gpu
@gpu
@pytest.mark.usefixtures("decoder_process")
@pytest.mark.parametrize("name", sorted(UNCHECKED))
def test_unchecked_chunks_decode_in_the_decoder_process(tmp_path: Path, name: str) -> None:
    arr = _array(tmp_path / "a.zarr", UNCHECKED[name])
    before = _decoder()
    got = _on_device(arr)
    after = _decoder()
    expected = np.ascontiguousarray(arr[...])
    assert_bits_equal(got.view(expected.dtype).reshape(expected.shape), expected, name)
    assert after["chunks"] - before["chunks"] == 12  # every chunk went to the decoder process
    assert after["not_decoded"] == before["not_decoded"]
    # A selection across chunks, sharded chunks and a big-endian type take the same route.
    part = _on_device(arr, (slice(5, 61, 3), slice(17, 900)))
    assert_bits_equal(part.view(expected.dtype).reshape(19, 883), expected[5:61:3, 17:900], name)
    sharded = _array(tmp_path / "s.zarr", UNCHECKED[name], shards=(32, 1000), dtype=">i4")
    want = np.ascontiguousarray(sharded[...])
    assert_bits_equal(_on_device(sharded).view(want.dtype).reshape(want.shape), want, name)
    assert _decoder()["chunks"] - after["chunks"] == 8 + 12  # the selection's 8, the shards' 12


@pytest.mark.gpu
@gpu
@pytest.mark.usefixtures("decoder_process")
def test_policies_choose_where_chunks_decode(tmp_path: Path) -> None:
    checked = _array(tmp_path / "c.zarr", [{"name": "zstd"}, {"name": "crc32c"}])
    unchecked = _array(tmp_path / "u.zarr", "zstd")

    def sent(arr: zd.Array, policy: str) -> int:
        """Chunks of a read of ``arr`` under ``policy`` that went to the decoder process."""
        expected = np.ascontiguousarray(arr[...])
        zd.set_config(gpu_decode=policy)
        before = _decoder()["chunks"]
        got = _on_device(arr)
        assert_bits_equal(got.view(expected.dtype).reshape(arr.shape), expected, policy)
        return int(_decoder()["chunks"] - before)

    assert sent(checked, "checked") == 0  # a crc32c vouches: decoded in this process
    assert sent(unchecked, "checked") == 12
    assert sent(checked, "isolated") == 12  # no checksum vouches against a forger
    assert sent(unchecked, "trusted") == 0
    assert sent(unchecked, "off") == 0
    for name, compressors in SELF_CHECKED.items():
        own = _array(tmp_path / f"{name}.zarr", compressors)
        assert sent(own, "checked") == 12, name  # its CRC-32 or Adler-32: verified by the decoder process
        assert sent(own, "isolated") == 12, name
        assert sent(own, "off") == 0, name
        chain = compressors if isinstance(compressors, list) else [{"name": compressors}]
        vouched = _array(tmp_path / f"{name}-crc.zarr", [*chain, {"name": "crc32c"}])
        assert sent(vouched, "checked") == 0, name  # a crc32c vouches: decoded in this process
        assert sent(vouched, "isolated") == 12, name


@pytest.mark.gpu
@gpu
@pytest.mark.usefixtures("decoder_process")
@pytest.mark.parametrize("policy", ["checked", "isolated"])
@pytest.mark.parametrize("name", sorted(SELF_CHECKED))
def test_checks_nvcomp_skips_are_verified_by_the_decoder_process(tmp_path: Path, name: str, policy: str) -> None:
    """gzip's CRC-32 and zlib's Adler-32, which nvCOMP does not verify, verified on the GPU after
    the process's decode (by default, and under ``isolated``): valid chunks are decoded there and equal the host's
    read; a chunk whose trailer disagrees with its (valid) deflate stream decodes to the wrong check, is answered as
    not decoded and is the CPU's typed error naming it."""
    zd.set_config(gpu_decode=policy)
    arr = _array(tmp_path / "a.zarr", SELF_CHECKED[name], shape=(64, 4096), chunks=(4, 4096))
    good = np.ascontiguousarray(arr[...])
    before = _decoder()
    assert_bits_equal(_on_device(arr).view(good.dtype).reshape(good.shape), good, name)
    after = _decoder()
    assert after["chunks"] - before["chunks"] == 16
    assert after["not_decoded"] == before["not_decoded"]  # every check matched
    path = tmp_path / "a.zarr" / "c" / "5" / "0"
    frame = path.read_bytes()
    # gzip: the CRC-32 is the trailer's first 4 bytes (then ISIZE); zlib: the last 4 (Adler-32).
    at = len(frame) - (8 if name == "gzip" else 4)
    path.write_bytes(frame[:at] + bytes([frame[at] ^ 0x10]) + frame[at + 1:])
    with pytest.raises(zd.CodecError, match="c/5/0"):
        np.ascontiguousarray(arr[...])  # the host's read refuses it
    with pytest.raises(zd.CodecError, match="c/5/0"):
        _on_device(arr)
    assert _decoder()["not_decoded"] - after["not_decoded"] == 1  # the process's check refused it
    path.write_bytes(frame)
    assert_bits_equal(_on_device(arr).view(good.dtype).reshape(good.shape), good, f"{name} again")


@pytest.mark.gpu
@gpu
@pytest.mark.usefixtures("decoder_process")
def test_few_deflate_chunks_inflate_on_the_cpu_where_it_is_sooner(tmp_path: Path) -> None:
    """With decode sharing on (the default), a read of a few gzip chunks is inflated by the CPU's
    threads, sooner than nvCOMP's inflate of one chunk per thread block; with it off, by the
    decoder process. The values are the same."""
    arr = _array(tmp_path / "a.zarr", "gzip", shape=(8, 262144), chunks=(2, 262144))
    good = np.ascontiguousarray(arr[...])
    for sharing, sent in (("auto", 0), ("off", 4)):
        zd.set_config(decode_sharing=sharing)
        before = _decoder()["chunks"]
        assert_bits_equal(_on_device(arr).view(good.dtype).reshape(good.shape), good, sharing)
        assert _decoder()["chunks"] - before == sent, sharing


@pytest.mark.gpu
@gpu
@pytest.mark.usefixtures("decoder_process")
def test_a_chunk_the_gpu_finds_short_is_the_cpus_error_under_isolated(tmp_path: Path) -> None:
    bad = lying_chunk_array(tmp_path)  # valid crc32c, a frame shorter than it declares
    zd.set_config(gpu_decode="isolated")
    before = _decoder()
    with pytest.raises(zd.CodecError, match="c/0"):
        _on_device(bad)
    after = _decoder()
    assert after["not_decoded"] - before["not_decoded"] == 1  # the process refused it; so did the CPU


def _damaged(frame: bytes, kind: str, rng: np.random.Generator) -> bytes:
    """One way of damaging a stored chunk, as the fuzz campaign does (cpp/fuzz/nvcomp_cases.hpp)."""
    data = bytearray(frame)
    body = max(len(data) - 12, 1)
    if kind == "flips":
        for _ in range(int(rng.integers(1, 9))):
            data[12 + int(rng.integers(0, body))] ^= 1 << int(rng.integers(0, 8))
    elif kind == "span_zero":
        at = 6 + int(rng.integers(0, max(len(data) - 6, 1)))
        n = min(int(rng.integers(4, 64)), len(data) - at)
        data[at:at + n] = bytes(n)
    elif kind == "garbage":
        at = 12 + int(rng.integers(0, body))
        data[at:] = rng.integers(0, 256, size=len(data) - at, dtype=np.uint8).tobytes()
    elif kind == "truncated":
        data = data[: max(int(rng.integers(1, len(data))), 1)]
    elif kind == "header_words":
        for _ in range(4):
            at = 4 + int(rng.integers(0, min(len(data) - 4, 24)))
            data[at] = int(rng.integers(0, 256))
    return bytes(data)


@pytest.mark.gpu
@gpu
@pytest.mark.usefixtures("decoder_process")
@pytest.mark.parametrize("name", sorted(UNCHECKED))
def test_damaged_chunks_never_reach_the_callers_context(tmp_path: Path, name: str) -> None:
    """Chunks damaged the ways that faulted, hung or wrote past their output in nvCOMP's campaign:
    each read either raises the CPU's typed error naming the chunk or returns, and afterwards this
    process's CUDA context still reads, copies and computes."""
    torch = pytest.importorskip("torch")
    arr = _array(tmp_path / "a.zarr", UNCHECKED[name], shape=(64, 4096), chunks=(4, 4096))
    good = np.ascontiguousarray(arr[...])
    frames = {i: (tmp_path / "a.zarr" / "c" / str(i) / "0").read_bytes() for i in range(16)}
    rng = np.random.default_rng(2026)
    errors = 0
    for round_ in range(6):
        damaged = {}
        for i, kind in enumerate(["flips", "span_zero", "garbage", "truncated", "header_words"] * 3):
            if i >= 16:
                break
            damaged[i] = _damaged(frames[i], kind, rng)
            (tmp_path / "a.zarr" / "c" / str(i) / "0").write_bytes(damaged[i])
        try:
            host: np.ndarray | None = np.ascontiguousarray(arr[...])
        except zd.CodecError:
            host = None
        try:
            _on_device(arr)
        except zd.CodecError as e:
            errors += 1
            assert "chunk 'c/" in str(e), str(e)
            assert host is None, f"round {round_}: the GPU read raised where the host read did not: {e}"
        for i, frame in frames.items():
            (tmp_path / "a.zarr" / "c" / str(i) / "0").write_bytes(frame)
        # The caller's context is whole: the same array reads right, and torch computes.
        assert_bits_equal(_on_device(arr).view(good.dtype).reshape(good.shape), good, f"round {round_}")
        x = torch.arange(1 << 20, device="cuda:0", dtype=torch.float32)
        assert float(x.sum().item()) == float((1 << 20) * ((1 << 20) - 1) / 2)
    assert errors > 0  # the damage was found at least once


@pytest.mark.gpu
@gpu
@pytest.mark.usefixtures("decoder_process")
def test_calls_in_flight_answer_in_order_and_a_damaged_one_costs_only_its_chunks(tmp_path: Path) -> None:
    """A read of many small batches keeps several decoder-process calls in flight: every chunk
    lands where it belongs, and a damaged chunk among them is the CPU's error naming it, or the
    CPU's value; the calls after it are still placed right once the damage is gone."""
    previous = zd.set_config(staging_bytes=8 << 20, staging_slots=4)
    try:
        arr = _array(tmp_path / "a.zarr", "zstd", shape=(256, 16384), chunks=(8, 16384))
        good = np.ascontiguousarray(arr[...])
        before = _decoder()
        assert_bits_equal(_on_device(arr).view(good.dtype).reshape(good.shape), good, "in flight")
        after = _decoder()
        assert after["chunks"] - before["chunks"] == 32
        assert after["calls"] - before["calls"] >= 8  # a call per batch of 2 MiB at most
        path = tmp_path / "a.zarr" / "c" / "13" / "0"
        frame = path.read_bytes()
        path.write_bytes(frame[: len(frame) // 2])
        with pytest.raises(zd.CodecError, match="c/13/0"):
            _on_device(arr)
        path.write_bytes(frame)
        part = _on_device(arr, (slice(3, 250, 5), slice(100, 16000, 7)))
        want = good[3:250:5, 100:16000:7]
        assert_bits_equal(part.view(good.dtype).reshape(want.shape), want, "selection in flight")
    finally:
        zd.set_config(staging_bytes=previous.staging_bytes, staging_slots=previous.staging_slots)


SHUFFLE = {"name": "numcodecs.shuffle", "configuration": {"elementsize": 2}}


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("policy", ["checked", "trusted", "isolated"])
def test_shuffled_chunks_are_unshuffled_on_the_device(tmp_path: Path, policy: str) -> None:
    """numcodecs' shuffle before zstd (as zarr-python writes it): decoded and unshuffled on the GPU
    under every policy that decodes there, whole chunks and selections, with and without a crc32c,
    sharded, big-endian, and an element size that is not the item size; bit-equal to the host."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    previous = zd.set_config(gpu_decode=policy, decode_sharing="off")
    try:
        for name, dtype, compressors, shards in [
            ("bf16", "bfloat16", [SHUFFLE, {"name": "zstd"}], None),
            ("bf16-crc", "bfloat16", [SHUFFLE, {"name": "zstd"}, {"name": "crc32c"}], None),
            ("f32-sharded", "float32", [{"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
                                        {"name": "zstd"}, {"name": "crc32c"}], (32, 1000)),
            ("be-f64", ">f8", [{"name": "numcodecs.shuffle", "configuration": {"elementsize": 8}}, {"name": "zstd"}], None),
            ("i32-by-2", "int32", [SHUFFLE, {"name": "zstd"}], None),
        ]:
            arr = zd.create(tmp_path / f"{name}.zarr", shape=(96, 1000), dtype=dtype, chunks=(8, 1000),
                            shards=shards, compressors=compressors)
            rng = np.random.default_rng(9)
            values = (rng.standard_normal((96, 1000)) * 0.02).astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
            arr[...] = values
            expected = np.ascontiguousarray(arr[...])
            got = _on_device(arr)
            assert_bits_equal(got.view(expected.dtype).reshape(expected.shape), expected, f"{name} {policy}")
            part = _on_device(arr, (slice(3, 90, 5), slice(11, 977)))
            want = np.ascontiguousarray(expected[3:90:5, 11:977])
            assert_bits_equal(part.view(want.dtype).reshape(want.shape), want, f"{name} {policy} selection")
    finally:
        zd.set_config(gpu_decode=previous.gpu_decode, decode_sharing=previous.decode_sharing)


def _blosc_arrays(root: Path, cname: str) -> list[tuple[str, Any]]:
    """Arrays written by zarr-python with Blosc (format 2, as zarr-python 2 wrote them, and the v3
    ``blosc`` codec), whose blocks nvCOMP decodes stream by stream: byte shuffle and none, element
    sizes 1 to 8, big-endian, edge chunks, and noise that Blosc keeps stored."""
    zarr = pytest.importorskip("zarr")
    numcodecs = pytest.importorskip("numcodecs")
    rng = np.random.default_rng(17)
    smooth = np.cumsum(rng.standard_normal((96, 3000)), axis=1)
    out = []
    for name, values, shuffle, blocksize in [
        ("f4-shuffle", smooth.astype("<f4"), numcodecs.Blosc.SHUFFLE, 0),
        ("i2-noshuffle", rng.integers(-300, 300, size=(96, 3000)).astype("<i2"), numcodecs.Blosc.NOSHUFFLE, 0),
        ("u1-shuffle", rng.integers(0, 20, size=(96, 3000)).astype("u1"), numcodecs.Blosc.SHUFFLE, 0),
        ("be-f8-small-blocks", smooth.astype(">f8"), numcodecs.Blosc.SHUFFLE, 4096),
        ("f4-noise", rng.standard_normal((96, 3000)).astype("<f4"), numcodecs.Blosc.SHUFFLE, 0),
    ]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            z = zarr.create_array(root / f"{name}.zarr", shape=values.shape, chunks=(16, 1100), dtype=values.dtype,
                                  zarr_format=2, compressors=numcodecs.Blosc(cname=cname, clevel=5, shuffle=shuffle,
                                                                             blocksize=blocksize))
            z[...] = values
        out.append((name, z))
    codec = zarr.codecs.BloscCodec(cname=cname, clevel=5, shuffle="shuffle", typesize=4)
    z = zarr.create_array(root / "v3.zarr", shape=(96, 3000), chunks=(16, 1100), dtype="<f4", compressors=codec)
    z[...] = smooth.astype("<f4")
    out.append(("v3", z))
    return out


@pytest.mark.gpu
@gpu
@pytest.mark.usefixtures("decoder_process")
@pytest.mark.parametrize("policy", ["checked", "isolated", "trusted"])
@pytest.mark.parametrize("cname", ["lz4", "zstd"])
def test_blosc_chunks_decode_stream_by_stream_in_the_decoder_process(tmp_path: Path, cname: str, policy: str) -> None:
    """Blosc chunks go to the decoder process under every policy but ``off`` (Blosc has no checksum
    to vouch for them), one call entry per compressed stream, and are gathered and unshuffled into place by the
    engine: bit-equal to zarr-python, whole and by selection."""
    zd.set_config(gpu_decode=policy)
    sent = 0
    for name, z in _blosc_arrays(tmp_path, cname):
        arr = zd.open_array(tmp_path / f"{name}.zarr")
        # (zarr_device returns native byte order; zarr-python keeps the stored one.)
        expected = np.ascontiguousarray(z[...]).astype(z.dtype.newbyteorder("="))
        before = _decoder()["chunks"]
        got = _on_device(arr)
        sent += int(_decoder()["chunks"] - before)
        assert_bits_equal(got.view(expected.dtype).reshape(expected.shape), expected, f"{cname} {name}")
        part = _on_device(arr, (slice(5, 90, 7), slice(1000, 2300)))
        want = np.ascontiguousarray(expected[5:90:7, 1000:2300])
        assert_bits_equal(part.view(want.dtype).reshape(want.shape), want, f"{cname} {name} selection")
    assert sent > 0  # streams went to the decoder process


@pytest.mark.gpu
@gpu
@pytest.mark.usefixtures("decoder_process")
def test_damaged_blosc_chunks_are_the_cpus_error_or_value(tmp_path: Path) -> None:
    """Damaged Blosc chunks (header, block table, streams): each read of the GPU raises where
    zarr-python's read raises, naming the chunk, or returns zarr-python's values; the context
    stays whole."""
    torch = pytest.importorskip("torch")
    zd.set_config(gpu_decode="isolated")
    name, z = _blosc_arrays(tmp_path, "lz4")[0]
    arr = zd.open_array(tmp_path / f"{name}.zarr")
    good = np.ascontiguousarray(z[...])
    paths = sorted(p for p in (tmp_path / f"{name}.zarr").iterdir() if p.name[0].isdigit())
    frames = {p: p.read_bytes() for p in paths}
    rng = np.random.default_rng(2027)
    raised = 0
    for round_ in range(8):
        for i, p in enumerate(paths[:12]):
            data = bytearray(frames[p])
            if i % 3 == 0:  # the header or the block table
                for _ in range(3):
                    data[int(rng.integers(0, min(len(data), 64)))] = int(rng.integers(0, 256))
            elif i % 3 == 1:
                for _ in range(6):
                    data[int(rng.integers(16, len(data)))] ^= 1 << int(rng.integers(0, 8))
            else:
                data = data[: int(rng.integers(1, len(data)))]
            p.write_bytes(bytes(data))
        try:
            host: np.ndarray | None = np.ascontiguousarray(arr[...])
        except zd.CodecError:
            host = None
        try:
            got = _on_device(arr)
            assert host is not None, f"round {round_}: the GPU read returned where the host read raised"
            assert_bits_equal(got.view(host.dtype).reshape(host.shape), host, f"round {round_}")
        except zd.CodecError as e:
            raised += 1
            assert host is None, f"round {round_}: the GPU read raised where the host read did not: {e}"
            assert "chunk '" in str(e), str(e)
        for p, frame in frames.items():
            p.write_bytes(frame)
        assert_bits_equal(_on_device(arr).view(good.dtype).reshape(good.shape), good, f"round {round_}")
        x = torch.arange(1 << 20, device="cuda:0", dtype=torch.float32)
        assert float(x.sum().item()) == float((1 << 20) * ((1 << 20) - 1) / 2)
    assert raised > 0
