"""``zarr_device.convert`` and ``zarr-device convert``: Zarr arrays and groups rewritten with other
codecs and chunks, bit for bit, never visible half written."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import assert_bits_equal, numpy_dtype, random_values

import zarr_device as zd
from zarr_device.io import renames
from zarr_device.tools import cli
from zarr_device.convert.zarr_to_zarr import region_shape
from zarr_device.core.create import chunks_for_bytes


CHECKED_ZSTD = [{"name": "zstd", "configuration": {"level": 1, "checksum": False}}, {"name": "crc32c"}]


def make_array(
    path: Path, values: np.ndarray, chunks: tuple[int, ...], **kwargs: Any
) -> zd.Array:
    """An array written by zarr-device (zstd, no checksum, as other tools write it)."""
    array = zd.create(path, shape=values.shape, dtype=values.dtype, chunks=chunks, **kwargs)
    array[...] = values
    return array


def listing(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".partial-" in p.name or ".replaced-" in p.name)


def chain_of(root: Path, path: str = "") -> list[dict[str, Any]]:
    codecs: list[dict[str, Any]] = json.loads((root / path / "zarr.json").read_text())["codecs"]
    return codecs


# -- layout helpers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "itemsize", "target", "expected"),
    [
        ((4096, 4096), 4, 2 << 20, (128, 4096)),
        ((1000, 4096), 4, 2 << 20, (125, 4096)),  # 8 even chunks rather than 7 of 128 and a rest
        ((64, 32, 1 << 20), 2, 1 << 20, (1, 1, 1 << 19)),
        ((10,), 8, 1 << 30, (10,)),  # a small array is one chunk
        ((3, 4), 8, 1, (1, 1)),  # at least one element
        ((0, 7), 4, 1024, (1, 7)),  # a chunk is never empty
        ((), 4, 1024, ()),
    ],
)
def test_chunks_for_bytes(shape: tuple[int, ...], itemsize: int, target: int, expected: tuple[int, ...]) -> None:
    assert chunks_for_bytes(shape, itemsize, target) == expected


@given(
    shape=st.lists(st.integers(0, 300), min_size=1, max_size=4).map(tuple),
    itemsize=st.sampled_from([1, 2, 4, 8, 16]),
    target=st.integers(1, 1 << 16),
)
@settings(max_examples=200, deadline=None, derandomize=True)
def test_chunks_for_bytes_splits_leading_dimensions(shape: tuple[int, ...], itemsize: int, target: int) -> None:
    chunks = chunks_for_bytes(shape, itemsize, target)
    extents = [max(1, s) for s in shape]
    assert len(chunks) == len(shape) and all(1 <= c <= e for c, e in zip(chunks, extents))
    assert math.prod(chunks) * itemsize <= max(target, itemsize)
    # One dimension is split: those before it go one at a time, those after it stay whole.
    assert any(
        all(c == 1 for c in chunks[:d]) and list(chunks[d + 1 :]) == extents[d + 1 :] for d in range(len(shape))
    )


def test_region_shape_is_whole_units_within_the_budget() -> None:
    assert region_shape((1000, 1000), (100, 100), 4, 100 * 1000 * 4) == (100, 1000)
    assert region_shape((1000, 1000), (100, 100), 4, 250 * 1000 * 4) == (200, 1000)
    assert region_shape((1000, 1000), (100, 100), 4, 1) == (100, 100)  # one unit at least
    assert region_shape((1000, 1000), (100, 100), 4, 1 << 40) == (1000, 1000)
    assert region_shape((10, 10), (64, 64), 4, 1) == (10, 10)  # a unit past the edge
    assert region_shape((), (), 4, 1) == ()


# -- round trips --------------------------------------------------------------------------------

DTYPES = ["bool", "int8", "uint16", "int64", "float16", "float32", "float64", "complex64", "bfloat16", "float8_e4m3fn"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_is_bit_for_bit(tmp_path: Path, dtype: str) -> None:
    values = random_values(dtype, (37, 23), np.random.default_rng(len(dtype)))
    kind = numpy_dtype(dtype).kind
    fill = math.nan if kind in "fV" and dtype != "float8_e4m3fn" else None
    make_array(tmp_path / "in.zarr", values, (10, 7), fill_value=fill, compressors="zstd")
    summary = zd.convert(tmp_path / "in.zarr", tmp_path / "out.zarr", chunks="1KiB", progress=False)
    out = zd.open_array(tmp_path / "out.zarr")
    assert_bits_equal(out[...], values, dtype)
    assert out.chunks == chunks_for_bytes((37, 23), values.dtype.itemsize, 1024)
    assert out.codecs[-2:] == CHECKED_ZSTD
    assert out.metadata["fill_value"] == zd.open_array(tmp_path / "in.zarr").metadata["fill_value"]
    assert (summary.arrays, summary.groups, summary.bytes_read) == (1, 0, values.nbytes)
    assert summary.bytes_written == sum(p.stat().st_size for p in (tmp_path / "out.zarr").rglob("*") if p.is_file())
    assert not any(".zarr-device.lock" in name for name in listing(tmp_path / "out.zarr"))
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("shape", "chunks", "target"),
    [
        ((), (), None),
        ((), (), (-1,) * 0),
        ((0, 5), (2, 2), None),
        ((0,), (4,), "1MiB"),
        ((11,), (3,), (4,)),  # chunks that divide nothing
        ((5, 0, 3), (2, 2, 2), (2, 1, -1)),
    ],
)
def test_edge_shapes(tmp_path: Path, shape: tuple[int, ...], chunks: tuple[int, ...], target: Any) -> None:
    values = random_values("float32", shape, np.random.default_rng(1))
    make_array(tmp_path / "in.zarr", values, chunks, fill_value=7.5)
    zd.convert(tmp_path / "in.zarr", tmp_path / "out.zarr", chunks=target, shards=None, progress=False)
    out = zd.open_array(tmp_path / "out.zarr")
    assert_bits_equal(out[...], values)
    assert out.fill_value == 7.5


def test_group_with_nested_groups_and_attributes(tmp_path: Path) -> None:
    root = zd.create_group(tmp_path / "in.zarr", attributes={"title": "run 7", "nested": {"a": [1, 2]}})
    a = root.create_array("a", shape=(20, 6), dtype="int32", chunks=(7, 6), dimension_names=["t", None],
                          attributes={"units": "K"}, fill_value=-1)
    a[...] = np.arange(120, dtype=np.int32).reshape(20, 6)
    deeper = root.create_group("x", attributes={"level": 1}).create_group("y", attributes={"level": 2})
    deeper.create_array("b", shape=(9,), dtype="bfloat16", chunks=(4,))[...] = np.linspace(0, 1, 9)
    root.create_group("empty")
    summary = zd.convert(tmp_path / "in.zarr", tmp_path / "out.zarr")  # with a (hidden) bar
    assert (summary.arrays, summary.groups) == (2, 4)
    out = zd.open_group(tmp_path / "out.zarr")
    assert dict(out.attrs) == {"title": "run 7", "nested": {"a": [1, 2]}}
    assert sorted(out) == ["a", "empty", "x"]
    assert dict(out["x"].attrs) == {"level": 1}
    assert dict(out["x"]["y"].attrs) == {"level": 2}
    assert dict(out["a"].attrs) == {"units": "K"}
    assert out["a"].metadata["dimension_names"] == ["t", None]
    assert out["a"].fill_value == -1 and out["a"].chunks == (7, 6)
    assert_bits_equal(out["a"][...], a[...])
    assert_bits_equal(out["x"]["y"]["b"][...], deeper["b"][...])
    # A node inside the source becomes the destination's root.
    zd.convert(tmp_path / "in.zarr", tmp_path / "y.zarr", path="x/y", progress=False)
    assert dict(zd.open_group(tmp_path / "y.zarr").attrs) == {"level": 2}
    assert list(zd.open_group(tmp_path / "y.zarr")) == ["b"]


def test_zarr_python_zstd_gains_a_checksum(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    values = np.random.default_rng(3).standard_normal((300, 200)).astype(np.float32)
    theirs = zarr.create_array(str(tmp_path / "in.zarr"), shape=values.shape, chunks=(64, 64), dtype="float32",
                               compressors=zarr.codecs.ZstdCodec(level=3), attributes={"by": "zarr"})
    theirs[...] = values
    assert [c["name"] for c in chain_of(tmp_path / "in.zarr")] == ["bytes", "zstd"]
    zd.convert(tmp_path / "in.zarr", tmp_path / "out.zarr", chunks="64KiB", shards="256KiB", progress=False)
    (sharding,) = chain_of(tmp_path / "out.zarr")
    assert sharding["name"] == "sharding_indexed"
    inner = sharding["configuration"]["codecs"]
    assert [c["name"] for c in inner] == ["bytes", "zstd", "crc32c"]
    assert sharding["configuration"]["chunk_shape"] == [75, 200]  # at most 64 KiB of rows, even
    back = zarr.open_array(str(tmp_path / "out.zarr"), mode="r")
    assert back.shards == (300, 200) and dict(back.attrs) == {"by": "zarr"}
    assert_bits_equal(back[...], values, "zarr-python")
    assert_bits_equal(zd.open_array(tmp_path / "out.zarr")[...], values, "zarr-device")


def test_zarr_v2_source(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    values = np.arange(7 * 9, dtype=">f8").reshape(7, 9) / 3
    theirs = zarr.create_array(str(tmp_path / "in.zarr"), shape=values.shape, chunks=(3, 4), dtype=">f8",
                               zarr_format=2, order="F", fill_value=None, attributes={"v": 2})
    theirs[...] = values
    zd.convert(tmp_path / "in.zarr", tmp_path / "out.zarr", compressors="gzip", level=2, progress=False)
    out = zd.open_array(tmp_path / "out.zarr")
    assert out.zarr_format == 3 and dict(out.attrs) == {"v": 2} and out.chunks == (3, 4)
    assert out.codecs[1:] == [{"name": "gzip", "configuration": {"level": 2}}, {"name": "crc32c"}]
    assert_bits_equal(out[...], values.astype("<f8"))


def test_sharded_output_and_sources(tmp_path: Path) -> None:
    values = random_values("uint16", (50, 30), np.random.default_rng(5))
    make_array(tmp_path / "in.zarr", values, (5, 5), shards=(10, 30))
    zd.convert(tmp_path / "in.zarr", tmp_path / "out.zarr", chunks=(8, 16), shards=(16, -1), progress=False)
    out = zd.open_array(tmp_path / "out.zarr")
    assert (out.chunks, out.shards) == ((8, 16), (16, 32))
    assert_bits_equal(out[...], values)
    # Without options a sharded source keeps its inner chunks, unsharded, and no compression
    # with no checksum stores the elements as they are.
    zd.convert(tmp_path / "in.zarr", tmp_path / "plain.zarr", compressors=None, checksum=False, progress=False)
    plain = zd.open_array(tmp_path / "plain.zarr")
    assert (plain.chunks, plain.shards, [c["name"] for c in plain.codecs]) == ((5, 5), None, ["bytes"])
    assert (tmp_path / "plain.zarr" / "c" / "0" / "0").stat().st_size == 5 * 5 * 2
    with pytest.raises(zd.UsageError, match="not a multiple"):
        zd.convert(tmp_path / "in.zarr", tmp_path / "bad.zarr", chunks=(8, 16), shards=(12, 32), progress=False)
    with pytest.raises(zd.UsageError, match="2 dimensions"):
        zd.convert(tmp_path / "in.zarr", tmp_path / "bad.zarr", chunks=(8,), progress=False)
    assert not (tmp_path / "bad.zarr").exists() and leftovers(tmp_path) == []


def test_blosc_and_an_array_object_as_source(tmp_path: Path) -> None:
    values = random_values("int8", (40,), np.random.default_rng(2))
    source = make_array(tmp_path / "in.zarr", values, (16,))
    zd.convert(source, tmp_path / "out.zarr", compressors="blosc", progress=False)
    out = zd.open_array(tmp_path / "out.zarr")
    assert out.codecs[0] == {"name": "bytes"} and out.codecs[1]["name"] == "blosc"
    assert_bits_equal(out[...], values)
    gzip = {"name": "gzip", "configuration": {"level": 1}}
    zd.convert(source, tmp_path / "gzip.zarr", compressors=gzip, checksum=False, progress=False)
    assert zd.open_array(tmp_path / "gzip.zarr").codecs[1:] == [gzip]
    with pytest.raises(zd.UsageError, match="level"):
        zd.convert(source, tmp_path / "gzip2.zarr", compressors=[gzip], level=3, progress=False)


def test_regions_are_whole_shards_within_max_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    values = random_values("float32", (96, 40), np.random.default_rng(4))
    make_array(tmp_path / "in.zarr", values, (96, 40))
    written: list[tuple[slice, ...]] = []
    real_write = zd.Array.write

    def recording_write(self: zd.Array, selection: Any, data: Any) -> None:
        written.append(selection)
        real_write(self, selection, data)

    monkeypatch.setattr(zd.Array, "write", recording_write)
    seen: list[int] = []
    zd.convert(tmp_path / "in.zarr", tmp_path / "out.zarr", chunks=(8, 40), shards=(16, 40),
               max_bytes=2 * 16 * 40 * 4, progress=seen.append)
    assert [s[0] for s in written] == [slice(i, min(i + 32, 96)) for i in range(0, 96, 32)]
    assert sum(seen) == values.nbytes
    assert_bits_equal(zd.open_array(tmp_path / "out.zarr")[...], values)


# -- refusals and failures ----------------------------------------------------------------------


def test_refusals(tmp_path: Path) -> None:
    make_array(tmp_path / "in.zarr", np.arange(10, dtype=np.int16), (4,))
    (tmp_path / "taken.zarr").mkdir()
    (tmp_path / "taken.zarr" / "keep.txt").write_text("mine")
    with pytest.raises(zd.UsageError, match="exists"):
        zd.convert(tmp_path / "in.zarr", tmp_path / "taken.zarr", progress=False)
    with pytest.raises(zd.UsageError, match="not a Zarr store"):
        zd.convert(tmp_path / "in.zarr", tmp_path / "taken.zarr", overwrite=True, progress=False)
    assert listing(tmp_path / "taken.zarr") == ["keep.txt"]
    for destination in ("in.zarr", "in.zarr/inner.zarr", "in.zarr/../in.zarr", "."):
        with pytest.raises(zd.UsageError, match="source"):
            zd.convert(tmp_path / "in.zarr", tmp_path / destination, overwrite=True, progress=False)
    with pytest.raises(zd.UsageError, match="unknown compressor"):
        zd.convert(tmp_path / "in.zarr", tmp_path / "out.zarr", compressors="lzma", progress=False)
    with pytest.raises(zd.UsageError, match="level"):
        zd.convert(tmp_path / "in.zarr", tmp_path / "out.zarr", level=40, progress=False)
    with pytest.raises(zd.UsageError, match="chunks"):
        zd.convert(tmp_path / "in.zarr", tmp_path / "out.zarr", chunks="big", progress=False)
    # A shard holds whole chunks: one smaller than a chunk is a mistake to say, not to round up.
    with pytest.raises(zd.UsageError, match=r"shards of 4 B are smaller than one of its chunks \(4,\) \(8 B\)"):
        zd.convert(tmp_path / "in.zarr", tmp_path / "out.zarr", shards="4B", progress=False)
    with pytest.raises(zd.UsageError, match="chunks of 1 B are smaller than one element"):
        zd.convert(tmp_path / "in.zarr", tmp_path / "out.zarr", chunks="1B", progress=False)
    with pytest.raises(zd.NodeNotFoundError):
        zd.convert(tmp_path / "nothing.zarr", tmp_path / "out.zarr", progress=False)
    assert not (tmp_path / "out.zarr").exists() and leftovers(tmp_path) == []


def test_overwrite_replaces_a_zarr_store_once_complete(tmp_path: Path) -> None:
    make_array(tmp_path / "in.zarr", np.arange(10, dtype=np.int16), (4,))
    make_array(tmp_path / "out.zarr", np.ones((3, 3)), (3, 3))
    zd.convert(tmp_path / "in.zarr", tmp_path / "out.zarr", overwrite=True, progress=False)
    assert_bits_equal(zd.open_array(tmp_path / "out.zarr")[...], np.arange(10, dtype=np.int16))
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "plain-rename"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_failure_midway_leaves_the_destination_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overwrite: bool, exchange: bool
) -> None:
    values = random_values("float64", (64, 8), np.random.default_rng(6))
    make_array(tmp_path / "in.zarr", values, (8, 8))
    old = np.full((2,), 9, dtype=np.uint8)
    if overwrite:
        make_array(tmp_path / "out.zarr", old, (2,))
    before = listing(tmp_path / "out.zarr") if overwrite else None
    real_write = zd.Array.write
    calls = []

    def failing_write(self: zd.Array, selection: Any, data: Any) -> None:
        calls.append(selection)
        if len(calls) == 3:
            raise zd.StoreError("disk full")
        real_write(self, selection, data)

    monkeypatch.setattr(zd.Array, "write", failing_write)
    if not exchange:
        monkeypatch.setattr(renames, "exchange", lambda *_: False)  # as atomic_trees calls it
    with pytest.raises(zd.StoreError, match="converting '/'.*disk full"):
        zd.convert(tmp_path / "in.zarr", tmp_path / "out.zarr", max_bytes=1, overwrite=overwrite, progress=False)
    assert leftovers(tmp_path) == []
    if overwrite:
        assert listing(tmp_path / "out.zarr") == before
        assert_bits_equal(zd.open_array(tmp_path / "out.zarr")[...], old)
    else:
        assert not (tmp_path / "out.zarr").exists()
    # Once the failure is gone, the same call completes (through either kind of rename).
    monkeypatch.setattr(zd.Array, "write", real_write)
    zd.convert(tmp_path / "in.zarr", tmp_path / "out.zarr", overwrite=overwrite, progress=False)
    assert_bits_equal(zd.open_array(tmp_path / "out.zarr")[...], values)
    assert leftovers(tmp_path) == []


def test_destination_appearing_meanwhile_is_not_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_array(tmp_path / "in.zarr", np.arange(10, dtype=np.int16), (4,))

    def someone_else(_: int) -> None:
        (tmp_path / "out.zarr").mkdir(exist_ok=True)
        (tmp_path / "out.zarr" / "theirs.txt").write_text("theirs")

    with pytest.raises(zd.StoreError, match="into place"):
        zd.convert(tmp_path / "in.zarr", tmp_path / "out.zarr", progress=someone_else)
    assert listing(tmp_path / "out.zarr") == ["theirs.txt"] and leftovers(tmp_path) == []


def test_corrupt_source_chunk_names_the_array(tmp_path: Path) -> None:
    group = zd.create_group(tmp_path / "in.zarr")
    group.create_group("sub").create_array("w", shape=(8,), dtype="float32", chunks=(4,))[...] = np.arange(8)
    chunk = tmp_path / "in.zarr" / "sub" / "w" / "c" / "1"
    chunk.write_bytes(chunk.read_bytes()[:-3])
    with pytest.raises(zd.CodecError, match="converting 'sub/w'"):
        zd.convert(tmp_path / "in.zarr", tmp_path / "out.zarr", progress=False)
    assert not (tmp_path / "out.zarr").exists() and leftovers(tmp_path) == []


# -- the command --------------------------------------------------------------------------------


def test_cli_json_and_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values = random_values("float32", (64, 32), np.random.default_rng(8))
    make_array(tmp_path / "in.zarr", values, (16, 16))
    source, dest = str(tmp_path / "in.zarr"), str(tmp_path / "out.zarr")
    assert cli.main(["convert", source, dest, "--chunks", "32,", "--quiet", "--json"]) == 1
    assert "2 dimensions" in capsys.readouterr().err  # a shape of one dimension, for a 2-d array
    status = cli.main(["convert", source, dest, "--chunks", "4KiB", "--shards", "32,-1", "--level", "3", "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert status == 0
    assert (summary["arrays"], summary["groups"], summary["bytes_read"]) == (1, 0, values.nbytes)
    assert summary["destination"] == dest and summary["bytes_written"] > 0
    out = zd.open_array(dest)
    assert (out.chunks, out.shards) == ((32, 32), (32, 32))
    assert out.codecs[0]["configuration"]["codecs"][1:] == [
        {"name": "zstd", "configuration": {"level": 3, "checksum": False}}, {"name": "crc32c"}]
    assert cli.main(["convert", source, dest, "--quiet"]) == 1
    assert "exists" in capsys.readouterr().err
    status = cli.main(["convert", source, dest, "--overwrite", "--compressor", "none", "--no-checksum", "--quiet"])
    assert status == 0 and "1 array, 0 groups" in capsys.readouterr().out
    assert [c["name"] for c in chain_of(Path(dest))] == ["bytes"]
    assert_bits_equal(zd.open_array(dest)[...], values)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["convert", source, dest, "--chunks", "1,x"])
    assert exit_info.value.code == 2 and "is not a shape" in capsys.readouterr().err


# -- property -----------------------------------------------------------------------------------


@st.composite
def cases(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], Any, Any, str]:
    shape = tuple(draw(st.lists(st.integers(0, 9), min_size=0, max_size=3)))
    source_chunks = tuple(draw(st.integers(1, 5)) for _ in shape)
    chunks = draw(st.one_of(
        st.none(),
        st.integers(1, 96),
        st.tuples(*(st.integers(1, 6) for _ in shape)),
    ))
    shards = None
    if draw(st.booleans()):
        shards = draw(st.one_of(st.integers(1, 4000), st.just(tuple(-1 for _ in shape))))
    dtype = draw(st.sampled_from(["bool", "uint8", "int32", "float64", "bfloat16", "complex64"]))
    return shape, source_chunks, chunks, shards, dtype


@given(case=cases(), seed=st.integers(0, 2**16))
@settings(max_examples=50, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_property_round_trip(tmp_path: Path, case: tuple[Any, ...], seed: int) -> None:
    shape, source_chunks, chunks, shards, dtype = case
    folder = tmp_path / f"case-{seed}-{os.urandom(4).hex()}"
    values = random_values(dtype, shape, np.random.default_rng(seed))
    make_array(folder / "in.zarr", values, source_chunks)
    try:
        zd.convert(folder / "in.zarr", folder / "out.zarr", chunks=chunks, shards=shards, max_bytes=64,
                   progress=False)
    except zd.UsageError as e:
        # Only a byte size below one element (chunks) or one chunk (shards) is refused.
        assert "are smaller than" in str(e), e
        assert isinstance(shards if str(e).split(": ", 1)[1].startswith("shards") else chunks, int), e
        assert not (folder / "out.zarr").exists()
        return
    out = zd.open_array(folder / "out.zarr")
    assert_bits_equal(out[...], values, str(case))
    if out.shards is not None:
        assert all(s % c == 0 for s, c in zip(out.shards, out.chunks))
