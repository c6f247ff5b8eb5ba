"""Mutation fuzzing of stored Zarr data read by zarr_device.

Arrays are written with zarr-python (Zarr v3 and v2; integer, float, bool and complex types;
zstd, gzip, blosc, zlib, lz4 or no compressor; with and without crc32c; sharded with the index at
either end, with and without its checksum; C and F order). Each case copies one array, applies one
random mutation to its stored bytes (a chunk, a shard, a shard's index or a metadata document) and
reads the copy with zarr_device in a worker process, whose crash or hang is caught and attributed
to the read that caused it. Every read gets one outcome:

- ``same data``: the read equals the original values;
- ``typed error``: an instance of ``zarr_device.ZarrDeviceError`` (the class is recorded);
- ``different data``: it succeeded with other values;
- ``different data (metadata changed)``: likewise, after a metadata mutation (a valid new array);
- ``generic exception``: any other exception (type, place and message recorded);
- ``crash``: the worker process died; ``hang``: the read outlived the timeout.

The rule (:func:`violation_reason`): no crash, hang or generic exception; and a read that
succeeds with different data must not involve a chunk whose crc32c check fails (a chunk ending in
a crc32c that does not match, a shard index whose checksum does not match, an inner chunk of a
shard, as the shard's index locates it, whose checksum does not match or that lies outside the
shard). What counts is the checksum as it stands after the mutation, not the kind of mutation: a
whole chunk replaced by another valid chunk, two chunks swapped, a chunk deleted (a missing chunk
is valid), or a shard's payload moved so that its index lands on other valid inner chunks carries
valid checksums and may read as different data. A successful read is also a violation when it
differs although no chunk it covers changed.

Every case is derived from ``(seed, iteration)`` alone, so :func:`run_fuzz` with
``first_iteration=i, iterations=1`` replays it, and every violation comes with a self-contained
reproducer script (the zarr-python code that wrote the array, the mutation as file edits, the read).

The stages, one module each (every name is re-exported here):

- ``arrays``: the corpus (:class:`ArraySpec`, :func:`default_specs`, :class:`StoredArray`,
  :func:`build_corpus`) and the layout of a stored shard;
- ``edits``: the file edits (:class:`Xor`, :class:`Splice`, ..., :class:`JsonEdit`) and :class:`Mutation`;
- ``mutations``: :class:`Mutator`, which draws a mutation of each kind;
- ``cases``: the selections a case reads, :class:`Case` and :func:`draw_case`;
- ``runner``: the read worker process (:class:`ReadRunner`, :class:`ReadResult`);
- ``judging``: the checksum oracle, the outcomes, :func:`classify` and :func:`violation_reason`;
- ``report``: :class:`FuzzReport`, violation groups and their reproducers;
- ``fuzz``: :class:`FuzzConfig` and :func:`run_fuzz`, the loop;
- ``fsck_cases``: ``zarr-device fsck --fix`` over mutated stores holding user files with names
  like zarr-device's leftovers (:func:`run_fsck_cases`): it must keep every one of them.
"""

from __future__ import annotations

from .arrays import (
    ArraySpec,
    METADATA_KEYS,
    MISSING,
    ShardLayout,
    StoredArray,
    build_corpus,
    crc32c_bytes,
    default_specs,
    exec_creation,
    read_files,
    shard_layout,
)
from .edits import (
    CopyFile,
    CreateFile,
    Delete,
    JsonEdit,
    MakeDirectory,
    Mutation,
    Op,
    PLACEHOLDER,
    Reencode,
    Splice,
    Swap,
    WriteFile,
    Xor,
)
from .mutations import (
    Mutator,
)
from .cases import (
    Case,
    Selection,
    chunk_selection,
    draw_case,
    format_selection,
    random_selection,
)
from .judging import (
    CRASH,
    DIFFERENT,
    DIFFERENT_META,
    GENERIC,
    HANG,
    OUTCOMES,
    Outcome,
    SAME,
    TYPED,
    bits_equal,
    checksum_failures,
    classify,
    native,
    touched_changes,
    violation_reason,
)
from .runner import (
    MAX_READ_BYTES,
    ReadResult,
    ReadRunner,
)
from .report import (
    FuzzReport,
    REPRO_PATH,
    ViolationGroup,
    reproducer,
    run_reproducer,
)
from .fuzz import (
    FuzzConfig,
    run_fuzz,
)
from .fsck_cases import (
    FsckCase,
    FsckOutcome,
    run_fsck_cases,
)

__all__ = [
    "ArraySpec",
    "CRASH",
    "Case",
    "CopyFile",
    "CreateFile",
    "DIFFERENT",
    "DIFFERENT_META",
    "Delete",
    "FsckCase",
    "FsckOutcome",
    "FuzzConfig",
    "FuzzReport",
    "GENERIC",
    "HANG",
    "JsonEdit",
    "MAX_READ_BYTES",
    "METADATA_KEYS",
    "MISSING",
    "MakeDirectory",
    "Mutation",
    "Mutator",
    "OUTCOMES",
    "Op",
    "Outcome",
    "PLACEHOLDER",
    "REPRO_PATH",
    "ReadResult",
    "ReadRunner",
    "Reencode",
    "SAME",
    "Selection",
    "ShardLayout",
    "Splice",
    "StoredArray",
    "Swap",
    "TYPED",
    "ViolationGroup",
    "WriteFile",
    "Xor",
    "bits_equal",
    "build_corpus",
    "checksum_failures",
    "chunk_selection",
    "classify",
    "crc32c_bytes",
    "default_specs",
    "draw_case",
    "exec_creation",
    "format_selection",
    "native",
    "random_selection",
    "read_files",
    "reproducer",
    "run_fsck_cases",
    "run_fuzz",
    "run_reproducer",
    "shard_layout",
    "touched_changes",
    "violation_reason",
]
