// The codec contracts of Zarr v3: a chain of array->array codecs, one array->bytes codec and
// bytes->bytes codecs. Codecs are immutable once built and shared by all threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "zarr_device/buffer.hpp"
#include "zarr_device/dtype.hpp"
#include "zarr_device/strided.hpp"

namespace zarr_device {

// The shape, type and fill value of a chunk as one codec of a chain sees it.
struct ChunkSpec {
  std::vector<std::int64_t> shape;
  const DataType* dtype = nullptr;
  std::vector<std::byte> fill_value;  // one element, little endian

  [[nodiscard]] std::int64_t num_elements() const;
  [[nodiscard]] std::size_t nbytes() const {
    return static_cast<std::size_t>(num_elements()) * dtype->size;
  }
};

// Reads bytes [offset, offset + length) of the chunk being decoded (cut short at its end). Lets a
// sharded chunk be read piece by piece instead of whole. Made from a function of one range, and
// optionally one of many (offsets and lengths at least 0), which a store whose requests wait on
// a round trip answers in one call; without it, many ranges are read one after another.
class RangeReader {
 public:
  using One = std::function<std::optional<Buffer>(std::int64_t offset, std::int64_t length)>;
  using Many = std::function<std::vector<std::optional<Buffer>>(std::span<const ByteRange>)>;

  template <typename F>
  requires std::is_invocable_r_v < std::optional<Buffer>,
  const F&, std::int64_t,
      std::int64_t >
          RangeReader(F one)  // NOLINT(google-explicit-constructor): a function is a reader
      : one_(std::move(one)) {}
  RangeReader(One one, Many many) : one_(std::move(one)), many_(std::move(many)) {}

  std::optional<Buffer> operator()(std::int64_t offset, std::int64_t length) const {
    return one_(offset, length);
  }
  // Whether many ranges are read in one request.
  [[nodiscard]] bool answers_many() const { return static_cast<bool>(many_); }
  // One result per range, in order.
  [[nodiscard]] std::vector<std::optional<Buffer>> read_many(
      std::span<const ByteRange> ranges) const {
    if (many_) return many_(ranges);
    std::vector<std::optional<Buffer>> out;
    out.reserve(ranges.size());
    for (const auto& range : ranges) out.push_back(one_(range.offset, range.length));
    return out;
  }

 private:
  One one_;
  Many many_;
};

class Codec {
 public:
  virtual ~Codec() = default;
  [[nodiscard]] virtual std::string_view name() const = 0;
  // The codec's metadata entry ({"name": ..., "configuration": {...}}) as written to zarr.json.
  [[nodiscard]] virtual nlohmann::json to_json() const = 0;
};

class ArrayToArrayCodec : public Codec {
 public:
  // The spec of the encoded array given the decoded one.
  [[nodiscard]] virtual ChunkSpec encoded_spec(const ChunkSpec& decoded) const = 0;
  // Rewrites a selection and its destination, both expressed on the decoded array, onto the encoded
  // array, so the codecs below decode straight into the destination.
  virtual void map_to_encoded(std::vector<DimSlice>& selection, StridedView& destination) const = 0;
  // Encodes a C-contiguous decoded chunk into a C-contiguous encoded chunk.
  virtual void encode(const ChunkSpec& decoded, std::span<const std::byte> in,
                      std::span<std::byte> out) const = 0;
  // For a codec that only reorders dimensions (transpose): encoded dimension i is decoded
  // dimension order[i]. nullopt for any other codec. Lets readers and writers that lay chunks
  // out themselves (the GPU's kernels) do the codec's work as a permutation of strides.
  [[nodiscard]] virtual std::optional<std::vector<std::size_t>> permutation() const {
    return std::nullopt;
  }
};

class ArrayToBytesCodec : public Codec {
 public:
  // Decodes the chunk `encoded` (of `spec`) and writes the elements that `selection` picks into
  // `destination`.
  virtual void decode_into(const Buffer& encoded, const ChunkSpec& spec,
                           std::span<const DimSlice> selection,
                           const StridedView& destination) const = 0;
  // Encodes a C-contiguous chunk. Returns nullopt when nothing needs storing (a shard whose inner
  // chunks are all fill value).
  [[nodiscard]] virtual std::optional<Buffer> encode(const ChunkSpec& spec,
                                                     std::span<const std::byte> chunk) const = 0;

  // The byte order in which the array's elements end up laid out C-contiguously in the bytes,
  // when the encoding is exactly that (the "bytes" codec); nullopt for anything else. Lets the
  // chain decode compressed data straight into the destination.
  [[nodiscard]] virtual std::optional<Endian> plain_layout() const { return std::nullopt; }

  // The most bytes an encoding of a chunk of `spec` can take (the chunk's own size for "bytes").
  [[nodiscard]] virtual std::size_t max_encoded_size(const ChunkSpec& spec) const {
    return spec.nbytes();
  }

  // Codecs that can decode a selection from byte ranges of the chunk (sharding) override these.
  [[nodiscard]] virtual bool supports_partial_decode() const { return false; }
  // `total_size` is the stored chunk's size, so every range can be checked before it is read.
  virtual void decode_partial(const RangeReader& read, std::uint64_t total_size,
                              const ChunkSpec& spec, std::span<const DimSlice> selection,
                              const StridedView& destination) const;
};

// What a decoder may know of its output's size: its exact size (when the codecs above say), and
// the most it can be (what any valid encoding of the chunk decodes to). No decoder allocates or
// grows its output past `at_most`: stacked compressors cannot multiply a small chunk into
// gigabytes.
struct DecodedSize {
  std::optional<std::size_t> exact;
  std::size_t at_most = std::numeric_limits<std::size_t>::max();

  DecodedSize(std::nullopt_t /*unknown*/) {}            // NOLINT(google-explicit-constructor)
  DecodedSize(std::size_t n) : exact(n), at_most(n) {}  // NOLINT(google-explicit-constructor)
  DecodedSize(std::optional<std::size_t> n)             // NOLINT(google-explicit-constructor)
      : exact(n), at_most(n.value_or(std::numeric_limits<std::size_t>::max())) {}
  [[nodiscard]] static DecodedSize bounded(std::size_t limit) {
    DecodedSize size(std::nullopt);
    size.at_most = limit;
    return size;
  }
};

// An optional capability of bytes->bytes codecs: what a device's batched decoder (nvCOMP) needs to
// know to take the codec's output as it is stored, so the codec itself never runs on the CPU.
// Codecs without it decode on CPU threads.
// The formats a device's batched codecs (nvCOMP) work in.
enum class DeviceCodec { kChecksum, kZstd, kGzip, kDeflate, kLz4 };
// A check of the decoded bytes that a stored form carries (DeviceDecoding::check).
enum class DeviceCheck { kNone, kCrc32, kAdler32 };

// The streams of one stored chunk (DeviceDecoding::streams), all checked against the chunk and its
// decoded size: every range lies inside them, the blocks tile the decoded bytes in order, and each
// block's streams tile it in equal parts in order.
struct DeviceStreams {
  struct Stream {
    std::uint64_t input_offset = 0;  // in the stored chunk
    std::uint64_t input_bytes = 0;
    std::uint64_t output_bytes = 0;  // what it decodes to
    bool stored = false;             // its bytes are the decoded ones (nothing to decode)
  };
  struct Block {
    std::uint64_t offset = 0;  // of its decoded bytes in the chunk's
    std::uint64_t bytes = 0;
    std::uint32_t first_stream = 0;
    std::uint32_t streams = 0;
  };
  // The element size of the byte shuffle each block's decoded streams hold; 1: none.
  std::uint32_t unshuffle = 1;
  std::vector<Stream> streams;
  std::vector<Block> blocks;
};

struct DeviceDecoding {
  using Kind = DeviceCodec;
  static constexpr std::size_t kKinds = 5;
  Kind kind = Kind::kChecksum;
  std::size_t header = 0;   // framing bytes before the stream the device decoder takes
  std::size_t trailer = 0;  // and after it (a checksum's 4 bytes, zlib's Adler-32)
  // Whether `stored` (this codec's whole encoding, framing included) is of the plain form the
  // device decoder takes, decoding to exactly `decoded` bytes: checked on the CPU in nanoseconds,
  // since device decoders trust their input. Checksums (kChecksum) are verified on the CPU
  // instead and have none.
  bool (*accepts)(std::span<const std::byte> stored, std::size_t decoded) = nullptr;
  // The stored bytes of the stream's first block, from its first bytes (`head`, 32 or fewer where
  // the stream is shorter); 0 where it is unknown or not a compressed block. How soon the device
  // decodes a chunk follows its blocks' size for zstd (device_read/decode_share.hpp).
  std::size_t (*first_block)(std::span<const std::byte> head) = nullptr;
  // The stored form carries a check of the decoded bytes (gzip's CRC-32, zlib's Adler-32) that
  // the device decoder does not verify, so only a chunk a crc32c vouches for decodes on the device
  // unless the caller trusts its data: the CPU verifies the check where nothing else does.
  bool skips_check = false;
  // A stored form made of many streams of `kind` (Blosc's blocks, each split into one stream per
  // byte of its elements): where they lie and what they decode to, read from the stored bytes on
  // the CPU (DeviceStreams). False where `stored` is not of a form the device decodes so, which
  // then decodes on CPU threads. Such codecs decode on the device only in the decoder process,
  // stream by stream, and the engine gathers and unshuffles the streams into place.
  bool (*streams)(std::span<const std::byte> stored, std::size_t decoded,
                  DeviceStreams& out) = nullptr;
  // The check skips_check names, where a GPU can verify it after the decode instead (the decoder
  // process does, on its own stream, before the engine trusts the bytes): its kind, and its value
  // as `stored` (the whole encoding, as accepts takes it) carries it.
  DeviceCheck check = DeviceCheck::kNone;
  std::uint32_t (*check_value)(std::span<const std::byte> stored) = nullptr;
};

// Decodes a codec's encoded bytes, pulled from a source as it needs them, into its decoded bytes,
// handed out in order: for a chunk too large to hold whole while it decodes (a read then holds
// a piece of its stored bytes, not all of them). The caller takes them into windows of its own
// (fill: one window of the whole decoded size decodes straight into place, smaller ones a part
// at a time), or where the decoder has them (next: a codec whose output is a stretch of its
// input, crc32c, hands out views of that input, which is how a chain passes one codec's output
// to the next without a copy). Errors are the codec's own (CodecError, ChecksumError), as its
// whole decode raises them.
class StreamDecoder {
 public:
  // Returns the next encoded bytes (valid until it is called again); empty once they have ended.
  using Source = std::function<std::span<const std::byte>()>;
  virtual ~StreamDecoder() = default;
  // Decodes the next window.size() decoded bytes into `window`.
  virtual void fill(std::span<std::byte> window) = 0;
  // The next decoded bytes, at most `most` of them and at least one while any are left, valid
  // until the decoder is called again; empty once all have been handed out.
  virtual std::span<const std::byte> next(std::size_t most) = 0;
  // After the last decoded byte: raises unless the encoded bytes ended there, complete (and, for
  // a checksum, matching).
  virtual void finish() = 0;
};

// An optional capability of bytes->bytes codecs (BytesToBytesCodec::stream_decoding): decoding
// as a stream (StreamDecoder).
class StreamDecoding {
 public:
  virtual ~StreamDecoding() = default;
  // The host memory a decoder keeps for a chunk of `decoded` bytes handed out in windows smaller
  // than it (the history a decompressor's frames reach back into; none for a codec that passes
  // its input through), from the first bytes of its encoding (`head`: a frame header's worth, or
  // all there is); `decoded` where they do not say. One window of the whole size keeps none: it
  // is the history.
  [[nodiscard]] virtual std::size_t window_memory(std::span<const std::byte> head,
                                                  std::size_t decoded) const = 0;
  // A decoder of `encoded_size` bytes, pulled from `source`, into `decoded_size` bytes.
  [[nodiscard]] virtual std::unique_ptr<StreamDecoder> stream_decoder(
      std::size_t decoded_size, std::uint64_t encoded_size, StreamDecoder::Source source) const = 0;
};

class BytesToBytesCodec : public Codec {
 public:
  // The codec's stream decoding (zstd; crc32c); nullptr: it decodes whole chunks only.
  [[nodiscard]] virtual const StreamDecoding* stream_decoding() const { return nullptr; }

  // Decodes `encoded`. Where `size.exact` is known, the result must have that size; otherwise it
  // may not exceed `size.at_most`. CodecError on a mismatch, before allocating what it claims.
  [[nodiscard]] virtual Buffer decode(const Buffer& encoded, DecodedSize size) const = 0;
  // Decodes into exactly `out` (whose size is the expected decoded size). The default decodes and
  // copies; decompressors override it to write straight into `out`.
  virtual void decode_into(const Buffer& encoded, std::span<std::byte> out) const;
  [[nodiscard]] virtual Buffer encode(const Buffer& decoded) const = 0;
  // For a codec whose encoding is its input followed by bytes made from it (crc32c's checksum):
  // those bytes, so that a writer stores the input and them as two pieces rather than copying
  // the input to append them; encode() is the two joined. nullopt for any other codec.
  [[nodiscard]] virtual std::optional<Buffer> suffix(const Buffer& /*decoded*/) const {
    return std::nullopt;
  }
  // The size of what suffix() returns; 0 when it returns nullopt.
  [[nodiscard]] virtual std::size_t suffix_size() const { return 0; }
  // Whether zarr-python 3 lists this codec among the array->array codecs, where it works on the
  // chunk's elements as they lie in memory (numcodecs.delta): a chain takes it there, before a
  // little-endian array->bytes codec, and runs it right after that codec, on the same bytes.
  [[nodiscard]] virtual bool listed_before_bytes() const { return false; }
  // The encoded size for a decoded size, for codecs that know it (crc32c adds 4 bytes).
  [[nodiscard]] virtual std::optional<std::size_t> encoded_size(std::size_t /*decoded*/) const {
    return std::nullopt;
  }
  // The most any encoder could write for `decoded` bytes: the exact size where known, else a
  // generous bound for compressors (none expands incompressible data by more than a fraction).
  [[nodiscard]] std::size_t max_encoded_size(std::size_t decoded) const;
  // What a device decoder can do with this codec's output; nullopt: nothing (CPU decoding).
  [[nodiscard]] virtual std::optional<DeviceDecoding> device_decoding() const {
    return std::nullopt;
  }
  // The device encoder whose output is an encoding this codec stores and reads back as its own
  // (zstd frames for zstd without a content checksum); nullopt: encoded on CPU threads.
  [[nodiscard]] virtual std::optional<DeviceCodec> device_encoding() const { return std::nullopt; }
  // An optional capability: the element size of a byte shuffle of the whole chunk (numcodecs'
  // shuffle) that a device undoes after the compressor it precedes has been decoded there; 0 for
  // codecs that are no such shuffle.
  [[nodiscard]] virtual std::size_t device_unshuffle() const { return 0; }
  // Whether decode() returns a part of its input (a checksum stripped) rather than new memory:
  // what a read holds for that step is nothing beside its input.
  [[nodiscard]] virtual bool decodes_to_view() const { return false; }
};

// What a codec factory knows when it builds a codec from metadata.
struct CodecContext {
  ChunkSpec chunk;  // the spec of the array the codec receives (after earlier a->a codecs)
  int zarr_format = 3;
};

// Builds a codec from its configuration (the "configuration" object of a v3 entry, or for a
// v2/numcodecs codec the entry itself without "id"). Throws FormatError on a bad configuration.
using CodecFactory = std::function<std::shared_ptr<Codec>(const nlohmann::json& configuration,
                                                          const CodecContext& context)>;

// The one registry of codecs, keyed by name: v3 names ("zstd", "bytes", "sharding_indexed", ...)
// and numcodecs ids under "numcodecs.<id>" (how zarr-python 3 names them, and how v2 compressors
// are looked up).
class CodecRegistry {
 public:
  static CodecRegistry& instance();  // holds the built-in codecs
  void add(std::string name, CodecFactory factory);
  // Throws FormatError("unknown codec 'x'") for a name not registered.
  [[nodiscard]] std::shared_ptr<Codec> create(std::string_view name,
                                              const nlohmann::json& configuration,
                                              const CodecContext& context) const;
  [[nodiscard]] bool contains(std::string_view name) const;

 private:
  CodecRegistry() = default;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace zarr_device
