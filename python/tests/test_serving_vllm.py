"""The vLLM plug-in (``--load-format zarr``): finding the checkpoint, the loader's options and
device, here without vLLM; then, where vLLM is installed (scripts/setup.sh puts it, without its
dependencies, in a folder of its own: requirements-vllm.txt), in processes that import it:
its plug-in loading finds the entry point in pyproject.toml, and its own Llama is built with
tensor parallelism over two CPU processes and filled from a converted checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import zarr_device as zd
import zarr_device.torch as zt
from zarr_device.errors import UsageError
from zarr_device.vllm import find_checkpoint, loader_options, weights_device

REPO = Path(__file__).resolve().parents[2]
HELPERS = Path(__file__).resolve().parent / "vllm_helpers.py"
# Where scripts/setup.sh installs it: beside the virtual environment.
VLLM_TARGET = Path(os.environ.get("ZARR_DEVICE_VLLM_TARGET", Path(sys.prefix).parent / "vllm-target"))

needs_vllm = pytest.mark.skipif(
    not (VLLM_TARGET / "vllm" / "__init__.py").is_file(),
    reason=f"vLLM is not installed in {VLLM_TARGET} (scripts/setup.sh, requirements-vllm.txt)",
)


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama as a Hugging Face model folder (config.json, model.safetensors), tied
    embeddings (so the file holds no lm_head), a vocabulary that does not split evenly."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                      num_key_value_heads=2, num_hidden_layers=2, vocab_size=100,
                                      max_position_embeddings=128, tie_word_embeddings=True)
    folder = tmp_path_factory.mktemp("llama") / "hf"
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def llama_checkpoint(llama_folder: Path) -> Path:
    path = llama_folder.parent / "llama.zarr"
    zd.convert(llama_folder, path, progress=False)
    return path


def test_the_checkpoint_is_found_from_the_model_path(llama_checkpoint: Path, tmp_path: Path) -> None:
    files = llama_checkpoint / "files"
    assert (files / "config.json").is_file()
    assert find_checkpoint(files) == llama_checkpoint.resolve()  # `vllm serve llama.zarr/files`
    assert find_checkpoint(llama_checkpoint) == llama_checkpoint  # the checkpoint itself
    assert find_checkpoint(tmp_path, given=llama_checkpoint) == llama_checkpoint
    with pytest.raises(UsageError, match="neither a zarr-device checkpoint nor the files folder"):
        find_checkpoint(tmp_path)
    # A folder that is not the checkpoint's files folder, though inside it, is not taken.
    other = llama_checkpoint / "model"
    with pytest.raises(UsageError, match="neither"):
        find_checkpoint(other)
    with pytest.raises(UsageError, match="'checkpoint' extra config"):
        find_checkpoint(files, given=tmp_path)
    # The weights vLLM's model will be given are the folder's, by the folder's names.
    weights = dict(zt.iter_weights(find_checkpoint(files)))
    from safetensors.torch import load_file

    reference = load_file(str(files.parent.parent / "hf" / "model.safetensors"))
    assert weights.keys() == reference.keys()
    assert all(torch.equal(weights[name], tensor) for name, tensor in reference.items())


def test_loader_options() -> None:
    assert loader_options(None) == {} and loader_options({}) == {}
    assert loader_options({"device": "cpu", "window_bytes": "256MiB"}) == {"device": "cpu", "window_bytes": "256MiB"}
    with pytest.raises(UsageError, match="'devise'.*device:"):
        loader_options({"devise": "cpu"})
    with pytest.raises(UsageError, match="must be a dict"):
        loader_options("device=cpu")
    assert isinstance(UsageError("x"), ValueError)  # what vLLM expects of a bad extra config


def test_weights_land_where_the_model_is() -> None:
    on = [SimpleNamespace(device=torch.device("meta")), SimpleNamespace(device=torch.device("cuda", 1))]
    assert weights_device(on) == "cuda:1"  # the rank's GPU, where vLLM built the model
    assert weights_device([SimpleNamespace(device=torch.device("cpu"))]) == "cpu"
    assert weights_device([]) == "cpu"
    assert weights_device(on, given="cpu") == "cpu"


def test_importing_the_plugin_needs_no_vllm() -> None:
    code = "import sys, zarr_device.vllm; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "False"


def _run_with_vllm(*args: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*sys.path, str(VLLM_TARGET)]),
           "VLLM_LOGGING_LEVEL": "WARNING", "VLLM_PLUGINS": "zarr_device"}
    out = subprocess.run([sys.executable, str(HELPERS), *args], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@needs_vllm
def test_vllm_finds_and_registers_the_plugin(tmp_path: Path) -> None:
    # The entry point as pyproject.toml declares it, in a dist-info of its own (the tests run
    # from the source tree, where zarr-device's own dist-info may be older or absent).
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    group = project["project"]["entry-points"]["vllm.general_plugins"]
    assert group == {"zarr_device": "zarr_device.vllm:register"}
    info = tmp_path / "zarr_device_vllm_plugin-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zarr-device-vllm-plugin\nVersion: 0.0\n")
    lines = "".join(f"{name} = {target}\n" for name, target in group.items())
    (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{lines}")
    result = _run_with_vllm("plugins", str(tmp_path))
    assert result["registered_before"] is False
    assert result["loader"] == "zarr_device.vllm.ZarrModelLoader"
    assert result["is_base_loader"] is True and result["same_class"] is True
    assert result["options"] == {"device": "cpu"}
    assert "'devise'" in str(result["refused"])


@needs_vllm
@pytest.mark.slow
def test_vllm_llama_with_tensor_parallelism_loads_from_zarr(llama_checkpoint: Path, llama_folder: Path) -> None:
    result = _run_with_vllm("llama", str(llama_checkpoint / "files"), str(llama_folder / "model.safetensors"), "2")
    ranks = result["ranks"]
    assert isinstance(ranks, list) and [r["rank"] for r in ranks] == [0, 1]
    for rank in ranks:
        assert "error" not in rank, rank.get("error")
        assert rank["class"] == "LlamaForCausalLM"
        assert rank["qkv_shape"] == [(64 + 2 * 32) // 2, 64]  # q (4 heads) + k, v (2 heads each) of 16, halved
        assert len(rank["checks"]) == 2 * 5 + 2
        failed = [name for name, ok in rank["checks"].items() if not ok]
        assert not failed, (rank["rank"], failed)
