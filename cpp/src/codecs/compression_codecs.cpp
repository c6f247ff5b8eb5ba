#include <algorithm>
#include <cstring>
#include <limits>

#include "codecs/builtin.hpp"
#include "codecs/compression_common.hpp"

namespace zarr_device::codecs {

void register_compression_codecs(CodecRegistry& registry) {
  register_zstd_codecs(registry);
  register_deflate_codecs(registry);
  register_blosc_codecs(registry);
  register_lz4_codecs(registry);
  register_crc32c_codec(registry);
  register_shuffle_codec(registry);
  register_delta_codec(registry);
}

ConfigReader::ConfigReader(std::string_view codec, const nlohmann::json& configuration)
    : codec_(codec), configuration_(configuration) {
  if (!configuration_.is_null() && !configuration_.is_object()) {
    throw FormatError("codec '" + codec_ + "': configuration must be an object, not " +
                      configuration_.dump());
  }
}

const nlohmann::json* ConfigReader::find(const char* key) const {
  if (!configuration_.is_object()) return nullptr;
  auto it = configuration_.find(key);
  if (it == configuration_.end() || it->is_null()) return nullptr;
  return &*it;
}

void ConfigReader::fail(const char* key, std::string_view what) const {
  throw FormatError("codec '" + codec_ + "': \"" + key + "\" " + std::string(what));
}

int ConfigReader::get_int(const char* key, int default_value, int min, int max) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return default_value;
  if (!value->is_number_integer()) fail(key, "must be an integer, not " + value->dump());
  // Parsed JSON holds non-negative numbers as unsigned, which may not fit in int64.
  bool in_range = false;
  if (value->is_number_unsigned()) {
    const auto v = value->get<std::uint64_t>();
    in_range =
        v <= static_cast<std::uint64_t>(max) && (min <= 0 || v >= static_cast<std::uint64_t>(min));
  } else {
    const auto v = value->get<std::int64_t>();
    in_range = v >= min && v <= max;
  }
  if (!in_range) {
    fail(key, "must be between " + std::to_string(min) + " and " + std::to_string(max) + ", not " +
                  value->dump());
  }
  return static_cast<int>(value->get<std::int64_t>());
}

bool ConfigReader::get_bool(const char* key, bool default_value) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return default_value;
  if (!value->is_boolean()) fail(key, "must be true or false, not " + value->dump());
  return value->get<bool>();
}

std::string ConfigReader::get_string(const char* key, std::string_view default_value) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::string(default_value);
  if (!value->is_string()) fail(key, "must be a string, not " + value->dump());
  return value->get<std::string>();
}

void throw_size_mismatch(std::string_view codec, std::size_t actual, std::size_t expected) {
  throw CodecError(std::string(codec) + ": data decodes to " + std::to_string(actual) +
                   " bytes, expected " + std::to_string(expected));
}

namespace {

// After the output filled up: the stream must end without producing another byte.
void expect_end(InMemoryDecompressor& decoder, std::string_view codec, std::string_view what_fits) {
  std::byte extra{};
  std::size_t extra_pos = 0;
  if (!decoder.run({&extra, 1}, extra_pos) || extra_pos != 0) {
    throw CodecError(std::string(codec) + ": data decodes to more than " + std::string(what_fits));
  }
}

}  // namespace

void decode_stream_exact(InMemoryDecompressor& decoder, std::span<std::byte> out,
                         std::string_view codec) {
  std::size_t pos = 0;
  if (!decoder.run(out, pos)) {
    expect_end(decoder, codec, "the expected " + std::to_string(out.size()) + " bytes");
  }
  if (pos != out.size()) throw_size_mismatch(codec, pos, out.size());
}

Buffer decode_stream_growing(InMemoryDecompressor& decoder, std::size_t initial, std::size_t limit,
                             std::string_view codec) {
  std::size_t capacity = std::min(initial, limit);
  ByteArray output(capacity);
  std::size_t pos = 0;
  while (!decoder.run(output.span(), pos)) {
    // Full: probe for one more byte before growing, so output that exactly fills the buffer
    // (a good initial guess) costs no reallocation.
    std::byte extra{};
    std::size_t extra_pos = 0;
    const bool done = decoder.run({&extra, 1}, extra_pos);
    if (extra_pos == 0) break;
    if (capacity >= limit) {
      throw CodecError(std::string(codec) + ": data decodes to more than " + std::to_string(limit) +
                       " bytes, the most its encoded size allows");
    }
    constexpr std::size_t kMinGrowth = 64 * 1024;
    const std::size_t next =
        capacity >= limit / 2 ? limit : std::min(limit, std::max(capacity * 2, kMinGrowth));
    ByteArray bigger(next);
    if (pos > 0) std::memcpy(bigger.data(), output.data(), pos);
    bigger.data()[pos++] = extra;
    output = std::move(bigger);
    capacity = next;
    if (done) break;
  }
  return finish_output(std::move(output), pos);
}

Buffer finish_output(ByteArray&& array, std::size_t used) {
  if (used >= array.size() - array.size() / 4) {
    array.shrink(used);
    return std::move(array).freeze();
  }
  return Buffer::copy_of({array.data(), used});
}

std::size_t initial_guess(std::size_t encoded_size, std::size_t limit) {
  constexpr std::size_t kMinInitial = 64 * 1024;
  return std::min(limit, saturating_mul_add(encoded_size, 4, kMinInitial));
}

std::size_t trusted_size_claim(std::size_t encoded_size) {
  return saturating_mul_add(encoded_size, 32, std::size_t{64} << 20);
}

std::size_t saturating_mul_add(std::size_t a, std::size_t b, std::size_t c) {
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  if (b != 0 && a > (kMax - c) / b) return kMax;
  return a * b + c;
}

void store_le32(std::byte* p, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(value >> (8 * i));
}

std::uint32_t load_le32(const std::byte* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

}  // namespace zarr_device::codecs
