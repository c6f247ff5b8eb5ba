"""Reads onto devices torch drives itself (Apple MPS, Intel XPU, ROCm) pass through one bounded host
staging: how a selection is cut into pieces (a property test against NumPy's indexing), and reads
through torch's CPU device standing in for such a device, with a staging far smaller than the
data: the values are the CPU read's and the host memory stays within ``staging_bytes``."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zarr_device as zd
from zarr_device.io import staged_reads
from zarr_device.io.devices import DeviceSpec
from zarr_device.core.selection import normalize_selection

torch = pytest.importorskip("torch")

from conftest import random_values  # noqa: E402

STAND_IN = DeviceSpec("framework", None, "cpu")  # torch's CPU device as a device torch drives
MIB = 1 << 20


# ----------------------------------------------------------------------------------------------
# cutting a selection into pieces


Cut = tuple[tuple[int, ...], tuple[Any, ...], int, int, tuple[int, ...]]


@st.composite
def _cuts(draw: Any) -> Cut:
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 9), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.integers(1, max(1, n))) for n in shape)
    selection = []
    for extent in shape:
        if extent and draw(st.booleans()) and draw(st.booleans()):
            selection.append(draw(st.integers(0, extent - 1)))
        else:
            start = draw(st.integers(0, extent))
            stop = draw(st.integers(start, extent))
            selection.append(slice(start, stop, draw(st.integers(1, 3))))
    itemsize = draw(st.sampled_from([1, 2, 4, 8, 16]))
    most = draw(st.integers(itemsize, max(itemsize, math.prod(shape) * itemsize + 8)))
    return shape, tuple(selection), itemsize, most, chunks


@settings(max_examples=400, deadline=None)
@given(_cuts())
def test_pieces_tile_the_selection_in_c_order(case: Cut) -> None:
    """Each piece is a C-contiguous run of the result no larger than the bound (an element at
    least), the pieces follow one another from the first element to the last, and each selects
    exactly the array elements the whole selection puts there."""
    shape, selection, itemsize, most, chunks = case
    resolved = normalize_selection(selection, shape)
    index = np.arange(math.prod(shape)).reshape(shape)
    whole = index[selection].reshape(-1)
    pieces = staged_reads.cut_pieces(resolved.slices, itemsize, most, (chunks,))
    at = 0
    for slices, offset, count in pieces:
        assert offset == at and count > 0
        assert count * itemsize <= max(most, itemsize)
        taken = index[tuple(slice(s, s + st * (n - 1) + 1, st) for s, st, n in slices)].reshape(-1)
        np.testing.assert_array_equal(taken, whole[offset : offset + count])
        at += count
    assert at == whole.size


def test_rows_are_cut_at_the_chunks_edges() -> None:
    """A run of rows ends on a chunk's (or else an inner chunk's) edge, so no chunk is decoded
    for two pieces; only the last run may end elsewhere."""
    slices = normalize_selection((slice(3, 100),), (100,)).slices
    pieces = staged_reads.cut_pieces(slices, 4, 4 * 25, ((16,), (4,)))
    ends = [p[0][0][0] + p[0][0][2] for p in pieces]
    assert ends == [16, 32, 48, 64, 80, 100]  # the last run: what is left
    inner = staged_reads.cut_pieces(slices, 4, 4 * 10, ((16,), (4,)))
    assert [p[0][0][0] + p[0][0][2] for p in inner][:3] == [12, 20, 28]  # shards too large: inner chunks
    assert all(p[2] <= 10 for p in inner)


def test_pieces_pack_into_halves_in_order() -> None:
    pieces = [staged_reads.Piece(i, (), 0, n, n) for i, n in enumerate([100, 900, 30, 1000, 1, 1])]
    groups = staged_reads.pack_pieces(pieces, 1024)
    assert [[p.request for p, _ in g] for g in groups] == [[0], [1, 2], [3], [4, 5]]  # 128 + 900 passes the half
    for group in groups:
        for piece, at in group:
            assert at % 64 == 0 and at + piece.nbytes <= 1024
        positions = [at for _, at in group]
        assert positions == sorted(positions)


# ----------------------------------------------------------------------------------------------
# reads through a staging smaller than the data


@pytest.fixture
def small_staging(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """A 2 MiB staging (the least the setting takes), and the sizes of every host staging a read
    allocates."""
    import zarr_device.io.adapters.torch as torch_adapter

    sizes: list[int] = []
    real = torch_adapter.pinned_empty

    def recording(shape: tuple[int, ...], zarr_name: str) -> Any:
        tensor = real(shape, zarr_name)
        sizes.append(tensor.numel() * tensor.element_size())
        return tensor

    monkeypatch.setattr(torch_adapter, "pinned_empty", recording)
    previous = zd.set_config(staging_bytes=2 * MIB)
    try:
        yield sizes
    finally:
        zd.set_config(staging_bytes=previous.staging_bytes)


def _write(
    path: Path, shape: tuple[int, ...], chunks: tuple[int, ...], dtype: str, seed: int, **kwargs: Any
) -> tuple[Any, np.ndarray]:
    arr = zd.create(path, shape=shape, dtype=dtype, chunks=chunks, **kwargs)
    values = random_values(dtype, shape, np.random.default_rng(seed))
    arr[...] = values
    return zd.open_array(path), values


def _bytes(tensor: Any) -> bytes:
    return bytes(tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())


def test_an_array_larger_than_the_staging(tmp_path: Path, small_staging: list[int]) -> None:
    """A 7.6 MiB array through a 2 MiB staging: the values are the CPU read's, for the whole array
    and for a strided selection, and no host staging is larger than the setting."""
    arr, values = _write(tmp_path / "a.zarr", (1000, 1000), (96, 250), "float64", 1, compressors="zstd")
    whole = arr.read(device=STAND_IN, like="torch")
    assert _bytes(whole) == values.tobytes()
    sel = (slice(5, 990, 3), slice(1, None, 2))
    part = arr.read(sel, device=STAND_IN, like="torch")
    assert _bytes(part) == np.ascontiguousarray(values[sel]).tobytes()
    assert small_staging and max(small_staging) <= 2 * MIB


def test_rows_larger_than_half_the_staging(tmp_path: Path, small_staging: list[int]) -> None:
    """A row of 1.5 MiB does not fit in half the staging: each row is cut along its own
    dimension."""
    arr, values = _write(tmp_path / "a.zarr", (3, 4, 49152), (2, 3, 20000), "int64", 2)
    got = arr.read(device=STAND_IN, like="torch")
    assert _bytes(got) == values.tobytes()
    row = arr.read((1,), device=STAND_IN, like="torch")
    assert tuple(row.shape) == (4, 49152) and _bytes(row) == values[1].tobytes()
    assert max(small_staging) <= 2 * MIB


def test_many_arrays_through_one_staging(tmp_path: Path, small_staging: list[int]) -> None:
    """A state dict larger than the staging (mixed dtypes, sharded and not, selections, an empty
    one) by read_many and iter_many: each result the CPU read's, one staging of at most the
    setting a call."""
    arrays: dict[str, Any] = {}
    expected: dict[str, bytes] = {}
    dtypes = ["bfloat16", "float32", "int8", "float16", "uint64", "bool", "complex128"]
    for i in range(14):
        dtype = dtypes[i % len(dtypes)]
        shards = {"shards": (128, 64)} if i % 3 == 0 else {}
        arr, values = _write(tmp_path / f"t{i}.zarr", (256, 256 + i), (64, 32), dtype, 10 + i,
                             compressors="zstd" if i % 2 else None, **shards)
        sel = (slice(7, 200, 2), slice(None)) if i % 4 == 1 else (slice(None),)
        arrays[f"t{i}"] = (arr, sel)
        expected[f"t{i}"] = np.ascontiguousarray(values[sel]).tobytes()
    empty, _ = _write(tmp_path / "e.zarr", (0, 5), (4, 5), "float32", 0)
    arrays["empty"] = (empty, (slice(None),))
    expected["empty"] = b""
    got = zd.read_many(arrays, device=STAND_IN, like="torch")
    assert {name: _bytes(t) for name, t in got.items()} == expected
    assert len(small_staging) == 1 and small_staging[0] <= 2 * MIB
    small_staging.clear()
    seen = {}
    for name, tensor in zd.iter_many(arrays, device=STAND_IN, like="torch"):
        seen[name] = _bytes(tensor)
    assert seen == expected and list(seen)[0] == "empty"  # nothing to read: handed out first
    assert len(small_staging) == 1 and small_staging[0] <= 2 * MIB


def test_a_call_that_fits_takes_a_staging_of_its_size(tmp_path: Path, small_staging: list[int]) -> None:
    arr, values = _write(tmp_path / "a.zarr", (100, 30), (10, 30), "float32", 4)
    got = arr.read(device=STAND_IN, like="torch")
    assert _bytes(got) == values.tobytes()
    assert small_staging == [100 * 30 * 4 + 64]


def test_a_strided_out_is_filled(tmp_path: Path, small_staging: list[int]) -> None:
    """An out= that is not contiguous is filled from a contiguous tensor on its device."""
    from zarr_device.io import transfers

    arr, values = _write(tmp_path / "a.zarr", (600, 700), (64, 64), "float32", 5)
    out = torch.zeros((700, 600), dtype=torch.float32).T
    core = arr._core  # noqa: SLF001 - the package's own
    resolved = normalize_selection(Ellipsis, arr.shape)
    into = transfers.destination(core, resolved.shape, STAND_IN, "torch", out)
    transfers.fill(core, resolved.slices, into)
    assert into.complete() is out
    np.testing.assert_array_equal(out.numpy(), values)


def test_a_damaged_chunk_in_a_later_half_names_it(tmp_path: Path, small_staging: list[int]) -> None:
    arr, _ = _write(tmp_path / "a.zarr", (1024, 1024), (256, 1024), "float32", 6,
                    compressors=[{"name": "crc32c"}])
    chunk = tmp_path / "a.zarr" / "c" / "3" / "0"
    data = bytearray(chunk.read_bytes())
    data[100] ^= 1
    chunk.write_bytes(bytes(data))
    with pytest.raises(zd.ChecksumError, match="c/3/0"):
        arr.read(device=STAND_IN, like="torch")
