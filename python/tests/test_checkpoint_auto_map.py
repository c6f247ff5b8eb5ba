"""device_map="auto": planning a device map from tensor sizes and each device's memory. The
planner is pure, so it is tested with made-up devices and memory figures; loads run on the CPU,
and on the GPUs where there are some."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import zarr_device.torch as zt
from zarr_device.errors import UsageError
from zarr_device.torch import auto_map
from zarr_device.torch.auto_map import block_of, gpu_reserve, memory_budgets, plan_auto_device_map
from zarr_device.torch.device_map import plan_device_map

MiB = 1 << 20


def llama_like(layers: int, layer: int = 100, embed: int = 50) -> dict[str, int]:
    """Sizes of a decoder-only model's tensors, in the order transformers saves them; each
    layer's two tensors add up to ``layer`` bytes."""
    sizes = {"model.embed_tokens.weight": embed}
    for i in range(layers):
        sizes[f"model.layers.{i}.self_attn.q_proj.weight"] = layer * 3 // 5
        sizes[f"model.layers.{i}.mlp.down_proj.weight"] = layer - layer * 3 // 5
    sizes["model.norm.weight"] = 1
    sizes["lm_head.weight"] = embed
    return sizes


def devices_of(sizes: Mapping[str, int], device_map: Mapping[str, str]) -> dict[str, str]:
    """Each name's device, as load applies the map."""
    return {name: device for device, names in plan_device_map(list(sizes), device_map).items() for name in names}


def layer_devices(sizes: Mapping[str, int], device_map: Mapping[str, str], layers: int) -> list[str]:
    devices = devices_of(sizes, device_map)
    return [devices[f"model.layers.{i}.self_attn.q_proj.weight"] for i in range(layers)]


# ---------------------------------------------------------------------------------------------
# Blocks


@pytest.mark.parametrize("name, block", [
    ("model.layers.7.self_attn.q_proj.weight", "model.layers.7"),
    ("model.layers.0.mlp.experts.3.w1", "model.layers.0"),  # the outermost numbered module
    ("transformer.h.11.attn.c_attn.bias", "transformer.h.11"),
    ("0.weight", "0"),  # an nn.Sequential
    ("model.embed_tokens.weight", "model.embed_tokens"),
    ("lm_head.weight", "lm_head"),
    ("scale", "scale"),
    ("params.3", "params.3"),  # a ParameterList's element is its own block
])
def test_default_blocks(name: str, block: str) -> None:
    assert block_of(name) == block


def test_blocks_by_patterns() -> None:
    name = "model.layers.7.self_attn.q_proj.weight"
    assert block_of(name, ["model.layers.*.self_attn"]) == "model.layers.7.self_attn"
    assert block_of(name, ["model.*"]) == "model.layers"  # the shortest prefix a pattern matches
    assert block_of(name, []) == "model.layers.7.self_attn.q_proj"  # finest: the tensor's module
    assert block_of("lm_head.weight", ["model.layers.*"]) == "lm_head"


# ---------------------------------------------------------------------------------------------
# Planning


def test_everything_fits_one_gpu() -> None:
    sizes = llama_like(4)
    assert plan_auto_device_map(sizes, {"cuda:0": 10_000, "cpu": 10_000}) == {"": "cuda:0"}
    # Sequential fills the first GPU before the next: the second stays empty.
    assert plan_auto_device_map(sizes, {"cuda:0": 10_000, "cuda:1": 10_000}, strategy="sequential") == {"": "cuda:0"}


def test_sequential_spills_to_the_second_gpu() -> None:
    sizes = llama_like(6)  # 50 + 6 * 100 + 1 + 50
    device_map = plan_auto_device_map(sizes, {"cuda:0": 360, "cuda:1": 1000}, strategy="sequential")
    # cuda:0 takes the embedding and three whole layers (350 bytes); the fourth does not fit.
    assert layer_devices(sizes, device_map, 6) == ["cuda:0"] * 3 + ["cuda:1"] * 3
    assert device_map == {
        "model.embed_tokens": "cuda:0",
        "model.layers.0": "cuda:0",
        "model.layers.1": "cuda:0",
        "model.layers.2": "cuda:0",
        "model.layers.3": "cuda:1",
        "model.layers.4": "cuda:1",
        "model.layers.5": "cuda:1",
        "model.norm": "cuda:1",
        "lm_head": "cuda:1",
    }


def test_balanced_shares_the_model_between_gpus() -> None:
    sizes = llama_like(8, embed=0)
    even = plan_auto_device_map(sizes, {"cuda:0": 10_000, "cuda:1": 10_000, "cpu": 10_000})
    assert layer_devices(sizes, even, 8) == ["cuda:0"] * 4 + ["cuda:1"] * 4
    # In proportion to what each offers: three quarters on the GPU with three times the memory.
    skewed = plan_auto_device_map(sizes, {"cuda:0": 3000, "cuda:1": 1000})
    assert layer_devices(sizes, skewed, 8) == ["cuda:0"] * 6 + ["cuda:1"] * 2
    # "auto" and "balanced" are the same plan.
    assert plan_auto_device_map(sizes, {"cuda:0": 3000, "cuda:1": 1000}, strategy="balanced") == skewed


def test_balanced_fills_in_order_when_the_gpus_are_not_enough() -> None:
    sizes = llama_like(8, embed=0)
    device_map = plan_auto_device_map(sizes, {"cuda:0": 300, "cuda:1": 300, "cpu": 10_000})
    assert layer_devices(sizes, device_map, 8) == ["cuda:0"] * 3 + ["cuda:1"] * 3 + ["cpu"] * 2
    devices = devices_of(sizes, device_map)
    assert devices["model.norm.weight"] == devices["lm_head.weight"] == "cpu"


def test_spill_to_the_cpu() -> None:
    sizes = llama_like(4)
    device_map = plan_auto_device_map(sizes, {"cuda:0": 260, "cpu": 1000})
    assert layer_devices(sizes, device_map, 4) == ["cuda:0", "cuda:0", "cpu", "cpu"]
    assert device_map["model.embed_tokens"] == "cuda:0" and device_map["lm_head"] == "cpu"


def test_a_block_is_never_split() -> None:
    # Each layer's first tensor would fit in what cuda:0 has left; the layer as a whole does not.
    sizes = llama_like(3)
    device_map = plan_auto_device_map(sizes, {"cuda:0": 220, "cuda:1": 1000}, strategy="sequential")
    devices = devices_of(sizes, device_map)
    for i in range(3):
        assert devices[f"model.layers.{i}.self_attn.q_proj.weight"] == devices[f"model.layers.{i}.mlp.down_proj.weight"]
    assert layer_devices(sizes, device_map, 3) == ["cuda:0", "cuda:1", "cuda:1"]
    # With the finest blocks (each tensor's module), the first layer's second half moves on.
    fine = plan_auto_device_map(sizes, {"cuda:0": 220, "cuda:1": 1000}, strategy="sequential", modules=[])
    assert devices_of(sizes, fine)["model.layers.1.self_attn.q_proj.weight"] == "cuda:0"


def test_a_module_larger_than_any_device_is_named() -> None:
    sizes = llama_like(2, layer=3 * MiB)
    with pytest.raises(UsageError) as e:
        plan_auto_device_map(sizes, {"cuda:0": 2 * MiB, "cuda:1": 2 * MiB, "cpu": 2 * MiB})
    message = str(e.value)
    assert "module 'model.layers.0'" in message and "3 MiB" in message
    assert "cuda:0 2 MiB" in message and "cpu 2 MiB" in message


def test_a_model_larger_than_all_devices() -> None:
    sizes = llama_like(4)
    with pytest.raises(UsageError, match=r"does not fit: module 'model.layers.2'.*cuda:1 "):
        plan_auto_device_map(sizes, {"cuda:0": 160, "cuda:1": 120})


def test_tied_tensors_count_once_and_go_with_their_first_user() -> None:
    sizes = llama_like(2, embed=300)
    storage = {"lm_head.weight": "model.embed_tokens.weight"}
    # 300 + 200 + 1 (+ 300 again if the tie counted twice).
    assert plan_auto_device_map(sizes, {"cuda:0": 501}, storage=storage) == {"": "cuda:0"}
    with pytest.raises(UsageError, match="does not fit"):
        plan_auto_device_map(sizes, {"cuda:0": 501})
    # Balanced over two GPUs: lm_head stays with the embedding, though it comes last.
    device_map = plan_auto_device_map(sizes, {"cuda:0": 1000, "cuda:1": 1000}, storage=storage)
    devices = devices_of(sizes, device_map)
    assert devices["lm_head.weight"] == devices["model.embed_tokens.weight"] == "cuda:0"
    assert devices["model.layers.1.mlp.down_proj.weight"] == "cuda:1"
    # A tie whose blocks do not fit together is named with both.
    sizes_two = {"model.embed_tokens.weight": 300, "model.embed_tokens.scale": 10, "lm_head.weight": 300,
                 "lm_head.bias": 290}
    with pytest.raises(UsageError, match=r"modules 'model.embed_tokens', 'lm_head' \(tied\) needs 600 B"):
        plan_auto_device_map(sizes_two, {"cuda:0": 599, "cpu": 599},
                             storage={"lm_head.weight": "model.embed_tokens.weight"})


def test_compact_maps_keep_dot_boundaries() -> None:
    # "model.layers.1" does not cover "model.layers.10": the map must say so.
    sizes = {f"model.layers.{i}.w": 100 for i in range(11)} | {"model.layers.1": 1}
    device_map = plan_auto_device_map(sizes, {"cuda:0": 150, "cuda:1": 10_000}, strategy="sequential")
    devices = devices_of(sizes, device_map)
    assert devices["model.layers.0.w"] == "cuda:0"
    assert all(devices[f"model.layers.{i}.w"] == "cuda:1" for i in range(1, 11))
    assert devices["model.layers.1"] == "cuda:1"


def test_empty_and_odd_names() -> None:
    assert plan_auto_device_map({}, {"cuda:0": 1}) == {}
    sizes = {"a..b": 10, ".w": 10, "c.b": 10, "a": 10}
    device_map = plan_auto_device_map(sizes, {"cuda:0": 15, "cuda:1": 15, "cuda:2": 15, "cpu": 15},
                                      strategy="sequential")
    assert devices_of(sizes, device_map) == {"a..b": "cuda:0", ".w": "cuda:1", "c.b": "cuda:2", "a": "cpu"}


def test_bad_arguments() -> None:
    with pytest.raises(UsageError, match="strategy"):
        plan_auto_device_map({"w": 1}, {"cpu": 1}, strategy="greedy")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="modules must be a list"):
        plan_auto_device_map({"w": 1}, {"cpu": 1}, modules="model.layers.*")


NAME = st.lists(st.sampled_from(["model", "layers", "0", "1", "2", "10", "mlp", "w", "b", "lm_head"]),
                min_size=1, max_size=4).map(".".join)


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.dictionaries(NAME, st.integers(0, 100), max_size=16),
    budgets=st.lists(st.integers(0, 400), min_size=1, max_size=4),
    cpu=st.integers(0, 400),
    ties=st.lists(st.tuples(st.integers(0, 15), st.integers(0, 15)), max_size=3),
    strategy=st.sampled_from(["balanced", "sequential"]),
    patterns=st.sampled_from([None, [], ["model.layers.*"], ["*"]]),
)
def test_plans_respect_budgets_blocks_ties_and_order(
    sizes: dict[str, int], budgets: list[int], cpu: int, ties: list[tuple[int, int]], strategy: str,
    patterns: list[str] | None,
) -> None:
    names = list(sizes)
    max_memory = {f"cuda:{i}": b for i, b in enumerate(budgets)} | {"cpu": cpu}
    storage = {name: name for name in names}
    for a, b in ties:  # the later name shares the earlier one's storage (and size)
        if a < len(names) and b < len(names) and a < b:
            storage[names[b]] = storage[names[a]]
            sizes[names[b]] = sizes[names[a]]
    try:
        device_map = plan_auto_device_map(sizes, max_memory, storage=storage, modules=patterns,
                                          strategy=strategy)  # type: ignore[arg-type]
    except UsageError as e:
        assert "does not fit" in str(e) or "more than any device" in str(e)
        return
    devices = devices_of(sizes, device_map)
    assert set(devices) == set(names)
    used: dict[str, int] = {}
    for key in dict.fromkeys(storage[name] for name in names):
        holders = {devices[name] for name in names if storage[name] == key}
        assert len(holders) == 1, "a tied tensor is on one device"
        device = holders.pop()
        used[device] = used.get(device, 0) + sizes[key]  # counted once
    for device, total in used.items():
        assert total <= max_memory[device], (device, total)
    blocks: dict[str, str] = {}
    for name in names:
        block = block_of(name, patterns)
        assert blocks.setdefault(block, devices[name]) == devices[name], "a block is on one device"
    # Untied blocks are placed in order: their devices never go back.
    order = list(max_memory)
    tied_blocks = {block_of(n, patterns) for n in names if sum(storage[m] == storage[n] for m in names) > 1}
    seen = [order.index(blocks[b]) for b in dict.fromkeys(block_of(n, patterns) for n in names) if b not in tied_blocks]
    assert seen == sorted(seen)


# ---------------------------------------------------------------------------------------------
# Budgets


def test_memory_budgets() -> None:
    budgets = memory_budgets({"cpu": "1GiB", 1: "512MiB", torch.device("cuda", 0): 1000, "cuda:2": 0})
    assert budgets == {"cuda:1": 512 * MiB, "cuda:0": 1000, "cpu": 1 << 30}
    assert list(budgets) == ["cuda:1", "cuda:0", "cpu"]  # the order given, the CPU last, empty ones out
    for bad, match in [
        ({"cuda": 1}, "by its index"),
        ({0: 1, "cuda:0": 2}, "twice"),
        ({"cpu": "lots"}, "not a size"),
        ({"cpu": -1}, "at least"),
        ({"meta": 1}, "holds no values"),
        ([("cpu", 1)], "must be a dict"),
    ]:
        with pytest.raises(UsageError, match=match):
            memory_budgets(bad)  # type: ignore[arg-type]


def test_default_budgets_come_from_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    assert gpu_reserve(100 << 30, 2816 * MiB) == 10 << 30
    assert gpu_reserve(8 << 30, 2816 * MiB) == 2816 * MiB  # never below the read's working memory
    assert auto_map.host_available() > 0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    gib = 1 << 30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: ((50 - 40 * i) * gib, 80 * gib))
    monkeypatch.setattr(auto_map, "host_available", lambda: 64 * gib)
    from zarr_device.basics.config import get_config

    staging = get_config().staging_bytes
    assert memory_budgets(None) == {"cuda:0": 42 * gib, "cuda:1": 2 * gib, "cpu": 64 * gib - staging}


# ---------------------------------------------------------------------------------------------
# Loading


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    embed = torch.randn(64, 32, generator=g)
    state = {"model.embed_tokens.weight": embed}
    for i in range(3):
        state[f"model.layers.{i}.attn.weight"] = torch.randn(32, 32, generator=g)
        state[f"model.layers.{i}.attn.bias"] = torch.randn(32, generator=g)
    state["model.norm.weight"] = torch.ones(32, dtype=torch.bfloat16)
    state["lm_head.weight"] = embed  # tied
    return state


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "ck.zarr"
    zt.save(_state(), path, progress=False)
    return path


LAYER = (32 * 32 + 32) * 4


def test_auto_device_map_from_a_checkpoint(checkpoint: Path) -> None:
    embed = 64 * 32 * 4
    # Ties count once: the embedding and lm_head are one tensor, with the embedding on cuda:0.
    device_map = zt.auto_device_map(checkpoint, strategy="sequential",
                                    max_memory={0: embed + LAYER, 1: 2 * LAYER + 64})
    assert device_map == {"model.embed_tokens": "cuda:0", "model.layers.0": "cuda:0", "model.layers.1": "cuda:1",
                          "model.layers.2": "cuda:1", "model.norm": "cuda:1", "lm_head": "cuda:0"}
    # dtype counts: cast to float16, a float32 tensor still takes its stored size while it loads,
    # and a bfloat16 one its float16 size; keys= plans only the tensors loaded.
    half = zt.auto_device_map(checkpoint, max_memory={"cpu": LAYER + 64}, dtype=torch.float16,
                              keys=["model.layers.0.attn.weight", "model.layers.0.attn.bias", "model.norm.weight"])
    assert half == {"": "cpu"}
    with pytest.raises(UsageError, match="does not fit"):
        zt.auto_device_map(checkpoint, max_memory={"cpu": LAYER + 63}, dtype=torch.float16,
                           keys=["model.layers.0.attn.weight", "model.layers.0.attn.bias", "model.norm.weight"])
    # Cast to float64, every tensor takes its cast size.
    wide = ["model.layers.0.attn.weight", "model.layers.0.attn.bias", "model.norm.weight"]
    assert zt.auto_device_map(checkpoint, max_memory={"cpu": 2 * LAYER + 256}, dtype=torch.float64, keys=wide)
    with pytest.raises(UsageError, match="does not fit"):
        zt.auto_device_map(checkpoint, max_memory={"cpu": 2 * LAYER + 255}, dtype=torch.float64, keys=wide)
    with pytest.raises(UsageError, match="strategy"):
        zt.auto_device_map(checkpoint, strategy="balanced_low_0")
    with pytest.raises(UsageError, match="dtype must be"):
        zt.auto_device_map(checkpoint, dtype=torch.int8)


def test_load_auto_on_the_cpu(checkpoint: Path) -> None:
    loaded = zt.load(checkpoint, device_map="auto", max_memory={"cpu": "1MiB"})
    state = _state()
    assert list(loaded) == list(state)
    for name, tensor in state.items():
        assert loaded[name].device.type == "cpu" and torch.equal(loaded[name], tensor), name
    assert loaded["lm_head.weight"] is loaded["model.embed_tokens.weight"]
    # Without max_memory: the machine's own figures (here, without a GPU, the CPU's).
    assert zt.load(checkpoint, device_map="auto").keys() == state.keys()
    with pytest.raises(UsageError, match=r"modules 'model.embed_tokens', 'lm_head' \(tied\) needs 8 KiB.*cpu 1000 B"):
        zt.load(checkpoint, device_map="sequential", max_memory={"cpu": 1000})


def test_load_into_auto(checkpoint: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = torch.nn.Linear(32, 32)

    class Inner(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed_tokens = torch.nn.Embedding(64, 32)
            self.layers = torch.nn.ModuleList(Block() for _ in range(3))
            self.norm = torch.nn.Module()
            self.norm.weight = torch.nn.Parameter(torch.ones(32, dtype=torch.bfloat16))

    class Model(torch.nn.Module):
        _no_split_modules = ["Block"]

        def __init__(self) -> None:
            super().__init__()
            self.model = Inner()
            self.lm_head = torch.nn.Linear(32, 64, bias=False)
            self.lm_head.weight = self.model.embed_tokens.weight

    plans: list[dict[str, str]] = []
    load_into_module = importlib.import_module("zarr_device.torch.load_into")

    real = load_into_module.place_auto

    def recording(*args: object, **kwargs: object) -> dict[str, str]:
        plans.append(real(*args, **kwargs))  # type: ignore[arg-type]
        return plans[-1]

    monkeypatch.setattr(load_into_module, "place_auto", recording)
    with torch.device("meta"):
        model = Model()
    assert zt.load_into(model, checkpoint, device_map="auto", max_memory={"cpu": "1MiB"})
    assert plans[-1] == {"": "cpu"}
    state = _state()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, state[name]), name
    assert model.lm_head.weight is model.model.embed_tokens.weight
    # The module's _no_split_modules name its blocks; the tie counts once.
    with torch.device("meta"):
        model = Model()
    args = load_into_module._kept_whole(model)
    assert args == ["model.layers.0", "model.layers.1", "model.layers.2"]
    with pytest.raises(UsageError, match="go with device_map='auto'"):
        zt.load_into(model, checkpoint, max_memory={"cpu": 1})
    with pytest.raises(UsageError, match="not both"):
        zt.load_into(model, checkpoint, device="cpu", device_map="auto")
    # An explicit map works too.
    assert zt.load_into(model, checkpoint, device_map={"": "cpu"})
    assert model.model.layers[2].attn.weight.device.type == "cpu"


# ---------------------------------------------------------------------------------------------
# GPUs


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_load_auto_on_the_gpus(checkpoint: Path) -> None:
    state = _state()
    loaded = zt.load(checkpoint, device_map="auto")
    gpus = {f"cuda:{i}" for i in range(torch.cuda.device_count())}
    for name, tensor in state.items():
        assert str(loaded[name].device) in gpus, name
        assert torch.equal(loaded[name].cpu(), tensor), name
    assert loaded["lm_head.weight"] is loaded["model.embed_tokens.weight"]
    # A small first GPU: what does not fit goes on (to the next GPU, or the CPU).
    max_memory = {0: 64 * 32 * 4 + LAYER, "cpu": "1GiB"}
    device_map = zt.auto_device_map(checkpoint, max_memory=max_memory)
    loaded = zt.load(checkpoint, device_map="auto", max_memory=max_memory)
    devices = devices_of({name: 0 for name in state}, device_map)
    assert devices["model.layers.0.attn.weight"] == "cuda:0" and devices["model.layers.1.attn.weight"] == "cpu"
    for name, tensor in state.items():
        assert str(loaded[name].device) == devices[name], name
        assert torch.equal(loaded[name].cpu(), tensor), name
    with torch.device("meta"):
        model = torch.nn.Linear(256, 256)
    zt.save(torch.nn.Linear(256, 256).state_dict(), checkpoint.parent / "linear.zarr", progress=False)
    zt.load_into(model, checkpoint.parent / "linear.zarr", device_map="auto")
    assert model.weight.device.type == "cuda"
