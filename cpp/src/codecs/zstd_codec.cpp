// The "zstd" codec (Zarr v3 core) and numcodecs' "zstd": standard zstd frames.
#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "codecs/compression_common.hpp"
#include "codecs/zstd_frames.hpp"
#include "zarr_device/settings.hpp"

namespace zarr_device::codecs {
namespace {

struct CCtxDeleter {
  void operator()(ZSTD_CCtx* cctx) const { ZSTD_freeCCtx(cctx); }
};

ZSTD_CCtx* thread_cctx(std::string_view codec) {
  thread_local std::unique_ptr<ZSTD_CCtx, CCtxDeleter> cctx;
  if (!cctx) cctx.reset(ZSTD_createCCtx());
  if (!cctx) throw OutOfMemoryError(std::string(codec) + ": could not create a zstd context");
  ZSTD_CCtx_reset(cctx.get(), ZSTD_reset_session_and_parameters);
  return cctx.get();
}

struct FrameScan {
  std::size_t declared = 0;  // sum of the content sizes frames declare
  bool all_declared = true;  // every frame declares its content size
};

// Walks the frames (block headers only, no decompression) so sizes can be checked before any
// output is allocated, and truncation is reported as such.
FrameScan scan_frames(std::span<const std::byte> in, std::string_view codec) {
  if (in.empty()) throw CodecError(std::string(codec) + ": no data (empty input)");
  FrameScan scan;
  std::size_t offset = 0;
  for (int index = 0; offset < in.size(); ++index) {
    const std::byte* frame = in.data() + offset;
    const std::size_t frame_size = ZSTD_findFrameCompressedSize(frame, in.size() - offset);
    if (ZSTD_isError(frame_size)) {
      throw CodecError(std::string(codec) + ": frame " + std::to_string(index) + " at byte " +
                       std::to_string(offset) + " of " + std::to_string(in.size()) + ": " +
                       ZSTD_getErrorName(frame_size));
    }
    const unsigned long long content = ZSTD_getFrameContentSize(frame, frame_size);
    if (content == ZSTD_CONTENTSIZE_ERROR) {
      throw CodecError(std::string(codec) + ": frame " + std::to_string(index) +
                       " has an invalid header");
    }
    if (content == ZSTD_CONTENTSIZE_UNKNOWN) {
      scan.all_declared = false;
    } else {
      scan.declared = content > SIZE_MAX - scan.declared ? SIZE_MAX : scan.declared + content;
    }
    offset += frame_size;
  }
  return scan;
}

// The window a frame starting with `head` declares (RFC 8878, 3.1.1.1): its content size for a
// single-segment frame, else from its window descriptor; nullopt where `head` is not a frame's
// start (a skippable frame, too few bytes).
std::optional<std::size_t> frame_window(std::span<const std::byte> head) {
  constexpr std::uint32_t kMagic = 0xFD2FB528;
  if (head.size() < 6) return std::nullopt;
  std::uint32_t magic = 0;
  std::memcpy(&magic, head.data(), 4);
  if (magic != kMagic) return std::nullopt;
  const auto descriptor = static_cast<unsigned>(head[4]);
  if ((descriptor & 0x20U) != 0) {  // single segment: the window is the content
    const unsigned long long content = ZSTD_getFrameContentSize(head.data(), head.size());
    if (content == ZSTD_CONTENTSIZE_UNKNOWN || content == ZSTD_CONTENTSIZE_ERROR) {
      return std::nullopt;
    }
    return static_cast<std::size_t>(std::min<unsigned long long>(content, SIZE_MAX));
  }
  const auto window = static_cast<unsigned>(head[5]);
  const unsigned log = 10 + (window >> 3U);
  if (log >= 8 * sizeof(std::size_t) - 1) return std::nullopt;
  const std::size_t base = std::size_t{1} << log;
  return base + (base / 8) * (window & 7U);
}

// The stored bytes of a frame's first block, where it is a compressed one (RFC 8878: the frame
// header, magic, descriptor, window descriptor unless single segment, dictionary ID and content
// size as the descriptor says, then a 3-byte block header).
std::size_t first_compressed_block(std::span<const std::byte> head) {
  constexpr std::uint32_t kMagic = 0xFD2FB528;
  if (head.size() < 5) return 0;
  std::uint32_t magic = 0;
  std::memcpy(&magic, head.data(), 4);
  if (magic != kMagic) return 0;
  const auto descriptor = static_cast<unsigned>(head[4]);
  const bool single_segment = (descriptor & 0x20U) != 0;
  constexpr std::array<std::size_t, 4> kDictionaryBytes = {0, 1, 2, 4};
  constexpr std::array<std::size_t, 4> kContentBytes = {0, 2, 4, 8};
  const unsigned content_flag = descriptor >> 6U;
  const std::size_t header =
      5 + (single_segment ? 0 : 1) + kDictionaryBytes[descriptor & 3U] +
      (content_flag == 0 && single_segment ? 1 : kContentBytes[content_flag]);
  if (head.size() < header + 3) return 0;
  const std::uint32_t block = static_cast<std::uint32_t>(head[header]) |
                              (static_cast<std::uint32_t>(head[header + 1]) << 8U) |
                              (static_cast<std::uint32_t>(head[header + 2]) << 16U);
  constexpr unsigned kCompressed = 2;
  return ((block >> 1U) & 3U) == kCompressed ? block >> 3U : 0;
}

// One standard frame that declares exactly `decoded` bytes, without a content checksum: what
// nvCOMP's zstd decoder takes. It does not verify a frame's checksum, so a frame with one decodes
// on the CPU, which does.
bool one_frame_of(std::span<const std::byte> stored, std::size_t decoded) {
  ZSTD_frameHeader header{};
  return ZSTD_getFrameHeader(&header, stored.data(), stored.size()) == 0 &&
         header.frameType == ZSTD_frame && header.checksumFlag == 0 &&
         ZSTD_getFrameContentSize(stored.data(), stored.size()) == decoded &&
         ZSTD_findFrameCompressedSize(stored.data(), stored.size()) == stored.size();
}

class ZstdCodec final : public BytesToBytesCodec, public StreamDecoding {
 public:
  [[nodiscard]] const StreamDecoding* stream_decoding() const override { return this; }
  [[nodiscard]] std::size_t window_memory(std::span<const std::byte> head,
                                          std::size_t decoded) const override {
    return std::min(frame_window(head).value_or(decoded), decoded);
  }
  [[nodiscard]] std::unique_ptr<StreamDecoder> stream_decoder(
      std::size_t decoded_size, std::uint64_t encoded_size,
      StreamDecoder::Source source) const override {
    return make_zstd_stream(name_, decoded_size, encoded_size, std::move(source));
  }

  [[nodiscard]] std::optional<DeviceDecoding> device_decoding() const override {
    return DeviceDecoding{DeviceDecoding::Kind::kZstd, 0, 0, &one_frame_of,
                          &first_compressed_block};
  }
  // The device's frames carry no content checksum: a codec configured to store one encodes on
  // the CPU.
  [[nodiscard]] std::optional<DeviceCodec> device_encoding() const override {
    if (checksum_) return std::nullopt;
    return DeviceCodec::kZstd;
  }

  ZstdCodec(std::string name, MetadataStyle style, const nlohmann::json& configuration)
      : name_(std::move(name)), style_(style) {
    ConfigReader config(name_, configuration);
    // Out-of-range levels are clamped by libzstd, as numcodecs and zarr-python let them through.
    level_ = config.get_int("level", 0, INT_MIN, INT_MAX);
    checksum_ = config.get_bool("checksum", false);
  }

  [[nodiscard]] std::string_view name() const override { return name_; }

  [[nodiscard]] nlohmann::json to_json() const override {
    if (style_ == MetadataStyle::kNumcodecs) {
      return {{"id", "zstd"}, {"level", level_}, {"checksum", checksum_}};
    }
    return {{"name", "zstd"}, {"configuration", {{"level", level_}, {"checksum", checksum_}}}};
  }

  [[nodiscard]] Buffer decode(const Buffer& encoded, DecodedSize size) const override {
    const FrameScan scan = scan_frames(encoded.span(), name_);
    if (size.exact) {
      check_expected(scan, *size.exact, encoded.size());
      ByteArray out(*size.exact);
      decompress_into(encoded.span(), scan, out.span());
      return std::move(out).freeze();
    }
    const std::size_t limit = std::min(max_decoded_size(encoded.size()), size.at_most);
    if (scan.all_declared) {
      if (scan.declared > limit) {
        throw CodecError(name_ + ": frames declare " + std::to_string(scan.declared) +
                         " bytes, more than the " + std::to_string(limit) + " that " +
                         std::to_string(encoded.size()) +
                         " bytes of zstd data for this chunk can decode to");
      }
      if (scan.declared <= trusted_size_claim(encoded.size())) {
        ByteArray out(scan.declared);
        decompress_into(encoded.span(), scan, out.span());
        return std::move(out).freeze();
      }
    }
    // Declared sizes are enforced at each frame's end, so they can cap growth.
    const std::size_t growth_limit = scan.all_declared ? scan.declared : limit;
    const std::size_t initial = scan.all_declared ? trusted_size_claim(encoded.size())
                                                  : initial_guess(encoded.size(), limit);
    return decode_growing(encoded.span(), initial, growth_limit);
  }

  void decode_into(const Buffer& encoded, std::span<std::byte> out) const override {
    const FrameScan scan = scan_frames(encoded.span(), name_);
    check_expected(scan, out.size(), encoded.size());
    decompress_into(encoded.span(), scan, out);
  }

  [[nodiscard]] Buffer encode(const Buffer& decoded) const override {
    ZSTD_CCtx* cctx = thread_cctx(name_);
    set_parameter(cctx, ZSTD_c_compressionLevel, level_);
    set_parameter(cctx, ZSTD_c_checksumFlag, checksum_ ? 1 : 0);
    // zarr-python and numcodecs write the content size; readers use it to size their output.
    set_parameter(cctx, ZSTD_c_contentSizeFlag, 1);
    const std::size_t bound = ZSTD_compressBound(decoded.size());
    if (ZSTD_isError(bound)) {
      throw CodecError(name_ + ": cannot compress " + std::to_string(decoded.size()) +
                       " bytes in one frame");
    }
    const std::size_t block = block_bytes_for(decoded.size());
    if (block == 0) {
      ByteArray out(bound);
      static const std::byte kEmpty{};
      const std::size_t written = ZSTD_compress2(
          cctx, out.data(), out.size(), decoded.empty() ? &kEmpty : decoded.data(), decoded.size());
      if (ZSTD_isError(written)) throw_zstd_error(name_, written);
      return finish_output(std::move(out), written);
    }
    auto [out, written] = encode_in_blocks(cctx, decoded, block, bound);
    return finish_output(std::move(out), written);
  }

 private:
  // The bytes each block of a chunk of `size` bytes covers at most, 0 for libzstd's own blocks
  // (up to 128 KiB): zstd_block_bytes for chunks of up to kMostBlocks such blocks. In 16 KiB
  // blocks, 256 KiB-2 MiB chunks read faster on a GPU; larger chunks in that many or more small
  // blocks read slower (nvCOMP decodes only so many of a frame's blocks at once), so they keep
  // libzstd's (the benchmark notebook, "zstd blocks that GPUs decode sooner").
  static std::size_t block_bytes_for(std::size_t size) {
    constexpr std::size_t kMostBlocks = 128;
    const std::size_t block = settings().zstd_block_bytes;
    if (block == 0 || size <= block || size > kMostBlocks * block) return 0;
    return block;
  }

  // One frame whose blocks each cover at most `block` bytes of `decoded` (why: block_bytes_for):
  // a block is ended (a flush) every `block` bytes. The output bound allows a block header per
  // block beyond libzstd's own bound, which counts one per 128 KiB.
  std::pair<ByteArray, std::size_t> encode_in_blocks(ZSTD_CCtx* cctx, const Buffer& decoded,
                                                     std::size_t block, std::size_t bound) const {
    if (const std::size_t r = ZSTD_CCtx_setPledgedSrcSize(cctx, decoded.size()); ZSTD_isError(r)) {
      throw_zstd_error(name_, r);
    }
    ByteArray out(bound + 3 * (decoded.size() / block + 1));
    ZSTD_outBuffer output{out.data(), out.size(), 0};
    for (std::size_t at = 0; at < decoded.size(); at += block) {
      const std::size_t length = std::min(block, decoded.size() - at);
      ZSTD_inBuffer input{decoded.data() + at, length, 0};
      const ZSTD_EndDirective directive = at + length == decoded.size() ? ZSTD_e_end : ZSTD_e_flush;
      std::size_t left = 0;
      do {
        const std::size_t wrote = output.pos;
        const std::size_t read = input.pos;
        left = ZSTD_compressStream2(cctx, &output, &input, directive);
        if (ZSTD_isError(left)) throw_zstd_error(name_, left);
        if (left != 0 && output.pos == wrote && input.pos == read) {  // the output is full
          throw CodecError(name_ + ": the compressed frame outgrew its bound");  // not expected
        }
      } while (left != 0 || input.pos < input.size);
    }
    return {std::move(out), output.pos};
  }

  void set_parameter(ZSTD_CCtx* cctx, ZSTD_cParameter parameter, int value) const {
    const std::size_t result = ZSTD_CCtx_setParameter(cctx, parameter, value);
    if (ZSTD_isError(result)) throw_zstd_error(name_, result);
  }

  // Size checks that need no decompression, made before the output is allocated.
  void check_expected(const FrameScan& scan, std::size_t expected, std::size_t encoded_size) const {
    if (scan.all_declared ? scan.declared != expected : scan.declared > expected) {
      throw CodecError(name_ + ": frames declare " + std::to_string(scan.declared) +
                       " bytes, expected " + std::to_string(expected));
    }
    if (expected > max_decoded_size(encoded_size)) {
      throw CodecError(name_ + ": " + std::to_string(encoded_size) +
                       " bytes of zstd data cannot hold the expected " + std::to_string(expected) +
                       " bytes (truncated?)");
    }
  }

  void decompress_into(std::span<const std::byte> in, const FrameScan& scan,
                       std::span<std::byte> out) const {
    if (scan.all_declared) {
      // One shot: no window buffer, and libzstd checks each frame against its declared size.
      std::byte empty{};
      const std::size_t result = ZSTD_decompressDCtx(
          thread_dctx(name_), out.empty() ? &empty : out.data(), out.size(), in.data(), in.size());
      if (ZSTD_isError(result)) throw_zstd_error(name_, result);
      if (result != out.size()) throw_size_mismatch(name_, result, out.size());
      return;
    }
    const std::optional<std::size_t> written = stream_frames_into(in, out, name_);
    if (!written) {
      throw CodecError(name_ + ": data decodes to more than the expected " +
                       std::to_string(out.size()) + " bytes");
    }
    if (*written != out.size()) throw_size_mismatch(name_, *written, out.size());
  }

  // Output of unknown size: decoded into `initial` bytes, and when they do not hold it, decoded
  // again from the start into twice as many (never more than `limit`), so output memory grows with
  // the real output, not with what a header claims. The doubling bounds the repeated work at about
  // twice the output; only frames without a declared size, or declaring more than
  // trusted_size_claim, come here.
  Buffer decode_growing(std::span<const std::byte> in, std::size_t initial,
                        std::size_t limit) const {
    constexpr std::size_t kMinGrowth = 64 * 1024;
    std::size_t capacity = std::min(initial, limit);
    while (true) {
      {
        ByteArray out(capacity);
        if (const auto written = stream_frames_into(in, out.span(), name_)) {
          return finish_output(std::move(out), *written);
        }
      }  // freed before the larger buffer is allocated
      if (capacity >= limit) {
        throw CodecError(name_ + ": data decodes to more than " + std::to_string(limit) +
                         " bytes, the most its encoded size allows");
      }
      capacity =
          capacity >= limit / 2 ? limit : std::min(limit, std::max(capacity * 2, kMinGrowth));
    }
  }

  std::string name_;
  MetadataStyle style_;
  int level_ = 0;
  bool checksum_ = false;
};

}  // namespace

void register_zstd_codecs(CodecRegistry& registry) {
  registry.add("zstd", [](const nlohmann::json& configuration, const CodecContext&) {
    return std::make_shared<ZstdCodec>("zstd", MetadataStyle::kV3, configuration);
  });
  registry.add("numcodecs.zstd", [](const nlohmann::json& configuration, const CodecContext&) {
    return std::make_shared<ZstdCodec>("numcodecs.zstd", MetadataStyle::kNumcodecs, configuration);
  });
}

}  // namespace zarr_device::codecs
