"""Property tests of the zarr-python plug-in: for random shapes, chunk and shard shapes and every
kind of selection zarr-python offers, reads with the plug-in on equal zarr-python's own bit for
bit, and writes leave the store as zarr-python's writes leave it (same values, same chunks)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
import zarr.storage
from conftest import assert_bits_equal, random_values
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr.codecs import ZstdCodec
from zarr_plugin_helpers import as_numpy, chunk_keys, open_off, open_on

import zarr_device


pytestmark = pytest.mark.filterwarnings("error::zarr_device.zarr_plugin.pipeline.FallbackWarning")

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def layouts(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...] | None]:
    """(shape, chunks, shards or None)."""
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.integers(1, n)) for n in shape)
    shards = None
    if draw(st.booleans()):
        shards = tuple(c * draw(st.integers(1, 3)) for c in chunks)
    return shape, chunks, shards


def _index_array(draw: st.DrawFn, extent: int, unique: bool) -> np.ndarray:
    values = draw(st.lists(st.integers(0, extent - 1), min_size=1, max_size=extent, unique=unique))
    return np.array(values, dtype=np.intp)


@st.composite
def selections(draw: st.DrawFn, shape: tuple[int, ...], chunks: tuple[int, ...]) -> tuple[str, Any]:
    """A selection of one of zarr-python's kinds: ("basic" | "o" | "v" | "mask" | "b", selection)."""
    kind = draw(st.sampled_from(["basic", "o", "v", "mask", "b"]))
    if kind == "basic":
        items: list[Any] = []
        for n in shape:
            if draw(st.booleans()):
                items.append(draw(st.integers(-n, n - 1)))
            else:
                start = draw(st.none() | st.integers(-n, n))
                stop = draw(st.none() | st.integers(-n, n))
                items.append(slice(start, stop, draw(st.none() | st.integers(1, 4))))
        return kind, tuple(items)
    if kind == "o":
        items = []
        for n in shape:
            choice = draw(st.sampled_from(["int", "slice", "ints", "mask"]))
            if choice == "int":
                items.append(draw(st.integers(0, n - 1)))
            elif choice == "slice":
                items.append(slice(draw(st.integers(0, n - 1)), n, draw(st.integers(1, 3))))
            elif choice == "ints":
                items.append(_index_array(draw, n, unique=True))
            else:
                mask = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
                mask[draw(st.integers(0, n - 1))] = True
                items.append(mask)
        return kind, tuple(items)
    if kind == "v":
        # Coordinates in one dimension or in a 2-d grid of points (the result takes their shape).
        grid = draw(st.sampled_from([(1,), (2,), (3,), (8,), (2, 3), (3, 1), (1, 4)]))
        count = int(np.prod(grid))
        return kind, tuple(
            np.array(draw(st.lists(st.integers(0, n - 1), min_size=count, max_size=count)), dtype=np.intp).reshape(grid)
            for n in shape
        )
    if kind == "mask":
        flat = draw(st.lists(st.booleans(), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
        return kind, np.array(flat, dtype=bool).reshape(shape)
    blocks = []
    for n, c in zip(shape, chunks):
        count = -(-n // c)
        if draw(st.booleans()):
            blocks.append(draw(st.integers(0, count - 1)))
        else:
            first = draw(st.integers(0, count - 1))
            blocks.append(slice(first, draw(st.integers(first + 1, count))))
    return kind, tuple(blocks)


def _accessor(array: zarr.Array, kind: str) -> Any:
    return {"basic": array, "o": array.oindex, "v": array.vindex, "mask": array.vindex, "b": array.blocks}[kind]


def _store(root: str, name: str, shape: tuple[int, ...], chunks: tuple[int, ...], shards: tuple[int, ...] | None,
           dtype: str, data: np.ndarray) -> zarr.storage.LocalStore:
    store = zarr.storage.LocalStore(Path(root) / name)
    array = zarr.create_array(
        store, name="a", shape=shape, chunks=chunks, shards=shards, dtype=dtype,
        fill_value=0, compressors=ZstdCodec(level=1),
    )  # fmt: skip
    array[...] = data
    return store


@SETTINGS
@given(layout=layouts(), data=st.data(), dtype=st.sampled_from(["uint8", "int32", "float64", "bfloat16"]),
       like=st.sampled_from(["numpy", "torch"]))  # fmt: skip
def test_reads(layout: tuple[Any, ...], data: st.DataObject, dtype: str, like: str) -> None:
    """Reads equal zarr-python's, as NumPy arrays and as torch tensors (which keep bfloat16)."""
    if like == "torch":
        pytest.importorskip("torch")
    shape, chunks, shards = layout
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    values = random_values(dtype, shape, rng)
    values[tuple(slice(0, c) for c in chunks)] = 0  # a missing chunk
    with tempfile.TemporaryDirectory() as root:
        store = _store(root, "s", shape, chunks, shards, dtype, values)
        off, on = open_off(store, "a"), open_on(store, "a", like=like)
        for _ in range(3):
            kind, selection = data.draw(selections(shape, (shards or chunks)))
            expected = np.asarray(_accessor(off, kind)[selection])  # plain zarr-python, switch off
            with zarr_device.enable(like=like):
                got = _accessor(on, kind)[selection]
            if like == "torch" and np.ndim(expected) > 0:
                assert type(got).__module__.split(".")[0] == "torch", f"{kind} {selection!r}"
            assert_bits_equal(as_numpy(got), expected, f"{kind} {selection!r}")


@SETTINGS
@given(layout=layouts(), data=st.data(), scalar=st.booleans())
def test_writes(layout: tuple[Any, ...], data: st.DataObject, scalar: bool) -> None:
    shape, chunks, shards = layout
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    start = rng.integers(1, 100, size=shape).astype("int16")
    with tempfile.TemporaryDirectory() as root:
        plain_store = _store(root, "plain", shape, chunks, shards, "int16", start)
        plugin_store = _store(root, "plugin", shape, chunks, shards, "int16", start)
        plain, plugin = open_off(plain_store, "a"), open_on(plugin_store, "a")
        for _ in range(2):
            kind, selection = data.draw(selections(shape, (shards or chunks)))
            if kind == "v":
                # One row per point: index arrays of any (broadcast) shape.
                points = np.broadcast(*selection).shape
                coordinates = np.stack([np.broadcast_to(s, points).ravel() for s in selection], axis=1)
                if len(np.unique(coordinates, axis=0)) != len(coordinates):
                    continue  # a coordinate given twice: which of its values lands is not defined
            target_shape = np.asarray(_accessor(plain, kind)[selection]).shape
            # Zeros too, so that chunks come back to the fill value and are removed.
            values: Any = int(rng.integers(0, 3)) if scalar else rng.integers(-2, 3, size=target_shape).astype("int16")
            try:
                _accessor(plain, kind)[selection] = values
            except (IndexError, ValueError):
                # zarr-python 3.1.6 fails some orthogonal writes with integers into sharded arrays.
                # It may leave a damaged shard behind: this example ends here.
                if not (kind == "o" and shards is not None):
                    raise
                return
            _accessor(plugin, kind)[selection] = values
            assert_bits_equal(open_off(plugin_store, "a")[...], open_off(plain_store, "a")[...], f"{kind} {selection!r}")
            assert chunk_keys(plugin_store, "a") == chunk_keys(plain_store, "a")
