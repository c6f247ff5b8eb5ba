#include "codecs/blosc_frames.hpp"

#include <lz4.h>
#include <zlib.h>
#include <zstd.h>

#include <cstring>
#include <limits>

#include "codecs/byte_shuffle.hpp"
#include "codecs/compression_common.hpp"

namespace zarr_device::codecs {

namespace {

constexpr std::uint8_t kByteShuffleFlag = 0x01;
constexpr std::uint8_t kStoredFlag = 0x02;
constexpr std::uint8_t kBitShuffleFlag = 0x04;
constexpr std::uint8_t kNoSplitFlag = 0x10;
// Blosc 1 splits a block into one stream per byte of its elements only for elements of at most
// this many bytes and blocks of at least kMinSplitElements elements (its decoder applies the same
// rule, for chunks written before the no-split flag existed).
constexpr std::uint32_t kMostSplits = 16;
constexpr std::uint64_t kMinSplitElements = 128;
// Blosc 1 buffers are at most 2^31 - 1 bytes (its sizes are int32).
constexpr std::uint64_t kMostBytes = std::numeric_limits<std::int32_t>::max();

}  // namespace

std::optional<BloscLayout> blosc_layout(std::span<const std::byte> chunk,
                                        std::uint64_t decoded_bytes, std::string& why) {
  if (chunk.size() < kBloscHeaderBytes) {
    why = "a Blosc chunk of " + std::to_string(chunk.size()) + " bytes is shorter than its header";
    return std::nullopt;
  }
  const auto version = std::to_integer<std::uint8_t>(chunk[0]);
  const auto flags = std::to_integer<std::uint8_t>(chunk[2]);
  BloscLayout layout;
  layout.typesize = std::to_integer<std::uint32_t>(chunk[3]);
  layout.decoded_bytes = load_le32(chunk.data() + 4);
  const std::uint64_t blocksize = load_le32(chunk.data() + 8);
  const std::uint64_t cbytes = load_le32(chunk.data() + 12);
  if (version < 1 || version > 2) {
    why = "Blosc format version " + std::to_string(version) + " (this reading knows 1 and 2)";
    return std::nullopt;
  }
  if (layout.decoded_bytes != decoded_bytes) {
    why = "the Blosc header says the chunk decodes to " + std::to_string(layout.decoded_bytes) +
          " bytes, not the " + std::to_string(decoded_bytes) + " of the array's chunks";
    return std::nullopt;
  }
  if (cbytes != chunk.size()) {
    why = "the Blosc header says the chunk is " + std::to_string(cbytes) + " bytes, not " +
          std::to_string(chunk.size());
    return std::nullopt;
  }
  if (layout.typesize == 0 || layout.decoded_bytes > kMostBytes) {
    why = "the Blosc header is malformed (typesize 0 or size past 2 GiB)";
    return std::nullopt;
  }
  const auto compressor = static_cast<std::uint8_t>((flags & 0xE0) >> 5);
  if (compressor > static_cast<std::uint8_t>(BloscCompressor::kZstd)) {
    why = "unknown Blosc compressor " + std::to_string(compressor);
    return std::nullopt;
  }
  layout.compressor = static_cast<BloscCompressor>(compressor);
  if ((flags & kBitShuffleFlag) != 0) {
    layout.shuffle = BloscShuffle::kBit;
  } else if ((flags & kByteShuffleFlag) != 0 && layout.typesize > 1) {
    layout.shuffle = BloscShuffle::kByte;
  }
  if ((flags & kStoredFlag) != 0) {
    layout.stored = true;
    layout.shuffle = BloscShuffle::kNone;  // stored chunks are the elements as they are
    if (chunk.size() - kBloscHeaderBytes < layout.decoded_bytes) {
      why = "a stored Blosc chunk is shorter than its size";
      return std::nullopt;
    }
    return layout;
  }
  if (layout.decoded_bytes == 0) return layout;
  if (blocksize == 0 || blocksize > kMostBytes) {
    why = "the Blosc header gives a block size of " + std::to_string(blocksize);
    return std::nullopt;
  }
  const std::uint64_t nblocks = (layout.decoded_bytes + blocksize - 1) / blocksize;
  const std::uint64_t leftover = layout.decoded_bytes % blocksize;
  const std::uint64_t table_end = kBloscHeaderBytes + 4 * nblocks;
  if (table_end > chunk.size()) {
    why = "a Blosc chunk of " + std::to_string(chunk.size()) + " bytes cannot hold its table of " +
          std::to_string(nblocks) + " blocks";
    return std::nullopt;
  }
  const bool may_split = (flags & kNoSplitFlag) == 0 && layout.typesize <= kMostSplits &&
                         blocksize / layout.typesize >= kMinSplitElements;
  layout.blocks.reserve(nblocks);
  for (std::uint64_t b = 0; b < nblocks; ++b) {
    const bool last_partial = b + 1 == nblocks && leftover > 0;
    const std::uint64_t bytes = last_partial ? leftover : blocksize;
    layout.blocks.push_back({b * blocksize, bytes});
    const std::uint64_t splits = may_split && !last_partial ? layout.typesize : 1;
    const std::uint64_t split_bytes = bytes / splits;
    std::uint64_t at = load_le32(chunk.data() + kBloscHeaderBytes + 4 * b);
    if (at < table_end) {
      why = "Blosc block " + std::to_string(b) + " starts inside the header or block table";
      return std::nullopt;
    }
    for (std::uint64_t s = 0; s < splits; ++s) {
      if (at > chunk.size() || chunk.size() - at < 4) {
        why = "Blosc block " + std::to_string(b) + " runs past the end of the chunk";
        return std::nullopt;
      }
      const std::uint64_t stream = load_le32(chunk.data() + at);
      at += 4;
      if (stream > chunk.size() - at) {
        why = "a stream of Blosc block " + std::to_string(b) + " claims " + std::to_string(stream) +
              " bytes, past the end of the chunk";
        return std::nullopt;
      }
      layout.splits.push_back(
          {at, stream, b * blocksize + s * split_bytes, split_bytes, stream == split_bytes});
      at += stream;
    }
  }
  return layout;
}

bool blosc_device_streams(const BloscLayout& layout, BloscCompressor compressor, DeviceStreams& out,
                          std::string& why) {
  out = DeviceStreams{};
  if (layout.decoded_bytes == 0) {
    why = "an empty Blosc chunk";
    return false;
  }
  if (layout.stored) {
    out.streams.push_back({kBloscHeaderBytes, layout.decoded_bytes, layout.decoded_bytes, true});
    out.blocks.push_back({0, layout.decoded_bytes, 0, 1});
    return true;
  }
  if (layout.compressor != compressor || layout.shuffle == BloscShuffle::kBit) {
    why = "a Blosc chunk of another compressor than the array's, or bit-shuffled";
    return false;
  }
  constexpr std::uint64_t kLeastStreamBytes = 512;
  if (layout.splits.size() > 1 + layout.decoded_bytes / kLeastStreamBytes) {
    why = "a Blosc chunk of " + std::to_string(layout.splits.size()) + " streams for " +
          std::to_string(layout.decoded_bytes) + " bytes";
    return false;
  }
  out.unshuffle = layout.shuffle == BloscShuffle::kByte ? layout.typesize : 1;
  out.streams.reserve(layout.splits.size());
  out.blocks.reserve(layout.blocks.size());
  std::size_t split = 0;
  for (const BloscBlock& b : layout.blocks) {
    DeviceStreams::Block block{b.offset, b.bytes, static_cast<std::uint32_t>(split), 0};
    std::uint64_t at = b.offset;
    for (; split < layout.splits.size() && layout.splits[split].output_offset < b.offset + b.bytes;
         ++split) {
      const BloscSplit& s = layout.splits[split];
      if (s.output_offset != at || s.output_bytes == 0) break;
      out.streams.push_back({s.input_offset, s.input_bytes, s.output_bytes, s.stored});
      at += s.output_bytes;
      ++block.streams;
    }
    // Equal parts that end where the block does (a block of Blosc's splits whose size is not a
    // multiple of its element size leaves bytes no stream decodes).
    if (at != b.offset + b.bytes || block.streams == 0 || b.bytes % block.streams != 0) {
      why = "a Blosc block whose streams do not cover it";
      out = DeviceStreams{};
      return false;
    }
    out.blocks.push_back(block);
  }
  if (split != layout.splits.size()) {
    why = "a Blosc chunk with streams past its blocks";
    out = DeviceStreams{};
    return false;
  }
  return true;
}

bool decode_blosc_with(const BloscLayout& layout, std::span<const std::byte> chunk,
                       std::span<std::byte> out, std::string& why) {
  if (out.size() != layout.decoded_bytes) {
    why = "output of the wrong size";
    return false;
  }
  if (layout.stored) {
    std::memcpy(out.data(), chunk.data() + kBloscHeaderBytes, out.size());
    return true;
  }
  if (layout.shuffle == BloscShuffle::kBit || layout.compressor == BloscCompressor::kBloscLz ||
      layout.compressor == BloscCompressor::kSnappy) {
    why = "blosclz, snappy and bit shuffle are left to c-blosc";
    return false;
  }
  std::vector<std::byte> shuffled(layout.shuffle == BloscShuffle::kByte ? out.size() : 0);
  std::byte* const decoded = shuffled.empty() ? out.data() : shuffled.data();
  for (const BloscSplit& s : layout.splits) {
    const std::byte* in = chunk.data() + s.input_offset;
    std::byte* to = decoded + s.output_offset;
    if (s.stored) {
      std::memcpy(to, in, s.output_bytes);
      continue;
    }
    std::uint64_t made = 0;
    switch (layout.compressor) {
      case BloscCompressor::kLz4: {
        const int n =
            LZ4_decompress_safe(reinterpret_cast<const char*>(in), reinterpret_cast<char*>(to),
                                static_cast<int>(s.input_bytes), static_cast<int>(s.output_bytes));
        made = n < 0 ? UINT64_MAX : static_cast<std::uint64_t>(n);
        break;
      }
      case BloscCompressor::kZstd: {
        const std::size_t n = ZSTD_decompress(to, s.output_bytes, in, s.input_bytes);
        made = ZSTD_isError(n) ? UINT64_MAX : n;
        break;
      }
      case BloscCompressor::kZlib: {
        uLongf n = static_cast<uLongf>(s.output_bytes);
        made = uncompress(reinterpret_cast<Bytef*>(to), &n, reinterpret_cast<const Bytef*>(in),
                          static_cast<uLong>(s.input_bytes)) == Z_OK
                   ? n
                   : UINT64_MAX;
        break;
      }
      default:
        break;
    }
    if (made != s.output_bytes) {
      why = "a Blosc stream at byte " + std::to_string(s.input_offset) +
            " does not decode to its " + std::to_string(s.output_bytes) + " bytes";
      return false;
    }
  }
  if (layout.shuffle == BloscShuffle::kByte) {
    for (const BloscBlock& b : layout.blocks) {
      byte_unshuffle(decoded + b.offset, out.data() + b.offset, b.bytes, layout.typesize);
    }
  }
  return true;
}

}  // namespace zarr_device::codecs
