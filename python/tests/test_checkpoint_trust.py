"""Checkpoints know their chunks, and nothing is written that cannot be read (issue 52).

- A chunk or shard file missing from a checkpoint is a MissingChunkError naming the tensor and
  the chunk key, never zeros: the root attribute lists the files left out as all zeros
  (``fill_chunks``). Old checkpoints, without the list, keep Zarr's rule; so do plain arrays.
- Arrays are read only as checkpoint writers store them: metadata edits that would make the same
  bytes read as other values (byte order, fill value, chunk shapes) are FormatErrors.
- Every writer of zarr.json attributes refuses, before it writes anything, what readers would
  refuse (nesting deeper than the engine's parser takes); JSON read from safetensors headers goes
  through that parser too.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import zarr_device as zd  # noqa: E402
import zarr_device.torch as zt  # noqa: E402
from zarr_device.errors import MissingChunkError  # noqa: E402
from zarr_device.core.nodes import json_text, parse_json  # noqa: E402

ROOT = "zarr_device_checkpoint"
CODECS = {
    "raw": {},
    "crc32c": {"checksum": "crc32c"},
    "zstd": {"compressors": "zstd"},
}


def nested(levels: int) -> Any:
    """A JSON value of ``levels`` nested lists (built without recursion)."""
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def deep_dict(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


def state() -> dict[str, Any]:
    g = torch.Generator().manual_seed(1)
    return {
        "small": torch.randn(10, 7, generator=g),  # one chunk file, unsharded
        "sharded": torch.randn(600, 1024, generator=g),  # 2.4 MiB: chunks inside one shard file
        "zeros": torch.zeros(600, 1024),  # left out whole
        "bias": torch.zeros(7),
        "scalar": torch.tensor(0.0),
        "empty": torch.zeros(0, 3),
        "half": torch.cat([torch.zeros(300, 1024), torch.randn(300, 1024, generator=g)]),
    }


def root_attribute(path: Path) -> dict[str, Any]:
    attribute: dict[str, Any] = json.loads((path / "zarr.json").read_text())["attributes"][ROOT]
    return attribute


def edit_root(path: Path, change: Any) -> None:
    document = json.loads((path / "zarr.json").read_text())
    change(document["attributes"][ROOT])
    (path / "zarr.json").write_text(json.dumps(document))


def edit_array(path: Path, name: str, change: Any) -> None:
    document = json.loads((path / name / "zarr.json").read_text())
    change(document)
    (path / name / "zarr.json").write_text(json.dumps(document))


def assert_same(loaded: dict[str, Any], expected: dict[str, Any]) -> None:
    assert list(loaded) == list(expected)
    for name, tensor in expected.items():
        assert loaded[name].dtype == tensor.dtype and loaded[name].shape == tensor.shape, name
        as_bytes = [t.reshape(-1).view(torch.uint8) for t in (loaded[name], tensor)]
        assert torch.equal(*as_bytes), name


# ----------------------------------------------------------------------------------------------
# Missing chunks


@pytest.mark.parametrize("codecs", list(CODECS))
@pytest.mark.parametrize("tensor", ["small", "sharded", "half"])
def test_a_deleted_chunk_or_shard_file_names_the_tensor(tmp_path: Path, codecs: str, tensor: str) -> None:
    sd = state()
    path = tmp_path / "ck"
    zt.save(sd, path, **CODECS[codecs])
    assert_same(zt.load(path), sd)
    victim = path / tensor / "c" / "0" / "0"  # "sharded", "half": the shard file
    assert victim.is_file()
    victim.unlink()
    for read in (lambda: zt.load(path), lambda: list(zt.iter_load(path)), lambda: zt.metadata(path),
                 lambda: zt.load(path, keys=["small", "sharded", "half"])):
        with pytest.raises(MissingChunkError, match=rf"tensor '{tensor}': chunk 'c/0/0' .*missing"):
            read()
    with pytest.raises(zd.FormatError):  # a FormatError, for those who catch those
        zt.load(path)


def test_a_deleted_shard_of_several_names_the_tensor(tmp_path: Path) -> None:
    values = torch.zeros(100 << 20, dtype=torch.uint8)  # two shards of 64 MiB: the first all zeros
    values[-1000:] = 7
    path = tmp_path / "ck"
    zt.save({"w": values}, path)
    assert root_attribute(path)["fill_chunks"] == {"w": ["c/0"]}
    assert not (path / "w" / "c" / "0").exists() and (path / "w" / "c" / "1").is_file()
    assert torch.equal(zt.load(path)["w"], values)
    (path / "w" / "c" / "1").unlink()
    with pytest.raises(MissingChunkError, match=r"tensor 'w': chunk 'c/1'"):
        zt.load(path)


def test_a_chunk_file_made_a_directory_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "ck"
    zt.save({"w": torch.randn(4, 4)}, path)
    (path / "w" / "c" / "0" / "0").unlink()
    (path / "w" / "c" / "0" / "0").mkdir()
    with pytest.raises(MissingChunkError, match="tensor 'w'"):
        zt.load(path)


@pytest.mark.parametrize("codecs", list(CODECS))
def test_zero_tensors_round_trip_and_are_listed(tmp_path: Path, codecs: str) -> None:
    sd = state()
    sd["negative_zero"] = torch.full((5,), -0.0)  # not zero bits: stored
    for name in ("bool", "int8", "int64", "bfloat16", "float8_e4m3fn", "float8_e8m0fnu", "complex64"):
        if hasattr(torch, name):
            sd[f"z_{name}"] = torch.zeros(3, 2, dtype=getattr(torch, name))
    sd["tied"] = sd["zeros"]
    path = tmp_path / "ck"
    zt.save(sd, path, **CODECS[codecs])
    fill = root_attribute(path)["fill_chunks"]
    assert fill["zeros"] == ["c/0/0"] and fill["bias"] == ["c/0"] and fill["scalar"] == ["c"]
    assert "small" not in fill and "negative_zero" not in fill and "empty" not in fill and "half" not in fill
    assert "tied" not in fill  # a tied name has no array of its own
    assert all(fill[name] == ["c/0/0"] for name in sd if name.startswith("z_"))  # zero bits, e8m0 too
    loaded = zt.load(path)
    assert_same(loaded, sd)
    assert loaded["tied"] is loaded["zeros"]


def test_a_converted_checkpoint_knows_its_chunks(tmp_path: Path) -> None:
    safetensors = pytest.importorskip("safetensors.torch")
    sd = {"w": torch.randn(8, 8), "z": torch.zeros(8)}
    safetensors.save_file(sd, tmp_path / "model.safetensors")
    zd.convert(tmp_path / "model.safetensors", tmp_path / "ck", progress=False)
    assert root_attribute(tmp_path / "ck")["fill_chunks"] == {"z": ["c/0"]}
    assert_same(zt.load(tmp_path / "ck"), sd)
    (tmp_path / "ck" / "w" / "c" / "0" / "0").unlink()
    with pytest.raises(MissingChunkError, match="tensor 'w'"):
        zt.load(tmp_path / "ck")


def test_checkpoints_without_the_record_keep_zarrs_rule(tmp_path: Path) -> None:
    """Written before fill_chunks was recorded: they load, and a missing file reads as zeros."""
    sd = {"w": torch.randn(4, 4), "z": torch.zeros(4)}
    path = tmp_path / "old"
    zt.save(sd, path)
    edit_root(path, lambda root: root.pop("fill_chunks"))
    assert_same(zt.load(path), sd)
    (path / "w" / "c" / "0" / "0").unlink()
    assert torch.equal(zt.load(path)["w"], torch.zeros(4, 4))


@pytest.mark.parametrize(
    "record, message",
    [
        ({"w": ["c/0/0"]}, "recorded as left out .* but is in the store"),
        ({"z": ["c/0", "c/1"]}, "lists chunks .* which the array does not have"),
        ({"z": ["c/0", "c/0"]}, "twice"),
        ({"z": ["c/00"]}, "not a list of chunk keys"),
        ({"z": "c/0"}, "not a list of chunk keys"),
        ({"nobody": []}, "not a stored tensor"),
        ([], "must be a JSON object"),
        (None, "must be a JSON object"),
        ({}, r"tensor 'z': chunk 'c/0'.*missing"),
    ],
)
def test_a_damaged_record_is_a_format_error(tmp_path: Path, record: Any, message: str) -> None:
    path = tmp_path / "ck"
    zt.save({"w": torch.randn(2, 2), "z": torch.zeros(4)}, path)
    edit_root(path, lambda root: root.update(fill_chunks=record))
    with pytest.raises(zd.FormatError, match=message):
        zt.load(path)


def test_plain_arrays_keep_zarrs_rule(tmp_path: Path) -> None:
    arr = zd.create(tmp_path / "a", shape=(4,), dtype="float32", chunks=(2,), compressors=None)
    arr[...] = np.arange(4, dtype="float32")
    (tmp_path / "a" / "c" / "0").unlink()
    np.testing.assert_array_equal(zd.open_array(tmp_path / "a")[...], [0, 0, 2, 3])


# ----------------------------------------------------------------------------------------------
# Arrays stored as checkpoints are: metadata edits that would read other values


@pytest.mark.parametrize(
    "name, change, message",
    [
        ("small", lambda d: d["codecs"][0]["configuration"].update(endian="big"), "codecs"),
        ("small", lambda d: d.update(fill_value=1.0), "fill value"),
        ("small", lambda d: d.update(fill_value=-0.0), "fill value"),
        ("small", lambda d: d.update(fill_value="NaN"), "fill value"),
        ("small", lambda d: d.update(chunk_key_encoding={"name": "v2", "configuration": {"separator": "."}}),
         "key encoding"),
        ("small", lambda d: d["codecs"].insert(0, {"name": "transpose", "configuration": {"order": [1, 0]}}),
         "codecs"),
        ("sharded", lambda d: d["codecs"][0]["configuration"].update(chunk_shape=[256, 300]), "contiguous"),
        ("sharded", lambda d: d["codecs"][0]["configuration"]["index_codecs"].pop(), "index codecs"),
    ],
)
def test_metadata_edits_that_would_read_other_values_are_refused(
    tmp_path: Path, name: str, change: Any, message: str
) -> None:
    path = tmp_path / "ck"
    zt.save({"small": torch.randn(3, 5), "sharded": torch.randn(512, 600)}, path, checksum="crc32c")
    edit_array(path, name, change)
    with pytest.raises(zd.ZarrDeviceError, match=message):
        zt.load(path)


def test_inner_chunks_of_another_shape_but_the_same_size_are_refused(tmp_path: Path) -> None:
    """Inner chunks [256, 1024] edited to [512, 512]: the same bytes per chunk and the same
    number per shard, so every check of sizes and checksums passes; the values would land in the
    wrong places."""
    path = tmp_path / "ck"
    zt.save({"w": torch.randn(2048, 1024)}, path, checksum="crc32c")
    inner = json.loads((path / "w" / "zarr.json").read_text())["codecs"][0]["configuration"]["chunk_shape"]
    assert inner == [256, 1024]
    edit_array(path, "w", lambda d: d["codecs"][0]["configuration"].update(chunk_shape=[512, 512]))
    with pytest.raises(zd.FormatError, match="not contiguous runs"):
        zt.load(path)


# ----------------------------------------------------------------------------------------------
# Nothing is written that cannot be read


def test_save_refuses_metadata_readers_would_refuse(tmp_path: Path) -> None:
    sd = {"w": torch.randn(2, 2)}
    path = tmp_path / "ck"
    zt.save(sd, path, metadata=nested(61))  # three levels down in zarr.json: 64 in all
    assert zt.metadata(path) == nested(61)
    for levels in (62, 100, 989, 5000):
        with pytest.raises(zd.UsageError, match="nests (deeper than 64 levels|too deep)"):
            zt.save(sd, tmp_path / f"new-{levels}", metadata=nested(levels))
        assert not (tmp_path / f"new-{levels}").exists()
    with pytest.raises(zd.UsageError, match="too deep"):  # no RecursionError
        zt.save(sd, tmp_path / "new", metadata=deep_dict(100_000))
    assert sorted(os.listdir(tmp_path)) == ["ck"]  # no partial directory either


@pytest.mark.parametrize("metadata", [nested(62), nested(500), nested(989), deep_dict(100_000)])
def test_overwrite_with_unreadable_metadata_leaves_the_checkpoint(tmp_path: Path, metadata: Any) -> None:
    sd = {"w": torch.randn(2, 2)}
    path = tmp_path / "ck"
    zt.save(sd, path, metadata={"step": 1})
    with pytest.raises(zd.UsageError):
        zt.save({"w": torch.zeros(2, 2)}, path, metadata=metadata, overwrite=True)
    assert_same(zt.load(path), sd)
    assert zt.metadata(path) == {"step": 1}
    assert zt.partials(path) == []


def test_create_group_and_attrs_refuse_attributes_readers_would_refuse(tmp_path: Path) -> None:
    with pytest.raises(zd.UsageError, match="deeper than 64 levels"):
        zd.create_group(tmp_path / "g", attributes={"x": nested(70)})
    assert not (tmp_path / "g" / "zarr.json").exists()
    with pytest.raises(zd.UsageError):
        zd.create_group(tmp_path / "g", attributes={"x": deep_dict(100_000)})
    group = zd.create_group(tmp_path / "g", attributes={"x": nested(62)})  # zarr.json: 64 levels
    assert zd.open_group(tmp_path / "g").attrs["x"] == nested(62)
    with pytest.raises(zd.UsageError, match="deeper than 64 levels"):
        group.attrs["y"] = nested(63)  # the engine's check of the change alone let this through
    with pytest.raises(zd.UsageError, match="too deep"):
        group.attrs.update({"y": deep_dict(100_000)})
    arr = zd.create(tmp_path / "a", shape=(2,), dtype="uint8")
    with pytest.raises(zd.UsageError, match="deeper than 64 levels"):
        arr.attrs["y"] = nested(63)
    assert dict(zd.open_group(tmp_path / "g").attrs) == {"x": nested(62)}
    assert dict(zd.open_array(tmp_path / "a").attrs) == {}
    arr.attrs["y"] = nested(62)
    assert zd.open_array(tmp_path / "a").attrs["y"] == nested(62)


def test_the_shared_check_and_parser() -> None:
    assert json_text({"a": [1]}, "x") == '{"a": [1]}'
    with pytest.raises(zd.UsageError, match="x must be JSON"):
        json_text({"a": float("nan")}, "x")
    with pytest.raises(zd.UsageError, match="x cannot be stored.*not valid JSON"):
        json_text({"a": "\ud800"}, "x")  # a lone surrogate: no reader takes it
    assert parse_json('{"b": 1, "a": [2]}', "y") == {"b": 1, "a": [2]}
    assert list(parse_json('{"b": 1, "a": 2}', "y")) == ["b", "a"]  # in order
    with pytest.raises(zd.FormatError, match="^y nests deeper than 64 levels"):
        parse_json("[" * 100_000 + "]" * 100_000, "y")
    with pytest.raises(zd.FormatError, match="^y is not valid JSON"):
        parse_json(b"\xff", "y")


def test_convert_refuses_deep_json_in_safetensors_naming_the_file(tmp_path: Path) -> None:
    safetensors = pytest.importorskip("safetensors.torch")
    sd = {"w": torch.randn(2, 2)}
    file = tmp_path / "model.safetensors"
    cases = [
        ({"format": "pt", "zarr_device.metadata": "[" * 100_000 + "]" * 100_000}, "nests deeper than 64"),
        ({"format": "pt", "zarr_device.metadata": '{"a": ' * 100_000 + "1" + "}" * 100_000}, "nests deeper"),
        ({"format": "pt", "zarr_device.metadata": json.dumps(nested(62))}, "nests deeper than 64"),
        ({"format": "pt", "zarr_device.metadata": "[1,"}, "not valid JSON"),
        ({"format": "pt", "zarr_device.tied": "[" * 100_000 + "]" * 100_000}, "nests deeper than 64"),
    ]
    for metadata, message in cases:
        safetensors.save_file(sd, file, metadata=metadata)
        with pytest.raises(zd.FormatError, match=f"{file}.*{message}"):
            zd.convert(file, tmp_path / "ck", progress=False)
        assert not (tmp_path / "ck").exists()
    safetensors.save_file(sd, file, metadata={"format": "pt", "zarr_device.metadata": json.dumps(nested(61))})
    zd.convert(file, tmp_path / "ck", progress=False)
    assert zt.metadata(tmp_path / "ck") == nested(61)


def test_convert_refuses_a_deep_model_folder_index(tmp_path: Path) -> None:
    safetensors = pytest.importorskip("safetensors.torch")
    folder = tmp_path / "model"
    folder.mkdir()
    safetensors.save_file({"w": torch.randn(2, 2)}, folder / "model-1.safetensors")
    (folder / "model.safetensors.index.json").write_text('{"weight_map": ' * 100_000 + "{}" + "}" * 100_000)
    with pytest.raises(zd.FormatError, match="index.json nests deeper than 64"):
        zd.convert(folder, tmp_path / "ck", progress=False)
    assert not (tmp_path / "ck").exists()


def test_zarr_convert_refuses_v2_attributes_too_deep_for_zarr_json(tmp_path: Path) -> None:
    """A Zarr v2 group's .zattrs is one level shallower than attributes in a v3 zarr.json: 64
    levels read there, and 65 would not in the converted store."""
    source = tmp_path / "v2"
    source.mkdir()
    (source / ".zgroup").write_text('{"zarr_format": 2}')
    (source / ".zattrs").write_text(json.dumps({"x": nested(63)}))  # 64 levels
    assert zd.open_group(source).attrs["x"] == nested(63)
    with pytest.raises(zd.UsageError, match="attributes of group '/'.*deeper than 64 levels"):
        zd.convert(source, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
    shutil.rmtree(source)
