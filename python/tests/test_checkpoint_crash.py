"""Crash safety of checkpoint saves: a child process saves a checkpoint and is SIGKILLed at a
random moment, most often part-way through the save. Afterwards the path holds the previous
checkpoint or the whole new one (every tensor of one generation, never a mix, never a part),
or, for a first save, nothing; what the killed save left beside the path never disturbs a load
and is found and removed by ``remove_partials``.

The children are forked by a crash_helpers worker that has imported this module (so torch and
zarr_device.torch) but never run the engine, so each starts in a millisecond. A child logs
``start T`` and ``done T`` (monotonic times) around its save and then waits to be killed.
"""

from __future__ import annotations

import json
import os
import math
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import crash_helpers as ch
import zarr_device as zd
import zarr_device.torch as zt
from zarr_device.io import atomic_trees

OVERWRITE_TRIALS = 80
FIRST_SAVE_TRIALS = 20  # 100 kills in all
FIRST_GUESS_S = 0.1  # the kill window's first length (a save takes about 0.1-0.3 s here)
DONE_SHARE = 0.25  # the share of kills the window is tuned to land after the save is done


def generation_state(gen: int) -> dict[str, torch.Tensor]:
    """Generation ``gen``'s state dict (~3 MiB, one tensor sharded, one tied, several dtypes):
    every tensor differs in every generation."""
    g = torch.Generator().manual_seed(1000 + gen)
    embed = torch.randn(512, 1024, generator=g)  # 2 MiB: two chunks in a shard
    return {
        "model.embed.weight": embed,
        "model.layers.0.w": torch.randn(256, 1024, generator=g).to(torch.bfloat16),
        "model.layers.1.w": torch.randint(-(2**31), 2**31 - 1, (128, 1024), generator=g, dtype=torch.int32),
        "model.norm.weight": torch.full((1024,), float(gen)),
        "lm_head.weight": embed,  # tied
    }


def save_child(path: str, progress: str, gen: int) -> None:
    """The body of a child: saves generation ``gen`` at ``path`` (overwriting), then waits to be
    killed."""
    say = ch.progress_writer(progress)
    try:
        state = generation_state(gen)
        say(f"start {time.monotonic()}")
        zt.save(state, path, overwrite=True, progress=False, metadata={"gen": gen})
        say(f"done {time.monotonic()}")
    except BaseException as e:  # noqa: BLE001 - reported to the test through the progress file
        say(f"error {type(e).__name__}: {e}")
        raise
    time.sleep(600)


@dataclass
class Kill:
    started: float
    done: float | None  # when the save finished, None when it was killed first


def _kill_save(forker: ch.Worker, path: Path, progress: Path, gen: int, delay: float) -> Kill:
    lines = ch.fork_call_and_kill(
        forker, __name__, "save_child", {"path": str(path), "progress": str(progress), "gen": gen},
        progress, "start ", delay,
    )
    times = {line.split()[0]: float(line.split()[1]) for line in lines}
    return Kill(times["start"], times.get("done"))


def held_generation(path: Path, allowed: set[int]) -> int | None:
    """The generation the checkpoint at ``path`` holds whole (None when there is none); fails
    when it does not load, or holds anything else (a mix, a part, other values)."""
    try:
        state = zt.load(path)
    except zd.NodeNotFoundError:
        assert not path.exists() or not any(path.iterdir()), f"{path}: an unloadable directory is left"
        return None
    gen = zt.metadata(path)["gen"]
    assert gen in allowed, f"{path}: holds generation {gen}, expected one of {sorted(allowed)}"
    expected = generation_state(gen)
    assert list(state) == list(expected), f"{path}: tensor names {list(state)}"
    for name, tensor in expected.items():
        assert state[name].dtype == tensor.dtype and torch.equal(state[name], tensor), (
            f"{path}: tensor '{name}' does not hold generation {gen} (a mix or a torn save)"
        )
    assert state["lm_head.weight"] is state["model.embed.weight"], "the tie was lost"
    return int(gen)


@dataclass
class Tally:
    trials: int = 0
    mid_save: int = 0
    window: float = FIRST_GUESS_S

    def delay(self, rng: random.Random) -> float:
        return rng.uniform(0, self.window)

    def count(self, kill: Kill) -> None:
        # Saves in a fresh child take longer than in a warm process, and vary with the disk: the
        # window widens after a kill mid-save and narrows after one past the end, settling where
        # about DONE_SHARE of the kills come after the save (so both outcomes are exercised).
        self.trials += 1
        self.mid_save += kill.done is None
        self.window *= math.exp(0.3 * (DONE_SHARE - (kill.done is not None)))

    def check_mostly_mid_save(self) -> None:
        # Kills must have landed inside saves, or the test proves nothing.
        assert self.mid_save >= self.trials // 2, f"only {self.mid_save} of {self.trials} kills landed mid-save"


@pytest.fixture(scope="module")
def forker() -> Iterator[ch.Worker]:
    worker = ch.Worker().wait_ready()
    yield worker
    worker.close()


def test_killed_overwrite_leaves_old_or_new_checkpoint(tmp_path: Path, forker: ch.Worker) -> None:
    """Generation k+1 saved over generation k, killed at random: the path holds k or k+1 whole,
    k+1 once the save reported done; leftovers beside it never disturb a load, are what
    ``partials`` lists, and ``remove_partials`` removes them and nothing else."""
    rng = random.Random("checkpoint-crash-overwrite")
    tally = Tally()
    path = tmp_path / "ck.zarr"
    zt.save(generation_state(1), path, progress=False, metadata={"gen": 1})
    held = 1
    seen: set[Path] = set()
    with_leftovers = 0
    for trial in range(OVERWRITE_TRIALS):
        kill = _kill_save(forker, path, tmp_path / f"progress-{trial}", held + 1, tally.delay(rng))
        tally.count(kill)
        allowed = {held + 1} if kill.done is not None else {held, held + 1}
        now = held_generation(path, allowed)
        assert now is not None, f"trial {trial}: the checkpoint is gone"
        held = now
        left = set(zt.partials(path))
        if left - seen:
            with_leftovers += 1
        assert seen <= left, "leftovers vanished by themselves"
        seen = left
        assert all(p.name.startswith("ck.zarr.partial-") for p in left), sorted(left)
    tally.check_mostly_mid_save()
    print(f"\noverwrite: {tally.trials} kills, {tally.mid_save} mid-save, {with_leftovers} left a partial; window {tally.window:.3f} s")
    assert sorted(zt.remove_partials(path)) == sorted(seen)
    assert zt.partials(path) == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ck.zarr")) == ["ck.zarr"]
    held_generation(path, {held})
    # The path still takes a save after all that.
    zt.save(generation_state(held + 1), path, overwrite=True, progress=False, metadata={"gen": held + 1})
    held_generation(path, {held + 1})


def test_killed_first_save_leaves_no_checkpoint(tmp_path: Path, forker: ch.Worker) -> None:
    """A first save killed part-way leaves no checkpoint at the path (load: NodeNotFoundError),
    one killed after it reported done leaves the whole checkpoint, and a new save then works."""
    rng = random.Random("checkpoint-crash-first")
    tally = Tally()
    for trial in range(FIRST_SAVE_TRIALS):
        path = tmp_path / f"ck{trial}.zarr"
        kill = _kill_save(forker, path, tmp_path / f"progress-{trial}", 1, tally.delay(rng))
        tally.count(kill)
        got = held_generation(path, {1})
        if kill.done is not None:
            assert got == 1, f"trial {trial}: the save reported done but left no checkpoint"
        zt.remove_partials(path)
        assert zt.partials(path) == []
        if trial % 5 == 0:  # a save still works there (a few times: each costs a whole save)
            zt.save(generation_state(2), path, overwrite=got is not None, progress=False, metadata={"gen": 2})
            held_generation(path, {2})
    tally.check_mostly_mid_save()


def _plant(path: Path, *, file: bool = False, record: str | None = None) -> Path:
    """A tree (or file) like a killed writer's; ``record``: the role of the record that proves it
    zarr-device's (its token is the name's), as atomic_trees writes it."""
    if file:
        path.write_bytes(b"x")
    else:
        (path / "sub").mkdir(parents=True)
        (path / "sub" / "zarr.json").write_text("{")  # torn, as a killed writer leaves it
    if record is not None:
        destination, token = path.name.rsplit(".", 1)[0], path.name.rsplit("-", 1)[1]
        (path / atomic_trees.RECORD).write_text(json.dumps(
            {"zarr_device": "placement", "destination": destination, "token": token, "role": record}))
    return path


def test_remove_partials_removes_only_leftovers(tmp_path: Path) -> None:
    path = tmp_path / "ck.zarr"
    zt.save(generation_state(1), path, progress=False, metadata={"gen": 1})
    leftovers = [
        _plant(tmp_path / "ck.zarr.partial-0123abcd", record="new"),
        _plant(tmp_path / "ck.zarr.replaced-deadbeef", record="old"),
    ]
    file_partial = tmp_path / "ck.zarr.partial-89abcdef"  # a file's partial: the file in a folder
    file_partial.mkdir()
    (file_partial / "ck.zarr").write_bytes(b"x")
    (file_partial / atomic_trees.RECORD).write_text(json.dumps(
        {"zarr_device": "placement", "destination": "ck.zarr", "token": "89abcdef", "role": "file"}))
    leftovers.append(file_partial)
    # Named like leftovers but not provably zarr-device's: listed, never removed.
    unproven = [
        _plant(tmp_path / "ck.zarr.partial-00c0ffee"),  # no record (an earlier release's, or a user's)
        _plant(tmp_path / "ck.zarr.partial-0badcafe", file=True),  # a file: no record can be in it
        _plant(tmp_path / "ck.zarr.partial-feedf00d", record="new"),
    ]
    (unproven[2] / atomic_trees.RECORD).write_text(json.dumps(  # another tree's record
        {"zarr_device": "placement", "destination": "ck.zarr", "token": "0123abcd", "role": "new"}))
    others = [
        _plant(tmp_path / "ck.zarr.partial-notes"),
        _plant(tmp_path / "ck.zarr2.partial-0123abcd"),
        _plant(tmp_path / "xck.zarr.partial-0123abcd"),
        _plant(tmp_path / "ck.zarr.partial-0123abcd.bak", file=True),
        _plant(path / "inner.partial-0123abcd"),  # inside the checkpoint: not a sibling leftover
    ]
    assert zt.partials(path) == sorted(leftovers + unproven)
    assert held_generation(path, {1}) == 1  # leftovers never disturb a load
    old = time.time() - 120
    os.utime(leftovers[0], (old, old))
    os.utime(leftovers[0] / atomic_trees.RECORD, (old, old))
    assert zt.remove_partials(path, older_than_s=60) == [leftovers[0]]
    assert zt.remove_partials(str(path)) == sorted(leftovers[1:])
    assert zt.partials(path) == sorted(unproven) and zt.remove_partials(path) == []
    assert all(p.exists() for p in others + unproven) and path.is_dir()
    assert zt.partials(tmp_path / "missing-dir" / "ck.zarr") == []
