"""What arrays, groups and their creation share: the stores they live in, node paths, the JSON
documents of groups, and the modes they open and are created with."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal, Union

import zarr_device._core as _core
from zarr_device.errors import FormatError, UsageError
from zarr_device.io.stores import LocalStore, MemoryStore, ZarrStoreAdapter

__all__ = [
    "OpenMode",
    "CreateMode",
    "EngineStore",
    "join_path",
    "node_path",
    "read_json",
    "write_json",
    "parse_json",
    "json_text",
    "check_attributes",
]

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


def _refusal(data: bytes) -> str | None:
    """What the engine's one document parser (cpp/src/metadata/json_document.cpp: its limits on
    size and nesting, strict JSON and UTF-8) says of ``data``, after the name it gives the
    document (" nests deeper than 64 levels"); None when it takes it."""
    scratch = _core.memory_store()
    scratch.set("document", data)
    try:
        _core.read_document(scratch, "document")
    except FormatError as e:
        return str(e).removeprefix(f"'document' in {scratch.describe()}")
    return None


def parse_json(text: str | bytes, what: str) -> Any:
    """JSON text from any source (a file's header, a value inside another document), parsed as
    the engine parses metadata documents: within its limits on size and nesting, so that hostile
    text is a FormatError naming ``what``, never a RecursionError or a stack overflow. JSON
    objects keep their order (the engine's copy of a document keeps none, so the text is parsed
    again here once the engine has taken it)."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    refusal = _refusal(data)
    if refusal is not None:
        raise FormatError(f"{what}{refusal}")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:  # not expected of text the engine took
        raise FormatError(f"{what} is not valid JSON: {e}") from None


def json_text(document: Any, what: str, *, indent: int | None = None) -> str:
    """``document`` as the JSON text a writer stores, checked to read back: UsageError naming
    ``what``, before anything is written, for values JSON cannot hold (NaN, infinity, other
    types) and for documents every reader refuses (nesting deeper than the engine's limit, larger
    than its size limit, strings that are not Unicode text), as the engine's parser itself says
    (:func:`parse_json`). The one check before every metadata write; it does not recurse on the
    document's depth (deeper than Python's recursion limit is the same UsageError)."""
    try:
        text = json.dumps(document, indent=indent, allow_nan=False)
    except RecursionError:
        raise UsageError(f"{what} nests too deep to be stored: readers refuse JSON that deep") from None
    except (TypeError, ValueError) as e:
        raise UsageError(f"{what} must be JSON (no NaN or infinity): {e}") from None
    refusal = _refusal(text.encode("utf-8", "surrogatepass"))
    if refusal is not None:
        raise UsageError(f"{what} cannot be stored: as written, it{refusal}, which readers refuse")
    return text


_ATTRIBUTES_PREFIX = '{"attributes": '


def check_attributes(attributes: Mapping[str, Any], what: str) -> str:
    """:func:`json_text` of attributes where a node's zarr.json holds them (one level down, as
    ``{"attributes": ...}``), so that they are checked at the depth readers meet them; returns
    the attributes' own JSON text."""
    text = json_text({"attributes": dict(attributes)}, what)
    return text[len(_ATTRIBUTES_PREFIX) : -1]


def write_json(store: EngineStore, key: str, document: Any) -> None:
    """Stores a JSON document at ``key``: UsageError, before anything is written, for what JSON
    cannot hold or readers would refuse (:func:`json_text`)."""
    text = json_text(document, f"'{key}'", indent=2)
    store.handle.set(key, text.encode())


def node_path(path: str) -> str:
    """A node path as given ("/a/b/" is "a/b"), checked by the engine's one path rule."""
    if not isinstance(path, str):
        raise UsageError(f"path must be a string, not {path!r}")
    return _core.normalize_node_path(path)
