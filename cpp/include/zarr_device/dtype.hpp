// Zarr data types: the fixed-size numeric types of the Zarr v3 core spec plus the extension types
// model weights need (bfloat16, float8 variants), under the names tensorstore writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "zarr_device/errors.hpp"

namespace zarr_device {

enum class DTypeClass : std::uint8_t { kBool, kInt, kUInt, kFloat, kComplex };

enum class Endian : std::uint8_t { kLittle, kBig };

// How a binary floating point format lays out its bits; used to encode fill values.
struct FloatFormat {
  int exponent_bits;
  int mantissa_bits;
  int exponent_bias;
  bool has_infinity;           // IEEE-like; the fn/fnuz float8 variants have none
  bool nan_is_negative_zero;   // fnuz: the only NaN is 0x80, there is no -0
  bool exponent_only = false;  // e8m0fnu: no sign, no mantissa, no zero; NaN is 0xff
};

class DataType {
 public:
  std::string_view name;  // Zarr v3 name, e.g. "float32", "bfloat16", "float8_e4m3fn"
  DTypeClass cls;
  std::uint8_t size;       // bytes per element
  std::uint8_t swap_unit;  // bytes reversed by a byte-order change (size, or size / 2 for complex)
  std::optional<FloatFormat> float_format;  // for kFloat and each half of kComplex

  // Throws FormatError for a name that is not a supported data type.
  static const DataType& from_v3_name(std::string_view name);
  // Parses a NumPy type string as found in .zarray ("<f4", "|b1", ">i8"): the type and byte order.
  static const DataType& from_v2_typestr(std::string_view typestr, Endian& endian);
  // The NumPy type string for this type in the given byte order ("<f4"); throws FormatError for
  // types Zarr v2 cannot name (bfloat16, float8).
  [[nodiscard]] std::string v2_typestr(Endian endian) const;

  static std::span<const DataType> all();

  // NumPy's datetime64 and timedelta64 under zarr-python's names ("numpy.datetime64",
  // "numpy.timedelta64"): counts of a time unit, stored, decoded and placed as int64. Their unit
  // is the array's (ArrayMetadata::time_unit), so they are not among all(). Throws FormatError for
  // another name.
  static const DataType& time_type(std::string_view v3_name);
  [[nodiscard]] bool holds_time() const { return name.starts_with("numpy."); }

  bool operator==(const DataType& other) const { return this == &other; }
};

// The error for a data type zarr-device does not read: `what` as the metadata spells it, and the
// types it does read, so that the user knows to read such an array with zarr-python instead.
FormatError unsupported_data_type(const std::string& what);

// Whether `unit` is one of NumPy's time units as zarr-python's metadata names them ("Y", "M",
// "W", "D", "h", "m", "s", "ms", "us", "μs", "ns", "ps", "fs", "as", "generic").
bool is_time_unit(std::string_view unit);

// Encodes a floating point value into `format`, rounding to nearest even; out-of-range values
// become infinity (or NaN for formats without infinity). Returns the bits in the low bytes.
std::uint64_t encode_float(double value, const FloatFormat& format, int total_bits);
double decode_float(std::uint64_t bits, const FloatFormat& format, int total_bits);

}  // namespace zarr_device
