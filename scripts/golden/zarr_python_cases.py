"""The golden cases zarr-python writes (Zarr v3 and v2), and how it writes an array or a group."""

from __future__ import annotations

import warnings
from typing import Any, Literal

import numpy as np
import zarr
from zarr.codecs import (
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    TransposeCodec,
    ZstdCodec,
)

from .fixtures import Case, Golden
from .values import CORE_DTYPES, EXTENSION_DTYPES, bits_equal, make_values, model, written_region


def zarr_array(
    golden: Golden,
    case: str,
    dtype: str,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    *,
    zarr_format: Literal[2, 3] = 3,
    description: str = "",
    region: tuple[slice, ...] | None | Literal["auto"] = "auto",
    values: np.ndarray | None = None,
    store_name: str | None = None,
    node: str = "",
    group: zarr.Group | None = None,
    **kwargs: Any,
) -> Case:
    writer = "zarr-python"
    store_rel = store_name or case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if group is None:
            store = golden.store_dir(writer, case)
            arr = zarr.create_array(
                str(store), shape=shape, dtype=dtype, chunks=chunks, zarr_format=zarr_format, **kwargs
            )
        else:
            store = golden.out / writer / store_rel
            arr = group.create_array(node.rsplit("/", 1)[-1], shape=shape, dtype=dtype, chunks=chunks, **kwargs)
        fill = arr.fill_value
        if values is None:
            values = make_values(np.dtype(dtype).newbyteorder("=").name if dtype not in EXTENSION_DTYPES else dtype, shape, f"{writer}/{case}/{node}")
            values = values.astype(arr.dtype)
        grid = tuple(arr.shards) if arr.shards is not None else chunks
        written: tuple[slice, ...] | None
        if region == "auto":
            written = written_region(shape, grid) if shape else None
        else:
            written = region
        if written is None:
            arr[...] = values
        else:
            arr[written] = values[written]
        readback = arr[...]
    want = model(values, fill if fill is not None else 0, written)
    if not bits_equal(np.asarray(readback), want):
        raise AssertionError(f"{case}: zarr-python did not read back what it wrote")
    return golden.record(writer, case, store_rel, node, zarr_format, want, description)


def zarr_group(golden: Golden, case: str, description: str) -> None:
    writer = "zarr-python"
    store = golden.store_dir(writer, case)
    root = zarr.create_group(str(store), attributes={"title": "root group", "version": 3, "tags": ["a", "b"]})
    sub = root.create_group("sub", attributes={"level": 1, "nested": {"x": 1.5, "y": None}})
    sub.create_group("deeper", attributes={"level": 2})
    zarr_array(
        golden, case, "int16", (7, 5), (3, 2), store_name=case, node="a", group=root,
        attributes={"units": "m", "scale": 0.5}, description="array member of a group",
    )
    zarr_array(
        golden, case, "float32", (13,), (4,), store_name=case, node="sub/b", group=sub,
        attributes={"long_name": "nested array"}, fill_value=-1.0, description="array in a nested group",
    )
    def members(g: zarr.Group) -> dict[str, str]:
        return {
            k: ("group" if isinstance(v, zarr.Group) else "array") for k, v in sorted(g.members())
        }

    for node, g in [("", root), ("sub", sub), ("sub/deeper", sub["deeper"])]:
        assert isinstance(g, zarr.Group)
        golden.cases.append(
            Case(
                name=f"{writer}/{case}" + (f":{node}" if node else ""),
                writer=writer,
                zarr_format=3,
                kind="group",
                store=f"{writer}/{case}",
                path=node,
                attributes=dict(g.attrs),
                members=members(g),
                description=description,
            )
        )


def make_zarr_python_v3(g: Golden) -> None:
    # Every core data type with the default codecs (bytes + zstd).
    for dt in CORE_DTYPES:
        zarr_array(g, f"v3_dtype_{dt}", dt, (7, 5), (3, 2), description=f"{dt}, default codecs")

    # Byte order.
    for dt in ["int32", "float64", "complex64", "uint16"]:
        for endian in ["little", "big"]:
            zarr_array(
                g, f"v3_bytes_{endian}_{dt}", dt, (13,), (4,),
                serializer=BytesCodec(endian=endian), compressors=None,
                description=f"bytes codec, {endian} endian, no compression",
            )
    zarr_array(
        g, "v3_bytes_big_zstd_float32_2d", "float32", (7, 5), (3, 2),
        serializer=BytesCodec(endian="big"), compressors=[ZstdCodec(level=3)],
        description="big endian bytes + zstd",
    )

    # Transpose.
    zarr_array(
        g, "v3_transpose_3d_int32", "int32", (4, 6, 5), (3, 4, 2),
        filters=[TransposeCodec(order=(2, 0, 1))], compressors=None,
        description="transpose [2,0,1] + bytes",
    )
    zarr_array(
        g, "v3_transpose_2d_float64_zstd", "float64", (7, 5), (3, 2),
        filters=[TransposeCodec(order=(1, 0))], compressors=[ZstdCodec(level=5)],
        description="transpose [1,0] + bytes + zstd",
    )
    zarr_array(
        g, "v3_transpose_3d_uint16_big", "uint16", (4, 6, 5), (3, 4, 2),
        filters=[TransposeCodec(order=(1, 2, 0))], serializer=BytesCodec(endian="big"), compressors=None,
        description="transpose [1,2,0] + big endian bytes",
    )

    # zstd levels and checksum.
    for level in [-3, 1, 9, 22]:
        zarr_array(
            g, f"v3_zstd_level{level}_float32", "float32", (7, 5), (3, 2),
            compressors=[ZstdCodec(level=level)], description=f"zstd level {level}",
        )
    zarr_array(
        g, "v3_zstd_checksum_int64", "int64", (13,), (4,),
        compressors=[ZstdCodec(level=3, checksum=True)], description="zstd with content checksum",
    )

    # gzip.
    for level in [1, 6, 9]:
        zarr_array(
            g, f"v3_gzip_level{level}_int32", "int32", (7, 5), (3, 2),
            compressors=[GzipCodec(level=level)], description=f"gzip level {level}",
        )

    # blosc: every cname x every shuffle.
    cnames: list[Literal["lz4", "lz4hc", "blosclz", "zstd", "zlib"]] = ["lz4", "lz4hc", "blosclz", "zstd", "zlib"]
    shuffles: list[Literal["noshuffle", "shuffle", "bitshuffle"]] = ["noshuffle", "shuffle", "bitshuffle"]
    for cname in cnames:
        for shuffle in shuffles:
            zarr_array(
                g, f"v3_blosc_{cname}_{shuffle}_float32", "float32", (7, 5), (3, 2),
                compressors=[BloscCodec(cname=cname, clevel=5, shuffle=shuffle, typesize=4)],
                description=f"blosc {cname} {shuffle}",
            )
    zarr_array(
        g, "v3_blosc_zstd_bitshuffle_int16_3d", "int16", (4, 6, 5), (3, 4, 2),
        compressors=[BloscCodec(cname="zstd", clevel=9, shuffle="bitshuffle", typesize=2)],
        description="blosc zstd bitshuffle on int16",
    )
    zarr_array(
        g, "v3_blosc_lz4_shuffle_bool", "bool", (13,), (4,),
        compressors=[BloscCodec(cname="lz4", clevel=1, shuffle="shuffle", typesize=1)],
        description="blosc lz4 shuffle on bool",
    )

    # crc32c.
    zarr_array(
        g, "v3_crc32c_int32", "int32", (13,), (4,), compressors=[Crc32cCodec()], description="bytes + crc32c",
    )
    zarr_array(
        g, "v3_zstd_crc32c_float64", "float64", (7, 5), (3, 2),
        compressors=[ZstdCodec(level=3), Crc32cCodec()], description="bytes + zstd + crc32c",
    )

    # Sharding.
    def shard(inner: tuple[int, ...], codecs: list[Any], location: str, index_codecs: list[Any] | None = None) -> ShardingCodec:
        kwargs: dict[str, Any] = {"chunk_shape": inner, "codecs": codecs, "index_location": location}
        if index_codecs is not None:
            kwargs["index_codecs"] = index_codecs
        return ShardingCodec(**kwargs)

    for location in ["start", "end"]:
        zarr_array(
            g, f"v3_shard_{location}_float32", "float32", (10, 9), (4, 6),
            serializer=shard((2, 3), [BytesCodec()], location), compressors=None,
            description=f"sharding, index at {location}, inner bytes, default index codecs",
        )
        zarr_array(
            g, f"v3_shard_{location}_zstd_crc32c_int16", "int16", (10, 9), (4, 6),
            serializer=shard((2, 3), [BytesCodec(), ZstdCodec(level=3), Crc32cCodec()], location),
            compressors=None,
            description=f"sharding, index at {location}, inner bytes+zstd+crc32c",
        )
    zarr_array(
        g, "v3_shard_3d_transpose_gzip_uint32", "uint32", (4, 6, 5), (4, 4, 4),
        serializer=shard((2, 2, 2), [TransposeCodec(order=(2, 1, 0)), BytesCodec(endian="big"), GzipCodec(level=5)], "end"),
        compressors=None,
        description="sharding 3-d, inner transpose + big endian bytes + gzip",
    )
    zarr_array(
        g, "v3_shard_index_bytes_only_float64", "float64", (13,), (8,),
        serializer=shard((2,), [BytesCodec(), ZstdCodec()], "end", index_codecs=[BytesCodec()]),
        compressors=None,
        description="sharding with index codecs [bytes] (no crc32c)",
    )
    zarr_array(
        g, "v3_shard_outer_zstd_int8", "int8", (10, 9), (4, 6),
        serializer=shard((2, 3), [BytesCodec()], "end"), compressors=[ZstdCodec(level=1)],
        description="sharding followed by an outer zstd on the whole shard",
    )
    zarr_array(
        g, "v3_shard_blosc_inner_float32", "float32", (10, 9), (4, 6),
        serializer=shard((2, 3), [BytesCodec(), BloscCodec(cname="lz4", shuffle="shuffle", typesize=4)], "start"),
        compressors=None,
        description="sharding with inner blosc",
    )

    # Chunk key encodings.
    for label, cke in [
        ("default_slash", {"name": "default", "separator": "/"}),
        ("default_dot", {"name": "default", "separator": "."}),
        ("v2_dot", {"name": "v2", "separator": "."}),
        ("v2_slash", {"name": "v2", "separator": "/"}),
    ]:
        zarr_array(
            g, f"v3_cke_{label}_int32", "int32", (4, 6, 5), (3, 4, 2),
            chunk_key_encoding=cke, description=f"chunk key encoding {cke}",
        )

    # Fill values.
    zarr_array(g, "v3_fill_nan_float32", "float32", (7, 5), (3, 2), fill_value=np.nan, description="fill NaN")
    zarr_array(g, "v3_fill_nan_float16", "float16", (13,), (4,), fill_value=np.nan, description="fill NaN on float16")
    zarr_array(g, "v3_fill_inf_float64", "float64", (7, 5), (3, 2), fill_value=np.inf, description="fill Infinity")
    zarr_array(g, "v3_fill_neginf_float32", "float32", (13,), (4,), fill_value=-np.inf, description="fill -Infinity")
    zarr_array(g, "v3_fill_negzero_float64", "float64", (13,), (4,), fill_value=-0.0, description="fill -0.0")
    zarr_array(g, "v3_fill_42_int32", "int32", (7, 5), (3, 2), fill_value=42, description="fill 42")
    zarr_array(g, "v3_fill_minus7_int8", "int8", (13,), (4,), fill_value=-7, description="fill -7")
    zarr_array(g, "v3_fill_max_uint64", "uint64", (13,), (4,), fill_value=np.iinfo(np.uint64).max, description="fill 2**64-1")
    zarr_array(g, "v3_fill_true_bool", "bool", (13,), (4,), fill_value=True, description="fill true")
    zarr_array(g, "v3_fill_complex128", "complex128", (13,), (4,), fill_value=complex(1.5, -2.0), description="fill [1.5, -2.0]")
    zarr_array(g, "v3_fill_complex64_nan", "complex64", (13,), (4,), fill_value=complex(np.nan, np.inf), description="fill [NaN, Infinity]")

    # Attributes and dimension names.
    zarr_array(
        g, "v3_attributes_float64", "float64", (7, 5), (3, 2),
        attributes={"units": "K", "scale_factor": 0.25, "valid_range": [0, 100], "nested": {"a": [1, {"b": None}], "c": True}, "unicode": "\u00e9t\u00e9"},
        dimension_names=["y", "x"],
        description="attributes and dimension names",
    )

    # A group with a nested group and arrays.
    zarr_group(g, "v3_group", "group with attributes, nested groups and arrays")

    # 0-d arrays.
    zarr_array(g, "v3_0d_float64", "float64", (), (), values=np.array(3.25), description="0-d array, written")
    zarr_array(g, "v3_0d_int32_unwritten", "int32", (), (), fill_value=-5, region=(), values=np.array(-5, dtype=np.int32), description="0-d array, never written (fill)")

    # Chunk larger than the array, and an array with a size-0 dimension.
    zarr_array(g, "v3_chunk_larger_than_array_int16", "int16", (7, 5), (16, 16), region=None, description="one chunk larger than the array")
    zarr_array(g, "v3_empty_dim_float32", "float32", (0, 5), (3, 2), region=None, description="size-0 dimension")


def make_zarr_python_v2(g: Golden) -> None:
    import numcodecs as nc

    for order in ["C", "F"]:
        zarr_array(
            g, f"v2_order_{order}_float64", "float64", (7, 5), (3, 2), zarr_format=2, order=order,
            compressors=nc.Zlib(level=1), description=f"v2 order {order}",
        )
        zarr_array(
            g, f"v2_order_{order}_int16_3d", "int16", (4, 6, 5), (3, 4, 2), zarr_format=2, order=order,
            compressors=None, description=f"v2 order {order}, 3-d, no compressor",
        )
    compressors: list[tuple[str, Any]] = [
        ("zlib", nc.Zlib(level=5)),
        ("gzip", nc.GZip(level=6)),
        ("zstd", nc.Zstd(level=3)),
        ("zstd_checksum", nc.Zstd(level=1, checksum=True)),
        ("blosc_lz4_shuffle", nc.Blosc(cname="lz4", clevel=5, shuffle=nc.Blosc.SHUFFLE)),
        ("blosc_zstd_bitshuffle", nc.Blosc(cname="zstd", clevel=3, shuffle=nc.Blosc.BITSHUFFLE)),
        ("blosc_blosclz_noshuffle", nc.Blosc(cname="blosclz", clevel=9, shuffle=nc.Blosc.NOSHUFFLE)),
        ("blosc_lz4hc_shuffle", nc.Blosc(cname="lz4hc", clevel=5, shuffle=nc.Blosc.SHUFFLE)),
        ("blosc_zlib_bitshuffle", nc.Blosc(cname="zlib", clevel=5, shuffle=nc.Blosc.BITSHUFFLE)),
        ("lz4", nc.LZ4(acceleration=1)),
        ("none", None),
    ]
    for label, comp in compressors:
        zarr_array(
            g, f"v2_{label}_int32", "int32", (7, 5), (3, 2), zarr_format=2, compressors=comp,
            description=f"v2 compressor {label}",
        )
    zarr_array(
        g, "v2_blosc_lz4_shuffle_float64_F", "float64", (4, 6, 5), (3, 4, 2), zarr_format=2, order="F",
        compressors=nc.Blosc(cname="lz4", clevel=5, shuffle=nc.Blosc.SHUFFLE), description="v2 blosc + order F",
    )
    for sep, label in [(".", "dot"), ("/", "slash")]:
        zarr_array(
            g, f"v2_separator_{label}_uint8", "uint8", (4, 6, 5), (3, 4, 2), zarr_format=2,
            chunk_key_encoding={"name": "v2", "separator": sep}, compressors=nc.Zstd(level=1),
            description=f"v2 dimension_separator {sep!r}",
        )
    zarr_array(g, "v2_fill_nan_float32", "float32", (7, 5), (3, 2), zarr_format=2, fill_value=np.nan, description="v2 fill NaN")
    zarr_array(g, "v2_fill_null_int32", "int32", (7, 5), (3, 2), zarr_format=2, fill_value=None, description="v2 fill null (missing chunks read as 0)")
    zarr_array(g, "v2_fill_null_float64", "float64", (13,), (4,), zarr_format=2, fill_value=None, description="v2 fill null on float64")
    zarr_array(g, "v2_fill_7_uint16", "uint16", (13,), (4,), zarr_format=2, fill_value=7, description="v2 fill 7")
    for dt in [">i4", ">f8", ">u2", ">c8"]:
        zarr_array(
            g, f"v2_bigendian_{np.dtype(dt).name}", dt, (7, 5), (3, 2), zarr_format=2,
            compressors=nc.Zlib(level=1), description=f"v2 big endian {dt}",
        )
    for dt in ["bool", "int8", "uint64", "float16", "complex128"]:
        zarr_array(
            g, f"v2_dtype_{dt}", dt, (7, 5), (3, 2), zarr_format=2, compressors=nc.Zstd(level=1),
            description=f"v2 {dt}",
        )
    zarr_array(
        g, "v2_attributes_int32", "int32", (13,), (4,), zarr_format=2, attributes={"a": 1, "b": [1, 2], "c": {"d": "e"}},
        description="v2 with .zattrs",
    )
    zarr_array(g, "v2_0d_float32", "float32", (), (), zarr_format=2, values=np.array(-2.5, dtype=np.float32), description="v2 0-d")
