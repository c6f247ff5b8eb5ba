"""Checkpoint conversions (zarr_device.torch.interop, through zarr_device.convert and the CLI):
safetensors files, Hugging Face folders and torch.save files into checkpoints and back, bit for
bit; `zarr-device load`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

import zarr_device as zd  # noqa: E402
import zarr_device.torch as zt  # noqa: E402
from safetensors import safe_open  # noqa: E402
from zarr_device.tools.cli import main  # noqa: E402
from zarr_device.convert.zarr_to_zarr import convert  # noqa: E402
from zarr_device.errors import FormatError, UsageError  # noqa: E402
from zarr_device.torch import interop  # noqa: E402

ST_DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32,
    torch.uint64, torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.float8_e4m3fn,
    torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz, torch.complex64,
]


def raw(tensor: Any) -> bytes:
    return bytes(tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())


def random_bytes_tensor(dtype: Any, shape: tuple[int, ...], seed: int) -> Any:
    """Every bit pattern (NaN payloads included): random bytes viewed as ``dtype``."""
    gen = torch.Generator().manual_seed(seed)
    itemsize = torch.empty((), dtype=dtype).element_size()
    count = 1
    for s in shape:
        count *= s
    data = torch.randint(0, 256, (count * itemsize,), dtype=torch.uint8, generator=gen)
    if dtype == torch.bool:
        return (data % 2).view(torch.bool).reshape(shape)
    return data.view(dtype).reshape(shape)


def every_dtype() -> dict[str, Any]:
    tensors = {f"t.{str(d).removeprefix('torch.')}": random_bytes_tensor(d, (37, 5), i) for i, d in enumerate(ST_DTYPES)}
    tensors["scalar"] = torch.tensor(2.5, dtype=torch.bfloat16)
    tensors["empty"] = torch.zeros(0, 3, dtype=torch.float16)
    tensors["big"] = random_bytes_tensor(torch.float32, (700, 512), 99)  # over one chunk: sharded
    return tensors


def read_safetensors(path: Path) -> tuple[dict[str, bytes], dict[str, tuple[Any, list[int]]], Any]:
    with safe_open(str(path), framework="pt") as f:
        values = {k: raw(f.get_tensor(k)) for k in f.keys()}
        kinds = {k: (f.get_tensor(k).dtype, list(f.get_tensor(k).shape)) for k in f.keys()}
        return values, kinds, f.metadata()


def test_safetensors_round_trip_every_dtype(tmp_path: Path) -> None:
    tensors = every_dtype()
    source = tmp_path / "model.safetensors"
    safetensors_torch.save_file(tensors, str(source), metadata={"format": "pt", "note": "é"})
    summary = convert(source, tmp_path / "ckpt.zarr", compressors=None, progress=False)
    assert summary.arrays == len(tensors) and summary.bytes_read == sum(t.nbytes for t in tensors.values())
    assert zt.metadata(tmp_path / "ckpt.zarr") == {"format": "pt", "note": "é"}
    loaded = zt.load(tmp_path / "ckpt.zarr")
    assert {k: raw(v) for k, v in loaded.items()} == {k: raw(v) for k, v in tensors.items()}
    assert all(loaded[k].dtype == v.dtype and loaded[k].shape == v.shape for k, v in tensors.items())

    back = tmp_path / "back.safetensors"
    convert(tmp_path / "ckpt.zarr", back, progress=False)
    values, kinds, metadata = read_safetensors(back)
    assert values == {k: raw(v) for k, v in tensors.items()}
    assert kinds == {k: (v.dtype, list(v.shape)) for k, v in tensors.items()}
    assert metadata == {"format": "pt", "note": "é"}
    assert not [p for p in os.listdir(tmp_path) if ".partial-" in p]


def test_zstd_checkpoint_and_metadata_json(tmp_path: Path) -> None:
    tensors = {"w": random_bytes_tensor(torch.bfloat16, (64, 64), 1)}
    zt.save(tensors, tmp_path / "c.zarr", metadata={"step": 7, "lr": [1, 2]}, progress=False)
    convert(tmp_path / "c.zarr", tmp_path / "c.safetensors", progress=False)
    convert(tmp_path / "c.safetensors", tmp_path / "d.zarr", compressors="zstd", progress=False)
    assert zt.metadata(tmp_path / "d.zarr") == {"step": 7, "lr": [1, 2]}  # kept as JSON
    assert raw(zt.load(tmp_path / "d.zarr")["w"]) == raw(tensors["w"])
    attrs = json.loads((tmp_path / "d.zarr" / "w" / "zarr.json").read_text())
    assert "zstd" in json.dumps(attrs["codecs"])


def test_tied_round_trip(tmp_path: Path) -> None:
    embed = random_bytes_tensor(torch.float16, (50, 8), 3)
    state = {"embed.weight": embed, "lm_head.weight": embed, "norm": torch.ones(8)}
    zt.save(state, tmp_path / "c.zarr", progress=False)
    convert(tmp_path / "c.zarr", tmp_path / "c.safetensors", progress=False)
    values, _kinds, metadata = read_safetensors(tmp_path / "c.safetensors")
    # Every name holds its values (a copy), and the tie is listed for the way back.
    assert values["lm_head.weight"] == values["embed.weight"] == raw(embed)
    assert json.loads(metadata[interop.TIED_KEY]) == {"lm_head.weight": "embed.weight"}
    convert(tmp_path / "c.safetensors", tmp_path / "d.zarr", progress=False)
    loaded = zt.load(tmp_path / "d.zarr")
    assert loaded["lm_head.weight"] is loaded["embed.weight"] and raw(loaded["embed.weight"]) == raw(embed)
    assert zt.metadata(tmp_path / "d.zarr") is None
    convert(tmp_path / "d.zarr", tmp_path / "e.safetensors", progress=False)
    assert read_safetensors(tmp_path / "e.safetensors") == read_safetensors(tmp_path / "c.safetensors")


def test_edited_tie_is_not_restored(tmp_path: Path) -> None:
    a, b = torch.zeros(4), torch.ones(4)
    safetensors_torch.save_file({"a": a, "b": b}, str(tmp_path / "m.safetensors"),
                                metadata={interop.TIED_KEY: json.dumps({"b": "a"})})
    convert(tmp_path / "m.safetensors", tmp_path / "c.zarr", progress=False)
    loaded = zt.load(tmp_path / "c.zarr")
    assert raw(loaded["b"]) == raw(b) and loaded["b"] is not loaded["a"]


def write_hf_folder(folder: Path, tensors: dict[str, Any]) -> None:
    folder.mkdir()
    names = list(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for shard, members in shards.items():
        safetensors_torch.save_file({n: tensors[n] for n in members}, str(folder / shard), metadata={"format": "pt"})
        weight_map.update({n: shard for n in members})
    (folder / interop.INDEX_NAME).write_text(json.dumps({"metadata": {"total_size": 1}, "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps({"model_type": "tiny", "hidden_size": 8}))
    (folder / "tokenizer.json").write_text('{"version": "1.0"}')
    (folder / "pytorch_model.bin").write_bytes(b"not copied: the same weights")


def test_huggingface_folder(tmp_path: Path) -> None:
    tensors = every_dtype()
    tensors["files"] = torch.arange(3)  # a tensor named as the files folder would be
    write_hf_folder(tmp_path / "hf", tensors)
    summary = convert(tmp_path / "hf", tmp_path / "c.zarr", progress=False)
    assert summary.arrays == len(tensors)
    loaded = zt.load(tmp_path / "c.zarr")
    assert {k: raw(v) for k, v in loaded.items()} == {k: raw(v) for k, v in tensors.items()}
    files = interop.checkpoint_files(tmp_path / "c.zarr")
    assert sorted(files) == ["config.json", "tokenizer.json"]
    assert files["config.json"].parent.name == "files-1"
    assert json.loads(files["config.json"].read_text())["model_type"] == "tiny"
    assert zt.metadata(tmp_path / "c.zarr") == {"format": "pt"}


def test_torch_save_file(tmp_path: Path) -> None:
    embed = random_bytes_tensor(torch.bfloat16, (20, 4), 5)
    state = {"embed": embed, "head": embed, "step": torch.tensor(3), "v": torch.arange(10)[::2]}
    torch.save(state, tmp_path / "model.pt")
    summary = convert(tmp_path / "model.pt", tmp_path / "c.zarr", progress=False)
    assert summary.arrays == 3  # head is tied to embed
    loaded = zt.load(tmp_path / "c.zarr")
    assert loaded["head"] is loaded["embed"]
    assert {k: raw(v) for k, v in loaded.items()} == {k: raw(v) for k, v in state.items()}


@pytest.mark.parametrize("payload", [{"w": torch.ones(2), "step": 5}, {"model": {"w": torch.ones(2)}}, [torch.ones(2)]])
def test_torch_save_not_a_state_dict(tmp_path: Path, payload: Any) -> None:
    torch.save(payload, tmp_path / "bad.pt")
    with pytest.raises(interop.NotAStateDictError):
        convert(tmp_path / "bad.pt", tmp_path / "c.zarr", progress=False)
    assert os.listdir(tmp_path) == ["bad.pt"]


def test_torch_save_with_objects_refused(tmp_path: Path) -> None:
    torch.save({"w": torch.ones(2), "opt": torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1)},
               tmp_path / "bad.pt")
    with pytest.raises(FormatError):
        convert(tmp_path / "bad.pt", tmp_path / "c.zarr", progress=False)
    assert os.listdir(tmp_path) == ["bad.pt"]


def test_failing_conversion_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tensors = every_dtype()
    safetensors_torch.save_file(tensors, str(tmp_path / "m.safetensors"))
    calls = {"n": 0}
    real = interop.TensorEntry.__init__

    def failing(self: Any, name: str, *args: Any) -> None:
        real(self, name, *args)
        calls["n"] += 1
        if calls["n"] == 5:
            object.__setattr__(self, "get", lambda: (_ for _ in ()).throw(OSError("disk gone")))

    monkeypatch.setattr(interop.TensorEntry, "__init__", failing)
    with pytest.raises(OSError, match="disk gone"):
        convert(tmp_path / "m.safetensors", tmp_path / "c.zarr", progress=False)
    assert os.listdir(tmp_path) == ["m.safetensors"]
    monkeypatch.undo()

    zt.save({"w": torch.ones(3)}, tmp_path / "c.zarr", progress=False)
    monkeypatch.setattr(interop, "_as_bytes", lambda t: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError):
        convert(tmp_path / "c.zarr", tmp_path / "out.safetensors", progress=False)
    assert sorted(os.listdir(tmp_path)) == ["c.zarr", "m.safetensors"]


def test_refusals(tmp_path: Path) -> None:
    zt.save({"w": torch.ones(3, dtype=torch.complex128)}, tmp_path / "c.zarr", progress=False)
    with pytest.raises(UsageError, match="safetensors has no type"):
        convert(tmp_path / "c.zarr", tmp_path / "out.safetensors", progress=False)
    (tmp_path / "out.safetensors").write_bytes(b"x")
    with pytest.raises(UsageError, match="exists"):
        convert(tmp_path / "c.zarr", tmp_path / "out.safetensors", progress=False)
    safetensors_torch.save_file({"w": torch.ones(2)}, str(tmp_path / "m.safetensors"))
    with pytest.raises(UsageError, match="do not apply"):
        convert(tmp_path / "m.safetensors", tmp_path / "d.zarr", chunks="1MiB", progress=False)
    with pytest.raises(UsageError, match="not a checkpoint"):
        convert(tmp_path / "m.safetensors", tmp_path / "x.safetensors", progress=False)


def test_overwrite_safetensors(tmp_path: Path) -> None:
    zt.save({"w": torch.ones(3)}, tmp_path / "c.zarr", progress=False)
    (tmp_path / "out.safetensors").write_bytes(b"old")
    convert(tmp_path / "c.zarr", tmp_path / "out.safetensors", overwrite=True, progress=False)
    assert read_safetensors(tmp_path / "out.safetensors")[0] == {"w": raw(torch.ones(3))}


def test_cli_convert_and_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tensors = {"a": torch.randn(30, 4), "b": torch.arange(5)}
    safetensors_torch.save_file(tensors, str(tmp_path / "m.safetensors"))
    ckpt, out = str(tmp_path / "c.zarr"), str(tmp_path / "o.safetensors")
    assert main(["convert", str(tmp_path / "m.safetensors"), ckpt, "--quiet", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["arrays"] == 2
    assert main(["convert", ckpt, out, "--quiet", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["destination"] == out
    assert main(["load", ckpt, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["kind"], report["tensors"], report["bytes"]) == ("checkpoint", 2, 30 * 4 * 4 + 5 * 8)
    assert report["seconds"] > 0 and report["gb_per_s"] > 0
    assert main(["load", ckpt, "--keys", "b"]) == 0
    assert "1 tensor" in capsys.readouterr().out
    # Any Zarr group: every array below it.

    group = zd.create_group(str(tmp_path / "g.zarr"))
    group.create_array("x", shape=(10,), dtype="float32", chunks=(5,))
    assert main(["load", str(tmp_path / "g.zarr"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["kind"], report["tensors"], report["bytes"]) == ("zarr", 1, 40)
    args = ["convert", str(tmp_path / "m.safetensors"), str(tmp_path / "c2.zarr"), "--chunks", "1MiB", "--quiet"]
    assert main(args) == 1  # one layout for checkpoints
    assert "do not apply" in capsys.readouterr().err


def _chunk_codec_names(array_dir: Path) -> list[str]:
    codecs = json.loads((array_dir / "zarr.json").read_text())["codecs"]
    if codecs[0]["name"] == "sharding_indexed":
        codecs = codecs[0]["configuration"]["codecs"]
    return [c["name"] for c in codecs]


@pytest.mark.parametrize(("compressor", "checksum", "codecs"), [
    ("none", None, ["bytes"]),
    ("none", True, ["bytes", "crc32c"]),
    ("zstd", None, ["bytes", "zstd", "crc32c"]),
    ("zstd", True, ["bytes", "zstd", "crc32c"]),
])
def test_converted_checkpoints_carry_the_checksum_asked_for(
    tmp_path: Path, compressor: str, checksum: bool | None, codecs: list[str]
) -> None:
    """`convert --checksum` puts a crc32c on an uncompressed checkpoint's chunks (zstd ones always
    have one), which every read checks: a byte changed on the disk is a ChecksumError naming the
    tensor; without it, the documented limit: sizes only."""
    tensors = {"w": random_bytes_tensor(torch.float32, (700, 512), 5), "b": random_bytes_tensor(torch.bfloat16, (9,), 6)}
    safetensors_torch.save_file(tensors, str(tmp_path / "m.safetensors"))
    ckpt = tmp_path / "c.zarr"
    flag = [] if checksum is None else ["--checksum"]
    assert main(["convert", str(tmp_path / "m.safetensors"), str(ckpt), "--compressor", compressor, "--quiet", *flag]) == 0
    assert _chunk_codec_names(ckpt / "w") == codecs
    assert {k: raw(v) for k, v in zt.load(ckpt).items()} == {k: raw(v) for k, v in tensors.items()}
    stored = sorted(p for p in (ckpt / "w").rglob("*") if p.is_file() and p.name != "zarr.json")
    data = bytearray(stored[0].read_bytes())
    data[len(data) // 3] ^= 0x10
    stored[0].write_bytes(bytes(data))
    if "crc32c" not in codecs:
        assert raw(zt.load(ckpt)["w"]) != raw(tensors["w"])  # a wrong value, unnoticed
        return
    with pytest.raises(zd.ChecksumError, match="array 'w'"):
        zt.load(ckpt)
    assert raw(zt.load(ckpt, keys=["b"])["b"]) == raw(tensors["b"])


def test_checkpoint_checksum_options_that_cannot_hold(tmp_path: Path) -> None:
    safetensors_torch.save_file({"w": torch.ones(4)}, str(tmp_path / "m.safetensors"))
    with pytest.raises(UsageError, match="always end with a crc32c"):
        convert(tmp_path / "m.safetensors", tmp_path / "c.zarr", compressors="zstd", checksum=False, progress=False)
    zt.save({"w": torch.ones(4)}, tmp_path / "d.zarr", progress=False)
    with pytest.raises(UsageError, match="checksum do not apply"):
        convert(tmp_path / "d.zarr", tmp_path / "d.safetensors", checksum=True, progress=False)
    assert sorted(os.listdir(tmp_path)) == ["d.zarr", "m.safetensors"]
