#!/usr/bin/env bash
# Installs zarr-device the way a user does, `pip install <repo>` (isolated build: pip fetches
# scikit-build-core, nanobind and, where the cmake on PATH is older than pyproject.toml's
# cmake.version, the cmake wheel), into a fresh virtual environment of the system Python, with
# /usr/bin first on PATH so that the system CMake (Debian 12: 3.25.1) is the one found; then
# imports the package and writes and reads back a small array outside the repository. Catches a
# declared CMake minimum that does not build the package (with nvcc found, the CUDA path too).
#
#   scripts/check-clean-install.sh [REPO]     # REPO: the repository root (default: this one)
#
# Needs network access to PyPI (or a pip configuration that reaches a mirror).
set -euo pipefail

repo="$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")/..}" && pwd)"
export PATH="/usr/bin:$PATH"
python="${PYTHON:-python3}"
# Nothing from the calling environment decides how the package is built.
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV PIP_NO_BUILD_ISOLATION PIP_REQUIRE_VIRTUALENV CMAKE_ARGS
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}"
export PIP_DISABLE_PIP_VERSION_CHECK=1

tmp="$(mktemp -d "${TMPDIR:-/tmp}/zarr-device-clean-install.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

echo "clean install: $("$python" --version) ($(command -v "$python")), $(cmake --version 2>/dev/null | head -n 1 || echo 'no cmake') on PATH"
"$python" -m venv "$tmp/venv"
# The build directory is a fresh one: the repository's build/{wheel_tag} belongs to the
# development environment's non-isolated builds, and a cache left there by an isolated build
# points at its deleted build environment.
if ! "$tmp/venv/bin/python" -m pip install -v --config-settings=build-dir="$tmp/build" "$repo" \
  >"$tmp/pip.log" 2>&1; then
  tail -n 150 "$tmp/pip.log"
  echo "clean install: pip install $repo failed (log above)" >&2
  exit 1
fi
grep -E '^ *(\*\*\* scikit-build-core .* using CMake|-- zarr-device:)' "$tmp/pip.log" | sed 's/^ */  /' | sort -u

expect_cuda=0
command -v nvcc >/dev/null 2>&1 && expect_cuda=1
mkdir "$tmp/work"
cd "$tmp/work"
EXPECT_CUDA="$expect_cuda" REPO="$repo" "$tmp/venv/bin/python" - <<'EOF'
import os
import pathlib

import numpy as np
import zarr_device as zd

where = pathlib.Path(zd.__file__).resolve()
assert not where.is_relative_to(pathlib.Path(os.environ["REPO"]).resolve()), where
info = zd.cuda_build_info()
if os.environ["EXPECT_CUDA"] == "1":
    assert info["compiled"], f"nvcc is on PATH but the package was built without CUDA: {info}"
data = np.arange(40 * 30, dtype="float32").reshape(40, 30)
arr = zd.create("roundtrip.zarr", shape=data.shape, dtype="float32", chunks=(16, 16),
                compressors="zstd")
arr[:] = data
back = zd.open_array("roundtrip.zarr")
np.testing.assert_array_equal(back[...], data)
np.testing.assert_array_equal(back[3:17, ::4], data[3:17, ::4])
print(f"clean install: zarr_device {zd.__version__} from {where.parent}, CUDA compiled: "
      f"{info['compiled']}; write/read round trip ok")
EOF
