// Array metadata of Zarr v3 (zarr.json) and v2 (.zarray + .zattrs), parsed into one immutable form.
// A v2 array is described by the v3 codec chain equivalent to it (F order -> transpose, byte order
// -> bytes codec, compressor -> numcodecs.<id>), so one decode path serves both formats.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "zarr_device/dtype.hpp"

namespace zarr_device {

// How chunk grid coordinates become store keys.
struct ChunkKeyEncoding {
  enum class Kind { kDefault, kV2 };  // "c/1/2" vs "1.2"
  Kind kind = Kind::kDefault;
  char separator = '/';

  [[nodiscard]] std::string key(std::span<const std::int64_t> chunk_coords) const;
  [[nodiscard]] nlohmann::json to_json() const;
};

struct ArrayMetadata {
  int zarr_format = 3;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> chunk_shape;  // of the regular grid: the shard shape when sharded
  const DataType* dtype = nullptr;
  // A time type's unit as NumPy's type name holds it ("ns", "10s", "generic"); empty for others.
  std::string time_unit;
  std::vector<std::byte> fill_value;  // one element, little endian
  ChunkKeyEncoding chunk_key_encoding;
  nlohmann::json codecs;  // the v3 codec chain (synthesised for v2)
  std::optional<std::vector<std::optional<std::string>>> dimension_names;
  nlohmann::json attributes = nlohmann::json::object();
  nlohmann::json document;  // the metadata as stored (zarr.json, or .zarray for v2)

  // Both throw FormatError naming what is wrong.
  static ArrayMetadata from_v3(const nlohmann::json& document);
  static ArrayMetadata from_v2(const nlohmann::json& zarray, const nlohmann::json& zattrs);

  [[nodiscard]] std::int64_t num_elements() const;
  [[nodiscard]] std::vector<std::int64_t> grid_shape() const;  // chunks per dimension
};

// Parses a fill value in the JSON encodings of the Zarr spec (numbers, "NaN", "Infinity",
// "-Infinity", "0x..." bit patterns, [re, im] for complex, true/false) into one little-endian
// element. Throws FormatError when the value does not fit the type.
std::vector<std::byte> parse_fill_value(const nlohmann::json& value, const DataType& dtype);
// The inverse, in the form zarr-python writes.
nlohmann::json fill_value_to_json(std::span<const std::byte> value, const DataType& dtype);

}  // namespace zarr_device
