"""Helpers of the zarr-python plug-in tests: stores of every kind, arrays opened with the plug-in
off and on over the same store, and what a store holds."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import zarr
import zarr.storage
from zarr.core.sync import sync

import zarr_device
from zarr_device.io.transfers import host_values
from zarr_device.zarr_plugin.pipeline import DevicePipeline
from zarr_device.zarr_plugin.zarr_versions import internals

STORE_KINDS = ["local", "memory", "fsspec-memory", "fsspec-local"]

#: Files the engine keeps beside the data of a local array (its chunk locks): not data.
ENGINE_FILES = {".zarr-device.lock"}


def make_store(kind: str, tmp_path: Path) -> Any:
    """A fresh, empty zarr-python store of ``kind``."""
    if kind == "local":
        return zarr.storage.LocalStore(tmp_path / f"s-{uuid.uuid4().hex}")
    if kind == "memory":
        return zarr.storage.MemoryStore()
    if kind == "fsspec-memory":
        return zarr.storage.FsspecStore.from_url(f"memory://zd-plugin-{uuid.uuid4().hex}")
    if kind == "fsspec-local":
        root = tmp_path / f"f-{uuid.uuid4().hex}"
        root.mkdir()
        return zarr.storage.FsspecStore.from_url(f"file://{root}", storage_options={"auto_mkdir": True})
    raise ValueError(kind)


def count_pipeline_calls(monkeypatch: Any, batch: str, box: str, box_threads: list[int]) -> dict[str, int]:
    """Counts the plug-in pipeline's calls of its batch coroutine ``batch`` ("read" or "write")
    and of its method for one box ``box`` ("read_box" or "write_box"), appending the thread of each
    box call to ``box_threads``."""
    counted = {"batch": 0, "box": 0}
    batch_method, box_method = getattr(DevicePipeline, batch), getattr(DevicePipeline, box)

    async def counted_batch(self: DevicePipeline, *args: Any, **kwargs: Any) -> Any:
        counted["batch"] += 1
        return await batch_method(self, *args, **kwargs)

    def counted_box(self: DevicePipeline, *args: Any, **kwargs: Any) -> bool:
        counted["box"] += 1
        box_threads.append(threading.get_ident())
        return bool(box_method(self, *args, **kwargs))

    monkeypatch.setattr(DevicePipeline, batch, counted_batch)
    monkeypatch.setattr(DevicePipeline, box, counted_box)
    return counted


def indexer_grid(array: zarr.Array) -> Any:
    """The chunk grid zarr-python's indexers take for ``array``, in the installed release."""
    adapter = internals()
    assert adapter is not None, f"no adapter for zarr-python {zarr.__version__}"
    return adapter.indexer_grid(array.async_array)


def regular_grid(shape: tuple[int, ...], chunks: tuple[int, ...]) -> Any:
    """The chunk grid indexers take for an array of ``shape`` in ``chunks`` (of an array made in
    memory: how zarr-python builds one differs between releases)."""
    array = zarr.create_array(zarr.storage.MemoryStore(), shape=shape, chunks=chunks, dtype="u1")
    return indexer_grid(array)


def pipeline_of(array: zarr.Array) -> Any:
    return array._async_array.codec_pipeline  # noqa: SLF001 - what zarr-python built for it


def open_on(store: Any, path: str = "", **enable: Any) -> zarr.Array:
    """The array at ``path`` opened with the plug-in on (it keeps the plug-in's pipeline after)."""
    with zarr_device.enable(**enable):
        array = zarr.open_array(store, path=path)
    assert isinstance(pipeline_of(array), DevicePipeline)
    return array


def open_off(store: Any, path: str = "") -> zarr.Array:
    """The same array through zarr-python's own codec pipeline."""
    array = zarr.open_array(store, path=path)
    assert not isinstance(pipeline_of(array), DevicePipeline)
    return array


def stored_keys(store: Any, prefix: str = "") -> set[str]:
    """Every key under ``prefix`` except the engine's lock files."""

    async def collect() -> set[str]:
        return {key async for key in store.list_prefix(prefix)}

    return {k for k in sync(collect()) if k.rsplit("/", 1)[-1] not in ENGINE_FILES}


def chunk_keys(store: Any, prefix: str = "") -> set[str]:
    """The keys under ``prefix`` that are not metadata documents."""
    metadata = {"zarr.json", ".zarray", ".zattrs", ".zgroup"}
    return {k for k in stored_keys(store, prefix) if k.rsplit("/", 1)[-1] not in metadata}


def as_numpy(value: Any) -> np.ndarray:
    """A read's result (NumPy array or scalar, torch tensor) as a NumPy array."""
    return host_values(value)
