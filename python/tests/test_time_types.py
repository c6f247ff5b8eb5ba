"""NumPy's time types (datetime64, timedelta64) as zarr-python stores them: v3's
"numpy.datetime64" / "numpy.timedelta64" with a unit and a scale factor, v2's "<M8[ns]". The engine
reads and writes them as int64 counts of the array's unit; the results are NumPy arrays of the same
type, bit for bit what zarr-python reads, and zarr-python reads what zarr-device writes."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import assert_bits_equal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zarr_device as zd
from zarr_device.io.devices import cuda_device_count
from zarr_device.errors import FormatError, UsageError

zarr = pytest.importorskip("zarr")
from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec  # noqa: E402

UNITS = ["Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as"]
NAT = np.iinfo(np.int64).min


def _values(dtype: np.dtype[Any], shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Counts across int64's range, NaT and the extremes among them."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(NAT + 1, np.iinfo(np.int64).max, size=shape, endpoint=True, dtype=np.int64)
    flat = counts.reshape(-1)
    flat[: min(3, flat.size)] = [NAT, NAT + 1, np.iinfo(np.int64).max][: min(3, flat.size)]
    return counts.view(dtype)


def _zarr_python_array(path: Path, dtype: Any, shape: tuple[int, ...], chunks: tuple[int, ...], **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python: these types have no Zarr v3 specification yet
        return zarr.create_array(str(path), shape=shape, dtype=dtype, chunks=chunks, **kwargs)


def _zarr_python_read(path: Path) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(zarr.open_array(str(path))[...])


@pytest.mark.parametrize(
    ("dtype", "kwargs"),
    [
        ("datetime64[ns]", {}),
        ("datetime64[s]", {"compressors": None}),
        ("datetime64[10ms]", {"serializer": BytesCodec(endian="big"), "compressors": [ZstdCodec(level=3)]}),
        ("timedelta64[us]", {"fill_value": np.timedelta64(-7, "us")}),
        ("timedelta64[3D]", {"shards": (8, 6)}),
        ("<M8[ns]", {"zarr_format": 2}),
        (">m8[10s]", {"zarr_format": 2, "fill_value": None}),
        ("<M8[D]", {"zarr_format": 2, "order": "F"}),
    ],
)
def test_reads_what_zarr_python_wrote(tmp_path: Path, dtype: str, kwargs: dict[str, Any]) -> None:
    """Whole arrays, selections and chunks never written (the fill value) equal zarr-python's
    reads bit for bit, in NumPy's type of the array."""
    shape, chunks = (13, 11), (4, 3)
    z = _zarr_python_array(tmp_path / "a", dtype, shape, chunks, **kwargs)
    values = _values(np.dtype(dtype), shape)
    z[1:9, 2:] = values[1:9, 2:]  # the rest stays the fill value
    want = _zarr_python_read(tmp_path / "a")
    arr = zd.open_array(tmp_path / "a")
    assert arr.dtype == np.dtype(dtype).newbyteorder("=")
    assert_bits_equal(arr.read(), want, dtype)
    assert_bits_equal(arr[10:, ::2], want[10:, ::2], f"{dtype} selection")
    assert_bits_equal(zd.read_many({"t": arr})["t"], want, f"{dtype} read_many")


UNIT_STRATEGY = st.tuples(st.sampled_from(UNITS), st.sampled_from([1, 1, 2, 10, 2**31 - 1]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(["datetime64", "timedelta64"]),
    unit=UNIT_STRATEGY,
    shape=st.lists(st.integers(0, 9), min_size=1, max_size=3),
    chunk_fraction=st.floats(0.1, 1.0),
    fill=st.one_of(st.none(), st.integers(NAT, np.iinfo(np.int64).max)),
    big_endian=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_round_trips_with_zarr_python(
    tmp_path_factory: pytest.TempPathFactory,
    kind: str,
    unit: tuple[str, int],
    shape: list[int],
    chunk_fraction: float,
    fill: int | None,
    big_endian: bool,
    seed: int,
) -> None:
    """What zarr-device writes, zarr-python reads, and the reverse: the same values, the same
    data_type and fill value in zarr.json, NaT the fill value when none is given."""
    base = tmp_path_factory.mktemp("time")
    name = f"{kind}[{unit[1] if unit[1] > 1 else ''}{unit[0]}]"
    dtype = np.dtype(name).newbyteorder(">" if big_endian else "<")
    shape_t = tuple(shape)
    chunks = tuple(max(1, int(round(n * chunk_fraction))) for n in shape_t)
    values = _values(dtype, shape_t, seed)
    fill_value = None if fill is None else np.int64(fill).view(dtype.newbyteorder("="))

    ours = zd.create(base / "zd", shape=shape_t, dtype=dtype, chunks=chunks, fill_value=fill_value)
    ours[...] = values
    theirs = _zarr_python_array(
        base / "zp", dtype, shape_t, chunks, fill_value=fill_value,
        serializer=BytesCodec(endian="big" if big_endian else "little"),
    )
    theirs[...] = values

    ours_doc = json.loads((base / "zd" / "zarr.json").read_text())
    theirs_doc = json.loads((base / "zp" / "zarr.json").read_text())
    assert ours_doc["data_type"] == theirs_doc["data_type"]
    assert ours_doc["fill_value"] == theirs_doc["fill_value"] == (NAT if fill is None else fill)
    assert ours_doc["codecs"][0] == theirs_doc["codecs"][0]  # bytes, in the same byte order
    assert_bits_equal(_zarr_python_read(base / "zd"), values, "zarr-python reading zarr-device's")
    assert_bits_equal(zd.open_array(base / "zp").read(), values, "zarr-device reading zarr-python's")


def test_read_many_mixes_time_and_numeric_arrays(tmp_path: Path) -> None:
    times = zd.create(tmp_path / "t", shape=(100,), dtype="datetime64[ms]", chunks=(7,))
    t_values = (np.arange(100) * 1000).astype("datetime64[ms]")
    times[...] = t_values
    data = zd.create(tmp_path / "x", shape=(100, 3), dtype="float32", chunks=(9, 3))
    x_values = np.arange(300, dtype=np.float32).reshape(100, 3)
    data[...] = x_values
    got = zd.read_many({"time": times, "x": (data, slice(10, 20)), "late": (times, slice(90, None))})
    assert_bits_equal(got["time"], t_values)
    assert_bits_equal(got["x"], x_values[10:20])
    assert_bits_equal(got["late"], t_values[90:])


def test_frameworks_without_time_types_are_refused_by_name(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    arr = zd.create(tmp_path / "when", shape=(4,), dtype="datetime64[s]", chunks=(2,))
    with pytest.raises(UsageError, match=r"when.*datetime64\[s\].*NumPy"):
        arr.read(like="torch")
    with pytest.raises(UsageError, match=r"when.*datetime64\[s\]"):
        zd.read_many({"when": arr}, like="torch")
    out = torch.empty(4, dtype=torch.int64)
    with pytest.raises(UsageError, match=r"datetime64\[s\]"):
        arr.read(out=out)
    assert arr.read().dtype == np.dtype("datetime64[s]")  # NumPy, on the host, as asked


@pytest.mark.parametrize(
    "data_type",
    [
        {"name": "numpy.datetime64", "configuration": {"unit": "sec", "scale_factor": 1}},
        {"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 0}},
        {"name": "numpy.timedelta64", "configuration": {"unit": "s"}},
        "numpy.datetime64",
    ],
)
def test_bad_time_types_name_the_array(tmp_path: Path, data_type: Any) -> None:
    good = zd.create(tmp_path / "bad", shape=(4,), dtype="datetime64[s]", chunks=(2,))
    del good
    doc = json.loads((tmp_path / "bad" / "zarr.json").read_text())
    doc["data_type"] = data_type
    (tmp_path / "bad" / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(FormatError, match=r"bad.*data type"):
        zd.open_array(tmp_path / "bad")


def test_fill_values_of_time_types(tmp_path: Path) -> None:
    """NaT by default (zarr-python's default), or the given value in the array's unit; "NaT" in
    zarr.json reads as NaT too."""
    nat = zd.create(tmp_path / "nat", shape=(3,), dtype="timedelta64[h]", chunks=(2,))
    assert np.isnat(nat.read()).all()
    five = zd.create(tmp_path / "five", shape=(3,), dtype="timedelta64[h]", chunks=(2,), fill_value=np.timedelta64(5, "h"))
    assert_bits_equal(five.read(), np.full(3, 5, dtype="timedelta64[h]"))
    doc = json.loads((tmp_path / "five" / "zarr.json").read_text())
    doc["fill_value"] = "NaT"
    (tmp_path / "five" / "zarr.json").write_text(json.dumps(doc))
    assert np.isnat(zd.open_array(tmp_path / "five").read()).all()


@pytest.mark.filterwarnings("error::zarr_device.zarr_plugin.pipeline.FallbackWarning")
@pytest.mark.parametrize("zarr_format", [3, 2])
def test_zarr_python_plug_in_serves_time_types(tmp_path: Path, zarr_format: int) -> None:
    """Under ``zarr_device.enable()`` the engine reads and writes time arrays for zarr-python (no
    fallback), and both sides see what plain zarr-python writes and reads."""
    values = _values(np.dtype("datetime64[ms]"), (30, 7), seed=3)
    plain = _zarr_python_array(tmp_path / "plain", values.dtype, values.shape, (8, 4), zarr_format=zarr_format)
    plain[2:] = values[2:]
    with zd.enable(device="cpu"):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*does not have a Zarr V3 specification.*")
            served = np.asarray(zarr.open_array(str(tmp_path / "plain"))[...])
            if zarr_format == 3:  # the engine writes v3 arrays (v2 writes are zarr-python's)
                written = zarr.create_array(str(tmp_path / "served"), shape=values.shape, dtype=values.dtype, chunks=(8, 4))
                written[2:] = values[2:]
    assert_bits_equal(served, _zarr_python_read(tmp_path / "plain"), "read through the plug-in")
    if zarr_format == 3:
        assert_bits_equal(_zarr_python_read(tmp_path / "served"), _zarr_python_read(tmp_path / "plain"), "written")


def test_convert_keeps_time_types(tmp_path: Path) -> None:
    """``zd.convert`` (and ``zarr-device convert``) rewrites a group holding a time array, written
    by zarr-python in Zarr v2, as Zarr v3 with crc32c: the same type, fill value and values."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group = zarr.open_group(str(tmp_path / "src"), mode="w", zarr_format=2)
        when = group.create_array("when", shape=(50,), dtype="<M8[s]", chunks=(16,))
        when[:40] = _values(np.dtype("datetime64[s]"), (40,), seed=5)
        group.create_array("x", shape=(50,), dtype="float32", chunks=(16,))[:] = np.arange(50, dtype=np.float32)
    zd.convert(tmp_path / "src", tmp_path / "dst", compressors="zstd", checksum=True, progress=False)
    doc = json.loads((tmp_path / "dst" / "when" / "zarr.json").read_text())
    assert doc["data_type"] == {"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 1}}
    assert doc["fill_value"] == NAT
    assert_bits_equal(_zarr_python_read(tmp_path / "dst" / "when"), _zarr_python_read(tmp_path / "src" / "when"))
    assert_bits_equal(zd.open_array(tmp_path / "dst" / "when").read(), _zarr_python_read(tmp_path / "src" / "when"))


@pytest.mark.gpu
@pytest.mark.skipif(cuda_device_count() == 0, reason="no CUDA device visible to zarr_device (or a build without CUDA)")
def test_reads_onto_a_gpu_are_refused_by_name(tmp_path: Path) -> None:
    """No GPU framework has time types: a read onto a CUDA device, into whatever, is refused
    before anything is allocated or read, naming the array and its type."""
    arr = zd.create(tmp_path / "when", shape=(4,), dtype="timedelta64[ns]", chunks=(2,))
    for like in (None, "torch"):
        with pytest.raises(UsageError, match=r"when.*timedelta64\[ns\]"):
            arr.read(device="cuda:0", like=like)
    with pytest.raises(UsageError, match=r"when.*timedelta64\[ns\]"):
        zd.read_many({"when": arr}, device="cuda:0")


@pytest.mark.parametrize("dtype", [str, "S4", "U3", [("a", "i4"), ("b", "f8")]])
def test_types_not_read_say_which_are(tmp_path: Path, dtype: Any) -> None:
    """zarr-python's strings, fixed-length bytes and structured types are not read: the error
    names the array, its type and what to read it with."""
    _zarr_python_array(tmp_path / "other", dtype, (4,), (2,))
    with pytest.raises(FormatError, match=r"other.*unsupported data type.*datetime64.*zarr-python"):
        zd.open_array(tmp_path / "other")
