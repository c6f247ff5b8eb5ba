"""Arrays zarr-python's codecs serve under the plug-in: a decompression bomb in a bz2 or lzma chunk
is refused, naming the chunk, before zarr-python's codec decodes it; honest chunks read as they
do without the plug-in."""

from __future__ import annotations

import bz2
import lzma
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")
numcodecs = pytest.importorskip("zarr.codecs.numcodecs")
numcodecs_v2 = pytest.importorskip("numcodecs")

import zarr.storage  # noqa: E402

import zarr_device  # noqa: E402
from zarr_device.errors import CodecError  # noqa: E402
from zarr_device.zarr_plugin.fallback_limits import decoded_size_guard  # noqa: E402
from zarr_device.zarr_plugin.pipeline import FallbackWarning  # noqa: E402

CODECS = {
    "bz2": (lambda v2: (numcodecs_v2.BZ2 if v2 else numcodecs.BZ2)(level=1), bz2.compress),
    "lzma": (lambda v2: (numcodecs_v2.LZMA if v2 else numcodecs.LZMA)(), lzma.compress),
}


def _array(tmp_path: Path, kind: str, zarr_format: int = 3) -> tuple[Any, np.ndarray]:
    store = zarr.storage.LocalStore(tmp_path / kind)
    values = np.arange(64, dtype="int32").reshape(8, 8)
    make, _ = CODECS[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numcodecs codecs are not in the Zarr v3 specification
        z = zarr.create_array(store, name="a", shape=(8, 8), chunks=(4, 4), dtype="int32",
                              compressors=make(zarr_format == 2), zarr_format=zarr_format)
        z[:] = values
    return store, values


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("kind", list(CODECS))
def test_a_bomb_is_refused_naming_the_chunk(tmp_path: Path, kind: str, zarr_format: int) -> None:
    store, values = _array(tmp_path, kind, zarr_format)
    _, compress = CODECS[kind]
    key = "a/c/1/0" if zarr_format == 3 else "a/1.0"
    bomb = compress(b"\0" * (256 << 20))  # 256 MiB of zeros, for a chunk of 64 bytes
    assert len(bomb) < 1 << 20
    (tmp_path / kind / key).write_bytes(bomb)
    with zarr_device.enable(like="numpy"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        on = zarr.open_array(store, path="a")
        with pytest.raises(CodecError, match=f"chunk '{key}'.*more than the 64 bytes"):
            on[...]
        np.testing.assert_array_equal(np.asarray(on[0:4, :]), values[0:4, :])  # the other chunks read


@pytest.mark.parametrize("kind", list(CODECS))
def test_honest_chunks_read_as_without_the_plug_in(tmp_path: Path, kind: str) -> None:
    store, values = _array(tmp_path, kind)
    with zarr_device.enable(like="numpy"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_array_equal(np.asarray(zarr.open_array(store, path="a")[...]), values)


def test_the_fallback_warning_names_the_users_store_only(tmp_path: Path) -> None:
    store, _ = _array(tmp_path, "bz2")
    with zarr_device.enable(like="numpy"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        zarr.open_array(store, path="a")[...]
    (message,) = {str(w.message) for w in caught if issubclass(w.category, FallbackWarning)}
    assert "memory://" not in message
    assert str(tmp_path.as_uri()) in message or str(tmp_path) in message, message
    assert "unknown codec 'numcodecs.bz2'" in message


def test_only_chains_of_known_decoded_size_are_guarded(tmp_path: Path) -> None:
    store, _ = _array(tmp_path, "bz2")
    assert decoded_size_guard(zarr.open_array(store, path="a").metadata) is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sharded = zarr.create_array(zarr.storage.MemoryStore(), shape=(8,), chunks=(2,), shards=(4,),
                                    dtype="int32", compressors=numcodecs.BZ2())
        zstd = zarr.create_array(zarr.storage.MemoryStore(), shape=(8,), chunks=(2,), dtype="int32")
    assert decoded_size_guard(sharded.metadata) is None
    assert decoded_size_guard(zstd.metadata) is None
