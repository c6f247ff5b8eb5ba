// The "zstd" codec (Zarr v3 core) and numcodecs' "zstd": standard zstd frames.
#include <zstd.h>
#include <zstd_errors.h>

#include <climits>
#include <cstdint>
#include <memory>

#include "codecs/compression_common.hpp"

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

// Streaming decompression, for frames that do not declare their size. Accepts any number of
// concatenated frames. A frame that declares its size must produce exactly that: libzstd's
// streaming decoder does not check it when the output buffer is smaller than the declared size
// (1.5.4: a frame ending in an empty last block "completes" early).
class ZstdStreamDecoder final : public StreamDecoder {
 public:
  ZstdStreamDecoder(ZSTD_DCtx* dctx, std::span<const std::byte> in, std::string_view codec)
      : dctx_(dctx), in_{in.data(), in.size(), 0}, codec_(codec) {}

  bool run(std::span<std::byte> out, std::size_t& pos) override {
    while (true) {
      if (!in_frame_) {
        if (in_.pos == in_.size) return true;
        declared_ = ZSTD_getFrameContentSize(static_cast<const char*>(in_.src) + in_.pos,
                                             in_.size - in_.pos);
        produced_ = 0;
        in_frame_ = true;
      }
      if (pos == out.size()) return false;
      ZSTD_outBuffer output{out.data(), out.size(), pos};
      const std::size_t in_before = in_.pos;
      const std::size_t result = ZSTD_decompressStream(dctx_, &output, &in_);
      if (ZSTD_isError(result)) throw_zstd_error(codec_, result);
      const bool progressed = in_.pos != in_before || output.pos != pos;
      produced_ += output.pos - pos;
      pos = output.pos;
      if (result == 0) {  // the frame is complete
        if (declared_ != ZSTD_CONTENTSIZE_UNKNOWN && declared_ != ZSTD_CONTENTSIZE_ERROR &&
            produced_ != declared_) {
          throw CodecError(std::string(codec_) + ": a frame declares " + std::to_string(declared_) +
                           " bytes and holds " + std::to_string(produced_));
        }
        in_frame_ = false;
      }
      // With room to write, zstd stops only when it needs input: nothing left means truncation.
      if (!progressed) {
        throw CodecError(std::string(codec_) +
                         (in_.pos == in_.size ? ": data is truncated (the last frame is incomplete)"
                                              : ": decompression made no progress"));
      }
    }
  }

 private:
  ZSTD_DCtx* dctx_;
  ZSTD_inBuffer in_;
  std::string_view codec_;
  bool in_frame_ = false;
  unsigned long long declared_ = 0;  // the current frame's declared size, or ZSTD_CONTENTSIZE_*
  std::uint64_t produced_ = 0;       // what it has produced so far
};

// One standard frame that declares exactly `decoded` bytes: what nvCOMP's zstd decoder takes.
bool one_frame_of(std::span<const std::byte> stored, std::size_t decoded) {
  return ZSTD_getFrameContentSize(stored.data(), stored.size()) == decoded &&
         ZSTD_findFrameCompressedSize(stored.data(), stored.size()) == stored.size();
}

class ZstdCodec final : public BytesToBytesCodec {
 public:
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
    ZstdStreamDecoder decoder(thread_dctx(name_), encoded.span(), name_);
    // Declared sizes are enforced by libzstd at each frame's end, so they can cap growth.
    const std::size_t growth_limit = scan.all_declared ? scan.declared : limit;
    const std::size_t initial = scan.all_declared ? trusted_size_claim(encoded.size())
                                                  : initial_guess(encoded.size(), limit);
    return decode_stream_growing(decoder, initial, growth_limit, name_);
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
    ByteArray out(bound);
    static const std::byte kEmpty{};
    const std::size_t written = ZSTD_compress2(
        cctx, out.data(), out.size(), decoded.empty() ? &kEmpty : decoded.data(), decoded.size());
    if (ZSTD_isError(written)) throw_zstd_error(name_, written);
    return finish_output(std::move(out), written);
  }

 private:
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
    ZSTD_DCtx* dctx = thread_dctx(name_);
    if (scan.all_declared) {
      // One shot: no window buffer, and libzstd checks each frame against its declared size.
      std::byte empty{};
      const std::size_t result = ZSTD_decompressDCtx(dctx, out.empty() ? &empty : out.data(),
                                                     out.size(), in.data(), in.size());
      if (ZSTD_isError(result)) throw_zstd_error(name_, result);
      if (result != out.size()) throw_size_mismatch(name_, result, out.size());
      return;
    }
    ZstdStreamDecoder decoder(dctx, in, name_);
    decode_stream_exact(decoder, out, name_);
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
