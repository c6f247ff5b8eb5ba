"""What a storage engine must never do, one regression test per way it once did: delete or write
outside its node or its root, lose attribute changes, write through a read-only store, wrap
values silently, let stacked compressors allocate gigabytes, follow links out of the store, block
on a FIFO, read damage as the fill value, or raise generic exceptions for bad input or settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zarr_device as zd
from zarr_device.io import atomic_trees
from zarr_device.tools import cli

# ----------------------------------------------------------------------------------------------
# Paths


def _tree(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


@pytest.mark.parametrize("path", ["..\x00x", ".", "..", "a/./b", "a/../b", "a//b", "x\\y", "../sibling"])
def test_bad_node_paths_are_refused_and_touch_nothing(tmp_path: Path, path: str) -> None:
    store = tmp_path / "store"
    zd.create(store, path="keep", shape=(4,), dtype="uint8")[:] = 7
    (tmp_path / "sibling").mkdir()
    (tmp_path / "sibling" / "file.txt").write_text("sibling")
    (store / "notes.txt").write_text("not zarr")
    before = _tree(tmp_path)
    with pytest.raises(zd.UsageError, match="path"):
        zd.create(store, path=path, shape=(4,), dtype="uint8", mode="w")
    with pytest.raises(zd.UsageError):
        zd.create_group(store, path=path, mode="w")
    with pytest.raises(zd.UsageError):
        zd.open(store, path=path)
    assert _tree(tmp_path) == before
    np.testing.assert_array_equal(zd.open_array(store, path="keep")[:], 7)


def test_overwriting_removes_only_zarr_data(tmp_path: Path) -> None:
    store = tmp_path / "store"
    group = zd.create_group(store)
    group.create_array("a", shape=(8,), dtype="int32", chunks=(2,))[:] = np.arange(8)
    group.create_group("sub").create_array("b", shape=(4,), dtype="uint8", chunks=(4,))[:] = 1
    (store / "README.md").write_text("mine")
    (store / "a" / "c" / "notes.txt").write_text("mine too")
    (store / "plain").mkdir()
    (store / "plain" / "data.bin").write_bytes(b"\x00" * 10)
    zd.create(store, shape=(3,), dtype="float64", mode="w")  # an array where the group was
    # (A directory that keeps other files keeps its hidden lock file too: a writer may hold it.)
    left = {p for p in _tree(store) if (store / p).is_file() and not p.endswith(".zarr-device.lock")}
    assert left == {"zarr.json", "README.md", "a/c/notes.txt", "plain/data.bin"}
    np.testing.assert_array_equal(zd.open_array(store)[:], np.zeros(3))


def test_stale_chunks_never_become_data_of_a_new_array(tmp_path: Path) -> None:
    store = tmp_path / "a.zarr"
    zd.create(store, shape=(4,), dtype="uint8", chunks=(2,), compressors=None)[:] = 9
    (store / "zarr.json").unlink()  # removed by hand: its chunks stay behind
    arr = zd.create(store, shape=(4,), dtype="uint8", chunks=(2,), compressors=None)
    np.testing.assert_array_equal(arr[:], 0)


# ----------------------------------------------------------------------------------------------
# Attributes


def test_array_attributes_write_through(tmp_path: Path) -> None:
    arr = zd.create(tmp_path / "a.zarr", shape=(2,), dtype="uint8")
    arr.attrs["x"] = 1
    arr.attrs.update({"y": [1, 2], "z": {"k": None}})
    del arr.attrs["z"]
    assert dict(arr.attrs) == {"x": 1, "y": [1, 2]}
    assert zd.open_array(tmp_path / "a.zarr").attrs == {"x": 1, "y": [1, 2]}
    assert json.loads((tmp_path / "a.zarr" / "zarr.json").read_text())["attributes"] == {"x": 1, "y": [1, 2]}
    arr.attrs.put({"only": True})
    assert zd.open_array(tmp_path / "a.zarr").attrs == {"only": True}
    with pytest.raises(zd.UsageError, match="JSON"):
        arr.attrs["bad"] = float("nan")
    with pytest.raises(KeyError):
        del arr.attrs["missing"]


def test_group_attributes_write_through_and_read_only_refuses(tmp_path: Path) -> None:
    group = zd.create_group(tmp_path / "g.zarr", attributes={"a": 1})
    group.attrs["b"] = 2
    assert zd.open_group(tmp_path / "g.zarr").attrs == {"a": 1, "b": 2}
    readonly = zd.open_group(tmp_path / "g.zarr", mode="r")
    with pytest.raises(zd.UsageError, match="read-only"):
        readonly.attrs["c"] = 3
    with pytest.raises(zd.UsageError, match="read-only"):
        zd.open_array(tmp_path / "g.zarr", mode="r") if False else readonly.attrs.update(c=3)
    assert zd.open_group(tmp_path / "g.zarr").attrs == {"a": 1, "b": 2}


def test_attribute_updates_from_two_handles_both_land(tmp_path: Path) -> None:
    zd.create(tmp_path / "a.zarr", shape=(2,), dtype="uint8")
    first = zd.open_array(tmp_path / "a.zarr", mode="r+")
    second = zd.open_array(tmp_path / "a.zarr", mode="r+")
    first.attrs["one"] = 1
    second.attrs["two"] = 2  # re-reads the document under its lock: "one" stays
    assert zd.open_array(tmp_path / "a.zarr").attrs == {"one": 1, "two": 2}
    first.attrs.refresh()
    assert dict(first.attrs) == {"one": 1, "two": 2}


def test_v2_attributes_write_to_zattrs(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    zarr.create_array(str(tmp_path / "v2.zarr"), shape=(4,), dtype="int16", zarr_format=2)
    arr = zd.open_array(tmp_path / "v2.zarr", mode="r+")
    arr.attrs["units"] = "m"
    assert json.loads((tmp_path / "v2.zarr" / ".zattrs").read_text()) == {"units": "m"}
    assert zarr.open_array(str(tmp_path / "v2.zarr")).attrs["units"] == "m"


# ----------------------------------------------------------------------------------------------
# Read-only stores


def test_read_only_zarr_python_store_stays_read_only(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    zd.create(tmp_path / "a.zarr", shape=(4,), dtype="uint8")[:] = 3
    before = (tmp_path / "a.zarr" / "c" / "0").read_bytes()
    ro = zarr.storage.LocalStore(str(tmp_path / "a.zarr"), read_only=True)
    with pytest.raises(zd.UsageError, match="read-only"):
        zd.open(ro, mode="r+")
    arr = zd.open_array(ro)
    assert arr.read_only
    with pytest.raises(zd.UsageError):
        arr[:] = 5
    with pytest.raises(zd.UsageError):
        arr.attrs["x"] = 1
    with pytest.raises(zd.UsageError):
        zd.create(ro, shape=(2,), dtype="uint8", mode="w")
    assert (tmp_path / "a.zarr" / "c" / "0").read_bytes() == before
    memory = zarr.storage.MemoryStore(read_only=False)
    zd.create(memory, shape=(2,), dtype="uint8")[:] = 1
    frozen = memory.with_read_only(True)
    with pytest.raises(zd.UsageError):
        zd.open_array(frozen)[:] = 2


def test_read_only_local_store(tmp_path: Path) -> None:
    zd.create(tmp_path / "a.zarr", shape=(4,), dtype="uint8")[:] = 3
    store = zd.LocalStore(tmp_path / "a.zarr", read_only=True)
    with pytest.raises(zd.UsageError):
        zd.open_array(store, mode="r+")
    with pytest.raises(zd.UsageError):
        store.handle.set("x", b"1")
    np.testing.assert_array_equal(zd.open_array(store)[:], 3)


# ----------------------------------------------------------------------------------------------
# Writes cast like zarr-python: within a kind, and only values that fit


@pytest.mark.parametrize(
    ("dtype", "values"),
    [
        ("int32", float("nan")),
        ("int32", 2**40),
        ("int32", np.array([1.5, 2.5])),
        ("int32", np.array([2**40], dtype=np.int64)),
        ("uint8", -1),
        ("uint8", np.array([1], dtype=np.int64)),  # signed into unsigned: another kind
        ("float32", 1 + 2j),
        ("int16", [1, 2, 70000, 4]),
        ("bool", 2),
        ("int64", 2**70),
        ("float32", "a"),
    ],
)
def test_writes_refuse_casts_that_change_values(tmp_path: Path, dtype: str, values: Any) -> None:
    arr = zd.create(tmp_path / "a.zarr", shape=(4,), dtype=dtype, fill_value=0)
    with pytest.raises(zd.UsageError):
        arr[:] = values
    assert not (tmp_path / "a.zarr" / "c").exists()


@pytest.mark.parametrize(
    ("dtype", "values", "expected"),
    [
        ("int32", 7, [7] * 4),
        ("int32", np.array([1, 2, 3, 4], dtype=np.int64), [1, 2, 3, 4]),
        ("uint8", [0, 255, 1, 2], [0, 255, 1, 2]),
        ("float32", np.arange(4, dtype=np.float64) / 3, (np.arange(4) / 3).astype(np.float32)),
        ("float64", 3, [3.0] * 4),
        ("float16", True, [1.0] * 4),
        ("complex64", 1.5, [1.5] * 4),
        ("bfloat16", np.array([1, 2, 3, 4], dtype=np.float32), [1, 2, 3, 4]),
    ],
)
def test_writes_take_casts_within_a_kind(tmp_path: Path, dtype: str, values: Any, expected: Any) -> None:
    arr = zd.create(tmp_path / "a.zarr", shape=(4,), dtype=dtype)
    arr[:] = values
    np.testing.assert_array_equal(arr[:].astype(np.float64 if dtype != "complex64" else np.complex128),
                                  np.asarray(expected))


# ----------------------------------------------------------------------------------------------
# Memory bounds under hostile chunks


def _peak_rss_of(code: str, tmp_path: Path) -> tuple[int, str]:
    script = tmp_path / "run.py"
    script.write_text(
        code + "\nimport resource; print('PEAK', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    peak = int(done.stdout.rsplit("PEAK", 1)[1]) * 1024
    return peak, done.stdout


def test_stacked_compressors_cannot_multiply_a_chunk(tmp_path: Path) -> None:
    """A 128 KiB chunk stored as [bytes, gzip, zstd] whose streams expand to GiB: a CodecError
    after allocating little (this once allocated 4.6 GiB before failing)."""
    code = f"""
import gzip, zstandard_free
""" if False else f"""
import zlib, numpy as np, zarr_device as zd
from zarr_device import _core
path = {str(tmp_path / 'bomb.zarr')!r}
arr = zd.create(path, shape=(4 * 131072,), dtype="uint8", chunks=(131072,),
                codecs=[{{"name": "bytes"}}, {{"name": "gzip"}}, {{"name": "zstd"}}])
# gzip of 1 GiB of zeros (a few MiB), then zstd of that: the zstd codec's own bound would allow it.
co = zlib.compressobj(9, zlib.DEFLATED, 31)
parts = [co.compress(bytes(1 << 24)) for _ in range(64)] + [co.flush()]
inner = b"".join(parts)
import ctypes
store = zd.LocalStore(path)
raw = _core.Array.open(store.handle, "")
# Encode the gzip stream with zstd by writing it as a one-codec array's chunk and taking its bytes.
helper = zd.create({str(tmp_path / 'helper.zarr')!r}, shape=(len(inner),), dtype="uint8",
                   chunks=(len(inner),), codecs=[{{"name": "bytes"}}, {{"name": "zstd"}}])
helper[:] = np.frombuffer(inner, dtype=np.uint8)
frame = open({str(tmp_path / 'helper.zarr' / 'c' / '0')!r}, "rb").read()
for i in range(4):
    store.handle.set(f"c/{{i}}", frame)
import resource
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    arr[:]
    print("DECODED")
except zd.CodecError as e:
    print("CODECERROR", e)
print("BEFORE", before)
"""
    peak, out = _peak_rss_of(code, tmp_path)
    assert "CODECERROR" in out and "DECODED" not in out
    before = int(out.split("BEFORE", 1)[1].split()[0]) * 1024
    assert peak - before < 256 << 20, f"the read grew the process by {(peak - before) >> 20} MiB"


# ----------------------------------------------------------------------------------------------
# The local store's files


def test_links_out_of_the_store_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    zd.create(outside, shape=(4,), dtype="uint8", chunks=(4,), compressors=None)[:] = 1
    store = tmp_path / "store"
    zd.create(store, shape=(4,), dtype="uint8", chunks=(4,), compressors=None)
    (store / "c").symlink_to(outside / "c")
    with pytest.raises(zd.StoreError, match="symbolic link"):
        zd.open_array(store)[:]
    with pytest.raises(zd.StoreError):
        zd.open_array(store, mode="r+")[:] = 2
    assert (outside / "c" / "0").read_bytes() == b"\x01" * 4
    os.symlink(outside / "zarr.json", tmp_path / "link_store_meta")
    (tmp_path / "s2").mkdir()
    (tmp_path / "s2" / "zarr.json").symlink_to(outside / "zarr.json")
    with pytest.raises(zd.StoreError):
        zd.open_array(tmp_path / "s2")


def test_a_fifo_chunk_fails_at_once(tmp_path: Path) -> None:
    arr = zd.create(tmp_path / "a.zarr", shape=(4,), dtype="uint8", chunks=(2,), compressors=None)
    arr[:] = 1
    (tmp_path / "a.zarr" / "c" / "1").unlink()
    os.mkfifo(tmp_path / "a.zarr" / "c" / "1")
    result: list[BaseException | None] = []

    def read() -> None:
        try:
            arr[:]
            result.append(None)
        except BaseException as e:  # noqa: BLE001 - recorded for the assertion
            result.append(e)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(20)
    assert not reader.is_alive(), "the read blocked on the FIFO"
    assert isinstance(result[0], zd.StoreError) and "regular file" in str(result[0])


def test_directories_and_files_in_the_wrong_place_are_errors(tmp_path: Path) -> None:
    arr = zd.create(tmp_path / "a.zarr", shape=(4, 4), dtype="uint8", chunks=(2, 2), compressors=None)
    (tmp_path / "a.zarr" / "c" / "0" / "1").mkdir(parents=True)  # a directory as a chunk
    with pytest.raises(zd.StoreError, match="directory"):
        arr[0:2, 2:4]
    (tmp_path / "a.zarr" / "c" / "1").write_bytes(b"x")  # a file where chunk row 1's directory is
    with pytest.raises(zd.StoreError, match="directory"):
        arr[2:4, 0:2]
    np.testing.assert_array_equal(arr[0:2, 0:2], 0)  # absent chunks are still the fill value


def test_leftover_temporaries_are_ignored_and_fsck_removes_them(tmp_path: Path, capsys: Any) -> None:
    store = tmp_path / "a.zarr"
    zd.create(store, shape=(4,), dtype="uint8", chunks=(2,))[:] = 5
    leftover = store / "c" / ".0.zdtmp-999999999-1"
    leftover.write_bytes(b"half a chunk")
    np.testing.assert_array_equal(zd.open_array(store)[:], 5)
    assert ".0.zdtmp-999999999-1" not in zd.LocalStore(store).handle.list_dir("c")
    assert cli.main(["fsck", str(store), "--quiet"]) == 1
    assert "leftover" in capsys.readouterr().out
    assert cli.main(["fsck", str(store), "--fix", "--data", "--quiet"]) == 0
    assert not leftover.exists()
    assert cli.main(["fsck", str(store), "--quiet"]) == 0


def _record(tree: Path, destination: str, token: str) -> None:
    record = {"zarr_device": "placement", "destination": destination, "token": token, "role": "new"}
    (tree / atomic_trees.RECORD).write_text(json.dumps(record))


def test_fsck_reports_partials_left_beside_the_store_and_removes_stale_ones(tmp_path: Path, capsys: Any) -> None:
    store = tmp_path / "m.zarr"
    zd.create(store, shape=(4,), dtype="uint8", chunks=(2,))[:] = 1
    stale = tmp_path / "m.zarr.partial-0123abcd"
    (stale / "c").mkdir(parents=True)
    (stale / "c" / "0").write_bytes(b"half")
    _record(stale, "m.zarr", "0123abcd")  # what proves a tree zarr-device's (not its name)
    old = time.time() - 2 * 3600
    os.utime(stale / atomic_trees.RECORD, (old, old))
    os.utime(stale, (old, old))
    fresh = tmp_path / "m.zarr.replaced-89abcdef"  # may be a running writer's: kept
    fresh.mkdir()
    _record(fresh, "m.zarr", "89abcdef")
    unrelated = tmp_path / "m.zarr.partial-notes"  # not a name a writer gives
    unrelated.mkdir()
    assert cli.main(["fsck", str(store), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "../m.zarr.partial-0123abcd" in out and "../m.zarr.replaced-89abcdef" in out
    assert "partial-notes" not in out
    assert cli.main(["fsck", str(store), "--fix", "--quiet"]) == 1  # the fresh one is left
    out = capsys.readouterr().out
    assert not stale.exists() and fresh.exists() and unrelated.exists()
    assert "(removed)" in out and "a writer may be running" in out
    # A store whose first save was killed: nothing at the path, its partial beside it.
    assert cli.main(["fsck", str(tmp_path / "gone.zarr"), "--quiet"]) == 1
    (tmp_path / "gone.zarr.partial-00000000").mkdir()
    assert cli.main(["fsck", str(tmp_path / "gone.zarr"), "--quiet"]) == 1
    assert "../gone.zarr.partial-00000000" in capsys.readouterr().out


def test_fsck_reads_every_chunk(tmp_path: Path, capsys: Any) -> None:
    store = tmp_path / "a.zarr"
    zd.create(store, shape=(6,), dtype="uint8", chunks=(2,),
              compressors=[{"name": "zstd"}, {"name": "crc32c"}])[:] = 5
    chunk = store / "c" / "1"
    data = bytearray(chunk.read_bytes())
    data[0] ^= 1
    chunk.write_bytes(bytes(data))
    assert cli.main(["fsck", str(store), "--data", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "chunk" in out and "c/1" in out and "3 chunks read" in out


# ----------------------------------------------------------------------------------------------
# Typed errors for hostile metadata and reads too large to hold


def _write_v3(path: Path, **changes: Any) -> None:
    document = {
        "zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
        "codecs": [{"name": "bytes"}],
    }  # fmt: skip
    document.update(changes)
    path.mkdir(parents=True, exist_ok=True)
    (path / "zarr.json").write_text(json.dumps(document))


def test_metadata_that_is_not_utf8_is_a_format_error(tmp_path: Path) -> None:
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / ".zarray").write_bytes(b'{"zarr_format": 2, "shape": [4], "dtype": "\xff\xfe"}')
    with pytest.raises(zd.FormatError):
        zd.open_array(tmp_path / "v2")
    (tmp_path / "v3").mkdir()
    (tmp_path / "v3" / "zarr.json").write_text('{"zarr_format": 3}', encoding="utf-32")
    with pytest.raises(zd.FormatError):
        zd.open(tmp_path / "v3")


def test_deep_documents_and_nested_shards_are_format_errors(tmp_path: Path) -> None:
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "zarr.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(zd.FormatError, match="deeper"):
        zd.open(tmp_path / "deep")
    level = '[{"name": "sharding_indexed", "configuration": {"chunk_shape": [1], "codecs": '
    codecs = level * 3000 + '[{"name": "bytes"}]' + "}}]" * 3000
    text = (
        '{"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "uint8", '
        '"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}}, '
        f'"chunk_key_encoding": {{"name": "default"}}, "fill_value": 0, "codecs": {codecs}}}'
    )
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "zarr.json").write_text(text)
    with pytest.raises(zd.FormatError):
        zd.open(tmp_path / "nested")
    nested: Any = [{"name": "bytes"}]
    for _ in range(3000):
        nested = [{"name": "sharding_indexed", "configuration": {"chunk_shape": [1], "codecs": nested}}]
    with pytest.raises(zd.UsageError):
        zd.create(tmp_path / "made", shape=(4,), dtype="uint8", codecs=nested)


def test_reads_too_large_to_hold_are_out_of_memory_errors(tmp_path: Path) -> None:
    _write_v3(tmp_path / "huge", shape=[2**62], chunk_grid={"name": "regular", "configuration": {"chunk_shape": [1024]}})
    arr = zd.open_array(tmp_path / "huge")
    with pytest.raises(zd.OutOfMemoryError, match="huge|bytes"):
        arr[...]
    _write_v3(tmp_path / "dims", shape=[1] * 1000, chunk_grid={"name": "regular", "configuration": {"chunk_shape": [1] * 1000}})
    with pytest.raises(zd.FormatError, match="dimensions"):
        zd.open_array(tmp_path / "dims")


def test_names_that_are_not_utf8_are_left_out_of_listings(tmp_path: Path) -> None:
    group = zd.create_group(tmp_path / "g.zarr")
    group.create_array("a", shape=(2,), dtype="uint8")
    os.mkdir(os.fsencode(tmp_path / "g.zarr") + b"/\xff\xfe")
    assert list(zd.open_group(tmp_path / "g.zarr")) == ["a"]


# ----------------------------------------------------------------------------------------------
# Settings: one size parser, checked where they enter


def test_settings_are_checked_when_set() -> None:
    previous = zd.get_config()
    try:
        assert zd.set_config(max_inflight_bytes="256MiB") == previous
        assert zd.get_config().max_inflight_bytes == 256 << 20
        zd.set_config(staging_bytes="1GiB", threads=4)
        assert zd.get_config().staging_bytes == 1 << 30
        for bad in ({"threads": -1}, {"threads": True}, {"threads": "x"}, {"gpu_decode": "bogus"},
                    {"max_inflight_bytes": "256 MiBs"}, {"max_inflight_bytes": 0},
                    {"staging_slots": 0}, {"bogus": 1}):
            name = next(iter(bad))
            with pytest.raises(zd.UsageError, match=name):
                zd.set_config(**bad)
        assert zd.get_config().threads == 4  # a refused change changes nothing
    finally:
        zd.set_config(**{f: getattr(previous, f) for f in previous.__dataclass_fields__})


def _import_with(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import zarr_device as zd; print(zd.get_config())"],
        capture_output=True, text=True, env={**os.environ, **env}, timeout=60,
    )


def test_environment_settings_take_sizes_and_name_bad_ones() -> None:
    ok = _import_with({"ZARR_DEVICE_MAX_INFLIGHT_BYTES": "256MiB", "ZARR_DEVICE_THREADS": "3"})
    assert ok.returncode == 0, ok.stderr
    assert "max_inflight_bytes=268435456" in ok.stdout and "threads=3" in ok.stdout
    bad = _import_with({"ZARR_DEVICE_GPU_DECODE": "bogus"})
    assert bad.returncode != 0
    assert "UsageError" in bad.stderr and "ZARR_DEVICE_GPU_DECODE" in bad.stderr


def test_the_cli_uses_the_same_size_parser() -> None:
    assert cli.parse_size("256MiB") == 256 << 20
    assert cli.parse_size("1GB") == 10**9
    with pytest.raises(Exception, match="not a size"):
        cli.parse_size("lots")


def test_store_roots_with_nul_bytes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(zd.UsageError, match="NUL"):
        zd.LocalStore(str(tmp_path) + "\x00x")
