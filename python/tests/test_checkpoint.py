"""zarr_device.torch checkpoints: save, load, iter_load, load_into; the format's name escaping;
damaged and hostile checkpoints; atomic placement."""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import zarr_device as zd  # noqa: E402
import zarr_device.torch as zt  # noqa: E402
from zarr_device.torch import format as ckpt_format  # noqa: E402

# zarr_device.torch.save is the function; its module is reached this way.
save_module = importlib.import_module("zarr_device.torch.save")

DTYPES = [
    "float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
    "float8_e5m2fnuz", "float8_e8m0fnu", "bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
    "uint32", "uint64", "complex64", "complex128",
]
DTYPES = [name for name in DTYPES if hasattr(torch, name)]
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64, 16: torch.int64}


def bits(t: Any) -> Any:
    """A tensor's bytes as integers of its element size (NaNs compare equal by their bits)."""
    t = t.detach().to("cpu").contiguous()
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    return t.view(_BITS[t.element_size()])


def assert_bits_equal(a: Any, b: Any) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(bits(a), bits(b))


def sample(name: str, shape: tuple[int, ...], seed: int = 0) -> Any:
    """Values of every bit pattern (NaNs and infinities included) for floating types."""
    dtype = getattr(torch, name)
    g = torch.Generator().manual_seed(seed)
    size = torch.Size(shape).numel()
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    raw = torch.randint(0, 256, (size * torch.empty((), dtype=dtype).element_size(),), dtype=torch.uint8, generator=g)
    return raw.view(dtype).reshape(shape)


@pytest.mark.parametrize("compressors", [None, "zstd"])
def test_every_dtype_round_trips_bit_for_bit(tmp_path: Path, compressors: Any) -> None:
    state = {f"t.{name}": sample(name, (37, 5), seed=i) for i, name in enumerate(DTYPES)}
    state["scalar"] = torch.tensor(3.5, dtype=torch.bfloat16)
    state["empty"] = torch.empty((0, 3), dtype=torch.float16)
    state["strided"] = torch.arange(60, dtype=torch.int32).reshape(6, 10).t()[::2]  # not contiguous
    zt.save(state, tmp_path / "c.zarr", compressors=compressors, progress=False)
    loaded = zt.load(tmp_path / "c.zarr")
    assert list(loaded) == list(state)
    for name, tensor in state.items():
        assert_bits_equal(loaded[name], tensor)
        assert loaded[name].is_contiguous()


def test_large_tensor_is_chunked_and_sharded(tmp_path: Path) -> None:
    big = torch.randn(300, 2048)  # 2.3 MiB: three 1 MiB chunks, one shard
    zt.save({"w": big}, tmp_path / "c.zarr", compressors="zstd", progress=False)
    array = zd.open_array(tmp_path / "c.zarr", path="w")
    assert array.chunks == (100, 2048) and array.shards == (300, 2048)
    assert [c["name"] for c in array.codecs[0]["configuration"]["codecs"]] == ["bytes", "zstd", "crc32c"]
    assert torch.equal(zt.load(tmp_path / "c.zarr")["w"], big)


def test_tied_tensors_are_stored_once_and_load_as_one(tmp_path: Path) -> None:
    shared = torch.randn(4, 3)
    state = {"a.weight": shared, "b.weight": shared, "c": shared.view(4, 3), "d": shared[1:], "e": shared.clone()}
    zt.save(state, tmp_path / "c.zarr", progress=False)
    root = json.loads((tmp_path / "c.zarr" / "zarr.json").read_text())["attributes"]["zarr_device_checkpoint"]
    assert root["tied"] == {"b.weight": "a.weight", "c": "a.weight"}
    assert set(root["tensors"]) == {"a.weight", "d", "e"}
    assert sorted(p.name for p in (tmp_path / "c.zarr").iterdir()) == ["a.weight", "d", "e", "zarr.json"]
    loaded = zt.load(tmp_path / "c.zarr")
    assert loaded["a.weight"] is loaded["b.weight"] is loaded["c"]
    assert torch.equal(loaded["d"], shared[1:]) and torch.equal(loaded["e"], shared)
    # A tied name alone still loads (from the array it shares).
    assert torch.equal(zt.load(tmp_path / "c.zarr", keys=["c"])["c"], shared)


class TinyLM(torch.nn.Module):  # type: ignore[misc]
    def __init__(self, vocab: int = 50, width: int = 16, layers: int = 2) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.LayerNorm(width), torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                torch.nn.Linear(4 * width, width))
            for _ in range(layers)
        )
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied embedding and output layer
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, tokens: Any) -> Any:
        x = self.embed(tokens)
        for block in self.blocks:
            x = x + block(x) * self.scale
        return self.head(self.norm(x))


def test_module_loads_into_a_copy_built_on_meta(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = TinyLM()
    zt.save(model, tmp_path / "m.zarr", metadata={"step": 7}, progress=False)
    assert zt.metadata(tmp_path / "m.zarr") == {"step": 7}
    with torch.device("meta"):
        fresh = TinyLM()
    result = zt.load_into(fresh, tmp_path / "m.zarr")
    assert result and result.missing == [] and result.unexpected == [] and result.mismatched == {}
    assert fresh.head.weight is fresh.embed.weight and fresh.embed.weight.requires_grad
    assert all(t.device.type == "cpu" for t in [*fresh.parameters(), *fresh.buffers()])
    tokens = torch.randint(0, 50, (2, 9))
    assert torch.equal(fresh(tokens), model(tokens))


def test_strict_mismatch_leaves_the_module_untouched(tmp_path: Path) -> None:
    zt.save(TinyLM(), tmp_path / "m.zarr", progress=False)
    with torch.device("meta"):
        other = TinyLM(width=8, layers=3)
    before = {name: id(p) for name, p in other.named_parameters()}
    with pytest.raises(zt.CheckpointMismatchError) as caught:
        zt.load_into(other, tmp_path / "m.zarr")
    assert isinstance(caught.value, zd.UsageError)
    message = str(caught.value)
    assert "missing from the checkpoint: blocks.2.0.weight" in message
    assert "embed.weight (module (50, 8) torch.float32, checkpoint (50, 16) torch.float32)" in message
    assert caught.value.result.missing[0] == "blocks.2.0.weight"
    assert {name: id(p) for name, p in other.named_parameters()} == before
    assert all(p.device.type == "meta" for p in other.parameters())


def test_non_strict_loads_what_fits_and_reports_the_rest(tmp_path: Path) -> None:
    model = TinyLM()
    state = model.state_dict()
    state["extra"] = torch.ones(2)
    state["norm.weight"] = torch.ones(16, dtype=torch.float64)  # another dtype
    del state["scale"]
    zt.save(state, tmp_path / "m.zarr", progress=False)
    with torch.device("meta"):
        fresh = TinyLM()
    result = zt.load_into(fresh, tmp_path / "m.zarr", strict=False)
    assert (result.missing, result.unexpected, list(result.mismatched)) == (["scale"], ["extra"], ["norm.weight"])
    assert torch.equal(fresh.norm.bias, model.norm.bias) and fresh.norm.weight.device.type == "meta"


def test_keys_filter_and_dtype_cast(tmp_path: Path) -> None:
    state = {"a.w": torch.randn(3), "a.b": torch.randn(2, dtype=torch.float64), "n": torch.arange(4)}
    zt.save(state, tmp_path / "c.zarr", progress=False)
    assert list(zt.load(tmp_path / "c.zarr", keys=["n", "a.w"])) == ["a.w", "n"]
    assert list(zt.load(tmp_path / "c.zarr", keys=lambda k: k.startswith("a."))) == ["a.w", "a.b"]
    with pytest.raises(zd.UsageError, match="'zz'"):
        zt.load(tmp_path / "c.zarr", keys=["zz"])
    cast = zt.load(tmp_path / "c.zarr", dtype=torch.bfloat16)
    assert cast["a.w"].dtype == cast["a.b"].dtype == torch.bfloat16 and cast["n"].dtype == torch.int64
    assert torch.equal(cast["a.w"], state["a.w"].to(torch.bfloat16))
    with pytest.raises(zd.UsageError, match="floating"):
        zt.load(tmp_path / "c.zarr", dtype=torch.int32)


def test_iter_load_yields_every_tensor_in_order(tmp_path: Path) -> None:
    state = {f"layer.{i}": torch.full((i + 1,), float(i)) for i in range(12)}
    state["tied"] = state["layer.3"]
    zt.save(state, tmp_path / "c.zarr", progress=False)
    got = list(zt.iter_load(tmp_path / "c.zarr"))
    names = [name for name, _ in got]
    assert names[:5] == ["layer.0", "layer.1", "layer.2", "layer.3", "tied"] and sorted(names) == sorted(state)
    assert dict(got)["tied"] is dict(got)["layer.3"]
    for name, tensor in got:
        assert torch.equal(tensor, state[name])
    assert [n for n, _ in zt.iter_load(tmp_path / "c.zarr", keys=["layer.11", "layer.0"])] == ["layer.0", "layer.11"]


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_name_escaping_round_trips(name: str) -> None:
    for escape_upper in (False, True):
        path = ckpt_format.encode_name(name, escape_upper=escape_upper)
        assert ckpt_format.decode_name(path) == name
        if len(path.encode()) <= 255:
            assert ckpt_format.check_path(name, path) == path


def test_ordinary_names_stay_readable(tmp_path: Path) -> None:
    assert ckpt_format.encode_name("model.layers.0.self_attn.q_proj.weight") == "model.layers.0.self_attn.q_proj.weight"
    assert ckpt_format.encode_name("a/b%c") == "a%2Fb%25c"
    reserved = [ckpt_format.encode_name(n) for n in ("..", ".x", "__x", "zarr.json")]
    assert reserved == ["%2E.", "%2Ex", "%5F_x", "%7Aarr.json"]
    state = {n: torch.tensor(float(i)) for i, n in enumerate(["..", "a/b", "zarr.json", "W", "w", "é", "__x"])}
    zt.save(state, tmp_path / "c.zarr", progress=False)
    loaded = zt.load(tmp_path / "c.zarr")
    assert {n: float(t) for n, t in loaded.items()} == {n: float(t) for n, t in state.items()}
    # "W" and "w" are one file where case is folded: "W" is stored as "%57".
    assert {p.name for p in (tmp_path / "c.zarr").iterdir()} >= {"%57", "w", "a%2Fb", "%2E."}


def test_zarr_python_opens_an_uncompressed_tensor(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    values = torch.randn(300, 1100)  # sharded: three chunks
    zt.save({"enc.w": values, "b": torch.arange(7, dtype=torch.int16)}, tmp_path / "c.zarr", progress=False)
    group = zarr.open_group(str(tmp_path / "c.zarr"), mode="r")
    assert (group["enc.w"][...] == values.numpy()).all()
    assert (group["b"][...] == torch.arange(7, dtype=torch.int16).numpy()).all()


def test_existing_path_is_refused_and_overwrite_replaces(tmp_path: Path) -> None:
    zt.save({"a": torch.ones(2)}, tmp_path / "c.zarr", progress=False)
    with pytest.raises(zd.UsageError, match="exists"):
        zt.save({"a": torch.zeros(2)}, tmp_path / "c.zarr", progress=False)
    zt.save({"b": torch.zeros(2)}, tmp_path / "c.zarr", overwrite=True, progress=False)
    assert list(zt.load(tmp_path / "c.zarr")) == ["b"]
    (tmp_path / "plain").mkdir()
    with pytest.raises(zd.UsageError, match="not a Zarr store"):
        zt.save({"a": torch.ones(2)}, tmp_path / "plain", overwrite=True, progress=False)


def test_a_failed_save_leaves_no_checkpoint_and_keeps_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = {"a": torch.arange(5.0)}
    zt.save(old, tmp_path / "old.zarr", progress=False)
    real = save_module._write
    calls: list[str] = []

    def failing(store: Any, item: Any, codecs: Any) -> int:
        calls.append(item.name)
        if len(calls) == 2:
            raise zd.StoreError("disk full")
        return real(store, item, codecs)

    monkeypatch.setattr(save_module, "_write", failing)
    new = {"x": torch.ones(3), "y": torch.ones(3) * 2}
    with pytest.raises(zd.StoreError, match="saving tensor 'y': disk full"):
        zt.save(new, tmp_path / "new.zarr", progress=False)
    calls.clear()
    with pytest.raises(zd.StoreError, match="disk full"):
        zt.save(new, tmp_path / "old.zarr", overwrite=True, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.zarr"]
    assert torch.equal(zt.load(tmp_path / "old.zarr")["a"], old["a"])


def test_what_cannot_be_saved_is_named(tmp_path: Path) -> None:
    with pytest.raises(zd.UsageError, match="'bad' is a list"):
        zt.save({"bad": [1, 2]}, tmp_path / "c.zarr", progress=False)
    with pytest.raises(zd.UsageError, match="'m' is on the meta device"):
        zt.save({"m": torch.empty(2, device="meta")}, tmp_path / "c.zarr", progress=False)
    with pytest.raises(zd.UsageError, match="metadata must be JSON"):
        zt.save({"a": torch.ones(1)}, tmp_path / "c.zarr", metadata={"x": float("nan")}, progress=False)
    with pytest.raises(zd.UsageError, match="compressors"):
        zt.save({"a": torch.ones(1)}, tmp_path / "c.zarr", compressors="gzip", progress=False)  # type: ignore[arg-type]
    with pytest.raises(zd.UsageError, match="checksum must be None or 'crc32c'"):
        zt.save({"a": torch.ones(1)}, tmp_path / "c.zarr", checksum="md5", progress=False)  # type: ignore[arg-type]
    assert not os.listdir(tmp_path)


def _stored_files(array_dir: Path) -> list[Path]:
    return sorted(p for p in array_dir.rglob("*") if p.is_file() and p.name != "zarr.json")


@pytest.mark.parametrize(("compressors", "checksum", "codecs"), [
    (None, None, ["bytes"]),
    (None, "crc32c", ["bytes", "crc32c"]),
    ("zstd", None, ["bytes", "zstd", "crc32c"]),
    ("zstd", "crc32c", ["bytes", "zstd", "crc32c"]),
])
def test_checksums_catch_a_changed_byte_naming_the_tensor(
    tmp_path: Path, compressors: Any, checksum: Any, codecs: list[str]
) -> None:
    """A byte changed on the disk: with a crc32c on the chunks (checksum="crc32c", or zstd) the load
    raises a ChecksumError naming the tensor's array and leaves a module as it was; without one
    (the uncompressed default) the sizes still match, and only the values differ."""
    model = TinyLM()
    path = tmp_path / "m.zarr"
    zt.save(model, path, compressors=compressors, checksum=checksum, progress=False)
    state = model.state_dict()
    assert_bits_equal(zt.load(path)["embed.weight"], state["embed.weight"])
    inner = json.loads((path / "embed.weight" / "zarr.json").read_text())["codecs"]
    if inner[0]["name"] == "sharding_indexed":
        inner = inner[0]["configuration"]["codecs"]
    assert [c["name"] for c in inner] == codecs
    stored = _stored_files(path / "embed.weight")
    data = bytearray(stored[0].read_bytes())
    data[len(data) // 3] ^= 0x04  # inside the first chunk's elements (or its compressed bytes)
    stored[0].write_bytes(bytes(data))
    fresh = TinyLM()
    before = {name: p.detach().clone() for name, p in fresh.named_parameters()}
    if "crc32c" not in codecs:
        loaded = zt.load(path)["embed.weight"]
        assert not torch.equal(bits(loaded), bits(state["embed.weight"]))  # a wrong value, unnoticed
        return
    with pytest.raises(zd.ChecksumError, match="array 'embed.weight'.*checksum mismatch"):
        zt.load(path)
    with pytest.raises(zd.ChecksumError, match="array 'embed.weight'"):
        zt.load_into(fresh, path)
    assert all(torch.equal(p, before[name]) for name, p in fresh.named_parameters())
    assert_bits_equal(zt.load(path, keys=["norm.weight"])["norm.weight"], state["norm.weight"])


def _edit_root(path: Path, change: Any) -> None:
    document = json.loads((path / "zarr.json").read_text())
    change(document["attributes"])
    (path / "zarr.json").write_text(json.dumps(document))


HOSTILE = [
    (lambda a: a.clear(), "not a zarr_device checkpoint"),
    (lambda a: a.update(zarr_device_checkpoint=[1]), "must be a JSON object"),
    (lambda a: a["zarr_device_checkpoint"].update(format_version=2), "format_version 2"),
    (lambda a: a["zarr_device_checkpoint"].update(framework="jax"), "framework 'jax'"),
    (lambda a: a["zarr_device_checkpoint"].update(tensors=["w"]), "'tensors' must be a JSON object"),
    (lambda a: a["zarr_device_checkpoint"]["tensors"].update(w="../outside"), "tensor 'w': array path '../outside'"),
    (lambda a: a["zarr_device_checkpoint"]["tensors"].update(w=".."), "tensor 'w': array path '..'"),
    (lambda a: a["zarr_device_checkpoint"]["tensors"].update(w="b"), "tensors 'b' and 'w' are stored at one"),
    (lambda a: a["zarr_device_checkpoint"]["tensors"].update(w="gone"), "tensor 'w': its array 'gone' is missing"),
    (lambda a: a["zarr_device_checkpoint"]["tied"].update(w="b"), "'w' is listed both as stored and as tied"),
    (lambda a: a["zarr_device_checkpoint"]["tied"].update(x="nope"), "'x' is tied to 'nope'"),
]


@pytest.mark.parametrize(("change", "message"), HOSTILE)
def test_bad_checkpoints_are_format_errors(tmp_path: Path, change: Any, message: str) -> None:
    zt.save({"b": torch.ones(2), "w": torch.zeros(3)}, tmp_path / "c.zarr", progress=False)
    _edit_root(tmp_path / "c.zarr", change)
    with pytest.raises(zd.FormatError, match=message.replace("(", r"\(").replace(")", r"\)")):
        zt.load(tmp_path / "c.zarr")


def test_array_not_matching_its_record_is_a_format_error(tmp_path: Path) -> None:
    zt.save({"w": torch.zeros(3)}, tmp_path / "c.zarr", progress=False)
    zd.create(tmp_path / "c.zarr", path="w", shape=(4,), dtype="float32", mode="w",
              attributes={"zarr_device_tensor": {"name": "w", "dtype": "float32", "shape": [3]}})
    with pytest.raises(zd.FormatError, match="tensor 'w': array 'w' does not match"):
        zt.load(tmp_path / "c.zarr")
    with pytest.raises(zd.NodeNotFoundError):
        zt.load(tmp_path / "nothing.zarr")


def test_importing_zarr_device_does_not_import_torch() -> None:
    import subprocess

    code = "import sys, zarr_device; assert 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)"
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ})


@pytest.mark.gpu
def test_cuda_save_and_load(tmp_path: Path) -> None:
    if not torch.cuda.is_available() or zd.cuda_device_count() == 0:
        pytest.skip("no CUDA device")
    model = TinyLM().to("cuda")
    zt.save(model, tmp_path / "m.zarr", compressors="zstd", progress=False)
    loaded = zt.load(tmp_path / "m.zarr", device="cuda")
    assert all(t.device.type == "cuda" for t in loaded.values())
    with torch.device("meta"):
        fresh = TinyLM()
    zt.load_into(fresh, tmp_path / "m.zarr", device="cuda")
    tokens = torch.randint(0, 50, (2, 9), device="cuda")
    assert torch.equal(fresh(tokens), model(tokens))


@pytest.mark.gpu
@pytest.mark.parametrize(("compressors", "checksum"), [(None, None), (None, "crc32c"), ("zstd", None)])
def test_saved_from_the_gpu_equals_saved_from_the_host(tmp_path: Path, compressors: Any, checksum: Any) -> None:
    if not torch.cuda.is_available() or zd.cuda_device_count() == 0:
        pytest.skip("no CUDA device")
    g = torch.Generator().manual_seed(3)
    state = {
        "w": torch.randn(300, 257, generator=g).to(torch.bfloat16),
        "big": torch.randn(1500, 1024, generator=g),  # several chunks and shards
        "f8": torch.randn(64, 33, generator=g).to(torch.float8_e4m3fn),
        "mask": torch.rand(17, 5, generator=g) > 0.5,
        "ids": torch.arange(-50, 50, dtype=torch.int64),
        "t": torch.randn(40, 30, generator=g).t(),  # not contiguous
        "empty": torch.zeros(0, 4),
    }
    zt.save({k: v.to("cuda") for k, v in state.items()}, tmp_path / "gpu.zarr", compressors=compressors,
            checksum=checksum, progress=False)
    zt.save(state, tmp_path / "host.zarr", compressors=compressors, checksum=checksum, progress=False)
    from_gpu, from_host = zt.load(tmp_path / "gpu.zarr"), zt.load(tmp_path / "host.zarr")
    for name, tensor in state.items():
        for got in (from_gpu[name], from_host[name]):
            assert got.dtype == tensor.dtype and got.shape == tensor.shape, name
            assert torch.equal(got.contiguous().view(torch.uint8), tensor.contiguous().view(torch.uint8)), name
    # The crc32c of each chunk the GPU laid out is the one the host computes.
    if checksum:
        chunk = _stored_files(tmp_path / "host.zarr" / "w")[0].relative_to(tmp_path / "host.zarr")
        assert (tmp_path / "gpu.zarr" / chunk).read_bytes() == (tmp_path / "host.zarr" / chunk).read_bytes()


@pytest.mark.parametrize(("shape", "dtype"), [((50000, 257), torch.bfloat16), ((3000, 1000), torch.float32),
                                               ((90000, 33), torch.float16), ((3_000_000,), torch.int8)])
def test_uncompressed_chunks_start_at_4_kib_multiples(tmp_path: Path, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """O_DIRECT and GPUDirect Storage read 4 KiB-aligned ranges: every chunk of a split tensor is
    a whole number of 4 KiB, so each starts at a multiple of it in its shard file."""
    import struct

    from zarr_device.torch.format import layout

    tensor = torch.ones(shape, dtype=dtype)
    zt.save({"t": tensor}, tmp_path / "c.zarr", progress=False)
    chunks, shards = layout(shape, tensor.element_size())
    assert shards is not None and math.prod(chunks) * tensor.element_size() % 4096 == 0
    shard_files = [p for p in (tmp_path / "c.zarr" / "t" / "c").rglob("*") if p.is_file()]
    assert shard_files
    for path in shard_files:
        data = path.read_bytes()
        per_shard = math.prod(s // c for s, c in zip(shards, chunks))
        index = data[len(data) - 16 * per_shard - 4 : -4]  # (offset, nbytes) pairs, then crc32c
        for offset, nbytes in struct.iter_unpack("<QQ", index):
            if offset != 2**64 - 1:  # a chunk left out (all fill value)
                assert offset % 4096 == 0 and nbytes % 4096 == 0


def test_load_reports_progress_to_a_function_and_hides_the_bar_off_a_terminal(tmp_path: Path, capsys: Any) -> None:
    state = {"a": torch.randn(300, 40), "b": torch.arange(1000), "tied": None}
    state["tied"] = state["a"]
    zt.save(state, tmp_path / "c.zarr")  # the default: no bar where stderr is not a terminal
    steps: list[int] = []
    loaded = zt.load(tmp_path / "c.zarr", progress=steps.append)
    assert sum(steps) == 300 * 40 * 4 + 1000 * 8 and len(steps) == 2  # tied tensors read once
    assert loaded["tied"] is loaded["a"]
    zt.load(tmp_path / "c.zarr")
    assert capsys.readouterr().err == ""


def test_saving_starts_each_tensors_writeback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each tensor's files are handed to the disk as soon as they are written (the disk works
    while the next tensors are written), every file once; without posix_fadvise the save is the
    same, flushed at the end."""
    from zarr_device.io import atomic_trees

    advised: list[int] = []
    real = os.posix_fadvise

    def record(fd: int, offset: int, length: int, advice: int) -> None:
        assert advice == os.POSIX_FADV_DONTNEED
        advised.append(os.fstat(fd).st_size)
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", record)
    state = {"a": torch.arange(3000, dtype=torch.float32), "b": torch.ones(7, 5, dtype=torch.bfloat16)}
    zt.save(state, tmp_path / "ck")
    # Every file of each tensor's array once (its metadata, its lock file, its one chunk file).
    assert advised.count(3000 * 4) == 1 and advised.count(7 * 5 * 2) == 1, advised
    assert len(advised) == 6, advised
    monkeypatch.delattr(os, "posix_fadvise")
    atomic_trees.start_writeback(tmp_path / "ck")  # a no-op without it
    zt.save(state, tmp_path / "ck2")
    back = zt.load(tmp_path / "ck2")
    assert torch.equal(back["a"], state["a"]) and torch.equal(back["b"], state["b"])
