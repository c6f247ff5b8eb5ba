"""Mutation fuzzing (python/tests/mutation_fuzz/): a bounded run asserting the rule (no crash, no
hang, no exception outside zarr_device.ZarrDeviceError, no different data under a failing crc32c),
and checks of the fuzzer's own oracle and reproducers. `scripts/mutation_fuzz.py` runs it longer."""

from __future__ import annotations

import random
import shutil
import struct
from pathlib import Path

import pytest

from mutation_fuzz import (
    MISSING,
    FuzzConfig,
    Mutation,
    ReadRunner,
    Mutator,
    Splice,
    StoredArray,
    Swap,
    Xor,
    build_corpus,
    checksum_failures,
    crc32c_bytes,
    default_specs,
    exec_creation,
    read_files,
    run_fsck_cases,
    run_fuzz,
    shard_layout,
    touched_changes,
)

pytest.importorskip("zarr")

SEED = 20240611
ITERATIONS = 3000  # about 20 s on an idle 2-core machine; MAX_SECONDS caps it on a busy one
MAX_SECONDS = 35.0


@pytest.mark.slow
def test_mutation_fuzz_rule(tmp_path: Path) -> None:
    """Every mutated array reads as the same data, a ZarrDeviceError, or (where no failing
    checksum covers the change) different data; never a crash, a hang or another exception."""
    pytest.importorskip("zarr_device")
    report = run_fuzz(FuzzConfig(seed=SEED, iterations=ITERATIONS, max_seconds=MAX_SECONDS, timeout=10.0,
                                 workdir=tmp_path))
    assert report.reads > 0
    assert not report.violations, (
        f"{report.summary()}\n{report.table()}\n\n{report.format_violations(limit=15)}"
    )


# ----------------------------------------------------------------------------------------------
# The harness, the oracle and the reproducers

_FAKE_ZARR_DEVICE = """
import os, signal, time
class ZarrDeviceError(Exception):
    pass
def open_array(path):
    name = os.path.basename(path)
    if name == "hang":
        time.sleep(600)
    if name == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if name == "generic":
        raise KeyError("generic")
    raise ZarrDeviceError("typed")
"""


def test_runner_reports_hangs_and_crashes(tmp_path: Path) -> None:
    """The worker's hang and crash are reported as such (with the log), and it restarts."""
    fake = tmp_path / "fake"
    (fake / "zarr_device").mkdir(parents=True)
    (fake / "zarr_device" / "__init__.py").write_text(_FAKE_ZARR_DEVICE)
    runner = ReadRunner(tmp_path, timeout=3.0, env={"PYTHONPATH": str(fake)})
    try:
        typed = runner.read(tmp_path / "typed", Ellipsis)
        assert (typed.status, typed.typed) == ("error", True)
        generic = runner.read(tmp_path / "generic", (slice(0, 1),))
        assert (generic.status, generic.typed, generic.error_type) == ("error", False, "builtins.KeyError")
        hang = runner.read(tmp_path / "hang", Ellipsis)
        assert hang.status == "hang"
        assert "time.sleep" in hang.message or "open_array" in hang.message  # faulthandler's traceback
        crash = runner.read(tmp_path / "crash", Ellipsis)
        assert crash.status == "crash" and "SIGSEGV" in crash.message
        assert runner.read(tmp_path / "typed", Ellipsis).status == "error"
        assert runner.starts == 3
    finally:
        runner.close()



@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[StoredArray]:
    return build_corpus(tmp_path_factory.mktemp("corpus"), default_specs())


def _find(corpus: list[StoredArray], **want: object) -> StoredArray:
    for arr in corpus:
        if all(getattr(arr.spec, k) == v for k, v in want.items()):
            return arr
    raise LookupError(want)


def _mutated(arr: StoredArray, mutation: Mutation, tmp_path: Path) -> dict[str, bytes]:
    root = tmp_path / "copy"
    shutil.copytree(arr.root, root)
    mutation.apply(root)
    return read_files(root)


def test_oracle_unsharded_crc32c(corpus: list[StoredArray], tmp_path: Path) -> None:
    arr = _find(corpus, zarr_format=3, compressor="zstd", crc32c=True, shards=None)
    a, b = arr.chunk_keys[:2]
    flipped = _mutated(arr, Mutation("bitflip", a, "", (Xor(a, ((3, 1),)),)), tmp_path / "1")
    assert checksum_failures(arr, flipped, Ellipsis) == [f"chunk {a!r}"]
    swapped = _mutated(arr, Mutation("swap_chunks", a, "", (Swap(a, b),)), tmp_path / "2")
    assert checksum_failures(arr, swapped, Ellipsis) == []  # valid chunks, valid checksums
    assert set(touched_changes(arr, swapped, Ellipsis)) == {a, b}
    emptied = _mutated(arr, Mutation("empty_file", a, "", (Splice(a, 0, len(arr.files[a]), b""),)), tmp_path / "3")
    assert checksum_failures(arr, emptied, Ellipsis) == [f"chunk {a!r}"]


def test_oracle_shards(corpus: list[StoredArray], tmp_path: Path) -> None:
    # uncompressed inner chunks with crc32c: all the same size, so rotating the payload by one
    # inner chunk lands every index entry on another valid inner chunk (a limit of the format)
    arr = _find(corpus, zarr_format=3, compressor=None, crc32c=True, shards=(10,))
    key = arr.chunk_keys[0]
    data = arr.files[key]
    layout = shard_layout(arr.spec, data)
    assert layout is not None and layout.index_start > 0
    sizes = {nb for off, nb in layout.entries if off != MISSING}
    assert len(sizes) == 1
    size = sizes.pop()
    payload = data[:layout.index_start]
    for k, valid in ((size, True), (1, False)):
        rotated = payload[k:] + payload[:k]
        after = _mutated(arr, Mutation("shard_rotate_payload", key, "", (Splice(key, 0, len(payload), rotated),)),
                         tmp_path / str(k))
        assert (checksum_failures(arr, after, Ellipsis) == []) is valid
    index_flip = _mutated(arr, Mutation("shard_index_flip", key, "", (Xor(key, ((layout.index_start + 1, 4),)),)),
                          tmp_path / "index")
    assert checksum_failures(arr, index_flip, Ellipsis) == [f"shard index of {key!r}"]
    # an entry pointing past the end, its index checksum recomputed: the inner chunk cannot verify
    index = bytearray(data[layout.index_start:])
    struct.pack_into("<QQ", index, 0, len(data), 8)
    index[-4:] = crc32c_bytes(bytes(index[:-4]))
    outside = _mutated(arr, Mutation("shard_index_entry", key, "", (Splice(key, layout.index_start, len(data),
                                                                           bytes(index)),)), tmp_path / "out")
    failures = checksum_failures(arr, outside, (slice(0, 5),))
    assert len(failures) == 1 and "outside the shard" in failures[0]
    assert checksum_failures(arr, outside, (slice(5, 10),)) == []  # another inner chunk: fine


def test_reproducers_match_the_fuzzer(corpus: list[StoredArray], tmp_path: Path) -> None:
    """The creation code writes the same bytes again, and each mutation's code edits the files
    exactly as the mutation does (so the printed reproducers are faithful)."""
    for n, arr in enumerate(corpus):
        again = tmp_path / f"again-{n}"
        exec_creation(arr.spec.creation_code(), again)
        assert read_files(again) == arr.files, arr.spec.describe()
    mutator = Mutator(corpus)
    rng = random.Random(7)
    for kind in mutator.kinds:
        arrays = [a for a in corpus if kind in mutator.applicable(a)]
        for n, arr in enumerate(rng.sample(arrays, min(4, len(arrays)))):
            mutation = mutator.draw(rng, arr, kind)
            if mutation is None:
                continue
            by_fuzzer = _mutated(arr, mutation, tmp_path / f"f-{kind}-{n}")
            root = tmp_path / f"r-{kind}-{n}"
            shutil.copytree(arr.root, root)
            exec("\n".join(["import json", *mutation.code()]), {"root": root})  # noqa: S102
            assert read_files(root) == by_fuzzer, (kind, mutation.detail)


# ----------------------------------------------------------------------------------------------
# fsck --fix on mutated stores holding files with names like zarr-device's leftovers

FSCK_CASES = 24  # one child process runs them: a few seconds


def test_fsck_fix_keeps_user_files_in_mutated_stores(corpus: list[StoredArray], tmp_path: Path) -> None:
    """``zarr-device fsck --fix --data`` on mutated arrays with look-alike user files in and
    beside them: exit status 0 or 1 with a summary, no traceback, every user file kept byte for
    byte, and zarr-device's own leftovers removed wherever the metadata was left alone."""
    outcomes = run_fsck_cases(SEED, range(FSCK_CASES), corpus, tmp_path, max_seconds=MAX_SECONDS)
    assert len(outcomes) >= 8
    bad = [o for o in outcomes if o.violations]
    assert not bad, "\n\n".join(o.describe() for o in bad[:5])
    assert any(o.returncode == 1 for o in outcomes)  # the look-alikes inside the node are reported
