// Chunks decoded in windows of their decoded bytes (CodecChain::window_decoder): the stored bytes
// read in pieces through the chain's checksums, which hand the decompressor's input on, and
// decoded a window at a time as the reader of a chunk too large to stage whole asks for them.
#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "codecs/codec_chain.hpp"

namespace zarr_device::codecs {
namespace {

// The end of a chain of piece decoders: what the checksums before it hand on, held until the
// decompressor pulls it (views of the piece just read).
class HandedOn final : public PieceDecoder {
 public:
  void feed(std::span<const std::byte> piece) override {
    if (!piece.empty()) pieces.push_back(piece);
  }
  void finish() override {}
  std::deque<std::span<const std::byte>> pieces;
};

class ChainWindows final : public WindowDecoder {
 public:
  ChainWindows(std::span<const std::shared_ptr<const BytesToBytesCodec>> codecs,
               std::size_t decoded, std::uint64_t stored_size, CodecChain::StoredReader read,
               std::size_t piece_bytes)
      : stored_size_(stored_size), read_(std::move(read)), piece_bytes_(piece_bytes) {
    // Each outer codec's encoded size is the next one's plus its suffix (the checksum).
    std::vector<std::uint64_t> sizes(codecs.size());
    std::uint64_t size = stored_size;
    for (std::size_t i = codecs.size(); i-- > 0;) {
      sizes[i] = size;
      // (Too short to hold its suffix: the codec's piece decoder says so when made, below.)
      size -= i > 0 ? std::min<std::uint64_t>(codecs[i]->suffix_size(), size) : 0;
    }
    auto handed = std::make_unique<HandedOn>();
    handed_ = handed.get();
    std::unique_ptr<PieceDecoder> outer = std::move(handed);
    for (std::size_t i = 1; i < codecs.size(); ++i) {
      outer = codecs[i]->decoder_onto(std::move(outer), sizes[i]);
      if (!outer) {
        throw CodecError(std::string(codecs[i]->name()) + ": does not decode from pieces");
      }
    }
    outer_ = std::move(outer);
    inner_ = codecs[0]->window_decoder(decoded, sizes[0], [this] { return next_input(); });
  }

  void fill(std::span<std::byte> window) override {
    try {
      inner_->fill(window);
    } catch (const ChecksumError&) {
      throw;
    } catch (const CodecError&) {
      settle_checksums();  // raises ChecksumError for damaged bytes
      throw;
    }
  }

  void finish() override {
    try {
      inner_->finish();
    } catch (const ChecksumError&) {
      throw;
    } catch (const CodecError&) {
      settle_checksums();
      throw;
    }
    settle_checksums();
  }

 private:
  // The decompressor's next input: what the checksums hand on from the next stored piece.
  std::span<const std::byte> next_input() {
    while (handed_->pieces.empty()) {
      if (read_at_ == stored_size_) return {};
      outer_->feed(read_piece());
    }
    const auto piece = handed_->pieces.front();
    handed_->pieces.pop_front();
    return piece;
  }

  std::span<const std::byte> read_piece() {
    if (piece_.empty()) piece_.resize(piece_bytes_);
    const auto want =
        static_cast<std::size_t>(std::min<std::uint64_t>(piece_.size(), stored_size_ - read_at_));
    const std::size_t got = read_(read_at_, {piece_.data(), want});
    if (got != want) {
      throw CodecError("the stored chunk ended after " + std::to_string(read_at_ + got) +
                       " of its " + std::to_string(stored_size_) + " bytes");
    }
    read_at_ += got;
    return {piece_.data(), got};
  }

  // Reads the rest of the stored bytes through the checksums and verifies them (once): damaged
  // data is a checksum mismatch, whatever the decompressor made of it.
  void settle_checksums() {
    if (settled_) return;
    settled_ = true;
    while (read_at_ < stored_size_) {
      outer_->feed(read_piece());
      handed_->pieces.clear();
    }
    outer_->finish();
  }

  std::uint64_t stored_size_;
  CodecChain::StoredReader read_;
  std::size_t piece_bytes_;
  std::vector<std::byte> piece_;
  std::uint64_t read_at_ = 0;
  HandedOn* handed_ = nullptr;  // owned by outer_
  std::unique_ptr<PieceDecoder> outer_;
  std::unique_ptr<WindowDecoder> inner_;
  bool settled_ = false;
};

}  // namespace

bool CodecChain::decodes_in_windows(std::span<const DimSlice> selection,
                                    const StridedView& destination) const {
  return decompresses_into_place(selection, destination) && decodes_in_windows();
}

bool CodecChain::decodes_in_windows() const {
  if (!array_to_array_.empty() || bytes_to_bytes_.empty() ||
      array_to_bytes_->plain_layout() != Endian::kLittle ||
      !bytes_to_bytes_.front()->decodes_in_windows()) {
    return false;
  }
  // Codecs whose output is a stretch of their input (crc32c) decode from pieces onto the next.
  return std::all_of(bytes_to_bytes_.begin() + 1, bytes_to_bytes_.end(),
                     [](const auto& codec) { return codec->suffix_size() > 0; });
}

std::size_t CodecChain::window_memory(std::span<const std::byte> head) const {
  // The checksums after the decompressor are suffixes: its encoding starts the stored chunk.
  return bytes_to_bytes_.front()->window_memory(head, specs_.back().nbytes());
}

std::unique_ptr<WindowDecoder> CodecChain::window_decoder(std::uint64_t stored_size,
                                                          StoredReader read,
                                                          std::size_t piece_bytes) const {
  return std::make_unique<ChainWindows>(bytes_to_bytes_, specs_.back().nbytes(), stored_size,
                                        std::move(read), piece_bytes);
}

}  // namespace zarr_device::codecs
