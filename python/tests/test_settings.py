"""The settings have one home, the engine's table: Python's defaults, ranges and documentation come
from it, the environment is read by the engine with the one size parser (zarr_device.basics.sizes calls it), and
set_config changes what the engine's calls start from."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import typing
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zarr_device as zd
from zarr_device import _core
from zarr_device.basics.config import IoConfig
from zarr_device.basics.sizes import parse_size

TABLE = {row["name"]: row for row in _core.settings_table()}
SIZE_MAX = TABLE["max_inflight_bytes"]["maximum"]


def _clean_environment(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARR_DEVICE_") or k.endswith("_LIBRARY")}
    return {**env, **variables}


def _config_in_child(**variables: str) -> subprocess.CompletedProcess[str]:
    code = "import dataclasses, json, zarr_device as zd; print(json.dumps(dataclasses.asdict(zd.get_config())))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_clean_environment(**variables), timeout=60)


def test_python_takes_its_defaults_and_documentation_from_the_engine() -> None:
    defaults = dataclasses.asdict(IoConfig())
    assert defaults == {name: row["default"] for name, row in TABLE.items()}
    assert defaults == {"threads": 0, "max_inflight_bytes": 256 << 20, "gpu_decode": "checked",
                        "staging_bytes": 768 << 20, "decode_bytes": 0, "decoder_bytes": 0, "staging_slots": 12,
                        "gpu_encode": "auto", "decode_sharing": "auto", "zstd_block_bytes": 16 << 10}
    hints = typing.get_type_hints(IoConfig)
    for name, row in TABLE.items():
        assert row["variable"] == "ZARR_DEVICE_" + name.upper()
        assert row["variable"] in (IoConfig.__doc__ or "") and row["doc"] in (IoConfig.__doc__ or "")
        if row["kind"] == "choice":  # the Literal types written for type checkers agree
            assert list(typing.get_args(hints[name])) == row["choices"]


def test_every_variable_the_package_reads_is_in_the_table() -> None:
    # The settings' own variables and those read from the environment alone: no other
    # ZARR_DEVICE_ name is read by the engine or the package (tests and fuzzers have their own).
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    listed = {row["variable"] for row in TABLE.values()}
    listed |= {row["variable"] for row in _core.environment_variables()}
    assert all(row["doc"] for row in _core.environment_variables())
    found: set[str] = set()
    for folder in ("cpp/src", "cpp/cuda", "cpp/include", "python/src", "python/zarr_device"):
        for directory, _, files in os.walk(os.path.join(root, folder)):
            for name in files:
                if name.endswith((".cpp", ".hpp", ".cu", ".py")):
                    with open(os.path.join(directory, name), encoding="utf-8") as source:
                        found |= set(re.findall(r"[\"'](ZARR_DEVICE_[A-Z0-9_]+)[\"']", source.read()))
    assert found, "no source was read"
    assert found - listed == set(), "read but not in the settings table"


def test_without_variables_the_settings_are_the_defaults() -> None:
    child = _config_in_child()
    assert child.returncode == 0, child.stderr
    import json

    assert json.loads(child.stdout) == dataclasses.asdict(IoConfig())


def test_the_environment_is_read_by_the_engine_with_units_and_choices() -> None:
    child = _config_in_child(ZARR_DEVICE_THREADS=" 3 ", ZARR_DEVICE_MAX_INFLIGHT_BYTES="1.5GiB",
                             ZARR_DEVICE_STAGING_BYTES="64 mib", ZARR_DEVICE_STAGING_SLOTS="4",
                             ZARR_DEVICE_GPU_DECODE="off", ZARR_DEVICE_GPU_ENCODE="off",
                             ZARR_DEVICE_DECODE_SHARING="off", ZARR_DEVICE_DECODE_BYTES="512MiB",
                             ZARR_DEVICE_ZSTD_BLOCK_BYTES="0", ZARR_DEVICE_DECODER_BYTES="1GiB")
    assert child.returncode == 0, child.stderr
    import json

    assert json.loads(child.stdout) == {"threads": 3, "max_inflight_bytes": 3 << 29, "gpu_decode": "off",
                                        "staging_bytes": 64 << 20, "decode_bytes": 512 << 20, "decoder_bytes": 1 << 30, "staging_slots": 4,
                                        "gpu_encode": "off", "decode_sharing": "off", "zstd_block_bytes": 0}


@pytest.mark.parametrize(("variable", "value"), [
    ("ZARR_DEVICE_GPU_DECODE", "bogus"),
    ("ZARR_DEVICE_GPU_ENCODE", "ON"),
    ("ZARR_DEVICE_DECODE_SHARING", "cpu"),
    ("ZARR_DEVICE_MAX_INFLIGHT_BYTES", "256 MiBs"),
    ("ZARR_DEVICE_STAGING_BYTES", "1MiB"),
    ("ZARR_DEVICE_THREADS", "many"),
    ("ZARR_DEVICE_STAGING_SLOTS", "0"),
])
def test_a_bad_variable_fails_the_import_naming_it(variable: str, value: str) -> None:
    child = _config_in_child(**{variable: value})
    assert child.returncode != 0
    assert "zarr_device.errors.UsageError: the environment variable " + variable in child.stderr


def test_a_decode_memory_of_zero_is_sized_by_the_device() -> None:
    assert IoConfig(decode_bytes="0").decode_bytes == 0
    assert IoConfig(decode_bytes="2MiB").decode_bytes == 2 << 20
    message = "decode_bytes must be 0 (automatic) or at least 2 MiB, not '1MiB'"
    with pytest.raises(zd.UsageError, match=re.escape(message)):
        IoConfig(decode_bytes="1MiB")
    with pytest.raises(zd.UsageError, match="0 \\(automatic\\) or at least 2 MiB"):
        _core.parse_setting("decode_bytes", "1MiB")  # the engine says the same
    with pytest.raises(zd.UsageError, match="at least"):
        IoConfig(staging_bytes=0)  # only the setting that says so takes 0
    gib = 1 << 30
    assert _core.decode_memory_for(0, 141 * gib) == 141 * gib // 32  # a 141 GiB GPU: 4.4 GiB
    assert _core.decode_memory_for(0, 24 * gib) == 2 * gib  # at least 2 GiB
    assert _core.decode_memory_for(512 << 20, 141 * gib) == 512 << 20  # a size set is kept


def test_set_config_changes_what_the_engine_starts_from() -> None:
    previous = zd.set_config(threads=2, staging_bytes="32MiB", gpu_encode="off")
    try:
        assert _core.settings()["threads"] == 2
        assert _core.settings()["staging_bytes"] == 32 << 20
        assert zd.get_config() == dataclasses.replace(previous, threads=2, staging_bytes=32 << 20,
                                                      gpu_encode="off")
        with pytest.raises(zd.UsageError, match="staging_slots"):
            zd.set_config(threads=5, staging_slots=257)
        assert _core.settings()["threads"] == 2  # a refused change changes nothing
        with pytest.raises(zd.UsageError, match="threads"):
            _core.set_settings({"threads": -1})  # the engine checks too
    finally:
        zd.set_config(**dataclasses.asdict(previous))
    assert zd.get_config() == previous


def test_a_read_takes_the_settings_in_force_as_it_starts() -> None:
    # The options a read carries (made where the Python call begins) hold the settings of that
    # moment, as ints and choice names; a later set_config changes later reads only.
    previous = zd.set_config(staging_bytes="64MiB", staging_slots=4, decode_bytes="1GiB", threads=3,
                             gpu_decode="trusted", decode_sharing="off")
    try:
        options = _core.ReadOptions(consumer_stream=7, non_blocking=True)
        assert (options.staging_bytes, options.staging_slots, options.decode_bytes, options.threads) == (
            64 << 20, 4, 1 << 30, 3)
        assert (options.gpu_decode, options.decode_sharing) == ("trusted", "off")
        assert (options.consumer_stream, options.non_blocking) == (7, True)
        zd.set_config(staging_bytes="128MiB", gpu_decode="off")
        assert options.staging_bytes == 64 << 20 and options.gpu_decode == "trusted"
        assert _core.ReadOptions().staging_bytes == 128 << 20
        assert _core.ReadOptions().gpu_decode == "off"
        with pytest.raises(zd.UsageError, match="gpu_decode"):
            options.gpu_decode = "sometimes"
    finally:
        zd.set_config(**dataclasses.asdict(previous))


# ----------------------------------------------------------------------------------------------
# One size parser, the engine's: zarr_device.basics.sizes reads Python values and the command line
# with it, and the settings' environment variables are read with it. Both paths take the same texts to
# the same byte counts and refuse the same ones.

SIZES = ["0", "1", "1048576", "256MiB", "256 MiB", " 256mib ", "\t2GB\n", "1.5GiB", ".5KiB", "1e3kB",
         "1E3", "3k", "7b", "7B", "1TiB", "1.9", "9007199254740993", "18446744073709551615",
         "18446744073709551616", "1e400", "20000000TiB", "", " ", "lots", "256 MiBs", "1.", ".", "-1",
         "+1", "1e-3", "1e", "1 2", "0x10", "256MiB,", "inf", "nan", "1_000", "16EiB", "1\x1cMiB",
         "1\u00a0MiB", "１MiB", "2.5e2MB"]


def _both(text: str) -> tuple[Any, Any]:
    try:
        python: Any = parse_size(text, what="max_inflight_bytes", minimum=1, maximum=SIZE_MAX)
    except zd.UsageError:
        python = zd.UsageError
    try:
        engine: Any = _core.parse_setting("max_inflight_bytes", text)
    except zd.UsageError:
        engine = zd.UsageError
    return python, engine


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1048576", 1 << 20), ("256MiB", 256 << 20), (" 256mib ", 256 << 20), ("\t2GB\n", 2 * 10**9),
     ("1.5GiB", 3 << 29), (".5KiB", 512), ("1e3kB", 10**6), ("1.9", 1), ("7b", 7),
     ("18446744073709551615", 2**64 - 1)],
)
def test_sizes_read_as_people_write_them(text: str, expected: int) -> None:
    assert parse_size(text, minimum=0) == expected


@pytest.mark.parametrize(("text", "message"), [("lots", "is not a size"), ("1 2", "is not a size"),
                                               ("1e400", "must be smaller"), ("16EiB", "is not a size"),
                                               ("20000000TiB", "must be smaller")])
def test_what_is_not_a_size_is_refused(text: str, message: str) -> None:
    with pytest.raises(zd.UsageError, match=message):
        parse_size(text)


@pytest.mark.parametrize("text", SIZES)
def test_the_size_grammars_agree(text: str) -> None:
    python, engine = _both(text)
    assert python == engine


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="0123456789.eEkKmMgGtTiIbB \t", max_size=12))
def test_the_size_grammars_agree_on_any_text(text: str) -> None:
    python, engine = _both(text)
    assert python == engine
