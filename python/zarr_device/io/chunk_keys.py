"""How Zarr arrays name their stored chunks (shards, when sharded), read from the metadata
documents as stored: the key's pattern and the grid index each key names. One reading of chunk
key encodings for the walks that look at what is stored (``fsck``, ``convert``'s listing)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["ChunkKeys", "chunk_keys_for", "v2_chunk_keys", "v3_chunk_keys"]

#: One grid index as an encoding spells it: decimal, no leading zeros (the key built again from
#: the index is the key), at most 20 digits.
_INDEX = r"(?:0|[1-9][0-9]{0,19})"


@dataclass(frozen=True)
class ChunkKeys:
    """How an array names its stored chunks (shards, when sharded): the key's pattern, and how
    to turn a key into the chunk's grid index."""

    pattern: re.Pattern[str]
    prefix: str  # "c" + separator for the default encoding, "" for v2's
    separator: str
    ndim: int

    def index(self, key: str) -> tuple[int, ...]:
        if self.ndim == 0:
            return ()
        return tuple(int(part) for part in key[len(self.prefix):].split(self.separator))


def chunk_keys_for(ndim: int, default: bool, separator: str) -> ChunkKeys:
    sep = re.escape(separator)
    if default:
        pattern = "c" + "".join(sep + _INDEX for _ in range(ndim))
        prefix = "c" + separator
    else:
        pattern = sep.join([_INDEX] * ndim) if ndim else "0"
        prefix = ""
    return ChunkKeys(re.compile(pattern), prefix, separator, ndim)


def _ndim(document: dict[str, Any]) -> int | None:
    shape = document.get("shape")
    if not isinstance(shape, list) or len(shape) > 64:
        return None
    return len(shape)


def v3_chunk_keys(document: dict[str, Any]) -> ChunkKeys | None:
    ndim = _ndim(document)
    encoding = document.get("chunk_key_encoding", {"name": "default"})
    if ndim is None or not isinstance(encoding, dict):
        return None
    name = encoding.get("name")
    configuration = encoding.get("configuration") or {}
    if name not in ("default", "v2") or not isinstance(configuration, dict):
        return None
    separator = configuration.get("separator", "/" if name == "default" else ".")
    if separator not in ("/", "."):
        return None
    return chunk_keys_for(ndim, name == "default", separator)


def v2_chunk_keys(document: dict[str, Any]) -> ChunkKeys | None:
    ndim = _ndim(document)
    separator = document.get("dimension_separator") or "."
    if ndim is None or separator not in ("/", "."):
        return None
    return chunk_keys_for(ndim, False, separator)
