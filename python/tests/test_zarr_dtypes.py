"""bfloat16 and float8 in plain zarr-python (zarr_device.zarr_plugin.data_types): arrays zarr-python writes
are read bit for bit by zarr_device and tensorstore, and the reverse; fill values are written as
tensorstore writes them (NaN payloads as hex) and read as it reads them."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import EXTENSION_DTYPES, assert_bits_equal, random_values, tensorstore_read
from hypothesis import given, settings
from hypothesis import strategies as st

import zarr_device as zd
from zarr_device.basics.numpy_dtypes import float_fill_from_json, float_fill_to_json

zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")

zd.register_with_zarr()

# zarr-python compares each chunk with the fill value to skip empty ones; NaNs warn there.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered in equal:RuntimeWarning")

NAMES = list(EXTENSION_DTYPES)

# tensorstore 0.1.86 turns float8_e8m0fnu fill values from JSON into other bits than ml_dtypes
# and zarr-device do (1.0 becomes 0x3f, not 0x7f): only its array data is compared.
TENSORSTORE_FILLS = [n for n in NAMES if n != "float8_e8m0fnu"]


def _bits(values: Any) -> np.ndarray:
    a = np.asarray(values)
    return a.astype(a.dtype.newbyteorder("=")).view(f"u{a.dtype.itemsize}")


def _specials(dt: np.dtype[Any]) -> list[float | str]:
    """Fill values worth writing: finite ones, each NaN and infinity the type has, and a NaN with
    another payload (as hex)."""
    out: list[float | str] = [1.5, -0.0, "NaN"]
    if np.isinf(float(np.asarray(np.inf).astype(dt))):
        out += ["Infinity", "-Infinity"]
    canonical = int(_bits(np.asarray(np.nan).astype(dt)))
    for other in range(1 << (8 * dt.itemsize)):
        if other != canonical and math.isnan(float(np.asarray(other, f"u{dt.itemsize}").view(dt))):
            out.append(f"0x{other:0{2 * dt.itemsize}x}")
            break
    return out


def _tensorstore_create(path: Path, name: str, fill: Any, zarr_format: int = 3) -> Any:
    if zarr_format == 2:
        metadata: dict[str, Any] = {"shape": [10], "chunks": [4], "dtype": name, "fill_value": fill}
        driver = "zarr"
    else:
        grid = {"name": "regular", "configuration": {"chunk_shape": [4]}}
        metadata = {"shape": [10], "chunk_grid": grid, "data_type": name, "fill_value": fill}
        driver = "zarr3"
    spec = {"driver": driver, "kvstore": {"driver": "file", "path": str(path)}, "metadata": metadata}
    return ts.open(spec, create=True).result()


@pytest.mark.parametrize("name", NAMES)
def test_zarr_python_writes_zd_and_tensorstore_read(tmp_path: Path, name: str) -> None:
    dt = EXTENSION_DTYPES[name]
    values = random_values(dt, (37, 5), np.random.default_rng(sum(map(ord, name))))
    z = zarr.create_array(str(tmp_path / "a"), shape=values.shape, chunks=(8, 3), dtype=name)
    z[...] = values
    assert json.loads((tmp_path / "a" / "zarr.json").read_text())["data_type"] == name
    assert_bits_equal(zd.open_array(str(tmp_path / "a"))[...], values, "zarr_device")
    assert_bits_equal(tensorstore_read(tmp_path / "a"), values, "tensorstore")
    assert_bits_equal(z[...], values, "zarr-python")


@pytest.mark.parametrize("name", NAMES)
def test_zd_and_tensorstore_write_zarr_python_reads(tmp_path: Path, name: str) -> None:
    dt = EXTENSION_DTYPES[name]
    values = random_values(dt, (29, 3), np.random.default_rng(7 + len(name)))
    zd.create(str(tmp_path / "zd"), shape=values.shape, chunks=(6, 2), dtype=name, shards=(12, 2))[...] = values
    t = ts.open(
        {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": str(tmp_path / "ts")},
            "metadata": {
                "shape": list(values.shape),
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [6, 2]}},
                "data_type": name,
            },
        },
        create=True,
    ).result()
    t.write(values).result()
    for source in ("zd", "ts"):
        z = zarr.open_array(str(tmp_path / source), mode="r")
        assert z.dtype == dt
        assert_bits_equal(z[...], values, f"zarr-python reading {source}")


def test_dtype_given_as_ml_dtypes_type_and_big_endian(tmp_path: Path) -> None:
    dt = EXTENSION_DTYPES["bfloat16"]
    values = random_values(dt, (11,), np.random.default_rng(3))
    z = zarr.create_array(str(tmp_path / "a"), shape=(11,), chunks=(4,), dtype=dt)
    z[...] = values
    assert json.loads((tmp_path / "a" / "zarr.json").read_text())["data_type"] == "bfloat16"
    big = zarr.create_array(
        str(tmp_path / "b"),
        shape=(11,),
        chunks=(4,),
        dtype=dt.newbyteorder(">"),
        serializer={"name": "bytes", "configuration": {"endian": "big"}},
        compressors=None,
    )
    big[...] = values
    codecs = json.loads((tmp_path / "b" / "zarr.json").read_text())["codecs"]
    assert codecs[0]["configuration"]["endian"] == "big"
    assert (tmp_path / "b" / "c" / "0").read_bytes() == values[:4].astype(dt.newbyteorder(">")).tobytes()
    assert_bits_equal(zd.open_array(str(tmp_path / "b"))[...], values, "zarr_device, big-endian chunks")
    assert_bits_equal(tensorstore_read(tmp_path / "b"), values, "tensorstore, big-endian chunks")


@pytest.mark.parametrize("name", NAMES)
def test_fill_values_written_as_tensorstore_writes_them(tmp_path: Path, name: str) -> None:
    dt = EXTENSION_DTYPES[name]
    for i, fill in enumerate(_specials(dt)):
        z = zarr.create_array(str(tmp_path / f"z{i}"), shape=(10,), chunks=(4,), dtype=name, fill_value=fill)
        z[0:2] = np.ones(2, dtype=dt)
        written = json.loads((tmp_path / f"z{i}" / "zarr.json").read_text())["fill_value"]
        want = np.full((10,), float_fill_from_json(fill, dt), dtype=dt)
        want[0:2] = np.ones(2, dtype=dt)
        assert_bits_equal(zd.open_array(str(tmp_path / f"z{i}"))[...], want, f"zarr_device, fill {fill}")
        assert_bits_equal(np.asarray(z.fill_value, dtype=dt), want[9], f"zarr-python fill_value {fill}")
        if name in TENSORSTORE_FILLS:
            assert_bits_equal(tensorstore_read(tmp_path / f"z{i}"), want, f"tensorstore, fill {fill}")
            t = _tensorstore_create(tmp_path / f"t{i}", name, fill)
            assert t.spec().to_json()["metadata"]["fill_value"] == written, f"fill {fill}"


@pytest.mark.parametrize("name", TENSORSTORE_FILLS)
def test_fill_values_tensorstore_writes_read_by_zarr_python(tmp_path: Path, name: str) -> None:
    dt = EXTENSION_DTYPES[name]
    for i, fill in enumerate([*_specials(dt), 0.1, -3.75, 1e30]):
        t = _tensorstore_create(tmp_path / f"t{i}", name, fill)
        expected = np.asarray(t.read().result())  # fill value only: nothing was written
        z = zarr.open_array(str(tmp_path / f"t{i}"), mode="r")
        assert_bits_equal(z[...], expected, f"zarr-python, fill {fill!r}")
        assert_bits_equal(np.asarray(z.fill_value, dtype=dt), expected[0], f"zarr-python fill_value {fill!r}")
        assert_bits_equal(zd.open_array(str(tmp_path / f"t{i}"))[...], expected, f"zarr_device, fill {fill!r}")


@pytest.mark.parametrize("name", TENSORSTORE_FILLS)
def test_zarr_v2_as_tensorstore_names_it(tmp_path: Path, name: str) -> None:
    t = _tensorstore_create(tmp_path / "v2", name, "NaN", zarr_format=2)
    values = random_values(EXTENSION_DTYPES[name], (10,), np.random.default_rng(1))
    t.write(values).result()
    z = zarr.open_array(str(tmp_path / "v2"), mode="r")
    assert_bits_equal(z[...], values, "zarr-python, Zarr v2")
    assert np.isnan(float(z.fill_value))


@pytest.mark.parametrize("name", NAMES)
def test_zd_create_fill_values_match_zarr_python(tmp_path: Path, name: str) -> None:
    """zarr_device's create writes the same fill value JSON as zarr-python (one encoder)."""
    dt = EXTENSION_DTYPES[name]
    for i, fill in enumerate(_specials(dt)):
        value = float_fill_from_json(fill, dt)
        zd.create(str(tmp_path / f"d{i}"), shape=(4,), chunks=(4,), dtype=name, fill_value=value)
        zarr.create_array(str(tmp_path / f"z{i}"), shape=(4,), chunks=(4,), dtype=name, fill_value=value)
        ours, theirs = (json.loads((tmp_path / f"{p}{i}" / "zarr.json").read_text())["fill_value"] for p in "dz")
        assert ours == theirs == float_fill_to_json(value, dt)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(NAMES), bits=st.integers(min_value=0, max_value=0xFFFF))
def test_fill_value_json_round_trips_every_bit_pattern(name: str, bits: int) -> None:
    dt = EXTENSION_DTYPES[name]
    bits &= (1 << (8 * dt.itemsize)) - 1
    value = np.asarray(bits, f"u{dt.itemsize}").view(dt)[()]
    text = json.dumps(float_fill_to_json(value, dt), allow_nan=False)
    assert int(_bits(float_fill_from_json(json.loads(text), dt))) == bits


def test_bad_fill_value_is_a_format_error() -> None:
    dt = EXTENSION_DTYPES["float8_e4m3fn"]
    for bad in ("0x123", "0xzz", "nan", [1], True):
        with pytest.raises(zd.FormatError, match="float8_e4m3fn"):
            float_fill_from_json(bad, dt)


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_import_registers_only_when_zarr_is_imported(tmp_path: Path) -> None:
    zarr.create_array(str(tmp_path / "a"), shape=(3,), dtype="bfloat16", fill_value=2.5)
    path = str(tmp_path / "a")
    # zarr first: importing zarr_device registers the types.
    assert _python(f"import zarr, zarr_device; print(float(zarr.open_array({path!r})[0]))") == "2.5"
    # zarr_device alone does not import zarr (that would double its import time) ...
    assert _python("import sys, zarr_device; print('zarr' in sys.modules)") == "False"
    # ... and a program importing zarr later registers them itself.
    code = f"import zarr_device, zarr; zarr_device.register_with_zarr(); print(float(zarr.open_array({path!r})[1]))"
    assert _python(code) == "2.5"


def test_entry_points_name_every_type() -> None:
    tomllib = pytest.importorskip("tomllib")
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    points = tomllib.loads(pyproject.read_text())["project"]["entry-points"]["zarr.data_type"]
    from zarr_device.zarr_plugin import data_types

    assert set(points) == set(NAMES)
    for name, target in points.items():
        module, attr = target.split(":")
        assert module == "zarr_device.zarr_plugin.data_types"
        assert getattr(data_types, attr)._zarr_v3_name == name
