"""The read worker: a separate interpreter that reads with zarr_device (:func:`_worker_main`),
and :class:`ReadRunner`, which sends it reads and reports its crash or hang as the read's result."""

from __future__ import annotations

import faulthandler
import math
import multiprocessing.connection
import os
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .cases import Selection, format_selection


# ----------------------------------------------------------------------------------------------
# The worker process (reads with zarr_device; may crash or hang)

MAX_READ_BYTES = 64 << 20  # reads of arrays whose metadata was enlarged are cut down to this


@dataclass
class ReadResult:
    """What one read in the worker gave."""

    status: str  # "ok", "error", "crash", "hang"
    value: np.ndarray | None = None
    error_type: str = ""
    typed: bool = False
    message: str = ""
    where: str = ""  # innermost frame of an exception
    shrunk: bool = False  # the selection was cut down (the metadata made the array huge)


def _selection_shape(selection: Selection, shape: Sequence[int]) -> tuple[int, ...] | None:
    """The result shape of a selection, None when it does not fit the shape."""
    items: tuple[Any, ...] = (Ellipsis,) if selection is Ellipsis else selection
    if Ellipsis in items:
        i = items.index(Ellipsis)
        items = items[:i] + (slice(None),) * (len(shape) - len(items) + 1) + items[i + 1:]
    if len(items) > len(shape):
        return None
    items = items + (slice(None),) * (len(shape) - len(items))
    return tuple(len(range(*it.indices(n))) for it, n in zip(items, shape) if isinstance(it, slice))


def _read_once(zd: Any, path: str, selection: Selection) -> ReadResult:
    """Opens and reads in the worker; never raises."""
    shrunk = False
    try:
        arr = zd.open_array(path)
        result_shape = _selection_shape(selection, arr.shape)
        if result_shape is not None and math.prod(result_shape) * arr.dtype.itemsize > MAX_READ_BYTES:
            selection = tuple(slice(0, min(n, 2)) for n in arr.shape)
            shrunk = True
        value = np.asarray(arr[selection])
        return ReadResult("ok", value=value, shrunk=shrunk)
    except BaseException as e:  # noqa: B036 - every exception is an outcome to record
        tb = traceback.extract_tb(e.__traceback__)
        where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno} in {tb[-1].name}" if tb else ""
        return ReadResult("error", error_type=f"{type(e).__module__}.{type(e).__qualname__}",
                          typed=isinstance(e, zd.ZarrDeviceError), message=str(e)[:2000], where=where,
                          shrunk=shrunk)


def _worker_main(read_fd: int, write_fd: int, memory_limit: int) -> None:
    """Serves reads until told to stop (run as a separate interpreter by :class:`ReadRunner`,
    which sends its stderr, C++ messages and faulthandler tracebacks included, to a log)."""
    import resource

    conn_in = multiprocessing.connection.Connection(read_fd, writable=False)
    conn = multiprocessing.connection.Connection(write_fd, readable=False)
    faulthandler.enable(all_threads=True)
    if memory_limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    try:
        import zarr_device as zd
    except BaseException as e:  # noqa: B036 - e.g. the package being reinstalled right now
        conn.send(("failed", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", ""))
    while True:
        try:
            message = conn_in.recv()
        except (EOFError, OSError):
            return
        if message[0] == "stop":
            return
        _, path, selection, dump_after = message
        sys.stderr.write(f"--- read {path}[{format_selection(selection)}]\n")
        sys.stderr.flush()
        faulthandler.dump_traceback_later(dump_after, exit=False)
        try:
            result = _read_once(zd, path, selection)
        finally:
            faulthandler.cancel_dump_traceback_later()
        try:
            conn.send(result)
        except Exception as e:  # e.g. a result that does not pickle
            conn.send(ReadResult("error", error_type=f"pickle.{type(e).__name__}", message=str(e)))


def _log_tail(path: Path, lines: int = 25) -> str:
    """The worker log's lines after its last read marker (what the failing read printed)."""
    try:
        text = path.read_bytes()[-20000:].decode(errors="replace")
    except OSError:
        return ""
    last = text.rsplit("--- read ", 1)[-1]
    return "\n".join(last.splitlines()[1:][-lines:])


# argv[1] is the directory holding this package (python/tests), so ``mutation_fuzz`` imports there
_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from mutation_fuzz.runner import _worker_main; "
         "_worker_main(*map(int, sys.argv[2:]))")


class ReadRunner:
    """Runs reads in a worker interpreter, restarting it after a crash or a hang."""

    def __init__(self, log_dir: Path, timeout: float = 10.0, memory_limit: int = 4 << 30,
                 env: Mapping[str, str] | None = None) -> None:
        self.log_dir = log_dir
        self.timeout = timeout
        self.memory_limit = memory_limit
        self.env = None if env is None else {**os.environ, **env}  # the worker's environment
        self.starts = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._send: multiprocessing.connection.Connection | None = None
        self._recv: multiprocessing.connection.Connection | None = None
        self._log = log_dir / "worker.log"

    def _start(self) -> None:
        """Starts a worker; retries a while when it fails (the package may be being reinstalled)."""
        last = ""
        for attempt in range(10):
            self.starts += 1
            self._log = self.log_dir / f"worker-{self.starts}.log"
            to_child_r, to_child_w = os.pipe()
            from_child_r, from_child_w = os.pipe()
            with open(self._log, "ab") as log:
                process = subprocess.Popen(
                    [sys.executable, "-c", _BOOT, str(Path(__file__).resolve().parent.parent), str(to_child_r),
                     str(from_child_w), str(self.memory_limit)],
                    pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    env=self.env)
            os.close(to_child_r)
            os.close(from_child_w)
            send = multiprocessing.connection.Connection(to_child_w, readable=False)
            recv = multiprocessing.connection.Connection(from_child_r, writable=False)
            status, detail = "failed", ""
            if recv.poll(120):
                try:
                    status, detail = recv.recv()
                except (EOFError, OSError):
                    detail = f"exit code {process.wait(10)}: {_log_tail(self._log)}"
            if status == "ready":
                self._process, self._send, self._recv = process, send, recv
                return
            last = detail
            send.close()
            recv.close()
            self._kill(process)
            time.sleep(2.0)
        raise RuntimeError(f"the read worker does not start: {last}")

    @staticmethod
    def _kill(process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.kill()
        process.wait(10)

    def read(self, path: Path, selection: Selection) -> ReadResult:
        """One read of ``selection`` from the array at ``path``."""
        if self._process is None:
            self._start()
        assert self._process is not None and self._send is not None and self._recv is not None
        try:
            self._send.send(("read", str(path), selection, self.timeout * 0.8))
            if not self._recv.poll(self.timeout):
                self._drop()
                return ReadResult("hang", message=f"no result after {self.timeout:g} s\n{_log_tail(self._log)}")
            result: ReadResult = self._recv.recv()
            return result
        except (EOFError, OSError):
            pass
        code = self._process.wait(10)
        self._drop()
        reason = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return ReadResult("crash", message=f"worker died ({reason})\n{_log_tail(self._log)}")

    def _drop(self) -> None:
        for conn in (self._send, self._recv):
            if conn is not None:
                conn.close()
        if self._process is not None:
            self._kill(self._process)
        self._process, self._send, self._recv = None, None, None

    def close(self) -> None:
        """Stops the worker."""
        if self._process is not None and self._send is not None:
            try:
                self._send.send(("stop",))
                self._process.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._drop()
