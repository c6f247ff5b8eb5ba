"""Loading checkpoints on several ranks: tensor-parallel slices (load(..., shard_plan=)) and the
read-once fan-out (load_distributed) over Gloo in two real processes."""

from __future__ import annotations

import fnmatch
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import zarr_device.torch as zt  # noqa: E402
from zarr_device.errors import UsageError  # noqa: E402
from zarr_device.torch import distributed as ztd  # noqa: E402
from zarr_device.torch import parts as ztp  # noqa: E402
from zarr_device.torch.load import open_checkpoint  # noqa: E402

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def assert_bits_equal(a: Any, b: Any) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a.contiguous().view(_BITS[a.element_size()]), b.contiguous().view(_BITS[b.element_size()]))


def expected_part(full: Any, dim: int, rank: int, world_size: int) -> Any:
    """torch.chunk's piece for ``rank``, or the empty slice at the end where torch.chunk returns
    fewer than world_size pieces."""
    pieces = torch.chunk(full, world_size, dim)
    if rank < len(pieces):
        return pieces[rank]
    return full.narrow(dim, full.shape[dim], 0)


def make_state() -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    embed = torch.randn(10, 6, generator=g)
    return {
        "embed.weight": embed,
        "layers.0.q.weight": torch.randn(7, 5, generator=g),
        "layers.0.o.weight": torch.randn(5, 9, generator=g).to(torch.bfloat16),
        "layers.0.bias": torch.arange(3, dtype=torch.int64),  # smaller than world_size 4
        "layers.0.cube": torch.randn(4, 3, 5, generator=g).to(torch.float16),
        "scale": torch.tensor(2.5),
        "empty": torch.empty(0, 3),
        "head.weight": embed,  # tied
    }


PLANS = [
    {"layers.*.q.weight": 0, "layers.*.o.weight": 1},
    {"*.weight": -1, "layers.0.bias": 0, "layers.0.cube": 1},
    {"layers.0.cube": 2, "embed.weight": 0, "empty": 0},
]


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_slices_equal_torch_chunk(tmp_path: Path, plan: dict[str, int], world_size: int) -> None:
    state = make_state()
    zt.save(state, tmp_path / "ck.zarr", progress=False)
    for rank in range(world_size):
        got = zt.load(tmp_path / "ck.zarr", shard_plan=plan, rank=rank, world_size=world_size)
        assert list(got) == list(zt.load(tmp_path / "ck.zarr"))
        for name, full in state.items():
            dim = next((d for p, d in plan.items() if fnmatch.fnmatchcase(name, p)), None)
            want = full if dim is None else expected_part(full, dim, rank, world_size)
            assert_bits_equal(got[name], want)


def test_first_matching_pattern_wins_and_tied_split_differently(tmp_path: Path) -> None:
    state = make_state()
    zt.save(state, tmp_path / "ck.zarr", progress=False)
    got = zt.load(tmp_path / "ck.zarr", shard_plan={"head.*": 1, "*.weight": 0}, rank=1, world_size=2)
    assert_bits_equal(got["head.weight"], torch.chunk(state["embed.weight"], 2, 1)[1])
    assert_bits_equal(got["embed.weight"], torch.chunk(state["embed.weight"], 2, 0)[1])
    assert_bits_equal(got["layers.0.q.weight"], torch.chunk(state["layers.0.q.weight"], 2, 0)[1])
    same = zt.load(tmp_path / "ck.zarr", shard_plan={"*.weight": 0}, rank=0, world_size=2)
    assert same["head.weight"] is same["embed.weight"]  # tied and split alike: one tensor


def test_chunk_aligned_slices_read_each_byte_once(tmp_path: Path) -> None:
    # 4 MiB of float32 rows: the format's ~1 MiB chunks are 1024 rows, so parts of 1024 or 2048
    # rows fall on chunk boundaries.
    state = {"w": torch.randn(4096, 256), "v": torch.randn(4096, 512).to(torch.bfloat16)}
    zt.save(state, tmp_path / "ck.zarr", progress=False)
    checkpoint = open_checkpoint(tmp_path / "ck.zarr")
    names = list(state)
    assert all(checkpoint.arrays[n].chunks[0] == 1024 for n in names)
    total = sum(checkpoint.arrays[n].nbytes for n in names)
    for world_size in (1, 2, 4):
        touched = 0
        for rank in range(world_size):
            parts = ztp.tensor_parallel_parts({n: checkpoint.shape(n) for n in names}, {"*": 0}, rank, world_size)
            for name, part in parts.items():
                array = checkpoint.arrays[name]
                selection = ztp.part_selection(array.shape, part)
                touched += ztp.bytes_touched(array.shape, array.chunks, array.dtype.itemsize, selection)
        assert touched == total, world_size
    # Not aligned: 3 ranks split the 1024-row chunks, so some are read by two ranks.
    parts3 = [ztp.tensor_parallel_parts({"w": checkpoint.shape("w")}, {"w": 0}, r, 3)["w"] for r in range(3)]
    array = checkpoint.arrays["w"]
    over = sum(ztp.bytes_touched(array.shape, array.chunks, 4, ztp.part_selection(array.shape, p)) for p in parts3)
    assert over > array.nbytes


def test_chunk_range_matches_torch_chunk() -> None:
    for size in range(0, 12):
        for n in range(1, 7):
            pieces = torch.chunk(torch.arange(size), n)
            for rank in range(n):
                start, stop = ztp.chunk_range(size, rank, n)
                want = pieces[rank].tolist() if rank < len(pieces) else []
                assert list(range(start, stop)) == want, (size, n, rank)


def test_bad_arguments(tmp_path: Path) -> None:
    zt.save(make_state(), tmp_path / "ck.zarr", progress=False)
    path = tmp_path / "ck.zarr"
    with pytest.raises(UsageError, match=r"'nope\*'.*'zz'"):
        zt.load(path, shard_plan={"*.weight": 0, "nope*": 0, "zz": 1}, rank=0, world_size=2)
    with pytest.raises(UsageError, match="rank"):
        zt.load(path, shard_plan={"*.weight": 0}, rank=2, world_size=2)
    with pytest.raises(UsageError, match="rank"):
        zt.load(path, shard_plan={"*.weight": 0}, rank=-1, world_size=2)
    with pytest.raises(UsageError, match="world_size"):
        zt.load(path, shard_plan={"*.weight": 0}, rank=0, world_size=0)
    with pytest.raises(UsageError, match="dimension 2"):
        zt.load(path, shard_plan={"embed.weight": 2}, rank=0, world_size=2)
    with pytest.raises(UsageError, match="'scale'"):
        zt.load(path, shard_plan={"scale": 0}, rank=0, world_size=2)  # 0-d
    with pytest.raises(UsageError, match="shard_plan"):
        zt.load(path, rank=0, world_size=2)
    with pytest.raises(UsageError, match="rank= and world_size="):
        zt.load(path, shard_plan={"*.weight": 0})  # no process group
    with pytest.raises(UsageError, match="process group"):
        zt.load_distributed(path)


def test_assign_owners_balances_bytes_deterministically() -> None:
    sizes = {f"t{i}": (i * 7919) % 1000 + 1 for i in range(50)}
    owners = ztd.assign_owners(sizes, 3)
    assert owners == ztd.assign_owners(dict(reversed(list(sizes.items()))), 3)
    loads = [sum(s for n, s in sizes.items() if owners[n] == r) for r in range(3)]
    assert max(loads) - min(loads) <= max(sizes.values())
    assert set(ztd.assign_owners({"a": 5}, 4).values()) == {0}


_WORKER = """
import sys, torch, torch.distributed as dist
import zarr_device.torch as zt
rank, path, store = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
got = zt.load_distributed(path)
plain = zt.load(path)
assert list(got) == list(plain), (list(got), list(plain))
bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
for name, t in plain.items():
    g = got[name]
    assert g.dtype == t.dtype and g.shape == t.shape, name
    assert torch.equal(g.contiguous().view(bits[g.element_size()]), t.contiguous().view(bits[t.element_size()])), name
assert got["head.weight"] is got["embed.weight"]
some = zt.load_distributed(path, keys=["head.weight", "scale"], dtype=torch.float64)
ref = zt.load(path, keys=["head.weight", "scale"], dtype=torch.float64)
assert list(some) == list(ref) and some["head.weight"].dtype == torch.float64
assert all(torch.equal(some[n], ref[n]) for n in ref)
one = zt.load_distributed(sys.argv[4])  # rank 1 reads nothing and only receives
assert torch.equal(one["only"], zt.load(sys.argv[4])["only"])
dist.destroy_process_group()
print("ok", rank)
"""


def test_load_distributed_gloo_two_processes(tmp_path: Path) -> None:
    state = make_state()
    state["nan"] = torch.tensor([float("nan"), 1.0]).to(torch.bfloat16)
    state["big"] = torch.randn(300, 100)
    zt.save(state, tmp_path / "ck.zarr", progress=False)
    zt.save({"only": torch.arange(10)}, tmp_path / "one.zarr", progress=False)
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(_WORKER))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [os.environ.get("PYTHONPATH"), *sys.path] if p)}
    store = str(tmp_path / "store")
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), str(tmp_path / "ck.zarr"), store, str(tmp_path / "one.zarr")],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for r in range(2)
    ]
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outputs.append((p.returncode, out))
    for r, (code, out) in enumerate(outputs):
        assert code == 0 and f"ok {r}" in out, out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
def test_load_distributed_nccl_two_gpus(tmp_path: Path) -> None:
    zt.save(make_state(), tmp_path / "ck.zarr", progress=False)
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent("""
        import sys, torch, torch.distributed as dist
        import zarr_device.torch as zt
        rank, path, port = int(sys.argv[1]), sys.argv[2], sys.argv[3]
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:" + port, rank=rank, world_size=2)
        got = zt.load_distributed(path, device=f"cuda:{rank}")
        plain = zt.load(path)
        for name, t in plain.items():
            g = got[name].cpu()
            assert g.dtype == t.dtype and g.shape == t.shape, name
            assert torch.equal(g.reshape(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8)), name
        dist.destroy_process_group()
        print("ok", rank)
    """))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [os.environ.get("PYTHONPATH"), *sys.path] if p)}
    port = str(_free_port())
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(tmp_path / "ck.zarr"), port], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    for r, p in enumerate(procs):
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0 and f"ok {r}" in out, out
