// The "bytes" (array->bytes) and "transpose" (array->array) codecs.
#include <algorithm>
#include <numeric>

#include "codecs/builtin.hpp"
#include "place/strided_copy.hpp"

namespace zarr_device::codecs {
namespace {

using json = nlohmann::json;

class BytesCodec final : public ArrayToBytesCodec {
 public:
  BytesCodec(std::optional<Endian> endian, std::size_t element_size)
      : configured_(endian), endian_(endian.value_or(Endian::kLittle)) {
    if (!endian && element_size > 1) {
      // The spec requires "endian" for multi-byte types; little is what every writer means.
      configured_ = Endian::kLittle;
    }
  }

  std::string_view name() const override { return "bytes"; }
  json to_json() const override {
    json j = {{"name", "bytes"}};
    if (configured_) {
      j["configuration"] = {{"endian", *configured_ == Endian::kLittle ? "little" : "big"}};
    }
    return j;
  }

  std::optional<Endian> plain_layout() const override { return endian_; }

  void decode_into(const Buffer& encoded, const ChunkSpec& spec,
                   std::span<const DimSlice> selection,
                   const StridedView& destination) const override {
    if (encoded.size() != spec.nbytes()) {
      throw CodecError("chunk holds " + std::to_string(encoded.size()) + " bytes, expected " +
                       std::to_string(spec.nbytes()) + " for its shape and data type");
    }
    const auto source = place::select_in_c_order(spec.shape, selection, spec.dtype->size);
    const std::size_t swap = endian_ == Endian::kBig ? spec.dtype->swap_unit : 1;
    place::copy_strided(encoded.data() + source.offset, source.strides, destination,
                        spec.dtype->size, swap);
  }

  std::optional<Buffer> encode(const ChunkSpec& spec,
                               std::span<const std::byte> chunk) const override {
    ByteArray out(chunk.size());
    if (!chunk.empty()) std::memcpy(out.data(), chunk.data(), chunk.size());
    if (endian_ == Endian::kBig) place::byteswap_in_place(out.span(), spec.dtype->swap_unit);
    return std::move(out).freeze();
  }

 private:
  std::optional<Endian> configured_;
  Endian endian_;
};

class TransposeCodec final : public ArrayToArrayCodec {
 public:
  explicit TransposeCodec(std::vector<std::int64_t> order) : order_(std::move(order)) {}

  std::string_view name() const override { return "transpose"; }
  json to_json() const override {
    return {{"name", "transpose"}, {"configuration", {{"order", order_}}}};
  }

  ChunkSpec encoded_spec(const ChunkSpec& decoded) const override {
    ChunkSpec out = decoded;
    for (std::size_t i = 0; i < order_.size(); ++i) out.shape[i] = decoded.shape[order_[i]];
    return out;
  }

  void map_to_encoded(std::vector<DimSlice>& selection, StridedView& destination) const override {
    const auto sel = selection;
    const auto shape = destination.shape;
    const auto strides = destination.byte_strides;
    for (std::size_t i = 0; i < order_.size(); ++i) {
      selection[i] = sel[order_[i]];
      destination.shape[i] = shape[order_[i]];
      destination.byte_strides[i] = strides[order_[i]];
    }
  }

  std::optional<std::vector<std::size_t>> permutation() const override {
    return std::vector<std::size_t>(order_.begin(), order_.end());
  }

  void encode(const ChunkSpec& decoded, std::span<const std::byte> in,
              std::span<std::byte> out) const override {
    const auto enc = encoded_spec(decoded);
    const auto in_strides = place::c_strides(decoded.shape, decoded.dtype->size);
    std::vector<std::int64_t> src(order_.size());
    for (std::size_t i = 0; i < order_.size(); ++i) src[i] = in_strides[order_[i]];
    StridedView dest{out.data(), enc.shape, place::c_strides(enc.shape, decoded.dtype->size)};
    place::copy_strided(in.data(), src, dest, decoded.dtype->size);
  }

 private:
  std::vector<std::int64_t> order_;
};

std::vector<std::int64_t> parse_order(const json& config, std::size_t rank) {
  if (!config.contains("order")) throw FormatError("transpose codec has no 'order'");
  const auto& order = config["order"];
  std::vector<std::int64_t> perm;
  if (order.is_string()) {  // early drafts of the spec: "C" or "F"
    perm.resize(rank);
    std::iota(perm.begin(), perm.end(), 0);
    if (order == "F")
      std::reverse(perm.begin(), perm.end());
    else if (order != "C")
      throw FormatError("transpose order " + order.dump() + " is not valid");
    return perm;
  }
  if (!order.is_array() || order.size() != rank) {
    throw FormatError("transpose order " + order.dump() + " must be a permutation of " +
                      std::to_string(rank) + " dimensions");
  }
  std::vector<bool> seen(rank, false);
  for (const auto& v : order) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
        v.get<std::int64_t>() >= static_cast<std::int64_t>(rank) || seen[v.get<std::size_t>()]) {
      throw FormatError("transpose order " + order.dump() + " is not a permutation");
    }
    seen[v.get<std::size_t>()] = true;
    perm.push_back(v.get<std::int64_t>());
  }
  return perm;
}

}  // namespace

void register_sharding_codec(CodecRegistry& registry);  // sharding.cpp

void register_array_codecs(CodecRegistry& registry) {
  registry.add("bytes", [](const json& config, const CodecContext& ctx) {
    std::optional<Endian> endian;
    if (config.is_object() && config.contains("endian") && !config["endian"].is_null()) {
      const auto& e = config["endian"];
      if (e == "little")
        endian = Endian::kLittle;
      else if (e == "big")
        endian = Endian::kBig;
      else
        throw FormatError("bytes codec endian " + e.dump() + " is not 'little' or 'big'");
    }
    return std::make_shared<BytesCodec>(endian, ctx.chunk.dtype->size);
  });
  registry.add("transpose", [](const json& config, const CodecContext& ctx) {
    return std::make_shared<TransposeCodec>(parse_order(config, ctx.chunk.shape.size()));
  });
  register_sharding_codec(registry);
}

}  // namespace zarr_device::codecs
