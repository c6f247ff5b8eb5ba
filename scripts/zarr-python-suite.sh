#!/usr/bin/env bash
# zarr-python's own test suite, with the zarr-device plug-in on for every test
# (zarr_device.enable(like="numpy"), kept in force across zarr's config resets: see
# scripts/zarr_python_suite/zarr_device_suite.py). The tests come from the sdist of the installed
# zarr-python (the version requirements-dev.txt pins), downloaded once into a cache outside the
# repository. The failures the plug-in means to have are listed, each with its reason, in
# scripts/zarr_python_suite/expected-failures-<version>.txt: any other failure fails the run, and so
# does a listed test that passes.
#
#   scripts/zarr-python-suite.sh                         # the whole suite (~1.5 min on 2 cores)
#   scripts/zarr-python-suite.sh tests/test_indexing.py -x   # pytest arguments: some of it
#   ZARR_DEVICE_SUITE_DEVICE=cuda:0 ZARR_DEVICE_SUITE_LIKE=cupy scripts/zarr-python-suite.sh
#       # on a GPU, with CuPy buffers (expected failures: expected-failures-<version>-cupy.txt)
#
# Needs pytest-asyncio (requirements-dev.txt) and, the first time, PyPI.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
here="$repo/scripts/zarr_python_suite"
venv="${ZARR_DEVICE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/zarr-device/venv}"
python="${PYTHON:-python}"
if ! command -v "$python" >/dev/null || ! "$python" -c 'import zarr_device' 2>/dev/null; then
  python="$venv/bin/python"
fi

version="$("$python" -c 'import zarr; print(zarr.__version__)')"
suffix=""
[ "${ZARR_DEVICE_SUITE_LIKE:-numpy}" != numpy ] && suffix="-${ZARR_DEVICE_SUITE_LIKE}"
expected="$here/expected-failures-$version$suffix.txt"
if [ ! -f "$expected" ]; then
  echo "zarr-python-suite: no list of expected failures for zarr $version ($expected);" \
    "run the suite, study each failure and write one" >&2
  exit 2
fi

cache="${XDG_CACHE_HOME:-$HOME/.cache}/zarr-device/zarr-tests-$version"
if [ ! -f "$cache/tests/conftest.py" ]; then
  echo "zarr-python-suite: fetching zarr $version's tests (sdist) into $cache"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  "$python" -m pip download -q --no-binary zarr --no-deps "zarr==$version" -d "$work"
  tar -xzf "$work/zarr-$version.tar.gz" -C "$work" "zarr-$version/tests"
  mkdir -p "$cache"
  rm -rf "$cache/tests"
  mv "$work/zarr-$version/tests" "$cache/tests"
fi

# The whole suite must collect every listed test (a renamed one must leave the list); a run of
# some of it by hand need not.
check_list=""
[ $# -eq 0 ] && check_list=1
cd "$cache"
export ZARR_DEVICE_SUITE_EXPECTED="$expected" ZARR_DEVICE_SUITE_CHECK_LIST="$check_list"
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"  # zarr's own: 300 examples, derandomized
# A hang (a process pool waiting on a lost worker, say) must not stall CI: 15 minutes at most.
exec timeout 900 "$python" -m pytest -c "$here/pytest.ini" --rootdir "$cache" -p zarr_device_suite -q "${@:-tests}"
