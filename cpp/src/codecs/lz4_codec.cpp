// numcodecs' "lz4": a 4-byte little-endian decoded size, then one raw LZ4 block.
#include <lz4.h>

#include <climits>
#include <memory>

#include "codecs/compression_common.hpp"

namespace zarr_device::codecs {
namespace {

constexpr std::size_t kHeaderSize = 4;

// An LZ4 block expands at most 255:1 (each extra match-length byte adds 255 bytes of output).
std::size_t max_decoded_size(std::size_t compressed) {
  return saturating_mul_add(compressed, 255, 64);
}

// numcodecs' LZ4 chunk: a 4-byte little-endian size, then one LZ4 block of that many bytes.
bool lz4_block_of(std::span<const std::byte> stored, std::size_t decoded) {
  return stored.size() >= kHeaderSize && load_le32(stored.data()) == decoded;
}

class Lz4Codec final : public BytesToBytesCodec {
 public:
  [[nodiscard]] std::optional<DeviceDecoding> device_decoding() const override {
    return DeviceDecoding{DeviceDecoding::Kind::kLz4, kHeaderSize, 0, &lz4_block_of};
  }

  explicit Lz4Codec(const nlohmann::json& configuration) {
    // LZ4 treats values below 1 as 1 and clamps large ones, so any integer is accepted.
    acceleration_ =
        ConfigReader(name(), configuration).get_int("acceleration", 1, INT_MIN, INT_MAX);
  }

  [[nodiscard]] std::string_view name() const override { return "numcodecs.lz4"; }

  [[nodiscard]] nlohmann::json to_json() const override {
    return {{"id", "lz4"}, {"acceleration", acceleration_}};
  }

  [[nodiscard]] Buffer decode(const Buffer& encoded, DecodedSize size) const override {
    const std::size_t declared = declared_size(encoded, size.exact);
    if (declared > size.at_most) {
      throw CodecError(std::string(name()) + ": header declares " + std::to_string(declared) +
                       " decoded bytes, more than the " + std::to_string(size.at_most) +
                       " this chunk can hold");
    }
    ByteArray out(declared);
    decompress(encoded, out.span());
    return std::move(out).freeze();
  }

  void decode_into(const Buffer& encoded, std::span<std::byte> out) const override {
    declared_size(encoded, out.size());
    decompress(encoded, out);
  }

  [[nodiscard]] Buffer encode(const Buffer& decoded) const override {
    if (decoded.size() > static_cast<std::size_t>(LZ4_MAX_INPUT_SIZE)) {
      throw CodecError(std::string(name()) + ": cannot compress " + std::to_string(decoded.size()) +
                       " bytes; an LZ4 block holds at most " + std::to_string(LZ4_MAX_INPUT_SIZE));
    }
    const int size = static_cast<int>(decoded.size());
    const int bound = LZ4_compressBound(size);
    ByteArray out(kHeaderSize + static_cast<std::size_t>(bound));
    store_le32(out.data(), static_cast<std::uint32_t>(size));
    static const char kEmpty = 0;
    const int written = LZ4_compress_fast(
        decoded.empty() ? &kEmpty : reinterpret_cast<const char*>(decoded.data()),
        reinterpret_cast<char*>(out.data() + kHeaderSize), size, bound, acceleration_);
    if (written <= 0) throw CodecError(std::string(name()) + ": compression failed");
    return finish_output(std::move(out), kHeaderSize + static_cast<std::size_t>(written));
  }

 private:
  // The size the header declares, checked against what the caller expects and against what the
  // block could possibly hold, before anything is allocated.
  std::size_t declared_size(const Buffer& encoded, std::optional<std::size_t> expected) const {
    if (encoded.size() < kHeaderSize) {
      throw CodecError(std::string(name()) + ": data is " + std::to_string(encoded.size()) +
                       " bytes, shorter than the 4-byte size header");
    }
    const std::size_t declared = load_le32(encoded.data());
    const std::size_t compressed = encoded.size() - kHeaderSize;
    if (expected && declared != *expected) {
      throw CodecError(std::string(name()) + ": header declares " + std::to_string(declared) +
                       " decoded bytes, expected " + std::to_string(*expected));
    }
    if (declared > static_cast<std::size_t>(INT_MAX) ||
        compressed > static_cast<std::size_t>(INT_MAX) || declared > max_decoded_size(compressed)) {
      throw CodecError(std::string(name()) + ": header declares " + std::to_string(declared) +
                       " decoded bytes, more than " + std::to_string(compressed) +
                       " bytes of LZ4 data can hold");
    }
    return declared;
  }

  void decompress(const Buffer& encoded, std::span<std::byte> out) const {
    char empty = 0;
    const int result = LZ4_decompress_safe(
        reinterpret_cast<const char*>(encoded.data() + kHeaderSize),
        out.empty() ? &empty : reinterpret_cast<char*>(out.data()),
        static_cast<int>(encoded.size() - kHeaderSize), static_cast<int>(out.size()));
    if (result < 0) {
      throw CodecError(std::string(name()) + ": corrupt or truncated LZ4 block");
    }
    if (static_cast<std::size_t>(result) != out.size()) {
      throw_size_mismatch(name(), static_cast<std::size_t>(result), out.size());
    }
  }

  int acceleration_ = 1;
};

}  // namespace

void register_lz4_codecs(CodecRegistry& registry) {
  registry.add("numcodecs.lz4", [](const nlohmann::json& configuration, const CodecContext&) {
    return std::make_shared<Lz4Codec>(configuration);
  });
}

}  // namespace zarr_device::codecs
