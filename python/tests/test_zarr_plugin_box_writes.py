"""Synchronous writes of one box through the plug-in run on the calling thread (``box_writes``):
values already of the selection's shape and the array's data type go to the engine there, without
zarr-python's event loop and batch of chunks, and store what zarr-python stores; every other write
(values zarr-python converts, index arrays, ``write_empty_chunks``, arrays the engine does not
serve) takes zarr-python's path as before."""

from __future__ import annotations

import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import assert_bits_equal
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr_plugin_helpers import STORE_KINDS, count_pipeline_calls, chunk_keys, make_store, open_off, open_on, pipeline_of

import zarr_device
from zarr_device.zarr_plugin import box_writes
from zarr_device.zarr_plugin.pipeline import DevicePipeline, FallbackWarning

SHAPE, CHUNKS = (20, 18), (3, 4)


@pytest.fixture
def box_threads() -> list[int]:
    """The threads the plug-in's pipeline wrote boxes on, one entry a box (filled by ``calls``)."""
    return []


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch, box_threads: list[int]) -> dict[str, int]:
    """How often the plug-in's pipeline was asked to write a batch of chunks and a box."""
    return count_pipeline_calls(monkeypatch, "write", "write_box", box_threads)


def _pair(
    tmp_path: Path, kind: str = "local", config: dict[str, Any] | None = None
) -> tuple[zarr.Array, zarr.Array]:
    """The same new array (float32, fill -1) in two stores, to write through the plug-in and
    through zarr-python alone, both with the array ``config`` given."""
    made = []
    for _ in range(2):
        store = make_store(kind, tmp_path)
        zarr.create_array(store, name="a", shape=SHAPE, chunks=CHUNKS, dtype="float32", fill_value=-1)
        made.append(store)
    on, off = open_on(made[0], "a", like="numpy"), open_off(made[1], "a")
    if config:
        with zarr_device.enable(like="numpy"):
            on = on.with_config(config)
        off = off.with_config(config)
        assert isinstance(pipeline_of(on), DevicePipeline)
    return on, off


def _values(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 100).astype("float32")


def test_installed_over_zarr_pythons_methods() -> None:
    assert set(box_writes.installed()) == {"set_basic_selection", "set_orthogonal_selection", "set_block_selection"}
    assert zarr.Array.set_basic_selection.__wrapped__ is not None


@pytest.mark.parametrize("kind", STORE_KINDS)
@pytest.mark.parametrize(
    "selection",
    [np.s_[:], np.s_[2:17, 5:], np.s_[1:19:3, ::5], np.s_[7], np.s_[4, 3:9], np.s_[..., 7]],
    ids=["all", "slices", "steps", "row", "row-part", "column"],
)
def test_boxes_are_written_on_the_calling_thread_and_store_what_zarr_python_stores(
    kind: str, selection: Any, tmp_path: Path, calls: dict[str, int], box_threads: list[int]
) -> None:
    on, off = _pair(tmp_path, kind)
    values = _values(np.empty(SHAPE)[selection].shape)
    off[selection] = values
    calls.update(batch=0, box=0)
    on[selection] = values
    assert calls == {"batch": 0, "box": 1}
    assert box_threads == [threading.get_ident()]
    assert_bits_equal(open_off(on.store, "a")[...], off[...])
    assert chunk_keys(on.store, "a") == chunk_keys(off.store, "a")


def test_blocks_and_orthogonal_slices_are_boxes(tmp_path: Path, calls: dict[str, int]) -> None:
    on, off = _pair(tmp_path)
    for target in (on, off):
        target.blocks[1:3, 2] = _values((6, 4), 1)
        target.oindex[2:11, 4:6] = _values((9, 2), 2)
    assert calls == {"batch": 0, "box": 2}
    assert_bits_equal(open_off(on.store, "a")[...], off[...])


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(7.5, id="scalar"),
        pytest.param(np.arange(5 * 18, dtype="float64").reshape(5, 18), id="another-dtype"),
        pytest.param(np.arange(5 * 18, dtype="int16").reshape(5, 18), id="integers"),
        pytest.param([[1.0] * 18] * 5, id="list"),
    ],
)
def test_values_zarr_python_converts_take_its_path(value: Any, tmp_path: Path, calls: dict[str, int]) -> None:
    on, off = _pair(tmp_path)
    off[3:8] = value
    calls.update(batch=0, box=0)
    on[3:8] = value
    assert calls == {"batch": 1, "box": 0}
    assert_bits_equal(open_off(on.store, "a")[...], off[...])


def test_index_arrays_take_the_batch(tmp_path: Path, calls: dict[str, int]) -> None:
    on, off = _pair(tmp_path)
    rows = np.array([0, 7, 19])
    for target in (on, off):
        target.oindex[rows, 2:5] = _values((3, 3), 3)
        target.vindex[rows, np.array([1, 6, 17])] = _values((3,), 4)
    assert calls["box"] == 0 and calls["batch"] == 2
    assert_bits_equal(open_off(on.store, "a")[...], off[...])


def test_write_empty_chunks_takes_the_batch_and_stores_them(tmp_path: Path, calls: dict[str, int]) -> None:
    on, off = _pair(tmp_path, config={"write_empty_chunks": True})
    fill = np.full((6, 8), -1, dtype="float32")
    for target in (on, off):
        target[0:6, 0:8] = fill
    assert calls == {"batch": 1, "box": 0}
    assert chunk_keys(on.store, "a") == chunk_keys(off.store, "a") and len(chunk_keys(off.store, "a")) == 4


def test_chunks_left_all_fill_value_are_not_stored(tmp_path: Path, calls: dict[str, int]) -> None:
    on, off = _pair(tmp_path)
    for target in (on, off):
        target[...] = _values(SHAPE, 5)
        target[0:6, 0:8] = np.full((6, 8), -1, dtype="float32")
    assert calls == {"batch": 0, "box": 2}
    assert chunk_keys(on.store, "a") == chunk_keys(off.store, "a")
    assert_bits_equal(open_off(on.store, "a")[...], off[...])


def test_arrays_the_engine_does_not_serve_still_fall_back(tmp_path: Path, calls: dict[str, int]) -> None:
    store = make_store("local", tmp_path)
    zarr.create_array(store, name="t", shape=(6,), chunks=(2,), dtype="<U4", fill_value="")
    on = open_on(store, "t", like="numpy")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        on[1:5] = np.array(["bb", "ccc", "dddd", "e"], dtype="<U4")
    assert list(open_off(store, "t")[...]) == ["", "bb", "ccc", "dddd", "e", ""]
    assert any(issubclass(w.category, FallbackWarning) for w in caught)
    assert calls == {"batch": 1, "box": 1}  # declined, then zarr-python's codecs


def test_zarr_v2_arrays_are_written_by_zarr_python(tmp_path: Path, calls: dict[str, int]) -> None:
    store = make_store("local", tmp_path)
    zarr.create_array(store, name="v2", shape=(8,), chunks=(4,), dtype="int32", fill_value=0, zarr_format=2)
    on = open_on(store, "v2", like="numpy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        on[2:6] = np.arange(4, dtype="int32")
    assert calls["box"] == 0
    assert_bits_equal(open_off(store, "v2")[...], np.array([0, 0, 0, 1, 2, 3, 0, 0], dtype="int32"))


def test_boxes_written_from_many_threads_at_once(tmp_path: Path, calls: dict[str, int], box_threads: list[int]) -> None:
    # Disjoint boxes that share chunks (rows of 1 in chunks of 3): the engine's read-modify-write
    # of each chunk keeps every thread's rows.
    on, _ = _pair(tmp_path)
    expected = _values(SHAPE, 6)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda row: on.__setitem__(np.s_[row], expected[row]), range(SHAPE[0])))
    assert calls == {"batch": 0, "box": SHAPE[0]}
    assert len(set(box_threads)) > 1
    assert_bits_equal(open_off(on.store, "a")[...], expected)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_any_slicing_stores_what_zarr_python_stores(data: st.DataObject, tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp_path = tmp_path_factory.mktemp("w")
    on, off = _pair(tmp_path)
    selection = tuple(
        slice(data.draw(st.integers(0, n - 1)), data.draw(st.integers(1, n)), data.draw(st.integers(1, 4)))
        for n in SHAPE
    )
    shape = np.empty(SHAPE)[selection].shape
    values = _values(shape, data.draw(st.integers(0, 1000)))
    for target in (on, off):
        target[...] = _values(SHAPE, 7)
        target[selection] = values
    assert_bits_equal(open_off(on.store, "a")[...], off[...])
