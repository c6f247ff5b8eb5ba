#include "engine/selection_stream.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <utility>

#include "codecs/crc32c.hpp"
#include "engine/piece_decode.hpp"
#include "place/strided_copy.hpp"
#include "zarr_device/errors.hpp"

namespace zarr_device::engine {

namespace {

class DecodedBytes final : public ChunkBytes {
 public:
  explicit DecodedBytes(std::unique_ptr<StreamDecoder> decoder) : decoder_(std::move(decoder)) {}
  void fill(std::span<std::byte> window) override { decoder_->fill(window); }
  void skip(std::uint64_t bytes, std::span<std::byte> scratch) override {
    // Decoded to be dropped: the bytes after them depend on them.
    while (bytes > 0) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(bytes, scratch.size()));
      decoder_->fill(scratch.first(n));
      bytes -= n;
    }
  }
  void finish() override { decoder_->finish(); }

 private:
  std::unique_ptr<StreamDecoder> decoder_;
};

class StoredBytes final : public ChunkBytes {
 public:
  StoredBytes(std::shared_ptr<const ValueReader> value, std::uint64_t offset, std::uint64_t data,
              bool crc32c)
      : value_(std::move(value)), offset_(offset), data_(data), crc32c_(crc32c) {}
  void fill(std::span<std::byte> window) override {
    if (at_ + window.size() > data_ || value_->read_into(offset_ + at_, window) != window.size()) {
      throw CodecError("chunk is shorter than its shard index says");
    }
    if (crc32c_) crc_ = codecs::crc32c(window, crc_);
    at_ += window.size();
  }
  void skip(std::uint64_t bytes, std::span<std::byte> scratch) override {
    if (!crc32c_) {  // nothing checks them: not read
      at_ += bytes;
      return;
    }
    while (bytes > 0) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(bytes, scratch.size()));
      fill(scratch.first(n));
      bytes -= n;
    }
  }
  void finish() override {
    if (crc32c_ && !check_stored_crc32c(*value_, offset_ + data_, crc_)) {
      throw CodecError("chunk is shorter than its shard index says");
    }
  }

 private:
  std::shared_ptr<const ValueReader> value_;
  std::uint64_t offset_;
  std::uint64_t data_;
  bool crc32c_;
  std::uint64_t at_ = 0;
  std::uint32_t crc_ = 0;  // of the bytes [0, at_)
};

}  // namespace

std::optional<ByteStretch> contiguous_stretch(std::span<const std::int64_t> shape,
                                              std::span<const DimSlice> selection,
                                              std::size_t element_size) {
  const auto strides = place::c_strides(shape, element_size);
  std::size_t k = shape.size();  // the dimensions from k on are whole
  while (k > 0 && selection[k - 1].start == 0 && selection[k - 1].step == 1 &&
         selection[k - 1].count == shape[k - 1]) {
    --k;
  }
  ByteStretch stretch;
  if (k == 0) {
    stretch.bytes = element_size;
    for (const auto n : shape) stretch.bytes *= static_cast<std::uint64_t>(n);
    return stretch;
  }
  const auto& cut = selection[k - 1];
  if (cut.step != 1 && cut.count != 1) return std::nullopt;
  for (std::size_t d = 0; d + 1 < k; ++d) {
    if (selection[d].count != 1) return std::nullopt;
    stretch.offset += static_cast<std::uint64_t>(selection[d].start * strides[d]);
  }
  stretch.offset += static_cast<std::uint64_t>(cut.start * strides[k - 1]);
  stretch.bytes = static_cast<std::uint64_t>(cut.count * strides[k - 1]);
  return stretch;
}

AroundStretch around_stretch(std::uint64_t total, ByteStretch stretch, std::uint64_t piece) {
  piece = std::max<std::uint64_t>(piece, 1);
  AroundStretch around;
  auto cut = [&](std::uint64_t from, std::uint64_t to) {
    for (std::uint64_t at = from; at < to; at += piece) {
      around.pieces.push_back(ByteStretch{at, std::min(piece, to - at)});
    }
  };
  cut(0, stretch.offset);
  around.before = around.pieces.size();
  cut(stretch.offset + stretch.bytes, total);
  return around;
}

std::optional<std::uint32_t> stored_crc32c(const ValueReader& value, std::uint64_t offset,
                                           std::uint64_t bytes) {
  const auto piece = static_cast<std::size_t>(
      std::min<std::uint64_t>(kDecodePieceBytes, std::max<std::uint64_t>(bytes, 1)));
  const auto scratch = std::make_unique_for_overwrite<std::byte[]>(piece);
  std::uint32_t crc = 0;
  for (std::uint64_t at = 0; at < bytes;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(piece, bytes - at));
    if (value.read_into(offset + at, {scratch.get(), n}) != n) return std::nullopt;
    crc = codecs::crc32c({scratch.get(), n}, crc);
    at += n;
  }
  return crc;
}

bool check_stored_crc32c(const ValueReader& value, std::uint64_t at, std::uint32_t computed) {
  std::byte stored[4];
  if (value.read_into(at, stored) != 4) return false;
  std::uint32_t want = 0;
  std::memcpy(&want, stored, 4);
  codecs::check_crc32c(want, computed);
  return true;
}

std::unique_ptr<ChunkBytes> decoded_bytes(std::unique_ptr<StreamDecoder> decoder) {
  return std::make_unique<DecodedBytes>(std::move(decoder));
}

std::unique_ptr<ChunkBytes> stored_bytes(std::shared_ptr<const ValueReader> value,
                                         std::uint64_t offset, std::uint64_t data, bool crc32c) {
  return std::make_unique<StoredBytes>(std::move(value), offset, data, crc32c);
}

SelectionStream::SelectionStream(std::span<const std::int64_t> shape,
                                 std::span<const DimSlice> selection, std::size_t element_size,
                                 std::unique_ptr<ChunkBytes> bytes, std::size_t window_bytes)
    : bytes_(std::move(bytes)), window_(std::max<std::size_t>(window_bytes, 1)) {
  const auto strides = place::c_strides(shape, element_size);
  const std::size_t n = shape.size();
  total_ = element_size;
  for (const auto d : shape) total_ *= static_cast<std::uint64_t>(d);
  // The dimensions after `k` are whole: a run is dimension k's stretch (step 1) or one of its
  // indices (any other step) with all of them.
  std::size_t k = n;
  while (k > 0) {
    const auto& s = selection[k - 1];
    if (s.start != 0 || s.step != 1 || s.count != shape[k - 1]) break;
    --k;
  }
  if (k == 0) {  // the whole chunk: one run
    run_bytes_ = total_;
  } else {
    const auto& s = selection[k - 1];
    const auto inner = static_cast<std::uint64_t>(strides[k - 1]);
    const std::size_t outer = s.step == 1 ? k - 1 : k;
    for (std::size_t d = 0; d < outer; ++d) {
      outer_start_.push_back(selection[d].start);
      outer_step_.push_back(selection[d].step);
      outer_count_.push_back(selection[d].count);
      outer_stride_.push_back(static_cast<std::uint64_t>(strides[d]));
    }
    if (s.step == 1) {
      run_base_ = static_cast<std::uint64_t>(s.start) * inner;
      run_bytes_ = static_cast<std::uint64_t>(s.count) * inner;
    } else {
      run_bytes_ = inner;
    }
  }
  for (const auto c : outer_count_) ended_ = ended_ || c <= 0;
  ended_ = ended_ || run_bytes_ == 0;
  index_.assign(outer_count_.size(), 0);
  run_at_ = run_offset();
}

std::uint64_t SelectionStream::run_offset() const {
  std::uint64_t at = run_base_;
  for (std::size_t d = 0; d < index_.size(); ++d) {
    at +=
        static_cast<std::uint64_t>(outer_start_[d] + index_[d] * outer_step_[d]) * outer_stride_[d];
  }
  return at;
}

void SelectionStream::next_run() {
  run_done_ = 0;
  for (std::size_t d = index_.size(); d-- > 0;) {
    if (++index_[d] < outer_count_[d]) {
      run_at_ = run_offset();
      return;
    }
    index_[d] = 0;
  }
  ended_ = true;
}

void SelectionStream::reach(std::uint64_t at) {
  while (window_at_ + window_len_ <= at && window_at_ + window_len_ < total_) {
    const std::uint64_t next = window_at_ + window_len_;
    // Whole windows before `at` are passed over without being kept.
    const std::uint64_t gap = (at - next) / window_.size() * window_.size();
    if (gap > 0) bytes_->skip(gap, window_);
    window_at_ = next + gap;
    window_len_ =
        static_cast<std::size_t>(std::min<std::uint64_t>(window_.size(), total_ - window_at_));
    bytes_->fill({window_.data(), window_len_});
  }
}

void SelectionStream::fill(std::span<std::byte> out) {
  while (!out.empty()) {
    if (ended_) throw std::logic_error("a chunk's selection was asked for more than it holds");
    const std::uint64_t at = run_at_ + run_done_;
    reach(at);
    if (at < window_at_ || at >= window_at_ + window_len_) {
      throw std::logic_error("a chunk's selection lies outside the chunk");
    }
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(
        {run_bytes_ - run_done_, window_at_ + window_len_ - at, out.size()}));
    std::memcpy(out.data(), window_.data() + (at - window_at_), n);
    out = out.subspan(n);
    run_done_ += n;
    if (run_done_ == run_bytes_) next_run();
  }
}

void SelectionStream::finish() {
  const std::uint64_t end = window_at_ + window_len_;
  if (end < total_) bytes_->skip(total_ - end, window_);
  window_len_ = 0;
  bytes_->finish();
}

}  // namespace zarr_device::engine
