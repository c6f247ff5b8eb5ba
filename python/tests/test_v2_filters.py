"""Zarr v2 arrays with filters, as zarr-python writes them (``filters=[numcodecs.Shuffle(...)]``):
numcodecs' shuffle and delta before the compressor read bit for bit as zarr-python reads them, in C
and F order, whole and by selection; other filters (fixedscaleoffset, ...) are refused by name."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import assert_bits_equal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zarr_device as zd
from zarr_device.errors import FormatError

zarr = pytest.importorskip("zarr")
numcodecs = pytest.importorskip("numcodecs")

COMPRESSORS: dict[str, Any] = {
    "none": None,
    "zstd": lambda: numcodecs.Zstd(level=1),
    "blosc-lz4": lambda: numcodecs.Blosc(cname="lz4", shuffle=numcodecs.Blosc.NOSHUFFLE),
    "zlib": lambda: numcodecs.Zlib(level=1),
}


def _write(path: Path, data: np.ndarray, chunks: tuple[int, ...], filters: list[Any], compressor: str,
           order: str = "C") -> Any:
    make = COMPRESSORS[compressor]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        z = zarr.create_array(path, shape=data.shape, chunks=chunks, dtype=data.dtype, zarr_format=2,
                              filters=filters, compressors=make() if make else None, order=order)
        z[...] = data
    return z


@pytest.mark.parametrize("compressor", sorted(COMPRESSORS))
@pytest.mark.parametrize("dtype", ["<f4", ">i2", "<u8", "<f8"])
@pytest.mark.parametrize("order", ["C", "F"])
def test_shuffle_filter_reads_as_zarr_python_reads_it(tmp_path: Path, compressor: str, dtype: str, order: str) -> None:
    rng = np.random.default_rng(7)
    data = rng.integers(0, 5000, size=(37, 23)).astype(dtype)
    itemsize = np.dtype(dtype).itemsize
    for elementsize in sorted({itemsize, 2 * itemsize}):
        path = tmp_path / f"{elementsize}.zarr"
        # Chunks whose byte count the element size divides, as zarr-python requires to write them.
        z = _write(path, data, (10, 8), [numcodecs.Shuffle(elementsize=elementsize)], compressor, order)
        expected = np.ascontiguousarray(z[...])
        arr = zd.open_array(path)
        assert_bits_equal(arr[...], expected, f"{compressor} {dtype} {order} {elementsize}")
        assert_bits_equal(arr[3:30:4, 5:], expected[3:30:4, 5:], "selection")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.integers(1, 40), cols=st.integers(1, 40), chunk_rows=st.integers(1, 12),
       chunk_cols=st.sampled_from([2, 4, 8]), dtype=st.sampled_from(["<u2", ">f4", "<i8", "|u1"]),
       compressor=st.sampled_from(sorted(COMPRESSORS)), seed=st.integers(0, 2**16))
def test_shuffle_filter_property(tmp_path_factory: pytest.TempPathFactory, rows: int, cols: int, chunk_rows: int,
                                 chunk_cols: int, dtype: str, compressor: str, seed: int) -> None:
    data = np.random.default_rng(seed).integers(0, 250, size=(rows, cols)).astype(dtype)
    path = tmp_path_factory.mktemp("v2") / "a.zarr"
    # numcodecs' default element size (4) where it divides the chunk's bytes, else the item size.
    chunk_bytes = chunk_rows * chunk_cols * np.dtype(dtype).itemsize
    shuffle = numcodecs.Shuffle() if chunk_bytes % 4 == 0 else numcodecs.Shuffle(elementsize=np.dtype(dtype).itemsize)
    z = _write(path, data, (chunk_rows, chunk_cols), [shuffle], compressor)
    assert_bits_equal(zd.open_array(path)[...], np.ascontiguousarray(z[...]), f"{dtype} {compressor}")


DELTAS = [("<i4", "<i4"), (">i2", ">i2"), ("<i8", "<i2"), ("|u1", "|u1"), ("<u2", "<i1"), ("<i4", ">i8"),
          ("<f4", "<f4"), (">f8", ">f8"), ("<u8", "<u8")]


def _delta_data(dtype: str, astype: str, seed: int, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(seed)
    kind = np.dtype(dtype).kind
    if kind == "f":
        values = np.cumsum(rng.standard_normal(shape), axis=-1)
        values.flat[::7] = -0.0  # the first element's sign survives as numcodecs keeps it
        return values.astype(dtype)
    # Values in both types' range (numcodecs refuses a first element the stored type cannot
    # hold), at both ends of it: steps between them overflow the stored type and wrap.
    info, stored = np.iinfo(np.dtype(dtype)), np.iinfo(np.dtype(astype))
    low, high = max(info.min, stored.min), min(info.max, stored.max)
    data = rng.integers(low, high, size=shape, dtype=np.dtype(dtype).newbyteorder("="), endpoint=True)
    return data.astype(dtype)


@pytest.mark.parametrize("dtype,astype", DELTAS)
@pytest.mark.parametrize("compressor", ["none", "zstd", "blosc-lz4"])
@pytest.mark.parametrize("order", ["C", "F"])
def test_delta_filter_reads_as_zarr_python_reads_it(tmp_path: Path, dtype: str, astype: str, compressor: str,
                                                    order: str) -> None:
    data = _delta_data(dtype, astype, 11, (37, 23))
    z = _write(tmp_path / "d.zarr", data, (10, 8), [numcodecs.Delta(dtype=dtype, astype=astype)], compressor, order)
    expected = np.ascontiguousarray(z[...])
    arr = zd.open_array(tmp_path / "d.zarr")
    assert_bits_equal(arr[...], expected, f"{dtype}->{astype} {compressor} {order}")
    assert_bits_equal(arr[3:30:4, 5:], expected[3:30:4, 5:], "selection")
    # With the shuffle after it, as zarr-python chains filters.
    z2 = _write(tmp_path / "ds.zarr", data, (10, 8),
                [numcodecs.Delta(dtype=dtype, astype=astype), numcodecs.Shuffle(elementsize=np.dtype(astype).itemsize)],
                compressor, order)
    assert_bits_equal(zd.open_array(tmp_path / "ds.zarr")[...], np.ascontiguousarray(z2[...]), "delta + shuffle")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 400), chunk=st.integers(1, 64), types=st.sampled_from(DELTAS), seed=st.integers(0, 2**16),
       compressor=st.sampled_from(sorted(COMPRESSORS)))
def test_delta_filter_property(tmp_path_factory: pytest.TempPathFactory, n: int, chunk: int,
                               types: tuple[str, str], compressor: str, seed: int) -> None:
    dtype, astype = types
    data = _delta_data(dtype, astype, seed, (n,))
    path = tmp_path_factory.mktemp("delta") / "a.zarr"
    z = _write(path, data, (chunk,), [numcodecs.Delta(dtype=dtype, astype=astype)], compressor)
    assert_bits_equal(zd.open_array(path)[...], np.ascontiguousarray(z[...]), f"{dtype}->{astype} {compressor}")


def test_delta_filter_on_a_gpu_reads_as_on_the_host(tmp_path: Path) -> None:
    """Chunks with a delta filter decode on the CPU and are copied once (no device decodes them)."""
    if zd.cuda_device_count() == 0:
        pytest.skip("no CUDA device")
    torch = pytest.importorskip("torch")
    data = _delta_data("<i8", "<i4", 3, (64, 300))
    z = _write(tmp_path / "d.zarr", data, (16, 128), [numcodecs.Delta(dtype="<i8", astype="<i4")], "zstd")
    got = zd.open_array(tmp_path / "d.zarr").read(device="cuda:0", like="torch")
    assert torch.equal(got.cpu(), torch.from_numpy(np.ascontiguousarray(z[...])))


@pytest.mark.parametrize("dtype,astype", [("<i4", "<i4"), ("<i8", "<i2"), ("<f8", "<f8"), ("|u1", "|u1")])
def test_delta_in_a_v3_array_reads_as_zarr_python_reads_it(tmp_path: Path, dtype: str, astype: str) -> None:
    """zarr-python 3 lists numcodecs' delta among a v3 array's array->array codecs."""
    import zarr.codecs.numcodecs as znc

    data = _delta_data(dtype, astype, 5, (40, 30))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        z = zarr.create_array(tmp_path / "a.zarr", shape=data.shape, chunks=(16, 7), dtype=dtype,
                              filters=[znc.Delta(dtype=dtype, astype=astype)], compressors=zarr.codecs.ZstdCodec(level=1))
        z[...] = data
    arr = zd.open_array(tmp_path / "a.zarr")
    expected = np.ascontiguousarray(z[...])
    assert_bits_equal(arr[...], expected, f"v3 {dtype}->{astype}")
    assert_bits_equal(arr[3:37:5, 2:29], expected[3:37:5, 2:29], "selection")


def test_delta_of_a_big_endian_type_in_a_v3_array_is_refused_by_name(tmp_path: Path) -> None:
    """zarr-python reads such an array back as other values than it wrote: neither reading is
    taken."""
    import zarr.codecs.numcodecs as znc

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        z = zarr.create_array(tmp_path / "a.zarr", shape=(20,), chunks=(5,), dtype=">i4", filters=[znc.Delta(dtype=">i4")])
        z[...] = np.arange(20)
    with pytest.raises(FormatError, match="big-endian"):
        zd.open_array(tmp_path / "a.zarr")[...]


def test_filters_outside_what_is_read_are_refused_by_name(tmp_path: Path) -> None:
    data = np.linspace(0, 10, 20)
    _write(tmp_path / "f.zarr", data, (5,), [numcodecs.FixedScaleOffset(offset=0, scale=10, dtype="<f8", astype="<i4")],
           "zstd")
    with pytest.raises(FormatError, match="fixedscaleoffset"):
        zd.open_array(tmp_path / "f.zarr")[...]
    _write(tmp_path / "d.zarr", data, (5,), [numcodecs.Delta(dtype="<f8", astype="<f4")], "zstd")
    with pytest.raises(FormatError, match="delta"):
        zd.open_array(tmp_path / "d.zarr")[...]
