// sharding_indexed: an array->bytes codec storing a grid of inner chunks plus an index of
// (offset, nbytes) pairs. Decoding checks every index entry before trusting it.
#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <utility>

#include "codecs/builtin.hpp"
#include "codecs/codec_chain.hpp"
#include "place/chunk_grid.hpp"
#include "place/strided_copy.hpp"

namespace zarr_device::codecs {
namespace {

using json = nlohmann::json;
constexpr std::uint64_t kMissing = std::numeric_limits<std::uint64_t>::max();

struct IndexEntry {
  std::uint64_t offset;
  std::uint64_t nbytes;
  [[nodiscard]] bool missing() const { return offset == kMissing && nbytes == kMissing; }
};

// The stored inner chunks that `selection` (of a shard) touches, in the order a decode of it
// reads them (the grid's C order), as byte ranges of the shard: `stored(i)` is inner chunk i's
// (offset, nbytes), or nullopt when it is not stored.
template <typename Stored>
std::vector<ByteRange> touched_ranges(std::span<const DimSlice> selection,
                                      std::span<const std::int64_t> inner_shape,
                                      std::span<const std::int64_t> chunks_per_shard,
                                      Stored stored) {
  std::vector<ByteRange> ranges;
  const place::GridIntersection grid(selection, inner_shape);
  place::GridIntersection::Item item;
  for (std::size_t i = 0; i < grid.size(); ++i) {
    grid.at(i, item);
    if (const auto entry = stored(place::c_order_index(item.chunk, chunks_per_shard))) {
      ranges.push_back(
          {static_cast<std::int64_t>(entry->first), static_cast<std::int64_t>(entry->second)});
    }
  }
  return ranges;
}

// Shards inside shards are allowed, a few levels deep; metadata nesting them without end must be a
// FormatError, not a stack overflow. Counts the levels being built on this thread.
class NestingGuard {
 public:
  NestingGuard() {
    if (++depth_ > kMaxDepth) {
      --depth_;
      throw FormatError("sharding_indexed codecs nest deeper than " + std::to_string(kMaxDepth) +
                        " levels");
    }
  }
  ~NestingGuard() { --depth_; }
  NestingGuard(const NestingGuard&) = delete;
  NestingGuard& operator=(const NestingGuard&) = delete;

 private:
  static constexpr int kMaxDepth = 8;
  static thread_local int depth_;
};
thread_local int NestingGuard::depth_ = 0;

class ShardingCodec final : public ArrayToBytesCodec, public ShardLayout {
 public:
  ShardingCodec(const json& config, const CodecContext& ctx)
      : config_(config),
        inner_(make_inner(config, ctx)),
        index_(config.contains("index_codecs")
                   ? config["index_codecs"]
                   : json::array({{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}},
                                  {{"name", "crc32c"}}}),
               index_spec(ctx.chunk.shape, inner_.spec().shape), ctx.zarr_format) {
    const std::string location = config.value("index_location", "end");
    if (location != "start" && location != "end") {
      throw FormatError("sharding index_location must be 'start' or 'end'");
    }
    index_at_start_ = location == "start";
    auto size = index_.fixed_encoded_size();
    if (!size) throw FormatError("sharding index_codecs must have a fixed encoded size");
    index_size_ = *size;
    chunks_per_shard_ = index_.spec().shape;
    chunks_per_shard_.pop_back();
    num_inner_ = 1;
    for (auto n : chunks_per_shard_) num_inner_ *= static_cast<std::size_t>(n);
  }

  std::string_view name() const override { return "sharding_indexed"; }
  json to_json() const override {
    json config = config_;
    config["codecs"] = inner_.to_json();
    config["index_codecs"] = index_.to_json();
    config["index_location"] = index_at_start_ ? "start" : "end";
    return {{"name", "sharding_indexed"}, {"configuration", config}};
  }

  void decode_into(const Buffer& shard, const ChunkSpec& spec, std::span<const DimSlice> selection,
                   const StridedView& destination) const override {
    if (shard.size() < index_size_) {
      throw CodecError("shard of " + std::to_string(shard.size()) +
                       " bytes is smaller than its index (" + std::to_string(index_size_) + ")");
    }
    const std::uint64_t lo = index_at_start_ ? index_size_ : 0;
    const std::uint64_t hi = index_at_start_ ? shard.size() : shard.size() - index_size_;
    const auto index = read_index(shard.slice(index_at_start_ ? 0 : hi, index_size_), lo, hi);
    decode_chunks(index, spec, selection, destination,
                  [&](const IndexEntry& e) { return shard.slice(e.offset, e.nbytes); });
  }

  bool supports_partial_decode() const override { return true; }

  std::size_t max_encoded_size(const ChunkSpec& /*spec*/) const override {
    const std::size_t inner = inner_.max_stored_size();
    constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
    if (inner != 0 && num_inner_ > (kMax - index_size_) / inner) return kMax;
    return index_size_ + num_inner_ * inner;
  }

  void decode_partial(const RangeReader& read, std::uint64_t total_size, const ChunkSpec& spec,
                      std::span<const DimSlice> selection,
                      const StridedView& destination) const override {
    const auto index = fetch_index(read, total_size);
    // The inner chunks wanted, in the order decode_chunks visits them, fetched in windows: a
    // reader that answers many ranges at once (a remote store) gets up to kWindowBytes of them
    // per request, not a round trip each; another reads one at a time, holding one chunk.
    constexpr std::uint64_t kWindowBytes = std::uint64_t{32} << 20;
    const auto wanted = touched_ranges(
        selection, inner_.spec().shape, chunks_per_shard_,
        [&](std::size_t i) -> std::optional<std::pair<std::uint64_t, std::uint64_t>> {
          if (index[i].missing()) return std::nullopt;
          return std::pair{index[i].offset, index[i].nbytes};
        });
    std::vector<std::optional<Buffer>> window;
    std::size_t window_begin = 0;
    std::size_t next = 0;  // of `wanted`, the next to decode
    decode_chunks(index, spec, selection, destination, [&](const IndexEntry& e) {
      if (next == window_begin + window.size()) {
        window_begin = next;
        std::size_t end = next;
        std::uint64_t bytes = 0;
        do {
          bytes += static_cast<std::uint64_t>(wanted[end].length);
          ++end;
        } while (read.answers_many() && end < wanted.size() && bytes < kWindowBytes);
        window = read.read_many({wanted.data() + next, end - next});
      }
      auto& data = window.at(next - window_begin);
      ++next;
      if (!data || data->size() != e.nbytes) {
        throw CodecError("shard is truncated: inner chunk at byte " + std::to_string(e.offset) +
                         " of length " + std::to_string(e.nbytes) + " is past its end");
      }
      return std::move(*data);
    });
  }

  ByteRange index_range(std::uint64_t total_size) const override {
    if (total_size < index_size_) {
      throw CodecError("shard of " + std::to_string(total_size) +
                       " bytes is smaller than its index (" + std::to_string(index_size_) + ")");
    }
    return {index_at_start_ ? 0 : static_cast<std::int64_t>(total_size - index_size_),
            static_cast<std::int64_t>(index_size_)};
  }

  const CodecChain& inner() const override { return inner_; }
  std::span<const std::int64_t> chunks_per_shard() const override { return chunks_per_shard_; }

  std::vector<std::optional<Entry>> read_index(const RangeReader& read,
                                               std::uint64_t total_size) const override {
    std::vector<std::optional<Entry>> out;
    for (const auto& e : fetch_index(read, total_size)) {
      if (e.missing())
        out.emplace_back();
      else
        out.push_back(Entry{e.offset, e.nbytes});
    }
    return out;
  }

  std::optional<Buffer> encode(const ChunkSpec& spec,
                               std::span<const std::byte> shard) const override {
    if (shard.size() != spec.nbytes()) {
      throw UsageError("a shard of " + std::to_string(spec.nbytes()) + " bytes given " +
                       std::to_string(shard.size()));
    }
    const auto pieces =
        encode_shard(shard.data(), place::c_strides(spec.shape, spec.dtype->size),
                     [](std::size_t n, const std::function<void(std::size_t)>& body) {
                       for (std::size_t i = 0; i < n; ++i) body(i);
                     });
    if (!pieces) return std::nullopt;
    return pieces->joined();
  }

  std::optional<Pieces> encode_shard(const std::byte* shard, std::span<const std::int64_t> strides,
                                     const ForEach& for_each) const override {
    const auto& inner = inner_.spec();
    const std::size_t es = inner.dtype->size;
    const auto inner_strides = place::c_strides(inner.shape, es);
    std::vector<std::vector<Buffer>> chunks(num_inner_);
    // Inner chunks that are each one run at `shard`, of a chain that reads its chunk where it
    // is, are encoded from `shard` itself: no scratch copy (and, stored as they are, views of it).
    const bool in_place = inner_.encodes_from_input() && runs_of(strides);
    for_each(num_inner_, [&](std::size_t i) {
      std::vector<std::int64_t> coords(chunks_per_shard_.size(), 0);
      place::c_order_coords(i, chunks_per_shard_, coords);
      std::int64_t offset = 0;
      for (std::size_t d = 0; d < coords.size(); ++d) {
        offset += coords[d] * inner.shape[d] * strides[d];
      }
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

  [[nodiscard]] bool index_at_start() const override { return index_at_start_; }

  std::optional<Buffer> encode_index(
      std::span<const std::optional<std::size_t>> sizes) const override {
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

  std::optional<Buffer> assemble(std::span<const std::optional<std::size_t>> sizes,
                                 const ChunkWriter& write_chunk) const override {
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

 private:
  static CodecChain make_inner(const json& config, const CodecContext& ctx) {
    const NestingGuard guard;  // held while the inner chain (and shards within it) is built
    return CodecChain(inner_codecs(config), inner_spec(config, ctx), ctx.zarr_format);
  }

  static const json& inner_codecs(const json& config) {
    if (!config.is_object() || !config.contains("codecs")) {
      throw FormatError("sharding_indexed needs 'chunk_shape' and 'codecs'");
    }
    return config["codecs"];
  }

  static ChunkSpec inner_spec(const json& config, const CodecContext& ctx) {
    if (!config.is_object() || !config.contains("chunk_shape") || !config.contains("codecs")) {
      throw FormatError("sharding_indexed needs 'chunk_shape' and 'codecs'");
    }
    const auto& cs = config["chunk_shape"];
    if (!cs.is_array() || cs.size() != ctx.chunk.shape.size()) {
      throw FormatError("sharding chunk_shape " + cs.dump() + " does not match the shard's rank");
    }
    ChunkSpec spec = ctx.chunk;
    for (std::size_t i = 0; i < cs.size(); ++i) {
      if (!cs[i].is_number_integer() || cs[i].get<std::int64_t>() <= 0 ||
          ctx.chunk.shape[i] % cs[i].get<std::int64_t>() != 0) {
        throw FormatError("sharding chunk_shape " + cs.dump() + " does not divide the shard shape");
      }
      spec.shape[i] = cs[i].get<std::int64_t>();
    }
    return spec;
  }

  static ChunkSpec index_spec(const std::vector<std::int64_t>& shard,
                              const std::vector<std::int64_t>& inner) {
    ChunkSpec spec;
    for (std::size_t i = 0; i < shard.size(); ++i) spec.shape.push_back(shard[i] / inner[i]);
    spec.shape.push_back(2);
    spec.dtype = &DataType::from_v3_name("uint64");
    spec.fill_value.assign(8, std::byte{0xff});
    return spec;
  }

  // Reads the index of a stored shard of `total_size` bytes through `read`, then validates it.
  std::vector<IndexEntry> fetch_index(const RangeReader& read, std::uint64_t total_size) const {
    const ByteRange where = index_range(total_size);
    const std::uint64_t lo = index_at_start_ ? index_size_ : 0;
    const std::uint64_t hi = index_at_start_ ? total_size : total_size - index_size_;
    auto bytes = read(where.offset, where.length);
    if (!bytes || bytes->size() != index_size_) {
      throw CodecError("shard changed or vanished while its index was read");
    }
    return read_index(*bytes, lo, hi);
  }

  // Decodes and validates the index. Entries must lie in [lo, hi), not wrap around and not overlap.
  std::vector<IndexEntry> read_index(const Buffer& bytes, std::uint64_t lo,
                                     std::uint64_t hi) const {
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
    std::vector<IndexEntry> index(num_inner_);
    std::vector<IndexEntry> present;
    for (std::size_t i = 0; i < num_inner_; ++i) {
      IndexEntry e{flat[2 * i], flat[2 * i + 1]};
      index[i] = e;
      if (e.missing()) continue;
      if (e.offset > kMissing - e.nbytes) {
        throw CodecError("shard index entry " + std::to_string(i) + " (offset " +
                         std::to_string(e.offset) + ", length " + std::to_string(e.nbytes) +
                         ") wraps around");
      }
      if (e.offset < lo || e.offset + e.nbytes > hi) {
        throw CodecError("shard index entry " + std::to_string(i) + " (offset " +
                         std::to_string(e.offset) + ", length " + std::to_string(e.nbytes) +
                         ") is out of bounds");
      }
      present.push_back(e);
    }
    std::sort(present.begin(), present.end(),
              [](const IndexEntry& a, const IndexEntry& b) { return a.offset < b.offset; });
    for (std::size_t i = 1; i < present.size(); ++i) {
      if (present[i - 1].offset + present[i - 1].nbytes > present[i].offset) {
        throw CodecError("shard index entries overlap at byte " +
                         std::to_string(present[i].offset));
      }
    }
    return index;
  }

  template <typename Fetch>
  void decode_chunks(const std::vector<IndexEntry>& index, const ChunkSpec& spec,
                     std::span<const DimSlice> selection, const StridedView& destination,
                     Fetch fetch) const {
    const auto& inner = inner_.spec();
    place::GridIntersection grid(selection, inner.shape);
    place::GridIntersection::Item item;
    for (std::size_t i = 0; i < grid.size(); ++i) {
      grid.at(i, item);
      const std::size_t linear = place::c_order_index(item.chunk, chunks_per_shard_);
      const auto region = place::subview(destination, item.out_offset, item.count);
      const auto& entry = index[linear];
      if (entry.missing()) {
        place::fill_strided(region, spec.fill_value);
        continue;
      }
      try {
        inner_.decode_into(fetch(entry), item.within, region);
      } catch (Error& e) {
        e.add_context("inner chunk " + std::to_string(linear));
        throw;
      }
    }
  }

  json config_;
  CodecChain inner_;
  CodecChain index_;
  bool index_at_start_ = false;
  std::size_t index_size_ = 0;
  std::vector<std::int64_t> chunks_per_shard_;
  std::size_t num_inner_ = 1;
};

}  // namespace

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
  if (index_at_start()) out.parts.push_back(out.index.span());
  for (const auto& c : out.chunks) out.parts.push_back(c.span());
  if (!index_at_start()) out.parts.push_back(out.index.span());
  return out;
}

bool ShardLayout::runs_of(std::span<const std::int64_t> strides) const {
  const auto& spec = inner().spec();
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

std::vector<ByteRange> ShardLayout::wanted_ranges(std::span<const std::optional<Entry>> index,
                                                  std::span<const DimSlice> selection) const {
  return touched_ranges(
      selection, inner().spec().shape, chunks_per_shard(),
      [&](std::size_t i) -> std::optional<std::pair<std::uint64_t, std::uint64_t>> {
        if (!index[i]) return std::nullopt;
        return std::pair{index[i]->offset, index[i]->nbytes};
      });
}

void register_sharding_codec(CodecRegistry& registry) {
  registry.add("sharding_indexed", [](const json& config, const CodecContext& ctx) {
    return std::make_shared<ShardingCodec>(config, ctx);
  });
}

}  // namespace zarr_device::codecs
