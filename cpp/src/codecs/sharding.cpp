// sharding_indexed: an array->bytes codec storing a grid of inner chunks plus an index of
// (offset, nbytes) pairs, in the format of codecs/shard_layout.hpp. Decoding checks every index
// entry before trusting it.
#include <functional>
#include <optional>
#include <utility>

#include "codecs/builtin.hpp"
#include "codecs/shard_layout.hpp"
#include "place/strided_copy.hpp"

namespace zarr_device::codecs {
namespace {

using json = nlohmann::json;

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
      : ShardLayout(make_inner(config, ctx), make_index(config, ctx), index_at_start_of(config)),
        config_(config) {}

  std::string_view name() const override { return "sharding_indexed"; }
  json to_json() const override {
    json config = config_;
    config["codecs"] = inner().to_json();
    config["index_codecs"] = index_codecs().to_json();
    config["index_location"] = index_at_start() ? "start" : "end";
    return {{"name", "sharding_indexed"}, {"configuration", config}};
  }

  void decode_into(const Buffer& shard, const ChunkSpec& spec, std::span<const DimSlice> selection,
                   const StridedView& destination) const override {
    const ByteRange where = index_range(shard.size());
    const auto index = decode_index(
        shard.slice(static_cast<std::size_t>(where.offset), static_cast<std::size_t>(where.length)),
        shard.size());
    decode_chunks(index, spec, selection, destination,
                  [&](const Entry& e) { return shard.slice(e.offset, e.nbytes); });
  }

  bool supports_partial_decode() const override { return true; }

  std::size_t max_encoded_size(const ChunkSpec& /*spec*/) const override {
    return max_stored_size();
  }

  void decode_partial(const RangeReader& read, std::uint64_t total_size, const ChunkSpec& spec,
                      std::span<const DimSlice> selection,
                      const StridedView& destination) const override {
    const auto index = read_index(read, total_size);
    // The inner chunks wanted, in the order decode_chunks visits them, fetched in windows: a
    // reader that answers many ranges at once (a remote store) gets up to kWindowBytes of them
    // per request, not a round trip each; another reads one at a time, holding one chunk.
    constexpr std::uint64_t kWindowBytes = std::uint64_t{32} << 20;
    const auto wanted = wanted_ranges(index, selection);
    std::vector<std::optional<Buffer>> window;
    std::size_t window_begin = 0;
    std::size_t next = 0;  // of `wanted`, the next to decode
    decode_chunks(index, spec, selection, destination, [&](const Entry& e) {
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
      if (!data || data->size() != e.nbytes) throw truncated(e);
      return std::move(*data);
    });
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

 private:
  static CodecChain make_inner(const json& config, const CodecContext& ctx) {
    const NestingGuard guard;  // held while the inner chain (and shards within it) is built
    return CodecChain(inner_codecs(config), inner_spec(config, ctx), ctx.zarr_format);
  }

  static CodecChain make_index(const json& config, const CodecContext& ctx) {
    return CodecChain(
        config.contains("index_codecs")
            ? config["index_codecs"]
            : json::array({{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}},
                           {{"name", "crc32c"}}}),
        index_spec(ctx.chunk.shape, inner_spec(config, ctx).shape), ctx.zarr_format);
  }

  static bool index_at_start_of(const json& config) {
    const std::string location = config.value("index_location", "end");
    if (location != "start" && location != "end") {
      throw FormatError("sharding index_location must be 'start' or 'end'");
    }
    return location == "start";
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

  template <typename Fetch>
  void decode_chunks(const Index& index, const ChunkSpec& spec, std::span<const DimSlice> selection,
                     const StridedView& destination, Fetch fetch) const {
    const InnerChunks chunks(*this, selection);
    InnerChunks::Chunk chunk;
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      chunks.at(i, chunk);
      const auto region = InnerChunks::region(destination, chunk);
      const auto& entry = index[chunk.index];
      if (!entry) {
        place::fill_strided(region, spec.fill_value);
        continue;
      }
      try {
        inner().decode_into(fetch(*entry), chunk.within, region);
      } catch (Error& e) {
        e.add_context("inner chunk " + std::to_string(chunk.index));
        throw;
      }
    }
  }

  json config_;
};

}  // namespace

void register_sharding_codec(CodecRegistry& registry) {
  registry.add("sharding_indexed", [](const json& config, const CodecContext& ctx) {
    return std::make_shared<ShardingCodec>(config, ctx);
  });
}

}  // namespace zarr_device::codecs
