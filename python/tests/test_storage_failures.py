"""Storage that fails: a full disk, a read-only file system, files the process may not write or
read, and stores opened read-only. Each failure is a typed error naming the file (StoreError, an
OSError; UsageError where the engine knows the store is read-only), and never costs data already
stored: no partial value becomes visible, and writing works again once the cause is gone.

The file-system cases mount small tmpfs file systems (root only: skipped elsewhere) and run
writes as user ``nobody`` in a child process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zarr_device as zd

zarr = pytest.importorskip("zarr")

ROW = 65536  # one chunk: a row of uint8, stored raw (64 KiB)

needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="mounting file systems and changing user need root"
)


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=False)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs mounted for the test (skipped where mounting is not permitted), unmounted
    after it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount_point = tmp_path / "mnt"
    mount_point.mkdir()
    mounted = _run("mount", "-t", "tmpfs", "-o", "size=3m,mode=0755", "zd-test", str(mount_point))
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield mount_point
    finally:
        _run("mount", "-o", "remount,rw", str(mount_point))
        if _run("umount", str(mount_point)).returncode != 0:
            _run("umount", "-l", str(mount_point))


def files_under(root: Path) -> dict[str, bytes]:
    """Every file below root (hidden ones too) and its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def row_value(i: int) -> int:
    return i % 250 + 1


def assert_store_error(error: BaseException, *, names: str, says: str) -> None:
    assert isinstance(error, zd.StoreError) and isinstance(error, OSError), f"{type(error).__name__}: {error}"
    assert names in str(error), f"the message does not name {names}: {error}"
    assert says.lower() in str(error).lower(), f"the message does not say {says!r}: {error}"


# ---------------------------------------------------------------------------------------------
# A full disk


@needs_root
def test_full_disk_fails_cleanly_and_recovers(small_fs: Path) -> None:
    """Writing until the file system is full: the failure is a StoreError naming the chunk's file
    and saying there is no space; chunks written before read back intact; the failed chunk (and
    a failed read-modify-write of a shard or chunk, and a failed attribute change) leave no
    trace: no partial file, no temporary; once space is freed the same writes work."""
    filler = small_fs / "filler"
    filler.write_bytes(b"\0" * (640 * 1024))
    arr = zd.create(small_fs / "a", shape=(64, ROW), dtype="uint8", chunks=(1, ROW), compressors=None,
                    attributes={"kept": 1})
    sharded = zd.create(small_fs / "s", shape=(4, ROW), dtype="uint8", chunks=(1, ROW), shards=(4, ROW),
                        compressors=None)
    sharded[0] = 9  # a shard of one inner chunk: rewriting it needs room for a new file
    failed_at = None
    error: BaseException | None = None
    for i in range(64):
        try:
            arr[i] = row_value(i)
        except zd.StoreError as e:
            failed_at, error = i, e
            break
    assert failed_at is not None and error is not None, "the 3 MiB file system never filled up"
    assert failed_at >= 20, f"the disk was full after only {failed_at} chunks"
    assert_store_error(error, names=str(small_fs / "a" / "c" / str(failed_at) / "0"), says="No space left")

    with pytest.raises(zd.StoreError) as shard_error:
        sharded[1] = 8  # a read-modify-write of the shard
    assert_store_error(shard_error.value, names=str(small_fs / "s" / "c" / "0" / "0"), says="No space left")
    with pytest.raises(zd.StoreError) as partial_error:
        arr[0, :100] = 77  # a read-modify-write of a stored chunk
    assert_store_error(partial_error.value, names=str(small_fs / "a" / "c" / "0" / "0"), says="No space left")
    with pytest.raises(zd.StoreError) as attr_error:
        arr.attrs["big"] = "x" * (256 * 1024)
    assert_store_error(attr_error.value, names=str(small_fs / "a" / "zarr.json"), says="No space left")

    expected = np.zeros((64, ROW), np.uint8)
    for i in range(failed_at):
        expected[i] = row_value(i)
    stored_rows = sorted(int(p.parent.name) for p in (small_fs / "a" / "c").glob("*/0"))
    assert stored_rows == list(range(failed_at)), f"chunk files after the failure: {stored_rows}"
    assert all(p.stat().st_size == ROW for p in (small_fs / "a" / "c").glob("*/0")), "a partial chunk file"
    assert not [p for p in small_fs.rglob("*") if ".zdtmp-" in p.name], "temporaries left on the full disk"
    np.testing.assert_array_equal(zd.open_array(small_fs / "a")[...], expected)
    np.testing.assert_array_equal(zarr.open_array(str(small_fs / "a"), mode="r")[...], expected)
    assert zd.open_array(small_fs / "a").attrs.asdict() == {"kept": 1}
    assert zarr.open_array(str(small_fs / "a"), mode="r").attrs.asdict() == {"kept": 1}
    expected_shard = np.zeros((4, ROW), np.uint8)
    expected_shard[0] = 9
    np.testing.assert_array_equal(zd.open_array(small_fs / "s")[...], expected_shard)

    filler.unlink()
    arr[failed_at] = row_value(failed_at)
    arr[0, :100] = 77
    sharded[1] = 8
    arr.attrs["after"] = 2
    expected[failed_at] = row_value(failed_at)
    expected[0, :100] = 77
    expected_shard[1] = 8
    np.testing.assert_array_equal(zd.open_array(small_fs / "a")[...], expected)
    np.testing.assert_array_equal(zd.open_array(small_fs / "s")[...], expected_shard)
    assert zd.open_array(small_fs / "a").attrs.asdict() == {"kept": 1, "after": 2}


# ---------------------------------------------------------------------------------------------
# A read-only file system


@needs_root
def test_read_only_file_system(small_fs: Path) -> None:
    """On a file system remounted read-only: reads work (zarr_device and zarr-python); writes of
    chunks, shards and attributes through a handle opened for writing raise StoreError naming the
    file and saying the file system is read-only; through a read-only handle or store,
    UsageError; the handles that failed still read what is stored."""
    group = zd.create_group(small_fs / "g", attributes={"g": 1})
    arr = group.create_array("a", shape=(8, 8), dtype="int32", chunks=(4, 4), attributes={"units": "m"})
    sharded = group.create_array("s", shape=(8, 8), dtype="int32", chunks=(2, 2), shards=(4, 4))
    data = np.arange(64, dtype=np.int32).reshape(8, 8)
    arr[...] = data
    sharded[...] = data
    remounted = _run("mount", "-o", "remount,ro", str(small_fs))
    if remounted.returncode != 0:
        pytest.skip(f"cannot remount read-only: {remounted.stderr.strip()}")

    for name in ("a", "s"):
        np.testing.assert_array_equal(zd.open_array(small_fs / "g" / name)[...], data)
        np.testing.assert_array_equal(zd.open_array(small_fs / "g" / name)[2:5, 1:7], data[2:5, 1:7])
        np.testing.assert_array_equal(zarr.open_array(str(small_fs / "g" / name), mode="r")[...], data)
    assert zd.open_group(small_fs / "g").attrs.asdict() == {"g": 1}

    writable = zd.open_array(small_fs / "g" / "a", mode="r+")
    writable_shards = zd.open_array(small_fs / "g" / "s", mode="r+")
    writes: list[tuple[str, Callable[[], None], Path]] = [
        ("whole chunks", lambda: writable.write(..., 5), small_fs / "g" / "a"),
        ("part of a chunk", lambda: writable.write((0, 0), 5), small_fs / "g" / "a"),
        ("inner chunk of a shard", lambda: writable_shards.write((slice(0, 2), slice(0, 2)), 5),
         small_fs / "g" / "s"),
        ("array attribute", lambda: writable.attrs.__setitem__("units", "km"), small_fs / "g" / "a" / "zarr.json"),
        ("group attribute", lambda: zd.open_group(small_fs / "g", mode="r+").attrs.update({"g": 2}),
         small_fs / "g" / "zarr.json"),
        ("new array", lambda: zd.create(small_fs / "g" / "new", shape=(2,), dtype="uint8").write(..., 1),
         small_fs / "g" / "new"),
    ]
    for what, write, names in writes:
        with pytest.raises(zd.StoreError) as info:
            write()
        assert_store_error(info.value, names=str(names), says="Read-only file system")

    for store in (small_fs / "g" / "a", zd.LocalStore(small_fs / "g" / "a", read_only=True)):
        read_only = zd.open_array(store)
        with pytest.raises(zd.UsageError):
            read_only[...] = 1
        with pytest.raises(zd.UsageError):
            read_only.attrs["units"] = "km"
    # The handles that failed to write still read what is stored.
    np.testing.assert_array_equal(writable[...], data)
    np.testing.assert_array_equal(writable_shards[...], data)
    assert writable.attrs.asdict() == {"units": "m"}


# ---------------------------------------------------------------------------------------------
# Permissions

_AS_NOBODY = r"""
import importlib, json, os, pkgutil, sys
import numpy as np
import zarr_device as zd
# Everything this process will import, imported while it can still read the installation.
for name in ("zarr_device", "zarr_device.basics", "zarr_device.io", "zarr_device.core", "zarr_device.convert",
             "zarr_device.tools"):
    package = importlib.import_module(name)
    for module in pkgutil.iter_modules(package.__path__):
        if module.name != "cli":
            importlib.import_module(package.__name__ + "." + module.name)
warm = zd.create(zd.MemoryStore(), shape=(4, 4), dtype="int32", chunks=(2, 2))
warm[0:3, 1:3] = 1
warm.attrs["k"] = 1
warm[...]
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
results = {}
for name, action in json.loads(sys.argv[1]).items():
    try:
        kind, path = action[0], action[1]
        if kind == "write":
            zd.open_array(path, mode="r+")[tuple(slice(*s) for s in action[2])] = action[3]
        elif kind == "attr":
            zd.open_array(path, mode="r+").attrs[action[2]] = action[3]
        elif kind == "read":
            zd.open_array(path)[...]
        elif kind == "read_part":
            zd.open_array(path)[tuple(slice(*s) for s in action[2])]
        elif kind == "create":
            zd.create(path, shape=(4,), dtype="uint8")
        results[name] = None
    except BaseException as e:
        results[name] = {"type": type(e).__name__, "store_error": isinstance(e, zd.StoreError),
                         "os_error": isinstance(e, OSError), "message": str(e)}
print(json.dumps(results))
"""


def as_nobody(actions: dict[str, list[Any]]) -> dict[str, dict[str, Any] | None]:
    """Runs the actions in a child process as user nobody; returns each one's error (or None)."""
    done = subprocess.run([sys.executable, "-c", _AS_NOBODY, json.dumps(actions)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, f"the child failed: {done.stderr}"
    results: dict[str, dict[str, Any] | None] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory user nobody can enter (pytest's are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="zd-perm-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@needs_root
def test_permission_denied_is_a_store_error_naming_the_path(shared_dir: Path) -> None:
    """As user nobody: writing into an array whose directories it may not write, changing its
    attributes, creating an array where it may not, and reading a chunk file or a metadata file it
    may not read each raise StoreError naming the file and saying permission is denied; reading
    what it may read works; the data is unchanged."""
    data = np.arange(64, dtype=np.int32).reshape(8, 8)
    for name in ("a", "b", "c"):
        arr = zd.create(shared_dir / name, shape=(8, 8), dtype="int32", chunks=(4, 4), attributes={"k": 1})
        arr[...] = data
    (shared_dir / "b" / ".zarr-device.lock").chmod(0o666)  # b: locking works, the chunk's directory refuses
    (shared_dir / "a" / "c" / "1" / "1").chmod(0o600)  # a: one chunk unreadable
    (shared_dir / "c" / "zarr.json").chmod(0o600)  # c: metadata unreadable
    before = files_under(shared_dir)
    whole = [[0, 8], [0, 8]]
    results = as_nobody({
        "write_a": ["write", str(shared_dir / "a"), whole, 5],
        "write_b_chunk": ["write", str(shared_dir / "b"), [[0, 4], [0, 4]], 5],
        "write_b_part": ["write", str(shared_dir / "b"), [[0, 1], [0, 1]], 5],
        "attr_b": ["attr", str(shared_dir / "b"), "k", 2],
        "create": ["create", str(shared_dir / "new")],
        "read_a": ["read", str(shared_dir / "a")],
        "read_a_allowed": ["read_part", str(shared_dir / "a"), [[0, 4], [0, 8]]],
        "read_b": ["read", str(shared_dir / "b")],
        "read_c": ["read", str(shared_dir / "c")],
    })
    expect = {
        "write_a": str(shared_dir / "a"),
        "write_b_chunk": str(shared_dir / "b" / "c" / "0" / "0"),
        "write_b_part": str(shared_dir / "b" / "c" / "0" / "0"),
        "attr_b": str(shared_dir / "b" / "zarr.json"),
        "create": str(shared_dir / "new"),
        "read_a": str(shared_dir / "a" / "c" / "1" / "1"),
        "read_c": str(shared_dir / "c" / "zarr.json"),
    }
    wrong = {}
    for action, path in expect.items():
        result = results[action]
        if not (result and result["store_error"] and result["os_error"] and path in result["message"]
                and "permission denied" in result["message"].lower()):
            wrong[action] = result
    assert not wrong, f"expected StoreError naming the path and 'Permission denied': {json.dumps(wrong, indent=1)}"
    assert results["read_a_allowed"] is None and results["read_b"] is None, results
    assert files_under(shared_dir) == before, "a refused write changed files"
    for name in ("a", "b", "c"):
        np.testing.assert_array_equal(zd.open_array(shared_dir / name)[...], data)


# ---------------------------------------------------------------------------------------------
# Stores opened read-only


def _read_only_store(kind: str, path: Path) -> Any:
    if kind == "zarr_device":
        return zd.LocalStore(path, read_only=True)
    return zarr.storage.LocalStore(str(path), read_only=True)


@pytest.mark.parametrize("kind", ["zarr_device", "zarr-python"])
def test_read_only_store_refuses_writes_and_changes_nothing(kind: str, tmp_path: Path) -> None:
    """A store opened read-only (zd.LocalStore or zarr-python's LocalStore): opening a node with
    mode 'r+' or 'a' raises UsageError; through mode 'r', every write of data or attributes, and
    creating nodes, raise UsageError; no file changes (not even a lock file appears); reads work."""
    root = tmp_path / "data"
    zgroup = zarr.open_group(str(root), mode="w", attributes={"g": 1})
    za = zgroup.create_array("a", shape=(8, 8), chunks=(4, 4), dtype="int32", fill_value=0, attributes={"k": 1})
    za[...] = np.arange(64, dtype=np.int32).reshape(8, 8)
    zgroup.create_array("s", shape=(8, 8), chunks=(2, 2), shards=(4, 4), dtype="int32", fill_value=0)[...] = 3
    before = files_under(root)

    store = _read_only_store(kind, root)
    modes: tuple[zd.OpenMode, ...] = ("r+", "a")
    for mode in modes:
        with pytest.raises(zd.UsageError):
            zd.open_array(store, path="a", mode=mode)
        with pytest.raises(zd.UsageError):
            zd.open_group(store, mode=mode)

    arr = zd.open_array(store, path="a", mode="r")
    sharded = zd.open_array(store, path="s", mode="r")
    group = zd.open_group(store, mode="r")
    attempts: dict[str, Callable[[], object]] = {
        "arr[...] = ...": lambda: arr.__setitem__(..., 1),
        "arr[0, 0] = ...": lambda: arr.__setitem__((0, 0), 1),
        "arr.write": lambda: arr.write((slice(0, 4), slice(0, 4)), np.ones((4, 4), np.int32)),
        "sharded inner chunk": lambda: sharded.__setitem__((slice(0, 2), slice(0, 2)), 1),
        "attrs[k] = v": lambda: arr.attrs.__setitem__("k", 2),
        "attrs.update": lambda: arr.attrs.update({"x": 1}),
        "del attrs[k]": lambda: arr.attrs.__delitem__("k"),
        "attrs.put": lambda: arr.attrs.put({}),
        "attrs.clear": lambda: arr.attrs.clear(),
        "update_attributes": lambda: arr.update_attributes({"x": 1}),
        "group attrs": lambda: group.attrs.__setitem__("g", 2),
        "group.create_array": lambda: group.create_array("b", shape=(2,), dtype="uint8"),
        "group.create_group": lambda: group.create_group("h"),
        "zd.create": lambda: zd.create(store, path="c", shape=(2,), dtype="uint8"),
        "zd.create mode=w": lambda: zd.create(store, path="a", shape=(2,), dtype="uint8", mode="w"),
        "zd.create_group": lambda: zd.create_group(store, path="h"),
        "zd.create_group mode=w": lambda: zd.create_group(store, mode="w"),
    }
    not_refused = {}
    for what, attempt in attempts.items():
        try:
            attempt()
            not_refused[what] = "no error"
        except zd.UsageError:
            pass
        except Exception as e:  # noqa: BLE001 - reported below
            not_refused[what] = f"{type(e).__name__}: {e}"
    assert not not_refused, f"not refused with UsageError: {not_refused}"
    assert files_under(root) == before, "a refused write changed the files"
    np.testing.assert_array_equal(arr[...], np.arange(64, dtype=np.int32).reshape(8, 8))
    np.testing.assert_array_equal(sharded[...], np.full((8, 8), 3, np.int32))
    assert arr.attrs.asdict() == {"k": 1} and group.attrs.asdict() == {"g": 1}
