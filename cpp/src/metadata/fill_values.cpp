// Fill values: parsed from their JSON forms (numbers, "NaN" and "Infinity" strings, hex bit
// patterns, "NaT", complex pairs) into one little-endian element of the array's type, and written
// back as zarr-python and tensorstore write them.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "zarr_device/array_metadata.hpp"
#include "zarr_device/errors.hpp"

namespace zarr_device {
namespace {

using json = nlohmann::json;

template <typename T>
void put(std::vector<std::byte>& out, T value) {
  out.resize(sizeof(T));
  std::memcpy(out.data(), &value, sizeof(T));
}

// NumPy's NaT ("not a time"), the least int64: the default and the "NaT" fill of the time types.
constexpr std::uint64_t kNotATimeBits = std::uint64_t{1} << 63;

// The low `size` bytes of `bits`, little-endian; `size` is at most 8.
void put_bits(std::vector<std::byte>& out, std::uint64_t bits, std::size_t size) {
  out.resize(size);
  for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<std::byte>((bits >> (8 * i)) & 0xff);
}

std::uint64_t get_bits(std::span<const std::byte> in) {
  std::uint64_t bits = 0;
  for (std::size_t i = 0; i < in.size() && i < 8; ++i) {
    bits |= static_cast<std::uint64_t>(in[i]) << (8 * i);
  }
  return bits;
}

std::optional<std::uint64_t> parse_hex(const std::string& s, std::size_t size) {
  if (s.size() < 3 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) return std::nullopt;
  if (s.size() - 2 > size * 2) return std::nullopt;
  std::uint64_t bits = 0;
  for (std::size_t i = 2; i < s.size(); ++i) {
    const char c = s[i];
    int d = 0;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return std::nullopt;
    bits = (bits << 4) | static_cast<std::uint64_t>(d);
  }
  return bits;
}

// One floating point component (of a float or half a complex) into `size` bytes.
void parse_float_component(const json& value, const DataType& dtype, std::size_t size,
                           std::vector<std::byte>& out) {
  const auto& fmt = *dtype.float_format;
  double number = 0;
  if (value.is_number()) {
    number = value.get<double>();
  } else if (value.is_string()) {
    const auto s = value.get<std::string>();
    if (s == "NaN")
      number = std::nan("");
    else if (s == "Infinity")
      number = INFINITY;
    else if (s == "-Infinity")
      number = -INFINITY;
    else if (auto bits = parse_hex(s, size)) {
      put_bits(out, *bits, size);
      return;
    } else {
      throw FormatError("fill value '" + s + "' is not valid for data type " +
                        std::string(dtype.name));
    }
  } else {
    throw FormatError("fill value " + value.dump() + " is not valid for data type " +
                      std::string(dtype.name));
  }
  if (size == 8) {
    put(out, number);
  } else if (size == 4) {
    put(out, static_cast<float>(number));
  } else {
    put_bits(out, encode_float(number, fmt, static_cast<int>(size * 8)), size);
  }
}

json float_component_to_json(std::span<const std::byte> bytes, const DataType& dtype) {
  double v = 0;
  if (bytes.size() == 8) {
    std::memcpy(&v, bytes.data(), 8);
  } else if (bytes.size() == 4) {
    float f = 0;
    std::memcpy(&f, bytes.data(), 4);
    v = f;
  } else {
    v = decode_float(get_bits(bytes), *dtype.float_format, static_cast<int>(bytes.size() * 8));
  }
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

}  // namespace

std::vector<std::byte> parse_fill_value(const json& value, const DataType& dtype) {
  std::vector<std::byte> out;
  if (value.is_null()) {  // v2's "none given": the type's default, as zarr-python reads it
    out.assign(dtype.size, std::byte{0});  // zeros; 16-byte types are wider than put_bits writes
    if (dtype.holds_time()) put_bits(out, kNotATimeBits, dtype.size);
    return out;
  }
  auto invalid = [&] {
    return FormatError("fill value " + value.dump() + " is not valid for data type " +
                       std::string(dtype.name));
  };
  switch (dtype.cls) {
    case DTypeClass::kBool:
      if (value.is_boolean()) {
        out.assign(1, std::byte{value.get<bool>() ? std::uint8_t{1} : std::uint8_t{0}});
      } else if (value.is_number_integer() &&
                 (value.get<std::int64_t>() == 0 || value.get<std::int64_t>() == 1)) {
        out.assign(1, std::byte{value.get<std::uint8_t>()});
      } else {
        throw invalid();
      }
      return out;
    case DTypeClass::kInt:
    case DTypeClass::kUInt: {
      std::uint64_t bits = 0;
      const int bitsz = dtype.size * 8;
      if (value.is_number_unsigned()) {
        const auto v = value.get<std::uint64_t>();
        const std::uint64_t max =
            dtype.cls == DTypeClass::kUInt
                ? (bitsz == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bitsz) - 1)
                : (std::uint64_t{1} << (bitsz - 1)) - 1;
        if (v > max) throw invalid();
        bits = v;
      } else if (value.is_number_integer()) {
        const auto v = value.get<std::int64_t>();
        if (dtype.cls == DTypeClass::kUInt) {
          if (v < 0) throw invalid();
          if (bitsz < 64 && static_cast<std::uint64_t>(v) > (std::uint64_t{1} << bitsz) - 1) {
            throw invalid();
          }
        } else if (bitsz < 64) {
          const std::int64_t lo = -(std::int64_t{1} << (bitsz - 1));
          const std::int64_t hi = (std::int64_t{1} << (bitsz - 1)) - 1;
          if (v < lo || v > hi) throw invalid();
        }
        bits = static_cast<std::uint64_t>(v);
      } else if (value.is_number_float()) {
        const double d = value.get<double>();
        if (d != std::floor(d) || !(d >= -9223372036854775808.0 && d < 18446744073709551616.0)) {
          throw invalid();
        }
        if (d >= 9223372036854775808.0) {
          return parse_fill_value(json(static_cast<std::uint64_t>(d)), dtype);
        }
        return parse_fill_value(json(static_cast<std::int64_t>(d)), dtype);
      } else if (value.is_string() && dtype.holds_time() && value.get<std::string>() == "NaT") {
        bits = kNotATimeBits;
      } else if (value.is_string()) {
        auto hex = parse_hex(value.get<std::string>(), dtype.size);
        if (!hex) throw invalid();
        bits = *hex;
      } else {
        throw invalid();
      }
      put_bits(out, bits, dtype.size);
      return out;
    }
    case DTypeClass::kFloat:
      parse_float_component(value, dtype, dtype.size, out);
      return out;
    case DTypeClass::kComplex: {
      const std::size_t half = dtype.size / 2;
      std::vector<std::byte> re;
      std::vector<std::byte> im;
      if (value.is_array() && value.size() == 2) {
        parse_float_component(value[0], dtype, half, re);
        parse_float_component(value[1], dtype, half, im);
      } else if (value.is_number() || value.is_string()) {
        parse_float_component(value, dtype, half, re);
        parse_float_component(json(0.0), dtype, half, im);
      } else {
        throw invalid();
      }
      out = re;
      out.insert(out.end(), im.begin(), im.end());
      return out;
    }
  }
  throw invalid();
}

json fill_value_to_json(std::span<const std::byte> value, const DataType& dtype) {
  switch (dtype.cls) {
    case DTypeClass::kBool:
      return value[0] != std::byte{0};
    case DTypeClass::kInt: {
      std::uint64_t bits = get_bits(value);
      const int shift = 64 - dtype.size * 8;
      return static_cast<std::int64_t>(bits << shift) >> shift;
    }
    case DTypeClass::kUInt:
      return get_bits(value);
    case DTypeClass::kFloat:
      return float_component_to_json(value, dtype);
    case DTypeClass::kComplex: {
      const std::size_t half = dtype.size / 2;
      return json::array({float_component_to_json(value.subspan(0, half), dtype),
                          float_component_to_json(value.subspan(half, half), dtype)});
    }
  }
  return nullptr;
}

}  // namespace zarr_device
