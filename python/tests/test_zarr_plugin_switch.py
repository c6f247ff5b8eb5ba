"""The zarr-python plug-in's switch, its use of the engine, its fallback and its buffers:
enable()/disable() set and restore zarr-python's config; reads reach the engine in whole batches;
arrays the engine cannot serve fall back to zarr-python's codecs with one warning (an error when
strict); like="torch" hands out torch tensors on the CPU; CUDA reads (marker ``gpu``)."""

from __future__ import annotations

import importlib.util

import math
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
import zarr.storage
from conftest import assert_bits_equal, random_values
from zarr.codecs import ZstdCodec
from zarr.core.codec_pipeline import BatchedCodecPipeline
from zarr_plugin_helpers import as_numpy, open_off, open_on, pipeline_of

import zarr_device
from zarr_device.core import many
from zarr_device.core.array import Array
from zarr_device.errors import FormatError
from zarr_device.zarr_plugin import DevicePipeline, FallbackWarning, is_enabled

REPO = Path(__file__).resolve().parents[2]


def _array(store: Any, shape: tuple[int, ...] = (12, 10), chunks: tuple[int, ...] = (3, 4), **kwargs: Any) -> np.ndarray:
    data = random_values(kwargs.pop("dtype", "float32"), shape, np.random.default_rng(0))
    zarr.create_array(store, name="a", shape=shape, chunks=chunks, dtype=data.dtype, fill_value=0, **kwargs)[:] = data
    return data


#: like="torch" buffers, and devices torch drives, need torch (the newest-stack environment has none).
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")


# -- the switch -----------------------------------------------------------------------------------
@needs_torch
def test_enable_sets_and_disable_restores_zarr_config() -> None:
    keys = ("codec_pipeline.path", "buffer", "ndbuffer")
    before = {k: zarr.config.get(k) for k in keys}
    zarr_device.enable(like="torch")
    assert zarr.config.get("codec_pipeline.path") == "zarr_device.zarr_plugin.pipeline.DevicePipeline"
    assert zarr.config.get("ndbuffer") == "zarr_device.zarr_plugin.buffers.TorchNDBuffer"
    zarr_device.enable()  # nested: numpy buffers again
    assert zarr.config.get("ndbuffer") == "zarr.buffer.cpu.NDBuffer"
    zarr_device.disable()
    assert zarr.config.get("ndbuffer") == "zarr_device.zarr_plugin.buffers.TorchNDBuffer"
    zarr_device.disable()
    assert {k: zarr.config.get(k) for k in keys} == before
    zarr_device.disable()  # nothing left to undo: nothing happens
    assert {k: zarr.config.get(k) for k in keys} == before


@needs_torch
def test_enable_is_a_context_manager(tmp_path: Path) -> None:
    store = zarr.storage.LocalStore(tmp_path)
    _array(store)
    before = zarr.config.get("codec_pipeline.path")
    with zarr_device.enable(strict=True) as switch:
        assert switch.device.name == "cpu" and switch.like == "numpy"
        assert isinstance(pipeline_of(zarr.open_array(store, path="a")), DevicePipeline)
        with zarr_device.enable(like="torch"):
            assert zarr.config.get("ndbuffer").endswith("TorchNDBuffer")
        assert zarr.config.get("ndbuffer") == "zarr.buffer.cpu.NDBuffer"
    assert zarr.config.get("codec_pipeline.path") == before
    assert not is_enabled()
    assert not isinstance(pipeline_of(zarr.open_array(store, path="a")), DevicePipeline)


@needs_torch
def test_a_switch_entered_again_is_on_again(tmp_path: Path) -> None:
    store = zarr.storage.LocalStore(tmp_path)
    _array(store)
    before = zarr.config.get("ndbuffer")
    switch = zarr_device.enable(like="torch", strict=True)
    with switch:  # already on: entering changes nothing
        assert zarr.config.get("ndbuffer").endswith("TorchNDBuffer")
    assert not is_enabled() and zarr.config.get("ndbuffer") == before
    for _ in range(2):  # a block entered again switches the plug-in on again, with its settings
        with switch as again:
            assert again is switch and is_enabled()
            assert zarr.config.get("ndbuffer").endswith("TorchNDBuffer")
            assert zarr.config.get("codec_pipeline.strict") is True
            assert isinstance(pipeline_of(zarr.open_array(store, path="a")), DevicePipeline)
        assert not is_enabled() and zarr.config.get("ndbuffer") == before
    with zarr_device.enable():  # a spent switch left inside another block undoes only itself
        with switch:
            assert zarr.config.get("ndbuffer").endswith("TorchNDBuffer")
        assert is_enabled() and zarr.config.get("ndbuffer") == "zarr.buffer.cpu.NDBuffer"
    assert not is_enabled()


@pytest.mark.parametrize(
    ("device", "like"),
    [
        ("cpu", "cupy"),
        ("cpu", "tensorflow"),
        pytest.param("mps", "numpy", marks=needs_torch),  # devices torch drives: known only with it
        pytest.param("mps", "cupy", marks=needs_torch),
    ],
)
def test_enable_refuses_mismatched_like(device: str, like: str) -> None:
    with pytest.raises(zarr_device.UsageError, match="like="):
        zarr_device.enable(device=device, like=like)
    assert not is_enabled()


def test_importing_zarr_device_does_not_import_zarr() -> None:
    code = "import sys, zarr_device; assert 'zarr' not in sys.modules, 'zarr imported'; print('ok')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


def test_entry_point_names_the_pipeline() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    entry = project["project"]["entry-points"]["zarr.codec_pipeline"]["zarr_device"]
    module, name = entry.split(":")
    assert module == DevicePipeline.__module__ and name == DevicePipeline.__name__


# -- the engine serves the reads, in batches --------------------------------------------------------
class _Spy:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.read_many: list[int] = []
        self.reads = 0
        self.writes = 0
        self.fallback = 0
        original_many, original_read, original_write = many.read_many, Array.read, Array.write
        original_fallback = BatchedCodecPipeline.read

        def read_many(arrays: Any, **kwargs: Any) -> Any:
            self.read_many.append(len(arrays))
            return original_many(arrays, **kwargs)

        def read(array: Any, *args: Any, **kwargs: Any) -> Any:
            self.reads += 1
            return original_read(array, *args, **kwargs)

        def write(array: Any, *args: Any, **kwargs: Any) -> Any:
            self.writes += 1
            return original_write(array, *args, **kwargs)

        async def fallback(pipeline: Any, *args: Any, **kwargs: Any) -> Any:
            self.fallback += 1
            return await original_fallback(pipeline, *args, **kwargs)

        monkeypatch.setattr(many, "read_many", read_many)
        monkeypatch.setattr(Array, "read", read)
        monkeypatch.setattr(Array, "write", write)
        monkeypatch.setattr(BatchedCodecPipeline, "read", fallback)


@pytest.mark.parametrize("sharded", [False, True])
def test_reads_are_one_engine_call_per_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sharded: bool) -> None:
    store = zarr.storage.LocalStore(tmp_path)
    data = _array(store, shards=(6, 8) if sharded else None, compressors=ZstdCodec(level=1))
    on = open_on(store, "a")
    spy = _Spy(monkeypatch)
    assert_bits_equal(on[1:11, 1:9], data[1:11, 1:9])  # 4 x 3 chunks (2 x 2 shards): one box
    assert (spy.reads, spy.read_many) == (1, [])
    rows, cols = np.array([11, 0, 5, 7, 2]), np.array([9, 1, 4])
    assert_bits_equal(on.oindex[rows, cols], data[np.ix_(rows, cols)])
    chunks_touched = len({(r // 3, c // 4) for r in rows for c in cols})
    shards_touched = len({(r // 6, c // 8) for r in rows for c in cols})
    assert spy.read_many == [shards_touched if sharded else chunks_touched]  # one call, every chunk
    assert spy.fallback == 0
    on[0:12, 0:10] = 1.0  # a box: one engine write
    assert spy.writes == 1


@pytest.mark.parametrize(
    ("encoding", "path", "expected"),
    [
        ({"name": "default", "configuration": {"separator": "/"}}, "g/a/c/1/2", ("g/a", (1, 2))),
        ({"name": "default", "configuration": {"separator": "/"}}, "c/0/0", ("", (0, 0))),
        ({"name": "default", "configuration": {"separator": "."}}, "g/c.3.0", ("g", (3, 0))),
        ({"name": "v2", "configuration": {"separator": "."}}, "a/1.2", ("a", (1, 2))),
        ({"name": "v2", "configuration": {"separator": "/"}}, "a/1/2", ("a", (1, 2))),
        ({"name": "default", "configuration": {"separator": "/"}}, "g/a/c/01/2", None),  # not as encoded
        ({"name": "default", "configuration": {"separator": "/"}}, "g/a/x/1/2", None),
        ({"name": "default", "configuration": {"separator": "/"}}, "c/1", None),
        ({"name": "default", "configuration": {"separator": "."}}, "g/c.1.2.3", None),
        ({"name": "v2", "configuration": {"separator": "."}}, "a/1.b", None),
    ],
)
def test_chunk_keys_split_into_array_path_and_coordinates(
    encoding: dict[str, Any], path: str, expected: tuple[str, tuple[int, ...]] | None
) -> None:
    from zarr.core.metadata import ArrayV3Metadata

    from zarr_device.zarr_plugin.locate import key_layout, split_chunk_key

    metadata = ArrayV3Metadata.from_dict(
        {
            "zarr_format": 3,
            "node_type": "array",
            "shape": [10, 10],
            "data_type": "int8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}},
            "chunk_key_encoding": encoding,
            "fill_value": 0,
            "codecs": [{"name": "bytes"}],
        }
    )
    layout = key_layout(metadata)
    assert layout is not None
    assert split_chunk_key(layout, metadata, path) == expected


def _metadata(encoding: dict[str, Any], shape: list[int], chunks: list[int]) -> Any:
    from zarr.core.metadata import ArrayV3Metadata

    return ArrayV3Metadata.from_dict(
        {
            "zarr_format": 3,
            "node_type": "array",
            "shape": shape,
            "data_type": "int8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
            "chunk_key_encoding": encoding,
            "fill_value": 0,
            "codecs": [{"name": "bytes"}],
        }
    )


@pytest.mark.parametrize(
    "encoding",
    [
        {"name": "default", "configuration": {"separator": "/"}},
        {"name": "default", "configuration": {"separator": "."}},
        {"name": "v2", "configuration": {"separator": "."}},
        {"name": "v2", "configuration": {"separator": "/"}},
    ],
)
@pytest.mark.parametrize("prefix", ["", "g/a"])
def test_a_batch_of_chunk_keys_splits_as_each_key_does(encoding: dict[str, Any], prefix: str) -> None:
    from zarr_device.zarr_plugin.locate import key_layout, split_chunk_key, split_chunk_keys

    metadata = _metadata(encoding, [100, 100], [2, 2])
    layout = key_layout(metadata)
    assert layout is not None
    coords = [(0, 0), (1, 12), (49, 3), (10, 0)]
    paths = [f"{prefix}/{metadata.encode_chunk_key(c)}".lstrip("/") for c in coords]
    assert split_chunk_keys(layout, metadata, paths) == (prefix, coords)
    assert [split_chunk_key(layout, metadata, p) for p in paths] == [(prefix, c) for c in coords]
    # A key spelled otherwise than the encoding does, or another array's, spoils the batch: the
    # caller then looks at each key.
    separator = layout.separator
    for bad in ("01", "+1", " 1", "1_0", "\uff11", "1" + separator + "2" + separator + "3", "x"):
        wrong = paths[1][: len(paths[1]) - len(f"1{separator}12")] + f"{bad}{separator}12"
        assert split_chunk_keys(layout, metadata, [*paths[:1], wrong]) is None, wrong
        if separator not in bad:  # more components: with "/", another array's key, still not this batch's
            assert split_chunk_key(layout, metadata, wrong) is None, wrong
    assert split_chunk_keys(layout, metadata, [paths[0], "other/" + paths[1]]) is None


@given(data=st.data())
@settings(max_examples=150, deadline=None)
def test_a_batch_of_slices_is_one_part_as_single_box_finds(data: st.DataObject) -> None:
    from zarr.core.indexing import BasicIndexer
    from zarr_plugin_helpers import regular_grid

    from zarr_device.zarr_plugin.regions import chunk_part, single_box, tiling_part

    ndim = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.integers(1, 12)) for _ in range(ndim))
    chunks = tuple(data.draw(st.integers(1, 5)) for _ in range(ndim))
    forward = [st.slices(n).filter(lambda s: s.step is None or s.step > 0) for n in shape]  # zarr's only
    selection = tuple(data.draw(st.one_of(st.integers(0, n - 1), f)) for n, f in zip(shape, forward))
    indexer = BasicIndexer(selection, shape, regular_grid(shape, chunks))
    items = list(indexer)
    out_shape = tuple(indexer.shape)
    parts = []
    for coords, chunk_selection, out_selection, _ in items:
        origin = tuple(c * g for c, g in zip(coords, chunks))
        extent = tuple(min(g, n - o) for g, n, o in zip(chunks, shape, origin))
        part = chunk_part(origin, extent, chunk_selection, out_selection)
        if part is not None:
            parts.append(part)
    expected = single_box(parts, out_shape) if parts and not indexer.drop_axes else None
    whole = tiling_part([i[0] for i in items], chunks, [(i[1], i[2]) for i in items], out_shape)
    if whole is not None:  # found: the same box as the general path's
        assert expected is not None
        assert single_box([whole], out_shape) == expected
    # Slices of step 1 alone (no integer, a selection that is not empty): always found.
    plain = all(isinstance(s, slice) and s.step in (None, 1) for s in selection)
    if plain and math.prod(out_shape) > 0:
        assert whole is not None


# -- falling back -------------------------------------------------------------------------------------
def _fallback_arrays(tmp_path: Path) -> dict[str, tuple[Any, Any]]:
    from zarr.codecs.numcodecs import BZ2

    strings = zarr.storage.LocalStore(tmp_path / "strings")
    zarr.create_array(strings, name="a", shape=(5,), chunks=(2,), dtype=str)[:] = np.array(["a", "bb", "", "dddd", "e"])
    bz2 = zarr.storage.LocalStore(tmp_path / "bz2")
    values = np.arange(60, dtype="int32").reshape(6, 10)
    zarr.create_array(bz2, name="a", shape=(6, 10), chunks=(4, 4), dtype="int32", compressors=BZ2(level=1))[:] = values
    return {"string": (strings, np.array(["a", "bb", "", "dddd", "e"])), "bz2": (bz2, values)}


@pytest.mark.parametrize("kind", ["string", "bz2"])
def test_unknown_arrays_fall_back_with_one_warning(tmp_path: Path, kind: str) -> None:
    store, expected = _fallback_arrays(tmp_path)[kind]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        on = open_on(store, "a")
        assert pipeline_of(on).reason is not None
        np.testing.assert_array_equal(as_numpy(on[...]), expected)
        np.testing.assert_array_equal(as_numpy(on[1:3]), expected[1:3])
        on[0] = expected[4]
        np.testing.assert_array_equal(as_numpy(open_off(store, "a")[0]), expected[4])
    ours = [w for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    message = str(ours[0].message)
    assert "'a'" in message and ("bz2" in message if kind == "bz2" else "string" in message.lower())


@pytest.mark.parametrize("kind", ["string", "bz2"])
def test_strict_raises(tmp_path: Path, kind: str) -> None:
    store, _ = _fallback_arrays(tmp_path)[kind]
    with zarr_device.enable(strict=True), pytest.raises(FormatError, match="cannot serve"):
        zarr.open_array(store, path="a")
    with zarr_device.enable(), zarr.config.set({"codec_pipeline.strict": True}), pytest.raises(FormatError):
        zarr.open_array(store, path="a")


def test_v2_writes_fall_back_and_strict_refuses_them(tmp_path: Path) -> None:
    store = zarr.storage.LocalStore(tmp_path)
    zarr.create_array(store, name="a", shape=(4,), chunks=(2,), dtype="int16", zarr_format=2, fill_value=0)
    with zarr_device.enable(strict=True):
        z = zarr.open_array(store, path="a")
        assert_bits_equal(z[...], np.zeros(4, dtype="int16"))  # reads: the engine
        with pytest.raises(FormatError, match="v3 arrays only"):
            z[1] = 3


# -- torch and JAX buffers ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["bool", "uint8", "int32", "uint64", "float16", "float64", "complex64"])
def test_torch_on_the_cpu(tmp_path: Path, dtype: str) -> None:
    torch = pytest.importorskip("torch")
    store = zarr.storage.LocalStore(tmp_path)
    data = _array(store, dtype=dtype, shards=(6, 8))
    off = open_off(store, "a")
    with zarr_device.enable(like="torch"):
        on = zarr.open_array(store, path="a")
        assert isinstance(pipeline_of(on), DevicePipeline)
        for selection in [(Ellipsis,), (slice(2, 9), slice(None, None, 3)), (4, slice(1, 7))]:
            result = on[selection]
            assert isinstance(result, torch.Tensor) and result.device.type == "cpu"
            assert_bits_equal(as_numpy(result), off[selection])
        rows = np.array([3, 0, 11])
        ortho = on.oindex[rows, 1:4]
        assert isinstance(ortho, torch.Tensor)
        assert_bits_equal(as_numpy(ortho), off.oindex[rows, 1:4])
        # Coordinate selections: zarr-python turns the result into NumPy itself.
        assert_bits_equal(as_numpy(on.vindex[rows, np.array([0, 9, 5])]), data[rows, [0, 9, 5]])
        assert_bits_equal(as_numpy(on[3, 4]), data[3, 4])
        on[0:2, :] = data[10:12]
        on.oindex[np.array([5, 6]), np.array([0, 9])] = data[0, 0]
    expected = data.copy()
    expected[0:2] = data[10:12]
    expected[np.ix_([5, 6], [0, 9])] = data[0, 0]
    assert_bits_equal(open_off(store, "a")[...], expected)


def test_torch_fallback_arrays_still_give_tensors(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    store, expected = _fallback_arrays(tmp_path)["bz2"]
    with zarr_device.enable(like="torch"), pytest.warns(FallbackWarning):
        result = zarr.open_array(store, path="a")[1:5]
    assert isinstance(result, torch.Tensor)
    assert_bits_equal(as_numpy(result), expected[1:5])


def test_jax_on_the_cpu(tmp_path: Path) -> None:
    jax = pytest.importorskip("jax")
    store = zarr.storage.LocalStore(tmp_path)
    data = _array(store)
    with zarr_device.enable(like="jax"):
        result = zarr.open_array(store, path="a")[2:5]
    assert isinstance(result, jax.Array)
    assert_bits_equal(np.asarray(result), data[2:5])


# -- CUDA ---------------------------------------------------------------------------------------------
def _cuda_or_skip() -> None:
    if zarr_device.cuda_device_count() == 0:
        pytest.skip("no CUDA device visible to zarr_device (or a build without CUDA)")


@pytest.mark.gpu
@pytest.mark.parametrize("sharded", [False, True])
def test_cuda_cupy(tmp_path: Path, sharded: bool) -> None:
    _cuda_or_skip()
    cupy = pytest.importorskip("cupy")
    store = zarr.storage.LocalStore(tmp_path)
    data = _array(store, shards=(6, 8) if sharded else None, compressors=ZstdCodec(level=1))
    with zarr_device.enable(device="cuda", like="cupy"):
        on = zarr.open_array(store, path="a")
        box = on[1:11, 2:]
        assert isinstance(box, cupy.ndarray)
        assert_bits_equal(cupy.asnumpy(box), data[1:11, 2:])
        rows = np.array([11, 0, 4])
        assert_bits_equal(cupy.asnumpy(on.oindex[rows, 1:9]), data[np.ix_(rows, range(1, 9))])
        on[0:3, 0:4] = cupy.full((3, 4), 2.0, dtype="float32")
    expected = data.copy()
    expected[0:3, 0:4] = 2.0
    assert_bits_equal(open_off(store, "a")[...], expected)


@pytest.mark.gpu
@pytest.mark.parametrize("scheduler", ["threads", "synchronous"])
def test_dask_from_zarr_on_the_gpu(tmp_path: Path, scheduler: str) -> None:
    """dask over zarr-python with the plug-in on a GPU: every block a CuPy array, read by the
    engine, the whole bit-equal to the stored values."""
    _cuda_or_skip()
    cupy = pytest.importorskip("cupy")
    da = pytest.importorskip("dask.array")
    store = zarr.storage.LocalStore(tmp_path)
    data = _array(store, compressors=ZstdCodec(level=1))
    with zarr_device.enable(device="cuda", like="cupy"):
        lazy = da.from_zarr(zarr.open_array(store, path="a"))
        blocks = lazy.blocks[0, 0].compute(scheduler=scheduler)
        whole = lazy[1:, ::2].compute(scheduler=scheduler)
    assert isinstance(blocks, cupy.ndarray)
    assert isinstance(whole, cupy.ndarray)
    assert_bits_equal(cupy.asnumpy(whole), data[1:, ::2])


@pytest.mark.gpu
def test_cuda_torch(tmp_path: Path) -> None:
    _cuda_or_skip()
    torch = pytest.importorskip("torch")
    store = zarr.storage.LocalStore(tmp_path)
    data = _array(store, compressors=ZstdCodec(level=1))
    with zarr_device.enable(device="cuda:0", like="torch"):
        on = zarr.open_array(store, path="a")
        box = on[1:11, 2:]
        assert isinstance(box, torch.Tensor) and box.device == torch.device("cuda", 0)
        assert_bits_equal(as_numpy(box), data[1:11, 2:])
        rows = np.array([11, 0, 4])
        ortho = on.oindex[rows, 1:9]
        assert ortho.device.type == "cuda"
        assert_bits_equal(as_numpy(ortho), data[np.ix_(rows, range(1, 9))])
        on[0:3, 0:4] = np.full((3, 4), 2.0, dtype="float32")
        on.oindex[np.array([5, 7]), np.array([1, 2])] = 3.0
    expected = data.copy()
    expected[0:3, 0:4] = 2.0
    expected[np.ix_([5, 7], [1, 2])] = 3.0
    assert_bits_equal(open_off(store, "a")[...], expected)


@pytest.mark.gpu
@pytest.mark.parametrize(("like", "dtype"), [("cupy", "float32"), ("torch", "float32"), ("torch", "bfloat16")])
def test_cuda_coordinate_selections(tmp_path: Path, like: str, dtype: str) -> None:
    """``vindex`` with coordinates or a mask, and ``get_coordinate_selection`` (sync and async),
    on a GPU: the framework's array on cuda:0 in the coordinates' shape (zarr-python's own
    reshape goes through NumPy, which refuses device arrays), with zarr-python's values."""
    _cuda_or_skip()
    pytest.importorskip(like)
    from zarr.core.sync import sync

    store = zarr.storage.LocalStore(tmp_path)
    data = _array(store, dtype=dtype, compressors=ZstdCodec(level=1))
    rows, cols = np.array([[0, 11, 3], [3, 3, 7]]), np.array([[9, 0, 2], [2, 5, 1]])
    mask = np.arange(120).reshape(12, 10) % 7 == 3
    with zarr_device.enable(device="cuda:0", like=like):
        on = zarr.open_array(store, path="a")
        results = [on.vindex[rows, cols], on.get_coordinate_selection((rows, cols)),
                   sync(on.async_array.get_coordinate_selection((rows, cols)))]  # fmt: skip
        masked = on.vindex[mask]
    for got in [*results, masked]:
        assert type(got).__module__.split(".")[0] == like
        assert "cuda" in str(got.device) or getattr(got.device, "id", None) == 0
    for got in results:
        assert tuple(got.shape) == (2, 3)
        assert_bits_equal(as_numpy(got), data[rows, cols])
    assert_bits_equal(as_numpy(masked), data[mask])
