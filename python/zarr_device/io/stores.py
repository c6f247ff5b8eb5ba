"""Stores: where arrays live. Local directories and memory are served by the C++ engine; any
zarr-python store (object stores, fsspec, ...) can feed bytes in through :class:`ZarrStoreAdapter`.
"""

from __future__ import annotations

import asyncio

import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal, Protocol, Union, runtime_checkable

import zarr_device._core as _core
from zarr_device.errors import UsageError

__all__ = ["LocalStore", "MemoryStore", "ZarrStoreAdapter", "StoreLike", "as_store"]


@runtime_checkable
class EngineStore(Protocol):
    """Anything holding an engine store handle."""

    @property
    def handle(self) -> _core.Store: ...

    @property
    def read_only(self) -> bool: ...


class LocalStore:
    """A directory on the local file system. Writes are atomic (temporary file, then rename).

    ``io``: "buffered" reads through the page cache; "direct" reads around it (O_DIRECT), for
    cold data read once, where caching it costs memory and a copy for nothing. File systems
    without O_DIRECT fall back to the cache. "gds": reads to a CUDA device move chunks stored as
    their elements from the file straight into GPU memory through cuFile (GPUDirect Storage: DMA
    from the drive where the nvidia-fs driver is loaded, cuFile's own copies elsewhere); other
    chunks, and reads to the host, are read as with "direct". Without cuFile, reads fall back to
    the pinned staging ring (``zarr_device.cuda_build_info()["cufile_error"]`` says why).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        io: Literal["buffered", "direct", "gds"] = "buffered",
        read_only: bool = False,
    ) -> None:
        self.root = Path(root).absolute()
        self.io = io
        self._handle = _core.local_store(str(self.root), io, read_only)

    @property
    def handle(self) -> _core.Store:
        return self._handle

    @property
    def read_only(self) -> bool:
        """Whether writes are refused (every array and group opened from it is read-only)."""
        return self._handle.read_only

    def __repr__(self) -> str:
        extra = ", read_only=True" if self.read_only else ""
        return f"LocalStore({str(self.root)!r}, io={self.io!r}{extra})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as its directory, opened again where it is unpickled (another process: a
        # dask worker, a multiprocessing pool).
        return (_local_store, (str(self.root), self.io, self.read_only))


def _local_store(root: str, io: Literal["buffered", "direct", "gds"], read_only: bool) -> LocalStore:
    return LocalStore(root, io=io, read_only=read_only)


class MemoryStore:
    """Keys and values held in this process."""

    def __init__(self) -> None:
        self._handle = _core.memory_store()

    @property
    def handle(self) -> _core.Store:
        return self._handle

    @property
    def read_only(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "MemoryStore()"

    def __reduce__(self) -> tuple[Any, ...]:
        raise UsageError(
            "a zarr_device MemoryStore cannot be pickled: its keys live in this process's memory, "
            "which other processes (dask workers, multiprocessing pools) cannot reach; keep arrays "
            "to share in a LocalStore (a directory) or a zarr-python store that pickles"
        )


class _ChunkRequestFailed(Exception):
    """A request of a batch that failed, naming its chunk."""

    def __init__(self, key: str, error: BaseException) -> None:
        super().__init__(f"chunk '{key}': {type(error).__name__}: {error}")


class _ZarrStoreCallbacks:
    """The methods the engine calls on a zarr-python store, from its worker threads; each runs the
    store's coroutine to completion on zarr-python's event loop. Kept apart from
    ZarrStoreAdapter so that the engine's reference to it forms no cycle."""

    def __init__(self, store: Any) -> None:
        from zarr.abc.store import Store
        from zarr.core.buffer import cpu
        from zarr.core.sync import sync

        self._store = store
        self._sync = sync
        # The engine takes stored bytes in host memory and moves them itself: values are asked for
        # as host buffers whatever buffer class zarr.config names (zarr.config.enable_gpu() and
        # enable(like="cupy") name CuPy's, which would copy each value to the GPU and back).
        self._prototype = cpu.buffer_prototype
        # Stores without a size query of their own read the whole value to measure it, in the
        # buffer class the config names; such a store's values are measured here instead.
        self._measures_by_reading = type(store).getsize is Store.getsize

    def get(self, key: str, offset: int, length: int) -> bytes | None:
        from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

        request: Any = None
        if length == 0:
            # The engine's existence probe. Object stores refuse empty ranges ("start: 0 end:
            # 0" from S3), so it is asked as such.
            return b"" if self._sync(self._store.exists(key)) else None
        if offset < 0:
            request = SuffixByteRequest(-offset)
        elif length >= 0:
            request = RangeByteRequest(offset, offset + length)
        elif offset > 0:
            request = OffsetByteRequest(offset)
        value = self._sync(self._store.get(key, prototype=self._prototype, byte_range=request))
        return None if value is None else bytes(value.to_bytes())

    def get_many(self, keys: list[str]) -> list[Any]:
        """The whole values at ``keys`` (their bytes as NumPy views of the client's buffers, or
        None where there is none), their requests made together on zarr-python's event loop: the
        engine hands over a window of chunks in one call instead of one call per chunk from each
        of its threads."""
        return self._together(keys, self._value_of)

    def get_ranges(self, asked: list[tuple[str, list[tuple[int, int]]]]) -> list[list[Any] | None]:
        """For each ``(key, [(offset, length), ...])``, those byte ranges of its value (each cut
        short at its end), or None where there is none: the indexes, then the inner chunks wanted,
        of the shards a read wants in part, in one call of the store's ``get_partial_values``
        (object stores make the ranges together, merging neighbours) instead of a request each."""
        from zarr.abc.store import RangeByteRequest

        # Object stores refuse empty ranges: those are answered here.
        requests = [
            (key, RangeByteRequest(offset, offset + length))
            for key, ranges in asked
            for offset, length in ranges
            if length > 0
        ]

        async def fetch() -> list[Any]:
            try:
                return list(await self._store.get_partial_values(self._prototype, requests))
            except FileNotFoundError:
                # Some stores raise for a missing key instead of answering None: ask one by one.
                return [await self._range_or_none(key, request) for key, request in requests]

        got = iter(self._sync(fetch()) if requests else [])
        answers: list[list[Any] | None] = []
        for _, ranges in asked:
            values: list[Any] | None = []
            for _, length in ranges:
                value = b"" if length <= 0 else next(got)
                if value is None:
                    values = None
                elif values is not None:
                    values.append(value if isinstance(value, bytes) else value.as_numpy_array())
            answers.append(values)
        return answers

    async def _range_or_none(self, key: str, request: Any) -> Any:
        try:
            return await self._store.get(key, prototype=self._prototype, byte_range=request)
        except FileNotFoundError:
            return None
        except Exception as error:
            raise _ChunkRequestFailed(key, error) from error

    async def _value_of(self, key: str) -> Any:
        value = await self._store.get(key, prototype=self._prototype)
        return None if value is None else value.as_numpy_array()

    def _together(self, keys: list[str], request: Callable[[str], Awaitable[Any]]) -> list[Any]:
        """``request(key)`` for every key on zarr-python's event loop, as many at once as its
        ``async.concurrency`` allows, or as the engine's ``threads`` when those are more. The
        first request that fails cancels the others and is raised, naming its chunk."""
        import zarr

        threads = int(_core.settings()["threads"]) or (os.cpu_count() or 1)
        limit = asyncio.Semaphore(max(int(zarr.config.get("async.concurrency")), threads))

        async def one(key: str) -> Any:
            async with limit:
                try:
                    return await request(key)
                except Exception as error:
                    raise _ChunkRequestFailed(key, error) from error

        async def every() -> list[Any]:
            tasks = [asyncio.ensure_future(one(key)) for key in keys]
            try:
                return list(await asyncio.gather(*tasks))
            except BaseException:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise

        values: list[Any] = self._sync(every())
        return values

    def sizes_many(self, keys: list[str]) -> list[int | None]:
        """The sizes of the values at ``keys`` (None where there is none), asked for together as
        :meth:`get_many` fetches values."""
        return self._together(keys, self._size_of)

    async def _size_of(self, key: str) -> int | None:
        if self._measures_by_reading:
            value = await self._store.get(key, prototype=self._prototype)
            return None if value is None else len(value)
        try:
            return int(await self._store.getsize(key))
        except FileNotFoundError:
            return None

    def size(self, key: str) -> int | None:
        size: int | None = self._sync(self._size_of(key))
        return size

    def set(self, key: str, value: bytes) -> None:
        self._sync(self._store.set(key, self._prototype.buffer.from_bytes(value)))

    def erase(self, key: str) -> None:
        self._sync(self._store.delete(key))

    def erase_prefix(self, prefix: str) -> None:
        self._sync(self._store.delete_dir(prefix))

    def list_dir(self, prefix: str) -> list[str]:
        async def collect() -> list[str]:
            return [name async for name in self._store.list_dir(prefix)]

        return sorted(self._sync(collect()))

    def describe(self) -> str:
        return str(self._store)


class ZarrStoreAdapter:
    """Feeds a zarr-python 3 store (``zarr.abc.store.Store``: object stores, fsspec, memory) to
    the engine."""

    def __init__(self, store: Any) -> None:
        self.store = store
        read_only = bool(getattr(store, "read_only", False))  # a read-only store stays so
        if _is_zarr_local_store(store):
            # Local files are the engine's own: its file access (beneath the root) and its locks,
            # shared with every other handle on the same files, in any process.
            self._handle = _core.local_store(str(store.root), "buffered", read_only)
        else:
            self._handle = _core.python_store(_ZarrStoreCallbacks(store), read_only)

    @property
    def handle(self) -> _core.Store:
        return self._handle

    @property
    def read_only(self) -> bool:
        return self._handle.read_only

    def __repr__(self) -> str:
        return f"ZarrStoreAdapter({self.store!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as the zarr-python store (which pickles itself, if it can) and fed to the
        # engine again where it is unpickled.
        return (ZarrStoreAdapter, (self.store,))


def _is_zarr_local_store(store: Any) -> bool:
    zarr_storage = sys.modules.get("zarr.storage")
    return zarr_storage is not None and isinstance(store, zarr_storage.LocalStore)


StoreLike = Union[str, os.PathLike[str], LocalStore, MemoryStore, ZarrStoreAdapter, Any]


def as_store(store: StoreLike) -> LocalStore | MemoryStore | ZarrStoreAdapter:
    """Turns a path or a store object into a store the engine can use."""
    if isinstance(store, (LocalStore, MemoryStore, ZarrStoreAdapter)):
        return store
    if isinstance(store, (str, os.PathLike)):
        text = os.fspath(store)
        if "://" in text and not text.startswith("file://"):
            raise UsageError(
                f"{text!r}: remote URLs are opened through a zarr-python store, e.g. "
                "zarr.storage.FsspecStore.from_url(url), passed in place of the path"
            )
        return LocalStore(text.removeprefix("file://"))
    try:
        import zarr.storage
    except ImportError:  # pragma: no cover - zarr is an optional dependency
        raise UsageError(f"unsupported store {store!r}") from None
    if isinstance(store, zarr.storage.LocalStore):
        # Served natively: the engine reads local files without Python in the loop.
        return LocalStore(store.root, read_only=bool(store.read_only))
    from zarr.abc.store import Store as ZarrStore

    if isinstance(store, ZarrStore):
        return ZarrStoreAdapter(store)
    raise UsageError(
        f"unsupported store {store!r}: pass a path, a zarr_device store or a zarr-python store"
    )
