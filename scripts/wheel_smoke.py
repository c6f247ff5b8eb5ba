"""Checks an installed zarr-device wheel the way a user meets it, from outside the repository.

- the package imports from the environment, not from a source tree;
- the compression libraries the engine loaded are the wheel's own copies (``zarr_device.libs``,
  bundled by auditwheel), not the system's, read from /proc/self/maps after writing and reading;
- every codec writes and reads back bit-exact (zstd, gzip, zlib, lz4, each blosc compressor,
  crc32c, sharding), and where zarr-python is installed it reads what zarr-device wrote and the
  other way round;
- ``zarr-device info`` runs and describes the array;
- with ``--no-compiler``: no C or C++ compiler and no CMake is on PATH.

    python scripts/wheel_smoke.py [--no-compiler] [--expect-cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import warnings

import numpy as np

import zarr_device as zd
from zarr_device.errors import ZarrDeviceError

# zarr-python warns that numcodecs.* codecs are outside the v3 specification: known, and the point.
warnings.filterwarnings("ignore", message="Numcodecs codecs are not in the Zarr version 3 specification")

# The libraries the engine links, and snappy, which c-blosc links where it was built with it.
LINKED = ("libzstd", "liblz4", "libblosc")
BUNDLED = (*LINKED, "libsnappy")
COMPILERS = ("cc", "gcc", "g++", "c++", "clang", "clang++", "cmake", "nvcc")

_BYTES = {"name": "bytes", "configuration": {"endian": "little"}}


def _blosc(cname: str) -> dict[str, Any]:
    config = {"cname": cname, "clevel": 5, "shuffle": "shuffle", "typesize": 4, "blocksize": 0}
    return {"name": "blosc", "configuration": config}


# name -> the codec chain after the bytes codec; zarr-python reads every one of them (numcodecs
# provides the numcodecs.* codecs).
CHAINS: dict[str, list[dict[str, Any]]] = {
    "zstd": [{"name": "zstd", "configuration": {"level": 3, "checksum": True}}],
    "gzip": [{"name": "gzip", "configuration": {"level": 5}}],
    "zlib": [{"name": "numcodecs.zlib", "configuration": {"level": 5}}],
    "lz4": [{"name": "numcodecs.lz4", "configuration": {"acceleration": 1}}],
    **{f"blosc-{c}": [_blosc(c)] for c in ("blosclz", "lz4", "lz4hc", "zstd", "zlib", "snappy")},
    "zstd+crc32c": [{"name": "zstd", "configuration": {"level": 0, "checksum": False}}, {"name": "crc32c"}],
}


def check_imported_from_environment() -> Path:
    package = Path(zd.__file__).resolve().parent
    site = Path(sys.prefix).resolve()
    assert package.is_relative_to(site), f"zarr_device comes from {package}, not from {site}"
    return package


def check_no_compiler() -> None:
    found = {name: shutil.which(name) for name in COMPILERS}
    assert not any(found.values()), f"a compiler is reachable: {found}"
    assert not os.environ.get("LD_LIBRARY_PATH"), os.environ["LD_LIBRARY_PATH"]


def loaded_libraries() -> set[Path]:
    with open("/proc/self/maps") as maps:
        return {Path(line.split(None, 5)[5].strip()) for line in maps if len(line.split(None, 5)) == 6}


def check_bundled_libraries(package: Path) -> None:
    libs = package.parent / "zarr_device.libs"
    loaded = [p for p in loaded_libraries() if p.name.startswith(BUNDLED)]
    names = {prefix for prefix in BUNDLED for p in loaded if p.name.startswith(prefix)}
    assert names >= set(LINKED), f"expected {LINKED} loaded, found {sorted(map(str, loaded))}"
    outside = [str(p) for p in loaded if p.parent != libs]
    assert not outside, f"compression libraries loaded from outside {libs}: {outside}"
    print(f"wheel smoke: compression libraries from {libs}: {sorted(p.name for p in loaded)}")


def check_codecs(root: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    # Compressible but not constant: small integers as float32.
    data = rng.integers(0, 50, size=(37, 29)).astype("float32")
    written = {}
    snappy = any(p.name.startswith("libsnappy") for p in loaded_libraries())
    for name, chain in CHAINS.items():
        try:
            zd.create(root / f"{name}.zarr", shape=data.shape, dtype="float32", chunks=(16, 8),
                      codecs=[_BYTES, *chain])[...] = data
        except ZarrDeviceError as e:
            # c-blosc built without snappy (as some distributions build it) says so; where
            # libsnappy is loaded, snappy must work.
            if name != "blosc-snappy" or snappy or "lacks" not in str(e):
                raise
            print(f"wheel smoke: {name} skipped: {e}")
            continue
        back = zd.open_array(root / f"{name}.zarr")
        assert back[...].tobytes() == data.tobytes(), name
        assert back[5:30:3, 2:].tobytes() == np.ascontiguousarray(data[5:30:3, 2:]).tobytes(), name
        written[name] = data
    sharded = zd.create(root / "sharded.zarr", shape=data.shape, dtype="float32", chunks=(8, 8),
                        shards=(16, 16), compressors="zstd")
    sharded[...] = data
    assert zd.open_array(root / "sharded.zarr")[...].tobytes() == data.tobytes()
    written["sharded"] = data
    print(f"wheel smoke: {len(written)} codec chains written and read back bit-exact")
    return written


def check_zarr_python(root: Path, written: dict[str, np.ndarray]) -> None:
    try:
        import zarr
    except ImportError:
        print("wheel smoke: zarr-python not installed; interoperability not checked")
        return
    from numcodecs import blosc

    # numcodecs' own c-blosc is built without snappy: those chunks only zarr-device reads.
    readable = {n: d for n, d in written.items() if not n.startswith("blosc-") or n[6:] in blosc.list_compressors()}
    for name, data in readable.items():
        theirs = zarr.open_array(str(root / f"{name}.zarr"), mode="r")[...]
        assert np.asarray(theirs).tobytes() == data.tobytes(), f"zarr-python reads {name} differently"
    data = np.arange(300, dtype="int16").reshape(20, 15)
    made = zarr.create_array(str(root / "by-zarr.zarr"), shape=data.shape, dtype="int16", chunks=(7, 4))
    made[...] = data
    assert zd.open_array(root / "by-zarr.zarr")[...].tobytes() == data.tobytes()
    print(f"wheel smoke: zarr-python {zarr.__version__} reads {len(readable)} of them ({', '.join(readable)}); "
          "zarr-device reads its array")


def check_info_command(root: Path) -> None:
    command = Path(sys.executable).parent / "zarr-device"
    out = subprocess.run([str(command), "info", str(root / "zstd.zarr"), "--json"], check=True,
                         capture_output=True, text=True).stdout
    described = json.loads(out)
    assert described["shape"] == [37, 29], described
    subprocess.run([str(command), "info", str(root / "sharded.zarr")], check=True, capture_output=True)
    print("wheel smoke: zarr-device info ok")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-compiler", action="store_true", help="fail if a compiler is on PATH")
    parser.add_argument("--expect-cuda", action="store_true", help="fail if the GPU path or nvCOMP's is absent")
    args = parser.parse_args()
    package = check_imported_from_environment()
    if args.no_compiler:
        check_no_compiler()
    info = zd.cuda_build_info()
    if args.expect_cuda:
        assert info["compiled"], f"the wheel was built without CUDA: {info}"
        # Without the nvidia-libnvcomp-cu13 wheel nvCOMP is missing here, but the build must know it.
        assert "no nvCOMP support" not in str(info.get("nvcomp_error")), info
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        written = check_codecs(root)
        check_bundled_libraries(package)
        check_zarr_python(root, written)
        check_info_command(root)
    print(f"wheel smoke: zarr_device {zd.__version__} from {package}, Python {sys.version.split()[0]}, "
          f"CUDA path compiled: {info['compiled']}, nvCOMP: {info.get('nvcomp')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
