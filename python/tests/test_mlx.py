"""like="mlx": reads into MLX arrays on the CPU (the engine fills evaluated MLX arrays in place),
bit for bit what NumPy reads, for every data type MLX has; out= MLX arrays; typed errors for the
types MLX lacks and for devices other than the CPU; writes from MLX arrays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import assert_bits_equal, drawn_array_and_selection, filled_array, random_values, selection_id
from hypothesis import given, settings
from hypothesis import strategies as st

import zarr_device as zd
from zarr_device import _core
from zarr_device.io.devices import DeviceSpec

mx = pytest.importorskip("mlx.core", reason="MLX is not installed: pip install 'mlx[cpu]'")

# Every Zarr type MLX has, under MLX's name for it; the others are refused.
MLX_TYPES = {
    name: getattr(mx, "bool_" if name == "bool" else name)
    for name in zd.ZARR_DTYPE_NAMES
    if isinstance(getattr(mx, "bool_" if name == "bool" else name, None), mx.Dtype)
}
MISSING = [name for name in zd.ZARR_DTYPE_NAMES if name not in MLX_TYPES]


def _host(result: Any) -> np.ndarray:
    """An MLX array's values as NumPy, bit for bit (bfloat16 through its bits: NumPy has no
    PEP 3118 format for it)."""
    if result.dtype == mx.bfloat16:
        import ml_dtypes

        return np.array(result.view(mx.uint16)).view(ml_dtypes.bfloat16)
    return np.array(result)


def test_mlx_has_the_types_it_is_said_to_have() -> None:
    assert {"bool", "int8", "uint64", "float16", "float32", "bfloat16", "complex64"} <= set(MLX_TYPES)
    assert {"float8_e4m3fn", "complex128"} <= set(MISSING)


@pytest.mark.parametrize("dtype", list(MLX_TYPES))
def test_reads_equal_numpy(tmp_path: Path, dtype: str) -> None:
    arr, values = filled_array(tmp_path / "a", dtype)
    for sel in ((Ellipsis,), (slice(1, 8, 2), slice(None, None, 3)), (4, slice(2, 6)), (3, 5), (slice(5, 5),)):
        result = arr.read(sel, like="mlx")
        assert isinstance(result, mx.array) and result.dtype == MLX_TYPES[dtype]
        assert tuple(result.shape) == values[sel].shape
        assert_bits_equal(_host(result), values[sel], f"{dtype} {sel}")
        assert_bits_equal(_host(result), arr.read(sel), "like=numpy")


@pytest.mark.parametrize("dtype", MISSING)
def test_types_mlx_lacks_are_refused(tmp_path: Path, dtype: str) -> None:
    arr, _ = filled_array(tmp_path / "a", dtype)
    with pytest.raises(zd.UsageError) as info:
        arr.read(like="mlx")
    assert dtype in str(info.value) and "like='numpy'" in str(info.value)
    with pytest.raises(zd.UsageError, match=dtype):
        zd.read_many({"a": arr}, like="mlx")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "bool", "uint16"])
def test_out_is_filled_in_place(tmp_path: Path, dtype: str) -> None:
    arr, values = filled_array(tmp_path / "a", dtype)
    out = mx.zeros((9, 7), dtype=MLX_TYPES[dtype])
    assert arr.read(out=out) is out
    assert_bits_equal(_host(out), values, "out")
    part = mx.zeros((3, 7), dtype=MLX_TYPES[dtype])
    assert arr.read((slice(2, 5),), out=part, like="mlx") is part
    assert_bits_equal(_host(part), values[2:5], "out, a selection")


def test_bad_out_arrays(tmp_path: Path) -> None:
    arr, _ = filled_array(tmp_path / "a", "float32")
    with pytest.raises(zd.UsageError, match="dtype"):
        arr.read(out=mx.zeros((9, 7), dtype=mx.float16))
    with pytest.raises(zd.UsageError, match="shape"):
        arr.read(out=mx.zeros((7, 9), dtype=mx.float32))
    with pytest.raises(zd.UsageError, match="contiguous"):
        arr.read(out=mx.zeros((7, 9), dtype=mx.float32).T)
    with pytest.raises(zd.UsageError, match="like='torch'"):
        arr.read(out=mx.zeros((9, 7), dtype=mx.float32), like="torch")


def test_devices_other_than_the_cpu_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    arr, _ = filled_array(tmp_path / "a", "float32")
    monkeypatch.setattr(_core, "cuda_device_count", lambda: 1, raising=False)
    for device in ("cuda:0", DeviceSpec("framework", None, "mps")):
        with pytest.raises(zd.UsageError, match="like='mlx' reads to the CPU only|reached through PyTorch"):
            arr.read(device=device, like="mlx")
        with pytest.raises(zd.UsageError):
            zd.read_many({"a": arr}, device=device, like="mlx")


def test_read_many_and_group_read(tmp_path: Path) -> None:
    group = zd.create_group(tmp_path / "g")
    expected = {}
    for i, dtype in enumerate(("float32", "bfloat16", "int8")):
        a = group.create_array(f"w{i}", shape=(6, 5), dtype=dtype, chunks=(4, 4))
        expected[f"w{i}"] = random_values(dtype, (6, 5), np.random.default_rng(i))
        a[...] = expected[f"w{i}"]
    opened = zd.open_group(tmp_path / "g")
    out = {"w0": mx.zeros((6, 5), dtype=mx.float32)}
    results = zd.read_many(opened.arrays(), like="mlx", out=out)
    assert results["w0"] is out["w0"]
    for name, values in expected.items():
        assert isinstance(results[name], mx.array)
        assert_bits_equal(_host(results[name]), values, name)
    for name, result in opened.read(like="mlx").items():
        assert_bits_equal(_host(result), expected[name], f"Group.read {name}")
    assert [n for n, _ in zd.iter_many(opened.arrays(), like="mlx")] == sorted(expected)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64", "complex64", "bool"])
def test_writes_from_mlx_arrays(tmp_path: Path, dtype: str) -> None:
    values = random_values(dtype, (9, 7), np.random.default_rng(11))
    arr = zd.create(tmp_path / "a", shape=(9, 7), dtype=dtype, chunks=(4, 3))
    if dtype == "bfloat16":
        source = mx.array(values.view(np.uint16)).view(mx.bfloat16)
    else:
        source = mx.array(values)
    arr[...] = source
    assert_bits_equal(arr[...], values, "written from MLX")
    arr[2:4, 1] = source[0, 0]  # a 0-d MLX array, broadcast
    values[2:4, 1] = values[0, 0]
    assert_bits_equal(arr[...], values, "0-d MLX values")


@settings(max_examples=25, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(["float32", "bfloat16", "uint8", "complex64"]))
def test_any_selection_equals_numpy(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, dtype: str) -> None:
    arr, values, sel = drawn_array_and_selection(tmp_path_factory.mktemp("mlx"), data, dtype)
    assert_bits_equal(_host(arr.read(sel, like="mlx")), values[sel], selection_id(sel))
