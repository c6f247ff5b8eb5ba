"""Judging a read: the outcomes, the checksum oracle (which crc32c checks a read must make that
fail on the mutated files, and which files it covers that changed), the classification of a read
and the rule it must keep (:func:`violation_reason`)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .arrays import MISSING, StoredArray, crc32c_bytes, shard_layout
from .cases import Selection, _axis_indices
from .edits import Mutation
from .runner import ReadResult


# ----------------------------------------------------------------------------------------------
# Outcomes

SAME = "same data"
TYPED = "typed error"
DIFFERENT = "different data"
DIFFERENT_META = "different data (metadata changed)"
GENERIC = "generic exception"
CRASH = "crash"
HANG = "hang"
OUTCOMES = (SAME, TYPED, DIFFERENT, DIFFERENT_META, GENERIC, CRASH, HANG)


# ----------------------------------------------------------------------------------------------
# The checksum oracle


def _crc_ok(data: bytes) -> bool:
    """Whether ``data`` ends in the crc32c of the bytes before it (the crc32c codec's framing)."""
    return len(data) >= 4 and crc32c_bytes(data[:-4]) == data[-4:]


def checksum_failures(arr: StoredArray, after: Mapping[str, bytes], selection: Selection) -> list[str]:
    """The crc32c checks a read of ``selection`` must make that fail on the mutated files
    ``after``: one entry per failing check (a chunk, a shard index, an inner chunk)."""
    spec = arr.spec
    if not spec.has_checksums:
        return []
    axes = _axis_indices(selection, spec.shape)
    failures: list[str] = []
    storage_sets = [sorted({i // s for i in ax}) for ax, s in zip(axes, spec.storage_shape)]
    inner_sets = [sorted({i // c for i in ax}) for ax, c in zip(axes, spec.chunks)]
    for storage_index in itertools.product(*storage_sets):
        key = spec.chunk_key(storage_index)
        new = after.get(key)
        if new is None or new == arr.files.get(key):
            continue  # missing (valid: the fill value) or unchanged
        if spec.shards is None:
            if spec.crc32c and not _crc_ok(new):
                failures.append(f"chunk {key!r}")
            continue
        layout = shard_layout(spec, new)
        if layout is None:
            if spec.index_crc32c:
                failures.append(f"shard {key!r} shorter than its index")
            continue
        if spec.index_crc32c and not _crc_ok(new[layout.index_start:layout.index_end]):
            failures.append(f"shard index of {key!r}")
            continue
        if not spec.crc32c:
            continue
        per = spec.inner_per_shard
        local_sets = [[i - si * p for i in s if si * p <= i < (si + 1) * p]
                      for s, si, p in zip(inner_sets, storage_index, per)]
        for local in itertools.product(*local_sets):
            j = int(np.ravel_multi_index(local, per)) if per else 0
            off, nb = layout.entries[j]
            if off == MISSING or nb == MISSING:
                continue  # missing, or a half-missing entry: not a checksum matter
            if nb < 4 or off + nb > len(new):
                failures.append(f"inner chunk {local} of {key!r} at [{off}:{off + nb}] outside the shard")
            elif not _crc_ok(new[off:off + nb]):
                failures.append(f"inner chunk {local} of {key!r}")
    return failures


def touched_changes(arr: StoredArray, after: Mapping[str, bytes], selection: Selection) -> list[str]:
    """The stored files a read of ``selection`` covers that the mutation changed or deleted."""
    spec = arr.spec
    axes = _axis_indices(selection, spec.shape)
    sets = [sorted({i // s for i in ax}) for ax, s in zip(axes, spec.storage_shape)]
    keys = (spec.chunk_key(index) for index in itertools.product(*sets))
    return [k for k in keys if after.get(k) != arr.files.get(k)]


# ----------------------------------------------------------------------------------------------
# Classification


def native(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy in native byte order."""
    if a.dtype.byteorder not in "=|":
        a = a.astype(a.dtype.newbyteorder("="))
    return np.array(a, order="C")


def bits_equal(actual: np.ndarray, expected: np.ndarray) -> bool:
    """Same shape, same type, same bytes (NaN payloads count)."""
    a, e = native(actual), native(expected)
    return a.shape == e.shape and a.dtype == e.dtype and a.tobytes() == e.tobytes()


@dataclass(frozen=True)
class Outcome:
    """One read's classification."""

    outcome: str
    detail: str = ""  # error class / exception text / checksum failures
    violation: str = ""  # why it breaks the rule ("" when it does not)
    unverified: bool = False  # same data although a checksum the read covers fails


def violation_reason(outcome: str, checksum_failed: Sequence[str], changed: Sequence[str]) -> str:
    """Why a read outcome breaks the rule, or "" (see the package docstring)."""
    if outcome in (GENERIC, CRASH, HANG):
        return outcome
    if outcome == DIFFERENT and checksum_failed:
        return "different data although a crc32c check fails: " + "; ".join(checksum_failed)
    if outcome == DIFFERENT and not changed:
        return "different data although no file the read covers changed"
    return ""


def classify(arr: StoredArray, mutation: Mutation, after: Mapping[str, bytes], selection: Selection,
             result: ReadResult) -> Outcome:
    """The outcome of one read of the mutated copy."""
    if result.status in ("crash", "hang"):
        return Outcome(CRASH if result.status == "crash" else HANG, result.message,
                       violation_reason(CRASH if result.status == "crash" else HANG, [], []))
    if result.status == "error":
        if result.typed:
            return Outcome(TYPED, result.error_type.rsplit(".", 1)[-1])
        text = f"{result.error_type}: {result.message} (at {result.where})"
        return Outcome(GENERIC, text, violation_reason(GENERIC, [], []))
    assert result.value is not None
    expected = np.asarray(arr.values[selection])
    failed = [] if mutation.is_metadata else checksum_failures(arr, after, selection)
    if not result.shrunk and bits_equal(result.value, expected):
        return Outcome(SAME, unverified=bool(failed))
    if mutation.is_metadata:
        return Outcome(DIFFERENT_META)
    changed = touched_changes(arr, after, selection)
    return Outcome(DIFFERENT, "; ".join(failed), violation_reason(DIFFERENT, failed, changed))
