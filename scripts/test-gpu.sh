#!/usr/bin/env bash
# Builds zarr-device on a CUDA machine and runs the GPU suite (pytest marker `gpu`) and the GPU
# benchmark. For machines without network access, OFFLINE_WHEELS names a folder of Python wheels
# and OFFLINE_DEBS a folder of Debian packages (c-blosc) to install from (scripts/fetch-offline.sh
# fetches both; --newest there fetches the newest-stack zarr-python, numcodecs and Dask).
#
#   scripts/test-gpu.sh [--bench] [LOG_DIR]      build, C++ device tests, GPU pytest (+ the
#                                                benchmark suites BENCH_SUITES: gpu many layouts)
#   scripts/test-gpu.sh --bench-only [LOG_DIR]   the benchmark suites of an installed build
#   scripts/test-gpu.sh --build-only [LOG_DIR]   the build alone
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench=0
tests=1
if [ "${1:-}" = "--bench" ]; then bench=1; shift; fi
if [ "${1:-}" = "--bench-only" ]; then bench=1; tests=0; shift; fi
build_only=0
if [ "${1:-}" = "--build-only" ]; then build_only=1; shift; fi
logs="${1:-$repo/build/gpu-logs}"
mkdir -p "$logs"
cd "$repo" || exit 1
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"

if [ -n "${OFFLINE_WHEELS:-}" ]; then
  site=/tmp/zarr-device-site
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "$OFFLINE_WHEELS"/*.whl || exit 1
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -n "${OFFLINE_DEBS:-}" ]; then
  root=/tmp/zarr-device-debs
  for f in "$OFFLINE_DEBS"/*.deb; do dpkg -x "$f" "$root"; done
  for pc in "$root"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc; do
    sed -i "s|^prefix=.*|prefix=$root/usr|" "$pc"
  done
  export PKG_CONFIG_PATH="$root/usr/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export CMAKE_PREFIX_PATH="$root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$logs/gpu.txt" 2>&1
status=0
if [ "$tests" = 1 ]; then
  echo "== build" | tee "$logs/build.log"
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" CMAKE_ARGS="${CMAKE_ARGS:--DCMAKE_CUDA_ARCHITECTURES=90}" \
    python3 -m pip install -v --no-build-isolation --no-deps . >> "$logs/build.log" 2>&1 || {
    tail -50 "$logs/build.log"; exit 1; }
  python3 -c "import zarr_device as zd; print(zd.cuda_build_info())" | tee "$logs/info.txt"
  [ "$build_only" = 1 ] && exit 0

  gtest_status=0
  if [ -z "${SKIP_GTEST:-}" ]; then  # SKIP_GTEST=1: the Python suite only
    echo "== C++ device tests (GoogleTest filter Devices*:CudaDevice*)"
    # The nvCOMP the Python package finds (its wheel), for the tests' decoder processes.
    if [ -z "${ZARR_DEVICE_NVCOMP_LIBRARY:-}" ]; then
      ZARR_DEVICE_NVCOMP_LIBRARY="$(python3 -c 'import zarr_device, os; print(os.environ.get("ZARR_DEVICE_NVCOMP_LIBRARY", ""))')"
      export ZARR_DEVICE_NVCOMP_LIBRARY
    fi
    { cmake -S . -B build/gpu-tests -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
      cmake --build build/gpu-tests -j "$(nproc)" --target zarr_device_tests; } > "$logs/gtest-build.log" 2>&1 &&
      build/gpu-tests/zarr_device_tests --gtest_filter='Devices*:CudaDevice*' 2>&1 | tee "$logs/gtest-gpu.log"
    gtest_status=${PIPESTATUS[0]}
    [ -f build/gpu-tests/zarr_device_tests ] || { tail -20 "$logs/gtest-build.log"; gtest_status=1; }
  fi

  echo "== GPU tests"
  PYTHONUNBUFFERED=1 python3 -m pytest -q -m gpu -p no:cacheprovider python/tests 2>&1 | tee "$logs/pytest-gpu.log"
  status=${PIPESTATUS[0]}
  [ "$gtest_status" = 0 ] || status=1
fi
if [ "$bench" = 1 ]; then
  # The suites of python -m bench (BENCH_SUITES, BENCH_ARGS such as --quick): their JSON in
  # LOG_DIR/results, which become BENCHMARKS.md's figures once copied into bench/results/ and
  # written by `python -m bench report`.
  suites="${BENCH_SUITES:-gpu many layouts}"
  echo "== GPU benchmark suites: $suites"
  # shellcheck disable=SC2086 # the suites and arguments are words
  PYTHONUNBUFFERED=1 python3 -m bench run $suites --out "$logs/results" ${BENCH_ARGS:-} 2>&1 |
    tee "$logs/bench.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
exit "$status"
