"""Conformance against the checked-in golden fixtures (written by zarr-python and tensorstore).

Every case is opened with zarr_device, read whole and through a set of basic selections, and must
equal the expected values bit for bit (NaN payloads and -0.0 included)."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import (
    GOLDEN_ARRAY_CASES,
    GOLDEN_DIR,
    MANIFEST,
    assert_bits_equal,
    basic_selections,
    fill_from_json,
    golden_expected,
    golden_store,
    iter_chunk_files,
    numpy_dtype,
    selection_id,
    zd_supported_dtypes,
)

zd = pytest.importorskip("zarr_device")

pytestmark = pytest.mark.golden


def _open(case: dict[str, Any]) -> Any:
    if case["dtype"] not in zd_supported_dtypes():
        pytest.skip(f"{case['dtype']} is not in zarr_device.ZARR_DTYPE_NAMES (see test_golden_unsupported_dtype)")
    return zd.open_array(str(golden_store(case)), path=case["path"])


_UNSUPPORTED: list[dict[str, Any] | None] = [c for c in GOLDEN_ARRAY_CASES if c["dtype"] not in zd_supported_dtypes()]


@pytest.mark.parametrize(
    "case", _UNSUPPORTED or [None], ids=[c["name"] for c in _UNSUPPORTED if c is not None] or ["none"]
)
def test_golden_unsupported_dtype(case: dict[str, Any] | None) -> None:
    """A type zarr_device does not list as supported is refused with a FormatError naming it."""
    if case is None:
        pytest.skip("zarr_device supports every data type of the golden cases")
    with pytest.raises(zd.FormatError) as info:
        zd.open_array(str(golden_store(case)), path=case["path"])[...]
    assert case["dtype"] in str(info.value)


def test_manifest_is_complete() -> None:
    """The fixtures exist and cover what they claim to (guards against a half-regenerated tree)."""
    cases = MANIFEST["cases"]
    assert len(cases) > 100
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names))
    for case in cases:
        assert (GOLDEN_DIR / case["store"]).is_dir(), case["name"]
        if case["kind"] == "array":
            assert (GOLDEN_DIR / case["expected"]).is_file(), case["name"]
    writers = {(c["writer"], c["zarr_format"]) for c in cases}
    assert writers == {("zarr-python", 3), ("zarr-python", 2), ("tensorstore", 3)}
    # tensorstore spells the extension types exactly as zarr_device expects to read them
    assert MANIFEST["tensorstore_dtype_names"]["bfloat16"] == "bfloat16"
    assert MANIFEST["tensorstore_dtype_names"]["float8_e4m3fn"] == "float8_e4m3fn"
    # every case with missing chunks really has them missing
    assert sum(len(c.get("missing_chunks", [])) for c in cases) > 100


def test_golden_array_metadata(golden_array_case: dict[str, Any]) -> None:
    case = golden_array_case
    arr = _open(case)
    shape = tuple(case["shape"])
    dtype = numpy_dtype(case["dtype"])
    assert isinstance(arr, zd.Array)
    assert arr.shape == shape
    assert arr.ndim == len(shape)
    assert arr.size == math.prod(shape)
    assert arr.nbytes == math.prod(shape) * dtype.itemsize
    assert arr.dtype.newbyteorder("=") == dtype
    assert arr.zarr_format == case["zarr_format"]
    assert tuple(arr.chunks) == tuple(case["chunks"])
    if case.get("shards") is None:
        assert arr.shards is None
    else:
        assert tuple(arr.shards) == tuple(case["shards"])
    assert dict(arr.attrs) == case["attributes"]
    if case["zarr_format"] == 3:
        assert arr.metadata["data_type"] == case["dtype"] or arr.metadata["data_type"] == case.get("ts_data_type")
        assert [c["name"] for c in arr.codecs] == [c["name"] for c in case["codecs"]]


def test_golden_fill_value(golden_array_case: dict[str, Any]) -> None:
    case = golden_array_case
    if case.get("fill_value") is None:
        pytest.skip("fill_value null (v2): no fill value to compare")
    arr = _open(case)
    dtype = numpy_dtype(case["dtype"])
    if case["dtype"] == "float8_e8m0fnu" and case["fill_value"] == 0.0:
        # The type has no zero; tensorstore stores 0.0 as the smallest value, bits 0x00 (2**-127),
        # where ml_dtypes would convert it to NaN.
        assert np.asarray(arr.fill_value, dtype=np.float64) == 2.0**-127
        return
    want = fill_from_json(case["fill_value"], dtype)
    raw = arr.fill_value
    if isinstance(raw, (str, list)):  # the JSON form, as in the metadata
        got = fill_from_json(raw, dtype)
    else:
        got = np.asarray(raw).astype(dtype)
    if dtype.kind in "fc" or case["dtype"] in ("bfloat16",) or case["dtype"].startswith("float8"):
        # NaN compares by being NaN; everything else exactly (and -0.0 by its sign bit)
        w = want.astype(np.complex128) if dtype.kind == "c" else want.astype(np.float64)
        g = got.astype(np.complex128) if dtype.kind == "c" else got.astype(np.float64)
        for part_w, part_g in ((w.real, g.real), (w.imag, g.imag)):
            if np.isnan(part_w):
                assert np.isnan(part_g), (got, want)
            else:
                assert part_g == part_w and np.signbit(part_g) == np.signbit(part_w), (got, want)
    else:
        assert got == want, (got, want)


def test_golden_read_whole(golden_array_case: dict[str, Any]) -> None:
    case = golden_array_case
    arr = _open(case)
    expected = golden_expected(case)
    assert_bits_equal(arr[...], expected, f"{case['name']} [...]")
    assert_bits_equal(arr.read(), expected, f"{case['name']} read()")


def test_golden_read_into_out(golden_array_case: dict[str, Any]) -> None:
    case = golden_array_case
    arr = _open(case)
    expected = golden_expected(case)
    out = np.empty(expected.shape, dtype=arr.dtype)
    out.reshape(-1).view(np.uint8)[...] = 0xA5  # poison: every byte must be overwritten
    result = arr.read(..., out=out)
    assert_bits_equal(out, expected, f"{case['name']} read(out=)")
    if result is not None:
        assert_bits_equal(result, expected, f"{case['name']} read(out=) result")


def test_golden_read_selections(golden_array_case: dict[str, Any]) -> None:
    case = golden_array_case
    arr = _open(case)
    expected = golden_expected(case)
    for sel in basic_selections(expected.shape):
        want = expected[sel]
        got = arr[sel]
        assert_bits_equal(np.asarray(got), np.asarray(want), f"{case['name']} [{selection_id(sel)}]")
        assert_bits_equal(np.asarray(arr.read(sel)), np.asarray(want), f"{case['name']} read({selection_id(sel)})")


def test_golden_missing_chunks_are_fill(golden_array_case: dict[str, Any]) -> None:
    """The manifest's missing chunks really are absent, and read as the fill value."""
    case = golden_array_case
    store = golden_store(case) / case["path"]
    for key in case.get("missing_chunks", []):
        assert not (store / key).exists(), key
    if case["zarr_format"] == 3 and case.get("shards") is None and case.get("missing_chunks") and case["shape"]:
        arr = _open(case)
        chunks = case["chunks"]
        sep = "/" if case["chunk_key_encoding"]["name"] == "default" else "."
        sep = case["chunk_key_encoding"].get("configuration", {}).get("separator", sep)
        key = case["missing_chunks"][0]
        parts = key[2:].split(sep) if case["chunk_key_encoding"]["name"] == "default" else key.split(sep)
        idx = [int(p) for p in parts]
        sel = tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(idx, chunks, case["shape"]))
        got = np.asarray(arr[sel])
        if case["dtype"] != "float8_e8m0fnu":  # has no 0; tensorstore's fill 0.0 means bits 0x00
            want = np.empty(got.shape, dtype=numpy_dtype(case["dtype"]))
            want[...] = fill_from_json(case["fill_value"], want.dtype)
            assert_bits_equal(got, want, f"{case['name']} missing chunk {key}")
        assert_bits_equal(got, golden_expected(case)[sel], f"{case['name']} missing chunk {key}")


@pytest.mark.parametrize("store_kind", ["str", "pathlib", "LocalStore"])
def test_golden_store_kinds(store_kind: str) -> None:
    case = next(c for c in GOLDEN_ARRAY_CASES if c["name"] == "zarr-python/v3_shard_end_zstd_crc32c_int16")
    root: Any = golden_store(case)
    if store_kind == "str":
        root = str(root)
    elif store_kind == "LocalStore":
        root = zd.LocalStore(str(root))
    arr = zd.open(root, path=case["path"])
    assert isinstance(arr, zd.Array)
    assert_bits_equal(arr[...], golden_expected(case), store_kind)


def test_golden_nested_array_opened_directly() -> None:
    """An array inside a group is also a store root of its own."""
    case = next(c for c in GOLDEN_ARRAY_CASES if c["path"] == "sub/b")
    via_group = zd.open_array(str(golden_store(case)), path="sub/b")
    direct = zd.open_array(str(golden_store(case) / "sub" / "b"))
    assert_bits_equal(via_group[...], golden_expected(case), "via group path")
    assert_bits_equal(direct[...], golden_expected(case), "direct")
    assert via_group.path.strip("/").endswith("sub/b")


def test_golden_group(golden_group_case: dict[str, Any]) -> None:
    case = golden_group_case
    root = str(golden_store(case))
    g = zd.open(root, path=case["path"])
    assert isinstance(g, zd.Group)
    g2 = zd.open_group(root, path=case["path"])
    assert dict(g.attrs) == case["attributes"] == dict(g2.attrs)
    assert sorted(g.keys()) == sorted(case["members"])
    members = g.members()
    assert sorted(members) == sorted(case["members"])
    for name, kind in case["members"].items():
        assert name in g
        node = g[name]
        want_type = zd.Group if kind == "group" else zd.Array
        assert isinstance(node, want_type), (name, type(node))
        assert isinstance(members[name], want_type)
        if kind == "array":
            member_path = f"{case['path']}/{name}".strip("/")
            array_case = next(c for c in GOLDEN_ARRAY_CASES if c["store"] == case["store"] and c["path"] == member_path)
            assert_bits_equal(node[...], golden_expected(array_case), f"{case['name']}/{name}")
            assert dict(node.attrs) == array_case["attributes"]
    assert "no_such_member" not in g
    with pytest.raises(KeyError):
        g["no_such_member"]


def test_golden_group_is_not_an_array() -> None:
    case = next(c for c in MANIFEST["cases"] if c["kind"] == "group" and c["path"] == "")
    with pytest.raises(zd.ZarrDeviceError):
        zd.open_array(str(golden_store(case)))
    array_case = next(c for c in GOLDEN_ARRAY_CASES if c["store"] == case["store"])
    with pytest.raises(zd.ZarrDeviceError):
        zd.open_group(str(golden_store(array_case)), path=array_case["path"])


def test_golden_read_only(tmp_path: Path) -> None:
    """Arrays opened in mode 'r' (the default) refuse writes and leave the files untouched."""
    case = next(c for c in GOLDEN_ARRAY_CASES if c["name"] == "zarr-python/v3_dtype_float32")
    store = golden_store(case)
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in iter_chunk_files(store)}
    arr = _open(case)
    with pytest.raises(zd.UsageError):
        arr[0, 0] = 1.0
    with pytest.raises(zd.UsageError):
        arr.write((slice(None), 0), np.zeros(case["shape"][0], dtype=np.float32))
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in iter_chunk_files(store)}
    assert before == after


@pytest.mark.parametrize(
    "name",
    [
        "zarr-python/v3_dtype_int32",
        "zarr-python/v3_shard_start_zstd_crc32c_int16",
        "zarr-python/v2_order_F_int16_3d",
        "tensorstore/ts_bfloat16_shard",
    ],
)
def test_golden_every_single_element(name: str) -> None:
    """Element by element through integer indexing (each element is a different chunk offset)."""
    case = next(c for c in GOLDEN_ARRAY_CASES if c["name"] == name)
    arr = _open(case)
    expected = golden_expected(case)
    for idx in np.ndindex(*expected.shape):
        assert_bits_equal(np.asarray(arr[idx]), np.asarray(expected[idx]), f"{name} {idx}")
        neg = tuple(i - n for i, n in zip(idx, expected.shape))
        assert_bits_equal(np.asarray(arr[neg]), np.asarray(expected[idx]), f"{name} {neg}")
