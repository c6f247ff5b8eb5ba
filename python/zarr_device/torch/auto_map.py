"""``device_map="auto"``: spreading a checkpoint over the GPUs, then the CPU, by size, with the
semantics of accelerate's ``infer_auto_device_map`` (and transformers' "auto", which balances):
modules are kept whole on one device, devices are filled in order, and tied tensors are counted
once and placed with their first user.

The planning (:func:`plan_auto_device_map`) is a pure function of tensor names, their sizes and
the memory each device offers, so it is checked without a GPU; only :func:`machine_memory`, the
default budgets, looks at the machine. Modules come from the names alone (a checkpoint holds no
module classes): by default each tensor's block is its shortest prefix that ends in a number,
the element of a ModuleList or Sequential ("model.layers.7", "transformer.h.0", "0"), which
is what the ``no_split_module_classes`` of transformers' models name (decoder layers, blocks);
other tensors go with their own module ("model.embed_tokens", "lm_head").
"""

from __future__ import annotations

import fnmatch
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union

import torch

import zarr_device._core as _core
from zarr_device.errors import UsageError
from zarr_device.basics.sizes import format_bytes, parse_size
from zarr_device.torch.device_map import DeviceMapValue, device_name

__all__ = [
    "AUTO_STRATEGIES",
    "MaxMemory",
    "Strategy",
    "block_of",
    "gpu_reserve",
    "host_available",
    "machine_memory",
    "memory_budgets",
    "plan_auto_device_map",
]

Strategy = Literal["balanced", "sequential"]
#: The device_map strings planned here and the strategy each means. "auto" balances, as in
#: transformers (and accelerate's "balanced"); "sequential" fills each GPU before the next.
AUTO_STRATEGIES: dict[str, Strategy] = {"auto": "balanced", "balanced": "balanced", "sequential": "sequential"}
#: ``{device: bytes}``: an int (a CUDA index), "cuda:N", "cpu" or a torch.device, to a byte count
#: or a size string ("10GiB").
MaxMemory = Mapping[DeviceMapValue, Union[int, str]]

# Of each GPU's memory, the part not offered to the weights by default: the CUDA context, torch's
# caching allocator and the first forward pass's activations and buffers. accelerate keeps the
# same tenth free when it fills one GPU.
_GPU_RESERVE_FRACTION = 0.10


def gpu_reserve(total: int, working_bytes: int) -> int:
    """The bytes of a GPU of ``total`` bytes that the default budget leaves free: a tenth of it
    (activations, buffers, the allocator's slack), and never less than the read's own working
    memory on the GPU, ``working_bytes`` (a copy of each staging slot and nvCOMP's decoding
    memory: the ``staging_bytes`` setting and the ``decode_bytes`` one, or what 0 sizes it to)."""
    return max(int(total * _GPU_RESERVE_FRACTION), working_bytes)


def host_available() -> int:
    """Host memory available to new allocations without swapping: MemAvailable on Linux, the
    free physical pages elsewhere."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def machine_memory() -> dict[str, int]:
    """The default budgets: each CUDA GPU's free memory (``torch.cuda.mem_get_info``, which
    creates a CUDA context on each) less :func:`gpu_reserve`, then the host's available memory
    less the pinned staging that reads onto a GPU allocate."""
    from zarr_device.basics.config import get_config

    config = get_config()
    staging = config.staging_bytes
    budgets: dict[str, int] = {}
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(index)
            decode = _core.decode_memory_for(config.decode_bytes, total)
            budgets[f"cuda:{index}"] = max(0, free - gpu_reserve(total, staging + decode))
    budgets["cpu"] = max(0, host_available() - (staging if budgets else 0))
    return budgets


def memory_budgets(max_memory: MaxMemory | None) -> dict[str, int]:
    """``max_memory`` as ``{device string: bytes}`` in the order devices are filled: the
    accelerators in the order given, then "cpu"; devices offering nothing are left out. None
    means :func:`machine_memory`. Only the devices named are used (as in accelerate): a map
    without "cpu" puts nothing on the CPU."""
    given: Mapping[Any, Any] = machine_memory() if max_memory is None else max_memory
    if not isinstance(given, Mapping):
        raise UsageError(f"max_memory must be a dict {{device: bytes or size}}, not {given!r}")
    budgets: dict[str, int] = {}
    for key, value in given.items():
        device = device_name(key, str(key), what="max_memory")
        if device == "cuda":
            raise UsageError(f"max_memory[{key!r}]: name each GPU by its index (0, 'cuda:0'), not 'cuda'")
        if device in budgets:
            raise UsageError(f"max_memory names {device!r} twice")
        budgets[device] = parse_size(value, what=f"max_memory[{key!r}]", minimum=0)
    ordered = {device: size for device, size in budgets.items() if device != "cpu" and size > 0}
    if budgets.get("cpu", 0) > 0:
        ordered["cpu"] = budgets["cpu"]
    return ordered


def _prefixes(name: str) -> list[str]:
    """``name``'s module prefixes on dot boundaries, shortest first, then the name itself."""
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def block_of(name: str, modules: Sequence[str] | None = None) -> str:
    """The module a tensor is kept whole with. ``modules``: glob patterns (fnmatch, as a shard
    plan's) of the modules kept whole: the shortest prefix of ``name`` a pattern matches. With
    None, the shortest prefix that ends in a number (a ModuleList's element: a layer, a block).
    Failing those, the tensor's own module (the name less its last part), so a module's weight
    and bias stay together; a name without dots is its own block."""
    prefixes = _prefixes(name)
    for prefix in prefixes:
        if modules is None:
            if prefix.rpartition(".")[2].isdigit():
                return prefix
        elif any(fnmatch.fnmatchcase(prefix, pattern) for pattern in modules):
            return prefix
    return prefixes[-2] if len(prefixes) > 1 else name


class _Groups:
    """Blocks joined by tied tensors (union-find): a tie makes its blocks one placement."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, block: str) -> str:
        self.parent.setdefault(block, block)
        while self.parent[block] != block:
            self.parent[block] = self.parent[self.parent[block]]
            block = self.parent[block]
        return block

    def join(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


def _describe(budgets: Mapping[str, int]) -> str:
    return ", ".join(f"{device} {format_bytes(size)}" for device, size in budgets.items()) or "none"


def _bounds(sizes: list[int], budgets: list[int], accelerators: int, strategy: Strategy) -> list[float]:
    """Where each device's share ends, in bytes placed so far: balanced, the accelerators share
    the model in proportion to their budgets when it fits on them; otherwise (and sequential)
    each device takes what its budget holds."""
    total = sum(sizes)
    offered = sum(budgets[:accelerators])
    bounds = [math.inf] * len(budgets)
    if strategy == "balanced" and accelerators > 1 and 0 < total <= offered:
        running = 0
        for i in range(accelerators - 1):  # the last accelerator takes the rest
            running += budgets[i]
            bounds[i] = total * running / offered
    return bounds


def plan_auto_device_map(
    sizes: Mapping[str, int],
    max_memory: Mapping[str, int],
    *,
    storage: Mapping[str, str] | None = None,
    modules: Sequence[str] | None = None,
    strategy: Strategy = "balanced",
) -> dict[str, str]:
    """A device map ``{module prefix or name: device}`` for tensors of ``sizes`` (``{name:
    bytes}``, in loading order), that :func:`~zarr_device.torch.device_map.plan_device_map`
    applies (the longest prefix wins; "" is everything).

    ``max_memory``: ``{device: bytes}`` in the order devices are filled, the CPU (if offered)
    last, as :func:`memory_budgets` makes it. ``storage``: ``{name: key}``, names with one key
    being one tensor (tied): its bytes count once, and the blocks holding them are placed
    together, where the first comes. ``modules``: as :func:`block_of` takes them.

    Blocks are placed in order of their first tensor; a block goes to the current device if it
    fits in what is left there, else to the next device that it fits (a device passed over is
    not returned to, so the model's layers stay in order across devices). ``strategy``:
    "balanced" (``device_map="auto"``) gives each accelerator a share of the model in proportion
    to its budget when the model fits on them (a block goes where its middle byte falls), so
    every GPU keeps room for activations; "sequential" fills each device before the next. The
    result is as short as the placement allows: a module whose tensors are all on one device is
    one entry ("" alone when everything is on one device).

    Raises UsageError naming a block (and its size and the budgets) that is larger than any
    device offers, or the first block that does not fit in what the devices have left.
    """
    if strategy not in ("balanced", "sequential"):
        raise UsageError(f"strategy must be 'balanced' or 'sequential', not {strategy!r}")
    if modules is not None and (isinstance(modules, str) or not all(isinstance(m, str) for m in modules)):
        raise UsageError(f"modules must be a list of module name patterns, not {modules!r}")
    storage = storage or {}
    groups = _Groups()
    blocks: dict[str, str] = {}  # name -> block
    first_block: dict[str, str] = {}  # storage key -> the block of its first name
    for name in sizes:
        block = blocks[name] = block_of(name, modules)
        key = storage.get(name, name)
        if key in first_block:
            groups.join(first_block[key], block)
        else:
            first_block[key] = block
    # Each group's bytes (a stored tensor once) and blocks, in order of its first tensor.
    group_bytes: dict[str, int] = {}
    members: dict[str, list[str]] = {}
    counted: set[str] = set()
    for name, size in sizes.items():
        root = groups.find(blocks[name])
        group_bytes.setdefault(root, 0)
        if blocks[name] not in members.setdefault(root, []):
            members[root].append(blocks[name])
        key = storage.get(name, name)
        if key not in counted:
            counted.add(key)
            group_bytes[root] += int(size)

    devices = list(max_memory)
    budgets = [int(max_memory[d]) for d in devices]
    accelerators = len([d for d in devices if d != "cpu"])
    order = list(group_bytes)
    bounds = _bounds([group_bytes[g] for g in order], budgets, accelerators, strategy)
    used = [0] * len(devices)
    placed: dict[str, str] = {}  # group -> device
    current, position = 0, 0
    for group in order:
        size = group_bytes[group]
        joined = members[group]
        what = f"module '{group}'" if len(joined) == 1 else f"modules {', '.join(map(repr, joined))} (tied)"
        if not any(size <= budget for budget in budgets):
            raise UsageError(
                f"{what} needs {format_bytes(size)}, more than any device offers "
                f"({_describe(max_memory)}): raise max_memory, add devices, or split it finer "
                f"with modules= (patterns of the modules kept whole)"
            )
        # Past this device's share (balanced): the next device, once this one holds something.
        if used[current] and position + size / 2 > bounds[current] and current + 1 < len(devices):
            current += 1
        device = current
        while device < len(devices) and used[device] + size > budgets[device]:
            device += 1
        if device == len(devices):
            left = {d: budgets[i] - used[i] for i, d in enumerate(devices) if i >= current}
            raise UsageError(
                f"the checkpoint does not fit: {what} needs {format_bytes(size)}, and the devices "
                f"from {devices[current]} on have {_describe(left)} left "
                f"({format_bytes(sum(group_bytes.values()))} in all; offered: {_describe(max_memory)})"
            )
        current = device
        used[device] += size
        position += size
        placed[group] = devices[device]
    return _compact({name: placed[groups.find(blocks[name])] for name in sizes})


def _compact(devices: Mapping[str, str]) -> dict[str, str]:
    """The shortest map that :func:`plan_device_map` reads as ``devices`` (``{name: device}``):
    a prefix whose names all go to one device is one entry; otherwise a name equal to the
    prefix gets an entry of its own and the prefix's children are mapped in turn."""
    out: dict[str, str] = {}

    def visit(prefix: str, names: list[str]) -> None:
        targets = {devices[name] for name in names}
        if len(targets) <= 1:
            if targets:
                out[prefix] = targets.pop()
            return
        children: dict[str, list[str]] = {}
        for name in names:
            if name == prefix:
                out[name] = devices[name]
                continue
            rest = name[len(prefix) + 1:] if prefix else name
            head = rest.split(".", 1)[0]
            children.setdefault(f"{prefix}.{head}" if prefix else head, []).append(name)
        for child, below in children.items():
            if child == prefix:  # an empty part ("a..b", ".w"): those names by their full names
                out.update((name, devices[name]) for name in below)
            else:
                visit(child, below)

    visit("", list(devices))
    return out
