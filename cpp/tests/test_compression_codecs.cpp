// Tests of the bytes->bytes codecs (zstd, gzip, blosc, crc32c and the numcodecs ids) and of
// CRC-32C itself. Golden vectors come from numcodecs 0.16 / zarr-python 3.1, so a change in our
// encoding of the formats shows up here rather than as unreadable data elsewhere.
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_frameHeaderSize, to walk a frame's blocks
#include <blosc.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "codecs/crc32c.hpp"
#include "test_util.hpp"
#include "zarr_device/codec.hpp"
#include "zarr_device/settings.hpp"

namespace zarr_device {
namespace {

using Bytes = std::vector<std::byte>;
using nlohmann::json;

Bytes bytes_of(std::string_view text) {
  Bytes out(text.size());
  std::memcpy(out.data(), text.data(), text.size());
  return out;
}

Bytes from_hex(std::string_view hex) {
  Bytes out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<std::byte>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

Bytes to_bytes(const Buffer& buffer) { return {buffer.data(), buffer.data() + buffer.size()}; }

Buffer to_buffer(const Bytes& bytes) { return Buffer::copy_of(bytes); }

Bytes random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

// Little-endian elements that rise slowly with a little noise: compressible, and much more so
// after shuffling, like real array data.
Bytes typed_data(std::size_t n, int typesize, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t element = i / typesize;
    const std::uint64_t value = element / 3 + (rng() % 4);
    const std::size_t byte = i % typesize;
    out[i] = byte < 8 ? static_cast<std::byte>(value >> (8 * byte)) : std::byte{0};
  }
  return out;
}

const DataType kUInt8{"uint8", DTypeClass::kUInt, 1, 1, std::nullopt};
const DataType kFloat32{"float32", DTypeClass::kFloat, 4, 4, std::nullopt};
const DataType kFloat64{"float64", DTypeClass::kFloat, 8, 8, std::nullopt};

CodecContext context_for(const DataType* dtype, int zarr_format = 3) {
  CodecContext context;
  context.chunk.shape = {16};
  context.chunk.dtype = dtype;
  context.zarr_format = zarr_format;
  return context;
}

std::shared_ptr<BytesToBytesCodec> make(std::string_view name, const json& configuration = json(),
                                        const CodecContext& context = context_for(&kUInt8)) {
  auto codec = std::dynamic_pointer_cast<BytesToBytesCodec>(
      CodecRegistry::instance().create(name, configuration, context));
  if (!codec) throw std::runtime_error(std::string(name) + " is not a bytes->bytes codec");
  return codec;
}

// Encodes, then decodes in every way a caller can: with and without the size, and into a span.
void expect_round_trip(const BytesToBytesCodec& codec, const Bytes& data) {
  SCOPED_TRACE(std::string(codec.name()) + " " + codec.to_json().dump() + ", " +
               std::to_string(data.size()) + " bytes");
  const Buffer encoded = codec.encode(to_buffer(data));
  EXPECT_EQ(to_bytes(codec.decode(encoded, data.size())), data);
  EXPECT_EQ(to_bytes(codec.decode(encoded, std::nullopt)), data);
  Bytes out(data.size(), std::byte{0x5A});
  codec.decode_into(encoded, out);
  EXPECT_EQ(out, data);
}

// Decodes `encoded` every way, expecting each to fail with CodecError (or a subclass).
void expect_decode_error(const BytesToBytesCodec& codec, const Bytes& encoded,
                         std::size_t decoded_size, const std::string& trace) {
  SCOPED_TRACE(std::string(codec.name()) + ": " + trace);
  const Buffer buffer = to_buffer(encoded);
  EXPECT_THROW((void)codec.decode(buffer, decoded_size), CodecError);
  EXPECT_THROW((void)codec.decode(buffer, std::nullopt), CodecError);
  Bytes out(decoded_size);
  EXPECT_THROW(codec.decode_into(buffer, out), CodecError);
}

// Every strict prefix of `encoded` must be rejected.
void expect_truncations_rejected(const BytesToBytesCodec& codec, const Bytes& encoded,
                                 std::size_t decoded_size, std::size_t step = 1) {
  for (std::size_t length = 0; length < encoded.size(); length += step) {
    expect_decode_error(codec, Bytes(encoded.begin(), encoded.begin() + length), decoded_size,
                        "truncated to " + std::to_string(length) + " of " +
                            std::to_string(encoded.size()) + " bytes");
  }
}

// Random damage: decoding must either fail with CodecError or succeed, never crash, hang or
// raise anything else (the sanitizers catch out-of-bounds access).
void fuzz_decode(const BytesToBytesCodec& codec, const Bytes& encoded, std::size_t decoded_size,
                 int iterations, std::uint32_t seed) {
  std::mt19937 rng(seed);
  for (int i = 0; i < iterations; ++i) {
    Bytes damaged = encoded;
    switch (rng() % 4) {
      case 0:  // flip a few bits
        for (int flips = 1 + rng() % 3; flips > 0 && !damaged.empty(); --flips) {
          damaged[rng() % damaged.size()] ^= static_cast<std::byte>(1u << (rng() % 8));
        }
        break;
      case 1:  // overwrite a byte
        if (!damaged.empty()) damaged[rng() % damaged.size()] = static_cast<std::byte>(rng());
        break;
      case 2:  // truncate
        damaged.resize(rng() % (damaged.size() + 1));
        break;
      default:  // append garbage
        for (int extra = 1 + rng() % 16; extra > 0; --extra) {
          damaged.push_back(static_cast<std::byte>(rng()));
        }
    }
    const Buffer buffer = to_buffer(damaged);
    try {
      (void)codec.decode(buffer, decoded_size);
    } catch (const CodecError&) {
    }
    try {
      (void)codec.decode(buffer, std::nullopt);
    } catch (const CodecError&) {
    }
    try {
      Bytes out(decoded_size);
      codec.decode_into(buffer, out);
    } catch (const CodecError&) {
    }
  }
}

// Caps the address space while alive, so an allocation of gigabytes fails with OutOfMemoryError
// instead of quietly succeeding on an overcommitting system. The sanitizers reserve terabytes of
// address space up front, so there it does nothing (run those builds with
// ASAN_OPTIONS=max_allocation_size_mb=... for the same effect).
class AddressSpaceCap {
 public:
  explicit AddressSpaceCap(std::size_t headroom) {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    std::ifstream statm("/proc/self/statm");
    std::size_t pages = 0;
    if (!(statm >> pages) || getrlimit(RLIMIT_AS, &saved_) != 0) return;
    rlimit capped = saved_;
    const rlim_t cap = pages * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + headroom;
    if (saved_.rlim_cur != RLIM_INFINITY && saved_.rlim_cur <= cap) return;
    capped.rlim_cur = cap;
    active_ = setrlimit(RLIMIT_AS, &capped) == 0;
#endif
  }
  [[nodiscard]] bool active() const { return active_; }
  ~AddressSpaceCap() {
    if (active_) setrlimit(RLIMIT_AS, &saved_);
  }
  AddressSpaceCap(const AddressSpaceCap&) = delete;
  AddressSpaceCap& operator=(const AddressSpaceCap&) = delete;

 private:
  rlimit saved_{};
  bool active_ = false;
};

std::vector<std::string> blosc_compressors() {
  std::vector<std::string> names;
  std::string list = blosc_list_compressors();
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = list.find(',', start);
    names.push_back(list.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return names;
}

// ---------------------------------------------------------------------------------------------
// CRC-32C

struct Crc32cImpl {
  const char* name;
  std::uint32_t (*function)(std::span<const std::byte>, std::uint32_t);
};

std::vector<Crc32cImpl> crc32c_impls() {
  std::vector<Crc32cImpl> impls = {{"portable", codecs::detail::crc32c_portable},
                                   {"dispatch", [](std::span<const std::byte> d, std::uint32_t c) {
                                      return codecs::crc32c(d, c);
                                    }}};
  if (codecs::detail::crc32c_hardware_available()) {
    impls.push_back({"sse4.2", codecs::detail::crc32c_hardware});
  }
  return impls;
}

TEST(Crc32c, KnownVectors) {
  // RFC 3720 (iSCSI) appendix B.4 and the usual check value.
  Bytes ascending(32), descending(32);
  for (int i = 0; i < 32; ++i) {
    ascending[i] = static_cast<std::byte>(i);
    descending[i] = static_cast<std::byte>(31 - i);
  }
  const std::vector<std::pair<Bytes, std::uint32_t>> vectors = {
      {bytes_of("123456789"), 0xE3069283},
      {Bytes(), 0x00000000},
      {Bytes(32, std::byte{0x00}), 0x8A9136AA},
      {Bytes(32, std::byte{0xFF}), 0x62A8AB43},
      {ascending, 0x46DD794E},
      {descending, 0x113FDB5C},
      {bytes_of("hello zarr"), 0x6EA065BA},  // zarr-python's Crc32cCodec appends ba 65 a0 6e
  };
  for (const auto& impl : crc32c_impls()) {
    for (const auto& [data, expected] : vectors) {
      EXPECT_EQ(impl.function(data, 0), expected) << impl.name << ", " << data.size() << " bytes";
    }
  }
  std::printf("crc32c hardware path available: %s\n",
              codecs::detail::crc32c_hardware_available() ? "yes" : "no");
}

TEST(Crc32c, ImplementationsAgreeAtEveryLengthAndAlignment) {
  const Bytes data = random_bytes(4096 + 64, 7);
  for (std::size_t offset = 0; offset < 8; ++offset) {
    for (std::size_t length = 0; length <= 300; ++length) {
      const std::span<const std::byte> piece(data.data() + offset, length);
      const std::uint32_t expected = codecs::detail::crc32c_portable(piece, 0);
      for (const auto& impl : crc32c_impls()) {
        ASSERT_EQ(impl.function(piece, 0), expected)
            << impl.name << " offset " << offset << " length " << length;
      }
    }
  }
  const std::span<const std::byte> whole(data.data() + 3, 4096);
  for (const auto& impl : crc32c_impls()) {
    EXPECT_EQ(impl.function(whole, 0x12345678), codecs::detail::crc32c_portable(whole, 0x12345678))
        << impl.name;
  }
}

// Long inputs take the three-lane paths (blocks of 3 x 8 KiB and 3 x 512 bytes) and then the tail.
TEST(Crc32c, ImplementationsAgreeOnLongInputs) {
  const Bytes data = random_bytes(200 * 1024 + 16, 13);
  for (std::size_t length : {std::size_t{1535}, std::size_t{1536}, std::size_t{1537},
                             std::size_t{24575}, std::size_t{24576}, std::size_t{24576 + 1536 + 9},
                             std::size_t{3 * 24576 + 2 * 1536 + 100}, std::size_t{200 * 1024}}) {
    for (std::size_t offset : {0, 3}) {
      const std::span<const std::byte> piece(data.data() + offset, length);
      for (const auto& impl : crc32c_impls()) {
        ASSERT_EQ(impl.function(piece, 0x9abcdef0),
                  codecs::detail::crc32c_portable(piece, 0x9abcdef0))
            << impl.name << " offset " << offset << " length " << length;
      }
    }
  }
}

TEST(Crc32c, ContinuesAcrossPieces) {
  const Bytes data = random_bytes(1000, 11);
  const std::uint32_t whole = codecs::crc32c(data);
  for (std::size_t split : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    const std::span<const std::byte> all(data);
    for (const auto& impl : crc32c_impls()) {
      EXPECT_EQ(impl.function(all.subspan(split), impl.function(all.first(split), 0)), whole)
          << impl.name << " split at " << split;
    }
  }
}

// Checksums of pieces computed apart join into the whole's: each split, lengths past a table's
// reach (of 2^k bytes and between) and empty pieces on either side.
TEST(Crc32c, CombinesPiecesComputedApart) {
  const Bytes data = random_bytes(70000, 12);
  const std::span<const std::byte> all(data);
  for (std::size_t split : {0, 1, 3, 4, 5, 8, 255, 256, 4096, 65536, 69999, 70000}) {
    const std::uint32_t a = codecs::crc32c(all.first(split));
    const std::uint32_t b = codecs::crc32c(all.subspan(split));
    EXPECT_EQ(codecs::crc32c_combine(a, b, data.size() - split), codecs::crc32c(all))
        << "split at " << split;
  }
  // Three pieces joined left to right.
  const std::uint32_t ab = codecs::crc32c_combine(codecs::crc32c(all.first(100)),
                                                  codecs::crc32c(all.subspan(100, 900)), 900);
  EXPECT_EQ(codecs::crc32c_combine(ab, codecs::crc32c(all.subspan(1000)), data.size() - 1000),
            codecs::crc32c(all));
}

// ---------------------------------------------------------------------------------------------
// Registry and configuration

TEST(CompressionCodecs, RegistersEveryName) {
  for (const char* name : {"zstd", "gzip", "blosc", "crc32c", "numcodecs.zlib", "numcodecs.gzip",
                           "numcodecs.zstd", "numcodecs.blosc", "numcodecs.lz4"}) {
    EXPECT_TRUE(CodecRegistry::instance().contains(name)) << name;
    EXPECT_NO_THROW((void)make(name)) << name;
  }
}

TEST(CompressionCodecs, MetadataEntries) {
  EXPECT_EQ(make("zstd")->to_json(),
            json::parse(R"({"name":"zstd","configuration":{"level":0,"checksum":false}})"));
  EXPECT_EQ(make("zstd", {{"level", 7}, {"checksum", true}})->to_json(),
            json::parse(R"({"name":"zstd","configuration":{"level":7,"checksum":true}})"));
  EXPECT_EQ(make("numcodecs.zstd", {{"id", "zstd"}, {"level", 3}})->to_json(),
            json::parse(R"({"id":"zstd","level":3,"checksum":false})"));
  EXPECT_EQ(make("gzip")->to_json(), json::parse(R"({"name":"gzip","configuration":{"level":5}})"));
  EXPECT_EQ(make("numcodecs.gzip")->to_json(), json::parse(R"({"id":"gzip","level":1})"));
  EXPECT_EQ(make("numcodecs.zlib", {{"level", 9}})->to_json(),
            json::parse(R"({"id":"zlib","level":9})"));
  EXPECT_EQ(make("numcodecs.lz4")->to_json(), json::parse(R"({"id":"lz4","acceleration":1})"));
  EXPECT_EQ(make("crc32c")->to_json(), json::parse(R"({"name":"crc32c"})"));
  // zarr-python's BloscCodec defaults once bound to an array of float32.
  EXPECT_EQ(make("blosc", json(), context_for(&kFloat32))->to_json(),
            json::parse(R"({"name":"blosc","configuration":{"cname":"zstd","clevel":5,
                "shuffle":"shuffle","typesize":4,"blocksize":0}})"));
  EXPECT_EQ(make("blosc", json(), context_for(&kUInt8))->to_json()["configuration"]["shuffle"],
            "bitshuffle");
  EXPECT_EQ(make("numcodecs.blosc")->to_json(),
            json::parse(R"({"id":"blosc","cname":"lz4","clevel":5,"shuffle":1,"blocksize":0})"));
  EXPECT_EQ(make("numcodecs.blosc", {{"shuffle", -1}})->to_json()["shuffle"], -1);
}

TEST(CompressionCodecs, BadConfigurationsRaiseFormatError) {
  EXPECT_THROW((void)make("zstd", {{"level", "high"}}), FormatError);
  EXPECT_THROW((void)make("zstd", {{"checksum", 1}}), FormatError);
  EXPECT_THROW((void)make("zstd", json::array({1, 2})), FormatError);
  EXPECT_THROW((void)make("gzip", {{"level", 10}}), FormatError);
  EXPECT_THROW((void)make("gzip", {{"level", 1.5}}), FormatError);
  EXPECT_THROW((void)make("numcodecs.zlib", {{"level", -2}}), FormatError);
  EXPECT_THROW((void)make("blosc", {{"cname", "brotli"}}), FormatError);
  EXPECT_THROW((void)make("blosc", {{"clevel", 10}}), FormatError);
  EXPECT_THROW((void)make("blosc", {{"shuffle", "byteshuffle"}}), FormatError);
  EXPECT_THROW((void)make("blosc", {{"typesize", 0}}), FormatError);
  // Parsed from text, non-negative numbers are unsigned in nlohmann::json.
  EXPECT_THROW((void)make("blosc", json::parse(R"({"typesize": 0})")), FormatError);
  EXPECT_THROW((void)make("blosc", json::parse(R"({"clevel": 18446744073709551615})")),
               FormatError);
  EXPECT_EQ(make("blosc", json::parse(R"({"typesize": 2, "clevel": 9})"))
                ->to_json()["configuration"]["typesize"],
            2);
  EXPECT_THROW((void)make("blosc", {{"blocksize", -1}}), FormatError);
  EXPECT_THROW((void)make("numcodecs.blosc", {{"shuffle", 3}}), FormatError);
  EXPECT_THROW((void)make("numcodecs.blosc", {{"shuffle", "shuffle"}}), FormatError);
  EXPECT_THROW((void)make("numcodecs.lz4", {{"acceleration", "fast"}}), FormatError);
  EXPECT_THROW((void)make("crc32c", "x"), FormatError);
  EXPECT_THROW((void)make("zstd", {{"level", 1ull << 40}}), FormatError);
  try {
    (void)make("gzip", {{"level", 10}});
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("gzip"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("level"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// zstd

// A zstd frame of `blocks` RLE blocks of 128 KiB each (4 bytes apiece), declaring its content
// size when `declared` is given.
Bytes rle_frame(int blocks, std::optional<std::uint32_t> declared, std::byte value) {
  Bytes frame = from_hex("28b52ffd");
  frame.push_back(std::byte{static_cast<unsigned char>(declared ? 0x80 : 0x00)});  // FHD
  frame.push_back(std::byte{0x38});  // window descriptor: 2^17 bytes
  if (declared) {
    for (int i = 0; i < 4; ++i) frame.push_back(static_cast<std::byte>(*declared >> (8 * i)));
  }
  for (int i = 0; i < blocks; ++i) {
    const std::uint32_t header = (128u * 1024 << 3) | (1u << 1) | (i + 1 == blocks ? 1u : 0u);
    for (int b = 0; b < 3; ++b) frame.push_back(static_cast<std::byte>(header >> (8 * b)));
    frame.push_back(value);
  }
  return frame;
}

// Compresses with libzstd directly, leaving the content size out of the frame header.
Bytes zstd_frame_without_size(const Bytes& data, bool checksum) {
  Bytes out = test::zstd_frame(data, false, checksum);
  EXPECT_EQ(ZSTD_getFrameContentSize(out.data(), out.size()), ZSTD_CONTENTSIZE_UNKNOWN);
  return out;
}

TEST(CompressionCodecs, ZstdRoundTrips) {
  for (const char* name : {"zstd", "numcodecs.zstd"}) {
    for (int level : {-5, 0, 1, 3, 19}) {
      for (bool checksum : {false, true}) {
        auto codec = make(name, {{"level", level}, {"checksum", checksum}});
        for (std::size_t n : {0, 1, 1000, 300000}) {
          expect_round_trip(*codec, typed_data(n, 4, static_cast<std::uint32_t>(n)));
        }
        expect_round_trip(*codec, random_bytes(70000, 3));
      }
    }
  }
}

// The blocks of one zstd frame, walked from their headers: how many, and whether any is larger
// than `most` bytes stored (a compressed block's size is its stored size; raw and RLE blocks
// store their decoded size).
std::size_t zstd_blocks(const Buffer& frame) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(frame.data());
  std::size_t at = ZSTD_frameHeaderSize(frame.data(), frame.size());
  EXPECT_FALSE(ZSTD_isError(at));
  std::size_t blocks = 0;
  for (bool last = false; !last;) {
    const std::uint32_t header = bytes[at] | (bytes[at + 1] << 8) | (bytes[at + 2] << 16);
    last = (header & 1) != 0;
    const std::uint32_t type = (header >> 1) & 3;
    const std::uint32_t size = header >> 3;
    at += 3 + (type == 1 ? 1 : size);
    ++blocks;
  }
  return blocks;
}

TEST(CompressionCodecs, ZstdEndsABlockEveryZstdBlockBytes) {
  // bf16-like values whose frames are mostly Huffman-coded literals, as model weights compress.
  const Bytes data = typed_data(1 << 20, 2, 9);
  const Settings before = settings();
  Settings changed = before;
  for (const std::size_t block : {std::size_t{0}, std::size_t{4096}, std::size_t{16384}}) {
    changed.zstd_block_bytes = block;
    set_settings(changed);
    for (bool checksum : {false, true}) {
      const auto codec = make("zstd", {{"level", 1}, {"checksum", checksum}});
      const Buffer encoded = codec->encode(to_buffer(data));
      // One standard frame with its content size, decoded by libzstd as by the codec.
      EXPECT_EQ(ZSTD_getFrameContentSize(encoded.data(), encoded.size()), data.size());
      Bytes back(data.size());
      EXPECT_EQ(ZSTD_decompress(back.data(), back.size(), encoded.data(), encoded.size()),
                data.size());
      EXPECT_EQ(back, data);
      expect_round_trip(*codec, data);
      // A block every `block` bytes where that makes at most 128 (else libzstd's own: one per
      // 128 KiB).
      const std::size_t expected =
          block == 0 || data.size() / block > 128 ? 8 : data.size() / block;
      EXPECT_EQ(zstd_blocks(encoded), expected) << block;
    }
  }
  changed.zstd_block_bytes = 16384;
  set_settings(changed);
  const auto codec = make("zstd", {{"level", 1}});
  // A chunk no larger than a block is one block, as libzstd writes it.
  EXPECT_EQ(zstd_blocks(codec->encode(to_buffer(typed_data(8000, 2, 1)))), 1U);
  // Up to 128 blocks a chunk: 2 MiB in blocks of 16 KiB, 4 MiB in libzstd's 128 KiB.
  EXPECT_EQ(zstd_blocks(codec->encode(to_buffer(typed_data(2 << 20, 2, 2)))), 128U);
  EXPECT_EQ(zstd_blocks(codec->encode(to_buffer(typed_data(4 << 20, 2, 3)))), 32U);
  set_settings(before);
}

TEST(CompressionCodecs, ZstdWritesContentSizeAndChecksumFlag) {
  const Bytes data = typed_data(5000, 2, 1);
  for (bool checksum : {false, true}) {
    const Buffer encoded = make("zstd", {{"checksum", checksum}})->encode(to_buffer(data));
    EXPECT_EQ(ZSTD_getFrameContentSize(encoded.data(), encoded.size()), data.size());
    // Frame header descriptor (after the 4-byte magic), bit 2: Content_Checksum_flag.
    EXPECT_EQ(static_cast<int>(encoded.data()[4]) & 0x04, checksum ? 0x04 : 0);
  }
}

TEST(CompressionCodecs, ZstdGoldenFrames) {
  const Bytes text = bytes_of("hello zarr hello zarr hello zarr!");
  // numcodecs.Zstd(3) and Zstd(3, checksum=True).
  const Bytes plain = from_hex("28b52ffd20219500006068656c6c6f207a61727220210100fe8a17");
  const Bytes checked = from_hex("28b52ffd24219500006068656c6c6f207a61727220210100fe8a174e0d5378");
  for (const char* name : {"zstd", "numcodecs.zstd"}) {
    auto codec = make(name);
    for (const Bytes& frame : {plain, checked}) {
      EXPECT_EQ(to_bytes(codec->decode(to_buffer(frame), text.size())), text);
      EXPECT_EQ(to_bytes(codec->decode(to_buffer(frame), std::nullopt)), text);
    }
    EXPECT_EQ(to_bytes(make(name, {{"level", 3}})->encode(to_buffer(text))), plain);
    EXPECT_EQ(to_bytes(make(name, {{"level", 3}, {"checksum", true}})->encode(to_buffer(text))),
              checked);
  }
  // Written by hand from RFC 8878: one raw block, with and without a declared content size.
  const Bytes hello = bytes_of("hello");
  const Bytes sized = from_hex(
      "28b52ffd2005290000"
      "68656c6c6f");
  const Bytes unsized = from_hex(
      "28b52ffd0000290000"
      "68656c6c6f");
  auto codec = make("zstd");
  for (const Bytes& frame : {sized, unsized}) {
    EXPECT_EQ(to_bytes(codec->decode(to_buffer(frame), 5)), hello);
    EXPECT_EQ(to_bytes(codec->decode(to_buffer(frame), std::nullopt)), hello);
    Bytes out(5);
    codec->decode_into(to_buffer(frame), out);
    EXPECT_EQ(out, hello);
  }
}

TEST(CompressionCodecs, ZstdFramesWithoutContentSize) {
  auto codec = make("zstd");
  for (std::size_t n : {0, 1, 100, 200000}) {
    const Bytes data = typed_data(n, 8, 5);
    for (bool checksum : {false, true}) {
      const Bytes frame = zstd_frame_without_size(data, checksum);
      EXPECT_EQ(to_bytes(codec->decode(to_buffer(frame), n)), data);
      EXPECT_EQ(to_bytes(codec->decode(to_buffer(frame), std::nullopt)), data);
      Bytes out(n);
      codec->decode_into(to_buffer(frame), out);
      EXPECT_EQ(out, data);
      // One byte more or less than the frame holds.
      EXPECT_THROW((void)codec->decode(to_buffer(frame), n + 1), CodecError);
      Bytes bigger(n + 1);
      EXPECT_THROW(codec->decode_into(to_buffer(frame), bigger), CodecError);
      if (n > 0) {
        EXPECT_THROW((void)codec->decode(to_buffer(frame), n - 1), CodecError);
        Bytes smaller(n - 1);
        EXPECT_THROW(codec->decode_into(to_buffer(frame), smaller), CodecError);
      }
    }
  }
}

TEST(CompressionCodecs, ZstdConcatenatedAndSkippableFrames) {
  const Bytes a = typed_data(3000, 4, 1);
  const Bytes b = typed_data(5000, 2, 2);
  const Bytes c = random_bytes(100, 3);
  Bytes stream = to_bytes(make("zstd")->encode(to_buffer(a)));
  const Bytes skippable = from_hex(
      "5a2a4d18"
      "03000000"
      "aabbcc");  // 3 bytes of user data
  stream.insert(stream.end(), skippable.begin(), skippable.end());
  const Bytes unsized = zstd_frame_without_size(b, true);
  stream.insert(stream.end(), unsized.begin(), unsized.end());
  const Bytes sized_c = to_bytes(make("zstd", {{"checksum", true}})->encode(to_buffer(c)));
  stream.insert(stream.end(), sized_c.begin(), sized_c.end());

  Bytes expected = a;
  expected.insert(expected.end(), b.begin(), b.end());
  expected.insert(expected.end(), c.begin(), c.end());
  auto codec = make("zstd");
  EXPECT_EQ(to_bytes(codec->decode(to_buffer(stream), expected.size())), expected);
  EXPECT_EQ(to_bytes(codec->decode(to_buffer(stream), std::nullopt)), expected);
  Bytes out(expected.size());
  codec->decode_into(to_buffer(stream), out);
  EXPECT_EQ(out, expected);
  // The declared sizes (a and c) alone already exceed this.
  EXPECT_THROW((void)codec->decode(to_buffer(stream), a.size()), CodecError);

  // All frames sized: the one-shot path.
  Bytes sized = to_bytes(codec->encode(to_buffer(a)));
  sized.insert(sized.end(), sized_c.begin(), sized_c.end());
  Bytes ac = a;
  ac.insert(ac.end(), c.begin(), c.end());
  EXPECT_EQ(to_bytes(codec->decode(to_buffer(sized), ac.size())), ac);
  EXPECT_EQ(to_bytes(codec->decode(to_buffer(sized), std::nullopt)), ac);
  EXPECT_THROW((void)codec->decode(to_buffer(sized), ac.size() + 1), CodecError);
}

TEST(CompressionCodecs, ZstdOutputGrowsWhenNothingDeclaresItsSize) {
  auto codec = make("zstd");
  // 8 MiB from 262 bytes: far past the first guess of the output size.
  const Bytes frame = rle_frame(64, std::nullopt, std::byte{7});
  const Buffer decoded = codec->decode(to_buffer(frame), std::nullopt);
  ASSERT_EQ(decoded.size(), 64u * 128 * 1024);
  EXPECT_EQ(to_bytes(decoded), Bytes(decoded.size(), std::byte{7}));
  EXPECT_EQ(codec->decode(to_buffer(frame), decoded.size()).size(), decoded.size());
  EXPECT_THROW((void)codec->decode(to_buffer(frame), decoded.size() - 1), CodecError);

  // A declared size beyond what is allocated up front: streamed, and held to the declaration.
  const std::uint32_t big = 600u * 128 * 1024;
  EXPECT_EQ(codec->decode(to_buffer(rle_frame(600, big, std::byte{1})), std::nullopt).size(), big);
  EXPECT_THROW((void)codec->decode(to_buffer(rle_frame(599, big, std::byte{1})), std::nullopt),
               CodecError);
  EXPECT_THROW((void)codec->decode(to_buffer(rle_frame(600, big - 1, std::byte{1})), std::nullopt),
               CodecError);
}

TEST(CompressionCodecs, ZstdSizeMismatchRaisesCodecError) {
  const Bytes data = typed_data(10000, 4, 9);
  for (const char* name : {"zstd", "numcodecs.zstd"}) {
    auto codec = make(name);
    const Buffer encoded = codec->encode(to_buffer(data));
    for (std::size_t wrong : {std::size_t{0}, data.size() - 1, data.size() + 1, data.size() * 2}) {
      EXPECT_THROW((void)codec->decode(encoded, wrong), CodecError) << wrong;
      Bytes out(wrong);
      EXPECT_THROW(codec->decode_into(encoded, out), CodecError) << wrong;
    }
    try {
      (void)codec->decode(encoded, data.size() + 1);
      ADD_FAILURE() << "no error";
    } catch (const CodecError& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::to_string(data.size())), std::string::npos)
          << e.what();
    }
  }
}

TEST(CompressionCodecs, ZstdHostileContentSizeIsNotAllocated) {
  // A raw block of 5 bytes in a frame that declares 2^40 bytes of content.
  const Bytes frame = from_hex(
      "28b52ffde0"
      "0000000000010000"
      "290000"
      "68656c6c6f");
  ASSERT_EQ(ZSTD_getFrameContentSize(frame.data(), frame.size()), 1ull << 40);
  auto codec = make("zstd");
  AddressSpaceCap cap(std::size_t{1} << 30);
  if (cap.active()) {
    EXPECT_THROW(ByteArray(std::size_t{4} << 30), OutOfMemoryError);
  }
  expect_decode_error(*codec, frame, 5, "declares 2^40 bytes");
  try {
    (void)codec->decode(to_buffer(frame), std::nullopt);
  } catch (const CodecError& e) {
    EXPECT_NE(std::string(e.what()).find("1099511627776"), std::string::npos) << e.what();
  }
  // The caller expecting 1 GiB from 18 bytes: refused before allocating.
  EXPECT_THROW((void)codec->decode(to_buffer(frame), std::size_t{1} << 30), CodecError);
}

TEST(CompressionCodecs, ZstdTruncatedOrCorruptRaisesCodecError) {
  auto codec = make("zstd", {{"checksum", true}});
  const Bytes small = typed_data(200, 2, 4);
  const Bytes encoded = to_bytes(codec->encode(to_buffer(small)));
  expect_truncations_rejected(*codec, encoded, small.size());
  const Bytes large = typed_data(300000, 4, 4);
  const Bytes encoded_large = to_bytes(codec->encode(to_buffer(large)));
  expect_truncations_rejected(*codec, encoded_large, large.size(), 997);
  expect_truncations_rejected(*codec, zstd_frame_without_size(large, false), large.size(), 997);

  // With a content checksum, a flipped bit either is caught or changes nothing (an unused header
  // bit, bits of an entropy table description that decode the same).
  int caught = 0;
  int flips = 0;
  for (std::size_t i = 0; i < encoded.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit, ++flips) {
      Bytes damaged = encoded;
      damaged[i] ^= static_cast<std::byte>(1 << bit);
      SCOPED_TRACE("byte " + std::to_string(i) + " bit " + std::to_string(bit));
      Bytes out(small.size());
      try {
        codec->decode_into(to_buffer(damaged), out);
        EXPECT_EQ(out, small);
        EXPECT_EQ(to_bytes(codec->decode(to_buffer(damaged), small.size())), small);
      } catch (const CodecError&) {
        ++caught;
        EXPECT_THROW((void)codec->decode(to_buffer(damaged), small.size()), CodecError);
      }
    }
  }
  EXPECT_GT(caught, flips * 9 / 10);
  Bytes bad_checksum = encoded;
  bad_checksum.back() ^= std::byte{1};
  EXPECT_THROW((void)codec->decode(to_buffer(bad_checksum), small.size()), ChecksumError);

  expect_decode_error(*codec, Bytes(), 0, "empty");
  expect_decode_error(*codec, bytes_of("not zstd at all"), 10, "not a frame");
  Bytes trailing = encoded;
  trailing.push_back(std::byte{0});
  expect_decode_error(*codec, trailing, small.size(), "trailing byte");
}

TEST(CompressionCodecs, ZstdRandomDamageNeverCrashes) {
  auto codec = make("zstd");
  const Bytes data = typed_data(20000, 4, 12);
  fuzz_decode(*codec, to_bytes(codec->encode(to_buffer(data))), data.size(), 400, 1);
  fuzz_decode(*codec, zstd_frame_without_size(data, false), data.size(), 400, 2);
  fuzz_decode(*codec, rle_frame(8, std::nullopt, std::byte{3}), 8 * 128 * 1024, 200, 3);
}

// ---------------------------------------------------------------------------------------------
// gzip and zlib

TEST(CompressionCodecs, DeflateRoundTrips) {
  for (const char* name : {"gzip", "numcodecs.gzip", "numcodecs.zlib"}) {
    for (int level : {-1, 0, 1, 5, 9}) {
      auto codec = make(name, {{"level", level}});
      for (std::size_t n : {0, 1, 1000, 300000}) {
        expect_round_trip(*codec, typed_data(n, 2, static_cast<std::uint32_t>(n)));
      }
      expect_round_trip(*codec, random_bytes(70000, 5));
    }
  }
}

TEST(CompressionCodecs, DeflateGoldenStreams) {
  const Bytes text = bytes_of("hello zarr hello zarr hello zarr!");
  // numcodecs.GZip(1) and numcodecs.Zlib(1).
  const Bytes gzip =
      from_hex("1f8b080081e80c6b04ffcb48cdc9c957a84a2c2a52c8c0c6540400d4f3c57a21000000");
  const Bytes zlib = from_hex("7801cb48cdc9c957a84a2c2a52c8c0c6540400d3720c3b");
  for (const char* name : {"gzip", "numcodecs.gzip"}) {
    EXPECT_EQ(to_bytes(make(name)->decode(to_buffer(gzip), text.size())), text);
    EXPECT_EQ(to_bytes(make(name)->decode(to_buffer(gzip), std::nullopt)), text);
  }
  auto zlib_codec = make("numcodecs.zlib");
  EXPECT_EQ(to_bytes(zlib_codec->decode(to_buffer(zlib), text.size())), text);
  EXPECT_EQ(to_bytes(zlib_codec->decode(to_buffer(zlib), std::nullopt)), text);
  // Same deflate settings as Python's zlib.compress, so the bytes match exactly.
  EXPECT_EQ(to_bytes(zlib_codec->encode(to_buffer(text))), zlib);
  // Our gzip header has no timestamp, but the deflate body and trailer match numcodecs'.
  const Bytes ours = to_bytes(make("numcodecs.gzip")->encode(to_buffer(text)));
  ASSERT_EQ(ours.size(), gzip.size());
  EXPECT_EQ(Bytes(ours.begin() + 10, ours.end()), Bytes(gzip.begin() + 10, gzip.end()));
}

TEST(CompressionCodecs, GzipConcatenatedMembersAndPadding) {
  auto codec = make("gzip");
  const Bytes a = typed_data(4000, 4, 1);
  const Bytes b = random_bytes(3000, 2);
  Bytes stream = to_bytes(codec->encode(to_buffer(a)));
  stream.insert(stream.end(), 5, std::byte{0});  // Python's gzip module skips zero padding
  const Bytes second = to_bytes(codec->encode(to_buffer(b)));
  stream.insert(stream.end(), second.begin(), second.end());
  stream.insert(stream.end(), 3, std::byte{0});
  Bytes expected = a;
  expected.insert(expected.end(), b.begin(), b.end());
  EXPECT_EQ(to_bytes(codec->decode(to_buffer(stream), expected.size())), expected);
  EXPECT_EQ(to_bytes(codec->decode(to_buffer(stream), std::nullopt)), expected);
  Bytes out(expected.size());
  codec->decode_into(to_buffer(stream), out);
  EXPECT_EQ(out, expected);
  // Garbage after a member is not another member.
  Bytes garbage = stream;
  garbage.push_back(std::byte{0x42});
  expect_decode_error(*codec, garbage, expected.size(), "garbage after the members");
}

TEST(CompressionCodecs, DeflateOutputGrowsWhenNothingDeclaresItsSize) {
  const Bytes zeros(10u << 20, std::byte{0});
  for (const char* name : {"gzip", "numcodecs.zlib"}) {
    auto codec = make(name, {{"level", 9}});
    const Buffer encoded = codec->encode(to_buffer(zeros));
    EXPECT_LT(encoded.size(), zeros.size() / 500);
    EXPECT_EQ(to_bytes(codec->decode(encoded, std::nullopt)), zeros) << name;
  }
  // Two members: the size in the last member's trailer is not the whole output.
  auto gzip = make("gzip");
  Bytes two = to_bytes(gzip->encode(to_buffer(zeros)));
  const Bytes small = to_bytes(gzip->encode(to_buffer(bytes_of("tail"))));
  two.insert(two.end(), small.begin(), small.end());
  EXPECT_EQ(gzip->decode(to_buffer(two), std::nullopt).size(), zeros.size() + 4);
}

TEST(CompressionCodecs, DeflateTruncatedOrCorruptRaisesCodecError) {
  const Bytes data = typed_data(3000, 2, 8);
  for (const char* name : {"gzip", "numcodecs.gzip", "numcodecs.zlib"}) {
    auto codec = make(name);
    const Bytes encoded = to_bytes(codec->encode(to_buffer(data)));
    expect_truncations_rejected(*codec, encoded, data.size());
    // gzip's header fields (flags, time, OS) are unprotected; everything after is checked by
    // the stream's structure, CRC-32 and length. zlib's two header bytes carry a check.
    const std::size_t first =
        std::string_view(name).find("zlib") != std::string_view::npos ? 0 : 10;
    for (std::size_t i = first; i < encoded.size(); ++i) {
      Bytes damaged = encoded;
      damaged[i] ^= std::byte{0xFF};
      expect_decode_error(*codec, damaged, data.size(), "byte " + std::to_string(i) + " flipped");
    }
    for (std::size_t wrong : {std::size_t{0}, data.size() - 1, data.size() + 1}) {
      EXPECT_THROW((void)codec->decode(to_buffer(encoded), wrong), CodecError);
      Bytes out(wrong);
      EXPECT_THROW(codec->decode_into(to_buffer(encoded), out), CodecError);
    }
    expect_decode_error(*codec, Bytes(), 0, "empty");
    expect_decode_error(*codec, bytes_of("definitely not deflate"), 10, "not a stream");
  }
  // A damaged checksum is a ChecksumError: gzip's CRC-32 sits before the 4-byte length, zlib's
  // Adler-32 is last.
  Bytes gzip = to_bytes(make("gzip")->encode(to_buffer(data)));
  gzip[gzip.size() - 8] ^= std::byte{1};
  EXPECT_THROW((void)make("gzip")->decode(to_buffer(gzip), data.size()), ChecksumError);
  Bytes zlib = to_bytes(make("numcodecs.zlib")->encode(to_buffer(data)));
  zlib.back() ^= std::byte{1};
  EXPECT_THROW((void)make("numcodecs.zlib")->decode(to_buffer(zlib), data.size()), ChecksumError);
  // zlib streams do not concatenate: anything after the end is an error.
  Bytes trailing = to_bytes(make("numcodecs.zlib")->encode(to_buffer(data)));
  trailing.push_back(std::byte{0});
  expect_decode_error(*make("numcodecs.zlib"), trailing, data.size(), "trailing byte");
}

TEST(CompressionCodecs, DeflateRandomDamageNeverCrashes) {
  const Bytes data = typed_data(20000, 4, 13);
  for (const char* name : {"gzip", "numcodecs.zlib"}) {
    auto codec = make(name);
    fuzz_decode(*codec, to_bytes(codec->encode(to_buffer(data))), data.size(), 400, 4);
  }
}

// ---------------------------------------------------------------------------------------------
// blosc

TEST(CompressionCodecs, BloscRoundTripsEveryCompressorShuffleAndTypesize) {
  const std::vector<std::string> compressors = blosc_compressors();
  std::printf("blosc compressors in this build: %s\n", blosc_list_compressors());
  ASSERT_FALSE(compressors.empty());
  for (const std::string& cname : compressors) {
    for (const char* shuffle : {"noshuffle", "shuffle", "bitshuffle"}) {
      for (int typesize : {1, 2, 4, 8, 16}) {
        auto codec = make("blosc", {{"cname", cname},
                                    {"clevel", 5},
                                    {"shuffle", shuffle},
                                    {"typesize", typesize},
                                    {"blocksize", 0}});
        for (std::size_t n : {0, 7, 1000, 70001}) {
          expect_round_trip(*codec, typed_data(n, typesize, static_cast<std::uint32_t>(n)));
        }
      }
    }
  }
}

TEST(CompressionCodecs, BloscLevelsAndBlocksizes) {
  const Bytes data = typed_data(200000, 4, 21);
  for (int clevel : {0, 1, 9}) {
    for (int blocksize : {0, 256, 4096, 65536}) {
      expect_round_trip(
          *make("blosc",
                {{"cname", "lz4"}, {"clevel", clevel}, {"blocksize", blocksize}, {"typesize", 4}}),
          data);
    }
  }
  expect_round_trip(*make("blosc", {{"typesize", 300}}), data);  // blosc treats >255 as bytes
}

TEST(CompressionCodecs, BloscNumcodecsShuffleCodes) {
  const Bytes data = typed_data(50000, 8, 3);
  // Header byte 2 holds the flags: 0x1 byte shuffle, 0x4 bit shuffle.
  const auto flags = [&](const BytesToBytesCodec& codec) {
    return static_cast<int>(codec.encode(to_buffer(data)).data()[2]) & 0x5;
  };
  EXPECT_EQ(flags(*make("numcodecs.blosc", {{"shuffle", 0}}, context_for(&kFloat64))), 0);
  EXPECT_EQ(flags(*make("numcodecs.blosc", {{"shuffle", 1}}, context_for(&kFloat64))), 1);
  EXPECT_EQ(flags(*make("numcodecs.blosc", {{"shuffle", 2}}, context_for(&kFloat64))), 4);
  // AUTOSHUFFLE: bit shuffle for single bytes, byte shuffle otherwise.
  EXPECT_EQ(flags(*make("numcodecs.blosc", {{"shuffle", -1}}, context_for(&kUInt8))), 4);
  EXPECT_EQ(flags(*make("numcodecs.blosc", {{"shuffle", -1}}, context_for(&kFloat64))), 1);
  for (int shuffle : {-1, 0, 1, 2}) {
    for (const std::string& cname : blosc_compressors()) {
      expect_round_trip(*make("numcodecs.blosc", {{"cname", cname}, {"shuffle", shuffle}},
                              context_for(&kFloat64)),
                        data);
    }
  }
}

TEST(CompressionCodecs, BloscTypesizeDefaultsToElementSize) {
  const Bytes data = typed_data(4096, 4, 1);
  for (const char* name : {"blosc", "numcodecs.blosc"}) {
    const Buffer encoded = make(name, json(), context_for(&kFloat32))->encode(to_buffer(data));
    EXPECT_EQ(static_cast<int>(encoded.data()[3]), 4) << name;  // header byte 3: typesize
  }
  const Buffer explicit_size =
      make("blosc", {{"typesize", 8}}, context_for(&kFloat32))->encode(to_buffer(data));
  EXPECT_EQ(static_cast<int>(explicit_size.data()[3]), 8);
  EXPECT_NO_THROW((void)make("blosc", json(), context_for(nullptr)));
}

TEST(CompressionCodecs, BloscGoldenBuffers) {
  // numcodecs.Blosc over numpy arrays.
  Bytes arange64(256);
  for (int i = 0; i < 64; ++i) arange64[4 * i] = static_cast<std::byte>(i);
  const std::vector<std::pair<const char*, Bytes>> golden = {
      {"lz4, shuffle, arange(64, '<u4')",
       from_hex("020131040001000000010000680000001400000050000000ff36000102030405060708090a0b0c0d"
                "0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435"
                "363738393a3b3c3d3e3f00000000000500a3500000000000")},
      {"zlib, bitshuffle, arange(64, '<u4')",
       from_hex("02017404000100000001000035000000140000001d000000785e5bb50a02ce40c1072860f80f850c"
                "ffa1184442e8e1040082341f25")},
  };
  for (const char* name : {"blosc", "numcodecs.blosc"}) {
    auto codec = make(name);
    for (const auto& [what, encoded] : golden) {
      EXPECT_EQ(to_bytes(codec->decode(to_buffer(encoded), arange64.size())), arange64) << what;
      EXPECT_EQ(to_bytes(codec->decode(to_buffer(encoded), std::nullopt)), arange64) << what;
    }
  }
  const Bytes zeros_u2 = from_hex(
      "02012102d0070000d007000038000000140000000e0000001f000100ffffffd25000000000000e0000001f0001"
      "00ffffffd2500000000000");  // lz4, shuffle, zeros(1000, '<u2')
  EXPECT_EQ(to_bytes(make("blosc")->decode(to_buffer(zeros_u2), 2000)), Bytes(2000, std::byte{0}));
  const Bytes zstd_u4 = from_hex(
      "02019404000400000004000048000000140000003000000028b52ffd60000335010040aaaaccf000ff00ff0c"
      "a030ef01a0829377ed5035045a1013f3884ba2956dee66356814f10f");  // zstd, bitshuffle, arange(256)
  Bytes arange256(1024);
  for (int i = 0; i < 256; ++i) arange256[4 * i] = static_cast<std::byte>(i);
  EXPECT_EQ(to_bytes(make("blosc")->decode(to_buffer(zstd_u4), 1024)), arange256);
}

// Where the first block starts: the first entry of the offsets after the 16-byte header.
std::size_t load_first_bstart(const Bytes& encoded) {
  std::size_t offset = 0;
  for (int i = 0; i < 4; ++i) offset |= static_cast<std::size_t>(encoded[16 + i]) << (8 * i);
  return offset;
}

TEST(CompressionCodecs, BloscTruncatedOrCorruptRaisesCodecError) {
  const Bytes data = typed_data(20000, 4, 5);
  for (const std::string& cname : blosc_compressors()) {
    auto codec = make("blosc", {{"cname", cname}, {"typesize", 4}});
    const Bytes encoded = to_bytes(codec->encode(to_buffer(data)));
    SCOPED_TRACE(cname);
    expect_truncations_rejected(*codec, encoded, data.size(), encoded.size() > 2000 ? 37 : 1);
    // Header: version, compressed length, and block offsets that point outside the buffer.
    for (std::size_t i :
         {std::size_t{0}, std::size_t{12}, std::size_t{13}, std::size_t{16}, std::size_t{19}}) {
      Bytes damaged = encoded;
      damaged[i] ^= std::byte{0xFF};
      expect_decode_error(*codec, damaged, data.size(), "byte " + std::to_string(i) + " flipped");
    }
    for (std::size_t wrong : {std::size_t{0}, data.size() - 1, data.size() + 1}) {
      EXPECT_THROW((void)codec->decode(to_buffer(encoded), wrong), CodecError);
      Bytes out(wrong);
      EXPECT_THROW(codec->decode_into(to_buffer(encoded), out), CodecError);
    }
    Bytes trailing = encoded;
    trailing.push_back(std::byte{0});
    expect_decode_error(*codec, trailing, data.size(), "trailing byte");
  }
  // A compressed stream that is damaged inside: zstd's own frame checks catch it.
  auto zstd = make("blosc", {{"cname", "zstd"}, {"typesize", 4}, {"shuffle", "noshuffle"}});
  Bytes damaged = to_bytes(zstd->encode(to_buffer(data)));
  ASSERT_EQ(static_cast<int>(damaged[2]) & 0x2, 0) << "stored uncompressed";
  const std::size_t first_block = load_first_bstart(damaged);
  damaged[first_block + 4] ^= std::byte{0xFF};  // the zstd magic number of the first split
  expect_decode_error(*zstd, damaged, data.size(), "inner zstd frame damaged");
}

TEST(CompressionCodecs, BloscHeaderClaimingGigabytesIsNotAllocated) {
  // A 16-byte header that declares 2 GiB - 17 bytes of output and says it is 16 bytes long.
  const Bytes header = from_hex(
      "02013104"
      "efffff7f"
      "00000100"
      "10000000");
  auto codec = make("blosc");
  AddressSpaceCap cap(std::size_t{1} << 30);
  if (cap.active()) {
    EXPECT_THROW(ByteArray(std::size_t{4} << 30), OutOfMemoryError);
  }
  EXPECT_THROW((void)codec->decode(to_buffer(header), std::nullopt), CodecError);
  EXPECT_THROW((void)codec->decode(to_buffer(header), 1000), CodecError);
}

TEST(CompressionCodecs, BloscRandomDamageNeverCrashes) {
  const Bytes data = typed_data(20000, 4, 14);
  std::uint32_t seed = 100;
  for (const std::string& cname : blosc_compressors()) {
    for (const char* shuffle : {"noshuffle", "shuffle", "bitshuffle"}) {
      auto codec = make("blosc", {{"cname", cname}, {"shuffle", shuffle}, {"typesize", 4}});
      fuzz_decode(*codec, to_bytes(codec->encode(to_buffer(data))), data.size(), 100, ++seed);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// lz4 (numcodecs)

TEST(CompressionCodecs, Lz4RoundTrips) {
  for (int acceleration : {-5, 0, 1, 10, 1000}) {
    auto codec = make("numcodecs.lz4", {{"acceleration", acceleration}});
    for (std::size_t n : {0, 1, 1000, 300000}) {
      expect_round_trip(*codec, typed_data(n, 4, static_cast<std::uint32_t>(n)));
    }
    expect_round_trip(*codec, random_bytes(70000, 6));
  }
}

TEST(CompressionCodecs, Lz4GoldenAndFormat) {
  const Bytes text = bytes_of("hello zarr hello zarr hello zarr!");
  // numcodecs.LZ4(): the size 33 as 4 little-endian bytes, then the LZ4 block.
  const Bytes golden = from_hex("21000000bd68656c6c6f207a617272200b00507a61727221");
  auto codec = make("numcodecs.lz4");
  EXPECT_EQ(to_bytes(codec->decode(to_buffer(golden), text.size())), text);
  EXPECT_EQ(to_bytes(codec->decode(to_buffer(golden), std::nullopt)), text);
  EXPECT_EQ(to_bytes(codec->encode(to_buffer(text))), golden);
  const Buffer encoded = codec->encode(to_buffer(Bytes(100000, std::byte{1})));
  EXPECT_EQ(Bytes(encoded.data(), encoded.data() + 4), from_hex("a0860100"));
}

TEST(CompressionCodecs, Lz4TruncatedOrCorruptRaisesCodecError) {
  auto codec = make("numcodecs.lz4");
  const Bytes data = typed_data(5000, 4, 15);
  const Bytes encoded = to_bytes(codec->encode(to_buffer(data)));
  expect_truncations_rejected(*codec, encoded, data.size());
  // The size prefix disagreeing with the block, or with the caller.
  for (std::size_t i = 0; i < 4; ++i) {
    Bytes damaged = encoded;
    damaged[i] ^= std::byte{0x01};
    expect_decode_error(*codec, damaged, data.size(), "prefix byte " + std::to_string(i));
  }
  for (std::size_t wrong : {std::size_t{0}, data.size() - 1, data.size() + 1}) {
    EXPECT_THROW((void)codec->decode(to_buffer(encoded), wrong), CodecError);
    Bytes out(wrong);
    EXPECT_THROW(codec->decode_into(to_buffer(encoded), out), CodecError);
  }
  // A match reaching back before the start of the output.
  expect_decode_error(*codec,
                      from_hex("10000000"
                               "1f"
                               "41"
                               "ffff"
                               "00"),
                      16, "bad offset");
  fuzz_decode(*codec, encoded, data.size(), 400, 5);
}

TEST(CompressionCodecs, Lz4PrefixClaimingFourGibibytesIsNotAllocated) {
  auto codec = make("numcodecs.lz4");
  const Bytes hostile = from_hex(
      "ffffffff"
      "00");
  AddressSpaceCap cap(std::size_t{1} << 30);
  if (cap.active()) {
    EXPECT_THROW(ByteArray(std::size_t{4} << 30), OutOfMemoryError);
  }
  EXPECT_THROW((void)codec->decode(to_buffer(hostile), std::nullopt), CodecError);
  EXPECT_THROW((void)codec->decode(to_buffer(hostile), 1), CodecError);
  // Within int range but more than 1 byte of block could produce.
  EXPECT_THROW((void)codec->decode(to_buffer(from_hex("00000070"
                                                      "00")),
                                   std::nullopt),
               CodecError);
  try {
    (void)codec->decode(to_buffer(hostile), std::nullopt);
  } catch (const CodecError& e) {
    EXPECT_NE(std::string(e.what()).find("4294967295"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("lz4"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// crc32c codec

TEST(CompressionCodecs, Crc32cAppendsChecksum) {
  auto codec = make("crc32c");
  // zarr-python's Crc32cCodec output for b"hello zarr".
  const Bytes golden = from_hex(
      "68656c6c6f207a617272"
      "ba65a06e");
  EXPECT_EQ(to_bytes(codec->encode(to_buffer(bytes_of("hello zarr")))), golden);
  EXPECT_EQ(codec->encoded_size(10), 14u);
  const Buffer encoded = to_buffer(golden);
  const Buffer decoded = codec->decode(encoded, 10);
  EXPECT_EQ(to_bytes(decoded), bytes_of("hello zarr"));
  EXPECT_EQ(decoded.data(), encoded.data()) << "decode should slice, not copy";
  for (std::size_t n : {0, 1, 5000}) expect_round_trip(*codec, random_bytes(n, 9));
}

TEST(CompressionCodecs, Crc32cMismatchRaisesChecksumError) {
  auto codec = make("crc32c");
  Bytes damaged = from_hex(
      "68656c6c6f207a617272"
      "ba65a06e");
  damaged[0] ^= std::byte{0x01};
  expect_decode_error(*codec, damaged, 10, "payload damaged");
  EXPECT_THROW((void)codec->decode(to_buffer(damaged), 10), ChecksumError);
  Bytes out(10);
  EXPECT_THROW(codec->decode_into(to_buffer(damaged), out), ChecksumError);
  try {
    (void)codec->decode(to_buffer(damaged), std::nullopt);
    ADD_FAILURE() << "no error";
  } catch (const ChecksumError& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kChecksum);
    EXPECT_NE(message.find("crc32c"), std::string::npos) << message;
    EXPECT_NE(message.find("0x6ea065ba"), std::string::npos) << message;  // stored
    EXPECT_NE(message.find([&] {
      char hex[11];
      std::snprintf(hex, sizeof hex, "0x%08x", codecs::crc32c(std::span(damaged).first(10)));
      return std::string(hex);
    }()),
              std::string::npos)
        << message;
  }
}

TEST(CompressionCodecs, Crc32cShortOrMisSizedInputRaisesCodecError) {
  auto codec = make("crc32c");
  for (std::size_t n : {0, 1, 3}) {
    const Buffer short_input = to_buffer(Bytes(n, std::byte{0}));
    EXPECT_THROW((void)codec->decode(short_input, std::nullopt), CodecError);
    Bytes out(0);
    EXPECT_THROW(codec->decode_into(short_input, out), CodecError);
  }
  const Buffer encoded = codec->encode(to_buffer(bytes_of("abc")));
  EXPECT_THROW((void)codec->decode(encoded, 4), CodecError);
  Bytes wrong(2);
  EXPECT_THROW(codec->decode_into(encoded, wrong), CodecError);
  EXPECT_EQ(codec->decode(to_buffer(from_hex("00000000")), 0).size(), 0u);  // crc32c("") == 0
}

// ---------------------------------------------------------------------------------------------

TEST(CompressionCodecs, CodecsAreSafeToShareAcrossThreads) {
  const std::vector<std::shared_ptr<BytesToBytesCodec>> codecs = {
      make("zstd", {{"checksum", true}}), make("gzip"),          make("numcodecs.zlib"),
      make("blosc", {{"typesize", 4}}),   make("numcodecs.lz4"), make("crc32c")};
  std::vector<std::thread> threads;
  threads.reserve(8);
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 30; ++i) {
        const Bytes data = typed_data(10000 + 97 * i, 4, static_cast<std::uint32_t>(t * 100 + i));
        for (const auto& codec : codecs) {
          const Buffer encoded = codec->encode(to_buffer(data));
          const Buffer decoded = codec->decode(encoded, data.size());
          if (!std::ranges::equal(decoded.span(), data)) ++failures;
          // A failed decode must not poison the thread's reusable state.
          try {
            (void)codec->decode(encoded.slice(0, encoded.size() / 2), data.size());
            ++failures;
          } catch (const CodecError&) {
          }
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
// Found by fuzzing (cpp/fuzz): libzstd's streaming decoder "completes" a frame that ends in an
// empty last block before producing its declared size when the output buffer is small; every
// decode path must refuse it, not only the sized ones.
TEST(Zstd, AFrameMustHoldTheSizeItDeclares) {
  const auto codec = make("zstd");
  const Bytes frames = from_hex("28b52ffd80180a5d2c0005000028b52ffd0000050000");
  EXPECT_THROW((void)codec->decode(to_buffer(frames), std::nullopt), CodecError);
  EXPECT_THROW((void)codec->decode(to_buffer(frames), DecodedSize::bounded(1 << 20)), CodecError);
}

// Found by fuzzing (cpp/fuzz): a frame without a declared size whose blocks reach back past its
// window. Decoded through zstd's own window buffer, which a thread's context keeps from one decode
// to the next, it failed or succeeded depending on how large an earlier frame had made that
// buffer. Every decode of it must give the same answer, whatever ran on the thread before.
TEST(Zstd, AFrameDecodesAlikeWhateverTheThreadDecodedBefore) {
  const auto codec = make("zstd");
  const Bytes frame = from_hex(
      "28b52ffd00260202020202020202020202020202020202020202020202020202"
      "0202020202020202020202020202025d02020202020202020202020202020202"
      "020202020202bd000070004201000000240600ff98b7a5430341004430706604");
  struct Outcome {
    bool ok = false;
    Bytes bytes;
  };
  const auto decode_after = [&](const Bytes* before) {
    Outcome outcome;
    std::thread([&] {
      if (before != nullptr) (void)codec->decode(to_buffer(*before), std::nullopt);
      try {
        outcome.bytes = to_bytes(codec->decode(to_buffer(frame), std::nullopt));
        outcome.ok = true;
      } catch (const CodecError&) {
      }
    }).join();
    return outcome;
  };
  // A frame with an 8 MiB window and no declared size: its decode leaves a large buffer behind.
  Bytes large(8 << 20);
  std::mt19937 random(7);
  for (std::size_t i = 0; i < large.size(); i += 64) large[i] = static_cast<std::byte>(random());
  const Bytes large_frame = zstd_frame_without_size(large, false);
  const Outcome alone = decode_after(nullptr);
  const Outcome after_large = decode_after(&large_frame);
  EXPECT_EQ(alone.ok, after_large.ok);
  EXPECT_EQ(alone.bytes, after_large.bytes);
  if (alone.ok) {  // the sized decodes agree with the free one
    Bytes into(alone.bytes.size());
    codec->decode_into(to_buffer(frame), into);
    EXPECT_EQ(into, alone.bytes);
  }
}

// crc32c returns a slice of its input, yet it too keeps to the bound the chain gives it.
TEST(Crc32c, KeepsToTheChainsBound) {
  const auto codec = make("crc32c");
  const Bytes payload = bytes_of("abcdefgh");
  const Buffer stored = codec->encode(to_buffer(payload));
  EXPECT_EQ(to_bytes(codec->decode(stored, DecodedSize::bounded(8))), payload);
  EXPECT_THROW((void)codec->decode(stored, DecodedSize::bounded(7)), CodecError);
}

}  // namespace zarr_device
