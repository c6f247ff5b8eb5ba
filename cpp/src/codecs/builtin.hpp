// Registration of the built-in codecs into the registry (called once, from
// CodecRegistry::instance()). Explicit calls rather than static registrars, because a static
// library's unreferenced registrars are dropped by the linker.
#pragma once

#include "zarr_device/codec.hpp"

namespace zarr_device::codecs {

// bytes, transpose, sharding_indexed (array_codecs.cpp, sharding.cpp)
void register_array_codecs(CodecRegistry& registry);
// zstd, gzip, blosc, crc32c and numcodecs.{zlib,gzip,zstd,blosc,lz4} (compression codecs)
void register_compression_codecs(CodecRegistry& registry);

}  // namespace zarr_device::codecs
