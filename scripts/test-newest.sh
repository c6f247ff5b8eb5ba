#!/usr/bin/env bash
# The newest stack users get from `pip install` on Python 3.12+: zarr-python, numcodecs, xarray and
# Dask as requirements-newest.txt pins them, in an environment of their own
# (~/.cache/zarr-device/venv-newest), with zarr-device built for that Python. Runs the plug-in's
# tests, the xarray and Dask tests and zarr-python's own suite with the plug-in on. The main
# environment (scripts/test.sh) keeps the oldest supported zarr-python (3.1, on Python 3.11).
#
#   scripts/test-newest.sh                   # everything above
#   scripts/test-newest.sh -k box_reads      # pytest arguments: some of the plug-in tests
#   PYTHON_NEWEST=/usr/bin/python3.13 scripts/test-newest.sh   # another interpreter (3.12+)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/zarr-device"
venv="${ZARR_DEVICE_VENV_NEWEST:-$cache/venv-newest}"
cd "$repo"

python="${PYTHON_NEWEST:-}"
if [ -z "$python" ]; then
  # pyenv's newest 3.12 (zarr-python 3.2+ needs 3.12); else one on PATH.
  python="$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python3.12 2>/dev/null | sort -V | tail -n 1 || true)"
  [ -n "$python" ] || python="$(command -v python3.12 || true)"
fi
if [ -z "$python" ]; then
  # A machine without Python 3.12 can still run the rest of the test command; CI cannot skip this
  # leg (.ci/run sets REQUIRE_NEWEST=1).
  echo "test-newest: no Python 3.12 found (PYTHON_NEWEST names one); zarr-python 3.2+ needs it" >&2
  if [ -n "${REQUIRE_NEWEST:-}" ]; then exit 2; fi
  echo "test-newest: SKIPPED the newest stack" >&2
  exit 0
fi

if [ ! -x "$venv/bin/python" ] || [ "$("$venv/bin/python" -c 'import sys; print(sys.version_info[:2] >= (3, 12))')" != True ]; then
  echo "test-newest: creating $venv with $python"
  rm -rf "$venv"
  "$python" -m venv "$venv"
fi
if ! cmp -s requirements-newest.txt "$venv/.requirements-newest.txt"; then
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -r requirements-newest.txt
  cp requirements-newest.txt "$venv/.requirements-newest.txt"
fi
echo "test-newest: $("$venv/bin/python" -c 'import sys, zarr, numcodecs, xarray, dask
print(f"Python {sys.version.split()[0]}, zarr {zarr.__version__}, numcodecs {numcodecs.__version__}, "
      f"xarray {xarray.__version__}, dask {dask.__version__}")')"

CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
  "$venv/bin/python" -m pip install -q --no-build-isolation --no-deps "$repo"

# The plug-in, its data types, xarray and Dask over it, and the README's plug-in snippets.
tests=(
  python/tests/test_zarr_plugin*.py
  python/tests/test_zarr_dtypes.py
  python/tests/test_time_types.py
  python/tests/test_dask.py
  python/tests/test_readme.py
)
"$venv/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}" "$@"

if [ $# -eq 0 ]; then
  PYTHON="$venv/bin/python" ZARR_DEVICE_VENV="$venv" bash scripts/zarr-python-suite.sh
fi
