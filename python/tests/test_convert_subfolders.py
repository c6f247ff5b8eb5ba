"""``zarr-device convert`` of a Hugging Face model folder keeps its subfolders (a
sentence-transformers model's 1_Pooling/, 2_Dense/ with its own weights) in the checkpoint's files
folder, and leaves out what is the model again in another format (onnx/, OpenVINO) and hidden
entries. The real folder is tested in test_transformers.py; this one is made here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

import zarr_device.torch as zt  # noqa: E402
from zarr_device.convert.zarr_to_zarr import convert  # noqa: E402
from zarr_device.errors import FormatError  # noqa: E402
from zarr_device.torch import interop  # noqa: E402
from zarr_device.transformers import files_path  # noqa: E402


def _model_folder(root: Path) -> Path:
    folder = root / "st-model"
    folder.mkdir()
    safetensors_torch.save_file({"w": torch.arange(6.0).reshape(2, 3)}, str(folder / "model.safetensors"),
                                metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (folder / "modules.json").write_text("[]")
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    (folder / "2_Dense").mkdir()
    safetensors_torch.save_file({"linear.weight": torch.ones(2, 2)}, str(folder / "2_Dense" / "model.safetensors"))
    (folder / "2_Dense" / "config.json").write_text("{}")
    (folder / "deep" / "er").mkdir(parents=True)
    (folder / "deep" / "er" / "notes.txt").write_text("kept")
    (folder / "onnx").mkdir()
    (folder / "onnx" / "model.onnx").write_bytes(b"the model again")
    (folder / "onnx" / "config.json").write_text("{}")
    (folder / "openvino").mkdir()
    (folder / "openvino" / "openvino_model.xml").write_text("<net/>")
    (folder / "openvino" / "openvino_model.bin").write_bytes(b"the model again")
    (folder / ".cache").mkdir()
    (folder / ".cache" / "x").write_text("hidden")
    (folder / "1_Pooling" / ".hidden").write_text("hidden")
    (folder / "elsewhere").mkdir()
    os.symlink(folder / "elsewhere", folder / "2_Dense" / "link")  # a link to a folder: not followed
    (folder / "elsewhere" / "f").write_text("once")
    return folder


def test_subfolders_are_copied_as_they_were(tmp_path: Path) -> None:
    folder = _model_folder(tmp_path)
    convert(folder, tmp_path / "c.zarr", progress=False)
    assert list(zt.load(tmp_path / "c.zarr")) == ["w"]  # the subfolders' weights are files, not tensors
    files = interop.checkpoint_files(tmp_path / "c.zarr")
    assert list(files) == [
        "config.json", "modules.json",
        "1_Pooling/config.json", "2_Dense/config.json", "2_Dense/model.safetensors", "deep/er/notes.txt",
        "elsewhere/f", "onnx/config.json",
    ]
    for name, path in files.items():
        assert path.read_bytes() == (folder / name).read_bytes(), name
    base = files_path(tmp_path / "c.zarr")
    assert sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()) == sorted(files)
    assert not (base / "openvino").exists() and not (base / ".cache").exists()


def test_a_folder_with_subfolders_only_and_a_bad_nested_name(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    safetensors_torch.save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))
    (folder / "sub").mkdir()
    (folder / "sub" / "a.json").write_text("{}")
    convert(folder, tmp_path / "c.zarr", progress=False)
    assert list(interop.checkpoint_files(tmp_path / "c.zarr")) == ["sub/a.json"]
    assert files_path(tmp_path / "c.zarr") == tmp_path / "c.zarr" / "files"

    document = json.loads((tmp_path / "c.zarr" / "zarr.json").read_text())
    document["attributes"]["zarr_device_checkpoint"]["files"]["nested"] = ["sub/../../x"]
    (tmp_path / "c.zarr" / "zarr.json").write_text(json.dumps(document))
    with pytest.raises(FormatError, match="'..', which is not a plain file name"):
        interop.checkpoint_files(tmp_path / "c.zarr")
