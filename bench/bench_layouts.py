"""One array onto a GPU, layout by layout: chunk (or inner chunk) sizes from 16 KiB to 64 MiB,
sharded and not, zstd + crc32c and uncompressed, and data written by zarr-python and tensorstore
(zstd without a checksum) under each ``gpu_decode`` policy, against the limits measured in the
same run: the page cache and the pinned copy at once (what a read through pinned staging does),
and one core's zstd decode rate times the cores. The part ``foreign-crc`` writes the same array
with zstd + crc32c by zarr-device, zarr-python and tensorstore in chunks of 1, 16 and 64 MiB (the
frames each writer makes, decoded on the GPU under the default policy) and gives each writer's
rate against zarr-device's.

    python bench/bench_layouts.py --size 1GiB --out /tmp/bl [--json results.json]

Prints a table of GB/s (decoded bytes per second, 10^9). Every read is checked against the data
written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import GIB, MIB, engine_info, fmt_bytes, log, machine_info, parse_size  # noqa: E402

KIB = 1 << 10
COLS = 4096  # bf16 rows of 8 KiB
ZSTD_CRC = [{"name": "zstd", "configuration": {"level": 1}}, {"name": "crc32c"}]
CHUNKS = [16 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB]


def weights(rows: int, seed: int = 0) -> np.ndarray:
    import ml_dtypes

    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, COLS), dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)


def rows_of(nbytes: int) -> int:
    return max(1, nbytes // (COLS * 2))


def best_of(read: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    import torch

    result = read()  # warm: page cache, ring, plans
    runs = []
    for _ in range(repeat):
        del result
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = read()
        torch.cuda.synchronize()
        runs.append(time.perf_counter() - start)
    return min(runs), result


def check(result: Any, expected: np.ndarray, what: str) -> None:
    import torch

    got = result.view(torch.int16).cpu().numpy()
    if not np.array_equal(got, expected.view(np.int16)):
        raise AssertionError(f"{what}: the read returned other values")


def concurrent_limits(path: str, device: str | Sequence[str], threads: int, seconds: float = 2.0) -> dict[str, float]:
    """Page cache -> pinned with `threads` threads, alone and while pinned -> GPU copies run (to
    each device of `device` at once, each on a stream of its own: what a staged read onto
    several GPUs of one host does to its memory). copy_while_reading is the copies' sum."""
    import torch

    devices = [device] if isinstance(device, str) else list(device)
    files = [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
    slot = 16 * MIB
    pinned = torch.empty(threads * slot, dtype=torch.uint8, pin_memory=True)
    view = memoryview(pinned.numpy())
    copies = [(torch.empty(1 * GIB, dtype=torch.uint8, pin_memory=True),
               torch.empty(1 * GIB, dtype=torch.uint8, device=d), torch.cuda.Stream(device=d)) for d in devices]
    stop = threading.Event()

    def reader(i: int, counter: list[int]) -> None:
        k = i
        buffer = view[i * slot:(i + 1) * slot]
        while not stop.is_set():
            fd = os.open(files[k % len(files)], os.O_RDONLY)
            try:
                while n := os.readv(fd, [buffer]):
                    counter[0] += n
                    if stop.is_set():
                        break
            finally:
                os.close(fd)
            k += threads

    def read_rate(copying: bool) -> tuple[float, float]:
        stop.clear()
        counters = [[0] for _ in range(threads)]
        workers = [threading.Thread(target=reader, args=(i, counters[i])) for i in range(threads)]
        start = time.perf_counter()
        for w in workers:
            w.start()
        copied = 0
        while time.perf_counter() - start < seconds:
            if copying:
                for src, dst, stream in copies:
                    with torch.cuda.stream(stream):
                        dst.copy_(src, non_blocking=True)
                for src, _, stream in copies:
                    stream.synchronize()
                    copied += src.numel()
            else:
                time.sleep(0.01)
        elapsed = time.perf_counter() - start
        stop.set()
        for w in workers:
            w.join()
        return sum(c[0] for c in counters) / elapsed / 1e9, copied / elapsed / 1e9

    alone, _ = read_rate(False)
    together, copy_rate = read_rate(True)
    return {"read_alone": alone, "read_while_copying": together, "copy_while_reading": copy_rate}


def one_core_zstd(path: str) -> float:
    """GB/s of one thread decoding the array on the host (zstd, plus the copy out)."""
    import zarr_device as zd

    array = zd.open_array(path)
    previous = zd.set_config(threads=1)
    try:
        array.read()
        start = time.perf_counter()
        array.read()
        return array.nbytes / (time.perf_counter() - start) / 1e9
    finally:
        zd.set_config(**{"threads": previous.threads})


def write_with_crc32c(writer: str, path: str, data: np.ndarray, chunk_rows: int) -> None:
    """`data` as one array of zstd (level 1) + crc32c chunks of `chunk_rows` rows, written by
    `writer`: zarr-device (bfloat16), zarr-python or tensorstore (the same bytes as uint16, which
    the read is checked against as bfloat16 all the same)."""
    shape = data.shape
    if writer == "zarr-device":
        import zarr_device as zd

        zd.create(path, shape=shape, dtype="bfloat16", chunks=(chunk_rows, COLS), compressors=ZSTD_CRC)[...] = data
    elif writer == "zarr-python":
        import zarr

        z = zarr.create_array(path, shape=shape, chunks=(chunk_rows, COLS), dtype="uint16", overwrite=True,
                              compressors=[zarr.codecs.ZstdCodec(level=1), zarr.codecs.Crc32cCodec()])
        z[...] = data.view(np.uint16)
    else:
        import tensorstore as ts

        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": path},
                "metadata": {"shape": list(shape), "data_type": "uint16",
                             "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk_rows, COLS]}},
                             "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                        {"name": "zstd", "configuration": {"level": 1}}, {"name": "crc32c"}]}}
        store = ts.open(spec, create=True, delete_existing=True).result()
        store[...] = data.view(np.uint16)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=parse_size, default=GIB, help="array size (default 1GiB)")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--parts", default="limits,sweep,foreign",
                        help="limits, sweep, foreign, foreign-crc, shuffle, blosc, deflate "
                             "(the last four not in the default)")
    parser.add_argument("--chunks", default=",".join(fmt_bytes(c).replace(" ", "") for c in CHUNKS),
                        help="chunk sizes of the sweep (default 16KiB,...,64MiB)")
    args = parser.parse_args(argv)

    import zarr_device as zd

    out_dir = args.out or tempfile.mkdtemp(prefix="zd-bench-layouts-")
    parts = set(args.parts.split(","))
    rows = rows_of(args.size)
    data = weights(rows)
    machine = machine_info()
    cores = machine["usable_cores"] or os.cpu_count() or 1
    print(f"machine:  {machine['cpu']}; {cores} cores; gpus {machine['gpus']}")
    print(f"engine:   {json.dumps(engine_info())}")
    print(f"data:     bf16 [{rows}, {COLS}] ({fmt_bytes(data.nbytes)}), normal(0, 0.02)", flush=True)
    document: dict[str, Any] = {"machine": machine, "rows": rows, "results": []}
    table: list[tuple[str, str, str, float, str]] = []

    def record(layout: str, codec: str, policy: str, gbps: float, note: str = "") -> None:
        table.append((layout, codec, policy, gbps, note))
        document["results"].append({"layout": layout, "codec": codec, "policy": policy, "gbps": gbps, "note": note})
        log(f"  {layout:28} {codec:10} {policy:8} {gbps:7.2f} GB/s {note}")

    def read_gpu(path: str, what: str, policy: str = "checked") -> float:
        array = zd.open_array(path)
        previous = zd.set_config(gpu_decode=policy)
        try:
            seconds, result = best_of(lambda: array.read(device=args.device, like="torch"), args.repeat)
        finally:
            zd.set_config(gpu_decode=previous.gpu_decode)
        check(result, data, what)
        return array.nbytes / seconds / 1e9

    if "sweep" in parts:
        for chunk in [parse_size(c) for c in args.chunks.split(",")]:
            chunk_rows = rows_of(chunk)
            for sharded in (False, True):
                if sharded and chunk >= 64 * MIB:
                    continue
                layout = (f"shards 64MiB of {fmt_bytes(chunk)}" if sharded else f"chunks {fmt_bytes(chunk)}")
                for codec in ("zstd+crc", "none"):
                    if codec == "none" and chunk not in (16 * KIB, MIB, 64 * MIB):
                        continue
                    path = os.path.join(out_dir, f"sweep-{chunk}-{int(sharded)}-{codec}.zarr")
                    shape = (rows, COLS)
                    arr = zd.create(path, shape=shape, dtype="bfloat16", mode="w",
                                          chunks=(chunk_rows, COLS) if not sharded else (chunk_rows, COLS),
                                          shards=(max(chunk_rows, rows_of(64 * MIB)), COLS) if sharded else None,
                                          compressors=ZSTD_CRC if codec != "none" else None)
                    arr[...] = data
                    os.sync()  # writeback would compete with the read measured
                    try:
                        record(layout, codec, "checked", read_gpu(path, layout))
                    except Exception as error:  # a layout that fails is a finding, not the end of the run
                        record(layout, codec, "checked", float("nan"), f"FAILED: {error}")
                    if codec != "none" and not sharded:
                        decode = zd.open_array(path)._core.bench_decode_cuda(
                            [(0, 1, n) for n in shape], int(args.device.split(":")[1]) if ":" in args.device else 0)
                        record(layout, codec, "decode", float(decode.get("decoded_bytes", 0)) / float(decode["seconds"]) / 1e9,
                               "nvCOMP decode alone")

    if "blosc" in parts:
        # Zarr v2 Blosc-LZ4 with byte shuffle, as zarr-python 2 wrote it (float32, normal values):
        # by default ("checked") its streams decode in the decoder process; under "off" c-blosc
        # decodes them on the host's cores; "raw" is the same array stored uncompressed.
        import numcodecs
        import torch
        import zarr

        values = np.random.default_rng(1).standard_normal((rows, COLS // 2), dtype=np.float32)
        for chunk in (MIB, 4 * MIB, 8 * MIB):
            chunk_rows = max(1, chunk // (COLS * 2))
            rates = {}
            for compressor in ("blosc", "raw"):
                path = os.path.join(out_dir, f"blosc-{compressor}-{chunk}.zarr")
                z = zarr.create_array(path, shape=values.shape, chunks=(chunk_rows, COLS // 2), dtype="float32",
                                      zarr_format=2, overwrite=True,
                                      compressors=numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
                                      if compressor == "blosc" else None)
                z[...] = values
                if compressor == "blosc":
                    stored = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
                array = zd.open_array(path)
                for policy in ("checked", "off") if compressor == "blosc" else ("checked",):
                    previous = zd.set_config(gpu_decode=policy)
                    try:
                        seconds, result = best_of(lambda: array.read(device=args.device, like="torch"), args.repeat)
                    finally:
                        zd.set_config(gpu_decode=previous.gpu_decode)
                    if not torch.equal(result.cpu(), torch.from_numpy(values)):
                        raise AssertionError(f"blosc {chunk}: the read returned other values")
                    rates[f"{compressor} {policy}"] = array.nbytes / seconds / 1e9
            layout = f"zarr v2 blosc-lz4 f32 chunks {fmt_bytes(chunk)}"
            record(layout, "blosc-lz4", "checked", rates["blosc checked"],
                   f"stored at {stored / values.nbytes:.3f}; decoder process: {rates['blosc checked'] / rates['blosc off']:.2f}x "
                   f"c-blosc, {rates['blosc checked'] / rates['raw checked']:.2f}x raw")
            record(layout, "blosc-lz4", "off", rates["blosc off"], "c-blosc on the host's cores")
            record(layout, "none", "checked", rates["raw checked"], "the same array uncompressed")

    if "foreign" in parts:
        import zarr

        # Unchecked chunks decode in the decoder process under the default policy ("checked"):
        # its rate against the same data decoded in this process ("trusted").
        for chunk, shard in ((256 * KIB, None), (MIB, None), (4 * MIB, None), (16 * MIB, None),
                             (64 * MIB, None), (MIB, 64 * MIB)):
            path = os.path.join(out_dir, f"zarr-python-{chunk}-{shard}.zarr")
            # zarr-python 3.1 has no bfloat16: the same bytes as uint16
            z = zarr.create_array(path, shape=(rows, COLS), chunks=(rows_of(chunk), COLS), dtype="uint16",
                                  shards=(rows_of(shard), COLS) if shard else None,
                                  overwrite=True, compressors=[zarr.codecs.ZstdCodec(level=1)])
            z[...] = data.view(np.uint16)
            layout = f"zarr-python chunks {fmt_bytes(chunk)}" + (f" in shards of {fmt_bytes(shard)}" if shard else "")
            if not shard:
                single = one_core_zstd(path)
                record(layout, "zstd", "1 core", single, "host decode, one thread")
                record(layout, "zstd", "cores", single * cores, f"{cores} x one core")
            rates = {policy: read_gpu(path, layout, policy) for policy in ("trusted", "checked")}
            record(layout, "zstd", "trusted", rates["trusted"])
            record(layout, "zstd", "checked", rates["checked"],
                   f"decoder process: {rates['checked'] / rates['trusted']:.2f}x trusted")
        try:
            import tensorstore as ts

            path = os.path.join(out_dir, "tensorstore.zarr")
            spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": path},
                    "metadata": {"shape": [rows, COLS], "data_type": "uint16",
                                 "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [rows_of(MIB), COLS]}},
                                 "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                            {"name": "zstd", "configuration": {"level": 1}}]}}
            store = ts.open(spec, create=True, delete_existing=True).result()
            store[...] = data.view(np.uint16)
            rates = {policy: read_gpu(path, "tensorstore", policy) for policy in ("trusted", "checked")}
            record("tensorstore chunks 1MiB", "zstd", "trusted", rates["trusted"])
            record("tensorstore chunks 1MiB", "zstd", "checked", rates["checked"],
                   f"decoder process: {rates['checked'] / rates['trusted']:.2f}x trusted")
        except ImportError:
            log("tensorstore: not installed, skipped")

    if "deflate" in parts:
        # gzip (zarr-python's v3 codec) and zlib (numcodecs', as Zarr v2 arrays hold it) without a
        # crc32c: by default ("checked") decoded in the decoder process, which verifies their
        # CRC-32 or Adler-32 on the GPU, unless decode sharing leaves them to the CPU (few or large
        # chunks); "isolated" the same; "off" on the host's cores (zlib, one chunk a thread);
        # "trusted" decodes in this process without the check.
        import zarr
        import zarr.codecs.numcodecs

        for name in ("gzip", "zlib"):
            for chunk in (MIB, 4 * MIB):
                path = os.path.join(out_dir, f"{name}-{chunk}.zarr")
                compressor: Any = (zarr.codecs.GzipCodec(level=1) if name == "gzip"
                                   else zarr.codecs.numcodecs.Zlib(level=1))
                z = zarr.create_array(path, shape=(rows, COLS), chunks=(rows_of(chunk), COLS), dtype="uint16",
                                      overwrite=True, compressors=[compressor])
                z[...] = data.view(np.uint16)
                stored = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
                layout = f"zarr-python {name} chunks {fmt_bytes(chunk)}"
                rates = {policy: read_gpu(path, layout, policy) for policy in ("trusted", "checked", "off")}
                record(layout, name, "trusted", rates["trusted"], f"stored at {stored / data.nbytes:.3f}")
                record(layout, name, "checked", rates["checked"],
                       f"the default: {rates['checked'] / rates['trusted']:.2f}x trusted, "
                       f"{rates['checked'] / rates['off']:.2f}x the CPU")
                record(layout, name, "off", rates["off"], f"zlib on {cores} cores")

    if "shuffle" in parts:
        # numcodecs' shuffle before zstd, as zarr-python writes it: the bytes of each bf16 split into
        # its high (sign, exponent) and low (mantissa) halves, unshuffled on the GPU after the decode.
        import zarr
        import zarr.codecs.numcodecs

        for chunk in (MIB, 4 * MIB):
            for crc in (False, True):
                path = os.path.join(out_dir, f"shuffle-{chunk}-{crc}.zarr")
                compressors: list[Any] = [zarr.codecs.numcodecs.Shuffle(elementsize=2),
                                          zarr.codecs.ZstdCodec(level=1)]
                if crc:
                    compressors.append(zarr.codecs.Crc32cCodec())
                z = zarr.create_array(path, shape=(rows, COLS), chunks=(rows_of(chunk), COLS), dtype="uint16",
                                      overwrite=True, compressors=compressors)
                z[...] = data.view(np.uint16)
                stored = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
                layout = f"shuffle+zstd{'+crc32c' if crc else ''} chunks {fmt_bytes(chunk)}"
                rates = {policy: read_gpu(path, layout, policy) for policy in ("trusted", "checked")}
                record(layout, "shuffle+zstd", "trusted", rates["trusted"], f"stored at {stored / data.nbytes:.3f}")
                record(layout, "shuffle+zstd", "checked", rates["checked"],
                       f"{rates['checked'] / rates['trusted']:.2f}x trusted")

    if "foreign-crc" in parts:
        for chunk in (MIB, 16 * MIB, 64 * MIB):
            rates: dict[str, float] = {}
            for writer in ("zarr-device", "zarr-python", "tensorstore"):
                path = os.path.join(out_dir, f"crc-{writer}-{chunk}-{rows}.zarr")
                try:
                    if not os.path.isdir(path):
                        write_with_crc32c(writer, path, data, rows_of(chunk))
                        os.sync()
                except ImportError as error:
                    log(f"{writer}: not installed ({error}), skipped")
                    continue
                layout = f"{writer} chunks {fmt_bytes(chunk)}"
                try:
                    rates[writer] = read_gpu(path, layout)
                except Exception as error:  # a writer whose frames fail is a finding, not the end of the run
                    record(layout, "zstd+crc", "checked", float("nan"), f"FAILED: {error}")
                    continue
                own = rates.get("zarr-device")
                record(layout, "zstd+crc", "checked", rates[writer],
                       f"{rates[writer] / own:.2f}x zarr-device's" if own and writer != "zarr-device" else "")

    if "limits" in parts:
        path = os.path.join(out_dir, "limits.zarr")
        if not os.path.exists(path):
            zd.create(path, shape=(rows, COLS), dtype="bfloat16", chunks=(rows_of(64 * MIB), COLS))[...] = data
        limits = concurrent_limits(path, args.device, max(1, cores - 2))
        document["limits"] = limits
        print(f"limits: page cache -> pinned {limits['read_alone']:.2f} GB/s alone, "
              f"{limits['read_while_copying']:.2f} while a pinned -> GPU copy runs at {limits['copy_while_reading']:.2f}")

    print(f"\n{'layout':30} {'codec':10} {'policy':8} {'GB/s':>7}  note")
    for layout, codec, policy, gbps, note in table:
        print(f"{layout:30} {codec:10} {policy:8} {gbps:7.2f}  {note}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(document, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
