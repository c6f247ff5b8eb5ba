// fuzz_decoders: each bytes->bytes codec of the registry alone.
//
// Input: [codec][size, u16 little endian][encoded bytes...]. `codec` picks an entry of kTable
// (modulo its size). Each input is decoded with no size known, with `size` as the exact decoded
// size (decode(buffer, size) and decode_into), with `size` as a bound (DecodedSize::bounded), and,
// when the free decode succeeds, again with the size it produced. Then the decoded bytes and the
// input bytes are encoded and decoded back. Findings besides crashes: a decode returning another
// size than asked or more than its bound, decode(size) and decode_into disagreeing, a sized or
// bounded decode disagreeing with the free one, a round trip that changes the data.
#include <cstdint>
#include <memory>

#include "fuzz_common.hpp"

namespace {

using namespace zarr_device;
using namespace zarr_device::fuzz;

// "data_type" is what the codec is told about the chunk (blosc's default typesize).
const char* const kTable = R"json([
 {"label": "zstd", "name": "zstd", "configuration": {"level": 0, "checksum": false},
  "data_type": "uint8"},
 {"label": "zstd checksum", "name": "zstd", "configuration": {"level": 3, "checksum": true},
  "data_type": "uint8"},
 {"label": "gzip", "name": "gzip", "configuration": {"level": 5}, "data_type": "uint8"},
 {"label": "numcodecs.gzip", "name": "numcodecs.gzip", "configuration": {"level": 1},
  "data_type": "uint8"},
 {"label": "numcodecs.zlib", "name": "numcodecs.zlib", "configuration": {"level": 1},
  "data_type": "uint8"},
 {"label": "numcodecs.zstd", "name": "numcodecs.zstd", "configuration": {"level": 1},
  "data_type": "uint8"},
 {"label": "blosc lz4 shuffle", "name": "blosc",
  "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4,
                    "blocksize": 0}, "data_type": "float32"},
 {"label": "blosc zstd bitshuffle", "name": "blosc",
  "configuration": {"cname": "zstd", "clevel": 5, "shuffle": "bitshuffle", "typesize": 1,
                    "blocksize": 0}, "data_type": "uint8"},
 {"label": "blosc zlib noshuffle", "name": "blosc",
  "configuration": {"cname": "zlib", "clevel": 1, "shuffle": "noshuffle", "typesize": 2,
                    "blocksize": 0}, "data_type": "uint16"},
 {"label": "blosc blosclz small blocks", "name": "blosc",
  "configuration": {"cname": "blosclz", "clevel": 9, "shuffle": "shuffle", "typesize": 8,
                    "blocksize": 256}, "data_type": "float64"},
 {"label": "blosc lz4hc", "name": "blosc",
  "configuration": {"cname": "lz4hc", "clevel": 9, "shuffle": "noshuffle", "typesize": 1,
                    "blocksize": 0}, "data_type": "uint8"},
 {"label": "numcodecs.blosc autoshuffle", "name": "numcodecs.blosc",
  "configuration": {"cname": "lz4", "clevel": 5, "shuffle": -1, "blocksize": 0},
  "data_type": "int32"},
 {"label": "numcodecs.blosc zstd", "name": "numcodecs.blosc",
  "configuration": {"cname": "zstd", "clevel": 3, "shuffle": 2, "blocksize": 0},
  "data_type": "uint8"},
 {"label": "numcodecs.lz4", "name": "numcodecs.lz4", "configuration": {"acceleration": 1},
  "data_type": "uint8"},
 {"label": "numcodecs.delta u2 to i8", "name": "numcodecs.delta",
  "configuration": {"dtype": "<u2", "astype": "<i8"}, "data_type": "uint16"},
 {"label": "crc32c", "name": "crc32c", "configuration": {}, "data_type": "uint8"}
])json";

struct DecoderCase {
  std::string label;
  std::shared_ptr<const BytesToBytesCodec> codec;
};

std::vector<DecoderCase>& cases() {
  static std::vector<DecoderCase> all = [] {
    std::vector<DecoderCase> out;
    for (const auto& entry : json::parse(kTable)) {
      ChunkSpec spec;
      spec.shape = {64};
      spec.dtype = &DataType::from_v3_name(entry.at("data_type").get<std::string>());
      spec.fill_value.assign(spec.dtype->size, std::byte{0});
      auto codec = CodecRegistry::instance().create(entry.at("name").get<std::string>(),
                                                    entry.at("configuration"), {spec, 3});
      auto b2b = std::dynamic_pointer_cast<const BytesToBytesCodec>(codec);
      if (!b2b) {
        std::fprintf(stderr, "fuzz table entry '%s' is not a bytes->bytes codec\n",
                     entry.at("label").get<std::string>().c_str());
        std::abort();
      }
      out.push_back({entry.at("label").get<std::string>(), std::move(b2b)});
    }
    return out;
  }();
  return all;
}

void write_seeds(const std::string& dir) {
  const auto& all = cases();
  for (std::size_t i = 0; i < all.size(); ++i) {
    for (int kind = 0; kind < 4; ++kind) {
      ChunkSpec spec;
      spec.shape = {std::int64_t{1} << (3 + 3 * kind)};  // 8, 64, 512, 4096 bytes
      spec.dtype = &DataType::from_v3_name("uint8");
      spec.fill_value = {std::byte{0}};
      const auto data = sample_chunk(spec, kind % 2, i * 4 + kind);
      Buffer encoded;
      if (!expect_errors([&] { encoded = all[i].codec->encode(Buffer::copy_of(data)); })) {
        continue;  // e.g. a blosc compressor this build lacks
      }
      std::vector<std::byte> seed{static_cast<std::byte>(i),
                                  static_cast<std::byte>(data.size() & 0xff),
                                  static_cast<std::byte>(data.size() >> 8)};
      seed.insert(seed.end(), encoded.span().begin(), encoded.span().end());
      write_file(dir + "/engine_" + std::to_string(i) + "_" + std::to_string(kind), seed);
    }
  }
}

bool same(const Buffer& a, std::span<const std::byte> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

// Encodes `data` and decodes it back, with and without the size known.
void check_round_trip(const DecoderCase& c, std::span<const std::byte> data, const char* what) {
  Buffer encoded;
  if (!expect_errors([&] { encoded = c.codec->encode(Buffer::copy_of(data)); })) return;
  Buffer sized;
  if (!expect_errors([&] { sized = c.codec->decode(encoded, data.size()); }) ||
      !same(sized, data)) {
    finding(c.label + ": encode then decode (size given) changed " + what);
  }
  Buffer free;
  if (!expect_errors([&] { free = c.codec->decode(encoded, std::nullopt); }) || !same(free, data)) {
    finding(c.label + ": encode then decode (no size given) changed " + what);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  export_if_asked("fuzz_decoders", "[entry][expected size u16 le][encoded bytes]",
                  json::parse(kTable), write_seeds);
  cases();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  const auto& all = cases();
  const DecoderCase& c = all[in.byte() % all.size()];
  const std::size_t expected = in.u16();
  const Buffer encoded = in.rest();
  const auto& codec = *c.codec;

  // No size known: the codec bounds its output by what the input can hold.
  Buffer free;
  const bool ok_free = expect_errors([&] { free = codec.decode(encoded, std::nullopt); });

  // The size given by the input.
  Buffer sized;
  const bool ok_sized = expect_errors([&] { sized = codec.decode(encoded, expected); });
  if (ok_sized && sized.size() != expected) {
    finding(c.label + ": decode(size " + std::to_string(expected) + ") returned " +
            std::to_string(sized.size()) + " bytes");
  }
  std::vector<std::byte> out(expected, std::byte{0xA5});
  const bool ok_into = expect_errors([&] { codec.decode_into(encoded, out); });
  if (ok_sized != ok_into) {
    finding(c.label + ": decode(size) " + (ok_sized ? "succeeds" : "fails") + ", decode_into " +
            (ok_into ? "succeeds" : "fails"));
  }
  if (ok_sized && ok_into && !same(sized, out)) {
    finding(c.label + ": decode(size) and decode_into give different bytes");
  }
  if (ok_sized && (!ok_free || !same(free, sized.span()))) {
    finding(c.label + ": decode with the size given succeeds, without it " +
            (ok_free ? "gives other bytes" : "fails"));
  }

  // The size given as a bound only (how a chain decodes its inner stages).
  Buffer bounded;
  const bool ok_bounded =
      expect_errors([&] { bounded = codec.decode(encoded, DecodedSize::bounded(expected)); });
  if (ok_bounded && bounded.size() > expected) {
    finding(c.label + ": decode(at most " + std::to_string(expected) + ") returned " +
            std::to_string(bounded.size()) + " bytes");
  }
  if (ok_bounded && (!ok_free || !same(free, bounded.span()))) {
    finding(c.label + ": decode with a bound succeeds, without it " +
            (ok_free ? "gives other bytes" : "fails"));
  }
  if (ok_free && free.size() <= expected && !ok_bounded) {
    finding(c.label + ": decode without a size gives " + std::to_string(free.size()) +
            " bytes, with a bound of " + std::to_string(expected) + " it fails");
  }

  // The size the free decode found, given back.
  if (ok_free) {
    Buffer again;
    if (!expect_errors([&] { again = codec.decode(encoded, free.size()); }) ||
        !same(again, free.span())) {
      finding(c.label + ": decode without a size succeeds, with that size it does not");
    }
    std::vector<std::byte> into(free.size());
    if (!expect_errors([&] { codec.decode_into(encoded, into); }) || !same(free, into)) {
      finding(c.label + ": decode without a size succeeds, decode_into that size does not");
    }
    if (free.size() <= (std::size_t{1} << 16)) check_round_trip(c, free.span(), "decoded data");
  }
  check_round_trip(c, encoded.span(), "arbitrary data");
  return 0;
}
