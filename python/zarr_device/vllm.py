"""vLLM plug-in: ``--load-format zarr`` loads a model's weights from a checkpoint that
``zarr-device convert`` made of a Hugging Face model folder, without patching vLLM.

    zarr-device convert ./Llama-3.1-8B llama.zarr
    vllm serve llama.zarr/files --load-format zarr

vLLM reads the config and the tokenizer from the model path it is given: the checkpoint's
``files`` folder, where the conversion copied them; this loader finds the checkpoint around it
(or takes its path as ``--model-loader-extra-config '{"checkpoint": "llama.zarr"}'``).

How it plugs in: vLLM loads every ``vllm.general_plugins`` entry point in each of its processes
(zarr-device's pyproject.toml names :func:`register`), and :func:`register` adds the loader to
vLLM's registry with ``vllm.model_executor.model_loader.register_model_loader("zarr")``. The
loader is a ``BaseModelLoader``: ``download_model`` checks that the checkpoint is there (there
is nothing to download), and ``load_weights`` feeds ``model.load_weights`` with
:func:`zarr_device.torch.iter_weights`, as vLLM's own loaders feed it from safetensors files.

Tensor parallelism: vLLM's models slice each tensor for their rank inside ``load_weights``
(and stack q/k/v and gate/up projections into one parameter first), so every rank is given
whole tensors; a rank reads the checkpoint whole, as vLLM's safetensors loaders do. The tensors
land on the rank's own GPU (the device of the model's parameters), so the slicing and the copy
into the parameters run there; ``{"device": "cpu"}`` reads them to the host instead.

Written against vLLM 0.33.0 (``BaseModelLoader(load_config)`` with ``download_model(model_config)``
and ``load_weights(model, model_config)``); vLLM is imported only by :func:`register`, so this
module imports without it.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from zarr_device.errors import UsageError

__all__ = ["LOAD_FORMAT", "register", "loader_class", "find_checkpoint", "weights_device", "loader_options"]

#: The ``--load-format`` this plug-in registers.
LOAD_FORMAT = "zarr"

# --model-loader-extra-config keys, and what each is.
_OPTIONS = {
    "checkpoint": "the checkpoint's path (by default found from the model path)",
    "device": "where the tensors land before the model copies them ('cpu', 'cuda:N'; default: "
    "the device of the model's parameters)",
    "window_bytes": "bytes of tensors allocated ahead of the model on a GPU (default 1GiB)",
}

_class: type | None = None


def loader_options(extra_config: Any) -> dict[str, Any]:
    """``--model-loader-extra-config`` checked: a dict of the keys in ``_OPTIONS``."""
    if extra_config is None:
        return {}
    if not isinstance(extra_config, Mapping):
        raise UsageError(f"--model-loader-extra-config for --load-format {LOAD_FORMAT} must be a dict, "
                         f"not {type(extra_config).__name__}")
    unknown = sorted(set(extra_config) - set(_OPTIONS))
    if unknown:
        known = "; ".join(f"{k}: {v}" for k, v in _OPTIONS.items())
        raise UsageError(f"--load-format {LOAD_FORMAT} takes no extra config {', '.join(map(repr, unknown))} ({known})")
    return dict(extra_config)


def _is_checkpoint(path: Path) -> bool:
    """Whether ``path`` holds a zarr-device checkpoint (its root attribute); reads one file."""
    from zarr_device.errors import ZarrDeviceError
    from zarr_device.core.group import open_group
    from zarr_device.torch.format import ROOT_ATTRIBUTE

    if not (path / "zarr.json").is_file():
        return False
    try:
        return ROOT_ATTRIBUTE in open_group(path, mode="r").attrs
    except ZarrDeviceError:
        return False


def find_checkpoint(model: str | os.PathLike[str], given: str | os.PathLike[str] | None = None) -> Path:
    """The checkpoint for vLLM's model path ``model``: ``given`` if set; else ``model`` itself
    when it is a checkpoint; else the checkpoint whose files folder ``model`` is (the folder
    ``vllm serve`` is pointed at, since it holds config.json). UsageError saying how otherwise."""
    if given is not None:
        path = Path(given)
        if not _is_checkpoint(path):
            raise UsageError(f"{path}: no zarr-device checkpoint there (the 'checkpoint' extra config)")
        return path
    path = Path(model)
    if _is_checkpoint(path):
        return path
    parent = path.resolve().parent
    if _is_checkpoint(parent):
        from zarr_device.torch.interop import checkpoint_files

        files = checkpoint_files(parent)
        if files and next(iter(files.values())).parent.name == path.resolve().name:
            return parent
    raise UsageError(
        f"{model}: neither a zarr-device checkpoint nor the files folder of one. Serve the "
        f"checkpoint's files folder (`vllm serve model.zarr/files --load-format {LOAD_FORMAT}`), or "
        f"name the checkpoint: --model-loader-extra-config '{{\"checkpoint\": \"model.zarr\"}}'"
    )


def weights_device(parameters: Iterable[Any], given: str | None = None) -> str:
    """Where the tensors should land: ``given`` if set, else the device of the first parameter
    that is on a GPU (the rank's own; vLLM builds the model there), else the CPU."""
    if given is not None:
        return str(given)
    for parameter in parameters:
        device = parameter.device
        if device.type not in ("cpu", "meta"):
            return str(device)
    return "cpu"


def _download_model(self: Any, model_config: Any) -> None:
    # A local checkpoint: nothing to download; checking it is there fails early and clearly.
    find_checkpoint(model_config.model, self.zarr_options.get("checkpoint"))


def _load_weights(self: Any, model: Any, model_config: Any) -> None:
    from zarr_device.torch.weights import DEFAULT_WINDOW, iter_weights

    options = self.zarr_options
    path = find_checkpoint(model_config.model, options.get("checkpoint"))
    device = weights_device(model.parameters(), options.get("device"))
    weights = iter_weights(path, device=device, window_bytes=options.get("window_bytes", DEFAULT_WINDOW))
    try:
        loaded = model.load_weights(weights)
    finally:
        # vLLM sizes its KV cache from the GPU memory free after loading: the staging and decode
        # memory the reads kept must not count against it.
        if device.startswith("cuda"):
            from zarr_device.io.transfers import empty_cache

            empty_cache(device)
    # As vLLM's default loader does for an unquantized model that reports what it loaded:
    # every parameter must have come from the checkpoint.
    if getattr(model_config, "quantization", None) is None and loaded is not None:
        missing = sorted({name for name, _ in model.named_parameters()} - set(loaded))
        if missing:
            raise ValueError(f"{path}: the checkpoint left these weights of the model unset: {missing}")


def loader_class() -> type:
    """The loader class, a subclass of vLLM's ``BaseModelLoader`` (made on first use, as it
    needs vLLM)."""
    global _class
    if _class is None:
        base = importlib.import_module("vllm.model_executor.model_loader").BaseModelLoader

        def __init__(self: Any, load_config: Any) -> None:
            base.__init__(self, load_config)
            self.zarr_options = loader_options(getattr(load_config, "model_loader_extra_config", None))

        _class = type(
            "ZarrModelLoader",
            (base,),
            {
                "__doc__": "Loads a model's weights from a zarr-device checkpoint (--load-format zarr).",
                "__module__": __name__,
                "__init__": __init__,
                "download_model": _download_model,
                "load_weights": _load_weights,
            },
        )
        globals()["ZarrModelLoader"] = _class  # so that it is found by name (pickle, logs)
    return _class


def register() -> None:
    """Registers ``--load-format zarr`` with vLLM: the ``vllm.general_plugins`` entry point.
    vLLM calls it in each of its processes, maybe more than once; it registers once."""
    registry = importlib.import_module("vllm.model_executor.model_loader")
    loaders = getattr(registry, "_LOAD_FORMAT_TO_MODEL_LOADER", None)
    cls = loader_class()
    if isinstance(loaders, dict) and loaders.get(LOAD_FORMAT) is cls:
        return
    registry.register_model_loader(LOAD_FORMAT)(cls)
