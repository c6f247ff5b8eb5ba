// The "zstd" codec (Zarr v3 core) and numcodecs' "zstd": standard zstd frames.
// For ZSTD_d_stableOutBuffer (a parameter value; no static-only symbol is linked).
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "codecs/compression_common.hpp"
#include "zarr_device/settings.hpp"

namespace zarr_device::codecs {
namespace {

[[noreturn]] void throw_zstd_error(std::string_view codec, std::size_t code) {
  if (ZSTD_getErrorCode(code) == ZSTD_error_checksum_wrong) {
    throw ChecksumError(std::string(codec) +
                        ": the frame's content checksum does not match its data");
  }
  throw CodecError(std::string(codec) + ": " + ZSTD_getErrorName(code));
}

struct DCtxDeleter {
  void operator()(ZSTD_DCtx* dctx) const { ZSTD_freeDCtx(dctx); }
};
struct CCtxDeleter {
  void operator()(ZSTD_CCtx* cctx) const { ZSTD_freeCCtx(cctx); }
};

// One context per thread: creating one costs allocations, and codecs are shared across threads.
ZSTD_DCtx* thread_dctx(std::string_view codec) {
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxDeleter> dctx;
  if (!dctx) dctx.reset(ZSTD_createDCtx());
  if (!dctx) throw OutOfMemoryError(std::string(codec) + ": could not create a zstd context");
  // A decode that threw may have left the context mid-frame.
  ZSTD_DCtx_reset(dctx.get(), ZSTD_reset_session_and_parameters);
  return dctx.get();
}

ZSTD_CCtx* thread_cctx(std::string_view codec) {
  thread_local std::unique_ptr<ZSTD_CCtx, CCtxDeleter> cctx;
  if (!cctx) cctx.reset(ZSTD_createCCtx());
  if (!cctx) throw OutOfMemoryError(std::string(codec) + ": could not create a zstd context");
  ZSTD_CCtx_reset(cctx.get(), ZSTD_reset_session_and_parameters);
  return cctx.get();
}

// The most `encoded_size` bytes of zstd can decode to. Every block that produces output takes at
// least 4 bytes (3 of header, 1 of content: an RLE block) and produces at most 128 KiB; dividing
// by 3 leaves a margin. Bounds output when frames do not declare their size, and exposes frames
// that declare more than they can hold.
std::size_t max_decoded_size(std::size_t encoded_size) {
  return saturating_mul_add(encoded_size / 3 + 1, std::size_t{128} * 1024, 0);
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

// Streams frames into `out`, zstd writing straight into it (its stable-output mode) instead of
// through a window buffer of its own. Why: a context keeps that buffer from one decode to the
// next, and whether a frame that reaches back past its window decodes would then depend on the
// decodes before it. Written straight into `out`, each frame sees all of its own output, as
// one-shot decoding does, so every path accepts the same data. A frame that declares its size
// must produce exactly that: libzstd's streaming decoder does not check it when the output buffer
// is smaller than the declared size (1.5.4: a frame ending in an empty last block "completes"
// early). The frames may come in pieces (a piece may end inside a frame's header: that header is
// held until it is whole, to read the size it declares).
class FrameStream {
 public:
  // `total`: the bytes of frames that will be fed in all.
  FrameStream(ZSTD_DCtx* dctx, std::span<std::byte> out, std::uint64_t total,
              std::string_view codec)
      : dctx_(dctx),
        codec_(codec),
        output_{out.empty() ? &empty_ : out.data(), out.size(), 0},
        remaining_(total) {
    const std::size_t stable = ZSTD_DCtx_setParameter(dctx, ZSTD_d_stableOutBuffer, 1);
    if (ZSTD_isError(stable)) throw_zstd_error(codec_, stable);
  }

  // Decodes the next bytes of the frames; false when `out` cannot hold what they decode to.
  bool feed(std::span<const std::byte> in) {
    remaining_ -= std::min<std::uint64_t>(remaining_, in.size());
    while (true) {
      if (in_frame_) {
        if (in.empty()) return true;
        if (!decode_some(in)) return false;
        continue;
      }
      // A frame starts: its header (all of it, or up to the end of the data) tells its size.
      const auto need = static_cast<std::size_t>(
          std::min<std::uint64_t>(header_.size(), held_ + in.size() + remaining_));
      const std::size_t take = std::min(need - held_, in.size());
      if (take > 0) std::memcpy(header_.data() + held_, in.data(), take);
      held_ += take;
      in = in.subspan(take);
      if (need == 0 || held_ < need) return true;  // no more data, or the rest comes later
      declared_ = ZSTD_getFrameContentSize(header_.data(), held_);
      frame_start_ = output_.pos;
      in_frame_ = true;
      std::span<const std::byte> held{header_.data(), held_};
      held_ = 0;
      while (!held.empty() && in_frame_) {
        if (!decode_some(held)) return false;
      }
      if (!held.empty()) {  // the frame ended inside them: the rest starts the next frame
        std::memmove(header_.data(), held.data(), held.size());
        held_ = held.size();
      }
    }
  }

  // After the last bytes: the bytes written (CodecError when the last frame is incomplete).
  [[nodiscard]] std::size_t finish() const {
    if (in_frame_ || held_ > 0) {
      throw CodecError(std::string(codec_) + ": data is truncated (the last frame is incomplete)");
    }
    return output_.pos;
  }

 private:
  // One call of the decoder on the front of `in`, which it then drops from `in`; false when the
  // output is full and more is to be written.
  bool decode_some(std::span<const std::byte>& in) {
    ZSTD_inBuffer input{in.data(), in.size(), 0};
    const std::size_t out_before = output_.pos;
    const std::size_t result = ZSTD_decompressStream(dctx_, &output_, &input);
    if (ZSTD_isError(result)) {
      if (ZSTD_getErrorCode(result) == ZSTD_error_dstSize_tooSmall) return false;
      throw_zstd_error(codec_, result);
    }
    in = in.subspan(input.pos);
    if (result == 0) {  // the frame is complete
      const std::size_t produced = output_.pos - frame_start_;
      if (declared_ != ZSTD_CONTENTSIZE_UNKNOWN && declared_ != ZSTD_CONTENTSIZE_ERROR &&
          produced != declared_) {
        throw CodecError(std::string(codec_) + ": a frame declares " + std::to_string(declared_) +
                         " bytes and holds " + std::to_string(produced));
      }
      in_frame_ = false;
      return true;
    }
    if (input.pos == 0 && output_.pos == out_before) {
      if (output_.pos == output_.size) return false;
      throw CodecError(std::string(codec_) + ": decompression made no progress");
    }
    return true;
  }

  ZSTD_DCtx* dctx_;
  std::string_view codec_;
  std::byte empty_{};
  ZSTD_outBuffer output_;
  std::uint64_t remaining_;  // bytes of frames not yet fed
  bool in_frame_ = false;
  unsigned long long declared_ = 0;  // the current frame's declared size, or ZSTD_CONTENTSIZE_*
  std::size_t frame_start_ = 0;      // where its output starts
  std::array<std::byte, ZSTD_FRAMEHEADERSIZE_MAX> header_{};
  std::size_t held_ = 0;  // bytes of a frame's header held until it is whole
};

// Every frame of `in` streamed into `out` (FrameStream): the bytes written, or nullopt when `out`
// is too small for them.
std::optional<std::size_t> stream_frames_into(std::span<const std::byte> in,
                                              std::span<std::byte> out, std::string_view codec) {
  FrameStream stream(thread_dctx(codec), out, in.size(), codec);
  if (!stream.feed(in)) return std::nullopt;
  return stream.finish();
}

// One standard frame that declares exactly `decoded` bytes: what nvCOMP's zstd decoder takes.
bool one_frame_of(std::span<const std::byte> stored, std::size_t decoded) {
  return ZSTD_getFrameContentSize(stored.data(), stored.size()) == decoded &&
         ZSTD_findFrameCompressedSize(stored.data(), stored.size()) == stored.size();
}

// A chunk's frames decoded from pieces into `out` (CodecChain::piece_decoder), with a context
// of its own (it lives across the pieces, which a thread's shared context does not). What
// decode_into checks before decoding is checked with the first piece (or at the end, of no data),
// so that a checksum around it (crc32c) is compared first, as when the chunk is decoded whole.
class ZstdPieces final : public PieceDecoder {
 public:
  ZstdPieces(std::string_view codec, std::span<std::byte> out, std::uint64_t encoded_size)
      : codec_(codec), out_(out), encoded_size_(encoded_size), dctx_(ZSTD_createDCtx()) {
    if (!dctx_) throw OutOfMemoryError(std::string(codec) + ": could not create a zstd context");
  }

  void feed(std::span<const std::byte> piece) override {
    if (!stream_) start();
    if (!stream_->feed(piece)) {
      throw CodecError(codec_ + ": data decodes to more than the expected " +
                       std::to_string(out_.size()) + " bytes");
    }
  }

  void finish() override {
    if (!stream_) start();
    const std::size_t written = stream_->finish();
    if (written != out_.size()) throw_size_mismatch(codec_, written, out_.size());
  }

 private:
  void start() {
    if (encoded_size_ == 0) throw CodecError(codec_ + ": no data (empty input)");
    if (out_.size() > max_decoded_size(encoded_size_)) {
      throw CodecError(codec_ + ": " + std::to_string(encoded_size_) +
                       " bytes of zstd data cannot hold the expected " +
                       std::to_string(out_.size()) + " bytes (truncated?)");
    }
    stream_.emplace(dctx_.get(), out_, encoded_size_, codec_);
  }

  std::string codec_;
  std::span<std::byte> out_;
  std::uint64_t encoded_size_;
  std::unique_ptr<ZSTD_DCtx, DCtxDeleter> dctx_;
  std::optional<FrameStream> stream_;
};

class ZstdCodec final : public BytesToBytesCodec {
 public:
  [[nodiscard]] std::unique_ptr<PieceDecoder> decoder_into(
      std::span<std::byte> out, std::uint64_t encoded_size) const override {
    return std::make_unique<ZstdPieces>(name_, out, encoded_size);
  }

  [[nodiscard]] std::optional<DeviceDecoding> device_decoding() const override {
    return DeviceDecoding{DeviceDecoding::Kind::kZstd, 0, 0, &one_frame_of};
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
  // (up to 128 KiB): zstd_block_bytes for chunks of up to kMostBlocks such blocks. Measured on an
  // H200 (BENCHMARKS.md, "zstd blocks that GPUs decode sooner"): in 16 KiB blocks, 256 KiB-2 MiB
  // chunks read 1.15-1.32x as fast; 4 MiB chunks in 128 blocks of 32 KiB at 0.89x, 64 MiB chunks
  // in 4096 blocks of 16 KiB at 0.43x (nvCOMP decodes only so many of a frame's blocks at once).
  static std::size_t block_bytes_for(std::size_t size) {
    constexpr std::size_t kMostBlocks = 128;
    const std::size_t block = settings().zstd_block_bytes;
    if (block == 0 || size <= block || size > kMostBlocks * block) return 0;
    return block;
  }

  // One frame whose blocks each cover at most `block` bytes of `decoded`: a block is ended (a
  // flush) every `block` bytes. nvCOMP decodes a frame's blocks side by side but each block's
  // Huffman-coded literals slowly, one thread per stream, so smaller blocks end a GPU decode
  // sooner (settings.cpp, zstd_block_bytes). The output bound allows a block header per block
  // beyond libzstd's own bound, which counts one per 128 KiB.
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
