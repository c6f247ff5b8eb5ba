"""Reads of one box through the plug-in skip zarr-python's batch of chunks (``box_reads``): the
selections that are one box reach the engine without the per-chunk batch and equal zarr-python's
own reads; every other selection, array and buffer takes the batch path as before."""

from __future__ import annotations

import asyncio
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
from zarr.core.buffer import cpu as cpu_buffer
from zarr.core.indexing import BasicIndexer, CoordinateIndexer, OrthogonalIndexer
from zarr_plugin_helpers import STORE_KINDS, count_pipeline_calls, make_store, open_off, open_on, regular_grid

import zarr_device
from zarr_device.zarr_plugin import box_reads
from zarr_device.zarr_plugin.pipeline import FallbackWarning


@pytest.fixture
def box_threads() -> list[int]:
    """The threads the plug-in's pipeline read boxes on, one entry a box (filled by ``calls``)."""
    return []


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch, box_threads: list[int]) -> dict[str, int]:
    """How often the plug-in's pipeline was asked to read a batch of chunks and a box."""
    return count_pipeline_calls(monkeypatch, "read", "read_box", box_threads)


def _array(store: Any, **kwargs: Any) -> tuple[zarr.Array, np.ndarray]:
    values = np.arange(20 * 18, dtype="float32").reshape(20, 18) * np.float32(1.5)
    kwargs.setdefault("chunks", (3, 4))
    array = zarr.create_array(store, name="a", shape=values.shape, dtype="float32", fill_value=-1, **kwargs)
    array[:] = values
    return array, values


def test_installed_over_zarr_pythons_function() -> None:
    import zarr.core.array as zarr_array

    assert box_reads.installed()
    wrappers = (box_reads._get_selection, box_reads._get_selection_with_grid)  # noqa: SLF001
    assert zarr_array._get_selection in wrappers


@pytest.mark.parametrize("kind", STORE_KINDS)
@pytest.mark.parametrize(
    "selection",
    [
        np.s_[:],
        np.s_[...],
        np.s_[2:17, 5:],
        np.s_[1:19:3, ::5],
        np.s_[7],
        np.s_[4, 3:9],
        np.s_[-1, -2],
        np.s_[..., 7],
    ],
    ids=["all", "ellipsis", "slices", "steps", "row", "row-part", "scalar", "column"],
)
def test_boxes_skip_the_batch_and_equal_zarr_python(
    kind: str, selection: Any, tmp_path: Path, calls: dict[str, int]
) -> None:
    store = make_store(kind, tmp_path)
    _, values = _array(store)
    expected = open_off(store, "a")[selection]
    calls.update(batch=0, box=0)
    got = open_on(store, "a", like="numpy")[selection]
    assert calls == {"batch": 0, "box": 1}
    assert_bits_equal(np.asarray(got), np.asarray(expected))
    assert_bits_equal(np.asarray(got), values[selection])
    assert type(got) is type(expected)


def test_blocks_and_orthogonal_slices_are_boxes(tmp_path: Path, calls: dict[str, int]) -> None:
    store = make_store("local", tmp_path)
    _, values = _array(store)
    on = open_on(store, "a", like="numpy")
    assert_bits_equal(on.blocks[1:3, 2], values[3:9, 8:12])
    assert_bits_equal(on.oindex[2:11, 4:6], values[2:11, 4:6])
    assert calls == {"batch": 0, "box": 2}


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_synchronous_boxes_are_read_on_the_calling_thread(
    kind: str, tmp_path: Path, calls: dict[str, int], box_threads: list[int]
) -> None:
    # Not on zarr-python's event loop, nor on a worker thread it hands the read to: the caller
    # waits in any case, and reads from several threads then run at once.
    import zarr.core.array as zarr_array

    assert set(box_reads.sync_installed()) == {"get_basic_selection", "get_orthogonal_selection", "get_block_selection"}
    assert zarr_array.Array.get_basic_selection.__wrapped__ is not None
    store = make_store(kind, tmp_path)
    _, values = _array(store)
    on = open_on(store, "a", like="numpy")
    assert_bits_equal(on[2:17, 5:], values[2:17, 5:])
    assert_bits_equal(on.oindex[1:4, 3:9], values[1:4, 3:9])
    assert_bits_equal(on.blocks[2, 1:3], values[6:9, 4:12])
    assert_bits_equal(on.get_basic_selection(np.s_[3, 4]), values[3, 4])
    assert calls == {"batch": 0, "box": 4}
    assert box_threads == [threading.get_ident()] * 4


def test_boxes_read_from_many_threads_at_once_equal_zarr_python(tmp_path: Path, box_threads: list[int], calls: dict[str, int]) -> None:
    store = make_store("local", tmp_path)
    _, values = _array(store)
    on = open_on(store, "a", like="numpy")
    boxes = [np.s_[i % 20 : i % 20 + 1 + i % 7, (i * 5) % 18 :] for i in range(96)]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda box: on[box], boxes))
    for box, result in zip(boxes, got):
        assert_bits_equal(result, values[box])
    assert calls == {"batch": 0, "box": len(boxes)}
    assert len(set(box_threads)) > 1


def test_asynchronous_reads_take_boxes_off_the_event_loop(
    tmp_path: Path, calls: dict[str, int], box_threads: list[int]
) -> None:
    store = make_store("local", tmp_path)
    _, values = _array(store)
    on = open_on(store, "a", like="numpy")

    async def read() -> tuple[Any, int]:
        return await on.async_array.getitem(np.s_[4:9, 2:7]), threading.get_ident()

    got, loop_thread = asyncio.run(read())
    assert_bits_equal(np.asarray(got), values[4:9, 2:7])
    assert calls == {"batch": 0, "box": 1}
    assert box_threads[0] != loop_thread


def test_other_selections_take_the_batch(tmp_path: Path, calls: dict[str, int]) -> None:
    store = make_store("local", tmp_path)
    _, values = _array(store)
    on = open_on(store, "a", like="numpy")
    rows = np.array([0, 7, 19])
    assert_bits_equal(on.oindex[rows, 2:5], values[rows, 2:5])
    cols = np.array([1, 6, 17])
    assert_bits_equal(on.vindex[rows, cols], values[rows, cols])
    mask = values > 100
    assert_bits_equal(on.vindex[mask], values[mask])
    assert_bits_equal(on.oindex[3, cols], values[3, cols])  # a dropped axis
    assert calls["box"] == 0 and calls["batch"] == 4


def test_box_reads_fill_missing_chunks_and_sharded_arrays(tmp_path: Path) -> None:
    store = make_store("local", tmp_path)
    array = zarr.create_array(store, name="s", shape=(20, 18), chunks=(2, 3), shards=(4, 6), dtype="int16", fill_value=7)
    array[4:8, 6:12] = np.arange(24, dtype="int16").reshape(4, 6)
    expected = open_off(store, "s")[1:15, 2:17]
    assert_bits_equal(open_on(store, "s", like="numpy")[1:15, 2:17], expected)
    assert (expected == 7).sum() > 0


def test_out_buffer_is_filled_in_place(tmp_path: Path, calls: dict[str, int]) -> None:
    store = make_store("local", tmp_path)
    _, values = _array(store)
    on = open_on(store, "a", like="numpy")
    out = cpu_buffer.NDBuffer.from_numpy_array(np.zeros((5, 18), dtype="float32"))
    on.get_basic_selection(np.s_[10:15], out=out)
    assert calls == {"batch": 0, "box": 1}
    assert_bits_equal(out.as_numpy_array(), values[10:15])
    with pytest.raises(ValueError, match="shape"):  # zarr-python's own check, as without the plug-in
        on.get_basic_selection(np.s_[10:16], out=out)


def test_a_resized_array_is_read_as_stored(tmp_path: Path) -> None:
    store = make_store("local", tmp_path)
    _, values = _array(store)
    on = open_on(store, "a", like="numpy")
    on[:2]  # the engine has the array open
    grown = zarr.open_array(store, path="a")
    grown.resize((26, 18))
    grown[20:] = np.full((6, 18), 3, dtype="float32")
    again = open_on(store, "a", like="numpy")
    assert_bits_equal(again[18:], np.concatenate([values[18:], np.full((6, 18), 3, dtype="float32")]))


def test_arrays_the_engine_does_not_serve_still_fall_back(tmp_path: Path, calls: dict[str, int]) -> None:
    store = make_store("local", tmp_path)
    array = zarr.create_array(store, name="t", shape=(6,), chunks=(2,), dtype="<U4", fill_value="")
    array[:] = np.array(["a", "bb", "ccc", "dddd", "e", ""])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = open_on(store, "t", like="numpy")[1:5]
    assert list(got) == ["bb", "ccc", "dddd", "e"]
    assert any(issubclass(w.category, FallbackWarning) for w in caught)
    assert calls["batch"] == 1 and calls["box"] == 1  # declined, then zarr-python's codecs


def test_box_of_names_only_boxes() -> None:
    shape, chunks = (20, 18), (3, 4)
    grid = regular_grid(shape, chunks)
    assert box_reads.box_of(BasicIndexer(np.s_[2:9:2, 4], shape, grid)) == (
        (slice(2, 9, 2), 4),
        ((2, 2, 4), (4, 1, 1)),
    )
    assert box_reads.box_of(BasicIndexer(np.s_[5:5], shape, grid)) is None  # nothing selected
    assert box_reads.box_of(OrthogonalIndexer((np.array([1, 2]), slice(None)), shape, grid)) is None
    assert box_reads.box_of(CoordinateIndexer((np.array([1]), np.array([2])), shape, grid)) is None


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_slicing_equals_zarr_python(data: st.DataObject) -> None:
    store = zarr.storage.MemoryStore()
    _, values = _array(store, chunks=(data.draw(st.integers(1, 7)), data.draw(st.integers(1, 7))))
    selection: list[int | slice] = []
    for extent in values.shape:
        if data.draw(st.booleans()):
            selection.append(data.draw(st.integers(-extent, extent - 1)))
        else:
            start = data.draw(st.integers(0, extent - 1))
            stop = data.draw(st.integers(start + 1, extent))
            selection.append(slice(start, stop, data.draw(st.integers(1, 4))))
    key = tuple(selection)
    with zarr_device.enable(like="numpy"):
        got = zarr.open_array(store, path="a")[key]
    assert_bits_equal(np.asarray(got), np.asarray(values[key]))
