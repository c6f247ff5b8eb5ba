"""The file edits a mutation is made of (:class:`Xor`, :class:`Splice`, ..., :class:`JsonEdit`)
and :class:`Mutation` itself: each edit is applied to a copy of an array's files and rendered as the
reproducer's Python lines."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from .arrays import METADATA_KEYS


# ----------------------------------------------------------------------------------------------
# Mutations: explicit file edits, applied here and rendered as the reproducer's Python lines


def _path_code(key: str) -> str:
    return f"p = root / {key!r}"


@dataclass(frozen=True)
class Xor:
    """XORs single bytes of a file with masks."""

    key: str
    flips: tuple[tuple[int, int], ...]  # (offset, mask)

    def apply(self, root: Path) -> None:
        p = root / self.key
        data = bytearray(p.read_bytes())
        for offset, mask in self.flips:
            data[offset] ^= mask
        p.write_bytes(bytes(data))

    def code(self) -> list[str]:
        return [_path_code(self.key), "d = bytearray(p.read_bytes())",
                *(f"d[{o}] ^= {m:#04x}" for o, m in self.flips), "p.write_bytes(bytes(d))"]


@dataclass(frozen=True)
class Splice:
    """Replaces the bytes ``[start:end]`` of a file with ``data`` (inserts when start == end)."""

    key: str
    start: int
    end: int
    data: bytes

    def apply(self, root: Path) -> None:
        p = root / self.key
        old = p.read_bytes()
        p.write_bytes(old[: self.start] + self.data + old[self.end:])

    def code(self) -> list[str]:
        middle = f" + bytes.fromhex({self.data.hex()!r})" if self.data else ""
        return [_path_code(self.key), "d = p.read_bytes()", f"p.write_bytes(d[:{self.start}]{middle} + d[{self.end}:])"]


@dataclass(frozen=True)
class WriteFile:
    """Replaces a file's whole content."""

    key: str
    data: bytes

    def apply(self, root: Path) -> None:
        (root / self.key).write_bytes(self.data)

    def code(self) -> list[str]:
        return [f"(root / {self.key!r}).write_bytes(bytes.fromhex({self.data.hex()!r}))"]


@dataclass(frozen=True)
class CreateFile:
    """Creates a file where there was none (its directories too)."""

    key: str
    data: bytes

    def apply(self, root: Path) -> None:
        p = root / self.key
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(self.data)

    def code(self) -> list[str]:
        return [_path_code(self.key), "p.parent.mkdir(parents=True, exist_ok=True)",
                f"p.write_bytes(bytes.fromhex({self.data.hex()!r}))"]


@dataclass(frozen=True)
class MakeDirectory:
    """Replaces a file with an empty directory of the same name."""

    key: str

    def apply(self, root: Path) -> None:
        p = root / self.key
        p.unlink()
        p.mkdir()

    def code(self) -> list[str]:
        return [_path_code(self.key), "p.unlink()", "p.mkdir()"]


@dataclass(frozen=True)
class CopyFile:
    """Overwrites file ``dst`` with file ``src`` of the same array."""

    src: str
    dst: str

    def apply(self, root: Path) -> None:
        (root / self.dst).write_bytes((root / self.src).read_bytes())

    def code(self) -> list[str]:
        return [f"(root / {self.dst!r}).write_bytes((root / {self.src!r}).read_bytes())"]


@dataclass(frozen=True)
class Swap:
    """Swaps the contents of two files."""

    a: str
    b: str

    def apply(self, root: Path) -> None:
        pa, pb = root / self.a, root / self.b
        da, db = pa.read_bytes(), pb.read_bytes()
        pa.write_bytes(db)
        pb.write_bytes(da)

    def code(self) -> list[str]:
        return [f"a, b = root / {self.a!r}, root / {self.b!r}",
                "da, db = a.read_bytes(), b.read_bytes()", "a.write_bytes(db)", "b.write_bytes(da)"]


@dataclass(frozen=True)
class Delete:
    """Deletes a file."""

    key: str

    def apply(self, root: Path) -> None:
        (root / self.key).unlink()

    def code(self) -> list[str]:
        return [f"(root / {self.key!r}).unlink()"]


@dataclass(frozen=True)
class Reencode:
    """Re-encodes a (UTF-8) text file in another encoding."""

    key: str
    encoding: str

    def apply(self, root: Path) -> None:
        p = root / self.key
        p.write_bytes(p.read_bytes().decode().encode(self.encoding))

    def code(self) -> list[str]:
        return [_path_code(self.key), f"p.write_bytes(p.read_bytes().decode().encode({self.encoding!r}))"]


PLACEHOLDER = "__FUZZ__"


@dataclass(frozen=True)
class JsonEdit:
    """Parses a JSON document, sets (``value_expr`` given) or deletes the member at ``path`` and
    writes it back with ``json.dumps``; a set value is spliced in as the text ``eval(value_expr)``
    (so it may be any text: a huge integer, invalid JSON, deep nesting)."""

    key: str
    path: tuple[str | int, ...]
    value_expr: str | None  # None: delete the member

    def apply(self, root: Path) -> None:
        p = root / self.key
        doc = json.loads(p.read_bytes())
        container = doc
        for part in self.path[:-1]:
            container = container[part]
        if self.value_expr is None:
            del container[self.path[-1]]
            p.write_bytes(json.dumps(doc).encode())
        else:
            container[self.path[-1]] = PLACEHOLDER
            text = json.dumps(doc).replace(json.dumps(PLACEHOLDER), _json_value_text(self.value_expr))
            p.write_bytes(text.encode())

    def code(self) -> list[str]:
        target = "doc" + "".join(f"[{part!r}]" for part in self.path)
        lines = [_path_code(self.key), "doc = json.loads(p.read_bytes())"]
        if self.value_expr is None:
            return [*lines, f"del {target}", "p.write_bytes(json.dumps(doc).encode())"]
        return [*lines, f"{target} = {PLACEHOLDER!r}",
                f"p.write_bytes(json.dumps(doc).replace({json.dumps(PLACEHOLDER)!r}, {self.value_expr}).encode())"]


Op = Union[Xor, Splice, WriteFile, CreateFile, MakeDirectory, CopyFile, Swap, Delete, Reencode, JsonEdit]


@dataclass(frozen=True)
class Mutation:
    """One mutation of an array's files."""

    kind: str
    target: str  # the key mutated (the first, for a swap)
    detail: str
    ops: tuple[Op, ...]

    @property
    def is_metadata(self) -> bool:
        return Path(self.target).name in METADATA_KEYS

    def apply(self, root: Path) -> None:
        for op in self.ops:
            op.apply(root)

    def code(self) -> list[str]:
        return [line for op in self.ops for line in op.code()]


_JSON_VALUE_CACHE: dict[str, str] = {}


def _json_value_text(expr: str) -> str:
    """The text a value expression stands for (expressions come from the generators in mutations.py)."""
    text = _JSON_VALUE_CACHE.get(expr)
    if text is None:
        text = str(eval(expr, {"json": json}))  # noqa: S307 - our own expressions, as in the reproducers
        _JSON_VALUE_CACHE[expr] = text
    return text
