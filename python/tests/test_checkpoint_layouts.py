"""Checkpoints saved with ``compressors="auto"``: floating point weights of two bytes or more
byte-shuffled before zstd (numcodecs' shuffle, which plain zarr-python reads), other types zstd;
every chunk with a crc32c. Bit-equal round trips, smaller bf16 weights than zstd alone, what
load accepts of the layout, and the same choice in ``convert``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import zarr_device as zd  # noqa: E402
import zarr_device.torch as zt  # noqa: E402

SHUFFLED = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}


def _inner_codecs(array_dir: Path) -> list[dict[str, Any]]:
    codecs = json.loads((array_dir / "zarr.json").read_text())["codecs"]
    if codecs[0]["name"] == "sharding_indexed":
        codecs = codecs[0]["configuration"]["codecs"]
    return list(codecs)


def _state() -> dict[str, Any]:
    g = torch.Generator().manual_seed(5)
    state = {name: (torch.randn(300, 1100, generator=g) * 0.02).to(getattr(torch, name)) for name in SHUFFLED}
    state["float8"] = (torch.randn(64, 64, generator=g) * 0.02).to(torch.float8_e4m3fn)
    state["int64"] = torch.arange(1000, dtype=torch.int64)
    state["bool"] = torch.rand(50, generator=g) > 0.5
    state["complex"] = torch.randn(20, dtype=torch.complex64, generator=g)
    state["scalar"] = torch.tensor(1.5, dtype=torch.bfloat16)
    state["empty"] = torch.empty((0, 4), dtype=torch.float16)
    return state


def test_auto_shuffles_floats_and_round_trips_bit_for_bit(tmp_path: Path) -> None:
    state = _state()
    zt.save(state, tmp_path / "c.zarr", compressors="auto", progress=False)
    loaded = zt.load(tmp_path / "c.zarr")
    for name, tensor in state.items():
        got = loaded[name]
        assert got.dtype == tensor.dtype and got.shape == tensor.shape
        assert torch.equal(got.view(torch.uint8) if got.element_size() == 1 else got, tensor.view(torch.uint8)
                           if tensor.element_size() == 1 else tensor), name
        names = [c["name"] for c in _inner_codecs(tmp_path / "c.zarr" / name)]
        type_name = str(tensor.dtype).removeprefix("torch.")
        if type_name in SHUFFLED:
            assert names == ["bytes", "numcodecs.shuffle", "zstd", "crc32c"], name
            shuffle = _inner_codecs(tmp_path / "c.zarr" / name)[1]["configuration"]
            assert shuffle == {"elementsize": SHUFFLED[type_name]}
        else:
            assert names == ["bytes", "zstd", "crc32c"], name


@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3")
def test_zarr_python_reads_the_shuffled_tensors(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    state = {k: v for k, v in _state().items() if k in ("float32", "float16", "float64")}
    zt.save(state, tmp_path / "c.zarr", compressors="auto", progress=False)
    group = zarr.open_group(str(tmp_path / "c.zarr"), mode="r")
    for name, tensor in state.items():
        assert np.array_equal(group[name][...], tensor.numpy()), name


def _stored(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and p.name != "zarr.json")


def test_auto_stores_bf16_weights_smaller_than_zstd(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(1)
    weights = {f"w{i}": (torch.randn(1024, 1024, generator=g) * 0.02).to(torch.bfloat16) for i in range(4)}
    raw = sum(t.numel() * 2 for t in weights.values())
    sizes = {}
    for compressors in ("zstd", "auto"):
        zt.save(weights, tmp_path / f"{compressors}.zarr", compressors=compressors, progress=False)
        sizes[compressors] = _stored(tmp_path / f"{compressors}.zarr") / raw
    # Measured: 0.78 and 0.69 (BENCHMARKS.md, "Checkpoint layouts for weights").
    assert sizes["auto"] < 0.71 < 0.76 < sizes["zstd"], sizes


def test_load_refuses_a_shuffle_of_another_element_size(tmp_path: Path) -> None:
    zt.save({"w": torch.randn(64, 64)}, tmp_path / "c.zarr", compressors="auto", progress=False)
    document = tmp_path / "c.zarr" / "w" / "zarr.json"
    text = document.read_text()
    assert '"elementsize": 4' in text
    document.write_text(text.replace('"elementsize": 4', '"elementsize": 2'))
    with pytest.raises(zd.FormatError, match="tensor 'w'"):
        zt.load(tmp_path / "c.zarr")


def test_convert_takes_auto_for_checkpoints_and_arrays(tmp_path: Path) -> None:
    safetensors = pytest.importorskip("safetensors.torch")
    state = {"w": (torch.randn(256, 512) * 0.02).to(torch.bfloat16), "ids": torch.arange(100, dtype=torch.int32)}
    safetensors.save_file(state, str(tmp_path / "m.safetensors"))
    zd.convert(tmp_path / "m.safetensors", tmp_path / "ckpt.zarr", compressors="auto", progress=False)
    assert [c["name"] for c in _inner_codecs(tmp_path / "ckpt.zarr" / "w")] == ["bytes", "numcodecs.shuffle", "zstd",
                                                                               "crc32c"]
    loaded = zt.load(tmp_path / "ckpt.zarr")
    assert torch.equal(loaded["w"], state["w"]) and torch.equal(loaded["ids"], state["ids"])
    with pytest.raises(zd.UsageError, match="crc32c"):
        zd.convert(tmp_path / "m.safetensors", tmp_path / "x.zarr", compressors="auto", checksum=False, progress=False)
    # Arrays: floats shuffled, integers not, each with the checksum convert adds by default.
    zd.create(tmp_path / "in.zarr", shape=(100, 30), dtype="float32", chunks=(50, 30))[...] = np.ones((100, 30))
    zd.create(tmp_path / "ints.zarr", shape=(100,), dtype="int16", chunks=(50,))[...] = np.arange(100)
    zd.convert(tmp_path / "in.zarr", tmp_path / "out.zarr", compressors="auto", progress=False)
    zd.convert(tmp_path / "ints.zarr", tmp_path / "ints-out.zarr", compressors="auto", progress=False)
    assert [c["name"] for c in _inner_codecs(tmp_path / "out.zarr")] == ["bytes", "numcodecs.shuffle", "zstd", "crc32c"]
    assert [c["name"] for c in _inner_codecs(tmp_path / "ints-out.zarr")] == ["bytes", "zstd", "crc32c"]
    assert np.array_equal(zd.open_array(tmp_path / "out.zarr")[...], np.ones((100, 30), dtype="float32"))


@pytest.mark.gpu
def test_auto_checkpoints_load_onto_a_gpu_as_on_the_host(tmp_path: Path) -> None:
    """Shuffled chunks with a crc32c decode and unshuffle on the GPU."""
    if zd.cuda_device_count() == 0:
        pytest.skip("no CUDA device")
    state = _state()
    zt.save(state, tmp_path / "c.zarr", compressors="auto", progress=False)
    host = zt.load(tmp_path / "c.zarr")
    device = zt.load(tmp_path / "c.zarr", device="cuda:0")
    for name, tensor in host.items():
        got = device[name]
        assert got.device.type == "cuda"
        a, b = got.cpu(), tensor
        if a.element_size() == 1:
            a, b = a.view(torch.uint8), b.view(torch.uint8)
        assert torch.equal(a, b), name
