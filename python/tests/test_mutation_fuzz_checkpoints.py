"""Mutation fuzzing of checkpoints (python/tests/mutation_fuzz/checkpoints.py): fuzzed edits of
a saved checkpoint's files give, on ``zarr_device.torch.load``, a ZarrDeviceError or the saved
tensors; never a crash, a hang, another exception, or other values where a check could see the
change (a deleted chunk or shard file is a MissingChunkError). And checks of the oracle itself."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")

from mutation_fuzz import Delete, JsonEdit, Mutation, ReadResult, Swap, Xor, read_files  # noqa: E402
from mutation_fuzz.checkpoints import (  # noqa: E402
    KINDS,
    StoredCheckpoint,
    build_checkpoints,
    draw_case,
    judge,
    run_checkpoint_fuzz,
)

SEED = 2026052
ITERATIONS = 400  # about 20 s on an idle 2-core machine; MAX_SECONDS caps it on a busy one
MAX_SECONDS = 40.0


@pytest.mark.slow
def test_checkpoint_mutation_fuzz_rule(tmp_path: Path) -> None:
    report = run_checkpoint_fuzz(SEED, ITERATIONS, max_seconds=MAX_SECONDS, workdir=tmp_path)
    assert not report.baseline_failures, report.baseline_failures
    assert report.cases > 50, report.summary()
    assert not report.violations, report.summary() + "\n\n" + "\n\n".join(report.violations[:15])
    assert report.outcomes["typed error"] and report.outcomes["same"], report.summary()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[StoredCheckpoint]:
    return build_checkpoints(tmp_path_factory.mktemp("checkpoints"))


def _by_name(corpus: list[StoredCheckpoint], name: str) -> StoredCheckpoint:
    return next(ck for ck in corpus if ck.name == name)


def _ok(ck: StoredCheckpoint, **changed: bytes) -> ReadResult:
    value = dict(ck.tensors)
    for name, raw in changed.items():
        dtype, shape, _ = value[name]
        value[name] = (dtype, shape, raw)
    return ReadResult("ok", value=value)  # type: ignore[arg-type]


def _after(ck: StoredCheckpoint, mutation: Mutation, tmp_path: Path) -> dict[str, bytes]:
    root = tmp_path / "copy"
    shutil.copytree(ck.root, root)
    mutation.apply(root)
    return read_files(root)


def test_the_corpus_lists_its_left_out_chunks(corpus: list[StoredCheckpoint]) -> None:
    for ck in corpus:
        assert sorted(ck.left_out) == ["scalar/c", "zeros/c/0/0"], ck.name
        assert "sharded/c/0/0" in ck.chunk_keys and "zarr.json" in ck.metadata_keys


def test_the_oracle(corpus: list[StoredCheckpoint], tmp_path: Path) -> None:
    raw, checked = _by_name(corpus, "raw"), _by_name(corpus, "crc32c")
    flip = Mutation("bitflip", "small/c/0/0", "flip", (Xor("small/c/0/0", ((0, 1),)),))
    other = _ok(raw, small=b"\0" * len(raw.tensors["small"][2]))
    assert judge(raw, flip, raw.files, other).outcome == "different (allowed)"  # raw: sizes only
    assert judge(checked, flip, checked.files, _ok(checked, small=b"\0" * 280)).outcome == "violation"
    assert judge(checked, flip, checked.files, _ok(checked)).outcome == "same"
    typed = ReadResult("error", error_type="zarr_device.errors.ChecksumError", typed=True)
    assert judge(checked, flip, checked.files, typed).outcome == "typed error"
    generic = ReadResult("error", error_type="builtins.KeyError", typed=False)
    assert judge(checked, flip, checked.files, generic).outcome == "violation"
    assert judge(checked, flip, checked.files, ReadResult("crash", message="SIGSEGV")).outcome == "violation"
    # A deleted file must be a MissingChunkError, and nothing else.
    delete = Mutation("delete_chunk", "small/c/0/0", "delete", (Delete("small/c/0/0"),))
    missing = ReadResult("error", error_type="zarr_device.errors.MissingChunkError", typed=True)
    assert judge(raw, delete, raw.files, missing).outcome == "typed error"
    assert judge(raw, delete, raw.files, typed).outcome == "violation"
    assert judge(raw, delete, raw.files, _ok(raw)).outcome == "violation"
    # Whole valid files swapped: other values may load, even with checksums.
    swap = Mutation("swap_chunks", "small/c/0/0", "swap", (Swap("small/c/0/0", "bf16/c/0/0"),))
    assert judge(checked, swap, checked.files, _ok(checked, small=b"x")).outcome == "different (allowed)"


def test_the_oracle_follows_an_edited_manifest(corpus: list[StoredCheckpoint], tmp_path: Path) -> None:
    """A tied name pointed at another tensor is another valid checkpoint: its load is judged
    against what the edited manifest says, not against the original."""
    ck = _by_name(corpus, "crc32c")
    retie = Mutation("meta_value", "zarr.json", "re-tie",
                     (JsonEdit("zarr.json", ("attributes", "zarr_device_checkpoint", "tied", "tied"), "'\"bf16\"'"),))
    after = _after(ck, retie, tmp_path)
    assert json.loads(after["zarr.json"])["attributes"]["zarr_device_checkpoint"]["tied"] == {"tied": "bf16"}
    as_edited = _ok(ck)
    assert isinstance(as_edited.value, dict)
    as_edited.value["tied"] = ck.tensors["bf16"]
    assert judge(ck, retie, after, as_edited).outcome == "same"
    assert judge(ck, retie, after, _ok(ck)).outcome == "violation"  # the old tie: not what it says


def test_cases_replay_and_cover_every_kind(corpus: list[StoredCheckpoint]) -> None:
    first = [draw_case(SEED, i, corpus) for i in range(300)]
    again = [draw_case(SEED, i, corpus) for i in range(300)]
    assert [(c.checkpoint.name, c.mutation) for c in first] == [(c.checkpoint.name, c.mutation) for c in again]
    assert {c.mutation.kind for c in first} == set(KINDS)
