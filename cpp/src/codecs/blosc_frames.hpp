// The layout of a Blosc 1 chunk, read on the CPU without decoding it: which compressed streams
// ("splits") it holds, where each lies, what each decodes to and where, and the shuffle that turns
// the decoded blocks back into elements. A device decoder takes the splits as a batch (nvCOMP
// decodes LZ4, zstd and zlib streams) and undoes the shuffle as it places them; the CPU decoder
// here (`decode_blosc_with`) is its reference. Header, block table and split sizes are checked
// against the chunk and the size the array's metadata gives, so a layout never points outside
// either.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "zarr_device/codec.hpp"

namespace zarr_device::codecs {

// Blosc 1's internal compressors, as its header numbers them.
enum class BloscCompressor : std::uint8_t {
  kBloscLz = 0,
  kLz4 = 1,
  kSnappy = 2,
  kZlib = 3,
  kZstd = 4
};
enum class BloscShuffle : std::uint8_t { kNone, kByte, kBit };

// One compressed stream: `input_bytes` at `input_offset` of the chunk, decoding to `output_bytes`
// at `output_offset` of the (still shuffled) decoded chunk. `stored`: the bytes are the decoded
// ones (Blosc keeps a split that did not compress as it is).
struct BloscSplit {
  std::uint64_t input_offset = 0;
  std::uint64_t input_bytes = 0;
  std::uint64_t output_offset = 0;
  std::uint64_t output_bytes = 0;
  bool stored = false;
};

// One block: `bytes` decoded bytes at `offset`, shuffled as a unit.
struct BloscBlock {
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
};

struct BloscLayout {
  BloscCompressor compressor = BloscCompressor::kBloscLz;
  BloscShuffle shuffle = BloscShuffle::kNone;
  std::uint32_t typesize = 1;
  std::uint64_t decoded_bytes = 0;
  // The whole chunk is stored uncompressed after the header (no blocks or splits).
  bool stored = false;
  std::vector<BloscBlock> blocks;
  std::vector<BloscSplit> splits;
};

inline constexpr std::size_t kBloscHeaderBytes = 16;

// The layout of `chunk`, which must decode to `decoded_bytes`. None, with `why`, for anything a
// Blosc 1 decoder would refuse or that this reading does not cover (a version it does not know).
std::optional<BloscLayout> blosc_layout(std::span<const std::byte> chunk,
                                        std::uint64_t decoded_bytes, std::string& why);

// The streams a device decodes of a chunk of `layout` whose compressor is `compressor` (LZ4 or
// zstd, the ones nvCOMP decodes): a stored chunk is one stored stream. False, with `why`, for a
// layout a device does not take (another compressor, bit shuffle, splits that do not tile their
// block, or more streams than one per 512 decoded bytes, which would make the tables that move
// them larger than the data): c-blosc decodes those on the CPU.
bool blosc_device_streams(const BloscLayout& layout, BloscCompressor compressor, DeviceStreams& out,
                          std::string& why);

// Decodes `chunk` through its layout on the CPU: each split by its compressor's library, then the
// shuffle. False, with `why`, where a split does not decode to its size or the layout needs what
// this decoder lacks (blosclz and snappy streams, bit shuffle: c-blosc itself decodes those).
bool decode_blosc_with(const BloscLayout& layout, std::span<const std::byte> chunk,
                       std::span<std::byte> out, std::string& why);

}  // namespace zarr_device::codecs
