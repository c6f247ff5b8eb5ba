"""``zarr-device fsck --fix`` removes only what is provably zarr-device's: engine temporaries by
their exact name, place and target, and partial trees beside a store by their record; never a
user's file that merely looks like one. Deep trees, huge chunk grids and missing paths give a
typed result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zarr_device as zd
from zarr_device.io import atomic_trees, leftover_trees
from zarr_device.tools import cli
from zarr_device.tools.store_check import MAX_DEPTH, check_store

DEAD = 999_999_999  # above any Linux pid_max: no process has it
OLD = time.time() - 2 * 3600


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = cli.main(list(argv))
    return status, capsys.readouterr().out


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (never following links), by relative path."""
    found: dict[str, bytes] = {}
    for parent, _dirs, names in os.walk(folder):
        for name in names:
            path = Path(parent, name)
            if not path.is_symlink():
                found[path.relative_to(folder).as_posix()] = path.read_bytes()
    return found


def put(path: Path, data: bytes = b"the user's") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def record(tree: Path, destination: str, token: str, role: str = "new", **more: Any) -> None:
    tree.mkdir(parents=True, exist_ok=True)
    document = {"zarr_device": "placement", "destination": destination, "token": token, "role": role, **more}
    (tree / atomic_trees.RECORD).write_text(json.dumps(document))


def age(*paths: Path) -> None:
    for path in paths:
        os.utime(path, (OLD, OLD), follow_symlinks=False)


def killed_writer_partial(dest: Path) -> Path:
    """A partial tree as a writer killed part-way leaves it: made by atomic_trees in a process that
    is gone (its record names a process that no longer runs)."""
    code = ("import sys; from pathlib import Path; from zarr_device.io import atomic_trees; "
            "p = atomic_trees.make_partial(Path(sys.argv[1])); (p / 'zarr.json').write_text('{'); print(p)")
    out = subprocess.run([sys.executable, "-c", code, str(dest)], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def v2_array(path: Path, shape: tuple[int, int], chunks: tuple[int, int], value: int, rows: int | None = None) -> None:
    """A Zarr v2 uint8 array (keys ``i.j``), its chunks of the first ``rows`` rows (all) stored."""
    path.mkdir(parents=True)
    (path / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": list(shape), "chunks": list(chunks), "dtype": "|u1", "compressor": None,
        "fill_value": 0, "order": "C", "filters": None}))
    for i in range(-(-(shape[0] if rows is None else rows) // chunks[0])):
        for j in range(-(-shape[1] // chunks[1])):
            (path / f"{i}.{j}").write_bytes(bytes([value]) * (chunks[0] * chunks[1]))


# ----------------------------------------------------------------------------------------------
# Look-alike names in and beside a store


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A group with a v3 array (``a``, chunk folders ``c/i/j``), a v2 array (``b``, keys
    ``i.j``) and a folder of the user's (``notes``)."""
    root = tmp_path / "data.zarr"
    group = zd.create_group(root)
    group.create_array("a", shape=(4, 4), dtype="uint8", chunks=(2, 2))[...] = 1
    v2_array(root / "b", (4, 4), (2, 2), value=2)
    (root / "notes").mkdir()
    return root


def test_look_alikes_are_kept_and_engine_temporaries_removed(store: Path, capsys: Any) -> None:
    tmp = store.parent
    user = [
        # in a folder of the user's inside the store, even the engine's exact names are not its
        put(store / "notes" / ".draft.tmp2024.01"),
        put(store / "notes" / ".zarr.json.zdtmp-123"),
        put(store / "notes" / f".zarr.json.zdtmp-{DEAD}-1"),
        put(store / "notes" / f".0.zdtmp-{DEAD}-1"),
        # in nodes' folders: names the engine never writes there
        put(store / ".backup.tmp99999.1"),
        put(store / ".plan.zdtmp-keep"),
        put(store / ".x.zdtmp-abc"),
        put(store / ".thesis.tex.tmp123.4"),
        put(store / f".notes.zdtmp-{DEAD}-1"),
        put(store / f".zarr.json.zdtmp-0{DEAD}-1"),  # a process id as the engine never writes one
        put(store / f".zarr.json.zdtmp-{DEAD}-1-2"),
        put(store / f".zarr.json.zdtmp-{DEAD}"),
        put(store / "a" / "c" / f".0.0.zdtmp-{DEAD}-1"),  # a chunk key of another shape
        put(store / "a" / f".0.zdtmp-{DEAD}-1"),  # a chunk key, but not in its folder
        put(store / "a" / "c" / "0" / f".x.zdtmp-{DEAD}-1"),
        put(store / "a" / "c" / "0" / f".c.zdtmp-{DEAD}-1"),
        put(store / "b" / f".0.zdtmp-{DEAD}-1"),  # v2 keys have two parts here
        put(store / "b" / f".c.0.0.zdtmp-{DEAD}-1"),
        put(store / f".0.0.zdtmp-{DEAD}-1"),  # the group has no chunks
        put(store / "a" / "c" / "0" / f".1.zdtmp-{DEAD}-1" / "inside"),  # a directory of that name
    ]
    ours = [
        put(store / f".zarr.json.zdtmp-{DEAD}-7"),
        put(store / "a" / f".zarr.json.zdtmp-{DEAD}-18446744073709551615"),
        put(store / "a" / "c" / "1" / f".0.zdtmp-{DEAD}-3"),
        put(store / "a" / "c" / "1" / f".1.tmp{DEAD}.2"),  # an earlier release's name
        put(store / "b" / f"..zarray.zdtmp-{DEAD}-5"),
        put(store / "b" / f"..zattrs.zdtmp-{DEAD}-5"),
        put(store / "b" / f".1.0.zdtmp-{DEAD}-5"),
    ]
    # Beside the store: partial trees that no record proves, and one that a record does.
    beside = [
        put(tmp / "data.zarr.partial-deadbeef" / "mine.txt"),
        put(tmp / "data.zarr.replaced-0badcafe" / "zarr.json", b"{}"),
        put(tmp / "data.zarr.partial-01234567"),  # a file
        put(tmp / "data.zarr.partial-notes" / "x"),
    ]
    record(tmp / "data.zarr.partial-0badf00d", "data.zarr", "00000000")  # another tree's token
    record(tmp / "data.zarr.partial-00000001", "other.zarr", "00000001")  # another destination
    record(tmp / "data.zarr.partial-cafe0001", "data.zarr", "cafe0001", "file")
    put(tmp / "data.zarr.partial-cafe0001" / "notes.txt")  # a file's folder holding more
    record(tmp / "data.zarr.partial-cafe0002", "data.zarr", "cafe0002", "unknown")
    (tmp / "elsewhere").mkdir()
    record(tmp / "elsewhere", "data.zarr", "cafe0003")
    (tmp / "data.zarr.partial-cafe0003").symlink_to(tmp / "elsewhere")  # a link: never entered
    fresh = killed_writer_partial(store)  # recent: a writer may still be at work
    put(fresh / "c" / "0")
    stale = killed_writer_partial(store)
    put(stale / "c" / "0")
    age(stale / "c" / "0", stale / "c", stale / atomic_trees.RECORD, stale)
    for path in ours:
        age(path)
    before = files(tmp)

    status, out = run(capsys, "fsck", str(store), "--quiet")
    assert status == 1
    assert files(tmp) == before  # without --fix nothing changes
    for path in ours:
        assert f"{path.relative_to(store).as_posix()}: a temporary file of a write" in out
    assert "hidden: .plan.zdtmp-keep" in out and "hidden: .backup.tmp99999.1" in out

    status, out = run(capsys, "fsck", str(store), "--fix", "--quiet")
    assert status == 1  # the look-alikes are still there (reported, never removed)
    after = files(tmp)
    removed = set(before) - set(after)
    expected = {p.relative_to(tmp).as_posix() for p in ours}
    expected |= {f"{stale.name}/c/0", f"{stale.name}/{atomic_trees.RECORD}", f"{stale.name}/zarr.json"}
    assert removed == expected, sorted(removed ^ expected)
    assert all(after[k] == v for k, v in before.items() if k in after)
    assert not stale.exists() and fresh.exists()
    for path in user + beside:
        assert path.exists(), path
    assert (tmp / "data.zarr.partial-cafe0003").is_symlink() and (tmp / "elsewhere" / atomic_trees.RECORD).exists()
    assert f"../{stale.name}: " in out and "(removed)" in out
    assert "no record of zarr-device's in it" in out and "not a directory" in out
    assert "a writer may be running" in out
    assert "partial-notes" not in out  # not a name any writer gives
    # The stores still read; a second pass removes nothing more.
    np.testing.assert_array_equal(zd.open_array(store / "a")[...], 1)
    status, _ = run(capsys, "fsck", str(store), "--fix", "--quiet")
    assert status == 1 and files(tmp) == after


def test_plain_folder_with_no_node_has_nothing_removed(tmp_path: Path, capsys: Any) -> None:
    home = tmp_path / "home"
    put(home / ".thesis.tex.tmp123.4")
    put(home / f".zarr.json.zdtmp-{DEAD}-1")
    put(home / "sub" / f".0.zdtmp-{DEAD}-1")
    put(tmp_path / "home.partial-01234567" / "mine.txt")
    recorded = killed_writer_partial(home)  # even one a record proves: home is no Zarr store
    age(recorded / "zarr.json", recorded / atomic_trees.RECORD, recorded)
    before = files(tmp_path)
    status, out = run(capsys, "fsck", str(home), "--fix", "--quiet")
    assert status == 1
    assert files(tmp_path) == before
    assert "no Zarr node in it" in out and "nothing was changed" in out
    assert "(removed)" not in out and "fixed" not in out
    # A missing path, though, is where a killed first save left only its partial tree beside it.
    gone = tmp_path / "gone.zarr"
    partial = killed_writer_partial(gone)
    age(partial / "zarr.json", partial / atomic_trees.RECORD, partial)
    status, out = run(capsys, "fsck", str(gone), "--fix", "--quiet")
    assert status == 1 and not partial.exists()
    assert f"{gone} does not exist" in out and "1 fixed" in out


def test_missing_path_says_it_does_not_exist(tmp_path: Path, capsys: Any) -> None:
    status, out = run(capsys, "fsck", str(tmp_path / "nosuch.zarr"))
    assert status == 1
    assert "does not exist" in out and "not a directory" not in out
    put(tmp_path / "file.zarr")
    status, out = run(capsys, "fsck", str(tmp_path / "file.zarr"))
    assert status == 1 and "not a directory" in out


def test_the_command_line_in_a_process_of_its_own(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    zd.create(store, shape=(4,), dtype="uint8", chunks=(2,))[...] = 3
    mine = put(store / "c" / ".notes.tmp2024.1")
    theirs = put(store / "c" / f".0.zdtmp-{DEAD}-1")
    command = [sys.executable, "-m", "zarr_device.tools.cli", "fsck", "--fix", str(store)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert mine.exists() and not theirs.exists()
    assert done.stdout.strip().splitlines()[-1] == f"{store}: 1 node; 1 problem, 1 fixed"
    missing = subprocess.run([sys.executable, "-m", "zarr_device.tools.cli", "fsck", str(tmp_path / "nosuch.zarr")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and "does not exist" in missing.stdout


# ----------------------------------------------------------------------------------------------
# Placement: the record is written, proves the tree, and never reaches the placed store


def test_partials_carry_a_record_that_never_reaches_the_store(tmp_path: Path) -> None:
    dest = tmp_path / "out.zarr"
    with atomic_trees.atomic_directory(dest, overwrite=False) as partial:
        found = leftover_trees.examine_leftover(dest, partial)
        assert found.proven and found.writer == os.getpid()
        zd.create(partial, shape=(2,), dtype="uint8", chunks=(2,))[...] = 1
    assert not (dest / atomic_trees.RECORD).exists() and leftover_trees.leftovers(dest) == leftover_trees.remnants(dest) == []
    with atomic_trees.atomic_directory(dest, overwrite=True) as partial:  # replacing: an exchange
        zd.create(partial, shape=(2,), dtype="uint8", chunks=(2,))[...] = 2
    assert not (dest / atomic_trees.RECORD).exists() and leftover_trees.leftovers(dest) == leftover_trees.remnants(dest) == []
    np.testing.assert_array_equal(zd.open_array(dest)[...], 2)
    file_dest = tmp_path / "model.safetensors"
    with atomic_trees.atomic_file(file_dest, overwrite=False) as partial:
        assert leftover_trees.examine_leftover(file_dest, partial.parent).proven
        partial.write_bytes(b"weights")
    assert file_dest.read_bytes() == b"weights"
    assert leftover_trees.leftovers(file_dest) == leftover_trees.remnants(file_dest) == []
    with pytest.raises(RuntimeError), atomic_trees.atomic_directory(dest, overwrite=True):
        raise RuntimeError("the writer fails")
    assert leftover_trees.leftovers(dest) == leftover_trees.remnants(dest) == []
    assert sorted(os.listdir(tmp_path)) == ["model.safetensors", "out.zarr"]


def test_the_previous_store_is_kept_when_the_destination_is_missing(tmp_path: Path) -> None:
    dest = tmp_path / "m.zarr"
    old = tmp_path / "m.zarr.replaced-0123abcd"
    put(old / "zarr.json", b"{}")
    record(old, "m.zarr", "0123abcd", "old")
    assert not leftover_trees.examine_leftover(dest, old).proven  # the only copy: rename it back
    assert leftover_trees.remove_leftovers(dest) == [] and old.exists()
    zd.create_group(dest)
    assert leftover_trees.remove_leftovers(dest) == [old] and not old.exists()


def test_a_record_is_only_a_small_regular_file(tmp_path: Path) -> None:
    dest = tmp_path / "m.zarr"
    big = tmp_path / "m.zarr.partial-0000000a"
    record(big, "m.zarr", "0000000a", padding="x" * 10000)
    linked = tmp_path / "m.zarr.partial-0000000b"
    linked.mkdir()
    record(tmp_path / "decoy", "m.zarr", "0000000b")
    (linked / atomic_trees.RECORD).symlink_to(tmp_path / "decoy" / atomic_trees.RECORD)
    broken = tmp_path / "m.zarr.partial-0000000c"
    broken.mkdir()
    (broken / atomic_trees.RECORD).write_text("[" * 100000)
    for tree in (big, linked, broken):
        assert not leftover_trees.examine_leftover(dest, tree).proven
    assert leftover_trees.remove_leftovers(dest) == []


# ----------------------------------------------------------------------------------------------
# A writer killed between any two of its system calls leaves only what a record proves


# Run in a process of its own, which forks a child per trial: the child writes (or replaces) a
# store, a file, or fails and discards its tree, and exits at once (as SIGKILL leaves it) just
# before its n-th call that changes the file system (in the middle of it, for a write: half the
# bytes); the parent then checks what is left. Printed: one line per trial that went wrong, then
# the number of trials.
_KILL_AT_EVERY_STEP = r"""
import json, os, shutil, sys
from pathlib import Path
from zarr_device.io import atomic_trees, leftover_trees, renames

base = Path(sys.argv[1])
problems, trials = [], 0

def child(dest, kind, overwrite, exchange, step):
    count = [0]
    def hook(real, name):
        def call(*args, **kwargs):
            if name != "open" or args[1] & os.O_CREAT:
                count[0] += 1
                if count[0] == step:
                    if name == "write" and len(args[1]) > 1:
                        real(args[0], args[1][: len(args[1]) // 2])
                    os._exit(137)
            return real(*args, **kwargs)
        return call
    for name in ("mkdir", "rmdir", "unlink", "rename", "replace", "write", "open"):
        setattr(os, name, hook(getattr(os, name), name))
    # Where atomic_trees looks them up (renames.rename_new and renames.exchange call
    # renames._renameat2; atomic_trees calls renames.exchange).
    renames._renameat2 = hook(renames._renameat2, "renameat2")
    if not exchange:
        renames.exchange = lambda *_: False
    try:
        if kind == "file":
            with atomic_trees.atomic_file(dest, overwrite) as partial:
                with open(partial, "wb") as out:
                    out.write(b"new")
        else:
            with atomic_trees.atomic_directory(dest, overwrite) as partial:
                (partial / "sub").mkdir()
                for name in ("zarr.json", "sub/x"):
                    fd = os.open(partial / name, os.O_WRONLY | os.O_CREAT, 0o644)
                    os.write(fd, b"new")
                    os.close(fd)
                if kind == "fails":
                    raise RuntimeError("the writer fails")
    except RuntimeError:
        pass
    os._exit(0)

def content(path):
    if path.is_file():
        return path.read_bytes().decode()
    found = {p.relative_to(path).as_posix(): p.read_bytes().decode() for p in path.rglob("*") if p.is_file()}
    return found.get("zarr.json") if found in ({"zarr.json": "old", "sub/x": "old"},
                                               {"zarr.json": "new", "sub/x": "new"}) else found

for kind, overwrite, exchange in [("dir", False, True), ("dir", True, True), ("dir", True, False),
                                  ("fails", True, True), ("fails", True, False), ("file", True, True)]:
    step = 0
    while True:
        step += 1
        trials += 1
        root = base / f"{kind}-{overwrite}-{exchange}-{step}"
        root.mkdir()
        dest = root / ("d.safetensors" if kind == "file" else "d.zarr")
        if overwrite and kind == "file":
            dest.write_bytes(b"old")
        elif overwrite:
            (dest / "sub").mkdir(parents=True)
            (dest / "zarr.json").write_bytes(b"old")
            (dest / "sub" / "x").write_bytes(b"old")
        pid = os.fork()
        if pid == 0:
            child(dest, kind, overwrite, exchange, step)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        where = f"{kind} overwrite={overwrite} exchange={exchange} killed before step {step}"
        expected = {"old", "new"} if overwrite else {None, "new"}
        if kind == "fails" or (status == 0 and kind != "fails"):
            expected = {"old"} if kind == "fails" else {"new"}
        now = content(dest) if os.path.lexists(dest) else None
        if now is None and kind != "file" and overwrite:
            # Only where the file system cannot exchange: the old store moved aside, kept.
            aside = leftover_trees.leftovers(dest)
            kept = [p for p in aside if ".replaced-" in p.name and content(p) == "old"
                    and not leftover_trees.examine_leftover(dest, p).proven]
            if exchange or len(kept) != 1:
                problems.append(f"{where}: {dest.name} is missing, and the old store is not kept aside")
            else:
                os.rename(kept[0], dest)
                now = "old"
        if now not in expected:
            problems.append(f"{where}: {dest.name} holds {now!r}, expected one of {sorted(map(str, expected))}")
        if dest.is_dir() and os.path.lexists(dest / atomic_trees.RECORD):
            problems.append(f"{where}: the placed store holds the record")
        # The trees first: a record beside them is kept (and not removable) while they are there.
        for listing, remove in ((leftover_trees.leftovers, lambda d: leftover_trees.remove_leftovers(d, hidden=False)),
                                (leftover_trees.remnants, leftover_trees.remove_remnants)):
            for path in listing(dest):
                found = leftover_trees.examine_leftover(dest, path)
                if not found.proven:
                    problems.append(f"{where}: {path.name} is not provably zarr-device's: {found.detail}")
            remove(dest)
        left = sorted(set(os.listdir(root)) - {dest.name})
        if left:
            problems.append(f"{where}: remove_leftovers left {left}")
        shutil.rmtree(root)
        if status == 0:
            break
    if step < 5:
        problems.append(f"{kind} overwrite={overwrite} exchange={exchange}: only {step} steps")
print("\n".join(problems + [str(trials)]))
"""


def test_a_writer_killed_at_any_step_leaves_only_what_can_be_proven(tmp_path: Path) -> None:
    """At every moment each tree of a leftover's name beside the destination is proven by a
    record (in it, or beside it while it is placed), the placed store never holds the record, and
    what else a kill leaves (hidden, holding at most a record) is removed too."""
    done = subprocess.run([sys.executable, "-c", _KILL_AT_EVERY_STEP, str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    *problems, trials = done.stdout.strip().splitlines()
    assert problems == [], "\n".join(problems)
    assert int(trials) > 60


def test_hidden_bookkeeping_is_removed_only_when_it_holds_nothing_of_anyones(tmp_path: Path, capsys: Any) -> None:
    dest = tmp_path / "m.zarr"
    zd.create_group(dest)
    empty = tmp_path / ".m.zarr.zdstage-0000000a"
    empty.mkdir()
    torn = tmp_path / ".m.zarr.zdstage-0000000b"  # killed while writing the record
    torn.mkdir()
    (torn / atomic_trees.RECORD).write_text('{"zarr_device": "plac')
    users = put(tmp_path / ".m.zarr.zdstage-0000000c" / "mine.txt")
    others = tmp_path / ".m.zarr.zdstage-0000000d"  # another destination's record
    record(others, "other.zarr", "0000000d")
    placed = tmp_path / "m.zarr.partial-0000000e"  # being placed: its record beside it
    put(placed / "zarr.json", b"{}")
    record(tmp_path / "stage", "m.zarr", "0000000e")
    beside = tmp_path / ".m.zarr.zdplace-0000000e.json"
    (tmp_path / "stage" / atomic_trees.RECORD).rename(beside)
    stale = tmp_path / ".m.zarr.zdplace-0000000f.json"  # its trees are gone
    stale.write_text(beside.read_text().replace("0000000e", "0000000f"))
    forged = tmp_path / ".m.zarr.zdplace-00000010.json"
    forged.write_text("my notes")
    assert leftover_trees.leftovers(dest) == [placed]
    assert leftover_trees.remnants(dest) == [beside, stale, forged, empty, torn, users.parent, others]
    proven = {p for p in leftover_trees.remnants(dest) + [placed] if leftover_trees.examine_leftover(dest, p).proven}
    assert proven == {placed, stale, empty, torn}
    assert "kept while that is there" in leftover_trees.examine_leftover(dest, beside).detail
    age(placed / "zarr.json", placed, beside, stale, empty, torn / atomic_trees.RECORD, torn)
    before = files(tmp_path)
    status, out = run(capsys, "fsck", str(dest), "--quiet")
    assert status == 1 and files(tmp_path) == before
    assert f"../{placed.name}: a tree being placed" in out and f"../{empty.name}: an empty folder" in out
    status, out = run(capsys, "fsck", str(dest), "--fix", "--quiet")
    assert status == 1  # what is not provably zarr-device's is still there
    assert not any(p.exists() for p in (placed, beside, stale, empty, torn))
    assert users.exists() and forged.exists() and (others / atomic_trees.RECORD).exists()
    assert "(removed)" in out and f"../{users.parent.name}: holds files zarr-device did not put there" in out


# ----------------------------------------------------------------------------------------------
# Inputs that once crashed: deep trees, huge chunk grids


def _deep(root: Path, levels: int) -> Path:
    path = str(root)
    os.makedirs(path, exist_ok=True)
    for _ in range(levels):  # one level at a time (os.makedirs recurses)
        path = os.path.join(path, "d")
        os.mkdir(path)
    return Path(path)


def _remove_deep(root: Path) -> None:
    # Without recursion (shutil.rmtree recurses on older Pythons).
    for folder, dirs, names in reversed(list(_walk_iteratively(root))):
        for name in names:
            os.unlink(os.path.join(folder, name))
        os.rmdir(folder)


def _walk_iteratively(root: Path) -> list[tuple[str, list[str], list[str]]]:
    found, stack = [], [str(root)]
    while stack:
        folder = stack.pop()
        entries = list(os.scandir(folder))
        dirs = [e.name for e in entries if e.is_dir(follow_symlinks=False)]
        found.append((folder, dirs, [e.name for e in entries if e.name not in dirs]))
        stack.extend(os.path.join(folder, d) for d in dirs)
    return found


@pytest.mark.parametrize("with_node", [True, False])
def test_a_tree_1000_levels_deep_gives_a_typed_result(tmp_path: Path, capsys: Any, with_node: bool) -> None:
    root = tmp_path / "deep.zarr"
    if with_node:
        zd.create_group(root)
    bottom = _deep(root, 1000)
    planted = put(bottom / f".zarr.json.zdtmp-{DEAD}-1")
    try:
        report = check_store(root, fix=True)
        assert any(p.kind == "too-deep" for p in report.problems)
        too_deep = [p for p in report.problems if p.kind == "too-deep"][0]
        assert too_deep.path.count("/") == MAX_DEPTH
        for argv in (["fsck", str(root)], ["fsck", str(root), "--fix", "--data"]):
            status, out = run(capsys, *argv)
            assert status == 1 and "too-deep" in out and f"more than {MAX_DEPTH} levels" in out
        assert planted.exists()
    finally:
        _remove_deep(root)


def test_data_reads_the_stored_chunks_of_a_huge_grid(tmp_path: Path, capsys: Any) -> None:
    store = tmp_path / "huge.zarr"
    arr = zd.create(store, shape=(2**40,), dtype="uint8", chunks=(1,))
    arr[5:7] = 3
    arr[2**40 - 1] = 4
    started = time.monotonic()
    status, out = run(capsys, "fsck", str(store), "--data", "--quiet")
    assert status == 0, out
    assert "3 chunks read" in out
    assert time.monotonic() - started < 30
    totals: list[int] = []
    report = check_store(store, data=True, total=totals.append)
    assert totals == [3] and report.chunks_checked == 3 and report.clean


def test_data_reads_every_inner_chunk_of_stored_shards(tmp_path: Path, capsys: Any) -> None:
    store = tmp_path / "sharded.zarr"
    arr = zd.create(store, shape=(2**40,), dtype="uint8", chunks=(4,), shards=(16,),
                    compressors=[{"name": "zstd"}, {"name": "crc32c"}])
    arr[0:16] = 1
    totals: list[int] = []
    report = check_store(store, data=True, total=totals.append)
    assert totals == [4] and report.chunks_checked == 4 and report.clean
    v2 = tmp_path / "v2.zarr"
    v2_array(v2, (6, 6), (2, 2), value=7, rows=2)
    report = check_store(v2, data=True)
    assert report.chunks_checked == 3 and report.clean
    # A damaged inner chunk is found and named.
    shard = store / "c" / "0"
    data = bytearray(shard.read_bytes())
    data[3] ^= 0xFF
    shard.write_bytes(bytes(data))
    status, out = run(capsys, "fsck", str(store), "--data", "--quiet")
    assert status == 1 and "chunk" in out and "c/0" in out
