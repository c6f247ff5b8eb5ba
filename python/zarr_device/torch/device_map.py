"""Placing a checkpoint's tensors on several devices by an accelerate/transformers style
``device_map``: ``{module prefix or tensor name: device}``, the longest matching prefix winning.
Planning is a pure function of names, so it can be checked without loading anything."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Union

import torch

from zarr_device.errors import UsageError

__all__ = ["DeviceMap", "plan_device_map", "device_name"]

DeviceMapValue = Union[str, int, torch.device]
#: ``{prefix: device}``, or "auto" (also "balanced", "sequential"): planned by size by
#: zarr_device.torch.auto_map when a checkpoint is loaded.
DeviceMap = Union[Mapping[str, DeviceMapValue], str]

# accelerate's placements that hold no values in memory: a loader that returns tensors has
# nothing to return for them.
_REFUSED = {"meta": "holds no values", "disk": "means offloading, which load does not do"}
# How many uncovered names an error lists before it only counts the rest.
_LISTED = 10


def device_name(device: DeviceMapValue, key: str = "", *, what: str = "device_map") -> str:
    """A device_map value (or a ``max_memory`` key: ``what``) as a device string: an int is a
    CUDA device index (as accelerate reads it), a torch.device its string; "meta" and "disk" are
    refused."""
    if isinstance(device, bool) or not isinstance(device, (str, int, torch.device)):
        raise UsageError(f"{what}[{key!r}]: a device is a string, an int or a torch.device, not {device!r}")
    if isinstance(device, int):
        if device < 0:
            raise UsageError(f"{what}[{key!r}]: a device index is not negative, not {device}")
        return f"cuda:{device}"
    name = str(device)
    kind = name.split(":", 1)[0]
    if kind in _REFUSED:
        raise UsageError(
            f"{what}[{key!r}] is {name!r}, which {_REFUSED[kind]}: load returns tensors, so map "
            f"every tensor to 'cpu' or a GPU (build the module on the meta device and use load_into for "
            f"tensors that should stay unloaded)"
        )
    try:
        torch.device(name)  # the spelling only: no device is touched, so "cuda:7" passes anywhere
    except RuntimeError as e:
        raise UsageError(f"{what}[{key!r}]: {name!r} is not a device: {e}") from None
    return name


def _covering_key(name: str, devices: Mapping[str, str]) -> str | None:
    """The longest key covering ``name``: the name itself, then each shorter prefix ending before
    a dot, then "". Prefixes are cut at dots only, so "model.layers.1" covers "model.layers.1.w"
    but not "model.layers.10.w"; looking each up costs the name's depth, not the map's size."""
    prefix = name
    while True:
        if prefix in devices:
            return prefix
        if not prefix:
            return None
        cut = prefix.rfind(".")
        prefix = prefix[:cut] if cut >= 0 else ""


def plan_device_map(names: Iterable[str], device_map: DeviceMap) -> dict[str, list[str]]:
    """Which names go to which device: ``{device: [names]}``, devices in the order their first
    name comes and names in the order given. A key covers the name equal to it and the names
    below it on a dot boundary ("" covers every name); the longest covering key wins. Keys that
    cover no name are ignored (a model's map names modules whose tensors a checkpoint may not
    hold, or that ``keys=`` left out). UsageError for a name no key covers (listing them), for
    "meta", "disk" or a planned map ("auto"), or for a map that is not a mapping of strings to
    devices."""
    if isinstance(device_map, str):
        if device_map in ("auto", "balanced", "sequential"):
            raise UsageError(
                f"device_map={device_map!r} is planned from the tensors' sizes: pass it to load or "
                f"load_into, or make the map with zarr_device.torch.auto_device_map"
            )
        raise UsageError(
            f"device_map must be a dict {{prefix: device}} (or 'auto', 'balanced', 'sequential'), not {device_map!r}"
        )
    if not isinstance(device_map, Mapping):
        raise UsageError(f"device_map must be a dict {{prefix: device}}, not {type(device_map).__name__}")
    devices: dict[str, str] = {}
    for key, device in device_map.items():
        if not isinstance(key, str):
            raise UsageError(f"device_map keys are module prefixes or tensor names (strings), not {key!r}")
        devices[key] = device_name(device, key)
    plan: dict[str, list[str]] = {}
    uncovered: list[str] = []
    for name in names:
        covering = _covering_key(name, devices)
        if covering is None:
            uncovered.append(name)
        else:
            plan.setdefault(devices[covering], []).append(name)
    if uncovered:
        listed = ", ".join(map(repr, uncovered[:_LISTED]))
        more = f" and {len(uncovered) - _LISTED} more" if len(uncovered) > _LISTED else ""
        raise UsageError(
            f"device_map places no device for {len(uncovered)} tensor(s): {listed}{more} "
            f"(add their module prefixes, or '' for everything else)"
        )
    return plan
