"""``convert`` copies only what the source stores: an array declaring 2^40 elements and storing
no chunk converts in seconds, and a sparse array converts to exactly what a full copy (every
region of the declared shape) writes."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zarr_device as zd
from zarr_device.convert import shared as conversion_shared
from zarr_device.tools import cli
from zarr_device.convert.zarr_to_zarr import convert

zarr = pytest.importorskip("zarr")

HUGE = 2**40


def stored_files(root: Path) -> dict[str, bytes]:
    """Every file of a store but its metadata, with its contents."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "zarr.json"}


def huge(path: Path) -> Path:
    zd.create(path, shape=(HUGE,), chunks=(2**20,), dtype="u1", fill_value=7, mode="w")
    return path


def test_declared_but_unstored_array_converts_in_seconds(tmp_path: Path) -> None:
    source, dest = huge(tmp_path / "huge.zarr"), tmp_path / "out.zarr"
    started = time.perf_counter()
    summary = convert(source, dest, progress=False)
    assert time.perf_counter() - started < 20
    assert summary.bytes_read == 0
    assert stored_files(dest) == {}
    ours, theirs = zd.open(dest, mode="r"), zarr.open_array(str(dest), mode="r")
    assert ours.shape == theirs.shape == (HUGE,)
    for where in (slice(0, 10), slice(HUGE // 2 - 3, HUGE // 2 + 3), slice(HUGE - 5, HUGE)):
        for got in (ours[where], theirs[where]):
            assert got.dtype == np.uint8
            assert (got == 7).all() and got.size == where.stop - where.start


def test_cli_on_huge_array_finishes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, dest = huge(tmp_path / "huge.zarr"), tmp_path / "out.zarr"
    started = time.perf_counter()
    assert cli.main(["convert", str(source), str(dest)]) == 0
    assert time.perf_counter() - started < 20
    assert "read 0 B" in capsys.readouterr().out
    assert zd.open(dest, mode="r")[HUGE - 1] == 7


def both_ways(tmp_path: Path, source: Any, monkeypatch: pytest.MonkeyPatch, **options: Any) -> tuple[Path, Path]:
    """``source`` converted with the listing (sparse) and without it (every region)."""
    sparse, full = tmp_path / "sparse.zarr", tmp_path / "full.zarr"
    options.setdefault("max_bytes", 1)  # one destination shard (or chunk) a region
    progressed: list[int] = []
    summary = convert(source, sparse, progress=progressed.append, **options)
    assert sum(progressed) == summary.bytes_read
    with monkeypatch.context() as patch:
        patch.setattr(conversion_shared, "stored_chunks", lambda node: None)
        whole = convert(source, full, progress=False, **options)
    assert summary.bytes_read < whole.bytes_read
    assert stored_files(sparse) == stored_files(full)  # the same chunks, byte for byte
    return sparse, full


def assert_same(sparse: Path, full: Path, path: str = "") -> None:
    ours, theirs = zd.open(sparse, path=path, mode="r"), zd.open(full, path=path, mode="r")
    a, b = ours[...], theirs[...]
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()  # every element, bit for bit (NaN included)
    assert zarr.open_array(str(sparse), path=path, mode="r")[...].tobytes() == a.tobytes()


@pytest.mark.parametrize(
    ("kwargs", "options"),
    [
        ({}, {}),
        ({"shards": (20, 24)}, {}),
        ({"chunk_key_encoding": {"name": "default", "separator": "."}}, {}),
        ({}, {"chunks": (7, 5), "shards": (14, 15), "max_bytes": 64}),
        ({"shards": (20, 24)}, {"chunks": (3, 12), "max_bytes": 1}),
        ({}, {"chunks": (40, 48)}),  # a destination chunk spanning many source chunks
    ],
    ids=["plain", "sharded", "dot-keys", "rechunked-sharded", "sharded-rechunked", "coarser"],
)
def test_sparse_v3_equals_full_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    kwargs: dict[str, Any], options: dict[str, Any]) -> None:
    source = zd.create(tmp_path / "in.zarr", shape=(45, 50), chunks=(5, 6), dtype="float32",
                       fill_value=float("nan"), **kwargs)
    source[0:3, 0:4] = 1.5
    source[22, 31] = -2.0
    source[44, 49] = 3.0  # the edge chunk (and shard)
    source[10:15, 12:18] = float("nan")  # stored, but only the fill value: left unstored either way
    sparse, full = both_ways(tmp_path, tmp_path / "in.zarr", monkeypatch, **options)
    assert_same(sparse, full)
    got = zd.open(sparse, mode="r")
    assert got[22, 31] == -2.0 and got[44, 49] == 3.0 and np.isnan(got[30, 5])


@pytest.mark.parametrize("separator", [".", "/"])
@pytest.mark.parametrize("options", [{}, {"chunks": (8, 9), "shards": (16, 27)}], ids=["same", "rechunked"])
def test_sparse_v2_equals_full_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    separator: str, options: dict[str, Any]) -> None:
    source = zarr.create_array(str(tmp_path / "in.zarr"), shape=(30, 40), chunks=(4, 6), dtype="int16",
                               fill_value=-1, zarr_format=2, chunk_key_encoding={"name": "v2", "separator": separator},
                               compressors=None)
    source[1, 1] = 5
    source[17:21, 30:40] = np.arange(40, dtype="int16").reshape(4, 10)
    source[29, 39] = 9
    sparse, full = both_ways(tmp_path, tmp_path / "in.zarr", monkeypatch, **options)
    assert_same(sparse, full)
    assert zd.open(sparse, mode="r")[29, 39] == 9


def test_sparse_group_3d_and_scalar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = zd.create_group(tmp_path / "in.zarr")
    cube = root.create_array("cube", shape=(9, 10, 11), chunks=(2, 3, 4), dtype="uint8", fill_value=0)
    cube[8, 9, 10] = 1
    cube[0:4, 3:5, :] = 2
    root.create_array("empty", shape=(100, 100), chunks=(10, 10), dtype="int64", fill_value=3)
    scalar = root.create_array("scalar", shape=(), chunks=(), dtype="float64", fill_value=0.0)
    scalar[...] = 4.25
    sparse, full = both_ways(tmp_path, tmp_path / "in.zarr", monkeypatch, chunks="64B")
    for path in ("cube", "empty", "scalar"):
        assert_same(sparse, full, path)
    assert zd.open(sparse, path="scalar", mode="r")[...] == 4.25


def test_memory_and_zarr_python_stores_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = zarr.storage.MemoryStore()
    source = zarr.create_array(store, name="a", shape=(1000, 1000), chunks=(10, 10), dtype="uint8", fill_value=0)
    source[500:505, 0:3] = 8
    assert conversion_shared.stored_chunks(zd.open(store, path="a", mode="r")) is not None
    sparse, full = both_ways(tmp_path, store, monkeypatch, path="a")
    assert_same(sparse, full)
    assert convert(store, tmp_path / "again.zarr", path="a", progress=False, max_bytes=1).bytes_read == 10 * 10


def test_unlistable_store_reads_everything_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = sys.modules["zarr_device.convert.zarr_to_zarr"]  # the module, not the function the package exports
    zd.create(tmp_path / "in.zarr", shape=(1000,), chunks=(100,), dtype="u1", fill_value=0)[5] = 1
    monkeypatch.setattr(conversion_shared, "stored_chunks", lambda node: None)
    monkeypatch.setattr(module, "ANNOUNCE_BYTES", 100)
    summary = convert(tmp_path / "in.zarr", tmp_path / "out.zarr", progress=True)
    assert summary.bytes_read == 1000
    assert "cannot list the chunks it holds" in capsys.readouterr().err


@pytest.mark.parametrize("shape", [(4, 6), ()], ids=["2d", "0d"])
def test_a_folder_where_a_chunk_should_be_is_an_error_not_fill(tmp_path: Path, shape: tuple[int, ...]) -> None:
    # The listing counts whatever stands at a chunk key: the read then says what is wrong there,
    # where skipping it would have copied fill values in its place.
    chunks = (2, 3) if shape else ()
    array = zd.create(tmp_path / "src.zarr", shape=shape, chunks=chunks, dtype="f4", fill_value=-1, mode="w")
    array[...] = np.ones(shape, dtype="f4")
    key = "c/1/1" if shape else "c"
    chunk = tmp_path / "src.zarr" / key
    chunk.unlink()
    chunk.mkdir()
    with pytest.raises(zd.StoreError, match="directory"):
        zd.open_array(tmp_path / "src.zarr")[...]
    with pytest.raises(zd.StoreError, match="directory"):
        zd.convert(tmp_path / "src.zarr", tmp_path / "out.zarr", progress=False)
    assert not (tmp_path / "out.zarr").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["src.zarr"]
