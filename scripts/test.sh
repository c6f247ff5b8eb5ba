#!/usr/bin/env bash
# The README's test command: formatting, the C++ suite, clang-tidy, mypy on the package and the
# Python suite (on every core, pytest-xdist). About 23 minutes from a fresh clone on a 2-core
# machine (the C++ build 8 of them, clang-tidy 5, the Python suite 5), less where the builds are
# kept from an earlier run. Installs what is missing first (scripts/setup.sh).
#
# With --full (or CI=true, as CI runs it) it goes on to the slow checks:
#   the C++ suite under AddressSanitizer + UndefinedBehaviorSanitizer, libFuzzer on every target,
#   zarr-python's own suite with the plug-in on, the newest stack (Python 3.12, the newest
#   zarr-python, numcodecs, xarray, Dask), this Python's wheel and the other CPython 3.10-3.13
#   wheels (built, repaired, installed without a compiler, smoke-tested) and a clean `pip install`.
#
#   scripts/test.sh                        # the README's test command
#   scripts/test.sh --full                 # everything CI runs
#   PYTEST_WORKERS=1 scripts/test.sh       # the Python suite in one process
#   Under --full, each slow step can be left out:
#   SKIP_SANITIZERS=1, SKIP_FUZZ=1 (FUZZ_SECONDS=N per target), SKIP_ZARR_SUITE=1, SKIP_NEWEST=1,
#   SKIP_WHEEL=1 (WHEEL_PYTHONS="/opt/py310/bin/python3.10 ..." names the other interpreters;
#   default: the CPython 3.10-3.13 pyenv has; "" none), SKIP_CLEAN_INSTALL=1 (needs PyPI)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${ZARR_DEVICE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/zarr-device/venv}"
jobs="$(nproc 2>/dev/null || echo 2)"
cd "$repo"

full=""
case "${CI:-}" in true|1) full=1 ;; esac
for arg in "$@"; do
  case "$arg" in
    --full) full=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "test.sh: unknown argument '$arg' (--full, or --help)" >&2; exit 2 ;;
  esac
done
started=$SECONDS
step() { printf '\n==> %s  [%d s]\n' "$*" "$((SECONDS - started))"; }

step "dependencies"
bash scripts/setup.sh --deps
export PATH="$venv/bin:$PATH"

step "clang-format"
# Vendored code (cpp/third_party) keeps its upstream formatting.
mapfile -t cxx_files < <(git ls-files 'cpp/*.hpp' 'cpp/*.cpp' 'python/src/*.cpp' \
  ':(exclude)cpp/third_party')
clang-format --dry-run -Werror "${cxx_files[@]}"

step "C++ tests (release)"
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build/release -j "$jobs"
ctest --test-dir build/release --output-on-failure -j "$jobs"

step "clang-tidy"
mapfile -t tidy_files < <(git ls-files 'cpp/src/*.cpp')
if grep -q 'cpp/cuda/cuda_reader.cpp' build/release/compile_commands.json; then
  mapfile -t -O "${#tidy_files[@]}" tidy_files < <(git ls-files 'cpp/cuda/*.cpp')
fi
printf '%s\n' "${tidy_files[@]}" | xargs -P "$jobs" -n 4 clang-tidy -p build/release --quiet

if [ -n "$full" ] && [ -z "${SKIP_SANITIZERS:-}" ]; then
  step "C++ tests (AddressSanitizer + UndefinedBehaviorSanitizer)"
  cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DZARR_DEVICE_SANITIZE=ON >/dev/null
  ninja -C build/asan -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build/asan --output-on-failure -j "$jobs"
fi

if [ -n "$full" ] && [ -z "${SKIP_FUZZ:-}" ]; then
  # libFuzzer on the metadata parser, shard indexes, each decoder and whole codec chains
  # (clang, ASan + UBSan): a fixed time here, longer by hand (scripts/fuzz.sh --seconds 600).
  step "fuzzing (libFuzzer, ${FUZZ_SECONDS:-40} s per target)"
  bash scripts/fuzz.sh --seconds "${FUZZ_SECONDS:-40}" --jobs "$jobs"
fi

step "Python package build"
python -m pip install -q --no-build-isolation --no-deps "$repo"

step "mypy (strict) on the package"
mypy

step "Python tests"
# Spread over the cores (pytest-xdist), each module's tests kept in one worker (--dist loadfile:
# module fixtures such as the S3 server start once per module, as in one process).
python -m pytest -q -p no:cacheprovider -n "${PYTEST_WORKERS:-$jobs}" --dist loadfile

if [ -z "$full" ]; then
  step "done in $((SECONDS - started)) s (scripts/test.sh --full, as CI runs it, adds the slow checks)"
  exit 0
fi

if [ -z "${SKIP_ZARR_SUITE:-}" ]; then
  # zarr-python's own tests with zarr_device.enable() on for each (its sdist's tests, cached;
  # PyPI the first time): any failure not in scripts/zarr_python_suite/expected-failures-*.txt
  # fails this step.
  step "zarr-python's test suite with the plug-in on"
  bash scripts/zarr-python-suite.sh
fi

if [ -z "${SKIP_NEWEST:-}" ]; then
  # The main environment above holds the oldest supported zarr-python (3.1, the last release for
  # Python 3.11); this leg the newest, on Python 3.12: the plug-in's tests, xarray and Dask over
  # it and zarr-python's own suite with the plug-in on (requirements-newest.txt).
  step "newest stack: Python 3.12, the newest zarr-python, numcodecs, xarray and Dask"
  newest_start=$SECONDS
  CMAKE_BUILD_PARALLEL_LEVEL="$jobs" bash scripts/test-newest.sh
  echo "newest stack: tested in $((SECONDS - newest_start)) s"
fi

if [ -z "${SKIP_WHEEL:-}" ]; then
  # This Python's wheel, as users without a compiler install it: built in the build directory the
  # package build above keeps current (so little compiles), repaired, installed into a fresh
  # environment from the wheel alone and smoke-tested there (scripts/check-wheel.sh).
  step "wheel (build, repair, install without a compiler, smoke test)"
  wheel_start=$SECONDS
  CMAKE_BUILD_PARALLEL_LEVEL="$jobs" bash scripts/build-wheels.sh --current
  tag="$(python -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
  bash scripts/check-wheel.sh "$(ls -t dist/zarr_device-*-"$tag"-"$tag"-*.whl | head -n 1)"
  echo "wheel: built and checked in $((SECONDS - wheel_start)) s"
  # The other CPython versions the wheels are for, with interpreters this machine has (WHEEL_PYTHONS,
  # or pyenv's): each wheel built, repaired, installed without a compiler and smoke-tested.
  others="${WHEEL_PYTHONS-$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[0-3].*/bin/python3.1[0-3] 2>/dev/null || true)}"
  for other in $others; do
    other_tag="$("$other" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
    [ "$other_tag" = "$tag" ] && continue
    step "wheel for $other_tag ($other)"
    wheel_start=$SECONDS
    CMAKE_BUILD_PARALLEL_LEVEL="$jobs" bash scripts/build-wheels.sh "$other"
    PYTHON="$other" bash scripts/check-wheel.sh \
      "$(ls -t dist/zarr_device-*-"$other_tag"-"$other_tag"-*.whl | head -n 1)"
    echo "wheel $other_tag: built and checked in $((SECONDS - wheel_start)) s"
  done
  [ -n "$others" ] || echo "wheel: no other CPython 3.10-3.13 on this machine (WHEEL_PYTHONS names some)"
fi

if [ -z "${SKIP_CLEAN_INSTALL:-}" ]; then
  # As a user installs it: isolated build, fresh venv of the system Python, system CMake on PATH.
  step "clean pip install (system CMake)"
  CMAKE_BUILD_PARALLEL_LEVEL="$jobs" bash scripts/check-clean-install.sh "$repo"
fi

step "done in $((SECONDS - started)) s"
