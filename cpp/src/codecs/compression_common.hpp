// Pieces shared by the bytes->bytes codecs: reading their configurations, sizing output that a
// stream decides the length of, and registration of each family. Internal to codecs/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "zarr_device/buffer.hpp"
#include "zarr_device/codec.hpp"
#include "zarr_device/errors.hpp"

namespace zarr_device::codecs {

// One implementation serves both a Zarr v3 core name and its numcodecs id; they differ only in
// defaults, in how some settings are spelled (blosc's shuffle) and in the metadata entry.
enum class MetadataStyle { kV3, kNumcodecs };

// Reads a codec configuration. An absent or null configuration reads as empty; keys that are not
// asked for are ignored (numcodecs configurations gain keys across versions). Wrong types and
// values raise FormatError naming the codec and the key.
class ConfigReader {
 public:
  ConfigReader(std::string_view codec, const nlohmann::json& configuration);

  [[nodiscard]] int get_int(const char* key, int default_value, int min, int max) const;
  [[nodiscard]] bool get_bool(const char* key, bool default_value) const;
  [[nodiscard]] std::string get_string(const char* key, std::string_view default_value) const;

  [[noreturn]] void fail(const char* key, std::string_view what) const;

 private:
  [[nodiscard]] const nlohmann::json* find(const char* key) const;

  std::string codec_;
  const nlohmann::json& configuration_;
};

// A decompressor over one input held in memory, told where to write as it goes (gzip, zlib).
class InMemoryDecompressor {
 public:
  virtual ~InMemoryDecompressor() = default;
  // Writes into out[pos, out.size()), advancing `pos`. Returns true once the input is used up and
  // its last stream complete, false when `out` fills up first (call again with more room).
  // Throws CodecError on corrupt or truncated input.
  virtual bool run(std::span<std::byte> out, std::size_t& pos) = 0;
};

// Decodes exactly out.size() bytes into `out`; CodecError when the stream holds fewer or more.
void decode_stream_exact(InMemoryDecompressor& decoder, std::span<std::byte> out,
                         std::string_view codec);

// Decodes a stream whose length is unknown, into a buffer that starts at `initial` bytes and
// doubles as needed, never beyond `limit` (what the input could possibly expand to): output
// memory grows with real output, not with what a header claims.
Buffer decode_stream_growing(InMemoryDecompressor& decoder, std::size_t initial, std::size_t limit,
                             std::string_view codec);

// The first `used` bytes of `array` as a Buffer; copied into a right-sized one when most of the
// allocation would go unused (compressors allocate their worst case).
Buffer finish_output(ByteArray&& array, std::size_t used);

// A size to start decoding into when nothing says how large the output is.
std::size_t initial_guess(std::size_t encoded_size, std::size_t limit);

// How large an output size claimed by a stream's header (not yet checked by decoding) may be
// before we stop allocating it up front and grow with the real output instead. Generous enough
// that honest data rarely needs to grow, small enough that a lying header cannot make us reserve
// gigabytes.
std::size_t trusted_size_claim(std::size_t encoded_size);

// a * b + c, saturating instead of wrapping.
std::size_t saturating_mul_add(std::size_t a, std::size_t b, std::size_t c);

[[noreturn]] void throw_size_mismatch(std::string_view codec, std::size_t actual,
                                      std::size_t expected);

void store_le32(std::byte* p, std::uint32_t value);
std::uint32_t load_le32(const std::byte* p);

void register_zstd_codecs(CodecRegistry& registry);
void register_deflate_codecs(CodecRegistry& registry);  // gzip, numcodecs.gzip, numcodecs.zlib
void register_blosc_codecs(CodecRegistry& registry);
void register_lz4_codecs(CodecRegistry& registry);
void register_shuffle_codec(CodecRegistry& registry);
void register_delta_codec(CodecRegistry& registry);
void register_crc32c_codec(CodecRegistry& registry);

}  // namespace zarr_device::codecs
