"""What a process prints when it exits with engine objects still alive: nothing by default (the
exit frees them), nanobind's leak report with ZARR_DEVICE_LEAK_WARNINGS=1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# A daemon thread still holding an array when the interpreter stops: its frame is never freed,
# as with arrays that zarr-python's event-loop thread holds at exit.
SCRIPT = """
import threading, time, sys
import numpy as np
import zarr_device as zd
a = zd.create(sys.argv[1], shape=(4,), chunks=(2,), dtype="int32")
a[:] = np.arange(4, dtype="int32")
def hold(array=zd.open_array(sys.argv[1])):
    time.sleep(3600)
threading.Thread(target=hold, daemon=True).start()
print("ok")
"""


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "ZARR_DEVICE_LEAK_WARNINGS"} | env
    return subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "a.zarr")], capture_output=True,
                          text=True, env=environment, timeout=120, check=False)


@pytest.mark.parametrize("switch", ["", "1"])
def test_exit_with_live_arrays_is_quiet_unless_asked(tmp_path: Path, switch: str) -> None:
    done = _run(tmp_path, **({"ZARR_DEVICE_LEAK_WARNINGS": switch} if switch else {}))
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    if switch:
        assert "nanobind: leaked" in done.stderr  # the array the thread holds
    else:
        assert "leaked" not in done.stderr, done.stderr
