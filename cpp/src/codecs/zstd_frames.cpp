// zstd frames decoded by streaming: into a whole output, from pieces of their bytes, and into
// windows of their output. Shared by the zstd codec (zstd_codec.cpp) and what decodes its chunks
// apart from it (CodecChain::piece_decoder, CodecChain::window_decoder).
#include "codecs/zstd_frames.hpp"

#include <zstd_errors.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "codecs/compression_common.hpp"

namespace zarr_device::codecs {

[[noreturn]] void throw_zstd_error(std::string_view codec, std::size_t code) {
  if (ZSTD_getErrorCode(code) == ZSTD_error_checksum_wrong) {
    throw ChecksumError(std::string(codec) +
                        ": the frame's content checksum does not match its data");
  }
  throw CodecError(std::string(codec) + ": " + ZSTD_getErrorName(code));
}

// One context per thread: creating one costs allocations, and codecs are shared across threads.
ZSTD_DCtx* thread_dctx(std::string_view codec) {
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxDeleter> dctx;
  if (!dctx) dctx.reset(ZSTD_createDCtx());
  if (!dctx) throw OutOfMemoryError(std::string(codec) + ": could not create a zstd context");
  // A decode that threw may have left the context mid-frame.
  ZSTD_DCtx_reset(dctx.get(), ZSTD_reset_session_and_parameters);
  return dctx.get();
}

// The most `encoded_size` bytes of zstd can decode to. Every block that produces output takes at
// least 4 bytes (3 of header, 1 of content: an RLE block) and produces at most 128 KiB; dividing
// by 3 leaves a margin. Bounds output when frames do not declare their size, and exposes frames
// that declare more than they can hold.
std::size_t max_decoded_size(std::size_t encoded_size) {
  return saturating_mul_add(encoded_size / 3 + 1, std::size_t{128} * 1024, 0);
}

namespace {

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

// A chunk's frames decoded into consecutive windows of its output (WindowDecoder), for a chunk
// staged a part at a time. The output moves from window to window, so zstd keeps the history a
// frame reaches back to in a buffer of its own (FrameStream writes straight into a whole output
// instead), in a context made for this chunk alone: a frame reaches back into its own output
// only, as when the chunk is decoded whole. The checks are FrameStream's: each frame holds what
// its header declares, the frames exactly the chunk's bytes, and the data ends with a frame.
class ZstdWindows final : public WindowDecoder {
 public:
  ZstdWindows(std::string_view codec, std::size_t decoded, std::uint64_t encoded, Source source)
      : codec_(codec),
        decoded_(decoded),
        left_(encoded),
        source_(std::move(source)),
        dctx_(ZSTD_createDCtx()) {
    if (!dctx_) throw OutOfMemoryError(codec_ + ": could not create a zstd context");
    if (encoded == 0) throw CodecError(codec_ + ": no data (empty input)");
  }

  void fill(std::span<std::byte> window) override {
    if (window.size() > decoded_ - written_) {
      throw CodecError(codec_ + ": a window past the chunk's " + std::to_string(decoded_) +
                       " bytes");
    }
    ZSTD_outBuffer out{window.data(), window.size(), 0};
    while (out.pos < out.size) {
      if (!decode_some(out)) {
        throw CodecError(codec_ + ": data decodes to " + std::to_string(written_ + out.pos) +
                         " bytes, fewer than the expected " + std::to_string(decoded_));
      }
    }
    written_ += window.size();
  }

  void finish() override {
    if (written_ != decoded_) {
      throw CodecError(codec_ + ": finished after " + std::to_string(written_) + " of " +
                       std::to_string(decoded_) + " bytes");
    }
    // What is left may decode to nothing more: the end of the last frame, or empty frames.
    std::byte spare{};
    ZSTD_outBuffer out{&spare, 1, 0};
    while (decode_some(out)) {
      if (out.pos > 0) {
        throw CodecError(codec_ + ": data decodes to more than the expected " +
                         std::to_string(decoded_) + " bytes");
      }
    }
  }

 private:
  static constexpr std::size_t kHeaderMax = ZSTD_FRAMEHEADERSIZE_MAX;

  // One call of the decoder into `out`; false when the data has ended between frames.
  bool decode_some(ZSTD_outBuffer& out) {
    if (!in_frame_) {
      if (!header_ready()) return false;
      declared_ = ZSTD_getFrameContentSize(in_.data(), in_.size());
      frame_produced_ = 0;
      in_frame_ = true;
    }
    ZSTD_inBuffer input{in_.data(), in_.size(), 0};
    const std::size_t before = out.pos;
    const std::size_t result = ZSTD_decompressStream(dctx_.get(), &out, &input);
    if (ZSTD_isError(result)) throw_zstd_error(codec_, result);
    in_ = in_.subspan(input.pos);
    frame_produced_ += out.pos - before;
    if (result == 0) {  // the frame is complete
      if (declared_ != ZSTD_CONTENTSIZE_UNKNOWN && declared_ != ZSTD_CONTENTSIZE_ERROR &&
          frame_produced_ != declared_) {
        throw CodecError(codec_ + ": a frame declares " + std::to_string(declared_) +
                         " bytes and holds " + std::to_string(frame_produced_));
      }
      in_frame_ = false;
    } else if (input.pos == 0 && out.pos == before && out.pos < out.size) {
      if (!in_.empty()) throw CodecError(codec_ + ": decompression made no progress");
      if (!pull()) {
        throw CodecError(codec_ + ": data is truncated (the last frame is incomplete)");
      }
    }
    return true;
  }

  // Makes the next input bytes, where a frame starts, hold its whole header (or all that is
  // left), gathering them from the next pieces when a piece ends inside it. False: no data left.
  bool header_ready() {
    if (in_.empty() && !pull()) return false;
    if (in_.size() >= kHeaderMax || (next_.empty() && left_ == 0)) return true;
    std::size_t held = in_.size();
    std::memmove(carry_.data(), in_.data(), held);
    while (held < kHeaderMax && (!next_.empty() || left_ > 0)) {
      if (next_.empty()) (void)pull();  // (a piece in `in_`, moved on below)
      const auto piece = next_.empty() ? in_ : next_;
      const std::size_t take = std::min(kHeaderMax - held, piece.size());
      std::memcpy(carry_.data() + held, piece.data(), take);
      held += take;
      next_ = piece.subspan(take);
    }
    in_ = {carry_.data(), held};
    return true;
  }

  // Moves on to the next input bytes; false when there are none.
  bool pull() {
    if (!next_.empty()) {
      in_ = next_;
      next_ = {};
      return true;
    }
    if (left_ == 0) return false;
    const auto piece = source_();
    if (piece.empty()) {
      throw CodecError(codec_ + ": data ended " + std::to_string(left_) + " bytes early");
    }
    in_ = piece.first(static_cast<std::size_t>(std::min<std::uint64_t>(piece.size(), left_)));
    left_ -= in_.size();
    return true;
  }

  std::string codec_;
  std::size_t decoded_;
  std::size_t written_ = 0;
  std::uint64_t left_;  // encoded bytes not yet pulled
  Source source_;
  std::unique_ptr<ZSTD_DCtx, DCtxDeleter> dctx_;
  std::span<const std::byte> in_;    // input not yet decoded
  std::span<const std::byte> next_;  // the rest of a piece whose front completed a header
  std::array<std::byte, kHeaderMax> carry_{};
  bool in_frame_ = false;
  unsigned long long declared_ = 0;
  std::size_t frame_produced_ = 0;
};

}  // namespace

// Every frame of `in` streamed into `out` (FrameStream): the bytes written, or nullopt when `out`
// is too small for them.
std::optional<std::size_t> stream_frames_into(std::span<const std::byte> in,
                                              std::span<std::byte> out, std::string_view codec) {
  FrameStream stream(thread_dctx(codec), out, in.size(), codec);
  if (!stream.feed(in)) return std::nullopt;
  return stream.finish();
}

std::unique_ptr<PieceDecoder> make_zstd_pieces(std::string_view codec, std::span<std::byte> out,
                                               std::uint64_t encoded_size) {
  return std::make_unique<ZstdPieces>(codec, out, encoded_size);
}

std::unique_ptr<WindowDecoder> make_zstd_windows(std::string_view codec, std::size_t decoded,
                                                 std::uint64_t encoded,
                                                 WindowDecoder::Source source) {
  return std::make_unique<ZstdWindows>(codec, decoded, encoded, std::move(source));
}

}  // namespace zarr_device::codecs
