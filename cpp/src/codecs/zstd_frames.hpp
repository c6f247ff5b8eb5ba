// zstd frames decoded by streaming, shared by the zstd codec's whole decode (zstd_codec.cpp) and
// its stream decoder (zstd_frames.cpp).
#pragma once

// For ZSTD_d_stableOutBuffer (a parameter value; no static-only symbol is linked).
#ifndef ZSTD_STATIC_LINKING_ONLY
#define ZSTD_STATIC_LINKING_ONLY
#endif
#include <zstd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "zarr_device/codec.hpp"

namespace zarr_device::codecs {

// Raises libzstd's error `code` as the codec's typed error (ChecksumError for a frame's content
// checksum, CodecError otherwise).
[[noreturn]] void throw_zstd_error(std::string_view codec, std::size_t code);

struct DCtxDeleter {
  void operator()(ZSTD_DCtx* dctx) const { ZSTD_freeDCtx(dctx); }
};

// The calling thread's decompression context, reset.
ZSTD_DCtx* thread_dctx(std::string_view codec);

// The most `encoded_size` bytes of zstd can decode to.
std::size_t max_decoded_size(std::size_t encoded_size);

// Every frame of `in` streamed into `out`: the bytes written, or nullopt when `out` is too small
// for them. CodecError for frames that are damaged, truncated, or hold other than they declare.
std::optional<std::size_t> stream_frames_into(std::span<const std::byte> in,
                                              std::span<std::byte> out, std::string_view codec);

// A chunk's frames of `encoded` bytes, pulled from `source`, decoded into its `decoded` bytes
// (StreamDecoding::stream_decoder).
std::unique_ptr<StreamDecoder> make_zstd_stream(std::string_view codec, std::size_t decoded,
                                                std::uint64_t encoded,
                                                StreamDecoder::Source source);

}  // namespace zarr_device::codecs
