"""The plug-in under each zarr-python release: the adapter for the installed one, the fast paths in
place, no warning on import, and a release no adapter was written for served by zarr-python's own
paths with one warning that names it (never a crash, never other values)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")

import zarr_device  # noqa: E402
from zarr_device.zarr_plugin import box_reads, box_writes, coordinate_reads, zarr_versions  # noqa: E402
from zarr_device.zarr_plugin.zarr_versions import ADAPTERS, UntestedZarrWarning, release  # noqa: E402

INSTALLED = release(zarr.__version__)


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter (the wrappers are installed once per process), warnings
    shown, in ``tmp_path``."""
    return subprocess.run(
        [sys.executable, "-W", "default", "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "default"},
    )


def test_the_installed_release_has_its_adapter() -> None:
    adapter = zarr_versions.internals()
    assert INSTALLED is not None and adapter is not None, zarr.__version__
    assert INSTALLED[1] in adapter.minors
    assert adapter.grid_in_selection == (INSTALLED >= (3, 2))
    import zarr.core.array as zarr_array

    assert adapter.matches(zarr_array)


def test_every_fast_path_is_installed() -> None:
    with zarr_device.enable(like="numpy"):
        pass
    assert box_reads.installed()
    assert set(box_reads.sync_installed()) == {"get_basic_selection", "get_orthogonal_selection", "get_block_selection"}
    assert set(box_writes.installed()) == {"set_basic_selection", "set_orthogonal_selection", "set_block_selection"}
    assert set(coordinate_reads.installed()) == {"AsyncArray.get_coordinate_selection", "get_coordinate_selection"}


def test_adapters_cover_disjoint_releases() -> None:
    seen: set[int] = set()
    for adapter in ADAPTERS:
        assert not seen & set(adapter.minors)
        seen |= set(adapter.minors)
    for version in zarr_versions.TESTED_RELEASES:
        found = release(version)
        assert found is not None and found[1] in seen


@pytest.mark.parametrize(
    ("version", "expected"),
    [("3.4.2", (3, 4)), ("3.10.0rc1", (3, 10)), ("3.1.6", (3, 1)), ("4", None), ("dev", None)],
)
def test_release_reads_major_and_minor(version: str, expected: tuple[int, int] | None) -> None:
    assert release(version) == expected


def test_import_and_enable_print_no_warning(tmp_path: Path) -> None:
    done = _run(
        """
        import warnings
        warnings.simplefilter("error")
        import zarr, zarr_device
        with zarr_device.enable(like="numpy"):
            z = zarr.create_array("a.zarr", shape=(8, 8), chunks=(4, 4), dtype="f4")
            z[0:2, :] = 0.5
            assert float(z[1, 3]) == 0.5
        print("ok")
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    assert "Warning" not in done.stderr, done.stderr


_UNTESTED = """
    import json, warnings
    import numpy as np
    import zarr, zarr.core.array
    {patch}
    import zarr_device
    from zarr_device.zarr_plugin import box_reads, box_writes, coordinate_reads
    values = np.arange(64, dtype="f4").reshape(8, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with zarr_device.enable(like="numpy"):
            z = zarr.create_array("a.zarr", shape=(8, 8), chunks=(3, 3), dtype="f4", fill_value=-1)
            z[:] = values
            z[1:3, 2:7] = values[1:3, 2:7] * 2
            z.oindex[[0, 5], :] = values[[0, 5], :] * 3
            got = [z[:].tolist(), z.vindex[[1, 2], [3, 4]].tolist(), z.oindex[[0, 7], 1:3].tolist()]
    print(json.dumps({{
        "got": got,
        "warnings": [str(w.message) for w in caught if w.category.__name__ == "UntestedZarrWarning"],
        "installed": [box_reads.installed(), list(box_writes.installed()), list(coordinate_reads.installed())],
    }}))
"""


def _expected_values() -> list[Any]:
    values = np.arange(64, dtype="f4").reshape(8, 8)
    z = values.copy()
    z[1:3, 2:7] = values[1:3, 2:7] * 2
    z[[0, 5], :] = values[[0, 5], :] * 3
    return [z.tolist(), z[[1, 2], [3, 4]].tolist(), z[np.ix_([0, 7], [1, 2])].tolist()]


@pytest.mark.parametrize(
    "patch",
    [
        'zarr.__version__ = "3.99.0"',  # a release after every adapter
        'zarr.__version__ = "3.0.10"',  # one before
        # The installed release, with a _get_selection of other parameters.
        "_found = zarr.core.array._get_selection\n"
        "    async def _get_selection(*args, **kwargs):\n"
        "        return await _found(*args, **kwargs)\n"
        "    zarr.core.array._get_selection = _get_selection",
    ],
    ids=["newer", "older", "other-internals"],
)
def test_a_release_without_adapter_gets_zarr_pythons_paths_and_one_warning(patch: str, tmp_path: Path) -> None:
    done = _run(_UNTESTED.format(patch=patch), tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["got"] == _expected_values()
    assert len(found["warnings"]) == 1, found["warnings"]
    assert zarr.__version__ in found["warnings"][0] or "3.99.0" in found["warnings"][0] or "3.0.10" in found["warnings"][0]
    assert found["installed"] == [False, [], []]


def test_the_warning_names_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zarr, "__version__", "3.77.1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert zarr_versions._choose() is None  # noqa: SLF001
    (warning,) = [w for w in caught if issubclass(w.category, UntestedZarrWarning)]
    assert "zarr-python 3.77.1" in str(warning.message)
    assert "3.4.2" in str(warning.message)  # the tested releases, named


@pytest.mark.skipif(INSTALLED is None or INSTALLED < (3, 2), reason="read_missing_chunks is zarr-python 3.2+")
@pytest.mark.parametrize("selection", [np.s_[:], np.s_[0:2, 0:2], np.s_[5, 1]], ids=["all", "box", "point"])
def test_missing_chunks_are_refused_where_the_config_asks(selection: Any, tmp_path: Path) -> None:
    errors = pytest.importorskip("zarr.errors")
    path = tmp_path / "a.zarr"
    z = zarr.create_array(path, shape=(8, 8), chunks=(4, 4), dtype="f4", fill_value=-1)
    z[4:, 4:] = 1.0  # one chunk of four stored
    # The config's default (open_array's config= loses the key before zarr-python 3.4).
    refusing = {"array.read_missing_chunks": False}
    with zarr.config.set(refusing), pytest.raises(errors.ChunkNotFoundError):
        zarr.open_array(path)[selection]
    with zarr_device.enable(like="numpy"):
        with zarr.config.set(refusing):
            on = zarr.open_array(path)
        with pytest.raises(errors.ChunkNotFoundError):
            on[selection]
        assert float(on[6, 6]) == 1.0  # a stored chunk reads
        assert float(zarr.open_array(path)[selection].min()) == -1.0  # the default fills


@pytest.mark.skipif(INSTALLED is None or INSTALLED < (3, 2), reason="rectilinear chunk grids are zarr-python 3.2+")
def test_rectilinear_grids_fall_back_to_zarr_pythons_codecs() -> None:
    from zarr_device.zarr_plugin.pipeline import FallbackWarning

    values = np.arange(10, dtype="f4")
    with zarr.config.set({"array.rectilinear_chunks": True}):
        store = zarr.storage.MemoryStore()
        zarr.create_array(store, shape=(10,), chunks=[[3, 3, 4]], dtype="f4", fill_value=0)[:] = values
        with zarr_device.enable(like="numpy"), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            on = zarr.open_array(store)
            on[1:4] = 7.0
            got = on[:]
    expected = values.copy()
    expected[1:4] = 7.0
    np.testing.assert_array_equal(got, expected)
    assert any(issubclass(w.category, FallbackWarning) for w in caught)
