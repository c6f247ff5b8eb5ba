// Chunks decoded as a stream (CodecChain::stream_decoder): the stored bytes pulled through the
// chain's bytes->bytes codecs from the outermost in, each codec's decoder pulling what the one
// outside it hands out (the checksums: views of the stored pieces, no copy), and handed out in
// windows of the chunk's decoded bytes as the reader asks for them: one window of the whole chunk
// straight into its place (a host read of a large chunk), or a window at a time (a chunk staged
// a part at a time, a selection that cuts a chunk).
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "codecs/codec_chain.hpp"

namespace zarr_device::codecs {
namespace {

// The most one codec's decoder hands the next at once (the checksums hand out views of what was
// read, of a stored piece at most).
constexpr std::size_t kHandOnBytes = std::size_t{1} << 20;

class ChainStream final : public StreamDecoder {
 public:
  ChainStream(std::span<const std::shared_ptr<const BytesToBytesCodec>> codecs, std::size_t decoded,
              std::uint64_t stored_size, Source source)
      : decoders_(codecs.size()) {
    // Each codec's encoded size is the next one's less that one's suffix (its checksum).
    std::vector<std::uint64_t> sizes(codecs.size());
    std::uint64_t size = stored_size;
    for (std::size_t i = codecs.size(); i-- > 0;) {
      sizes[i] = size;
      // (Too short to hold its suffix: the codec's decoder says so when made, below.)
      size -= i > 0 ? std::min<std::uint64_t>(codecs[i]->suffix_size(), size) : 0;
    }
    // Made from the outermost in: it pulls the stored bytes, each other codec what the one
    // outside it hands out.
    const auto out_size = [&](std::size_t i) {
      return i > 0 ? static_cast<std::size_t>(sizes[i - 1]) : decoded;
    };
    const std::size_t last = codecs.size() - 1;
    decoders_[last] = codecs[last]->stream_decoding()->stream_decoder(out_size(last), sizes[last],
                                                                      std::move(source));
    for (std::size_t i = last; i-- > 0;) {
      Source from([outer = decoders_[i + 1].get()] { return outer->next(kHandOnBytes); });
      decoders_[i] =
          codecs[i]->stream_decoding()->stream_decoder(out_size(i), sizes[i], std::move(from));
    }
  }

  void fill(std::span<std::byte> window) override {
    settled_on_failure([&] { decoders_.front()->fill(window); });
  }

  std::span<const std::byte> next(std::size_t most) override {
    std::span<const std::byte> out;
    settled_on_failure([&] { out = decoders_.front()->next(most); });
    return out;
  }

  void finish() override {
    settled_on_failure([&] { decoders_.front()->finish(); });
    settle();
  }

 private:
  // Runs `decode`; where the decompressor fails, the checksums after it are settled first:
  // damaged data is a checksum mismatch, whatever the decompressor made of it.
  template <typename Decode>
  void settled_on_failure(const Decode& decode) {
    try {
      decode();
    } catch (const ChecksumError&) {
      throw;
    } catch (const CodecError&) {
      settle();  // raises ChecksumError for damaged bytes
      throw;
    }
  }

  // Pulls the rest of the stored bytes through the codecs after the first, then finishes them,
  // the outermost first, as the whole decode verifies them (once).
  void settle() {
    if (settled_ || decoders_.size() < 2) return;
    settled_ = true;
    while (!decoders_[1]->next(kHandOnBytes).empty()) {
    }
    for (std::size_t i = decoders_.size(); i-- > 1;) decoders_[i]->finish();
  }

  std::vector<std::unique_ptr<StreamDecoder>> decoders_;  // one per codec, the first innermost
  bool settled_ = false;
};

}  // namespace

bool CodecChain::bytes_decode_as_stream() const {
  // The first a decompressor; those after it checksums, whose decoded size their stored one
  // tells.
  if (bytes_to_bytes_.empty() || bytes_to_bytes_.front()->suffix_size() > 0) return false;
  for (std::size_t i = 0; i < bytes_to_bytes_.size(); ++i) {
    if (bytes_to_bytes_[i]->stream_decoding() == nullptr) return false;
    if (i > 0 && bytes_to_bytes_[i]->suffix_size() == 0) return false;
  }
  return true;
}

bool CodecChain::decodes_as_stream() const {
  return array_to_array_.empty() && array_to_bytes_->plain_layout() == Endian::kLittle &&
         bytes_decode_as_stream();
}

std::size_t CodecChain::window_memory(std::span<const std::byte> head) const {
  // The checksums after the decompressor are suffixes: its encoding starts the stored chunk.
  std::size_t memory = 0;
  for (std::size_t i = 0; i < bytes_to_bytes_.size(); ++i) {
    const auto* stream = bytes_to_bytes_[i]->stream_decoding();
    const std::size_t decoded = i == 0 ? specs_.back().nbytes() : level_bounds_[i];
    memory += stream ? stream->window_memory(head, decoded) : decoded;
  }
  return memory;
}

std::unique_ptr<StreamDecoder> CodecChain::stream_decoder(std::uint64_t stored_size,
                                                          StreamDecoder::Source source) const {
  if (!bytes_decode_as_stream()) return nullptr;
  return std::make_unique<ChainStream>(bytes_to_bytes_, specs_.back().nbytes(), stored_size,
                                       std::move(source));
}

}  // namespace zarr_device::codecs
