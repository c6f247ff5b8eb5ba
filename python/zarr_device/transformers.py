"""Hugging Face transformers models from checkpoints made by ``zarr-device convert`` of a model
folder (docs/checkpoint-format.md): the tensors come from the checkpoint in one pipeline, the
config and tokenizer files from the folder the conversion copied them into.

>>> from transformers import AutoModel, AutoTokenizer
>>> from zarr_device.transformers import from_pretrained, tokenizer_path
>>> model = from_pretrained(AutoModel, "model.zarr", device_map="cuda")
>>> tokenizer = AutoTokenizer.from_pretrained(tokenizer_path("model.zarr"))

transformers (and torch) are imported when a function here is called, not on import, so that
``import zarr_device`` and ``import zarr_device.transformers`` work without them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union, cast

from zarr_device.errors import UsageError

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

__all__ = ["from_pretrained", "tokenizer_path", "files_path"]

PathLike = Union[str, "os.PathLike[str]"]
#: device_map strings that ask transformers to spread the model itself (accelerate's planners).
_PLANNED = ("auto", "balanced", "balanced_low_0", "sequential")


def files_path(path: PathLike) -> Path:
    """The folder inside the checkpoint at ``path`` that holds the files ``zarr-device convert``
    copied from the model folder (config.json, tokenizer files, ..., and its subfolders, such as
    a sentence-transformers model's 1_Pooling/, as they were). Raises UsageError when the
    checkpoint carries none (it was saved by ``zarr_device.torch.save``, or converted from a
    single weights file)."""
    from zarr_device.torch.interop import checkpoint_files

    files = checkpoint_files(path)
    if not files:
        raise UsageError(
            f"{path}: the checkpoint carries no config or tokenizer files; make it with "
            "`zarr-device convert <Hugging Face model folder> <checkpoint>`"
        )
    # checkpoint_files puts every name in the one folder the checkpoint's record names, a
    # subfolder's files by their path in it ("1_Pooling/config.json").
    name, where = next(iter(files.items()))
    return where.parents[name.count("/")]


def tokenizer_path(path: PathLike) -> Path:
    """The folder to hand to ``AutoTokenizer.from_pretrained`` for the checkpoint at ``path``:
    where its tokenizer files (tokenizer.json, tokenizer_config.json, vocab files, ...) were
    copied. Raises UsageError when the checkpoint carries no files."""
    return files_path(path)


def _model_class(model_class: Any, config: Any) -> Any:
    """The concrete model class: ``model_class`` itself, or for an Auto class (AutoModel,
    AutoModelForCausalLM, ...) the class it maps the config to."""
    mapping = getattr(model_class, "_model_mapping", None)
    if mapping is None:
        return model_class
    # An Auto class's own from_pretrained needs a model name or folder, and transformers refuses
    # a state_dict beside one; so the class it would pick is picked here, as it picks it (the
    # config's `architectures` choose among several classes for one config type).
    from transformers.models.auto import auto_factory

    # transformers leaves it without annotations; Any keeps strict typing quiet about that.
    get_model_class: Any = getattr(auto_factory, "_get_model_class")
    try:
        return get_model_class(config, mapping)
    except (KeyError, ValueError) as error:
        raise UsageError(
            f"{model_class.__name__} has no model class for a {type(config).__name__}: {error}"
        ) from None


def _read_device(device_map: Any) -> torch.device | None:
    """The one device the whole model goes to, where ``device_map`` names one: the tensors are
    then read straight there. None where transformers places the tensors itself (a mapping of
    module names to devices, or a planner such as "auto"): they are read to the CPU first."""
    import torch

    if device_map is None:
        return torch.device("cpu")
    if isinstance(device_map, str) and device_map in _PLANNED:
        return None
    if isinstance(device_map, (str, int, torch.device)):
        return torch.device(device_map)
    return None


def from_pretrained(
    model_class: Any,
    path: PathLike,
    *,
    device_map: Any = None,
    dtype: torch.dtype | str | None = None,
    **kwargs: Any,
) -> PreTrainedModel:
    """A transformers model, in eval mode, from the checkpoint at ``path`` that
    ``zarr-device convert`` made of a Hugging Face model folder.

    ``model_class``: a model class (``BertModel``) or an Auto class (``AutoModel``,
    ``AutoModelForCausalLM``, ...), which picks the class for the checkpoint's config.json as
    its own ``from_pretrained`` would. The config is read from the checkpoint's files folder
    (``config=`` in ``kwargs`` replaces it). Every tensor is read by :func:`zarr_device.torch.load`
    in one pipeline, then handed to transformers' ``from_pretrained(None, config=...,
    state_dict=...)``, which builds the model without initialising its weights, renames legacy
    tensor names, ties tied weights (one Parameter), fills non-persistent buffers and reports
    missing or unexpected tensors as it does for a model folder.

    ``device_map``: None (the CPU), one device ("cpu", "cuda:0", 0, a torch.device), where the
    tensors are then read straight onto that device; or a mapping of module names to devices, or
    "auto" and the other accelerate planners, which transformers applies to tensors read to the
    CPU (those need accelerate installed). ``dtype``: as transformers takes it (a torch dtype or
    "auto"); the default is transformers'. Other ``kwargs`` go to transformers'
    ``from_pretrained`` (``attn_implementation=``, ...). ``trust_remote_code`` is refused:
    loading a checkpoint runs no code from it, so models whose code ships with them are not
    loaded this way.
    """
    try:
        import transformers
    except ImportError as e:
        from zarr_device.io.adapters.base import import_failure

        raise import_failure(
            "transformers", "zarr_device.transformers needs transformers: pip install transformers", e
        ) from e

    import zarr_device.torch as zt

    for key in ("state_dict", "pretrained_model_name_or_path", "trust_remote_code"):
        if key in kwargs:
            raise UsageError(f"from_pretrained takes no {key}= (the checkpoint supplies the model)")
    config = kwargs.pop("config", None)
    if config is None:
        config = transformers.AutoConfig.from_pretrained(files_path(path))
    cls = _model_class(model_class, config)
    if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)):
        raise UsageError(f"from_pretrained builds a transformers model class, not {model_class!r}")
    device = _read_device(device_map)
    # The CPU is transformers' own default, which needs no accelerate: no device_map is passed.
    # Any other placement is passed on (for one device, the tensors already read there stay
    # there: transformers moves each tensor to its device_map device, a no-op for these). Checked
    # before reading, so that a missing accelerate costs no read.
    if device is None or device.type != "cpu":
        from transformers.utils.import_utils import is_accelerate_available

        if not is_accelerate_available():
            raise UsageError(f"device_map={device_map!r} needs accelerate (pip install accelerate), "
                             "as transformers' own from_pretrained does")
        kwargs["device_map"] = device_map
    if dtype is not None:
        kwargs["dtype"] = dtype
    state_dict = zt.load(path, device=device if device is not None else "cpu")
    model: Any = cls.from_pretrained(None, config=config, state_dict=state_dict, **kwargs)
    model.eval()  # transformers does this too; a model loaded for inference must not be in train mode
    return cast("PreTrainedModel", model)
