"""``zarr-device info``: the tree of arrays and groups in a store, with shapes, codecs and sizes."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TextIO

import zarr_device as zd
from zarr_device.core import group as groups
from zarr_device.tools.cli.common import compression_ratio
from zarr_device.core.nodes import join_path
from zarr_device.basics.sizes import format_bytes

# Files that hold metadata rather than chunks.
_METADATA_FILES = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})
_NODE_MARKERS = ("zarr.json", ".zarray", ".zgroup")


def _codec_name_and_config(codec: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """Splits a v3 codec (``name``/``configuration``) or a v2 numcodecs entry (``id``, keys)."""
    if "name" in codec:
        return str(codec["name"]), dict(codec.get("configuration") or {})
    return str(codec.get("id", "?")), {k: v for k, v in codec.items() if k != "id"}


def _format_value(value: Any) -> str:
    if isinstance(value, list):
        return "(" + ", ".join(_format_value(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _codec_text(codec: Mapping[str, Any]) -> str:
    """One codec, compactly: ``zstd(level=0)``, ``bytes(little)``, ``crc32c``."""
    name, config = _codec_name_and_config(codec)
    if name == "sharding_indexed":
        inner = codec_summary(config.get("codecs", []))
        index = codec_summary(config.get("index_codecs", []))
        shape = _format_value(list(config.get("chunk_shape", [])))
        where = config.get("index_location", "end")
        return f"sharding(inner chunks {shape}: {inner}; index at {where}: {index})"
    if name == "bytes":
        endian = config.get("endian")
        return f"bytes({endian})" if endian else "bytes"
    if name in ("zstd", "gzip", "zlib") and "checksum" in config and not config["checksum"]:
        config.pop("checksum")
    if name == "blosc":
        config.pop("typesize", None)
        if config.get("blocksize") == 0:
            config.pop("blocksize")
    if not config:
        return name
    return f"{name}(" + ", ".join(f"{k}={_format_value(v)}" for k, v in config.items()) + ")"


def codec_summary(codecs: Sequence[Mapping[str, Any]]) -> str:
    """A codec chain on one line: ``bytes(little) -> zstd(level=0)``."""
    return " -> ".join(_codec_text(c) for c in codecs) if codecs else "(none)"


def _is_local(store: Any) -> bool:
    return isinstance(store, zd.LocalStore)


def _list_names(store: Any, prefix: str) -> list[str]:
    """The names directly below ``prefix`` in a store (files and folders alike)."""
    if _is_local(store):
        folder = os.path.join(store.root, prefix) if prefix else str(store.root)
        try:
            return sorted(os.listdir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return []
    return list(store.handle.list_dir(prefix))


def _key_size(store: Any, key: str) -> int | None:
    """The size of the value at ``key``, or None where there is none (a folder)."""
    if _is_local(store):
        full = os.path.join(store.root, key)
        return os.path.getsize(full) if os.path.isfile(full) else None
    value = store.handle.get(key)
    return None if value is None else len(value)


def _has_key(store: Any, key: str) -> bool:
    if _is_local(store):
        return os.path.isfile(os.path.join(store.root, key))
    return store.handle.get(key) is not None


def stored_bytes(store: Any, path: str) -> int:
    """The sum of the sizes of an array's chunk (or shard) files, metadata left out. Symbolic
    links are not followed (nothing outside the store is looked at); the walk is iterative."""
    if _is_local(store):
        total = 0
        folders = [os.path.join(store.root, path)]
        top = True
        while folders:
            try:
                with os.scandir(folders.pop()) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            folders.append(entry.path)
                        elif not entry.is_file(follow_symlinks=False):
                            continue
                        elif top and entry.name in _METADATA_FILES:
                            continue
                        elif entry.name.startswith(".") and ".tmp" in entry.name:
                            continue  # a write in progress
                        else:
                            total += entry.stat(follow_symlinks=False).st_size
            except (FileNotFoundError, NotADirectoryError):
                pass
            top = False
        return total
    return _walk_sizes(store, path)


def _walk_sizes(store: Any, prefix: str) -> int:
    total = 0
    todo = [(prefix, True)]
    while todo:
        folder, top = todo.pop()
        for name in _list_names(store, folder):
            if top and name in _METADATA_FILES:
                continue
            key = join_path(folder, name)
            size = _key_size(store, key)
            if size is None:
                todo.append((key, False))
            else:
                total += size
    return total


def _child_names(store: Any, path: str) -> list[str]:
    """The names of the arrays and groups directly inside the group at ``path``."""
    return [
        name
        for name in _list_names(store, path)
        if name not in _METADATA_FILES
        and any(_has_key(store, join_path(join_path(path, name), m)) for m in _NODE_MARKERS)
    ]


def describe_array(array: zd.Array) -> dict[str, Any]:
    """What ``info`` reports about an array, as plain JSON-ready values."""
    raw = array.nbytes
    stored = stored_bytes(array.store, array.path)
    ratio = compression_ratio(raw, stored)
    return {
        "node_type": "array",
        "path": "/" + array.path,
        "zarr_format": array.zarr_format,
        "shape": list(array.shape),
        "dtype": str(array.dtype),
        "chunks": list(array.chunks),
        "shards": list(array.shards) if array.shards is not None else None,
        "codecs": codec_summary(array.codecs),
        "codec_chain": array.codecs,
        "fill_value": array.fill_value,
        "attributes": len(array.attrs),
        "stored_bytes": stored,
        "nbytes": raw,
        "ratio": None if ratio is None else round(ratio, 3),
    }


def _group_entry(group: zd.Group) -> dict[str, Any]:
    # Sizes and ratio are filled in once the members are described.
    return {
        "node_type": "group",
        "path": "/" + group.path,
        "zarr_format": group.zarr_format,
        "attributes": len(group.attrs),
        "stored_bytes": 0,
        "nbytes": 0,
        "ratio": None,
        "members": [],
    }


def _add_sizes(entry: dict[str, Any]) -> None:
    members = entry["members"]
    entry["stored_bytes"] = sum(int(m["stored_bytes"]) for m in members)
    entry["nbytes"] = sum(int(m["nbytes"]) for m in members)
    ratio = compression_ratio(entry["nbytes"], entry["stored_bytes"])
    entry["ratio"] = None if ratio is None else round(ratio, 3)


def describe_group(group: zd.Group) -> dict[str, Any]:
    """What ``info`` reports about a group and everything inside it, members nested. The tree is
    walked with a stack of its own, at most MAX_GROUP_DEPTH levels of groups deep (FormatError
    naming the group past it)."""
    root = _group_entry(group)
    # For each group entered (innermost last): its entry, the group, its members' names to go.
    stack: list[tuple[dict[str, Any], zd.Group, Iterator[str]]] = [
        (root, group, iter(_child_names(group.store, group.path)))
    ]
    while stack:
        entry, current, names = stack[-1]
        name = next(names, None)
        if name is None:
            _add_sizes(entry)
            stack.pop()
            continue
        node = zd.open(current.store, path=join_path(current.path, name))
        if isinstance(node, zd.Array):
            entry["members"].append(describe_array(node))
            continue
        member = _group_entry(node)
        entry["members"].append(member)
        names_below = _child_names(node.store, node.path)
        if names_below and len(stack) >= groups.MAX_GROUP_DEPTH:
            raise groups.group_too_deep(group.store, group.path, node.path)
        stack.append((member, node, iter(names_below)))
    return root


def describe_node(node: zd.Array | zd.Group) -> dict[str, Any]:
    """Describes an array or a group (see :func:`describe_array`, :func:`describe_group`)."""
    return describe_array(node) if isinstance(node, zd.Array) else describe_group(node)


def shape_text(shape: Sequence[int]) -> str:
    return _format_value(list(shape))


def _ratio_text(ratio: Any) -> str:
    return "n/a" if ratio is None else f"{ratio:.2f}x"


def _array_lines(info: Mapping[str, Any]) -> list[str]:
    shards = f"  shards {shape_text(info['shards'])}" if info["shards"] else ""
    return [
        f"array (zarr v{info['zarr_format']})  shape {shape_text(info['shape'])}  "
        f"{info['dtype']}  chunks {shape_text(info['chunks'])}{shards}",
        f"codecs: {info['codecs']}",
        f"stored {format_bytes(info['stored_bytes'])}, raw {format_bytes(info['nbytes'])}, "
        f"ratio {_ratio_text(info['ratio'])}",
    ]


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _group_line(info: Mapping[str, Any]) -> str:
    text = (
        f"group (zarr v{info['zarr_format']})  {plural(len(info['members']), 'member')}, "
        f"{plural(info['attributes'], 'attribute')}"
    )
    if info["nbytes"]:
        text += (
            f"; arrays stored {format_bytes(info['stored_bytes'])}, raw "
            f"{format_bytes(info['nbytes'])}, ratio {_ratio_text(info['ratio'])}"
        )
    return text


def _tree_lines(info: Mapping[str, Any]) -> Iterator[str]:
    """The lines under a node, drawn with box characters (walked with a stack of its own)."""
    # For each group whose members are being drawn: its members to go and their prefix.
    stack: list[tuple[Iterator[tuple[int, Mapping[str, Any]]], int, str]] = []
    members = info.get("members", [])
    stack.append((iter(enumerate(members)), len(members), ""))
    while stack:
        items, count, prefix = stack[-1]
        item = next(items, None)
        if item is None:
            stack.pop()
            continue
        i, member = item
        last = i == count - 1
        branch, cont = ("└── ", "    ") if last else ("├── ", "│   ")
        name = member["path"].rsplit("/", 1)[-1]
        if member["node_type"] == "group":
            yield f"{prefix}{branch}{name}/  {_group_line(member)}"
            inner = member.get("members", [])
            stack.append((iter(enumerate(inner)), len(inner), prefix + cont))
        else:
            first, *rest = _array_lines(member)
            yield f"{prefix}{branch}{name}  {first}"
            for line in rest:
                yield f"{prefix}{cont}    {line}"


def format_tree(info: Mapping[str, Any], root_label: str) -> str:
    """The text ``info`` prints: the node at the top, then its members as a tree."""
    if info["node_type"] == "array":
        first, *rest = _array_lines(info)
        return "\n".join([f"{root_label}  {first}", *("    " + line for line in rest)])
    return "\n".join([f"{root_label}  {_group_line(info)}", *_tree_lines(info)])


def run_info(args: argparse.Namespace, out: TextIO) -> int:
    """``zarr-device info``."""
    node = zd.open(args.store, path=args.path)
    info = describe_node(node)
    if args.json:
        json.dump(info, out, indent=2)
        out.write("\n")
    else:
        label = args.store + (f" :: /{args.path.strip('/')}" if args.path.strip("/") else "")
        out.write(format_tree(info, label) + "\n")
    return 0


_INFO_EPILOG = """\
For every array: shape, dtype, chunks, shards, the codec chain, the bytes its chunk files take
(stored), its decoded size (raw) and their ratio. For every group: its attributes and members.

examples:
  zarr-device info data.zarr
  zarr-device info data.zarr --path measurements/temperature
  zarr-device info data.zarr --json | python -m json.tool"""


def add_command(commands: Any) -> None:
    info = commands.add_parser(
        "info",
        help="print the arrays and groups in a store",
        description="Print the tree of the array or group at PATH.",
        epilog=_INFO_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    info.add_argument("store", metavar="PATH", help="a local directory holding a Zarr store")
    info.add_argument(
        "--path", default="", metavar="INNER", help="the node inside PATH to describe (default: the root)"
    )
    info.add_argument("--json", action="store_true", help="print JSON instead of a tree")
    info.set_defaults(run=run_info)
