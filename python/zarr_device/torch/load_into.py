"""Filling a module from a checkpoint, ``load_state_dict(..., assign=True)`` style: the tensors
are read straight onto their device and become the module's parameters and buffers, so a module
built on the meta device is never materialised on the CPU first.

Non-persistent buffers (``register_buffer(..., persistent=False)``: a BERT's ``position_ids``, a
rotary embedding's ``inv_freq``) are not in a module's state dict, yet a module built on the meta
device has them on meta too. A checkpoint that stores one fills it like any tensor. One it lacks
is made by the module's own initialisation, run on the module that owns the buffer (its
"owner"), as transformers does after loading, by the first of these rules that writes it:

1. inside a transformers model: ``_init_weights(owner)`` of the innermost ``PreTrainedModel``
   holding the owner (transformers' ``from_pretrained`` remakes non-persistent buffers with it,
   whatever the checkpoint stores);
2. ``owner.reset_parameters()``, torch's convention for initialising a module materialised from
   meta (``Module.to_empty`` then ``reset_parameters``, as FSDP does).

Re-running the owner's constructor is not one of them: its arguments are not known in general.
Each rule runs before any tensor is read, on a stand-in of the owner: the buffers to make are
empty tensors on their target device, every other tensor of the owner and of the modules below it
a meta twin, so a rule can neither overwrite a loaded weight nor cost the memory of one. A buffer
no rule wrote (in place, or by assigning a new tensor), or whose owner has no rule, is an
:class:`UnfilledTensorError` naming it, raised before the module is touched: a tensor left on
meta would otherwise make the forward pass return NaN without an error.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from zarr_device.basics.progress import Progress
from zarr_device.errors import UsageError
from zarr_device.torch.auto_map import MaxMemory
from zarr_device.torch.device_map import DeviceMap, device_name, plan_device_map
from zarr_device.torch.load import (
    Checkpoint,
    DeviceArg,
    PathLike,
    check_auto_options,
    open_checkpoint,
    place_auto,
    read_tensors,
)

__all__ = ["LoadResult", "CheckpointMismatchError", "UnfilledTensorError", "load_into"]

_SHOWN = 20  # names listed per kind in an error; the rest are counted


@dataclass(frozen=True)
class LoadResult:
    """What :func:`load_into` found: the module's names the checkpoint lacks (``missing``), the
    checkpoint's names the module lacks (``unexpected``), and names in both whose shape or dtype
    differ (``mismatched``: name -> a description); those were not loaded. ``initialized``: the
    non-persistent buffers the checkpoint did not fill, made by the module's own initialisation
    (the module docstring's rule); they are no mismatch."""

    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: dict[str, str] = field(default_factory=dict)
    initialized: list[str] = field(default_factory=list)

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


class UnfilledTensorError(UsageError):
    """Tensors of the module that would stay on the meta device after the load: non-persistent
    buffers that the checkpoint lacks and that no initialisation rule of the module makes, or
    tensors the load left unfilled. ``names``: their names in the module."""

    def __init__(self, message: str, names: list[str]) -> None:
        super().__init__(message)
        self.names = names


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


def _non_persistent(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The module's non-persistent buffers by name (every name of a shared one)."""
    found: dict[str, torch.Tensor] = {}
    for owner_name, owner in module.named_modules(remove_duplicate=False):
        for attr in owner._non_persistent_buffers_set:  # noqa: SLF001 - where torch keeps them
            buffer = owner._buffers.get(attr)  # noqa: SLF001
            if buffer is not None:
                found[_joined(owner_name, attr)] = buffer
    return found


def _listed(names: list[str]) -> str:
    more = f", and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more


def _init_rules(module: torch.nn.Module, owner_name: str) -> list[tuple[str, Callable[[], object]]]:
    """The owner's initialisation rules, each described, in the order the module docstring gives."""
    owner = module.get_submodule(owner_name)
    rules: list[tuple[str, Callable[[], object]]] = []
    modeling = sys.modules.get("transformers.modeling_utils")  # loaded where the module is a model
    pretrained: Any = getattr(modeling, "PreTrainedModel", None)
    if isinstance(pretrained, type):
        parts = owner_name.split(".") if owner_name else []
        for depth in range(len(parts), -1, -1):  # the innermost model holding the owner
            holder = module.get_submodule(".".join(parts[:depth]))
            if isinstance(holder, pretrained):
                init: Any = getattr(holder, "_init_weights")
                rules.append((f"{type(holder).__name__}._init_weights", lambda: init(owner)))
                break
    reset = getattr(owner, "reset_parameters", None)
    if callable(reset):
        rules.append((f"{type(owner).__name__}.reset_parameters()", reset))
    return rules


def _meta_twin(tensor: torch.Tensor) -> torch.Tensor:
    twin = torch.empty_like(tensor, device="meta")
    if isinstance(tensor, torch.nn.Parameter):
        return torch.nn.Parameter(twin, requires_grad=tensor.requires_grad)
    return twin


@contextmanager
def _stand_in(owner: torch.nn.Module, made: dict[str, torch.Tensor]) -> Iterator[None]:
    """The owner with ``made`` (attr -> an empty tensor) as those buffers and a meta twin for
    every other tensor of it and its submodules; everything is put back on leaving."""
    saved: list[tuple[dict[str, Any], str, Any]] = []
    try:
        for sub in owner.modules():
            tables: tuple[dict[str, Any], ...] = (sub._parameters, sub._buffers)  # noqa: SLF001
            for table in tables:
                for attr, tensor in list(table.items()):
                    if tensor is None:
                        continue
                    saved.append((table, attr, tensor))
                    table[attr] = made[attr] if sub is owner and attr in made else _meta_twin(tensor)
        yield
    finally:
        for table, attr, tensor in reversed(saved):
            table[attr] = tensor


def _run_rule(
    owner: torch.nn.Module, rule: Callable[[], object], made: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Runs ``rule`` on a stand-in of the owner whose buffers ``made`` (attr -> an empty tensor)
    are to be made; returns those it wrote (in place, or by assigning a tensor off meta)."""
    buffers: dict[str, Any] = owner._buffers  # noqa: SLF001 - where torch keeps them
    versions = {attr: tensor._version for attr, tensor in made.items()}
    with _stand_in(owner, made), torch.no_grad():
        rule()
        now = {attr: buffers[attr] for attr in made}
    written: dict[str, torch.Tensor] = {}
    for attr, tensor in now.items():
        if tensor is made[attr] and tensor._version != versions[attr]:
            written[attr] = tensor
        elif tensor is not made[attr] and isinstance(tensor, torch.Tensor) and tensor.device.type != "meta":
            written[attr] = tensor
    return written


def _make_buffers(
    module: torch.nn.Module, names: list[str], devices: dict[str, torch.device]
) -> dict[str, torch.Tensor]:
    """The non-persistent buffers ``names`` (on meta, not filled by the checkpoint), made on
    ``devices`` by their owners' initialisation rules, each rule in turn making what the ones
    before it did not; UnfilledTensorError naming those that none makes. The module is left as
    it was."""
    by_owner: dict[str, list[str]] = {}
    for name in names:
        owner_name, _, attr = name.rpartition(".")
        by_owner.setdefault(owner_name, []).append(attr)
    made: dict[str, torch.Tensor] = {}
    done: dict[int, dict[str, torch.Tensor]] = {}  # a shared owner's buffers are made once
    problems: list[str] = []
    failed: list[str] = []
    for owner_name, attrs in by_owner.items():
        owner = module.get_submodule(owner_name)
        ready = done.setdefault(id(owner), {})
        tried: list[str] = []
        for what, rule in _init_rules(module, owner_name):
            left = [attr for attr in attrs if attr not in ready]
            if not left:
                break
            buffers: dict[str, Any] = owner._buffers  # noqa: SLF001 - _non_persistent found them there
            empty = {attr: torch.empty_like(buffers[attr], device=devices[_joined(owner_name, attr)])
                     for attr in left}
            try:
                ready.update(_run_rule(owner, rule, empty))
                tried.append(what)
            except Exception as error:  # the module's own code: its error, named below
                tried.append(f"{what} (which raised {type(error).__name__}: {error})")
        left = [_joined(owner_name, attr) for attr in attrs if attr not in ready]
        made.update({_joined(owner_name, attr): ready[attr] for attr in attrs if attr in ready})
        if left:
            failed += left
            problems.append(
                f"{_listed(left)}: not made by {' or by '.join(tried)}" if tried else
                f"{_listed(left)}: {type(owner).__name__} has no rule to make them (neither a "
                "transformers model's _init_weights nor a reset_parameters())"
            )
    if failed:
        raise UnfilledTensorError(
            "non-persistent buffers on the meta device that the checkpoint does not hold would stay "
            f"there (a forward pass would compute garbage): {'; '.join(problems)}. Store them in "
            "the checkpoint, or build their module on a real device", failed)
    return made


def _joined(owner_name: str, attr: str) -> str:
    return f"{owner_name}.{attr}" if owner_name else attr


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
    The module may be built on the meta device (``with torch.device("meta"): ...``, or
    transformers' ``AutoModel.from_config`` under it): it is then filled without ever being
    materialised elsewhere, and no tensor is left on meta. Its non-persistent buffers (not in
    its state dict) are filled from the checkpoint where it stores them (a BERT checkpoint's
    ``position_ids``: accepted, not unexpected); those it lacks are made by the module's own
    initialisation (a transformers model's ``_init_weights``, else the owning module's
    ``reset_parameters()``: the module docstring has the rule) and listed in the result's
    ``initialized``. One that no rule makes is an UnfilledTensorError (a UsageError) naming it,
    raised before the module is touched.

    ``device``: where the tensors are read to; by default where the module's tensors already
    live, or the CPU for a module on the meta device. ``strict``: the module's names, shapes and
    dtypes must match the checkpoint's exactly; a difference raises CheckpointMismatchError (a
    UsageError) listing it, before the module is touched. Without ``strict`` the names in both
    of one shape and dtype are loaded, and the result lists the rest (those of a module on meta
    stay there: the result names them).

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
    transient = {name: t for name, t in _non_persistent(module).items() if name not in expected}
    known = {**expected, **transient}
    names = set(checkpoint.manifest.names())
    mismatched: dict[str, str] = {}
    for name, tensor in known.items():
        if name in names:
            shape, dtype = checkpoint.shape(name), checkpoint.dtype(name)
            if tuple(tensor.shape) != shape or tensor.dtype != dtype:
                mismatched[name] = (
                    f"module {tuple(tensor.shape)} {tensor.dtype}, checkpoint {shape} {dtype}"
                )
    # Non-persistent buffers the checkpoint lacks are made, not missing: no checkpoint need hold them.
    to_make = [name for name, t in transient.items()
               if t.device.type == "meta" and (name not in names or name in mismatched)]
    result = LoadResult(
        missing=[name for name in expected if name not in names],
        unexpected=[name for name in checkpoint.manifest.names() if name not in known],
        mismatched=mismatched,
        initialized=to_make,
    )
    if strict and not result:
        raise CheckpointMismatchError(f"{checkpoint.where} does not fit the module: {result.describe()}", result)
    wanted = [name for name in known if name in names and name not in mismatched]
    groups = _shared_names(module)
    if strategy is not None:
        device_map = _auto_map(module, checkpoint, wanted, known, groups, strategy, max_memory, modules)
    if device_map is None:
        target = torch.device(device) if isinstance(device, (str, int)) else device or _device_of(module)
        placed: list[tuple[DeviceArg, list[str]]] = [(target, wanted)]
        devices = {name: target for name in to_make}
    else:
        placed = list(plan_device_map(wanted, device_map).items())
        devices = _made_devices(to_make, device_map, placed)
    made = _make_buffers(module, to_make, devices)  # before reading: a failure costs no read
    tensors: dict[str, torch.Tensor] = {}
    for where, on_it in placed:
        tensors.update(read_tensors(checkpoint, on_it, where, None, progress))
    module.load_state_dict({n: t for n, t in tensors.items() if n in expected}, strict=False, assign=True)
    for name, tensor in [*((n, t) for n, t in tensors.items() if n not in expected), *made.items()]:
        owner_name, _, attr = name.rpartition(".")
        module.get_submodule(owner_name)._buffers[attr] = tensor  # noqa: SLF001 - stays non-persistent
    _retie(module, groups, {*tensors, *made})
    _check_filled(module, result)
    return result


def _made_devices(
    names: list[str], device_map: DeviceMap, placed: list[tuple[DeviceArg, list[str]]]
) -> dict[str, torch.device]:
    """Where each buffer to make goes: the device the map gives its name, else the device of the
    loaded tensor nearest to it (the longest common prefix on a dot boundary), else the CPU."""
    where = {name: torch.device(device_name(d)) for d, on_it in placed for name in on_it}
    devices: dict[str, torch.device] = {}
    for name in names:
        try:
            ((mapped, _),) = plan_device_map([name], device_map).items()
            devices[name] = torch.device(mapped)
            continue
        except UsageError:  # no key of the map covers it
            pass
        parts = name.split(".")
        for depth in range(len(parts) - 1, -1, -1):
            prefix = ".".join(parts[:depth])
            near = next((d for n, d in where.items() if not prefix or n.startswith(prefix + ".")), None)
            if near is not None:
                devices[name] = near
                break
        else:
            devices[name] = torch.device("cpu")
    return devices


def _check_filled(module: torch.nn.Module, result: LoadResult) -> None:
    """Every tensor on meta now is one the result reports as not loaded (``strict=False``'s
    missing and mismatched tensors stay on meta, as listed); any other is an error."""
    reported = {*result.missing, *result.mismatched}
    left = [name for name, t in [*module.named_parameters(remove_duplicate=False),
                                 *module.named_buffers(remove_duplicate=False)]
            if t.device.type == "meta" and name not in reported]
    if left:
        raise UnfilledTensorError(f"the load left tensors on the meta device: {_listed(left)}", left)
