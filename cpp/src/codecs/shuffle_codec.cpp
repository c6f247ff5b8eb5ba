// numcodecs' shuffle codec ("numcodecs.shuffle" in Zarr v3, as zarr-python writes it; "shuffle" in
// numcodecs' own terms): the chunk's bytes byte-shuffled whole (codecs/byte_shuffle.hpp), so that
// the compressor after it sees the slowly varying bytes of numbers together. bf16 weights, whose
// low byte is close to random, compress markedly better so.
#include <algorithm>
#include <memory>
#include <string>

#include "codecs/byte_shuffle.hpp"
#include "codecs/compression_common.hpp"

namespace zarr_device::codecs {
namespace {

class ShuffleCodec final : public BytesToBytesCodec {
 public:
  // Without an element size, zarr-python takes the array's item size (numcodecs' own default,
  // 4, applies only outside Zarr), and writes it down.
  ShuffleCodec(const nlohmann::json& configuration, std::size_t item_size) {
    elementsize_ = static_cast<std::size_t>(
        ConfigReader(name(), configuration)
            .get_int("elementsize", static_cast<int>(item_size), 0, kMostElementSize));
  }

  [[nodiscard]] std::string_view name() const override { return "numcodecs.shuffle"; }

  [[nodiscard]] nlohmann::json to_json() const override {
    return {{"id", "shuffle"}, {"elementsize", elementsize_}};
  }

  [[nodiscard]] std::size_t device_unshuffle() const override {
    return std::max<std::size_t>(elementsize_, 1);
  }

  [[nodiscard]] std::optional<std::size_t> encoded_size(std::size_t decoded) const override {
    return decoded;
  }

  [[nodiscard]] Buffer decode(const Buffer& encoded, DecodedSize size) const override {
    check(encoded.size(), size.exact);
    if (encoded.size() > size.at_most) {
      throw CodecError(std::string(name()) + ": chunk holds " + std::to_string(encoded.size()) +
                       " bytes, more than the " + std::to_string(size.at_most) + " its chunk can");
    }
    ByteArray out(encoded.size());
    byte_unshuffle(encoded.data(), out.data(), encoded.size(), elementsize_);
    return std::move(out).freeze();
  }

  void decode_into(const Buffer& encoded, std::span<std::byte> out) const override {
    check(encoded.size(), out.size());
    byte_unshuffle(encoded.data(), out.data(), out.size(), elementsize_);
  }

  [[nodiscard]] Buffer encode(const Buffer& decoded) const override {
    check(decoded.size(), std::nullopt);
    ByteArray out(decoded.size());
    byte_shuffle(decoded.data(), out.data(), decoded.size(), elementsize_);
    return std::move(out).freeze();
  }

 private:
  static constexpr int kMostElementSize = 1 << 20;

  // numcodecs refuses a buffer that is not a whole number of elements (element sizes above 1).
  void check(std::size_t bytes, std::optional<std::size_t> expected) const {
    if (expected && bytes != *expected) throw_size_mismatch(name(), bytes, *expected);
    if (elementsize_ > 1 && bytes % elementsize_ != 0) {
      throw CodecError(std::string(name()) + ": " + std::to_string(bytes) +
                       " bytes are not a whole number of " + std::to_string(elementsize_) +
                       "-byte elements");
    }
  }

  std::size_t elementsize_ = 4;
};

}  // namespace

void register_shuffle_codec(CodecRegistry& registry) {
  registry.add("numcodecs.shuffle",
               [](const nlohmann::json& configuration, const CodecContext& context) {
                 return std::make_shared<ShuffleCodec>(configuration, context.chunk.dtype->size);
               });
}

}  // namespace zarr_device::codecs
