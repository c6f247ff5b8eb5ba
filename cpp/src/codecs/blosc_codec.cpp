// The "blosc" codec (Zarr v3 core) and numcodecs' "blosc", through c-blosc 1.
#include <blosc.h>

#include <algorithm>
#include <array>
#include <climits>
#include <memory>
#include <set>

#include "codecs/blosc_frames.hpp"
#include "codecs/compression_common.hpp"

namespace zarr_device::codecs {
namespace {

constexpr std::array<std::string_view, 6> kCompressors = {"blosclz", "lz4",  "lz4hc",
                                                          "zstd",    "zlib", "snappy"};
constexpr std::array<std::string_view, 3> kShuffleNames = {"noshuffle", "shuffle", "bitshuffle"};

// The compressors this build of c-blosc has; distributions leave some out (snappy, usually).
bool compressor_available(std::string_view cname) {
  static const std::set<std::string, std::less<>> available = [] {
    std::set<std::string, std::less<>> names;
    std::string_view list = blosc_list_compressors();
    while (!list.empty()) {
      const std::size_t comma = list.find(',');
      names.emplace(list.substr(0, comma));
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    }
    return names;
  }();
  return available.contains(cname);
}

// The most a buffer of `compressed` bytes can decode to: blosc's inner compressors expand at most
// 32768:1 (zstd), and this allows four times that. Only matters when the caller gives no size.
std::size_t max_decoded_size(std::size_t compressed) {
  return saturating_mul_add(compressed + 1, std::size_t{128} * 1024, 0);
}

// The streams a device decodes of a Blosc chunk whose blocks `compressor` compressed
// (DeviceDecoding::streams, ::accepts).
template <BloscCompressor compressor>
bool device_streams(std::span<const std::byte> stored, std::size_t decoded, DeviceStreams& out) {
  std::string why;
  const auto layout = blosc_layout(stored, decoded, why);
  return layout && blosc_device_streams(*layout, compressor, out, why);
}

template <BloscCompressor compressor>
bool device_takes(std::span<const std::byte> stored, std::size_t decoded) {
  DeviceStreams streams;
  return device_streams<compressor>(stored, decoded, streams);
}

class BloscCodec final : public BytesToBytesCodec {
 public:
  BloscCodec(std::string name, MetadataStyle style, const nlohmann::json& configuration,
             const CodecContext& context)
      : name_(std::move(name)), style_(style) {
    ConfigReader config(name_, configuration);
    const bool v3 = style_ == MetadataStyle::kV3;
    // Defaults: zarr-python's BloscCodec (zstd, 5, shuffle by element size) and numcodecs'
    // Blosc (lz4, 5, byte shuffle).
    cname_ = config.get_string("cname", v3 ? "zstd" : "lz4");
    if (std::find(kCompressors.begin(), kCompressors.end(), cname_) == kCompressors.end()) {
      config.fail("cname",
                  "must be one of blosclz, lz4, lz4hc, zstd, zlib, snappy, not \"" + cname_ + "\"");
    }
    clevel_ = config.get_int("clevel", 5, 0, 9);
    const int element_size = context.chunk.dtype != nullptr ? context.chunk.dtype->size : 1;
    typesize_ = config.get_int("typesize", element_size, 1, INT_MAX);
    blocksize_ = config.get_int("blocksize", 0, 0, INT_MAX);
    const int by_typesize = typesize_ == 1 ? BLOSC_BITSHUFFLE : BLOSC_SHUFFLE;
    if (v3) {
      const std::string shuffle = config.get_string("shuffle", kShuffleNames[by_typesize]);
      const auto it = std::find(kShuffleNames.begin(), kShuffleNames.end(), shuffle);
      if (it == kShuffleNames.end()) {
        config.fail("shuffle", "must be noshuffle, shuffle or bitshuffle, not \"" + shuffle + "\"");
      }
      shuffle_setting_ = static_cast<int>(it - kShuffleNames.begin());
      shuffle_ = shuffle_setting_;
    } else {
      // -1 is numcodecs' AUTOSHUFFLE; kept as written so the metadata round-trips.
      shuffle_setting_ = config.get_int("shuffle", BLOSC_SHUFFLE, -1, 2);
      shuffle_ = shuffle_setting_ == -1 ? by_typesize : shuffle_setting_;
    }
  }

  [[nodiscard]] std::string_view name() const override { return name_; }

  [[nodiscard]] nlohmann::json to_json() const override {
    if (style_ == MetadataStyle::kNumcodecs) {
      return {{"id", "blosc"},
              {"cname", cname_},
              {"clevel", clevel_},
              {"shuffle", shuffle_setting_},
              {"blocksize", blocksize_}};
    }
    return {{"name", "blosc"},
            {"configuration",
             {{"cname", cname_},
              {"clevel", clevel_},
              {"shuffle", kShuffleNames[shuffle_]},
              {"typesize", typesize_},
              {"blocksize", blocksize_}}}};
  }

  // LZ4 (lz4hc writes the same format) and zstd blocks decode on a device, stream by stream; the
  // other compressors and bit shuffle on the CPU, through c-blosc.
  [[nodiscard]] std::optional<DeviceDecoding> device_decoding() const override {
    DeviceDecoding d;
    if (cname_ == "lz4" || cname_ == "lz4hc") {
      d.kind = DeviceCodec::kLz4;
      d.accepts = &device_takes<BloscCompressor::kLz4>;
      d.streams = &device_streams<BloscCompressor::kLz4>;
    } else if (cname_ == "zstd") {
      d.kind = DeviceCodec::kZstd;
      d.accepts = &device_takes<BloscCompressor::kZstd>;
      d.streams = &device_streams<BloscCompressor::kZstd>;
    } else {
      return std::nullopt;
    }
    return d;
  }

  [[nodiscard]] Buffer decode(const Buffer& encoded, DecodedSize size) const override {
    const std::size_t nbytes = validated_size(encoded);
    if (size.exact) {
      check_size(nbytes, *size.exact);
    } else if (nbytes > std::min(max_decoded_size(encoded.size()), size.at_most)) {
      throw CodecError(name_ + ": header declares " + std::to_string(nbytes) +
                       " bytes, more than " + std::to_string(encoded.size()) +
                       " bytes of blosc data for this chunk can decode to");
    }
    ByteArray out(nbytes);
    decompress(encoded, out.span());
    return std::move(out).freeze();
  }

  void decode_into(const Buffer& encoded, std::span<std::byte> out) const override {
    check_size(validated_size(encoded), out.size());
    decompress(encoded, out);
  }

  [[nodiscard]] Buffer encode(const Buffer& decoded) const override {
    if (!compressor_available(cname_)) {
      throw FormatError(name_ + ": this build of c-blosc lacks the '" + cname_ +
                        "' compressor (it has " + blosc_list_compressors() + ")");
    }
    if (decoded.size() > static_cast<std::size_t>(BLOSC_MAX_BUFFERSIZE)) {
      throw CodecError(name_ + ": cannot compress " + std::to_string(decoded.size()) +
                       " bytes; a blosc buffer holds at most " +
                       std::to_string(BLOSC_MAX_BUFFERSIZE));
    }
    ByteArray out(decoded.size() + BLOSC_MAX_OVERHEAD);
    static const std::byte kEmpty{};
    const int written = blosc_compress_ctx(
        clevel_, shuffle_, static_cast<std::size_t>(typesize_), decoded.size(),
        decoded.empty() ? &kEmpty : decoded.data(), out.data(), out.size(), cname_.c_str(),
        static_cast<std::size_t>(blocksize_), /*numinternalthreads=*/1);
    if (written <= 0) {
      throw CodecError(name_ + ": compression failed (blosc error " + std::to_string(written) +
                       ")");
    }
    return finish_output(std::move(out), static_cast<std::size_t>(written));
  }

 private:
  // The decoded size from the header, once the header is known to describe exactly `encoded`
  // (blosc reads the header without a length, so this must come first).
  std::size_t validated_size(const Buffer& encoded) const {
    if (encoded.size() < BLOSC_MIN_HEADER_LENGTH) {
      throw CodecError(name_ + ": data is " + std::to_string(encoded.size()) +
                       " bytes, shorter than the " + std::to_string(BLOSC_MIN_HEADER_LENGTH) +
                       "-byte blosc header");
    }
    std::size_t nbytes = 0;
    std::size_t cbytes = 0;
    std::size_t blocksize = 0;
    blosc_cbuffer_sizes(encoded.data(), &nbytes, &cbytes, &blocksize);
    if (cbytes != encoded.size()) {
      throw CodecError(name_ + ": header declares " + std::to_string(cbytes) +
                       " compressed bytes but " + std::to_string(encoded.size()) +
                       " are present (truncated or corrupt)");
    }
    if (blosc_cbuffer_validate(encoded.data(), encoded.size(), &nbytes) != 0) {
      throw CodecError(name_ + ": invalid blosc header (declares " + std::to_string(nbytes) +
                       " decoded bytes)");
    }
    return nbytes;
  }

  void check_size(std::size_t declared, std::size_t expected) const {
    if (declared != expected) {
      throw CodecError(name_ + ": header declares " + std::to_string(declared) +
                       " decoded bytes, expected " + std::to_string(expected));
    }
  }

  void decompress(const Buffer& encoded, std::span<std::byte> out) const {
    std::byte empty{};
    const int result = blosc_decompress_ctx(encoded.data(), out.empty() ? &empty : out.data(),
                                            out.size(), /*numinternalthreads=*/1);
    if (result < 0 || static_cast<std::size_t>(result) != out.size()) {
      const char* library = blosc_cbuffer_complib(encoded.data());
      std::string message = name_ + ": corrupt data (blosc error " + std::to_string(result) +
                            ", compressed with " +
                            (library != nullptr ? library
                                                : "an unknown "
                                                  "compressor") +
                            ")";
      // -5: the header names a compressor this build lacks.
      if (result == -5) message += "; this build of c-blosc lacks that compressor";
      throw CodecError(message);
    }
  }

  std::string name_;
  MetadataStyle style_;
  std::string cname_;
  int clevel_ = 5;
  int shuffle_setting_ = BLOSC_SHUFFLE;  // as configured
  int shuffle_ = BLOSC_SHUFFLE;          // what blosc is given
  int typesize_ = 1;
  int blocksize_ = 0;
};

}  // namespace

void register_blosc_codecs(CodecRegistry& registry) {
  registry.add("blosc", [](const nlohmann::json& configuration, const CodecContext& context) {
    return std::make_shared<BloscCodec>("blosc", MetadataStyle::kV3, configuration, context);
  });
  registry.add("numcodecs.blosc",
               [](const nlohmann::json& configuration, const CodecContext& context) {
                 return std::make_shared<BloscCodec>("numcodecs.blosc", MetadataStyle::kNumcodecs,
                                                     configuration, context);
               });
}

}  // namespace zarr_device::codecs
