// The "crc32c" codec (Zarr v3 core): the data followed by its CRC-32C, 4 bytes little endian.
#include <algorithm>
#include <array>
#include <cstdio>
#include <exception>
#include <memory>

#include "codecs/compression_common.hpp"
#include "codecs/crc32c.hpp"

namespace zarr_device::codecs {
namespace {

constexpr std::size_t kChecksumSize = 4;

std::string hex32(std::uint32_t value) {
  char text[11];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

void check_length(std::uint64_t encoded_size) {
  if (encoded_size < kChecksumSize) {
    throw CodecError("crc32c: data is " + std::to_string(encoded_size) +
                     " bytes, shorter than the 4-byte checksum");
  }
}

void check_checksum(std::uint32_t stored, std::uint32_t computed, std::uint64_t size) {
  if (stored != computed) {
    throw ChecksumError("crc32c: checksum mismatch: stored " + hex32(stored) + ", computed " +
                        hex32(computed) + " over " + std::to_string(size) + " bytes");
  }
}

// The data before the checksum handed on to `next` as it comes, the checksum computed over it
// and compared at the end. Damaged data is reported as a checksum mismatch, as when the chunk is
// verified whole before it is decoded, even where `next` fails on it first: its error waits
// until the checksum is known.
class Crc32cPieces final : public PieceDecoder {
 public:
  Crc32cPieces(std::unique_ptr<PieceDecoder> next, std::uint64_t encoded_size)
      : next_(std::move(next)),
        payload_((check_length(encoded_size), encoded_size - kChecksumSize)) {}

  void feed(std::span<const std::byte> piece) override {
    const auto data =
        static_cast<std::size_t>(std::min<std::uint64_t>(piece.size(), payload_ - seen_));
    crc_ = crc32c(piece.first(data), crc_);
    seen_ += data;
    if (!failure_ && data > 0) {
      try {
        next_->feed(piece.first(data));
      } catch (const Error&) {
        failure_ = std::current_exception();
      }
    }
    for (const std::byte b : piece.subspan(data)) {
      if (trailer_seen_ < kChecksumSize) trailer_[trailer_seen_] = b;
      ++trailer_seen_;
    }
  }

  void finish() override {
    if (seen_ != payload_ || trailer_seen_ != kChecksumSize) {
      throw CodecError("crc32c: data is " + std::to_string(seen_ + trailer_seen_) +
                       " bytes, expected " + std::to_string(payload_ + kChecksumSize));
    }
    check_checksum(load_le32(trailer_.data()), crc_, payload_);
    if (failure_) std::rethrow_exception(failure_);
    next_->finish();
  }

 private:
  std::unique_ptr<PieceDecoder> next_;
  std::uint64_t payload_;
  std::uint64_t seen_ = 0;
  std::uint32_t crc_ = 0;
  std::array<std::byte, kChecksumSize> trailer_{};
  std::size_t trailer_seen_ = 0;
  std::exception_ptr failure_;
};

class Crc32cCodec final : public BytesToBytesCodec {
 public:
  [[nodiscard]] std::unique_ptr<PieceDecoder> decoder_onto(
      std::unique_ptr<PieceDecoder> next, std::uint64_t encoded_size) const override {
    return std::make_unique<Crc32cPieces>(std::move(next), encoded_size);
  }

  // Verified on the CPU (crc32c.hpp) by readers that move the rest of the chunk to a device.
  [[nodiscard]] std::optional<DeviceDecoding> device_decoding() const override {
    return DeviceDecoding{DeviceDecoding::Kind::kChecksum, 0, kChecksumSize, nullptr};
  }

  [[nodiscard]] std::string_view name() const override { return "crc32c"; }

  [[nodiscard]] bool decodes_to_view() const override { return true; }

  // zarr-python writes no "configuration" for it.
  [[nodiscard]] nlohmann::json to_json() const override { return {{"name", "crc32c"}}; }

  [[nodiscard]] Buffer decode(const Buffer& encoded, DecodedSize decoded) const override {
    const std::size_t size = payload_size(encoded, decoded.exact);
    if (size > decoded.at_most) {
      throw CodecError("crc32c: chunk holds " + std::to_string(size) + " bytes, more than the " +
                       std::to_string(decoded.at_most) + " its chunk can");
    }
    verify(encoded);
    return encoded.slice(0, size);
  }

  void decode_into(const Buffer& encoded, std::span<std::byte> out) const override {
    const std::size_t size = payload_size(encoded, out.size());
    verify(encoded);
    if (size > 0) std::memcpy(out.data(), encoded.data(), size);
  }

  [[nodiscard]] Buffer encode(const Buffer& decoded) const override {
    ByteArray out(decoded.size() + kChecksumSize);
    if (!decoded.empty()) std::memcpy(out.data(), decoded.data(), decoded.size());
    store_le32(out.data() + decoded.size(), crc32c(decoded.span()));
    return std::move(out).freeze();
  }

  [[nodiscard]] std::size_t suffix_size() const override { return kChecksumSize; }

  [[nodiscard]] std::optional<Buffer> suffix(const Buffer& decoded) const override {
    ByteArray out(kChecksumSize);
    store_le32(out.data(), crc32c(decoded.span()));
    return std::move(out).freeze();
  }

  [[nodiscard]] std::optional<std::size_t> encoded_size(std::size_t decoded) const override {
    return decoded + kChecksumSize;
  }

 private:
  std::size_t payload_size(const Buffer& encoded, std::optional<std::size_t> expected) const {
    check_length(encoded.size());
    const std::size_t size = encoded.size() - kChecksumSize;
    if (expected && size != *expected) throw_size_mismatch(name(), size, *expected);
    return size;
  }

  static void verify(const Buffer& encoded) {
    const std::size_t size = encoded.size() - kChecksumSize;
    const std::uint32_t stored = load_le32(encoded.data() + size);
    check_checksum(stored, crc32c(encoded.span().first(size)), size);
  }
};

}  // namespace

void register_crc32c_codec(CodecRegistry& registry) {
  registry.add("crc32c", [](const nlohmann::json& configuration, const CodecContext&) {
    ConfigReader config("crc32c", configuration);  // rejects a configuration that is no object
    return std::make_shared<Crc32cCodec>();
  });
}

}  // namespace zarr_device::codecs
