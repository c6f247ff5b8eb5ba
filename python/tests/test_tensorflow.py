"""like="tensorflow": reads into eager tf.Tensors, on the CPU through TensorFlow's DLPack import of
the NumPy array the engine filled (bfloat16 bitcast from its bits; float8 converted, one copy), bit
for bit what NumPy reads; tf.Variable as out=; typed errors for the types TensorFlow lacks; writes
from tensors; and, on a GPU, tensors wrapping the engine's device memory (marked gpu).

Every TensorFlow test is in this module, which is skipped as a whole when TensorFlow cannot be
imported (it takes seconds to import, and is an optional peer)."""

from __future__ import annotations

import contextlib
import importlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import assert_bits_equal, drawn_array_and_selection, filled_array, random_values, selection_id
from hypothesis import given, settings
from hypothesis import strategies as st

import zarr_device as zd
from zarr_device.io.devices import DeviceSpec, cuda_device_count

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up notices
# TensorFlow and Triton (torch's kernel compiler, which torch loads on demand) each carry LLVM:
# with TensorFlow loaded first, LLVM aborts the process when Triton loads ("inconsistency in
# registered CommandLine options"). The suite shares one process, so Triton goes first.
with contextlib.suppress(ImportError):
    importlib.import_module("triton._C.libtriton")
try:
    import tensorflow as tf
except Exception as e:  # not installed, or an install that fails to load (no wheel for this CPU, ...)
    pytest.skip(f"TensorFlow cannot be imported ({e}): pip install tensorflow-cpu", allow_module_level=True)


def _tf_type(name: str) -> Any:
    try:
        return tf.dtypes.as_dtype(zd.basics.numpy_dtypes.to_numpy_dtype(name))
    except TypeError:
        return None


TF_TYPES = {name: _tf_type(name) for name in zd.ZARR_DTYPE_NAMES if _tf_type(name) is not None}
MISSING = [name for name in zd.ZARR_DTYPE_NAMES if name not in TF_TYPES]


def test_tensorflow_has_the_types_it_is_said_to_have() -> None:
    assert {"bool", "uint64", "complex128", "bfloat16", "float8_e4m3fn", "float8_e5m2"} <= set(TF_TYPES)
    assert {"float8_e3m4", "float8_e8m0fnu"} <= set(MISSING)


@pytest.mark.parametrize("dtype", list(TF_TYPES))
def test_reads_equal_numpy(tmp_path: Path, dtype: str) -> None:
    arr, values = filled_array(tmp_path / "a", dtype)
    for sel in ((Ellipsis,), (slice(1, 8, 2), slice(None, None, 3)), (4, slice(2, 6)), (3, 5), (slice(5, 5),)):
        result = arr.read(sel, like="tensorflow")
        assert isinstance(result, tf.Tensor) and result.dtype == TF_TYPES[dtype]
        assert tuple(result.shape) == values[sel].shape and "CPU" in result.device
        assert_bits_equal(result.numpy(), values[sel], f"{dtype} {sel}")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "bool"])
def test_results_share_the_memory_the_engine_filled(dtype: str) -> None:
    """No copy on the CPU: the tensor is TensorFlow's DLPack import of the host array the engine
    filled, so a change to that array shows in the tensor."""
    from zarr_device.io.adapters import adapter

    carrier = np.zeros(4, dtype=np.uint16 if dtype == "bfloat16" else dtype)
    tensor = adapter("tensorflow").wrap(carrier, dtype)
    assert tensor.dtype == TF_TYPES[dtype]
    carrier[2] = 0x3F80 if dtype == "bfloat16" else 1  # bfloat16 1.0
    assert tensor.numpy()[2] == 1 and tensor.numpy()[1] == 0


@pytest.mark.parametrize("dtype", MISSING)
def test_types_tensorflow_lacks_are_refused(tmp_path: Path, dtype: str) -> None:
    arr, _ = filled_array(tmp_path / "a", dtype)
    with pytest.raises(zd.UsageError) as info:
        arr.read(like="tensorflow")
    assert dtype in str(info.value) and "like='numpy'" in str(info.value)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float8_e4m3fn", "int16"])
def test_variable_out_is_assigned(tmp_path: Path, dtype: str) -> None:
    arr, values = filled_array(tmp_path / "a", dtype)
    out = tf.Variable(np.zeros((9, 7), dtype=values.dtype))  # (tf.zeros makes no float8)
    assert arr.read(out=out) is out
    assert_bits_equal(out.numpy(), values, "tf.Variable out")
    part = tf.Variable(np.zeros((2, 7), dtype=values.dtype))
    assert arr.read((slice(3, 5),), out=part, like="tensorflow") is part
    assert_bits_equal(part.numpy(), values[3:5], "tf.Variable out, a selection")


def test_bad_outs(tmp_path: Path) -> None:
    arr, _ = filled_array(tmp_path / "a", "float32")
    with pytest.raises(zd.UsageError, match="immutable"):
        arr.read(out=tf.zeros((9, 7)))
    with pytest.raises(zd.UsageError, match="dtype"):
        arr.read(out=tf.Variable(tf.zeros((9, 7), dtype=tf.float16)))
    with pytest.raises(zd.UsageError, match="shape"):
        arr.read(out=tf.Variable(tf.zeros((7, 9))))
    with pytest.raises(zd.UsageError, match="like='numpy'"):
        arr.read(out=tf.Variable(tf.zeros((9, 7))), like="numpy")


def test_framework_devices_are_refused(tmp_path: Path) -> None:
    arr, _ = filled_array(tmp_path / "a", "float32")
    with pytest.raises(zd.UsageError, match="like='torch'"):
        arr.read(device=DeviceSpec("framework", None, "mps"), like="tensorflow")


def test_read_many_and_group_read(tmp_path: Path) -> None:
    group = zd.create_group(tmp_path / "g")
    expected = {}
    for i, dtype in enumerate(("float32", "bfloat16", "float8_e5m2", "int64")):
        a = group.create_array(f"w{i}", shape=(6, 5), dtype=dtype, chunks=(4, 4))
        expected[f"w{i}"] = random_values(dtype, (6, 5), np.random.default_rng(i))
        a[...] = expected[f"w{i}"]
    opened = zd.open_group(tmp_path / "g")
    out = {"w1": tf.Variable(tf.zeros((6, 5), dtype=tf.bfloat16))}
    results = zd.read_many(opened.arrays(), like="tensorflow", out=out)
    assert results["w1"] is out["w1"]
    for name, values in expected.items():
        assert_bits_equal(results[name].numpy(), values, name)
    for name, result in opened.read(like="tensorflow").items():
        assert isinstance(result, tf.Tensor)
        assert_bits_equal(result.numpy(), expected[name], f"Group.read {name}")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float8_e4m3fn", "uint32", "bool"])
def test_writes_from_tensors_and_variables(tmp_path: Path, dtype: str) -> None:
    values = random_values(dtype, (9, 7), np.random.default_rng(5))
    arr = zd.create(tmp_path / "a", shape=(9, 7), dtype=dtype, chunks=(4, 3))
    arr[...] = tf.convert_to_tensor(values)
    assert_bits_equal(arr[...], values, "written from a tf.Tensor")
    again = random_values(dtype, (9, 7), np.random.default_rng(6))
    arr[...] = tf.Variable(again)
    assert_bits_equal(arr[...], again, "written from a tf.Variable")


@settings(max_examples=25, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(["float64", "bfloat16", "int8", "float8_e5m2fnuz"]))
def test_any_selection_equals_numpy(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, dtype: str) -> None:
    arr, values, sel = drawn_array_and_selection(tmp_path_factory.mktemp("tf"), data, dtype)
    assert_bits_equal(arr.read(sel, like="tensorflow").numpy(), values[sel], selection_id(sel))


# ----------------------------------------------------------------------------------------------
# on a GPU: tensors wrapping the engine's device memory


def _tf_gpus() -> list[Any]:
    if cuda_device_count() == 0:
        pytest.skip("no CUDA device visible to zarr_device (or a build without CUDA)")
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        pytest.skip("this TensorFlow sees no GPU (tensorflow-cpu, or no CUDA support)")
    return list(gpus)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "float16", "complex64"])
def test_gpu_reads(tmp_path: Path, dtype: str) -> None:
    _tf_gpus()
    arr, values = filled_array(tmp_path / "a", dtype, shape=(100, 90))
    sel = (slice(5, 95, 2), slice(10, None))
    result = arr.read(sel, device="cuda:0", like="tensorflow")
    assert isinstance(result, tf.Tensor) and "GPU:0" in result.device
    assert result.dtype == TF_TYPES[dtype]
    assert_bits_equal(result.numpy(), values[sel], f"GPU {dtype}")
    out = tf.Variable(tf.zeros(values[sel].shape, dtype=TF_TYPES[dtype]))
    assert arr.read(sel, device="cuda:0", out=out) is out
    assert_bits_equal(out.numpy(), values[sel], f"GPU tf.Variable {dtype}")


@pytest.mark.gpu
def test_gpu_refuses_float8(tmp_path: Path) -> None:
    _tf_gpus()
    arr, _ = filled_array(tmp_path / "a", "float8_e4m3fn")
    with pytest.raises(zd.UsageError, match="device='cpu'"):
        arr.read(device="cuda:0", like="tensorflow")
