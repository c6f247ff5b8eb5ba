"""xarray over the zarr-python plug-in: ``xr.open_zarr`` with ``zarr_device.enable()`` on gives
the dataset plain xarray gives (several variables of several types, coordinates, chunks, zstd,
missing values), the engine reading the chunks; on a GPU with ``like="cupy"`` the variables are
CuPy arrays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import assert_bits_equal
from zarr.codecs import ZstdCodec

import zarr_device
from zarr_device.zarr_plugin.pipeline import DevicePipeline

xr = pytest.importorskip("xarray")

# Every array here is one the engine serves: falling back would be a failure.
pytestmark = pytest.mark.filterwarnings("error::zarr_device.zarr_plugin.pipeline.FallbackWarning")


def _dataset(*, index_coords: bool = True) -> Any:
    """Three data variables (float32 with missing values, float64, int16) on a (time, y, x)
    grid, a 2-D coordinate and, with ``index_coords``, the dimensions' own coordinates."""
    rng = np.random.default_rng(7)
    nt, ny, nx = 9, 13, 11
    temperature = rng.standard_normal((nt, ny, nx)).astype("float32")
    temperature[rng.random(temperature.shape) < 0.1] = np.nan
    coords: dict[str, Any] = {"lat": (("y", "x"), rng.random((ny, nx)) * 90.0)}
    if index_coords:
        coords |= {
            "time": np.arange("2024-01-01", nt, dtype="datetime64[D]").astype("datetime64[ns]"),
            "y": np.linspace(-1.0, 1.0, ny),
            "x": np.arange(nx, dtype="int32") * 10,
        }
    return xr.Dataset(
        {
            "temperature": (("time", "y", "x"), temperature, {"units": "K"}),
            "pressure": (("time", "y", "x"), rng.random((nt, ny, nx)) * 1e5),
            "land": (("y", "x"), rng.integers(-5, 300, (ny, nx), dtype="int16")),
        },
        coords=coords,
        attrs={"title": "plug-in test"},
    )


def _write(ds: Any, path: Path) -> None:
    zstd = {"compressors": [ZstdCodec(level=3)]}
    ds.to_zarr(
        path,
        zarr_format=3,
        consolidated=False,
        encoding={
            "temperature": {"chunks": (4, 5, 6), **zstd},
            "pressure": {"chunks": (9, 7, 4), **zstd},
            "land": {"chunks": (13, 3), **zstd},
            "lat": {"chunks": (5, 11), **zstd},
        },
    )


@pytest.fixture
def engine_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the reads the engine serves for the plug-in: a batch of chunks (its length) or one
    box of an array (0)."""
    reads: list[int] = []
    batch_read, box_read = DevicePipeline._read_engine, DevicePipeline.read_box  # noqa: SLF001

    def counted_batch(self: DevicePipeline, batch: Any, *args: Any) -> bool:
        served = batch_read(self, batch, *args)
        if served:
            reads.append(len(batch))
        return served

    def counted_box(self: DevicePipeline, *args: Any) -> bool:
        served = box_read(self, *args)
        if served:
            reads.append(0)
        return served

    monkeypatch.setattr(DevicePipeline, "_read_engine", counted_batch)
    monkeypatch.setattr(DevicePipeline, "read_box", counted_box)
    return reads


@pytest.mark.parametrize("chunks", ["dask", "none"])
def test_open_zarr_equals_plain_xarray(tmp_path: Path, engine_reads: list[int], chunks: str) -> None:
    if chunks == "dask":
        pytest.importorskip("dask")
    _write(_dataset(), tmp_path / "ds.zarr")
    kwargs: dict[str, Any] = {"consolidated": False} | ({} if chunks == "dask" else {"chunks": None})
    plain = xr.open_zarr(tmp_path / "ds.zarr", **kwargs).load()
    assert not engine_reads
    with zarr_device.enable(like="numpy"):
        served = xr.open_zarr(tmp_path / "ds.zarr", **kwargs)
        if chunks == "dask":
            assert served["temperature"].chunks == ((4, 4, 1), (5, 5, 3), (6, 5))
        served = served.load()
    assert engine_reads, "the engine read no chunks"
    xr.testing.assert_identical(served, plain)
    for name in ["temperature", "pressure", "land", "lat", "x", "y", "time"]:
        assert_bits_equal(served[name].values, plain[name].values, name)
    assert served["temperature"].attrs["units"] == "K" and served.attrs["title"] == "plug-in test"


@pytest.mark.parametrize("append", [False, True], ids=["write", "append"])
def test_to_zarr_with_the_plug_in_on_writes_what_plain_xarray_writes(tmp_path: Path, append: bool) -> None:
    # zarr-python 3.2+ broke the plug-in's box writes here once (its chunk grid metadata): the
    # store must hold what plain xarray stores, read back by plain xarray.
    ds = _dataset()
    _write(ds, tmp_path / "plain.zarr")
    with zarr_device.enable(like="numpy"):
        _write(ds, tmp_path / "served.zarr")
        if append:
            more = ds.isel(time=slice(0, 3))
            more = more.assign_coords(time=more["time"].values + np.timedelta64(len(ds["time"]), "D"))
            for path in ("plain.zarr", "served.zarr"):
                more.to_zarr(tmp_path / path, append_dim="time", consolidated=False)
    plain = xr.open_zarr(tmp_path / "plain.zarr", consolidated=False, chunks=None).load()
    served = xr.open_zarr(tmp_path / "served.zarr", consolidated=False, chunks=None).load()
    xr.testing.assert_identical(served, plain)
    for name in ["temperature", "pressure", "land", "lat"]:
        assert_bits_equal(served[name].values, plain[name].values, name)


def test_selections_equal_plain_xarray(tmp_path: Path) -> None:
    _write(_dataset(), tmp_path / "ds.zarr")
    plain = xr.open_zarr(tmp_path / "ds.zarr", consolidated=False, chunks=None)
    with zarr_device.enable():
        served = xr.open_zarr(tmp_path / "ds.zarr", consolidated=False, chunks=None)
        for selection in [
            {"time": slice(2, 7), "x": slice(None, None, 3)},
            {"time": 4},
            {"y": [12, 0, 5], "x": [1, 10]},
        ]:
            xr.testing.assert_identical(served.isel(selection).load(), plain.isel(selection).load())


@pytest.mark.gpu
def test_variables_are_cupy_arrays_on_the_gpu(tmp_path: Path) -> None:
    if zarr_device.cuda_device_count() == 0:
        pytest.skip("no CUDA device visible to zarr_device (or a build without CUDA)")
    cupy = pytest.importorskip("cupy")
    # No dimension coordinates: xarray builds pandas indexes from those, which need host memory.
    _write(_dataset(index_coords=False), tmp_path / "ds.zarr")
    plain = xr.open_zarr(tmp_path / "ds.zarr", consolidated=False, chunks=None).load()
    with zarr_device.enable(device="cuda", like="cupy"):
        served = xr.open_zarr(tmp_path / "ds.zarr", consolidated=False, chunks=None).load()
    for name in ["temperature", "pressure", "land", "lat"]:
        assert isinstance(served[name].data, cupy.ndarray), f"{name}: {type(served[name].data)}"
        assert_bits_equal(cupy.asnumpy(served[name].data), plain[name].values, name)
