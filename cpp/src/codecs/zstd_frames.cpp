// zstd frames decoded by streaming, pulled from a source: into a whole output, and into windows of
// it. Shared by the zstd codec's whole decode (zstd_codec.cpp) and its stream decoder, which a
// chain's stream decoding uses (CodecChain::stream_decoder).
#include "codecs/zstd_frames.hpp"

#include <zstd_errors.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

// zstd frames pulled from a source and decoded into output buffers, with the checks one-shot
// decoding makes: each frame holds what its header declares (libzstd's streaming decoder does not
// check that when the output is smaller than the declared size; 1.5.4: a frame ending in an empty
// last block "completes" early), the frames end where the encoded bytes do, and the data ends
// with a frame. A frame's header cut between pieces is gathered until it is whole, to read the
// size it declares.
//
// With a stable output, zstd writes straight into the one output buffer it is given again and
// again (ZSTD_d_stableOutBuffer) instead of through a window buffer of its own. Why: a context
// keeps that buffer from one decode to the next, and whether a frame that reaches back past its
// window decodes would then depend on the decodes before it. Written straight into the output,
// each frame sees all of its own output, as one-shot decoding does, so every path accepts the
// same data. Without one (an output that moves from window to window), the context must be made
// for the chunk alone, so that a frame reaches back into its own output only.
class FrameReader {
 public:
  enum class Step {
    kMore,   // decoded some (or consumed some input)
    kFull,   // the output cannot take what comes next
    kEnded,  // the frames have ended: all the encoded bytes decoded, between frames
  };

  FrameReader(ZSTD_DCtx* dctx, std::string_view codec, std::uint64_t encoded,
              StreamDecoder::Source source, bool stable_output)
      : dctx_(dctx), codec_(codec), left_(encoded), source_(std::move(source)) {
    if (stable_output) {
      const std::size_t stable = ZSTD_DCtx_setParameter(dctx, ZSTD_d_stableOutBuffer, 1);
      if (ZSTD_isError(stable)) throw_zstd_error(codec_, stable);
    }
  }

  // One call of the decoder into `out` (which has room, or, with a stable output, may be full).
  Step step(ZSTD_outBuffer& out) {
    if (!in_frame_) {
      if (!header_ready()) return Step::kEnded;
      declared_ = ZSTD_getFrameContentSize(in_.data(), in_.size());
      frame_produced_ = 0;
      in_frame_ = true;
    }
    ZSTD_inBuffer input{in_.data(), in_.size(), 0};
    const std::size_t before = out.pos;
    const std::size_t result = ZSTD_decompressStream(dctx_, &out, &input);
    if (ZSTD_isError(result)) {
      if (ZSTD_getErrorCode(result) == ZSTD_error_dstSize_tooSmall) return Step::kFull;
      throw_zstd_error(codec_, result);
    }
    in_ = in_.subspan(input.pos);
    frame_produced_ += out.pos - before;
    if (result == 0) {  // the frame is complete
      if (declared_ != ZSTD_CONTENTSIZE_UNKNOWN && declared_ != ZSTD_CONTENTSIZE_ERROR &&
          frame_produced_ != declared_) {
        throw CodecError(std::string(codec_) + ": a frame declares " + std::to_string(declared_) +
                         " bytes and holds " + std::to_string(frame_produced_));
      }
      in_frame_ = false;
    } else if (input.pos == 0 && out.pos == before) {
      if (!in_.empty()) {
        if (out.pos == out.size) return Step::kFull;
        throw CodecError(std::string(codec_) + ": decompression made no progress");
      }
      if (!pull()) {
        throw CodecError(std::string(codec_) +
                         ": data is truncated (the last frame is incomplete)");
      }
    }
    return Step::kMore;
  }

 private:
  static constexpr std::size_t kHeaderMax = ZSTD_FRAMEHEADERSIZE_MAX;

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
      throw CodecError(std::string(codec_) + ": data ended " + std::to_string(left_) +
                       " bytes early");
    }
    in_ = piece.first(static_cast<std::size_t>(std::min<std::uint64_t>(piece.size(), left_)));
    left_ -= in_.size();
    return true;
  }

  ZSTD_DCtx* dctx_;
  std::string_view codec_;
  std::uint64_t left_;  // encoded bytes not yet pulled
  StreamDecoder::Source source_;
  std::span<const std::byte> in_;    // input not yet decoded
  std::span<const std::byte> next_;  // the rest of a piece whose front completed a header
  std::array<std::byte, kHeaderMax> carry_{};
  bool in_frame_ = false;
  unsigned long long declared_ = 0;  // the current frame's declared size, or ZSTD_CONTENTSIZE_*
  std::size_t frame_produced_ = 0;   // its output so far
};

// Every frame `frames` reads decoded into `out`, with a stable output: the bytes written, or
// nullopt when `out` cannot hold them.
std::optional<std::size_t> decode_all_into(FrameReader& frames, std::span<std::byte> out) {
  std::byte empty{};
  ZSTD_outBuffer output{out.empty() ? &empty : out.data(), out.size(), 0};
  for (FrameReader::Step step; (step = frames.step(output)) != FrameReader::Step::kEnded;) {
    if (step == FrameReader::Step::kFull) return std::nullopt;
  }
  return output.pos;
}

// A chunk's frames decoded into the windows of its output a caller gives, in order, in a context
// made for the chunk alone (it lives across the windows, which a thread's shared context does
// not). One window of the whole output is decoded straight into it (a stable output: no window
// buffer, no copy); smaller ones through zstd's window buffer, which keeps the history the frames
// reach back into (StreamDecoding::window_memory). What the whole decode checks before decoding
// is checked with the first window (or at the end, of no data), so that a checksum around it
// (crc32c, settled by the chain) is compared first, as when the chunk is decoded whole.
class ZstdStream final : public StreamDecoder {
 public:
  ZstdStream(std::string_view codec, std::size_t decoded, std::uint64_t encoded, Source source)
      : codec_(codec),
        decoded_(decoded),
        encoded_(encoded),
        source_(std::move(source)),
        dctx_(ZSTD_createDCtx()) {
    if (!dctx_) throw OutOfMemoryError(codec_ + ": could not create a zstd context");
  }

  void fill(std::span<std::byte> window) override {
    if (window.size() > decoded_ - written_) {
      throw CodecError(codec_ + ": a window past the chunk's " + std::to_string(decoded_) +
                       " bytes");
    }
    if (!frames_) {
      start(window.size() == decoded_);
      if (whole_) {
        const auto written = decode_all_into(*frames_, window);
        if (!written) {
          throw CodecError(codec_ + ": data decodes to more than the expected " +
                           std::to_string(decoded_) + " bytes");
        }
        if (*written != decoded_) throw_size_mismatch(codec_, *written, decoded_);
        written_ = decoded_;
        return;
      }
    }
    ZSTD_outBuffer out{window.data(), window.size(), 0};
    while (out.pos < out.size) {
      const auto step = frames_->step(out);
      if (step == FrameReader::Step::kEnded) {
        throw CodecError(codec_ + ": data decodes to " + std::to_string(written_ + out.pos) +
                         " bytes, fewer than the expected " + std::to_string(decoded_));
      }
      if (step == FrameReader::Step::kFull) {  // (only a stable output fills up)
        throw CodecError(codec_ + ": decompression made no progress");
      }
    }
    written_ += window.size();
  }

  std::span<const std::byte> next(std::size_t most) override {
    own_.resize(std::min(most, decoded_ - written_));
    if (own_.empty()) return {};
    fill(own_);
    return own_;
  }

  void finish() override {
    if (!frames_ && decoded_ == 0) fill({});  // nothing asked for: decoded whole, into nothing
    if (!frames_) start(false);
    if (written_ != decoded_) {
      throw CodecError(codec_ + ": finished after " + std::to_string(written_) + " of " +
                       std::to_string(decoded_) + " bytes");
    }
    if (whole_) return;  // checked to the end already
    // What is left may decode to nothing more: the end of the last frame, or empty frames.
    std::byte spare{};
    ZSTD_outBuffer out{&spare, 1, 0};
    while (frames_->step(out) != FrameReader::Step::kEnded) {
      if (out.pos > 0) {
        throw CodecError(codec_ + ": data decodes to more than the expected " +
                         std::to_string(decoded_) + " bytes");
      }
    }
  }

 private:
  // The whole decode's checks, then the frames read, straight into one window of the whole
  // output (`whole`) or through zstd's window buffer.
  void start(bool whole) {
    if (encoded_ == 0) throw CodecError(codec_ + ": no data (empty input)");
    if (decoded_ > max_decoded_size(encoded_)) {
      throw CodecError(codec_ + ": " + std::to_string(encoded_) +
                       " bytes of zstd data cannot hold the expected " + std::to_string(decoded_) +
                       " bytes (truncated?)");
    }
    whole_ = whole;
    frames_.emplace(dctx_.get(), codec_, encoded_, std::move(source_), whole);
  }

  std::string codec_;
  std::size_t decoded_;
  std::uint64_t encoded_;
  Source source_;  // until the frames are read
  std::unique_ptr<ZSTD_DCtx, DCtxDeleter> dctx_;
  std::optional<FrameReader> frames_;
  bool whole_ = false;
  std::size_t written_ = 0;
  std::vector<std::byte> own_;  // what next() hands out
};

}  // namespace

std::optional<std::size_t> stream_frames_into(std::span<const std::byte> in,
                                              std::span<std::byte> out, std::string_view codec) {
  bool given = false;
  FrameReader frames(
      thread_dctx(codec), codec, in.size(),
      [in, &given]() -> std::span<const std::byte> {
        if (given) return {};
        given = true;
        return in;
      },
      true);
  return decode_all_into(frames, out);
}

std::unique_ptr<StreamDecoder> make_zstd_stream(std::string_view codec, std::size_t decoded,
                                                std::uint64_t encoded,
                                                StreamDecoder::Source source) {
  return std::make_unique<ZstdStream>(codec, decoded, encoded, std::move(source));
}

}  // namespace zarr_device::codecs
