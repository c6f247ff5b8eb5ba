"""Where the engine looks for nvCOMP and cuFile, on any machine (no GPU needed).

Installed from a wheel, the package finds them in the nvidia-* wheels (the ``gpu`` extra brings
nvidia-libnvcomp-cu13): ``import zarr_device`` points ``ZARR_DEVICE_NVCOMP_LIBRARY`` and
``ZARR_DEVICE_CUFILE_LIBRARY`` at the libraries in those wheels' folders unless they are set
already, and the engine opens the named file first. Each case runs in a fresh interpreter, with
stand-in wheels (empty files) put ahead of the real ones on ``sys.path``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import zarr_device as zd

VARIABLES = ("ZARR_DEVICE_NVCOMP_LIBRARY", "ZARR_DEVICE_CUFILE_LIBRARY")

_REPORT = """
import json, os
import zarr_device as zd
print(json.dumps({"env": {k: os.environ.get(k) for k in %r}, "info": zd.cuda_build_info()}))
""" % (VARIABLES,)


def _imported(site: Path | None, **environment: str) -> dict[str, Any]:
    """``import zarr_device`` in a fresh interpreter with ``site`` first on sys.path."""
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env.update(environment)
    package_root = str(Path(zd.__file__).parent.parent)  # not resolved: the package may be links
    paths = [str(site)] if site is not None else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, package_root, env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", _REPORT], env=env, check=True, capture_output=True,
                         text=True, timeout=120).stdout
    result: dict[str, Any] = json.loads(out.splitlines()[-1])
    return result


def _fake_nvcomp_wheel(site: Path, *names: str) -> Path:
    folder = site / "nvidia" / "libnvcomp"
    (folder / "lib64").mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    for name in names:
        (folder / "lib64" / name).write_bytes(b"")
    return folder / "lib64"


def _nvcomp_compiled() -> bool:
    info = zd.cuda_build_info()
    return bool(info["compiled"]) and "no nvCOMP support" not in str(info.get("nvcomp_error"))


def test_the_nvcomp_wheels_newest_library_is_named(tmp_path: Path) -> None:
    lib64 = _fake_nvcomp_wheel(tmp_path, "libnvcomp.so.5", "libnvcomp.so.6")
    assert _imported(tmp_path)["env"]["ZARR_DEVICE_NVCOMP_LIBRARY"] == str(lib64 / "libnvcomp.so.6")


def test_a_library_named_by_the_user_is_kept(tmp_path: Path) -> None:
    _fake_nvcomp_wheel(tmp_path, "libnvcomp.so.6")
    mine = str(tmp_path / "elsewhere" / "libnvcomp.so.6")
    env = _imported(tmp_path, ZARR_DEVICE_NVCOMP_LIBRARY=mine, ZARR_DEVICE_CUFILE_LIBRARY=mine)["env"]
    assert env == {"ZARR_DEVICE_NVCOMP_LIBRARY": mine, "ZARR_DEVICE_CUFILE_LIBRARY": mine}


def test_without_the_wheel_the_loader_path_decides(tmp_path: Path) -> None:
    # A stand-in that fails to import, as when nvidia-libnvcomp-cu13 is not installed.
    folder = tmp_path / "nvidia" / "libnvcomp"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("raise ImportError('not installed')\n")
    assert _imported(tmp_path)["env"]["ZARR_DEVICE_NVCOMP_LIBRARY"] is None


def test_a_wheel_folder_without_the_library_names_nothing(tmp_path: Path) -> None:
    _fake_nvcomp_wheel(tmp_path)
    assert _imported(tmp_path)["env"]["ZARR_DEVICE_NVCOMP_LIBRARY"] is None


def test_the_cufile_wheels_library_is_named(tmp_path: Path) -> None:
    lib = tmp_path / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcufile.so.0").write_bytes(b"")
    assert _imported(tmp_path)["env"]["ZARR_DEVICE_CUFILE_LIBRARY"] == str(lib / "libcufile.so.0")


@pytest.mark.skipif(not _nvcomp_compiled(), reason="the engine was built without the GPU path or nvCOMP")
def test_the_engine_opens_the_named_library_first(tmp_path: Path) -> None:
    lib64 = _fake_nvcomp_wheel(tmp_path, "libnvcomp.so.6")
    info = _imported(tmp_path)["info"]
    # The stand-in is no library: the engine tried it, said why, and fell back to the loader path.
    assert info["nvcomp"] is None or info["nvcomp"] != str(lib64 / "libnvcomp.so.6")
    if info["nvcomp"] is None:
        assert info["nvcomp_error"].startswith("nvCOMP not found"), info
        assert f"{lib64 / 'libnvcomp.so.6'}: " in info["nvcomp_error"], info


@pytest.mark.skipif(not _nvcomp_compiled(), reason="the engine was built without the GPU path or nvCOMP")
def test_the_installed_nvcomp_wheel_opens_without_a_gpu() -> None:
    nvcomp = pytest.importorskip("nvidia.libnvcomp")
    info = _imported(None)["info"]
    expected = Path(nvcomp.__file__).parent / "lib64"
    assert info["nvcomp"] is not None, info
    assert Path(info["nvcomp"]).parent == expected, info
