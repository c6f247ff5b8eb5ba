#!/usr/bin/env bash
# Installs a built wheel (scripts/build-wheels.sh) the way a user without a compiler does and
# runs scripts/wheel_smoke.py on it: a fresh virtual environment, `pip install` of the wheel file
# with --only-binary=:all: --no-index (nothing can be built, nothing comes from an index: the
# runtime dependencies come from a wheelhouse cached under ~/.cache/zarr-device), then, under
# `env -i` with only the environment's bin/ on PATH (no gcc, g++, cc or cmake) and LD_LIBRARY_PATH
# empty, the smoke test. Before it, `ldd` shows where the extension's libraries resolve: the
# compression libraries must be the wheel's copies in zarr_device.libs, not /usr/lib's.
#
#   scripts/check-wheel.sh dist/zarr_device-0.1.0-cp311-cp311-manylinux_2_35_x86_64.whl
#
# The interpreter is the development environment's base Python (its version must match the
# wheel's); PYTHON=/path/to/python3.X picks another. When the wheelhouse lacks a dependency, it
# is filled from the index (the development environment's versions, where it has the same
# Python); otherwise no network is used.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/zarr-device"
venv="${ZARR_DEVICE_VENV:-$cache/venv}"
wheel="$(realpath "${1:?usage: $0 WHEEL}")"
python="${PYTHON:-$("$venv/bin/python" -c 'import sys; print(sys._base_executable)')}"
export PIP_DISABLE_PIP_VERSION_CHECK=1

tag="$("$python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
case "$(basename "$wheel")" in
  *-"$tag"-*) ;;
  *) echo "check-wheel: $wheel is not for $python ($tag)" >&2; exit 1 ;;
esac

tmp="$(mktemp -d "${TMPDIR:-/tmp}/zarr-device-wheel-check.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
"$python" -m venv "$tmp/venv"

mkdir "$tmp/home" "$tmp/work"
# Only the environment's bin/ on PATH: nothing here could compile, and nothing may be fetched.
clean_env=(env -i "PATH=$tmp/venv/bin" "HOME=$tmp/home" "LD_LIBRARY_PATH=" "LANG=C.UTF-8")
wheelhouse="$cache/wheelhouse/$tag"
mkdir -p "$wheelhouse"
install_wheel() {
  "${clean_env[@]}" "$tmp/venv/bin/python" -m pip install -q --no-cache-dir --no-index \
    --only-binary=:all: --find-links "$wheelhouse" "$wheel[zarr]"
}

if ! install_wheel 2>"$tmp/install.log"; then
  # The wheelhouse lacks a runtime requirement (or the zarr extra's): fetch them, pinned to the
  # development environment's versions where its Python is the same.
  echo "check-wheel: filling $wheelhouse with the runtime dependencies"
  "$tmp/venv/bin/python" - "$wheel" >"$tmp/requirements.txt" <<'EOF'
import email, sys, zipfile
from pip._vendor.packaging.requirements import Requirement

with zipfile.ZipFile(sys.argv[1]) as wheel:
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    metadata = email.message_from_bytes(wheel.read(name))
for text in metadata.get_all("Requires-Dist") or []:
    requirement = Requirement(text)
    if requirement.marker is None or requirement.marker.evaluate({"extra": "zarr"}):
        requirement.marker = None
        print(requirement)
EOF
  : >"$tmp/constraints.txt"
  if [ "$("$venv/bin/python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])' 2>/dev/null)" = "$tag" ]; then
    "$venv/bin/python" -m pip freeze --exclude-editable | grep -v -E '^(zarr[-_]device|-e )| @ ' \
      >"$tmp/constraints.txt" || true
  fi
  "$tmp/venv/bin/python" -m pip download -q --only-binary=:all: --dest "$wheelhouse" \
    -r "$tmp/requirements.txt" -c "$tmp/constraints.txt"
  install_wheel
fi

core="$(ls "$tmp"/venv/lib/python*/site-packages/zarr_device/_core*.so)"
echo "check-wheel: ldd $(basename "$core") (LD_LIBRARY_PATH empty):"
LD_LIBRARY_PATH= ldd "$core" | sed 's/^\s*/  /'
bundled="$(dirname "$(dirname "$core")")/zarr_device.libs"
for lib in libzstd liblz4 libblosc libsnappy; do
  where="$(LD_LIBRARY_PATH= ldd "$core" | awk -v lib="$lib" '$1 ~ "^" lib {print $3}')"
  [ -z "$where" ] || where="$(realpath "$where")"
  case "$where" in
    "$bundled"/*) ;;
    *) echo "check-wheel: $lib resolves to '${where:-nothing}', not to $bundled" >&2; exit 1 ;;
  esac
done

expect_cuda=()
command -v nvcc >/dev/null 2>&1 && expect_cuda=(--expect-cuda)
cd "$tmp/work"
"${clean_env[@]}" "$tmp/venv/bin/python" "$repo/scripts/wheel_smoke.py" --no-compiler "${expect_cuda[@]}"
