#include "zarr_device/dtype.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>

#include "zarr_device/errors.hpp"

namespace zarr_device {
namespace {

constexpr FloatFormat kHalf{5, 10, 15, true, false};
constexpr FloatFormat kSingle{8, 23, 127, true, false};
constexpr FloatFormat kDouble{11, 52, 1023, true, false};
constexpr FloatFormat kBFloat16{8, 7, 127, true, false};
// float8 variants as defined by ml_dtypes / the OCP spec. "fn": finite, NaN is S.1111.111;
// "fnuz": finite, no negative zero, NaN is 0x80; b11: bias 11.
constexpr FloatFormat kE4M3FN{4, 3, 7, false, false};
constexpr FloatFormat kE4M3FNUZ{4, 3, 8, false, true};
constexpr FloatFormat kE4M3B11FNUZ{4, 3, 11, false, true};
constexpr FloatFormat kE5M2{5, 2, 15, true, false};
constexpr FloatFormat kE5M2FNUZ{5, 2, 16, false, true};
constexpr FloatFormat kE3M4{3, 4, 3, true, false};
// Scale factors of the OCP microscaling formats: a power of two, 2^(bits - 127).
constexpr FloatFormat kE8M0FNU{8, 0, 127, false, false, true};

using C = DTypeClass;
const std::array<DataType, 23> kTypes{{
    {"bool", C::kBool, 1, 1, std::nullopt},
    {"int8", C::kInt, 1, 1, std::nullopt},
    {"int16", C::kInt, 2, 2, std::nullopt},
    {"int32", C::kInt, 4, 4, std::nullopt},
    {"int64", C::kInt, 8, 8, std::nullopt},
    {"uint8", C::kUInt, 1, 1, std::nullopt},
    {"uint16", C::kUInt, 2, 2, std::nullopt},
    {"uint32", C::kUInt, 4, 4, std::nullopt},
    {"uint64", C::kUInt, 8, 8, std::nullopt},
    {"float16", C::kFloat, 2, 2, kHalf},
    {"float32", C::kFloat, 4, 4, kSingle},
    {"float64", C::kFloat, 8, 8, kDouble},
    {"complex64", C::kComplex, 8, 4, kSingle},
    {"complex128", C::kComplex, 16, 8, kDouble},
    {"bfloat16", C::kFloat, 2, 2, kBFloat16},
    {"float8_e4m3fn", C::kFloat, 1, 1, kE4M3FN},
    {"float8_e4m3fnuz", C::kFloat, 1, 1, kE4M3FNUZ},
    {"float8_e4m3b11fnuz", C::kFloat, 1, 1, kE4M3B11FNUZ},
    {"float8_e5m2", C::kFloat, 1, 1, kE5M2},
    {"float8_e5m2fnuz", C::kFloat, 1, 1, kE5M2FNUZ},
    {"float8_e3m4", C::kFloat, 1, 1, kE3M4},
    {"float8_e8m0fnu", C::kFloat, 1, 1, kE8M0FNU},
    // tensorstore's name for bool-like 1-byte types is "bool"; nothing else to alias.
    {"", C::kBool, 0, 0, std::nullopt},  // sentinel, never returned
}};

const std::array<DataType, 2> kTimeTypes{{
    {"numpy.datetime64", C::kInt, 8, 8, std::nullopt},
    {"numpy.timedelta64", C::kInt, 8, 8, std::nullopt},
}};

}  // namespace

const DataType& DataType::time_type(std::string_view v3_name) {
  for (const auto& t : kTimeTypes) {
    if (t.name == v3_name) return t;
  }
  throw unsupported_data_type("'" + std::string(v3_name) + "'");
}

FormatError unsupported_data_type(const std::string& what) {
  return FormatError("unsupported data type " + what +
                     " (zarr-device reads bool, int8-64, uint8-64, float16/32/64, complex64/128, "
                     "bfloat16, the float8 types and NumPy's datetime64/timedelta64; read other "
                     "types with zarr-python)");
}

bool is_time_unit(std::string_view unit) {
  static constexpr std::array<std::string_view, 15> kUnits{
      "Y", "M", "W", "D", "h", "m", "s", "ms", "us", "μs", "ns", "ps", "fs", "as", "generic"};
  return std::find(kUnits.begin(), kUnits.end(), unit) != kUnits.end();
}

std::span<const DataType> DataType::all() { return {kTypes.data(), kTypes.size() - 1}; }

const DataType& DataType::from_v3_name(std::string_view name) {
  for (const auto& t : all()) {
    if (t.name == name) return t;
  }
  throw unsupported_data_type("'" + std::string(name) + "'");
}

const DataType& DataType::from_v2_typestr(std::string_view typestr, Endian& endian) {
  if (typestr.size() < 3) throw unsupported_data_type("'" + std::string(typestr) + "'");
  const char order = typestr[0];
  if (order == '<' || order == '|') {
    endian = Endian::kLittle;
  } else if (order == '>') {
    endian = Endian::kBig;
  } else {
    throw unsupported_data_type("'" + std::string(typestr) + "'");
  }
  const std::string_view code = typestr.substr(1);
  struct Entry {
    std::string_view code;
    std::string_view name;
  };
  static constexpr std::array<Entry, 14> kCodes{{{"b1", "bool"},
                                                 {"i1", "int8"},
                                                 {"i2", "int16"},
                                                 {"i4", "int32"},
                                                 {"i8", "int64"},
                                                 {"u1", "uint8"},
                                                 {"u2", "uint16"},
                                                 {"u4", "uint32"},
                                                 {"u8", "uint64"},
                                                 {"f2", "float16"},
                                                 {"f4", "float32"},
                                                 {"f8", "float64"},
                                                 {"c8", "complex64"},
                                                 {"c16", "complex128"}}};
  for (const auto& e : kCodes) {
    if (e.code == code) return from_v3_name(e.name);
  }
  throw unsupported_data_type("'" + std::string(typestr) + "'");
}

std::string DataType::v2_typestr(Endian endian) const {
  char kind = 0;
  switch (cls) {
    case C::kBool:
      kind = 'b';
      break;
    case C::kInt:
      kind = 'i';
      break;
    case C::kUInt:
      kind = 'u';
      break;
    case C::kFloat:
      kind = 'f';
      break;
    case C::kComplex:
      kind = 'c';
      break;
  }
  if (holds_time()) {  // "<M8[ns]": the unit is the array's, not the type's
    throw FormatError("the Zarr v2 name of data type '" + std::string(name) + "' needs its unit");
  }
  if (name.starts_with("bfloat") || name.starts_with("float8")) {
    throw FormatError("data type '" + std::string(name) + "' cannot be stored in Zarr v2");
  }
  const char order = size == 1 ? '|' : (endian == Endian::kLittle ? '<' : '>');
  return std::string(1, order) + kind + std::to_string(size);
}

std::uint64_t encode_float(double value, const FloatFormat& f, int total_bits) {
  if (f.exponent_only) {
    if (std::isnan(value) || std::isinf(value) || value < 0) return 0xff;
    if (value == 0) return 0;  // no zero: the smallest value, 2^-127, stands in (as tensorstore)
    int exp2 = 0;
    const double frac = std::frexp(value, &exp2);  // value = frac * 2^exp2, frac in [0.5, 1)
    long e = exp2 - 1 + f.exponent_bias;
    const double rest = frac * 2.0 - 1.0;  // what a mantissa of no bits rounds away
    if (rest >= 0.5) ++e;                  // nearest, ties away from zero (as ml_dtypes)
    if (e > 254) return 0xff;
    return static_cast<std::uint64_t>(std::max<long>(e, 0));
  }
  const int e_bits = f.exponent_bits;
  const int m_bits = f.mantissa_bits;
  const std::uint64_t sign = std::signbit(value) ? 1 : 0;
  const std::uint64_t max_exp_field = (1ULL << e_bits) - 1;
  const std::uint64_t all_mantissa = (1ULL << m_bits) - 1;
  auto nan_bits = [&]() -> std::uint64_t {
    if (f.nan_is_negative_zero) return 1ULL << (total_bits - 1);
    if (!f.has_infinity) return (max_exp_field << m_bits) | all_mantissa;  // fn: S.1111.111
    return (max_exp_field << m_bits) | (1ULL << (m_bits - 1));             // quiet NaN
  };
  if (std::isnan(value)) return nan_bits();
  if (f.nan_is_negative_zero && value == 0.0) return 0;  // no negative zero
  // Largest finite value's exponent field and mantissa.
  const std::uint64_t max_finite_exp = f.has_infinity ? max_exp_field - 1 : max_exp_field;
  const std::uint64_t max_finite_mant =
      (f.has_infinity || f.nan_is_negative_zero) ? all_mantissa : all_mantissa - 1;
  auto overflow = [&]() -> std::uint64_t {
    if (f.has_infinity) return (sign << (total_bits - 1)) | (max_exp_field << m_bits);
    return nan_bits();
  };
  if (std::isinf(value)) return overflow();
  double a = std::fabs(value);
  if (a == 0.0) return sign << (total_bits - 1);
  int exp2 = 0;
  double frac = std::frexp(a, &exp2);  // a = frac * 2^exp2, frac in [0.5, 1)
  int unbiased = exp2 - 1;             // a = 1.xxx * 2^unbiased
  const int min_normal = 1 - f.exponent_bias;
  std::uint64_t exp_field = 0;
  double scaled = 0;  // mantissa as a real number of units in the last place
  if (unbiased < min_normal) {
    scaled = std::ldexp(a, m_bits - min_normal);  // subnormal
    exp_field = 0;
  } else {
    scaled = std::ldexp(frac * 2.0 - 1.0, m_bits);
    exp_field = static_cast<std::uint64_t>(unbiased) + static_cast<std::uint64_t>(f.exponent_bias);
  }
  double integral = std::nearbyint(scaled);  // round half to even (default rounding mode)
  std::uint64_t mant = static_cast<std::uint64_t>(integral);
  if (mant > all_mantissa) {  // rounding carried into the exponent
    mant = 0;
    exp_field += 1;
  } else if (exp_field == 0 && mant == (1ULL << m_bits)) {
    mant = 0;
    exp_field = 1;
  }
  if (exp_field > max_finite_exp || (exp_field == max_finite_exp && mant > max_finite_mant)) {
    return overflow();
  }
  std::uint64_t bits = (sign << (total_bits - 1)) | (exp_field << m_bits) | mant;
  if (f.nan_is_negative_zero && bits == (1ULL << (total_bits - 1))) bits = 0;
  return bits;
}

double decode_float(std::uint64_t bits, const FloatFormat& f, int total_bits) {
  if (f.exponent_only) {
    if (bits == 0xff) return std::nan("");
    return std::ldexp(1.0, static_cast<int>(bits) - f.exponent_bias);
  }
  const int m_bits = f.mantissa_bits;
  const std::uint64_t max_exp_field = (1ULL << f.exponent_bits) - 1;
  const std::uint64_t all_mantissa = (1ULL << m_bits) - 1;
  const bool negative = (bits >> (total_bits - 1)) & 1;
  const std::uint64_t exp_field = (bits >> m_bits) & max_exp_field;
  const std::uint64_t mant = bits & all_mantissa;
  if (f.nan_is_negative_zero && bits == (1ULL << (total_bits - 1))) return std::nan("");
  if (f.has_infinity && exp_field == max_exp_field) {
    if (mant == 0) return negative ? -INFINITY : INFINITY;
    return std::nan("");
  }
  if (!f.has_infinity && !f.nan_is_negative_zero && exp_field == max_exp_field &&
      mant == all_mantissa) {
    return std::nan("");
  }
  double value = 0;
  if (exp_field == 0) {
    value = std::ldexp(static_cast<double>(mant), 1 - f.exponent_bias - m_bits);
  } else {
    value = std::ldexp(static_cast<double>(mant | (1ULL << m_bits)),
                       static_cast<int>(exp_field) - f.exponent_bias - m_bits);
  }
  return negative ? -value : value;
}

}  // namespace zarr_device
