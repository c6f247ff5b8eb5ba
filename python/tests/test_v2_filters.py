"""Zarr v2 arrays with filters, as zarr-python writes them (``filters=[numcodecs.Shuffle(...)]``):
numcodecs' shuffle before the compressor reads bit for bit as zarr-python reads it, in C and F order,
whole and by selection; a filter that works on values (delta, ...) is refused by name."""

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


def test_a_filter_on_values_is_refused_by_name(tmp_path: Path) -> None:
    data = np.arange(20, dtype="<i4")
    _write(tmp_path / "d.zarr", data, (5,), [numcodecs.Delta(dtype="<i4")], "zstd")
    with pytest.raises(FormatError, match="delta"):
        zd.open_array(tmp_path / "d.zarr")[...]
