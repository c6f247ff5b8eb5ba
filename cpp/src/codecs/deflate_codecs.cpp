// DEFLATE in its two wrappers: gzip members ("gzip" of Zarr v3, numcodecs "gzip") and zlib
// streams (numcodecs "zlib"), through zlib.
#include <zlib.h>

#include <algorithm>
#include <climits>
#include <memory>

#include "codecs/compression_common.hpp"

namespace zarr_device::codecs {
namespace {

enum class Wrapper { kGzip, kZlib };

int window_bits(Wrapper wrapper) { return wrapper == Wrapper::kGzip ? 16 + MAX_WBITS : MAX_WBITS; }

// DEFLATE cannot expand by more than 1032:1 (a 258-byte match in 2 bits), which bounds output
// when the caller gives no size.
std::size_t max_decoded_size(std::size_t encoded_size) {
  return saturating_mul_add(encoded_size, 1032, 1024);
}

std::string zlib_message(const z_stream& stream, int code) {
  if (stream.msg != nullptr) return stream.msg;
  return "zlib error " + std::to_string(code);
}

class InflateDecoder final : public InMemoryDecompressor {
 public:
  InflateDecoder(std::span<const std::byte> in, Wrapper wrapper, std::string_view codec)
      : in_(in), wrapper_(wrapper), codec_(codec) {
    const int result = inflateInit2(&stream_, window_bits(wrapper));
    if (result == Z_MEM_ERROR) {
      throw OutOfMemoryError(std::string(codec) + ": could not create a zlib stream");
    }
    if (result != Z_OK) {
      throw CodecError(std::string(codec) + ": " + zlib_message(stream_, result));
    }
  }
  ~InflateDecoder() override { inflateEnd(&stream_); }
  InflateDecoder(const InflateDecoder&) = delete;
  InflateDecoder& operator=(const InflateDecoder&) = delete;

  bool run(std::span<std::byte> out, std::size_t& pos) override {
    while (true) {
      if (stream_done_ && !start_next_member()) return true;
      if (pos == out.size()) return false;
      // zlib counts in 32-bit units: feed at most 4 GiB at a time.
      const auto in_chunk =
          static_cast<uInt>(std::min<std::size_t>(in_.size() - in_pos_, UINT_MAX));
      const auto out_chunk = static_cast<uInt>(std::min<std::size_t>(out.size() - pos, UINT_MAX));
      // zlib's next_in is not const-qualified, but inflate only reads it.
      stream_.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in_.data() + in_pos_));
      stream_.avail_in = in_chunk;
      stream_.next_out = reinterpret_cast<Bytef*>(out.data() + pos);
      stream_.avail_out = out_chunk;
      const int result = inflate(&stream_, Z_NO_FLUSH);
      const std::size_t consumed = in_chunk - stream_.avail_in;
      const std::size_t produced = out_chunk - stream_.avail_out;
      in_pos_ += consumed;
      pos += produced;
      switch (result) {
        case Z_STREAM_END:
          stream_done_ = true;
          continue;
        case Z_OK:
        case Z_BUF_ERROR:
          if (consumed == 0 && produced == 0) {
            throw CodecError(std::string(codec_) + (in_pos_ == in_.size()
                                                        ? ": data is truncated"
                                                        : ": decompression made no progress"));
          }
          continue;
        case Z_NEED_DICT:
          throw CodecError(std::string(codec_) +
                           ": the stream needs a preset dictionary, which Zarr does not define");
        case Z_MEM_ERROR:
          throw OutOfMemoryError(std::string(codec_) + ": zlib ran out of memory");
        case Z_DATA_ERROR:
          if (stream_.msg != nullptr && std::string_view(stream_.msg) == "incorrect data check") {
            throw ChecksumError(std::string(codec_) +
                                ": the stream's checksum does not match "
                                "its data");
          }
          [[fallthrough]];
        default:
          throw CodecError(std::string(codec_) + ": corrupt data at byte " +
                           std::to_string(in_pos_) + ": " + zlib_message(stream_, result));
      }
    }
  }

 private:
  // After a stream ends: true when another gzip member follows. Like Python's gzip module, zero
  // bytes between and after members are padding.
  bool start_next_member() {
    if (wrapper_ == Wrapper::kGzip) {
      while (in_pos_ < in_.size() && in_[in_pos_] == std::byte{0}) ++in_pos_;
    }
    if (in_pos_ == in_.size()) return false;
    if (wrapper_ == Wrapper::kZlib) {
      throw CodecError(std::string(codec_) + ": " + std::to_string(in_.size() - in_pos_) +
                       " bytes of unexpected data after the end of the zlib stream");
    }
    inflateReset(&stream_);
    stream_done_ = false;
    return true;
  }

  z_stream stream_{};
  std::span<const std::byte> in_;
  std::size_t in_pos_ = 0;
  Wrapper wrapper_;
  std::string_view codec_;
  bool stream_done_ = false;
};

// A gzip member (RFC 1952) whose trailer says it holds `decoded` bytes (modulo 2^32).
bool gzip_member_of(std::span<const std::byte> stored, std::size_t decoded) {
  const auto* p = reinterpret_cast<const unsigned char*>(stored.data());
  const std::size_t n = stored.size();
  if (n < 18 || p[0] != 0x1f || p[1] != 0x8b || p[2] != 8) return false;
  return load_le32(stored.data() + n - 4) == static_cast<std::uint32_t>(decoded);
}

// A zlib stream (RFC 1950) with a valid header and no preset dictionary; the device decoder takes
// the deflate stream between its 2-byte header and its Adler-32 trailer.
bool zlib_stream(std::span<const std::byte> stored, std::size_t /*decoded*/) {
  const auto* p = reinterpret_cast<const unsigned char*>(stored.data());
  return stored.size() >= 6 && (p[0] & 0x0f) == 8 && (p[1] & 0x20) == 0 &&
         ((p[0] << 8) | p[1]) % 31 == 0;
}

// The CRC-32 of a gzip member's decoded bytes, from its trailer (RFC 1952: CRC-32, then ISIZE,
// little-endian); of the last member where there are several, which then decode on the CPU (their
// decoded bytes' CRC-32 is not that one, or their size not the one nvCOMP reports).
std::uint32_t gzip_crc32(std::span<const std::byte> stored) {
  return stored.size() < 8 ? 0 : load_le32(stored.data() + stored.size() - 8);
}

// The Adler-32 of a zlib stream's decoded bytes, from its trailer (RFC 1950: big-endian).
std::uint32_t zlib_adler32(std::span<const std::byte> stored) {
  if (stored.size() < 4) return 0;
  const auto* p = reinterpret_cast<const unsigned char*>(stored.data() + stored.size() - 4);
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

class DeflateCodec final : public BytesToBytesCodec {
 public:
  [[nodiscard]] std::optional<DeviceDecoding> device_decoding() const override {
    if (wrapper_ == Wrapper::kGzip) {
      return DeviceDecoding{
          DeviceDecoding::Kind::kGzip, 0,          0, &gzip_member_of, nullptr, true, nullptr,
          DeviceCheck::kCrc32,         &gzip_crc32};
    }
    return DeviceDecoding{DeviceDecoding::Kind::kDeflate,
                          2,
                          4,
                          &zlib_stream,
                          nullptr,
                          true,
                          nullptr,
                          DeviceCheck::kAdler32,
                          &zlib_adler32};
  }

  DeflateCodec(std::string name, MetadataStyle style, Wrapper wrapper, int default_level,
               const nlohmann::json& configuration)
      : name_(std::move(name)), style_(style), wrapper_(wrapper) {
    level_ = ConfigReader(name_, configuration).get_int("level", default_level, -1, 9);
  }

  [[nodiscard]] std::string_view name() const override { return name_; }

  [[nodiscard]] nlohmann::json to_json() const override {
    const char* id = wrapper_ == Wrapper::kGzip ? "gzip" : "zlib";
    if (style_ == MetadataStyle::kNumcodecs) return {{"id", id}, {"level", level_}};
    return {{"name", id}, {"configuration", {{"level", level_}}}};
  }

  [[nodiscard]] Buffer decode(const Buffer& encoded, DecodedSize size) const override {
    check_input(encoded, size.exact);
    InflateDecoder decoder(encoded.span(), wrapper_, name_);
    if (size.exact) {
      ByteArray out(*size.exact);
      decode_stream_exact(decoder, out.span(), name_);
      return std::move(out).freeze();
    }
    const std::size_t limit = std::min(max_decoded_size(encoded.size()), size.at_most);
    return decode_stream_growing(decoder, initial_size(encoded, limit), limit, name_);
  }

  void decode_into(const Buffer& encoded, std::span<std::byte> out) const override {
    check_input(encoded, out.size());
    InflateDecoder decoder(encoded.span(), wrapper_, name_);
    decode_stream_exact(decoder, out, name_);
  }

  [[nodiscard]] Buffer encode(const Buffer& decoded) const override {
    z_stream stream{};
    int result =
        deflateInit2(&stream, level_, Z_DEFLATED, window_bits(wrapper_), 8, Z_DEFAULT_STRATEGY);
    if (result == Z_MEM_ERROR) {
      throw OutOfMemoryError(name_ + ": could not create a zlib stream");
    }
    if (result != Z_OK) throw CodecError(name_ + ": " + zlib_message(stream, result));
    const std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&stream, deflateEnd);

    ByteArray out(deflateBound(&stream, decoded.size()));
    std::size_t in_pos = 0;
    std::size_t out_pos = 0;
    do {
      const auto in_chunk =
          static_cast<uInt>(std::min<std::size_t>(decoded.size() - in_pos, UINT_MAX));
      const auto out_chunk =
          static_cast<uInt>(std::min<std::size_t>(out.size() - out_pos, UINT_MAX));
      stream.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(decoded.data() + in_pos));
      stream.avail_in = in_chunk;
      stream.next_out = reinterpret_cast<Bytef*>(out.data() + out_pos);
      stream.avail_out = out_chunk;
      const bool last = in_pos + in_chunk == decoded.size();
      result = deflate(&stream, last ? Z_FINISH : Z_NO_FLUSH);
      in_pos += in_chunk - stream.avail_in;
      out_pos += out_chunk - stream.avail_out;
      // deflateBound is a true bound, so running out of room means something is broken.
      if (result != Z_OK && result != Z_STREAM_END) {
        throw CodecError(name_ + ": compression failed: " + zlib_message(stream, result));
      }
    } while (result != Z_STREAM_END);
    return finish_output(std::move(out), out_pos);
  }

 private:
  void check_input(const Buffer& encoded, std::optional<std::size_t> decoded_size) const {
    if (encoded.empty()) throw CodecError(name_ + ": no data (empty input)");
    if (decoded_size && *decoded_size > max_decoded_size(encoded.size())) {
      throw CodecError(name_ + ": " + std::to_string(encoded.size()) +
                       " bytes of DEFLATE data cannot hold the expected " +
                       std::to_string(*decoded_size) + " bytes (truncated?)");
    }
  }

  // A gzip member ends with its size modulo 2^32, which is the whole output when there is one
  // member; only a hint, since it cannot be trusted.
  std::size_t initial_size(const Buffer& encoded, std::size_t limit) const {
    constexpr std::size_t kGzipTrailer = 8;
    if (wrapper_ == Wrapper::kGzip && encoded.size() >= 18) {
      const std::size_t hinted = load_le32(encoded.data() + encoded.size() - kGzipTrailer + 4);
      if (hinted <= std::min(limit, trusted_size_claim(encoded.size()))) return hinted;
    }
    return initial_guess(encoded.size(), limit);
  }

  std::string name_;
  MetadataStyle style_;
  Wrapper wrapper_;
  int level_ = 1;
};

}  // namespace

void register_deflate_codecs(CodecRegistry& registry) {
  // Defaults: zarr-python's GzipCodec uses 5, numcodecs' GZip and Zlib use 1.
  registry.add("gzip", [](const nlohmann::json& configuration, const CodecContext&) {
    return std::make_shared<DeflateCodec>("gzip", MetadataStyle::kV3, Wrapper::kGzip, 5,
                                          configuration);
  });
  registry.add("numcodecs.gzip", [](const nlohmann::json& configuration, const CodecContext&) {
    return std::make_shared<DeflateCodec>("numcodecs.gzip", MetadataStyle::kNumcodecs,
                                          Wrapper::kGzip, 1, configuration);
  });
  registry.add("numcodecs.zlib", [](const nlohmann::json& configuration, const CodecContext&) {
    return std::make_shared<DeflateCodec>("numcodecs.zlib", MetadataStyle::kNumcodecs,
                                          Wrapper::kZlib, 1, configuration);
  });
}

}  // namespace zarr_device::codecs
