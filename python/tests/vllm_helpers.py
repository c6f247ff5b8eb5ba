"""Code that runs in processes with vLLM importable, for test_serving_vllm.py (vLLM pins its own
torch, so it is installed without dependencies in a folder of its own that only these
processes put on their path: requirements-vllm.txt).

    python vllm_helpers.py plugins <entry-points folder>
    python vllm_helpers.py llama <checkpoint files folder> <reference safetensors> <world size>

Each prints one JSON line, the last line of its output. vLLM runs on its CPU platform, set
explicitly (the wheel is the CUDA build, whose compiled ops are for another torch): its models
are built and filled, never run.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _cpu_platform() -> None:
    import vllm.platforms as platforms
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()  # noqa: SLF001 - how vLLM caches its platform


def plugins(entry_points: str) -> dict[str, Any]:
    """vLLM's plug-in loading finds the entry point and registers the loader, once."""
    sys.path.insert(0, entry_points)  # a dist-info holding zarr-device's vllm.general_plugins entry
    from vllm.config.load import LoadConfig
    from vllm.model_executor import model_loader
    from vllm.plugins import load_general_plugins

    before = "zarr" in model_loader._LOAD_FORMAT_TO_MODEL_LOADER  # noqa: SLF001
    load_general_plugins()
    loader = model_loader.get_model_loader(LoadConfig(load_format="zarr", model_loader_extra_config={"device": "cpu"}))
    import zarr_device.vllm as zv

    zv.register()  # vLLM may call it again in one process: still one class, no warning
    again = model_loader.get_model_loader(LoadConfig(load_format="zarr"))
    try:
        model_loader.get_model_loader(LoadConfig(load_format="zarr", model_loader_extra_config={"devise": "cpu"}))
        refused = ""
    except ValueError as e:
        refused = str(e)
    return {
        "registered_before": before,
        "loader": f"{type(loader).__module__}.{type(loader).__qualname__}",
        "is_base_loader": isinstance(loader, model_loader.BaseModelLoader),
        "same_class": type(loader) is type(again),
        "options": loader.zarr_options,
        "refused": refused,
    }


def llama(files: str, reference: str, world_size: int) -> dict[str, Any]:
    """vLLM's own Llama, built with tensor parallelism over ``world_size`` CPU processes (Gloo)
    and filled by ``--load-format zarr``: each rank's parameters against its part of the
    reference tensors."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_llama_rank, args=(files, reference, rank, world_size, results))
             for rank in range(world_size)]
    for p in procs:
        p.start()
    answers = sorted((results.get(timeout=600) for _ in procs), key=lambda a: int(a["rank"]))
    for p in procs:
        p.join(timeout=60)
    return {"ranks": answers}


def _llama_rank(files: str, reference: str, rank: int, world_size: int, results: Any) -> None:
    try:
        results.put(_check_rank(files, reference, rank, world_size))
    except BaseException as e:  # reported, not lost in a child
        import traceback

        results.put({"rank": rank, "error": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"})


def _check_rank(files: str, reference: str, rank: int, world_size: int) -> dict[str, Any]:
    _cpu_platform()
    import torch
    from safetensors.torch import load_file
    from vllm.config import DeviceConfig, LoadConfig, ModelConfig, ParallelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.model_executor.model_loader import get_model

    import zarr_device.vllm as zv

    zv.register()
    config = VllmConfig(
        model_config=ModelConfig(model=files, dtype="float32"),
        load_config=LoadConfig(load_format="zarr"),
        device_config=DeviceConfig("cpu"),
        parallel_config=ParallelConfig(tensor_parallel_size=world_size),
    )
    with set_current_vllm_config(config):
        init_distributed_environment(world_size=world_size, rank=rank, local_rank=rank, backend="gloo",
                                     distributed_init_method="tcp://127.0.0.1:29517")
        initialize_model_parallel(world_size, 1)
        model = get_model(vllm_config=config)
    ref = load_file(reference)
    params = dict(model.named_parameters())

    def part(name: str, dim: int) -> torch.Tensor:
        return torch.chunk(ref[name], world_size, dim)[rank]

    checks: dict[str, bool] = {}
    layers = model.config.num_hidden_layers
    for i in range(layers):
        p = f"model.layers.{i}"
        qkv = torch.cat([part(f"{p}.self_attn.{x}_proj.weight", 0) for x in "qkv"])
        checks[f"{p}.qkv"] = torch.equal(params[f"{p}.self_attn.qkv_proj.weight"], qkv)
        checks[f"{p}.o"] = torch.equal(params[f"{p}.self_attn.o_proj.weight"], part(f"{p}.self_attn.o_proj.weight", 1))
        gate_up = torch.cat([part(f"{p}.mlp.gate_proj.weight", 0), part(f"{p}.mlp.up_proj.weight", 0)])
        checks[f"{p}.gate_up"] = torch.equal(params[f"{p}.mlp.gate_up_proj.weight"], gate_up)
        checks[f"{p}.down"] = torch.equal(params[f"{p}.mlp.down_proj.weight"], part(f"{p}.mlp.down_proj.weight", 1))
        checks[f"{p}.norm"] = torch.equal(params[f"{p}.input_layernorm.weight"], ref[f"{p}.input_layernorm.weight"])
    embed = params["model.embed_tokens.weight"]
    vocab = ref["model.embed_tokens.weight"].shape[0]
    per = embed.shape[0]  # vLLM pads the vocabulary to a multiple of 64 per rank
    rows = ref["model.embed_tokens.weight"][rank * per: min((rank + 1) * per, vocab)]
    checks["embed"] = torch.equal(embed[: rows.shape[0]], rows)
    checks["tied"] = model.lm_head.weight is model.model.embed_tokens.weight if model.config.tie_word_embeddings \
        else torch.equal(model.lm_head.weight[: rows.shape[0]], ref["lm_head.weight"][rank * per: (rank + 1) * per])
    return {"rank": rank, "class": type(model).__name__, "checks": checks, "qkv_shape": list(params[
        "model.layers.0.self_attn.qkv_proj.weight"].shape)}


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "plugins":
        out = plugins(args[0])
    elif command == "llama":
        out = llama(args[0], args[1], int(args[2]))
    else:
        raise SystemExit(f"unknown command {command!r}")
    print(json.dumps(out))
