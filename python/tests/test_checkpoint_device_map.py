"""load(device_map=...): accelerate/transformers style placement of each tensor by the longest
matching module prefix. The planning is a pure function, tested with device names no machine
needs to have; loads run on the CPU, and on GPUs where there are some."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import zarr_device.torch as zt
from zarr_device.errors import UsageError
from zarr_device.torch.device_map import plan_device_map

NAMES = [
    "model.embed.weight",
    "model.layers.0.w",
    "model.layers.1.w",
    "model.layers.10.w",
    "model.layers.1",  # a tensor named as a module prefix is matched by that key exactly
    "model.norm.weight",
    "lm_head.weight",
]


def test_longest_prefix_on_a_dot_boundary_wins() -> None:
    plan = plan_device_map(NAMES, {
        "": "cpu",
        "model.layers": "cuda:0",
        "model.layers.1": "cuda:1",
        "model.layers.1.w": 2,  # an int is a CUDA index
        "lm_head.weight": torch.device("cuda", 3),
    })
    assert plan == {
        "cpu": ["model.embed.weight", "model.norm.weight"],
        "cuda:0": ["model.layers.0.w", "model.layers.10.w"],  # "model.layers.1" does not cover layers.10
        "cuda:2": ["model.layers.1.w"],
        "cuda:1": ["model.layers.1"],
        "cuda:3": ["lm_head.weight"],
    }


def test_plan_keeps_order_and_ignores_keys_that_match_nothing() -> None:
    plan = plan_device_map(NAMES, {"model": "cuda:1", "lm_head": "cpu", "model.rotary_emb": "cuda:0"})
    assert list(plan) == ["cuda:1", "cpu"]
    assert plan["cuda:1"] == NAMES[:-1]
    assert plan_device_map([], {"": "cpu"}) == {}
    # A partial key is not a prefix: "model.lay" covers nothing.
    with pytest.raises(UsageError, match="model.layers.0.w"):
        plan_device_map(NAMES, {"model.lay": "cpu", "lm_head": "cpu", "model.embed": "cpu", "model.norm": "cpu"})


def test_uncovered_tensors_are_listed() -> None:
    names = [f"model.layers.{i}.w" for i in range(15)] + ["lm_head.weight"]
    with pytest.raises(UsageError, match=r"15 tensor\(s\): 'model.layers.0.w'.* and 5 more") as e:
        plan_device_map(names, {"lm_head": "cpu"})
    assert "lm_head" not in str(e.value).split("tensor(s):")[1]


@pytest.mark.parametrize("device", ["meta", "disk", torch.device("meta"), "meta:0"])
def test_meta_and_disk_are_refused(device: object) -> None:
    with pytest.raises(UsageError, match="load returns tensors"):
        plan_device_map(NAMES, {"": "cpu", "model.layers": device})  # type: ignore[dict-item]


@pytest.mark.parametrize("bad, match", [
    ("auto", "planned from the tensors' sizes"),
    ("sequential", "planned from the tensors' sizes"),
    ("balanced_low_0", "must be a dict"),
    ([("", "cpu")], "must be a dict"),
    ({"": "no-such-device"}, "is not a device"),
    ({"": ""}, "is not a device"),
    ({"": -1}, "not negative"),
    ({"": True}, "a device is"),
    ({"": 1.5}, "a device is"),
    ({0: "cpu"}, "keys are module prefixes"),
])
def test_bad_maps_are_usage_errors(bad: object, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        plan_device_map(NAMES, bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Loading


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    embed = torch.randn(64, 32, generator=g)
    return {
        "model.embed.weight": embed,
        "model.layers.0.w": torch.randn(32, 32, generator=g).to(torch.bfloat16),
        "model.layers.1.w": torch.arange(96, dtype=torch.int64).reshape(3, 32),
        "model.norm.weight": torch.ones(32),
        "lm_head.weight": embed,  # tied
    }


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "ck.zarr"
    zt.save(_state(), path, progress=False)
    return path


def _check(loaded: dict[str, torch.Tensor], devices: dict[str, str]) -> None:
    state = _state()
    assert list(loaded) == list(state)  # the checkpoint's order, whatever the devices
    for name, tensor in state.items():
        assert loaded[name].device == torch.device(devices[name]), name
        assert torch.equal(loaded[name].cpu(), tensor), name


def test_load_with_a_cpu_map(checkpoint: Path) -> None:
    loaded = zt.load(checkpoint, device_map={"model.layers": "cpu", "": torch.device("cpu")})
    _check(loaded, dict.fromkeys(_state(), "cpu"))
    assert loaded["lm_head.weight"] is loaded["model.embed.weight"]  # tied on one device: one tensor
    # keys= and dtype= apply as without a map; the map need cover only the tensors loaded.
    some = zt.load(checkpoint, device_map={"model.layers": "cpu"}, keys=["model.layers.1.w", "model.layers.0.w"],
                   dtype=torch.float16)
    assert list(some) == ["model.layers.0.w", "model.layers.1.w"]
    assert some["model.layers.0.w"].dtype == torch.float16 and some["model.layers.1.w"].dtype == torch.int64


def test_load_refuses_before_reading(checkpoint: Path) -> None:
    with pytest.raises(UsageError, match="not both"):
        zt.load(checkpoint, device="cpu", device_map={"": "cpu"})
    with pytest.raises(UsageError, match="'lm_head.weight'"):
        zt.load(checkpoint, device_map={"model": "cpu"})
    with pytest.raises(UsageError, match="go with device_map='auto'"):
        zt.load(checkpoint, device_map={"": "cpu"}, max_memory={"cpu": "1GiB"})
    with pytest.raises(UsageError, match="'meta'"):
        zt.load(checkpoint, device_map={"": "cpu", "lm_head": "meta"})


def test_load_with_a_map_and_a_shard_plan(checkpoint: Path) -> None:
    loaded = zt.load(checkpoint, device_map={"": "cpu"}, shard_plan={"model.embed.weight": 0}, rank=1, world_size=2)
    assert torch.equal(loaded["model.embed.weight"], _state()["model.embed.weight"][32:])
    assert loaded["lm_head.weight"].shape == (64, 32)  # a tie the plan does not split stays whole


needs_two_gpus = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two CUDA devices"
)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_load_split_between_cpu_and_gpu(checkpoint: Path) -> None:
    device_map: dict[str, str | int] = {"": "cpu", "model.layers": "cuda:0", "lm_head": 0}
    loaded = zt.load(checkpoint, device_map=device_map)
    devices = {name: "cpu" for name in _state()}
    devices.update({"model.layers.0.w": "cuda:0", "model.layers.1.w": "cuda:0", "lm_head.weight": "cuda:0"})
    _check(loaded, devices)
    # A tied name mapped elsewhere than its tensor is loaded where its own name maps: a copy.
    assert loaded["lm_head.weight"] is not loaded["model.embed.weight"]


@pytest.mark.gpu
@needs_two_gpus
def test_load_split_between_two_gpus(checkpoint: Path) -> None:
    loaded = zt.load(checkpoint, device_map={"model": 0, "model.layers.1": 1, "lm_head": "cuda:1"})
    devices = {name: "cuda:0" for name in _state()}
    devices.update({"model.layers.1.w": "cuda:1", "lm_head.weight": "cuda:1"})
    _check(loaded, devices)
