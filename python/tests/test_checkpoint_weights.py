"""iter_weights: a checkpoint as (name, tensor) pairs for serving engines' loaders, read in
windows of bounded size. Checked against load on the CPU, and on a GPU where there is one."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch

import zarr_device.torch as zt
from zarr_device.errors import UsageError

load_module = importlib.import_module("zarr_device.torch.load")


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(11)
    embed = torch.randn(128, 64, generator=g).to(torch.bfloat16)
    state = {"model.embed_tokens.weight": embed}
    for i in range(4):
        state[f"model.layers.{i}.self_attn.q_proj.weight"] = torch.randn(64, 64, generator=g)
        state[f"model.layers.{i}.mlp.down_proj.weight"] = torch.randn(64, 96, generator=g).to(torch.float16)
    state["model.norm.weight"] = torch.ones(64)
    state["model.step"] = torch.tensor(7, dtype=torch.int64)
    state["lm_head.weight"] = embed  # tied
    return state


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("weights") / "ck.zarr"
    zt.save(_state(), path, progress=False)
    return path


@pytest.mark.parametrize("window", [None, 1, "16KiB", "1GiB"])
def test_weights_in_order_as_load_gives_them(checkpoint: Path, window: int | str | None) -> None:
    state = _state()
    pairs = list(zt.iter_weights(checkpoint, window_bytes=window))
    # The checkpoint's order, a tied name right after the tensor it shares.
    order = list(state)
    order.insert(1, order.pop())
    assert [name for name, _ in pairs] == order
    got = dict(pairs)
    for name, tensor in state.items():
        assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name
    assert got["lm_head.weight"] is got["model.embed_tokens.weight"]


def test_windows_cut_the_reads_in_order(checkpoint: Path) -> None:
    opened = load_module.open_checkpoint(checkpoint)
    reads, _ = load_module._plan(opened, opened.manifest.names())
    sizes = {key: load_module._nbytes(read) for key, read in reads.items()}
    for limit in (1, 8192, 20000, 10**9):
        windows = list(load_module._windows(reads, limit))
        assert [key for w in windows for key in w] == list(reads)  # every read once, in order
        for w in windows:
            assert len(w) == 1 or sum(sizes[k] for k in w) <= limit
        # Maximal: the next read would not have fitted in the window before it.
        for before, after in zip(windows, windows[1:]):
            assert sum(sizes[k] for k in before) + sizes[next(iter(after))] > limit
    assert len(list(load_module._windows(reads, 1))) == len(reads)
    assert len(list(load_module._windows(reads, 10**9))) == 1


def test_keys_dtype_and_shard_plan(checkpoint: Path) -> None:
    state = _state()
    keys = ["model.layers.1.self_attn.q_proj.weight", "model.step", "lm_head.weight"]
    got = dict(zt.iter_weights(checkpoint, keys=keys, dtype=torch.float16))
    assert list(got) == keys
    assert got["model.layers.1.self_attn.q_proj.weight"].dtype == torch.float16
    assert got["model.step"].dtype == torch.int64  # only floating tensors are cast
    plan = {"*.q_proj.weight": 0, "*.down_proj.weight": 1}
    for rank in range(3):
        parts = dict(zt.iter_weights(checkpoint, shard_plan=plan, rank=rank, world_size=3))
        expected = zt.load(checkpoint, shard_plan=plan, rank=rank, world_size=3)
        assert parts.keys() == expected.keys()
        for name, tensor in expected.items():
            assert torch.equal(parts[name], tensor), name
        q = state["model.layers.2.self_attn.q_proj.weight"]
        assert torch.equal(parts["model.layers.2.self_attn.q_proj.weight"], torch.chunk(q, 3, 0)[rank])


def test_arguments_are_checked_when_called(checkpoint: Path, tmp_path: Path) -> None:
    # Before the first tensor is asked for: a serving engine learns of a bad setup at once.
    with pytest.raises(UsageError, match="'nope'"):
        zt.iter_weights(checkpoint, keys=["nope"])
    with pytest.raises(UsageError, match="go with a shard_plan"):
        zt.iter_weights(checkpoint, rank=0)
    with pytest.raises(UsageError, match="window_bytes"):
        zt.iter_weights(checkpoint, window_bytes="lots")
    with pytest.raises(FileNotFoundError):
        zt.iter_weights(tmp_path / "missing.zarr")
    with pytest.raises(UsageError, match="dtype"):
        zt.iter_weights(checkpoint, dtype=torch.int32)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_weights_onto_a_gpu_in_bounded_windows(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(3)
    state = {f"layers.{i}.w": torch.randn(1024, 1024, generator=g) for i in range(16)}  # 4 MiB each
    path = tmp_path / "big.zarr"
    zt.save(state, path, progress=False)
    model = {name: torch.empty_like(t, device="cuda") for name, t in state.items()}
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    for name, tensor in zt.iter_weights(path, device="cuda", window_bytes="8MiB"):
        assert tensor.device.type == "cuda"
        model[name].copy_(tensor)  # what a model's weight loader does
        del tensor
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    # Two 4 MiB tensors per window, and at most one more while the next window is set up,
    # against 64 MiB for the whole checkpoint read up front.
    assert peak <= 16 * (1 << 20), peak
    for name, tensor in state.items():
        assert torch.equal(model[name].cpu(), tensor), name
