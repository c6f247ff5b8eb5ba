"""Property tests: random shapes (0-3 dims, size-0 dims included), chunks, optional shards, data
types, codecs and basic selections; zarr_device must agree with zarr-python (and tensorstore for
the extension types) bit for bit."""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import (
    CORE_DTYPES,
    EXTENSION_DTYPES,
    assert_bits_equal,
    bytes_codec,
    numpy_dtype,
    random_values,
    selection_id,
    tensorstore_read,
    write_v3_metadata,
    zarr_python_array,
    zd_supported_dtypes,
)

zd = pytest.importorskip("zarr_device")
pytest.importorskip("zarr")

SETTINGS = settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

CODEC_KINDS = ["none", "zstd", "gzip", "blosc", "crc32c", "transpose"]


@dataclass
class Setup:
    shape: tuple[int, ...]
    chunks: tuple[int, ...]  # inner chunks
    shards: tuple[int, ...] | None
    dtype: str
    codec: str
    seed: int

    def codecs(self) -> list[dict[str, Any]]:
        """The v3 chain; with shards, the chain inside the sharding codec."""
        dt = numpy_dtype(self.dtype)
        b = bytes_codec(dt)
        inner: list[dict[str, Any]]
        if self.codec == "none":
            inner = [b]
        elif self.codec == "zstd":
            inner = [b, {"name": "zstd", "configuration": {"level": 1, "checksum": False}}]
        elif self.codec == "gzip":
            inner = [b, {"name": "gzip", "configuration": {"level": 1}}]
        elif self.codec == "blosc":
            inner = [b, {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle",
                                                             "typesize": dt.itemsize, "blocksize": 0}}]
        elif self.codec == "crc32c":
            inner = [b, {"name": "crc32c"}]
        else:
            order = list(range(len(self.shape)))[::-1]
            inner = [{"name": "transpose", "configuration": {"order": order}}, bytes_codec(dt, "big")]
        if self.shards is None:
            return inner
        return [{
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": list(self.chunks),
                "codecs": inner,
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                "index_location": "end" if self.seed % 2 else "start",
            },
        }]

    @property
    def grid(self) -> tuple[int, ...]:
        return self.shards if self.shards is not None else self.chunks


@st.composite
def setups(draw: st.DrawFn, dtypes: list[str] = CORE_DTYPES) -> Setup:
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.lists(st.integers(0, 9), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.lists(st.integers(1, 5), min_size=ndim, max_size=ndim)))
    shards = None
    if ndim > 0 and draw(st.booleans()):
        shards = tuple(c * draw(st.integers(1, 3)) for c in chunks)
    dtype = draw(st.sampled_from(dtypes))
    codec = draw(st.sampled_from(CODEC_KINDS))
    seed = draw(st.integers(0, 2**32 - 1))
    return Setup(shape, chunks, shards, dtype, codec, seed)


def _index(n: int) -> st.SearchStrategy[Any]:
    bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
    slices = st.builds(slice, bound, bound, st.one_of(st.none(), st.integers(1, 4)))
    if n == 0:
        return slices
    return st.one_of(st.integers(-n, n - 1), slices)


@st.composite
def selections(draw: st.DrawFn, shape: tuple[int, ...]) -> Any:
    """A NumPy basic selection: ints (negative too), slices with step >= 1, Ellipsis, possibly
    fewer entries than dimensions, possibly not a tuple."""
    ndim = len(shape)
    items = [draw(_index(n)) for n in shape]
    form = draw(st.integers(0, 3))
    if form == 1 and ndim > 0:
        # Ellipsis standing for a run of dimensions
        start = draw(st.integers(0, ndim))
        stop = draw(st.integers(start, ndim))
        items = items[:start] + [Ellipsis] + items[stop:]
    elif form == 2:
        # trailing dimensions left out
        items = items[: draw(st.integers(0, ndim))]
    if len(items) == 1 and draw(st.booleans()):
        return items[0]
    if not items and draw(st.booleans()):
        return Ellipsis
    return tuple(items)


def _fill(setup: Setup) -> Any:
    dt = numpy_dtype(setup.dtype)
    if setup.seed % 3 == 0:
        return None
    if dt.kind == "b":
        return True
    if dt.kind in "iu":
        return 3
    if dt.kind == "c":
        return complex(float("nan"), -1.0) if setup.seed % 3 == 1 else complex(2.0, 0.5)
    return float("nan") if setup.seed % 3 == 1 else -1.5


def _partially_written(setup: Setup, rng: np.random.Generator) -> tuple[tuple[slice, ...], np.ndarray]:
    """A random region (maybe empty) and its values; the rest stays fill (missing chunks)."""
    region = []
    for n in setup.shape:
        a = int(rng.integers(0, n + 1))
        b = int(rng.integers(a, n + 1))
        region.append(slice(a, b))
    region_t = tuple(region)
    shape = tuple(s.stop - s.start for s in region_t)
    return region_t, random_values(setup.dtype, shape, rng)


def _create(path: Path, setup: Setup, fill: Any) -> Any:
    """Creates the array with zarr_device, through the explicit codec chain (``chunks`` is then
    the chunk grid) or, for half the examples, through ``shards``/``compressors``/``order``."""
    if setup.seed % 4 < 2 or setup.codec == "transpose" and len(setup.shape) < 2:
        arr = zd.create(str(path), shape=setup.shape, dtype=setup.dtype, chunks=setup.grid,
                        codecs=setup.codecs(), fill_value=fill)
    else:
        compressors: Any = {
            "none": None, "zstd": "zstd", "gzip": "gzip", "blosc": "blosc",
            "crc32c": [{"name": "crc32c"}], "transpose": None,
        }[setup.codec]
        arr = zd.create(str(path), shape=setup.shape, dtype=setup.dtype, chunks=setup.chunks,
                        shards=setup.shards, compressors=compressors, fill_value=fill,
                        order="F" if setup.codec == "transpose" else "C")
    assert tuple(arr.chunks) == setup.chunks
    if setup.shards != setup.chunks:  # (shards == chunks has its own test in test_roundtrip)
        assert (tuple(arr.shards) if arr.shards is not None else None) == setup.shards
    return arr


@SETTINGS
@given(data=st.data(), setup=setups())
def test_zd_reads_what_zarr_python_wrote(data: st.DataObject, setup: Setup) -> None:
    rng = np.random.default_rng(setup.seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "a"
        write_v3_metadata(path, shape=setup.shape, dtype=setup.dtype, chunk_shape=setup.grid,
                          codecs=setup.codecs(), fill_value=_fill(setup))
        z = zarr_python_array(path)
        region, values = _partially_written(setup, rng)
        z[region] = values
        arr = zd.open_array(str(path))
        assert arr.shape == setup.shape
        assert tuple(arr.chunks) == setup.chunks
        assert_bits_equal(arr[...], z[...], "whole array")
        for _ in range(4):
            sel = data.draw(selections(setup.shape), label="selection")
            want = np.asarray(z[sel])
            assert_bits_equal(np.asarray(arr[sel]), want, f"[{selection_id(sel)}]")


@SETTINGS
@given(data=st.data(), setup=setups())
def test_zarr_python_reads_what_zd_wrote(data: st.DataObject, setup: Setup) -> None:
    rng = np.random.default_rng(setup.seed)
    dt = numpy_dtype(setup.dtype)
    fill = _fill(setup)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "a"
        arr = _create(path, setup, fill)
        z = zarr_python_array(path, mode="r")
        model = np.asarray(z[...]).copy()  # all fill: nothing written yet
        assert model.shape == setup.shape
        for _ in range(3):
            sel = data.draw(selections(setup.shape), label="write selection")
            target = model[sel]
            values = random_values(dt, np.shape(target), rng)
            model[sel] = values
            arr[sel] = values
        assert_bits_equal(zarr_python_array(path, mode="r")[...], model, "zarr-python, whole array")
        assert_bits_equal(arr[...], model, "zarr_device, whole array")
        sel = data.draw(selections(setup.shape), label="read selection")
        assert_bits_equal(np.asarray(arr[sel]), np.asarray(model[sel]), f"zarr_device [{selection_id(sel)}]")


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), setup=setups(dtypes=[d for d in EXTENSION_DTYPES if d in zd_supported_dtypes()]))
def test_tensorstore_reads_extension_types_zd_wrote(data: st.DataObject, setup: Setup) -> None:
    rng = np.random.default_rng(setup.seed)
    dt = numpy_dtype(setup.dtype)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "a"
        arr = _create(path, setup, None)
        model = np.zeros(setup.shape, dtype=dt)
        for _ in range(2):
            sel = data.draw(selections(setup.shape), label="write selection")
            values = random_values(dt, np.shape(model[sel]), rng)
            model[sel] = values
            arr[sel] = values
        if math.prod(setup.shape) > 0:
            assert_bits_equal(tensorstore_read(path), model, "tensorstore")
        sel = data.draw(selections(setup.shape), label="read selection")
        assert_bits_equal(np.asarray(arr[sel]), np.asarray(model[sel]), f"zarr_device [{selection_id(sel)}]")


@SETTINGS
@given(shape=st.lists(st.integers(0, 12), min_size=0, max_size=3).map(tuple), data=st.data())
def test_selection_shapes_match_numpy(shape: tuple[int, ...], data: st.DataObject) -> None:
    """Result shapes (ints drop dimensions, slices clip) follow NumPy; values come from an
    in-memory array."""
    store = zd.MemoryStore()
    chunks = tuple(max(1, (n + 1) // 2) for n in shape)
    arr = zd.create(store, shape=shape, dtype="int32", chunks=chunks, compressors=None)
    model = np.arange(math.prod(shape), dtype=np.int32).reshape(shape)
    arr[...] = model
    for _ in range(5):
        sel = data.draw(selections(shape), label="selection")
        got = np.asarray(arr[sel])
        assert got.shape == model[sel].shape, selection_id(sel)
        assert_bits_equal(got, np.asarray(model[sel]), selection_id(sel))
