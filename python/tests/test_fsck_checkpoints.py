"""fsck --data on PyTorch checkpoints: a checkpoint declares the chunk files it left out (all
zeros), so any other missing one is reported, naming the tensor; a plain array keeps Zarr's rule
(a missing chunk is the fill value, not a problem)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import zarr_device as zd  # noqa: E402
import zarr_device.torch as zt  # noqa: E402
from zarr_device.tools.store_check import check_store  # noqa: E402


def _checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "ck.zarr"
    zt.save({"weight": torch.arange(4096, dtype=torch.float32).reshape(64, 64), "zeros": torch.zeros(64, 64)}, path)
    return path


def test_a_complete_checkpoint_has_no_problem(tmp_path: Path) -> None:
    report = check_store(_checkpoint(tmp_path), data=True)
    assert report.clean, [str(p) for p in report.problems]


def test_a_deleted_chunk_file_of_a_checkpoint_is_reported(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path)
    files = sorted(p for p in (path / "weight" / "c").rglob("*") if p.is_file())
    assert files, "the weight tensor stores chunk files"
    files[0].unlink()
    report = check_store(path, data=True)
    problems = [p for p in report.problems if p.kind == "chunk"]
    assert len(problems) == 1 and "weight" in problems[0].detail, [str(p) for p in report.problems]
    assert not report.clean


def test_a_plain_array_keeps_zarrs_rule(tmp_path: Path) -> None:
    array = zd.create(tmp_path / "a.zarr", shape=(8,), chunks=(2,), dtype="f4", mode="w")
    array[0:2] = np.ones(2, dtype="f4")  # three of four chunks never written
    assert check_store(tmp_path / "a.zarr", data=True).clean
