"""Filling a module from a checkpoint, ``load_state_dict(..., assign=True)`` style: the tensors
are read straight onto their device and become the module's parameters and buffers, so a module
built on the meta device is never materialised on the CPU first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from zarr_device.progress import Progress
from zarr_device.errors import UsageError
from zarr_device.torch.auto_map import MaxMemory
from zarr_device.torch.device_map import DeviceMap, plan_device_map
from zarr_device.torch.load import (
    Checkpoint,
    DeviceArg,
    PathLike,
    check_auto_options,
    open_checkpoint,
    place_auto,
    read_tensors,
)

__all__ = ["LoadResult", "CheckpointMismatchError", "load_into"]

_SHOWN = 20  # names listed per kind in an error; the rest are counted


@dataclass(frozen=True)
class LoadResult:
    """What :func:`load_into` found: the module's names the checkpoint lacks (``missing``), the
    checkpoint's names the module lacks (``unexpected``), and names in both whose shape or dtype
    differ (``mismatched``: name -> a description); those were not loaded."""

    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        """True when the module and the checkpoint matched exactly."""
        return not (self.missing or self.unexpected or self.mismatched)

    def describe(self) -> str:
        parts = []
        for what, names in (("missing from the checkpoint", self.missing),
                            ("not in the module", self.unexpected),
                            ("of another shape or dtype", [f"{n} ({d})" for n, d in self.mismatched.items()])):
            if names:
                more = f", and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
                parts.append(f"{len(names)} {what}: {', '.join(names[:_SHOWN])}{more}")
        return "; ".join(parts)


class CheckpointMismatchError(UsageError):
    """The module and the checkpoint do not hold the same tensors; ``result`` says how. Raised
    before the module is touched."""

    def __init__(self, message: str, result: LoadResult) -> None:
        super().__init__(message)
        self.result = result


def _device_of(module: torch.nn.Module) -> torch.device:
    # Where the module already lives, unless it lives nowhere yet (the meta device): then the CPU.
    for tensor in [*module.parameters(), *module.buffers()]:
        if tensor.device.type != "meta":
            return tensor.device
    return torch.device("cpu")


def _shared_names(module: torch.nn.Module) -> list[list[str]]:
    """Groups of names that are one Parameter (or buffer) object, such as tied embeddings."""
    by_object: dict[int, list[str]] = {}
    for name, tensor in [*module.named_parameters(remove_duplicate=False),
                         *module.named_buffers(remove_duplicate=False)]:
        by_object.setdefault(id(tensor), []).append(name)
    return [names for names in by_object.values() if len(names) > 1]


def _retie(module: torch.nn.Module, groups: list[list[str]], loaded: set[str]) -> None:
    # assign=True wraps each name's tensor in a Parameter of its own; names that were one
    # Parameter become one again, so that they keep sharing gradients and optimizer state.
    for names in groups:
        if not all(name in loaded for name in names):
            continue
        first_owner, _, first_attr = names[0].rpartition(".")
        first = module.get_submodule(first_owner)
        for name in names[1:]:
            owner_name, _, attr = name.rpartition(".")
            owner = module.get_submodule(owner_name)
            if attr in owner._parameters:  # noqa: SLF001 - how torch itself registers them
                owner._parameters[attr] = first._parameters[first_attr]  # noqa: SLF001
            elif attr in owner._buffers:  # noqa: SLF001
                owner._buffers[attr] = first._buffers[first_attr]  # noqa: SLF001


def _kept_whole(module: torch.nn.Module) -> list[str] | None:
    """The modules a transformers model keeps whole on one device (its ``_no_split_modules``
    classes, by name, as accelerate reads them), or None to go by names."""
    classes = getattr(module, "_no_split_modules", None)
    if not classes or not all(isinstance(c, str) for c in classes):
        return None
    return [name for name, sub in module.named_modules() if name and type(sub).__name__ in set(classes)]


def _auto_map(
    module: torch.nn.Module,
    checkpoint: Checkpoint,
    wanted: list[str],
    expected: dict[str, torch.Tensor],
    groups: list[list[str]],
    strategy: str,
    max_memory: MaxMemory | None,
    modules: Sequence[str] | None,
) -> dict[str, str]:
    """The device map for the module's tensors: their sizes are the module's (meta tensors have
    them), and names that are one tensor in the module or in the checkpoint count once."""
    storage = {name: checkpoint.manifest.stored(name) for name in wanted}
    for names in groups:
        for name in names[1:]:
            if name in storage and names[0] in storage:
                storage[name] = storage[names[0]]
    sizes = {name: expected[name].numel() * expected[name].element_size() for name in wanted}
    return place_auto(sizes, storage, strategy, max_memory, _kept_whole(module) if modules is None else modules)


def load_into(
    module: torch.nn.Module,
    path: PathLike,
    *,
    strict: bool = True,
    device: DeviceArg | None = None,
    device_map: DeviceMap | None = None,
    max_memory: MaxMemory | None = None,
    modules: Sequence[str] | None = None,
    progress: Progress = None,
) -> LoadResult:
    """Fills ``module``'s parameters and buffers from the checkpoint at ``path``, with
    ``module.load_state_dict(..., assign=True)`` semantics: the loaded tensors become the
    module's (keeping each parameter's ``requires_grad``; tied parameters stay one parameter).
    The module may be built on the meta device (``with torch.device("meta"): ...``): it is then
    filled without ever being materialised elsewhere.

    ``device``: where the tensors are read to; by default where the module's tensors already
    live, or the CPU for a module on the meta device. ``strict``: the module's names, shapes and
    dtypes must match the checkpoint's exactly; a difference raises CheckpointMismatchError (a
    UsageError) listing it, before the module is touched. Without ``strict`` the names in both
    of one shape and dtype are loaded, and the result lists the rest.

    ``device_map`` (instead of ``device``): each tensor on its own device, as for
    :func:`zarr_device.torch.load`: ``{prefix: device}``, or "auto" ("balanced", "sequential")
    with ``max_memory=`` and ``modules=``, planned from the module's tensors. A transformers model
    keeps whole the modules its ``_no_split_modules`` names (unless ``modules=`` is given).
    Parameters tied in the module stay one parameter, on the device of the first.

    ``progress``: a bar on stderr while reading, as for :func:`zarr_device.torch.load`.
    """
    if not isinstance(module, torch.nn.Module):
        raise UsageError(f"load_into fills an nn.Module, not {type(module).__name__}")
    if device is not None and device_map is not None:
        raise UsageError("pass device= or device_map=, not both")
    strategy = check_auto_options(device_map, max_memory, modules)
    checkpoint = open_checkpoint(path)
    expected = module.state_dict(keep_vars=True)
    names = set(checkpoint.manifest.names())
    mismatched: dict[str, str] = {}
    for name, tensor in expected.items():
        if name in names:
            shape, dtype = checkpoint.shape(name), checkpoint.dtype(name)
            if tuple(tensor.shape) != shape or tensor.dtype != dtype:
                mismatched[name] = (
                    f"module {tuple(tensor.shape)} {tensor.dtype}, checkpoint {shape} {dtype}"
                )
    result = LoadResult(
        missing=[name for name in expected if name not in names],
        unexpected=[name for name in checkpoint.manifest.names() if name not in expected],
        mismatched=mismatched,
    )
    if strict and not result:
        raise CheckpointMismatchError(f"{checkpoint.where} does not fit the module: {result.describe()}", result)
    wanted = [name for name in expected if name in names and name not in mismatched]
    groups = _shared_names(module)
    if strategy is not None:
        device_map = _auto_map(module, checkpoint, wanted, expected, groups, strategy, max_memory, modules)
    if device_map is None:
        target = torch.device(device) if isinstance(device, (str, int)) else device or _device_of(module)
        placed: list[tuple[DeviceArg, list[str]]] = [(target, wanted)]
    else:
        placed = list(plan_device_map(wanted, device_map).items())
    tensors: dict[str, torch.Tensor] = {}
    for where, on_it in placed:
        tensors.update(read_tensors(checkpoint, on_it, where, None, progress))
    module.load_state_dict(tensors, strict=False, assign=True)
    _retie(module, groups, set(tensors))
    return result
