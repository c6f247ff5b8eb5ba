"""A checkpoint's weights as an iterator of ``(name, tensor)`` pairs: what the model loaders of
serving engines consume. vLLM's and SGLang's models each take their weights through
``model.load_weights(weights)``, where ``weights`` is such an iterator (vLLM's
``safetensors_weights_iterator`` and its peers make them from files); each model renames,
stacks (q/k/v into one qkv projection) and slices (its tensor-parallel rank's part) the
tensors as they come, and copies them into its parameters.

>>> import zarr_device.torch as zt
>>> model.load_weights(zt.iter_weights("model.zarr", device="cuda:0"))

SGLang's ``get_model_loader`` takes a loader class as ``load_format`` (a subclass of
``sglang.srt.model_loader.loader.BaseModelLoader`` whose ``load_model(model_config=,
device_config=)`` builds the model on its device and calls ``model.load_weights(iter_weights(...))``);
vLLM: :mod:`zarr_device.vllm` is a plug-in for ``--load-format zarr``.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from zarr_device.torch.parts import ShardPlan
from zarr_device.torch.load import DeviceArg, Keys, PathLike, iter_load

__all__ = ["iter_weights", "DEFAULT_WINDOW"]

#: How many bytes of tensors are allocated ahead of the consumer on a GPU by default: enough for
#: the read pipeline to run at full speed between windows (a window is read in a small fraction of
#: a second: BENCHMARKS.md, Many arrays and layouts), small beside a model that is being filled on
#: the same GPU.
DEFAULT_WINDOW = "1GiB"


def iter_weights(
    path: PathLike,
    *,
    device: DeviceArg = "cpu",
    dtype: torch.dtype | None = None,
    keys: Keys = None,
    shard_plan: ShardPlan | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    window_bytes: int | str | None = DEFAULT_WINDOW,
) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` for each tensor of the checkpoint at ``path``, in the checkpoint's
    order, yielded as each lands on ``device`` (:func:`zarr_device.torch.iter_load`): the names
    are the checkpoint's (those of the Hugging Face folder it was converted from), tied names
    come right after the tensor they share, as the same tensor.

    Made for a consumer that copies each tensor into its own parameters and drops it: onto a
    GPU, tensors are allocated one window of ``window_bytes`` at a time, so that loading needs
    about one window beyond the model (None: every tensor up front, in one pipeline). ``device``:
    where the tensors land; a serving engine's model copies them into its parameters, so its own
    GPU is the fastest choice (the copy is then on the device), the CPU the one that uses no GPU
    memory. ``dtype``: a floating dtype to cast floating tensors to (engines cast on copy, so
    usually None). ``keys``: the names to read (a list, or a function that accepts names).
    ``shard_plan``, ``rank``, ``world_size``: each rank's part of the tensors a plan names
    (:func:`zarr_device.torch.load`); for engines that slice the tensors themselves (vLLM,
    SGLang) pass none, and every rank reads the whole tensors.

    The checkpoint is opened and the arguments are checked when this is called.
    """
    return iter_load(path, device=device, dtype=dtype, keys=keys, shard_plan=shard_plan, rank=rank,
                     world_size=world_size, window_bytes=window_bytes)
