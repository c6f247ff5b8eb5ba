#!/usr/bin/env bash
# Builds zarr-device on a CUDA machine and runs the GPU suite (pytest marker `gpu`) and the GPU
# benchmark. For machines without network access, OFFLINE_WHEELS names a folder of Python wheels
# and OFFLINE_DEBS a folder of Debian packages (c-blosc) to install from.
#
#   scripts/test-gpu.sh [--bench] [LOG_DIR]
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench=0
if [ "${1:-}" = "--bench" ]; then bench=1; shift; fi
logs="${1:-$repo/build/gpu-logs}"
mkdir -p "$logs"
cd "$repo"
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
echo "== build" | tee "$logs/build.log"
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" CMAKE_ARGS="${CMAKE_ARGS:--DCMAKE_CUDA_ARCHITECTURES=90}" \
  python3 -m pip install -v --no-build-isolation --no-deps . >> "$logs/build.log" 2>&1 || {
  tail -50 "$logs/build.log"; exit 1; }
python3 -c "import zarr_device._core as c; print(c.cuda_build_info())" | tee "$logs/info.txt"

echo "== GPU tests"
PYTHONUNBUFFERED=1 python3 -m pytest -q -m gpu -p no:cacheprovider python/tests 2>&1 | tee "$logs/pytest-gpu.log"
status=${PIPESTATUS[0]}
if [ "$bench" = 1 ] && [ -f bench/bench_gpu.py ]; then
  echo "== GPU benchmark"
  PYTHONUNBUFFERED=1 python3 bench/bench_gpu.py --out "$logs" 2>&1 | tee "$logs/bench-gpu.log"
fi
exit "$status"
