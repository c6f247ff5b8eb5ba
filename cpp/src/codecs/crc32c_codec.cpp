// The "crc32c" codec (Zarr v3 core): the data followed by its CRC-32C, 4 bytes little endian.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

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

// The data before the checksum handed out as it is pulled (views of the source's bytes: no
// copy, unless into a caller's window), the checksum computed over it and compared at the end.
// What a decoder after it makes of damaged data is settled by the chain (CodecChain::
// stream_decoder), which asks this checksum first, as when the chunk is verified whole first.
class Crc32cStream final : public StreamDecoder {
 public:
  Crc32cStream(std::size_t decoded, std::uint64_t encoded, Source source)
      : encoded_(encoded),
        payload_((check_length(encoded), encoded - kChecksumSize)),
        left_(encoded),
        source_(std::move(source)) {
    if (decoded != payload_) throw_size_mismatch("crc32c", payload_, decoded);
  }

  std::span<const std::byte> next(std::size_t most) override {
    if (seen_ == payload_) {
      // Asked again after the data: the checksum is taken now, so that draining a chain's
      // checksums (next() until empty) reads each one's whole encoding.
      take_checksum();
      return {};
    }
    if (most == 0) return {};
    if (in_.empty()) pull();
    const auto n =
        static_cast<std::size_t>(std::min<std::uint64_t>({most, in_.size(), payload_ - seen_}));
    const auto data = in_.first(n);
    in_ = in_.subspan(n);
    crc_ = crc32c(data, crc_);
    seen_ += n;
    return data;
  }

  void fill(std::span<std::byte> window) override {
    while (!window.empty()) {
      const auto data = next(window.size());
      if (data.empty()) {
        throw CodecError("crc32c: a window past its " + std::to_string(payload_) + " bytes");
      }
      std::memcpy(window.data(), data.data(), data.size());
      window = window.subspan(data.size());
    }
  }

  void finish() override {
    if (seen_ != payload_) {
      throw CodecError("crc32c: finished after " + std::to_string(seen_) + " of its " +
                       std::to_string(payload_) + " bytes");
    }
    take_checksum();
    check_checksum(load_le32(checksum_.data()), crc_, payload_);
  }

 private:
  void take_checksum() {
    while (checksum_seen_ < kChecksumSize) {
      if (in_.empty()) pull();
      const std::size_t n = std::min(kChecksumSize - checksum_seen_, in_.size());
      std::memcpy(checksum_.data() + checksum_seen_, in_.data(), n);
      in_ = in_.subspan(n);
      checksum_seen_ += n;
    }
  }

  void pull() {
    const auto piece = left_ > 0 ? source_() : std::span<const std::byte>{};
    if (piece.empty()) {
      throw CodecError("crc32c: data is " + std::to_string(encoded_ - left_) + " bytes, expected " +
                       std::to_string(encoded_));
    }
    in_ = piece.first(static_cast<std::size_t>(std::min<std::uint64_t>(piece.size(), left_)));
    left_ -= in_.size();
  }

  std::uint64_t encoded_;
  std::uint64_t payload_;
  std::uint64_t left_;  // encoded bytes not yet pulled
  Source source_;
  std::span<const std::byte> in_;  // pulled, not yet handed out
  std::uint64_t seen_ = 0;         // data handed out
  std::uint32_t crc_ = 0;          // of it
  std::array<std::byte, kChecksumSize> checksum_{};
  std::size_t checksum_seen_ = 0;
};

class Crc32cCodec final : public BytesToBytesCodec, public StreamDecoding {
 public:
  [[nodiscard]] const StreamDecoding* stream_decoding() const override { return this; }
  [[nodiscard]] std::size_t window_memory(std::span<const std::byte> /*head*/,
                                          std::size_t /*decoded*/) const override {
    return 0;  // its data is handed out where it was read
  }
  [[nodiscard]] std::unique_ptr<StreamDecoder> stream_decoder(
      std::size_t decoded_size, std::uint64_t encoded_size,
      StreamDecoder::Source source) const override {
    return std::make_unique<Crc32cStream>(decoded_size, encoded_size, std::move(source));
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
