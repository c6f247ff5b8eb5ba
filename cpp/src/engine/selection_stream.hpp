// The selected elements of a chunk, in C order, taken from its bytes as they are decoded (or
// read) from first to last: for a selection that cuts a chunk too large to hold whole (a host
// read, engine/array_read.cpp; a device read, staged a part at a time, device_read/leaf_parts.hpp).
// The selection's elements lie in the chunk in the same order as in the selection (steps are
// positive), so one pass over the chunk's bytes hands them out in order, a window of the chunk at a
// time. Pure host logic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "codecs/codec_chain.hpp"
#include "zarr_device/codec.hpp"
#include "zarr_device/store.hpp"

namespace zarr_device::engine {

// A stretch of a chunk's bytes.
struct ByteStretch {
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
};
// The one stretch of the chunk that `selection` covers, where its elements lie side by side (rows
// of a C-order chunk, or part of one row); nothing otherwise.
std::optional<ByteStretch> contiguous_stretch(std::span<const std::int64_t> shape,
                                              std::span<const DimSlice> selection,
                                              std::size_t element_size);

// A chunk's bytes [0, total) around `stretch`, cut into pieces of at most `piece` bytes in stored
// order: the first `before` of them ahead of the stretch, the rest after it. What a read of the
// stretch alone still checks where a checksum covers the whole chunk.
struct AroundStretch {
  std::vector<ByteStretch> pieces;
  std::size_t before = 0;
};
AroundStretch around_stretch(std::uint64_t total, ByteStretch stretch, std::uint64_t piece);

// The CRC-32C of stored bytes [offset, offset + bytes) of `value`, read kDecodePieceBytes at a
// time; nullopt where the value ends before them.
std::optional<std::uint32_t> stored_crc32c(const ValueReader& value, std::uint64_t offset,
                                           std::uint64_t bytes);
// Compares `computed` with the crc32c stored at `at` of `value` (ChecksumError where they
// differ); false where the value ends before it (the caller says what that means).
bool check_stored_crc32c(const ValueReader& value, std::uint64_t at, std::uint32_t computed);

// Where a chunk's bytes come from, first to last.
class ChunkBytes {
 public:
  virtual ~ChunkBytes() = default;
  // The next window.size() bytes into `window`.
  virtual void fill(std::span<std::byte> window) = 0;
  // Moves `bytes` further on (bytes nobody wants): read and dropped where they are checked or
  // decoded, not read at all where nothing depends on them.
  virtual void skip(std::uint64_t bytes, std::span<std::byte> scratch) = 0;
  // After the last byte: the chunk's checks (its decoder's end, its checksum).
  virtual void finish() = 0;
};

// A chunk's decoded bytes from its codecs' stream decoder (CodecChain::stream_decoder).
std::unique_ptr<ChunkBytes> decoded_bytes(std::unique_ptr<StreamDecoder> decoder);
// The elements of a chunk stored as they are, `data` bytes from `offset` of `value`, then a
// crc32c of them when `crc32c` (ChecksumError when it differs).
std::unique_ptr<ChunkBytes> stored_bytes(std::shared_ptr<const ValueReader> value,
                                         std::uint64_t offset, std::uint64_t data, bool crc32c);

class SelectionStream {
 public:
  // The elements of `selection` (of a chunk of `shape`, elements of `element_size` bytes), from
  // `bytes`, a window of `window_bytes` at a time.
  SelectionStream(std::span<const std::int64_t> shape, std::span<const DimSlice> selection,
                  std::size_t element_size, std::unique_ptr<ChunkBytes> bytes,
                  std::size_t window_bytes);
  // The next out.size() bytes of the selected elements.
  void fill(std::span<std::byte> out);
  // After the last selected byte: the rest of the chunk passed over, then its checks.
  void finish();

 private:
  // Moves the window on until it holds the chunk's byte `at` (at least the window's end).
  void reach(std::uint64_t at);
  // The chunk offset of the current run, from the outer indices.
  [[nodiscard]] std::uint64_t run_offset() const;
  void next_run();

  std::unique_ptr<ChunkBytes> bytes_;
  std::uint64_t total_ = 0;        // the chunk's bytes
  std::vector<std::byte> window_;  // the chunk's bytes [window_at_, window_at_ + window_len_)
  std::uint64_t window_at_ = 0;
  std::size_t window_len_ = 0;
  // The selection as runs of contiguous bytes: one per index of the outer dimensions.
  std::vector<std::int64_t> outer_start_, outer_step_, outer_count_;
  std::vector<std::uint64_t> outer_stride_;  // bytes
  std::uint64_t run_base_ = 0;               // the first run's offset beyond the outer dimensions
  std::uint64_t run_bytes_ = 0;
  std::vector<std::int64_t> index_;  // of the current run, in the outer dimensions
  std::uint64_t run_at_ = 0;         // its chunk offset
  std::uint64_t run_done_ = 0;       // of its bytes, handed out
  bool ended_ = false;               // no run is left
};

}  // namespace zarr_device::engine
