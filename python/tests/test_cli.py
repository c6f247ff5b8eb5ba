"""The ``zarr-device`` command line: ``info`` and ``bench``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zarr_device as zd
from zarr_device.tools import cli


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def chunk_file_bytes(root: Path) -> int:
    return sum(
        os.path.getsize(os.path.join(folder, f))
        for folder, _dirs, files in os.walk(root)
        for f in files
        if f not in ("zarr.json", ".zarray", ".zattrs", ".zgroup")
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A group holding an attribute-laden subgroup, a plain array and a sharded one."""
    root = tmp_path / "tree.zarr"
    group = zd.create_group(root, attributes={"title": "test", "version": 2})
    plain = group.create_array("plain", shape=(100, 60), dtype="float32", chunks=(25, 30))
    plain[...] = np.arange(6000, dtype=np.float32).reshape(100, 60)
    sub = group.create_group("sub", attributes={"units": "K"})
    sharded = sub.create_array(
        "sharded", shape=(64,), dtype="int16", chunks=(8,), shards=(32,), compressors="gzip"
    )
    sharded[...] = np.arange(64, dtype=np.int16)
    return root


# -- help ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["--help"], ["info", "--help"], ["bench", "--help"]])
def test_help(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: zarr-device")
    assert "examples:" in out


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "info" in out and "bench" in out


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys)
    assert status == 2
    assert "usage: zarr-device" in out


def test_bad_size_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", "--size", "lots"])
    assert exit_info.value.code == 2
    assert "is not a size" in capsys.readouterr().err


# -- info ----------------------------------------------------------------------------------------


def test_info_array(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "a.zarr"
    arr = zd.create(path, shape=(100, 60), dtype="float32", chunks=(25, 30))
    arr[...] = 1.5
    status, out, _ = run(capsys, "info", str(path))
    assert status == 0
    assert "(100, 60)" in out
    assert "float32" in out
    assert "chunks (25, 30)" in out
    assert "bytes(little) -> zstd(level=0)" in out
    assert "stored" in out and "raw 23.4 KiB" in out and "ratio" in out


def test_info_sharded_array_shows_the_inner_chain(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "info", str(tree), "--path", "sub/sharded")
    assert status == 0
    assert "shards (32,)" in out and "chunks (8,)" in out
    assert "int16" in out
    assert "sharding(inner chunks (8,): bytes(little) -> gzip(level=5)" in out
    assert "crc32c" in out


def test_info_group(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "info", str(tree))
    assert status == 0
    lines = out.splitlines()
    assert "group" in lines[0] and "2 members" in lines[0] and "2 attributes" in lines[0]
    assert any("sub/" in line and "1 attribute" in line for line in lines)
    assert any("plain" in line and "(100, 60)" in line and "float32" in line for line in lines)
    assert any("sharded" in line and "(64,)" in line and "int16" in line for line in lines)
    assert "zstd" in out and "gzip" in out


def test_info_json(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "info", str(tree), "--json")
    assert status == 0
    info = json.loads(out)
    assert info["node_type"] == "group"
    assert info["attributes"] == 2
    members = {m["path"]: m for m in info["members"]}
    assert set(members) == {"/plain", "/sub"}
    plain = members["/plain"]
    assert plain["shape"] == [100, 60]
    assert plain["dtype"] == "float32"
    assert plain["chunks"] == [25, 30]
    assert plain["shards"] is None
    assert plain["codecs"] == "bytes(little) -> zstd(level=0)"
    assert plain["nbytes"] == 100 * 60 * 4
    assert plain["stored_bytes"] == chunk_file_bytes(tree / "plain")
    assert plain["ratio"] == pytest.approx(plain["nbytes"] / plain["stored_bytes"], rel=1e-3)
    sharded = members["/sub"]["members"][0]
    assert sharded["path"] == "/sub/sharded"
    assert sharded["shards"] == [32]
    assert sharded["codec_chain"][0]["name"] == "sharding_indexed"
    assert info["stored_bytes"] == plain["stored_bytes"] + sharded["stored_bytes"]


def test_info_json_of_an_array(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "a.zarr"
    zd.create(path, shape=(10,), dtype="uint8", chunks=(5,), compressors=None)[...] = 3
    status, out, _ = run(capsys, "info", str(path), "--json")
    assert status == 0
    info = json.loads(out)
    assert info["node_type"] == "array"
    assert info["codecs"].startswith("bytes") and "->" not in info["codecs"]
    assert info["stored_bytes"] == 10
    assert info["ratio"] == 1.0


def test_info_unwritten_array_has_no_ratio(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "a.zarr"
    zd.create(path, shape=(10,), dtype="int32", chunks=(5,))
    status, out, _ = run(capsys, "info", str(path))
    assert status == 0
    assert "stored 0 B" in out and "ratio n/a" in out


def test_info_v2_array(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zarr = pytest.importorskip("zarr")
    path = tmp_path / "v2.zarr"
    z = zarr.create_array(path, shape=(20, 20), chunks=(10, 10), dtype="<f8", zarr_format=2)
    z[...] = 2.0
    status, out, _ = run(capsys, "info", str(path))
    assert status == 0
    assert "zarr v2" in out and "(20, 20)" in out and "float64" in out
    assert "zstd" in out


def test_info_missing_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "info", str(tmp_path / "nothing.zarr"))
    assert status == 1
    assert out == ""
    assert err.startswith("zarr-device: error:")


# -- bench ---------------------------------------------------------------------------------------


def test_bench_small(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("zarr")
    status, out, _ = run(
        capsys, "bench", "--size", "8MiB", "--chunk", "256KiB", "--repeat", "1", "--quiet",
        "--dir", str(tmp_path),
    )  # fmt: skip
    assert status == 0
    rows = [line.split() for line in out.splitlines()]
    readers = {row[-3]: row for row in rows if len(row) >= 3 and row[-3].startswith("zarr-")}
    assert set(readers) == {"zarr-device", "zarr-python"}
    for row in readers.values():
        assert float(row[-2]) > 0  # GB/s
        assert row[-1].endswith("x")  # ratio to zarr-python
    assert readers["zarr-python"][-1] == "1.00x"
    assert "zstd" in out and "identical values" in out
    assert list(tmp_path.iterdir()) == []  # the sample is removed


def test_bench_size_smaller_than_a_chunk_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "bench", "--size", "10", "--chunk", "1MiB", "--quiet")
    assert status == 1 and out == ""
    assert "--size 10 B is smaller than one --chunk (1 MiB)" in err


def test_bench_keep_and_both_codecs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("zarr")
    status, out, _ = run(
        capsys, "bench", "--size", "1MiB", "--chunk", "64KiB", "--repeat", "1", "--quiet",
        "--codec", "both", "--keep", "--dir", str(tmp_path), "--threads", "2",
    )  # fmt: skip
    assert status == 0
    assert "none" in out and "zstd" in out
    (kept,) = tmp_path.iterdir()
    assert sorted(p.name for p in kept.iterdir()) == ["sample-none.zarr", "sample-zstd.zarr"]
    arr = zd.open_array(kept / "sample-zstd.zarr")
    assert arr.dtype == np.float32 and arr.nbytes == 1 << 20


def test_bench_without_zarr_python(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "zarr", None)  # makes `import zarr` fail
    status, out, _ = run(
        capsys, "bench", "--size", "1MiB", "--chunk", "64KiB", "--repeat", "1", "--quiet",
        "--dir", str(tmp_path),
    )  # fmt: skip
    assert status == 0
    assert "zarr-python is not installed" in out and "zarr-device[bench]" in out
    assert "zarr-device" in out and "n/a" in out


# -- helpers -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"),
    [("1GiB", 1 << 30), ("256KiB", 256 << 10), ("2GB", 2 * 10**9), ("1.5MiB", 3 << 19), ("4096", 4096)],
)
def test_parse_size(text: str, size: int) -> None:
    assert cli.parse_size(text) == size


def test_format_bytes() -> None:
    assert cli.format_bytes(17) == "17 B"
    assert cli.format_bytes(1 << 30) == "1 GiB"
    assert cli.format_bytes(1536) == "1.5 KiB"


def test_codec_summary_of_v2_compressors() -> None:
    chain: list[dict[str, Any]] = [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0},
    ]
    assert cli.codec_summary(chain) == "bytes(little) -> blosc(cname=lz4, clevel=5, shuffle=1)"


def test_sample_layout_default() -> None:
    layout = cli.sample_layout(1 << 30, 1 << 20)
    assert layout.shape == (16384, 16384) and layout.chunks == (512, 512)
    assert layout.nbytes == 1 << 30 and layout.n_chunks == 1024


def test_sample_data_is_the_same_however_it_is_cut() -> None:
    layout = cli.sample_layout(4 << 20, 64 << 10)
    whole = cli.sample_block(layout, (0, layout.shape[0]), (0, layout.shape[1]))
    pieced = np.empty(layout.shape, np.float32)
    for selection, values in cli.iter_sample_blocks(layout, max_block_bytes=200 << 10):
        pieced[selection] = values
    np.testing.assert_array_equal(whole, pieced)
    assert np.isfinite(whole).all() and np.unique(whole).size > 1000
