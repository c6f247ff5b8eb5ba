"""The golden directory being written: a store directory per case, the expected values as .npy
and one manifest entry (``Case``) per array or group, read back from the metadata written."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .values import EXTENSION_DTYPES


@dataclass
class Case:
    """One manifest entry."""

    name: str  # unique: "<writer>/<case>" or "<writer>/<case>:<node path>"
    writer: str  # "zarr-python" | "tensorstore"
    zarr_format: int
    kind: str  # "array" | "group"
    store: str  # the store directory, relative to the golden directory
    path: str  # the node's path inside the store ("" for the root)
    dtype: str | None = None  # Zarr v3 name of the data type
    shape: list[int] | None = None
    chunks: list[int] | None = None  # the inner chunk shape (read chunk)
    shards: list[int] | None = None  # the shard shape, None without sharding
    codecs: Any = None  # v3: the "codecs" list of zarr.json; v2: compressor/filters/order
    fill_value: Any = None  # as written in the metadata
    expected: str | None = None  # .npy path relative to the golden directory
    expected_bits: bool = False  # the .npy holds raw bits (bfloat16, float8)
    attributes: dict[str, Any] = field(default_factory=dict)
    chunk_key_encoding: Any = None
    v2_dtype: str | None = None  # v2 only: the dtype string of .zarray
    ts_data_type: str | None = None  # tensorstore only: the data_type written to zarr.json
    members: dict[str, str] | None = None  # groups only: member name -> "array" | "group"
    missing_chunks: list[str] = field(default_factory=list)  # chunk keys absent from the store
    description: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in self.__dict__.items():
            if value is None:
                continue
            out[key] = value
        return out


class Golden:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.cases: list[Case] = []

    def store_dir(self, writer: str, case: str) -> Path:
        path = self.out / writer / case
        if path.exists():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def save_expected(self, writer: str, stem: str, values: np.ndarray) -> tuple[str, bool]:
        rel = f"{writer}/{stem}.npy"
        values = np.array(values, order="C")
        bits = False
        if values.dtype in EXTENSION_DTYPES.values():
            values = values.view(np.uint16 if values.dtype.itemsize == 2 else np.uint8)
            bits = True
        elif values.dtype.byteorder not in "=|":
            values = values.astype(values.dtype.newbyteorder("="))
        np.save(self.out / rel, values, allow_pickle=False)
        return rel, bits

    def missing(self, store: Path, node: str, meta: dict[str, Any], fmt: int) -> list[str]:
        """Chunk keys of the (outer) chunk grid that are absent from the store."""
        if fmt == 3:
            shape = meta["shape"]
            grid = meta["chunk_grid"]["configuration"]["chunk_shape"]
            cke = meta["chunk_key_encoding"]
            sep = cke.get("configuration", {}).get("separator", "/" if cke["name"] == "default" else ".")
            prefix = "c" + sep if cke["name"] == "default" else ""
        else:
            shape = meta["shape"]
            grid = meta["chunks"]
            sep = meta.get("dimension_separator", ".")
            prefix = ""
        counts = [math.ceil(s / c) for s, c in zip(shape, grid)]
        missing = []
        for idx in np.ndindex(*counts):
            if not idx:
                key = "c" if fmt == 3 and cke["name"] == "default" else "0"
            else:
                key = prefix + sep.join(str(i) for i in idx)
            if not (store / node / key).exists():
                missing.append(key)
        return missing

    def record(
        self,
        writer: str,
        case: str,
        store_rel: str,
        node: str,
        zarr_format: int,
        expected: np.ndarray,
        description: str,
        dtype_name: str | None = None,
    ) -> Case:
        store = self.out / writer / store_rel
        stem = case if not node else f"{store_rel}__{node.replace('/', '__')}"
        rel, bits = self.save_expected(writer, stem, expected)
        if zarr_format == 3:
            meta = json.loads((store / node / "zarr.json").read_text())
            codecs = meta["codecs"]
            chunks = meta["chunk_grid"]["configuration"]["chunk_shape"]
            shards = None
            if codecs and codecs[0]["name"] == "sharding_indexed":
                shards = chunks
                chunks = codecs[0]["configuration"]["chunk_shape"]
            entry = Case(
                name=f"{writer}/{case}" if not node else f"{writer}/{store_rel}:{node}",
                writer=writer,
                zarr_format=3,
                kind="array",
                store=f"{writer}/{store_rel}",
                path=node,
                dtype=dtype_name or meta["data_type"],
                shape=meta["shape"],
                chunks=chunks,
                shards=shards,
                codecs=codecs,
                fill_value=meta["fill_value"],
                expected=rel,
                expected_bits=bits,
                attributes=meta.get("attributes", {}),
                chunk_key_encoding=meta["chunk_key_encoding"],
                ts_data_type=meta["data_type"] if writer == "tensorstore" else None,
                missing_chunks=self.missing(store, node, meta, 3),
                description=description,
            )
        else:
            meta = json.loads((store / node / ".zarray").read_text())
            attrs_file = store / node / ".zattrs"
            attrs = json.loads(attrs_file.read_text()) if attrs_file.exists() else {}
            v2_dtype = meta["dtype"]
            entry = Case(
                name=f"{writer}/{case}" if not node else f"{writer}/{store_rel}:{node}",
                writer=writer,
                zarr_format=2,
                kind="array",
                store=f"{writer}/{store_rel}",
                path=node,
                dtype=np.dtype(v2_dtype).newbyteorder("=").name if np.dtype(v2_dtype).kind != "b" else "bool",
                shape=meta["shape"],
                chunks=meta["chunks"],
                codecs={
                    "compressor": meta["compressor"],
                    "filters": meta["filters"],
                    "order": meta["order"],
                    "dimension_separator": meta.get("dimension_separator", "."),
                },
                fill_value=meta["fill_value"],
                expected=rel,
                attributes=attrs,
                chunk_key_encoding={"name": "v2", "configuration": {"separator": meta.get("dimension_separator", ".")}},
                v2_dtype=v2_dtype,
                missing_chunks=self.missing(store, node, meta, 2),
                description=description,
            )
        self.cases.append(entry)
        return entry
