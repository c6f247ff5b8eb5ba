"""Trust, second pass (issue 52): arguments in zarr-python's forms mean what they mean there; no
recursion that input controls; import failures say what failed; what the README promises about
temporary files, symbolic links and mode="w" is what the code does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from collections.abc import Iterator
from typing import Any, cast

import numpy as np
import pytest

from conftest import assert_bits_equal, random_values, tensorstore_read, zarr_python_array

import zarr_device as zd
import zarr_device.core.group as zd_group
from zarr_device.io.adapters.base import import_framework
from zarr_device.tools.cli import main as cli_main

# ----------------------------------------------------------------------------------------------
# 1. chunk_key_encoding in every form zarr-python takes, stored in the form of v3 metadata


def _zarr_encoding(name: str, separator: str) -> Any:
    from zarr.core.chunk_key_encodings import DefaultChunkKeyEncoding, V2ChunkKeyEncoding

    return (DefaultChunkKeyEncoding if name == "default" else V2ChunkKeyEncoding)(separator=cast(Any, separator))


# (form, the name and separator it means, the key of chunk (1, 0))
ENCODING_FORMS: list[tuple[Any, str, str, str]] = [
    (None, "default", "/", "c/1/0"),
    ("default", "default", "/", "c/1/0"),
    ("v2", "v2", ".", "1.0"),
    (("default", "."), "default", ".", "c.1.0"),
    (("v2", "/"), "v2", "/", "1/0"),
    ({"name": "default", "separator": "."}, "default", ".", "c.1.0"),  # the form of the issue
    ({"name": "v2", "separator": "/"}, "v2", "/", "1/0"),
    ({"name": "v2"}, "v2", ".", "1.0"),
    ({"name": "default"}, "default", "/", "c/1/0"),
    ({"name": "default", "configuration": {}}, "default", "/", "c/1/0"),
    ({"name": "default", "configuration": {"separator": "."}}, "default", ".", "c.1.0"),
    ({"name": "v2", "configuration": {"separator": "/"}}, "v2", "/", "1/0"),
    ({"name": "default", "separator": ".", "configuration": {"separator": "."}}, "default", ".", "c.1.0"),
    ("zarr:default.", "default", ".", "c.1.0"),  # zarr-python's ChunkKeyEncoding objects
    ("zarr:v2/", "v2", "/", "1/0"),
]


@pytest.mark.parametrize("form,name,separator,key", ENCODING_FORMS, ids=[str(f[0]) for f in ENCODING_FORMS])
def test_chunk_key_encoding_forms_read_by_peers(tmp_path: Path, form: Any, name: str, separator: str, key: str) -> None:
    if isinstance(form, str) and form.startswith("zarr:"):
        form = _zarr_encoding(form[5:-1], form[-1])
    values = random_values("int32", (7, 5), np.random.default_rng(7))
    arr = zd.create(str(tmp_path / "a"), shape=(7, 5), dtype="int32", chunks=(3, 3), chunk_key_encoding=form)
    arr[...] = values
    meta = json.loads((tmp_path / "a" / "zarr.json").read_text())
    assert meta["chunk_key_encoding"] == {"name": name, "configuration": {"separator": separator}}
    assert (tmp_path / "a" / key).is_file()
    assert_bits_equal(zd.open_array(str(tmp_path / "a"))[...], values, "zarr-device")
    assert_bits_equal(zarr_python_array(tmp_path / "a", mode="r")[...], values, "zarr-python")
    assert_bits_equal(tensorstore_read(tmp_path / "a"), values, "tensorstore")


def test_chunk_key_encoding_as_zarr_python_stores_it(tmp_path: Path) -> None:
    # zarr-python's create_array, given the same dict, stores the same metadata and the same keys.
    import zarr

    form = {"name": "default", "separator": "."}
    theirs = zarr.create_array(str(tmp_path / "zarr"), shape=(7, 5), dtype="int32", chunks=(3, 3),
                               chunk_key_encoding=dict(form), fill_value=0)
    theirs[...] = np.arange(35, dtype="int32").reshape(7, 5)
    ours = zd.create(str(tmp_path / "zd"), shape=(7, 5), dtype="int32", chunks=(3, 3), chunk_key_encoding=form)
    ours[...] = np.arange(35, dtype="int32").reshape(7, 5)
    encoding = [json.loads((tmp_path / d / "zarr.json").read_text())["chunk_key_encoding"] for d in ("zarr", "zd")]
    assert encoding[0] == encoding[1]
    keys = [sorted(p.name for p in (tmp_path / d).iterdir() if p.name.startswith("c")) for d in ("zarr", "zd")]
    assert len(keys[0]) == 6
    assert keys[0] == keys[1]


BAD_ENCODINGS: list[Any] = [
    "v3",
    "c/",
    ("default",),
    ("default", "-"),
    ("v7", "/"),
    5,
    ["default", "."],
    {"name": "default", "separator": "-"},
    {"name": "default", "sep": "."},
    {"separator": "."},
    {"name": "default", "separator": ".", "configuration": {"separator": "/"}},
    {"name": "default", "configuration": "."},
    {"name": "default", "configuration": {"separator": ".", "extra": 1}},
    {"name": 3},
]


@pytest.mark.parametrize("form", BAD_ENCODINGS, ids=[repr(f) for f in BAD_ENCODINGS])
def test_chunk_key_encoding_other_forms_refused(tmp_path: Path, form: Any) -> None:
    with pytest.raises(zd.UsageError, match="chunk_key_encoding"):
        zd.create(str(tmp_path / "a"), shape=(4,), dtype="int32", chunk_key_encoding=form)
    assert not (tmp_path / "a").exists()


# ----------------------------------------------------------------------------------------------
# 2. Walks of groups: iterative, with a depth limit that is a typed error


@pytest.fixture
def deep_tmp_path(tmp_path: Path) -> Iterator[Path]:
    """tmp_path, emptied at the end by rm (iterative): shutil.rmtree, which pytest cleans up
    with, recurses per level and fails on the deep trees these tests make."""
    yield tmp_path
    subprocess.run(["rm", "-rf", "--", str(tmp_path)], check=False)


def _nested_groups(root: Path, depth: int, *, with_array: bool = True) -> str:
    """Groups g/g/.../g, ``depth`` levels below the root group, written as files (fast); an array
    "arr" in the deepest when ``with_array``. Returns the deepest group's path."""
    group = json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}})
    path = root
    path.mkdir(parents=True, exist_ok=True)
    (path / "zarr.json").write_text(group)
    for _ in range(depth):
        path = path / "g"
        path.mkdir()
        (path / "zarr.json").write_text(group)
    inner = str(path.relative_to(root))
    if with_array:
        arr = zd.create(str(root), path=f"{inner}/arr", shape=(3,), dtype="int16", chunks=(2,))
        arr[...] = np.array([1, 2, 3], dtype="int16")
    return inner


def test_walks_reach_the_depth_limit(deep_tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    depth = zd_group.MAX_GROUP_DEPTH - 1  # the array lies MAX_GROUP_DEPTH levels below the root
    inner = _nested_groups(deep_tmp_path / "s", depth)
    root = zd.open_group(str(deep_tmp_path / "s"))
    assert list(root.all_arrays()) == [f"{inner}/arr"]
    np.testing.assert_array_equal(root.read()[f"{inner}/arr"], [1, 2, 3])
    assert [p for p, _ in root.walk()][-2:] == [inner, f"{inner}/arr"]
    assert cli_main(["info", str(deep_tmp_path / "s")]) == 0
    assert "arr  array" in capsys.readouterr().out
    assert cli_main(["info", str(deep_tmp_path / "s"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    for _ in range(depth):
        (info,) = info["members"]
    assert info["members"][0]["path"] == f"/{inner}/arr"
    assert info["nbytes"] == 6


def test_walks_past_the_depth_limit_are_typed_errors(deep_tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 1000 levels: before, RecursionError from all_arrays(), read() and info (info from 330).
    _nested_groups(deep_tmp_path / "s", 1000)
    root = zd.open_group(str(deep_tmp_path / "s"))
    too_deep = "/".join(["g"] * zd_group.MAX_GROUP_DEPTH)
    for walk in (root.all_arrays, root.read, lambda: list(root.walk())):
        with pytest.raises(zd.FormatError, match=f"more than {zd_group.MAX_GROUP_DEPTH} levels") as e:
            walk()
        assert f"'/{too_deep}'" in str(e.value)
    for json_flag in ([], ["--json"]):
        assert cli_main(["info", str(deep_tmp_path / "s"), *json_flag]) == 1
        err = capsys.readouterr().err
        assert f"more than {zd_group.MAX_GROUP_DEPTH} levels" in err and f"'/{too_deep}'" in err
    # convert walks the source with the same walk: a typed error, and nothing written.
    with pytest.raises(zd.FormatError, match=f"more than {zd_group.MAX_GROUP_DEPTH} levels"):
        zd.convert(str(deep_tmp_path / "s"), str(deep_tmp_path / "out.zarr"))
    assert not (deep_tmp_path / "out.zarr").exists()
    # From a group part-way down, the limit counts from there.
    middle = zd.open_group(str(deep_tmp_path / "s"), path="/".join(["g"] * 900))
    assert list(middle.all_arrays()) == ["/".join(["g"] * 100) + "/arr"]


def test_walks_keep_no_python_stack(deep_tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # With the limit raised past the tree, a walk of 600 levels runs under a recursion limit far
    # below that: nothing recurses per level.
    inner = _nested_groups(deep_tmp_path / "s", 600)
    monkeypatch.setattr(zd_group, "MAX_GROUP_DEPTH", 10_000)
    root = zd.open_group(str(deep_tmp_path / "s"))
    from zarr_device.tools.cli.info import describe_node, format_tree

    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1  # type: ignore[assignment]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + 150)
    try:
        assert list(root.all_arrays()) == [f"{inner}/arr"]
        text = format_tree(describe_node(root), "s")
    finally:
        sys.setrecursionlimit(limit)
    assert text.count("\n") >= 600


# ----------------------------------------------------------------------------------------------
# 3. An import that fails says why, unless the module is simply not installed


def _package(root: Path, name: str, init: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(textwrap.dedent(init))


@pytest.fixture
def fake_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    return root


def test_import_failure_names_its_cause(fake_packages: Path) -> None:
    _package(fake_packages, "zd_fake_fw", 'raise ImportError("libfake.so: failed to map segment from shared object")')
    with pytest.raises(zd.UsageError) as e:
        import_framework("zd_fake_fw", "like='fake' needs Fake: pip install fake")
    message = str(e.value)
    assert "failed to map segment" in message and "ImportError" in message
    assert "is installed but failed to import" in message and "pip install" not in message
    assert isinstance(e.value.__cause__, ImportError)


def test_missing_dependency_of_a_framework_is_not_the_framework_missing(fake_packages: Path) -> None:
    _package(fake_packages, "zd_fake_fw2", "import zd_fake_dependency_that_is_not_there")
    with pytest.raises(zd.UsageError, match="ModuleNotFoundError.*zd_fake_dependency_that_is_not_there"):
        import_framework("zd_fake_fw2", "like='fake' needs Fake: pip install fake")


def test_a_framework_not_installed_says_what_to_install(fake_packages: Path) -> None:
    with pytest.raises(zd.UsageError) as e:
        import_framework("zd_fake_not_there", "like='fake' needs Fake: pip install fake")
    assert str(e.value) == "like='fake' needs Fake: pip install fake"
    with pytest.raises(zd.UsageError, match="pip install fake"):
        import_framework("zd_fake_not_there.core", "like='fake' needs Fake: pip install fake")


def test_like_torch_reports_why_torch_did_not_import(fake_packages: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # As under a 1 GiB memory limit: torch is there, but importing it fails.
    _package(fake_packages, "torch", 'raise ImportError("libtorch_cpu.so: failed to map segment from shared object")')
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    arr = zd.create(str(tmp_path / "a"), shape=(4,), dtype="float32")
    with pytest.raises(zd.UsageError, match="failed to map segment") as e:
        arr.read(like="torch")
    assert "needs PyTorch" in str(e.value) and "pip install torch" not in str(e.value)


# ----------------------------------------------------------------------------------------------
# 4a. Temporary files: a new value is named at once; only a replacement goes through a hidden name


def _strace_renames_and_links(tmp_path: Path, script: str) -> list[str]:
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("needs strace")
    log = tmp_path / "strace.log"
    run = subprocess.run(
        [strace, "-f", "-qq", "-e", "trace=linkat,renameat,renameat2,rename", "-o", str(log),
         sys.executable, "-c", script],
        capture_output=True, text=True, timeout=120,
    )
    if run.returncode != 0 and "ptrace" in run.stderr.lower():
        pytest.skip(f"strace cannot trace here: {run.stderr.strip()}")
    assert run.returncode == 0, run.stderr
    return [line for line in log.read_text().splitlines() if "value" in line]


def test_new_values_never_have_a_temporary_name(tmp_path: Path) -> None:
    store = tmp_path / "s"
    script = textwrap.dedent(f"""
        import zarr_device as zd
        handle = zd.LocalStore({str(store)!r}).handle
        handle.set("d/value", b"first")
        print("--", flush=True)
        handle.set("d/value", b"second")
    """)
    calls = _strace_renames_and_links(tmp_path, script)
    links = [c for c in calls if c.split()[1].startswith("linkat")]
    if not any("/proc/self/fd/" in c for c in links):
        pytest.skip("this file system has no unnamed temporary files (O_TMPFILE)")
    # The first write: one link, under the key's own name; nothing renamed.
    assert '"value"' in links[0] and "= 0" in links[0], calls
    # The rewrite: the link over the name is refused, so the file is named beside it and renamed.
    assert "EEXIST" in links[1], calls
    assert ".value.zdtmp-" in links[2] and "= 0" in links[2], calls
    renames = [c for c in calls if "rename" in c]
    assert len(renames) == 1 and ".value.zdtmp-" in renames[0], calls
    assert (store / "d" / "value").read_bytes() == b"second"
    assert [p.name for p in (store / "d").iterdir()] == ["value"]


# ----------------------------------------------------------------------------------------------
# 4b. Symbolic links: absolute ones that stay inside the store are followed too


def test_absolute_links_inside_the_store_are_followed(tmp_path: Path) -> None:
    root = tmp_path / "s"
    values = np.arange(12, dtype="float64").reshape(3, 4)
    zd.create(str(root), path="real", shape=(3, 4), dtype="float64", chunks=(2, 2))[...] = values
    os.symlink(root / "real", root / "alias")  # an absolute link to an array
    (root / "other").mkdir()
    os.symlink(root / "real" / "zarr.json", root / "other" / "zarr.json")
    os.symlink(root / "real" / "c", root / "other" / "c")  # to its chunks
    for path in ("alias", "other"):
        assert_bits_equal(zd.open_array(str(root), path=path)[...], values, path)
    zd.open_array(str(root), path="alias", mode="r+")[0, 0] = 99.0  # writes land inside
    assert zd.open_array(str(root), path="real")[0, 0] == 99.0


def test_absolute_links_out_of_the_store_are_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    zd.create(str(outside), shape=(4,), dtype="int8")[...] = np.arange(4, dtype="int8")
    root = tmp_path / "s"
    root.mkdir()
    os.symlink(outside, root / "escape")
    os.symlink(str(root) + "/../outside", root / "climbs")  # names the root, then leaves it
    for path in ("escape", "climbs"):
        with pytest.raises(zd.StoreError, match="leads out of the store through a symbolic link"):
            zd.open_array(str(root), path=path)[...]


# ----------------------------------------------------------------------------------------------
# 4c. mode="w": the node at the path and every Zarr node below it go; other files stay


def _old_tree(root: Path) -> None:
    zd.create_group(str(root), path="a")
    zd.create(str(root), path="a/b/arr", shape=(4,), dtype="int32")[...] = np.arange(4, dtype="int32")
    zd.create(str(root), path="a/b/c/d/deeper", shape=(2,), dtype="int8")[...] = np.ones(2, dtype="int8")
    zd.create_group(str(root), path="a/g/h")
    (root / "a" / "b" / "notes.txt").write_text("not Zarr")


@pytest.mark.filterwarnings("ignore:Object at b is not recognized")
@pytest.mark.parametrize("what", ["array", "group"])
def test_mode_w_removes_every_node_below(tmp_path: Path, what: str) -> None:
    root = tmp_path / "s"
    _old_tree(root)
    if what == "array":
        new: Any = zd.create(str(root), path="a", shape=(3,), dtype="int8", mode="w")
        np.testing.assert_array_equal(new[...], [0, 0, 0])
    else:
        new = zd.create_group(str(root), path="a", mode="w")
        assert list(new) == []
    for gone in ("a/b/arr", "a/b/c/d/deeper", "a/g/h", "a/g"):
        with pytest.raises(zd.NodeNotFoundError):
            zd.open(str(root), path=gone)
    assert (root / "a" / "b" / "notes.txt").read_text() == "not Zarr"
    assert not (root / "a" / "g").exists() and not (root / "a" / "b" / "c").exists()
    # zarr-python finds nothing of the old tree either ("b" holds only notes.txt now).
    import zarr

    if what == "array":
        assert zarr.open_array(str(root / "a"), mode="r").shape == (3,)
    else:
        assert list(zarr.open_group(str(root / "a"), mode="r").members()) == []


def test_mode_w_at_the_root_through_deep_directories(deep_tmp_path: Path) -> None:
    # Arrays under 400 directories without metadata: found and removed without recursion.
    root = deep_tmp_path / "s"
    deep = "/".join(["d"] * 400)
    zd.create(str(root), path=f"{deep}/arr", shape=(2,), dtype="int8")
    zd.create_group(str(root), mode="w")
    with pytest.raises(zd.NodeNotFoundError):
        zd.open(str(root), path=f"{deep}/arr")
    assert sorted(p.name for p in root.iterdir()) == ["zarr.json"]


def test_mode_w_removes_nothing_when_the_new_node_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _old_tree(root)
    with pytest.raises(zd.FormatError):
        zd.create(str(root), path="a", shape=(3,), dtype="int8", codecs=[{"name": "no-such-codec"}], mode="w")
    with pytest.raises(zd.UsageError):
        zd.create_group(str(root), path="a", attributes={"x": float("nan")}, mode="w")
    np.testing.assert_array_equal(zd.open_array(str(root), path="a/b/arr")[...], np.arange(4))
    assert isinstance(zd.open(str(root), path="a"), zd.Group)


def test_mode_w_in_a_memory_store() -> None:
    store = zd.MemoryStore()
    zd.create(store, path="x/y/arr", shape=(2,), dtype="int8")[...] = np.ones(2, dtype="int8")
    zd.create(store, path="x", shape=(1,), dtype="int8", mode="w")
    with pytest.raises(zd.NodeNotFoundError):
        zd.open(store, path="x/y/arr")
    assert store.handle.list_dir("x") == ["zarr.json"]
