#!/usr/bin/env python
"""The zarr-python plug-in against zarr-python's own ways of reading onto a device, and against
zarr-device's own API, on whole-array reads.

One float32 array (default 4 GiB, zstd, values like model weights) is written once per layout,
each in its own group with dimension names (for xarray), and read whole by:

    (a) plug-in      with zarr_device.enable(device=D, like=L): zarr.open_array(p)[:]
    (b) zarr GPU     with zarr.config.enable_gpu(): zarr.open_array(p)[:]        (CuPy; GPU runs)
    (c) zarr CPU     zarr.open_array(p)[:], then copied to D as L                  (plain zarr-python)
    (d) zarr-device  zd.open_array(p).read(device=D, like=L)
    xarray           xr.open_zarr(group).load()                 without and with the plug-in
    dask             dask.array.from_zarr(p).compute()          without and with the plug-in

L is "cupy" on a CUDA device when CuPy is installed, else "torch" (--like chooses); on the CPU,
"numpy". xarray and dask with the plug-in on a CUDA device read into CuPy (skipped without it);
without it, into host memory, as they do. Open + read + device synchronisation is timed: warm,
the best of --repeat reads after one untimed read; cold (--cold), after dropping the page cache
(root only). Every result's bits are fingerprinted and must agree with (d)'s. Printed per layout:
GB/s (10^9 decoded bytes per second) of each reader, and the ratios plug-in / best of (b), (c),
plug-in / (d), and xarray and dask with / without the plug-in.

--s3 also reads one array from the tests' S3 server (SeaweedFS, python/tests/s3_server.py)
through zarr-python's ObjectStore (obstore): the plug-in, zarr-python's GPU mode (on a CUDA
device), zarr-python plus the copy, and (d).

    python bench/bench_plugin.py                          # 4 GiB per layout, cuda:0
    python bench/bench_plugin.py --device cpu --size 64MiB --repeat 1    # a smoke run
    python bench/bench_plugin.py --like torch --layouts unsharded:4MiB --s3 --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests"))

from bench_common import (  # noqa: E402
    GIB,
    MIB,
    drop_caches,
    engine_info,
    fingerprint,
    fmt_bytes,
    layout_of,
    log,
    machine_info,
    package_versions,
    parse_size,
    write_array,
)

DEFAULT_LAYOUTS = "unsharded:1MiB,unsharded:4MiB,unsharded:8MiB,sharded:1MiB/64MiB,sharded:4MiB/256MiB"
READERS = ("plugin", "zarr-gpu", "zarr-cpu", "zarr-device", "xarray", "xarray+plugin", "dask", "dask+plugin")
LABELS = {
    "plugin": "(a) plug-in",
    "zarr-gpu": "(b) zarr-python GPU (CuPy)",
    "zarr-cpu": "(c) zarr-python CPU + copy",
    "zarr-device": "(d) zd.open_array().read()",
    "xarray": "xarray open_zarr().load()",
    "xarray+plugin": "xarray, plug-in on",
    "dask": "dask from_zarr().compute()",
    "dask+plugin": "dask, plug-in on",
}
VARIABLE = "v"  # the array's name in its group


class Skip(Exception):
    """A reader that cannot run here (the message says why)."""


# ------------------------------------------------------------------------------------------------
# the device: where results go, how to wait for it, how to fingerprint what it holds
# ------------------------------------------------------------------------------------------------


class Device:
    def __init__(self, name: str, like: str | None) -> None:
        self.name = name
        self.cuda = name.startswith("cuda")
        self.index = int(name.partition(":")[2] or 0) if self.cuda else 0
        self.cupy = _optional("cupy") if self.cuda else None
        self.torch = _optional("torch")
        if like is None:
            like = ("cupy" if self.cupy is not None else "torch") if self.cuda else "numpy"
        if like == "cupy" and self.cupy is None:
            raise SystemExit("--like cupy: CuPy is not installed")
        if like == "torch" and self.torch is None:
            raise SystemExit("--like torch: torch is not installed")
        self.like = like

    def sync(self) -> None:
        if not self.cuda:
            return
        if self.cupy is not None:
            self.cupy.cuda.Device(self.index).synchronize()
        if self.torch is not None:
            self.torch.cuda.synchronize(self.index)

    def from_host(self, values: Any) -> Any:
        """A NumPy array as ``like`` on the device (one pageable copy on a GPU)."""
        if self.like == "torch":
            return self.torch.from_numpy(values).to(self.name)  # type: ignore[union-attr]
        if self.like == "cupy":
            with self.cupy.cuda.Device(self.index):  # type: ignore[union-attr]
                return self.cupy.asarray(values)  # type: ignore[union-attr]
        return values

    def fingerprint(self, result: Any) -> str:
        """The result's bits, summarised where they are (torch) or hashed on the host."""
        values = result[VARIABLE].data if hasattr(result, "data_vars") else result  # xarray: the variable
        if self.torch is not None:
            if type(values).__module__.startswith("numpy"):
                tensor = self.torch.from_numpy(values)
            elif type(values).__module__.startswith("torch"):
                tensor = values
            else:
                tensor = self.torch.from_dlpack(values)
            return fingerprint(self.torch, tensor.contiguous())
        if self.cupy is not None and not type(values).__module__.startswith("numpy"):
            values = self.cupy.asnumpy(values)
        import numpy as np

        return hashlib.sha256(np.ascontiguousarray(values).view(np.uint8)).hexdigest()[:16]


def _optional(module: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        return None


# ------------------------------------------------------------------------------------------------
# the readers: each a function that opens the array and reads it whole
# ------------------------------------------------------------------------------------------------


def _plugin(device: Device, like: str | None = None) -> contextlib.AbstractContextManager[Any]:
    import zarr_device as zd

    return zd.enable(device=device.name, like=like or device.like)


def make_reader(name: str, store: Callable[[], Any], group: Callable[[], Any], device: Device) -> Callable[[], Any]:
    """``store()`` a fresh zarr-python store (or path) of the array, ``group()`` of its group."""
    import zarr

    import zarr_device as zd

    if name == "plugin":

        def read_plugin() -> Any:
            with _plugin(device):
                return zarr.open_array(store(), mode="r")[:]

        return read_plugin
    if name == "zarr-gpu":
        if not device.cuda:
            raise Skip("a CPU run")
        if device.cupy is None:
            raise Skip("CuPy is not installed")

        def read_gpu() -> Any:
            with device.cupy.cuda.Device(device.index), zarr.config.enable_gpu():  # type: ignore[union-attr]
                return zarr.open_array(store(), mode="r")[:]

        return read_gpu
    if name == "zarr-cpu":
        return lambda: device.from_host(zarr.open_array(store(), mode="r")[:])
    if name == "zarr-device":
        return lambda: zd.open_array(store()).read(device=device.name, like=device.like)
    if name.startswith("xarray"):
        xr = _optional("xarray")
        if xr is None:
            raise Skip("xarray is not installed")
        return _with_plugin_if(name, device, lambda: xr.open_zarr(group(), consolidated=False).load())
    if name.startswith("dask"):
        if _optional("dask") is None:
            raise Skip("dask is not installed")
        import dask.array

        return _with_plugin_if(name, device, lambda: dask.array.from_zarr(store()).compute())
    raise ValueError(name)


def _with_plugin_if(name: str, device: Device, read: Callable[[], Any]) -> Callable[[], Any]:
    if not name.endswith("+plugin"):
        return read
    like = "numpy"
    if device.cuda:
        if device.cupy is None:
            raise Skip("on a GPU, xarray and dask read through the plug-in into CuPy, which is not installed")
        like = "cupy"

    def read_with_plugin() -> Any:
        with _plugin(device, like):
            return read()

    return read_with_plugin


def measure(read: Callable[[], Any], device: Device, repeat: int, cold: int) -> dict[str, Any]:
    """One untimed read (fingerprinted), the best of ``repeat`` warm reads, ``cold`` cold ones."""
    result = read()
    device.sync()
    mark = device.fingerprint(result)
    del result
    gc.collect()

    def timed() -> float:
        start = time.perf_counter()
        out = read()
        device.sync()
        seconds = time.perf_counter() - start
        del out
        gc.collect()
        return seconds

    warm = [timed() for _ in range(repeat)]
    row: dict[str, Any] = {"fingerprint": mark, "warm_s": min(warm)}
    if cold:
        why_not = drop_caches()
        if why_not is not None:
            row["cold_note"] = why_not
        else:
            times = []
            for _ in range(cold):
                drop_caches()
                times.append(timed())
            row["cold_s"] = min(times)
    return row


def run_readers(names: Sequence[str], store: Callable[[], Any], group: Callable[[], Any], nbytes: int,
                device: Device, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for name in names:
        try:
            read = make_reader(name, store, group, device)
            log(f"  {LABELS[name]} ...")
            row = measure(read, device, args.repeat, args.cold_repeat if args.cold else 0)
        except Skip as e:
            rows[name] = {"skipped": str(e)}
            continue
        except Exception as e:  # one reader failing must not lose the others' figures
            rows[name] = {"error": f"{type(e).__name__}: {e}"}
            continue
        row["warm_gbps"] = nbytes / row["warm_s"] / 1e9
        if "cold_s" in row:
            row["cold_gbps"] = nbytes / row["cold_s"] / 1e9
        rows[name] = row
    reference = rows.get("zarr-device", {}).get("fingerprint")
    for row in rows.values():
        if "fingerprint" in row:
            row["matches"] = reference is None or row["fingerprint"] == reference
    return rows


# ------------------------------------------------------------------------------------------------
# figures
# ------------------------------------------------------------------------------------------------


def ratios(rows: dict[str, dict[str, Any]], key: str = "warm_gbps") -> dict[str, float]:
    def rate(name: str) -> float | None:
        value = rows.get(name, {}).get(key)
        return float(value) if value else None

    out: dict[str, float] = {}
    plugin = rate("plugin")
    peers = [r for r in (rate("zarr-gpu"), rate("zarr-cpu")) if r]
    if plugin and peers:
        out["plug-in / best of (b),(c)"] = plugin / max(peers)
    if plugin and rate("zarr-device"):
        out["plug-in / (d)"] = plugin / rate("zarr-device")  # type: ignore[operator]
    for tool in ("xarray", "dask"):
        on, off = rate(f"{tool}+plugin"), rate(tool)
        if on and off:
            out[f"{tool}: plug-in on / off"] = on / off
    return out


def format_rows(title: str, rows: dict[str, dict[str, Any]]) -> str:
    lines = [title, f"  {'reader':<30} {'warm GB/s':>10} {'cold GB/s':>10}  result"]
    for name, row in rows.items():
        label = LABELS.get(name, name)
        if "skipped" in row or "error" in row:
            lines.append(f"  {label:<30} {'-':>10} {'-':>10}  {row.get('skipped') and 'skipped: ' + row['skipped'] or row['error']}")
            continue
        cold = f"{row['cold_gbps']:10.2f}" if "cold_gbps" in row else f"{'-':>10}"
        check = "bits match (d)" if row["matches"] else f"MISMATCH (fingerprint {row['fingerprint']})"
        lines.append(f"  {label:<30} {row['warm_gbps']:10.2f} {cold}  {check}")
    for what, key in (("warm", "warm_gbps"), ("cold", "cold_gbps")):
        found = ratios(rows, key)
        if found:
            lines.append(f"  ratios, {what}: " + "; ".join(f"{k} = {v:.2f}x" for k, v in found.items()))
    notes = {row["cold_note"] for row in rows.values() if "cold_note" in row}
    lines += [f"  cold: {note}" for note in sorted(notes)]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# the data
# ------------------------------------------------------------------------------------------------


def parse_layout(text: str, size: int) -> dict[str, Any]:
    """"unsharded:4MiB" or "sharded:1MiB/64MiB" (inner chunk / shard) as bench_gpu's layout."""
    kind, _, sizes = text.partition(":")
    if kind not in ("sharded", "unsharded") or not sizes:
        raise argparse.ArgumentTypeError(f"layout {text!r}: unsharded:CHUNK or sharded:CHUNK/SHARD")
    chunk, _, shard = sizes.partition("/")
    if (kind == "sharded") != bool(shard):
        raise argparse.ArgumentTypeError(f"layout {text!r}: a shard size goes with 'sharded' only")
    spec = argparse.Namespace(dtype="float32", cols=8192, layout=kind, size=size, chunk=parse_size(chunk),
                              inner_chunk=parse_size(chunk), shard=parse_size(shard) if shard else 0)
    layout = layout_of(spec)
    layout["name"] = text
    return layout


def write_group(root: str, layout: dict[str, Any], level: int, checksum: bool) -> str:
    """The layout's group at ``root`` holding the array (written once, kept across runs);
    ``checksum``: crc32c after zstd, as zarr-device writes by default (decoded on the GPU)."""
    import zarr_device as zd

    if not os.path.exists(os.path.join(root, "zarr.json")):
        zd.create_group(root, mode="w")
    path = os.path.join(root, VARIABLE)
    seconds = write_array(path, layout, "zstd", level, checksum=checksum, dimension_names=["y", "x"])
    if seconds:
        log(f"  wrote {path} in {seconds:.1f} s")
    return path


def stored_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, names in os.walk(path) for f in names)


@contextlib.contextmanager
def s3_copy(path: str) -> Iterator[tuple[Any, str]]:
    """The tests' S3 server holding a copy of the group at ``path``: (server, prefix)."""
    import pytest
    from s3_server import running_s3_server

    try:
        with running_s3_server() as server:
            client = server.boto_client()
            prefix = "bench-plugin"
            for folder, _dirs, names in os.walk(path):
                for name in names:
                    full = os.path.join(folder, name)
                    key = f"{prefix}/{os.path.relpath(full, path)}"
                    with open(full, "rb") as f:
                        client.put_object(Bucket=server.bucket, Key=key, Body=f.read())
            yield server, prefix
    except pytest.skip.Exception as e:
        raise Skip(str(e)) from None


# ------------------------------------------------------------------------------------------------
# the run
# ------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--device", default="cuda:0", help="cuda:N, or cpu (default cuda:0)")
    parser.add_argument("--like", choices=("cupy", "torch", "numpy"), default=None,
                        help="what the plug-in and (d) read into (default: cupy on a GPU where installed, else torch; numpy on the CPU)")
    parser.add_argument("--size", type=parse_size, default=4 * GIB, help="array size per layout (default 4GiB)")
    parser.add_argument("--layouts", default=DEFAULT_LAYOUTS,
                        help=f"comma-separated unsharded:CHUNK or sharded:CHUNK/SHARD (default {DEFAULT_LAYOUTS})")
    parser.add_argument("--zstd-level", type=int, default=1)
    parser.add_argument("--checksum", action="store_true",
                        help="zstd + crc32c, as zarr-device writes by default (decoded on the GPU under the "
                             "default gpu_decode='checked'); default: zstd alone, as zarr-python writes it")
    parser.add_argument("--readers", default=",".join(READERS), help=f"default: {','.join(READERS)}")
    parser.add_argument("--repeat", type=int, default=3, help="warm reads per reader, best taken (3)")
    parser.add_argument("--cold", action="store_true", help="also cold reads (drops the page cache: root)")
    parser.add_argument("--cold-repeat", type=int, default=1)
    parser.add_argument("--s3", action="store_true", help="also read one array from the tests' S3 server")
    parser.add_argument("--s3-size", type=parse_size, default=1 * GIB, help="the S3 array's size (1GiB)")
    parser.add_argument("--s3-layout", default="unsharded:4MiB")
    parser.add_argument("--out", default=None, help="directory for the arrays (kept; default: a temp dir, removed)")
    parser.add_argument("--json", metavar="OUT", default=None, help="also write the results to OUT")
    args = parser.parse_args(argv)
    args.readers = [r for r in args.readers.split(",") if r]
    for name in args.readers:
        if name not in READERS:
            parser.error(f"unknown reader {name!r} (one of {', '.join(READERS)})")
    try:
        args.layouts = [parse_layout(t, args.size) for t in args.layouts.split(",") if t]
        args.s3_layout = parse_layout(args.s3_layout, args.s3_size)
    except argparse.ArgumentTypeError as e:
        parser.error(str(e))
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    return args


def describe(layout: dict[str, Any], stored: int, checksum: bool = False) -> str:
    grid = (f"shards of {layout['shards']} holding chunks of {layout['chunks']}" if layout["shards"]
            else f"chunks of {layout['chunks']}")
    chunk_bytes = layout["chunks"][0] * layout["chunks"][1] * layout["itemsize"]
    codecs = "zstd + crc32c" if checksum else "zstd"
    return (f"{layout['name']}: {fmt_bytes(layout['nbytes'])} float32 {tuple(layout['shape'])}, {grid} "
            f"({fmt_bytes(chunk_bytes)} chunks), {codecs}, stored {fmt_bytes(stored)} "
            f"({stored / layout['nbytes']:.2f} of the data)")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    device = Device(args.device, args.like)
    machine = machine_info()
    print(f"machine:  {machine['cpu']}; {machine['usable_cores']} cores usable; "
          f"{fmt_bytes(machine['memory_bytes'] or 0)} RAM; {machine['system']}; Python {machine['python']}")
    for gpu in machine["gpus"] or ["no GPU found by nvidia-smi"]:
        print(f"gpu:      {gpu}")
    versions = package_versions()
    for extra in ("xarray", "dask", "cupy", "obstore"):
        module = _optional(extra)
        versions[extra] = getattr(module, "__version__", None) if module is not None else None
    print("versions: " + ", ".join(f"{k} {v or '(not installed)'}" for k, v in versions.items()))
    print(f"engine:   {json.dumps(engine_info())}")
    print(f"device:   {device.name}, results as {device.like}; warm: best of {args.repeat} after one untimed read"
          + (f"; cold: best of {args.cold_repeat}" if args.cold else ""), flush=True)

    own_dir = args.out is None
    out_dir = args.out or tempfile.mkdtemp(prefix="bench-plugin-")
    document: dict[str, Any] = {"machine": machine, "versions": versions, "device": device.name,
                                "like": device.like, "layouts": [], "s3": None}
    try:
        for layout in args.layouts:
            root = os.path.join(out_dir, layout["name"].replace(":", "-").replace("/", "-")
                                + ("-crc32c" if args.checksum else ""))
            log(f"layout {layout['name']}")
            path = write_group(root, layout, args.zstd_level, args.checksum)
            rows = run_readers(args.readers, lambda: path, lambda: root, layout["nbytes"], device, args)
            print("\n" + format_rows(describe(layout, stored_bytes(path), args.checksum), rows), flush=True)
            document["layouts"].append({"layout": layout, "stored_bytes": stored_bytes(path), "readers": rows,
                                        "ratios_warm": ratios(rows), "ratios_cold": ratios(rows, "cold_gbps")})
        if args.s3:
            document["s3"] = run_s3(args, device, out_dir)
    finally:
        if own_dir:
            shutil.rmtree(out_dir, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(document, f, indent=2)
    failed = [name for entry in document["layouts"] for name, row in entry["readers"].items()
              if "error" in row or not row.get("matches", True)]
    if document["s3"]:
        failed += [f"s3 {name}" for name, row in document["s3"]["readers"].items()
                   if "error" in row or not row.get("matches", True)]
    if failed:
        print(f"\nfailed or mismatched: {', '.join(failed)}")
    return 1 if failed else 0


def run_s3(args: argparse.Namespace, device: Device, out_dir: str) -> dict[str, Any]:
    layout = args.s3_layout
    root = os.path.join(out_dir, "s3-" + layout["name"].replace(":", "-").replace("/", "-"))
    log(f"S3: layout {layout['name']}")
    write_group(root, layout, args.zstd_level, args.checksum)
    try:
        with s3_copy(os.path.join(root, VARIABLE)) as (server, prefix):
            names = [n for n in ("plugin", "zarr-gpu", "zarr-cpu", "zarr-device") if n in args.readers]
            rows = run_readers(names, lambda: server.object_store(prefix, read_only=True), lambda: None,
                               layout["nbytes"], device, argparse.Namespace(**{**vars(args), "cold": False}))
    except Skip as e:
        print(f"\nS3: skipped: {e}")
        return {"skipped": str(e), "readers": {}}
    title = f"S3 (SeaweedFS on loopback, zarr.storage.ObjectStore / obstore): {describe(layout, stored_bytes(root), args.checksum)}"
    print("\n" + format_rows(title, rows), flush=True)
    return {"layout": layout, "readers": rows, "ratios_warm": ratios(rows)}


if __name__ == "__main__":
    sys.exit(main())
