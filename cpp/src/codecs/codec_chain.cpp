#include "codecs/codec_chain.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>

#include "codecs/shard_layout.hpp"
#include "place/strided_copy.hpp"

namespace zarr_device::codecs {

CodecChain::CodecChain(const nlohmann::json& codecs, ChunkSpec spec, int zarr_format)
    : spec_(std::move(spec)) {
  if (!codecs.is_array() || codecs.empty()) throw FormatError("codecs must be a non-empty list");
  auto& registry = CodecRegistry::instance();
  ChunkSpec current = spec_;
  for (const auto& given : codecs) {
    // An entry is a bare name ("bytes") or {"name", "configuration"}.
    const nlohmann::json entry = given.is_string() ? nlohmann::json{{"name", given}} : given;
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string()) {
      throw FormatError("codec entry " + given.dump() + " has no name");
    }
    const std::string name = entry["name"].get<std::string>();
    const nlohmann::json config =
        entry.contains("configuration") ? entry["configuration"] : nlohmann::json::object();
    std::shared_ptr<Codec> codec;
    try {
      codec = registry.create(name, config, CodecContext{current, zarr_format});
    } catch (const nlohmann::json::exception& e) {
      // A configuration value of the wrong JSON type is bad metadata, like any other.
      throw FormatError("codec '" + name + "': invalid configuration: " + e.what());
    }
    if (auto a2a = std::dynamic_pointer_cast<const ArrayToArrayCodec>(codec)) {
      if (array_to_bytes_) {
        throw FormatError("array->array codec '" + name + "' comes after the array->bytes codec");
      }
      if (listed_before_bytes_ > 0) {
        throw FormatError("array->array codec '" + name + "' comes after '" +
                          std::string(bytes_to_bytes_.back()->name()) +
                          "', which this reading runs only right before the array->bytes codec");
      }
      specs_.push_back(current);
      current = a2a->encoded_spec(current);
      array_to_array_.push_back(std::move(a2a));
    } else if (auto a2b = std::dynamic_pointer_cast<const ArrayToBytesCodec>(codec)) {
      if (array_to_bytes_) throw FormatError("codecs list two array->bytes codecs");
      // Codecs on the elements in memory see the bytes a little-endian array->bytes codec writes.
      if (listed_before_bytes_ > 0 && current.dtype->size > 1 &&
          a2b->plain_layout() != Endian::kLittle) {
        throw FormatError("'" + std::string(bytes_to_bytes_.front()->name()) +
                          "' before the array->bytes codec '" + name +
                          "' is read only where that codec writes little-endian bytes");
      }
      specs_.push_back(current);
      array_to_bytes_ = std::move(a2b);
    } else if (auto b2b = std::dynamic_pointer_cast<const BytesToBytesCodec>(codec)) {
      if (!array_to_bytes_ && b2b->listed_before_bytes()) {
        bytes_to_bytes_.push_back(std::move(b2b));
        ++listed_before_bytes_;
        continue;
      }
      if (!array_to_bytes_) {
        throw FormatError("bytes->bytes codec '" + name + "' comes before the array->bytes codec");
      }
      bytes_to_bytes_.push_back(std::move(b2b));
    } else {
      throw FormatError("codec '" + name + "' is of no known kind");
    }
  }
  if (!array_to_bytes_) throw FormatError("codecs list no array->bytes codec (such as 'bytes')");
  level_bounds_.push_back(array_to_bytes_->max_encoded_size(specs_.back()));
  for (const auto& c : bytes_to_bytes_) {
    level_bounds_.push_back(c->max_encoded_size(level_bounds_.back()));
  }
}

std::size_t CodecChain::decode_memory() const {
  std::size_t total = 0;
  for (const std::size_t b : level_bounds_) {
    total = b > std::numeric_limits<std::size_t>::max() - total
                ? std::numeric_limits<std::size_t>::max()
                : total + b;
  }
  return total;
}

nlohmann::json CodecChain::to_json() const {
  // numcodecs codecs describe themselves as v2 compressor entries ({"id": ...}); in a codec chain
  // they take the v3 form zarr-python 3 writes: {"name": "numcodecs.<id>", "configuration": ...}.
  auto as_v3 = [](nlohmann::json entry) {
    if (!entry.contains("id")) return entry;
    nlohmann::json config = entry;
    config.erase("id");
    return nlohmann::json{{"name", "numcodecs." + entry["id"].get<std::string>()},
                          {"configuration", config}};
  };
  auto out = nlohmann::json::array();
  for (const auto& c : array_to_array_) out.push_back(as_v3(c->to_json()));
  for (std::size_t i = 0; i < listed_before_bytes_; ++i) {
    out.push_back(as_v3(bytes_to_bytes_[i]->to_json()));
  }
  out.push_back(as_v3(array_to_bytes_->to_json()));
  for (std::size_t i = listed_before_bytes_; i < bytes_to_bytes_.size(); ++i) {
    out.push_back(as_v3(bytes_to_bytes_[i]->to_json()));
  }
  return out;
}

bool CodecChain::is_plain() const {
  return array_to_array_.empty() && bytes_to_bytes_.empty() &&
         (array_to_bytes_->plain_layout() == Endian::kLittle);
}

const ChunkSpec& CodecChain::map_to_encoded(std::vector<DimSlice>& selection,
                                            StridedView& destination) const {
  for (const auto& c : array_to_array_) c->map_to_encoded(selection, destination);
  return specs_.back();
}

const ShardLayout* CodecChain::shard_layout() const {
  if (!array_to_array_.empty() || !bytes_to_bytes_.empty()) return nullptr;
  return dynamic_cast<const ShardLayout*>(array_to_bytes_.get());
}

bool CodecChain::is_sharded() const {
  return dynamic_cast<const ShardLayout*>(array_to_bytes_.get()) != nullptr;
}

namespace {

// The chunk's dimensions as the array->bytes codec sees them, through the codecs that reorder
// them (the others keep them where they are).
std::vector<std::size_t> composed_order(
    std::span<const std::shared_ptr<const ArrayToArrayCodec>> codecs, std::size_t rank,
    bool* all_permutations) {
  std::vector<std::size_t> order(rank);
  std::iota(order.begin(), order.end(), std::size_t{0});
  *all_permutations = true;
  for (const auto& codec : codecs) {
    const auto permutation = codec->permutation();
    if (!permutation) {
      *all_permutations = false;
      continue;
    }
    const auto before = order;
    for (std::size_t i = 0; i < rank; ++i) order[i] = before[(*permutation)[i]];
  }
  return order;
}

}  // namespace

std::optional<std::vector<std::size_t>> CodecChain::stored_order() const {
  bool all_permutations = false;
  auto order = composed_order(array_to_array_, spec_.shape.size(), &all_permutations);
  if (!all_permutations) return std::nullopt;
  return order;
}

std::vector<std::int64_t> CodecChain::decoded_chunk_shape() const {
  const auto* shards = dynamic_cast<const ShardLayout*>(array_to_bytes_.get());
  if (shards == nullptr) return spec_.shape;
  bool all_permutations = false;
  const auto order = composed_order(array_to_array_, spec_.shape.size(), &all_permutations);
  const auto& inner = shards->inner().spec().shape;
  std::vector<std::int64_t> shape(inner.size());
  for (std::size_t i = 0; i < inner.size(); ++i) shape[order[i]] = inner[i];
  return shape;
}

bool CodecChain::supports_partial_decode() const {
  return bytes_to_bytes_.empty() && array_to_bytes_->supports_partial_decode();
}

namespace {

// Rewrites selection and destination through the array->array codecs onto the encoded array.
template <typename Codecs>
void map_through(const Codecs& codecs, std::vector<DimSlice>& selection, StridedView& destination) {
  for (const auto& c : codecs) c->map_to_encoded(selection, destination);
}

}  // namespace

void CodecChain::decode_into(const Buffer& encoded, std::span<const DimSlice> selection,
                             const StridedView& destination) const {
  std::vector<DimSlice> sel(selection.begin(), selection.end());
  StridedView dest = destination;
  map_through(array_to_array_, sel, dest);
  const ChunkSpec& inner = specs_.back();

  if (bytes_to_bytes_.empty()) {
    array_to_bytes_->decode_into(encoded, inner, sel, dest);
    return;
  }
  const auto layout = array_to_bytes_->plain_layout();
  if (decompresses_into_place(sel, dest)) {
    Buffer current = encoded;
    for (std::size_t i = bytes_to_bytes_.size(); i-- > 1;) {
      current = bytes_to_bytes_[i]->decode(current, DecodedSize::bounded(level_bounds_[i]));
    }
    bytes_to_bytes_[0]->decode_into(current, {dest.data, inner.nbytes()});
    return;
  }
  Buffer current = encoded;
  for (std::size_t i = bytes_to_bytes_.size(); i-- > 0;) {
    const DecodedSize size =
        (i == 0 && layout) ? DecodedSize(inner.nbytes()) : DecodedSize::bounded(level_bounds_[i]);
    current = bytes_to_bytes_[i]->decode(current, size);
  }
  array_to_bytes_->decode_into(current, inner, sel, dest);
}

std::optional<std::span<std::byte>> CodecChain::stream_target(
    std::span<const DimSlice> selection, const StridedView& destination) const {
  std::vector<DimSlice> sel(selection.begin(), selection.end());
  StridedView dest = destination;
  map_through(array_to_array_, sel, dest);
  if (!decompresses_into_place(sel, dest) || !bytes_decode_as_stream()) return std::nullopt;
  return std::span<std::byte>{dest.data, specs_.back().nbytes()};
}

bool CodecChain::decompresses_into_place(std::span<const DimSlice> selection,
                                         const StridedView& destination) const {
  const ChunkSpec& inner = specs_.back();
  return !bytes_to_bytes_.empty() && array_to_bytes_->plain_layout() == Endian::kLittle &&
         place::is_full(selection, inner.shape) &&
         place::is_c_contiguous(destination, inner.dtype->size);
}

std::size_t CodecChain::decode_scratch(std::span<const DimSlice> selection,
                                       const StridedView& destination) const {
  std::vector<DimSlice> sel(selection.begin(), selection.end());
  StridedView dest = destination;
  map_through(array_to_array_, sel, dest);
  // Codec i decodes into a buffer of at most level_bounds_[i] (codec 0: the decoded chunk).
  std::size_t total = 0;
  const std::size_t first = decompresses_into_place(sel, dest) ? 1 : 0;
  for (std::size_t i = first; i < bytes_to_bytes_.size(); ++i) {
    if (!bytes_to_bytes_[i]->decodes_to_view()) total += level_bounds_[i];
  }
  return total;
}

void CodecChain::decode_partial(const RangeReader& read, std::uint64_t total_size,
                                std::span<const DimSlice> selection,
                                const StridedView& destination) const {
  std::vector<DimSlice> sel(selection.begin(), selection.end());
  StridedView dest = destination;
  map_through(array_to_array_, sel, dest);
  array_to_bytes_->decode_partial(read, total_size, specs_.back(), sel, dest);
}

std::optional<Buffer> CodecChain::encode(std::span<const std::byte> chunk) const {
  auto pieces = encode_pieces(Buffer({}, chunk.data(), chunk.size()));
  if (!pieces) return std::nullopt;
  if (pieces->size() == 1) {
    // Never a view of memory the caller may free (the chunk itself, or a codec that returned
    // its input as it was).
    const auto at = reinterpret_cast<std::uintptr_t>(pieces->front().data());
    const auto from = reinterpret_cast<std::uintptr_t>(chunk.data());
    if (!pieces->front().empty() && at >= from && at < from + chunk.size()) {
      return Buffer::copy_of(pieces->front().span());
    }
    return std::move(pieces->front());
  }
  return Buffer::joined(Buffer::spans_of(*pieces));
}

std::optional<std::vector<Buffer>> CodecChain::encode_pieces(const Buffer& chunk) const {
  if (chunk.size() != spec_.nbytes()) {
    throw UsageError("chunk of " + std::to_string(chunk.size()) +
                     " bytes given to encode, expected " + std::to_string(spec_.nbytes()));
  }
  Buffer current = chunk;
  for (std::size_t i = 0; i < array_to_array_.size(); ++i) {
    ByteArray out(spec_.nbytes());
    array_to_array_[i]->encode(specs_[i], current.span(), out.span());
    current = std::move(out).freeze();
  }
  std::optional<Buffer> bytes;
  if (layout_in_place()) {
    bytes = std::move(current);  // the elements as they are: no copy
  } else {
    bytes = array_to_bytes_->encode(specs_.back(), current.span());
    if (!bytes) return std::nullopt;
  }
  const std::size_t n = bytes_to_bytes_.size();
  for (std::size_t i = 0; i + 1 < n; ++i) bytes = bytes_to_bytes_[i]->encode(*bytes);
  std::vector<Buffer> pieces;
  if (n > 0) {
    const auto& last = *bytes_to_bytes_.back();
    if (last.suffix_size() > 0) {
      auto tail = last.suffix(*bytes);
      pieces.push_back(std::move(*bytes));
      pieces.push_back(std::move(*tail));
      return pieces;
    }
    bytes = last.encode(*bytes);
  }
  pieces.push_back(std::move(*bytes));
  return pieces;
}

bool CodecChain::layout_in_place() const {
  // A little-endian "bytes" layout is the elements' own bytes: the first compressor (or the
  // store) reads them where they are rather than from a copy (a 16 MiB chunk copied into fresh
  // memory costs a tenth of its zstd compression, and a chunk of memory more in flight).
  return array_to_bytes_->plain_layout() == Endian::kLittle;
}

bool CodecChain::encodes_from_input() const { return layout_in_place() && array_to_array_.empty(); }

std::size_t CodecChain::encode_memory() const {
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  const auto add = [](std::size_t a, std::size_t b) { return a > kMax - b ? kMax : a + b; };
  // Each bytes->bytes codec holds its input and its output at their bounds; the input is freed
  // once the output is made, so the most at once is the largest such pair. A last codec that
  // appends a suffix makes only that.
  std::size_t most = layout_in_place() ? 0 : level_bounds_[0];
  for (std::size_t i = 0; i < bytes_to_bytes_.size(); ++i) {
    const std::size_t in = (i == 0 && layout_in_place()) ? 0 : level_bounds_[i];
    const bool suffix = i + 1 == bytes_to_bytes_.size() && bytes_to_bytes_[i]->suffix_size() > 0;
    most =
        std::max(most, add(in, suffix ? bytes_to_bytes_[i]->suffix_size() : level_bounds_[i + 1]));
  }
  // The array->array codecs' scratch copies of the chunk live through the whole encode.
  const std::size_t scratch = std::min<std::size_t>(array_to_array_.size(), 2) * spec_.nbytes();
  return add(most, scratch);
}

std::optional<std::size_t> CodecChain::fixed_encoded_size() const {
  if (!array_to_bytes_->plain_layout()) return std::nullopt;
  std::size_t size = specs_.back().nbytes();
  for (const auto& c : bytes_to_bytes_) {
    auto next = c->encoded_size(size);
    if (!next) return std::nullopt;
    size = *next;
  }
  return size;
}

}  // namespace zarr_device::codecs
