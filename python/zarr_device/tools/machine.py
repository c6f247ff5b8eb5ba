"""The machine a measurement ran on, as benchmark results name it: CPU model, cores, memory,
system, Python, and the GPUs nvidia-smi lists (``gpu``: the first one's name, or None)."""

from __future__ import annotations

import os
import platform
import subprocess
from typing import Any

__all__ = ["machine_info"]


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpu": platform.processor() or "unknown",
        "cores": os.cpu_count(),
        "usable_cores": (
            len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        ),
        "memory_bytes": None,
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "gpus": [],
        "gpu": None,
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["memory_bytes"] = int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        query = "name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current"
        done = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
        info["gpus"] = [line.strip() for line in done.stdout.splitlines() if line.strip()]
        if info["gpus"]:
            info["gpu"] = info["gpus"][0].split(",")[0].strip()
    except (OSError, subprocess.SubprocessError) as e:
        info["gpus"] = [f"nvidia-smi unavailable ({e})"]
    return info
