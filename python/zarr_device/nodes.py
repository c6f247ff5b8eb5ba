"""What arrays, groups and their creation share: the stores they live in, node paths, the JSON
documents of groups, and the modes they open and are created with."""

from __future__ import annotations

import json
from typing import Any, Literal, Union

from zarr_device import _core
from zarr_device.errors import UsageError
from zarr_device.stores import LocalStore, MemoryStore, ZarrStoreAdapter

__all__ = ["OpenMode", "CreateMode", "EngineStore", "join_path", "node_path", "read_json", "write_json"]

OpenMode = Literal["r", "r+", "a"]
CreateMode = Literal["w", "w-"]
EngineStore = Union[LocalStore, MemoryStore, ZarrStoreAdapter]


def join_path(a: str, b: str) -> str:
    """Two node paths (or a path and a key) joined by one "/"."""
    return "/".join(p for p in (a.strip("/"), b.strip("/")) if p)


def read_json(store: EngineStore, key: str) -> Any | None:
    """The JSON document at ``key``, or None when there is none."""
    # Parsed by the engine, with its limits on size and nesting (FormatError naming the key).
    text = _core.read_document(store.handle, key)
    return None if text is None else json.loads(text)


def write_json(store: EngineStore, key: str, document: Any) -> None:
    """Stores a JSON document at ``key`` (UsageError for what JSON cannot hold)."""
    try:
        text = json.dumps(document, indent=2, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise UsageError(f"'{key}': metadata must be JSON (no NaN or infinity): {e}") from None
    store.handle.set(key, text.encode())


def node_path(path: str) -> str:
    """A node path as given ("/a/b/" is "a/b"), checked by the engine's one path rule."""
    if not isinstance(path, str):
        raise UsageError(f"path must be a string, not {path!r}")
    return _core.normalize_node_path(path)
