"""Zarr groups: opening and creating them, and opening arrays."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Union

import zarr_device._core as _core
from zarr_device.io.adapters.base import Like
from zarr_device.core.array import Array
from zarr_device.core.attributes import Attributes
from zarr_device.core.create import create, erase_nodes_below
from zarr_device.io.devices import DeviceLike
from zarr_device.errors import FormatError, NodeNotFoundError, UsageError
from zarr_device.core.nodes import CreateMode, EngineStore, OpenMode, join_path, json_text, node_path, read_json, write_json
from zarr_device.io.stores import StoreLike, as_store

__all__ = ["Group", "MAX_GROUP_DEPTH", "create_group", "group_too_deep", "open", "open_array", "open_group"]

#: How many levels below the group it starts from a walk of a tree goes (``Group.walk``,
#: ``all_arrays``, ``read``, ``zarr-device info``). The walks keep their own stack, so no tree
#: exhausts Python's; a tree deeper than this is refused (FormatError) rather than walked: no data
#: has a reason to nest so deep, and what is walked must still print as JSON.
MAX_GROUP_DEPTH = 256


def group_too_deep(store: EngineStore, start: str, path: str) -> FormatError:
    """The error of a walk from ``start`` that met the group at ``path`` past MAX_GROUP_DEPTH."""
    return FormatError(
        f"groups nest more than {MAX_GROUP_DEPTH} levels (MAX_GROUP_DEPTH) below "
        f"'/{start}' in {store.handle.describe()}: the members of the group at '/{path}' are too "
        "deep to walk"
    )


class Group(Mapping[str, Union["Array", "Group"]]):
    """A Zarr group: a mapping of names to arrays and groups."""

    def __init__(
        self, store: EngineStore, path: str, document: dict[str, Any], *, read_only: bool
    ) -> None:
        self._store = store
        self._path = path
        self._document = document
        self._read_only = read_only or store.read_only
        self._attrs = Attributes(
            store.handle,
            path,
            document.get("attributes", {}),
            read_only=self._read_only,
            what=f"group '{path}'",
        )

    @property
    def store(self) -> EngineStore:
        return self._store

    @property
    def path(self) -> str:
        return self._path

    @property
    def zarr_format(self) -> int:
        return int(self._document.get("zarr_format", 3))

    @property
    def attrs(self) -> Attributes:
        """The group's attributes, a mapping that writes every change through to the store."""
        return self._attrs

    @property
    def read_only(self) -> bool:
        return self._read_only

    def __repr__(self) -> str:
        return f"<zarr_device.Group {self.path or '/'!r}>"

    def __getitem__(self, name: str) -> Array | Group:
        if not isinstance(name, str):
            raise KeyError(name)
        try:
            return open(self._store, path=join_path(self._path, node_path(name)), mode="r" if self._read_only else "r+")
        except NodeNotFoundError:
            raise KeyError(name) from None

    def __iter__(self) -> Iterator[str]:
        for name in self._store.handle.list_dir(self._path):
            child = join_path(self._path, name)
            if any(
                self._store.handle.exists(join_path(child, marker))
                for marker in ("zarr.json", ".zarray", ".zgroup")
            ):
                yield name

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def read(
        self, *, device: DeviceLike = None, like: Like | None = None, out: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Reads every array of the group and of its subgroups in one call
        (:func:`zarr_device.read_many`); returns ``{"sub/name": result}``, paths relative to the
        group."""
        from zarr_device.core.many import read_many

        return read_many(self.all_arrays(), device=device, like=like, out=out)

    def all_arrays(self) -> dict[str, Array]:
        """Every array of the group and of its subgroups, by path relative to the group."""
        return {name: node for name, node in self.walk() if isinstance(node, Array)}

    def walk(self) -> Iterator[tuple[str, Array | Group]]:
        """Every node below the group, with its path relative to the group: each group before its
        members, members in name order. Iterative; FormatError for nodes more than
        :data:`MAX_GROUP_DEPTH` levels below this group."""
        # One iterator of member names for each group entered, innermost last.
        stack: list[tuple[str, Group, Iterator[str]]] = [("", self, iter(sorted(self)))]
        while stack:
            relative, group, names = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                continue
            node = group[name]
            path = join_path(relative, name)
            yield path, node
            if isinstance(node, Group):
                members = sorted(node)
                if members and len(stack) >= MAX_GROUP_DEPTH:
                    raise group_too_deep(self._store, self._path, node.path)
                stack.append((path, node, iter(members)))

    def members(self) -> dict[str, Array | Group]:
        return {name: self[name] for name in self}

    def arrays(self) -> dict[str, Array]:
        return {k: v for k, v in self.members().items() if isinstance(v, Array)}

    def groups(self) -> dict[str, Group]:
        return {k: v for k, v in self.members().items() if isinstance(v, Group)}

    def create_array(self, name: str, **kwargs: Any) -> Array:
        """Creates an array inside the group; takes :func:`create`'s keyword arguments."""
        if self._read_only:
            raise UsageError(f"group '{self.path}' is open read-only")
        return create(self._store, path=join_path(self._path, name), **kwargs)

    def create_group(
        self, name: str, *, attributes: Mapping[str, Any] | None = None, mode: CreateMode = "w-"
    ) -> Group:
        if self._read_only:
            raise UsageError(f"group '{self.path}' is open read-only")
        return create_group(self._store, path=join_path(self._path, name), attributes=attributes, mode=mode)


def open(  # noqa: A001 - mirrors zarr.open
    store: StoreLike, *, path: str = "", mode: OpenMode = "r"
) -> Array | Group:
    """Opens the array or group at ``path`` in ``store`` (a directory path, a zarr_device store or
    a zarr-python store). ``mode``: "r" read-only, "r+"/"a" read and write.
    Raises NodeNotFoundError when nothing is there."""
    if mode not in ("r", "r+", "a"):
        raise UsageError(f"mode {mode!r} is not one of 'r', 'r+', 'a' (use create() to make arrays)")
    engine_store = as_store(store)
    path = node_path(path)
    read_only = mode == "r"
    if not read_only and engine_store.read_only:
        raise UsageError(
            f"{engine_store.handle.describe()} is a read-only store: open its nodes with mode='r'"
        )
    kind = _core.node_kind(engine_store.handle, path)
    if kind == "group":
        document = read_json(engine_store, join_path(path, "zarr.json"))
        if document is None:  # Zarr v2
            attrs = read_json(engine_store, join_path(path, ".zattrs")) or {}
            document = {"zarr_format": 2, "attributes": attrs}
        return Group(engine_store, path, document, read_only=read_only)
    if kind is None and not engine_store.handle.exists(join_path(path, "zarr.json")):
        raise NodeNotFoundError(
            f"no array or group at '{path}' in {engine_store.handle.describe()} "
            "(no zarr.json, .zarray or .zgroup)"
        )
    # An array, or a zarr.json that is neither: the engine says what is wrong with it.
    return Array(_core.Array.open(engine_store.handle, path), engine_store, read_only=read_only)


def open_array(store: StoreLike, *, path: str = "", mode: OpenMode = "r") -> Array:
    """Opens the array at ``path``; NodeNotFoundError when there is none (or a group)."""
    node = open(store, path=path, mode=mode)
    if not isinstance(node, Array):
        raise NodeNotFoundError(f"'{path}' in {node.store.handle.describe()} is a group, not an array")
    return node


def open_group(store: StoreLike, *, path: str = "", mode: OpenMode = "r") -> Group:
    """Opens the group at ``path``; NodeNotFoundError when there is none (or an array)."""
    node = open(store, path=path, mode=mode)
    if not isinstance(node, Group):
        raise NodeNotFoundError(f"'{path}' in {node.store.handle.describe()} is an array, not a group")
    return node


def create_group(
    store: StoreLike,
    *,
    path: str = "",
    attributes: Mapping[str, Any] | None = None,
    mode: CreateMode = "w-",
) -> Group:
    """Creates a Zarr v3 group. ``mode``: "w-" fails when a node exists at ``path``; "w" replaces
    it: the node at ``path`` and every Zarr node below it go (files of other programs stay)."""
    engine_store = as_store(store)
    path = node_path(path)
    if mode not in ("w", "w-"):
        raise UsageError(f"mode {mode!r} is not 'w' or 'w-'")
    exists = any(engine_store.handle.exists(join_path(path, m)) for m in ("zarr.json", ".zarray", ".zgroup"))
    if exists and mode == "w-":
        raise UsageError(f"a node already exists at '{path}' (use mode='w' to replace it)")
    document = {"zarr_format": 3, "node_type": "group", "attributes": dict(attributes or {})}
    json_text(document, "the group's attributes")  # checked, as readers would, before anything is removed
    if mode == "w":
        # Only Zarr data goes: this node and the nodes below it, never other files.
        if exists:
            _core.erase_node(engine_store.handle, path)
        erase_nodes_below(engine_store, path)
    write_json(engine_store, join_path(path, "zarr.json"), document)
    return Group(engine_store, path, document, read_only=False)
