#include "codecs/shard_layout.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "place/strided_copy.hpp"

namespace zarr_device::codecs {
namespace {

constexpr std::uint64_t kMissing = std::numeric_limits<std::uint64_t>::max();

std::string describe(std::size_t i, const ShardLayout::Entry& e) {
  return "shard index entry " + std::to_string(i) + " (offset " + std::to_string(e.offset) +
         ", length " + std::to_string(e.nbytes) + ")";
}

}  // namespace

ShardLayout::ShardLayout(CodecChain inner, CodecChain index, bool index_at_start)
    : inner_(std::move(inner)), index_(std::move(index)), index_at_start_(index_at_start) {
  const auto size = index_.fixed_encoded_size();
  if (!size) throw FormatError("sharding index_codecs must have a fixed encoded size");
  index_size_ = *size;
  chunks_per_shard_ = index_.spec().shape;
  chunks_per_shard_.pop_back();
  for (auto n : chunks_per_shard_) num_inner_ *= static_cast<std::size_t>(n);
}

std::size_t ShardLayout::max_stored_size() const {
  const std::size_t inner = inner_.max_stored_size();
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  if (inner != 0 && num_inner_ > (kMax - index_size_) / inner) return kMax;
  return index_size_ + num_inner_ * inner;
}

ByteRange ShardLayout::index_range(std::uint64_t total_size) const {
  if (total_size < index_size_) {
    throw CodecError("shard of " + std::to_string(total_size) +
                     " bytes is smaller than its index (" + std::to_string(index_size_) + ")");
  }
  return {index_at_start_ ? 0 : static_cast<std::int64_t>(total_size - index_size_),
          static_cast<std::int64_t>(index_size_)};
}

ShardLayout::Index ShardLayout::read_index(const RangeReader& read,
                                           std::uint64_t total_size) const {
  const ByteRange where = index_range(total_size);
  auto bytes = read(where.offset, where.length);
  if (!bytes || bytes->size() != index_size_) {
    throw CodecError("shard changed or vanished while its index was read");
  }
  return decode_index(*bytes, total_size);
}

ShardLayout::Index ShardLayout::decode_index(const Buffer& bytes, std::uint64_t total_size) const {
  (void)index_range(total_size);  // a shard too small for its index
  // Inner chunks lie between the index and the shard's other end.
  const std::uint64_t lo = index_at_start_ ? index_size_ : 0;
  const std::uint64_t hi = index_at_start_ ? total_size : total_size - index_size_;
  std::vector<std::uint64_t> flat(num_inner_ * 2);
  const auto& spec = index_.spec();
  const StridedView view{reinterpret_cast<std::byte*>(flat.data()), spec.shape,
                         place::c_strides(spec.shape, 8)};
  std::vector<DimSlice> all;
  for (auto e : spec.shape) all.push_back({0, 1, e});
  try {
    index_.decode_into(bytes, all, view);
  } catch (Error& e) {
    e.add_context("shard index");
    throw;
  }
  Index index(num_inner_);
  std::vector<Entry> present;
  for (std::size_t i = 0; i < num_inner_; ++i) {
    const Entry e{flat[2 * i], flat[2 * i + 1]};
    if (e.offset == kMissing && e.nbytes == kMissing) continue;
    if (e.offset > kMissing - e.nbytes) throw CodecError(describe(i, e) + " wraps around");
    if (e.offset < lo || e.offset + e.nbytes > hi) {
      throw CodecError(describe(i, e) + " is out of bounds");
    }
    index[i] = e;
    present.push_back(e);
  }
  std::sort(present.begin(), present.end(),
            [](const Entry& a, const Entry& b) { return a.offset < b.offset; });
  for (std::size_t i = 1; i < present.size(); ++i) {
    if (present[i - 1].offset + present[i - 1].nbytes > present[i].offset) {
      throw CodecError("shard index entries overlap at byte " + std::to_string(present[i].offset));
    }
  }
  return index;
}

std::optional<Buffer> ShardLayout::encode_index(
    std::span<const std::optional<std::size_t>> sizes) const {
  if (sizes.size() != num_inner_) {
    throw UsageError("a shard of " + std::to_string(num_inner_) + " chunks given " +
                     std::to_string(sizes.size()));
  }
  if (std::none_of(sizes.begin(), sizes.end(), [](const auto& n) { return n.has_value(); })) {
    return std::nullopt;
  }
  std::vector<std::uint64_t> flat(num_inner_ * 2, kMissing);
  std::uint64_t offset = index_at_start_ ? index_size_ : 0;
  for (std::size_t i = 0; i < num_inner_; ++i) {
    if (!sizes[i]) continue;
    flat[2 * i] = offset;
    flat[2 * i + 1] = *sizes[i];
    offset += *sizes[i];
  }
  auto encoded = index_.encode(
      {reinterpret_cast<const std::byte*>(flat.data()), flat.size() * sizeof(std::uint64_t)});
  if (!encoded || encoded->size() != index_size_) {
    throw CodecError("shard index encoded to an unexpected size");
  }
  return encoded;
}

CodecError ShardLayout::truncated(const Entry& entry) {
  return CodecError("shard is truncated: inner chunk at byte " + std::to_string(entry.offset) +
                    " of length " + std::to_string(entry.nbytes) + " is past its end");
}

std::vector<ByteRange> ShardLayout::wanted_ranges(std::span<const std::optional<Entry>> index,
                                                  std::span<const DimSlice> selection) const {
  std::vector<ByteRange> ranges;
  const InnerChunks chunks(*this, selection);
  InnerChunks::Chunk chunk;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    chunks.at(i, chunk);
    if (const auto& entry = index[chunk.index]) {
      ranges.push_back(
          {static_cast<std::int64_t>(entry->offset), static_cast<std::int64_t>(entry->nbytes)});
    }
  }
  return ranges;
}

std::optional<Buffer> ShardLayout::assemble(std::span<const std::optional<std::size_t>> sizes,
                                            const ChunkWriter& write_chunk) const {
  const auto encoded_index = encode_index(sizes);
  if (!encoded_index) return std::nullopt;
  std::size_t data_size = 0;
  for (const auto& n : sizes) data_size += n.value_or(0);
  ByteArray out(data_size + index_size_);
  std::byte* p = out.data();
  if (index_at_start_) {
    std::memcpy(p, encoded_index->data(), index_size_);
    p += index_size_;
  }
  for (std::size_t i = 0; i < num_inner_; ++i) {
    if (!sizes[i]) continue;
    write_chunk(i, {p, *sizes[i]});
    p += *sizes[i];
  }
  if (!index_at_start_) std::memcpy(p, encoded_index->data(), index_size_);
  return std::move(out).freeze();
}

std::optional<ShardLayout::Pieces> ShardLayout::pieces(
    std::vector<std::optional<Buffer>> chunks) const {
  std::vector<std::vector<Buffer>> as_pieces(chunks.size());
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    if (chunks[i]) as_pieces[i].push_back(std::move(*chunks[i]));
  }
  return pieces(std::move(as_pieces));
}

std::optional<ShardLayout::Pieces> ShardLayout::pieces(
    std::vector<std::vector<Buffer>> chunks) const {
  std::vector<std::optional<std::size_t>> sizes(chunks.size());
  std::size_t count = 0;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    if (chunks[i].empty()) continue;
    std::size_t size = 0;
    for (const auto& piece : chunks[i]) size += piece.size();
    sizes[i] = size;
    count += chunks[i].size();
  }
  auto index = encode_index(sizes);
  if (!index) return std::nullopt;
  Pieces out;
  out.index = std::move(*index);
  out.chunks.reserve(count);
  for (auto& chunk : chunks) {
    for (auto& piece : chunk) out.chunks.push_back(std::move(piece));
  }
  out.parts.reserve(out.chunks.size() + 1);
  if (index_at_start_) out.parts.push_back(out.index.span());
  for (const auto& c : out.chunks) out.parts.push_back(c.span());
  if (!index_at_start_) out.parts.push_back(out.index.span());
  return out;
}

std::optional<ShardLayout::Pieces> ShardLayout::encode_shard(const std::byte* shard,
                                                             std::span<const std::int64_t> strides,
                                                             const ForEach& for_each) const {
  const auto& inner = inner_.spec();
  const std::size_t es = inner.dtype->size;
  const auto inner_strides = place::c_strides(inner.shape, es);
  std::vector<std::vector<Buffer>> chunks(num_inner_);
  // Inner chunks that are each one run at `shard`, of a chain that reads its chunk where it is,
  // are encoded from `shard` itself: no scratch copy (and, stored as they are, views of it).
  const bool in_place = inner_.encodes_from_input() && runs_of(strides);
  for_each(num_inner_, [&](std::size_t i) {
    std::vector<std::int64_t> coords(chunks_per_shard_.size(), 0);
    place::c_order_coords(i, chunks_per_shard_, coords);
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < coords.size(); ++d)
      offset += coords[d] * inner.shape[d] * strides[d];
    Buffer elements;  // the inner chunk's elements, C order: where they are, or a scratch copy
    if (in_place) {
      elements = Buffer({}, shard + offset, inner.nbytes());
    } else {
      ByteArray scratch(inner.nbytes());
      place::copy_strided(shard + offset, strides,
                          StridedView{scratch.data(), inner.shape, inner_strides}, es);
      elements = std::move(scratch).freeze();  // pieces that view it hold it
    }
    if (place::is_all_fill(elements.span(), inner.fill_value)) return;
    if (auto encoded = inner_.encode_pieces(elements)) chunks[i] = std::move(*encoded);
  });
  return pieces(std::move(chunks));
}

bool ShardLayout::runs_of(std::span<const std::int64_t> strides) const {
  const auto& spec = inner_.spec();
  return strides.size() == spec.shape.size() &&
         place::is_c_contiguous(StridedView{nullptr, spec.shape, {strides.begin(), strides.end()}},
                                spec.dtype->size);
}

std::size_t ShardLayout::Pieces::size() const {
  std::size_t total = 0;
  for (const auto& p : parts) total += p.size();
  return total;
}

Buffer ShardLayout::Pieces::joined() const { return Buffer::joined(parts); }

void InnerChunks::at(std::size_t i, Chunk& chunk) const {
  grid_.at(i, chunk);
  chunk.index = place::c_order_index(chunk.chunk, layout_->chunks_per_shard());
}

StridedView InnerChunks::region(const StridedView& destination, const Chunk& chunk) {
  return place::subview(destination, chunk.out_offset, chunk.count);
}

}  // namespace zarr_device::codecs
