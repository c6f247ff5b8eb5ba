// Tests of fill values (each data type's JSON forms, out-of-range and invalid values, round trips
// through to_json) and of the float formats behind them: bfloat16, half and the float8 variants,
// exhaustively. Reference bit patterns come from ml_dtypes 0.6 / NumPy.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "zarr_device/array_metadata.hpp"
#include "zarr_device/dtype.hpp"
#include "zarr_device/errors.hpp"

namespace zarr_device {
namespace {

using test::array_doc;
using test::Bytes;
using test::json;
using test::le_bits;

const DataType& dt(std::string_view name) { return DataType::from_v3_name(name); }

std::uint64_t fill_bits(const json& value, std::string_view dtype) {
  return le_bits(parse_fill_value(value, dt(dtype)));
}

TEST(Metadata, IntegerFillValues) {
  EXPECT_EQ(fill_bits(0, "int8"), 0u);
  EXPECT_EQ(fill_bits(-1, "int8"), 0xffu);
  EXPECT_EQ(fill_bits(127, "int8"), 0x7fu);
  EXPECT_EQ(fill_bits(-128, "int8"), 0x80u);
  EXPECT_EQ(fill_bits(-2, "int16"), 0xfffeu);
  EXPECT_EQ(fill_bits(-32768, "int16"), 0x8000u);
  EXPECT_EQ(fill_bits(std::numeric_limits<std::int32_t>::min(), "int32"), 0x80000000u);
  EXPECT_EQ(fill_bits(std::numeric_limits<std::int64_t>::min(), "int64"), 0x8000000000000000u);
  EXPECT_EQ(fill_bits(std::numeric_limits<std::int64_t>::max(), "int64"), 0x7fffffffffffffffu);
  EXPECT_EQ(fill_bits(255, "uint8"), 0xffu);
  EXPECT_EQ(fill_bits(65535, "uint16"), 0xffffu);
  EXPECT_EQ(fill_bits(4294967295u, "uint32"), 0xffffffffu);
  EXPECT_EQ(fill_bits(std::numeric_limits<std::uint64_t>::max(), "uint64"),
            std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(fill_bits(3.0, "int32"), 3u);  // an integral float is accepted
  EXPECT_EQ(fill_bits(-3.0, "int32"), 0xfffffffdu);
  EXPECT_EQ(fill_bits("0x7f", "int8"), 0x7fu);
  EXPECT_EQ(fill_bits("0xFFFF", "uint16"), 0xffffu);
  EXPECT_EQ(parse_fill_value(258, dt("int16")), (Bytes{std::byte{2}, std::byte{1}}));
  EXPECT_EQ(parse_fill_value(nullptr, dt("int64")), Bytes(8, std::byte{0}));
}

TEST(Metadata, OutOfRangeIntegerFillValuesRejected) {
  const std::pair<json, const char*> cases[] = {
      {128, "int8"},
      {-129, "int8"},
      {32768, "int16"},
      {-32769, "int16"},
      {2147483648LL, "int32"},
      {-2147483649LL, "int32"},
      {std::numeric_limits<std::uint64_t>::max(), "int64"},
      {256, "uint8"},
      {-1, "uint8"},
      {65536, "uint16"},
      {4294967296LL, "uint32"},
      {-1, "uint64"},
      {2, "bool"},
      {-1, "bool"},
      {3.5, "int32"},
      {0.5, "uint8"},
      {"0x100", "int8"},
      {"0x1ffff", "uint16"},
      {"12", "int32"},
      {"NaN", "int32"},
      {"0xzz", "uint8"},
      {"0x", "uint8"},
      {true, "int32"},
      {json::array({1, 2}), "int32"},
      {json::object(), "uint8"},
      {"true", "bool"},
      {1.0, "bool"},
  };
  for (const auto& [value, type] : cases) {
    // Both as built in code (a positive integer is then a signed JSON number, as it is when a
    // document comes from Python) and as parsed from text (where it is an unsigned one).
    EXPECT_THROW((void)parse_fill_value(value, dt(type)), FormatError)
        << value.dump() << " as " << type;
    EXPECT_THROW((void)parse_fill_value(json::parse(value.dump()), dt(type)), FormatError)
        << value.dump() << " (parsed) as " << type;
    EXPECT_THROW((void)ArrayMetadata::from_v3(array_doc({4}, {2}, type, value)), FormatError)
        << value.dump() << " in a document as " << type;
  }
}

TEST(Metadata, FloatFillOutsideIntegerRangeRejected) {
  // An integral float too large for the type must not wrap or saturate into a valid-looking value.
  for (const char* type : {"int8", "int32", "int64", "uint8", "uint32", "uint64"}) {
    for (double v : {1e20, -1e20, 1e300}) {
      EXPECT_THROW((void)parse_fill_value(v, dt(type)), FormatError) << v << " as " << type;
    }
  }
  EXPECT_THROW((void)parse_fill_value(-1.0, dt("uint64")), FormatError);
}

TEST(Metadata, BoolFillValues) {
  EXPECT_EQ(parse_fill_value(true, dt("bool")), Bytes{std::byte{1}});
  EXPECT_EQ(parse_fill_value(false, dt("bool")), Bytes{std::byte{0}});
  EXPECT_EQ(parse_fill_value(1, dt("bool")), Bytes{std::byte{1}});
  EXPECT_EQ(parse_fill_value(0, dt("bool")), Bytes{std::byte{0}});
  EXPECT_EQ(fill_value_to_json(Bytes{std::byte{1}}, dt("bool")), json(true));
  EXPECT_EQ(fill_value_to_json(Bytes{std::byte{0}}, dt("bool")), json(false));
}

TEST(Metadata, FloatFillValues) {
  struct Case {
    json value;
    const char* type;
    std::uint64_t bits;
  };
  const Case cases[] = {
      {0, "float32", 0},
      {1.5, "float32", 0x3fc00000},
      {-2, "float32", 0xc0000000},
      {"NaN", "float32", 0x7fc00000},
      {"Infinity", "float32", 0x7f800000},
      {"-Infinity", "float32", 0xff800000},
      {"0x7fc00000", "float32", 0x7fc00000},
      {"0x7fc00001", "float32", 0x7fc00001},  // a NaN payload is kept bit for bit
      {"0xffffffff", "float32", 0xffffffff},
      {"0x3f800000", "float32", 0x3f800000},
      {-0.0, "float32", 0x80000000},
      {0.1, "float64", 0x3fb999999999999a},
      {"NaN", "float64", 0x7ff8000000000000},
      {"Infinity", "float64", 0x7ff0000000000000},
      {"-Infinity", "float64", 0xfff0000000000000},
      {"0x7ff0000000000001", "float64", 0x7ff0000000000001},
      {1.0, "float16", 0x3c00},
      {-2.0, "float16", 0xc000},
      {0.1, "float16", 0x2e66},
      {65504.0, "float16", 0x7bff},
      {65520.0, "float16", 0x7c00},  // rounds to even: overflow
      {5.960464477539063e-08, "float16", 0x0001},
      {"NaN", "float16", 0x7e00},
      {"Infinity", "float16", 0x7c00},
      {"-Infinity", "float16", 0xfc00},
      {"0x7e01", "float16", 0x7e01},
      {1.0, "bfloat16", 0x3f80},
      {0.1, "bfloat16", 0x3dcd},
      {1.00390625, "bfloat16", 0x3f80},  // 1 + 2^-8: halfway, to even
      {1.01171875, "bfloat16", 0x3f82},  // 1 + 3 * 2^-8: halfway, to even
      {3.0e38, "bfloat16", 0x7f62},
      {3.4e38, "bfloat16", 0x7f80},
      {1e-40, "bfloat16", 0x0001},
      {"NaN", "bfloat16", 0x7fc0},
      {"Infinity", "bfloat16", 0x7f80},
      {"-Infinity", "bfloat16", 0xff80},
      {"0x3f80", "bfloat16", 0x3f80},
      // float8: values from ml_dtypes.
      {448, "float8_e4m3fn", 0x7e},
      {464, "float8_e4m3fn", 0x7e},
      {1.0, "float8_e4m3fn", 0x38},
      {-2.5, "float8_e4m3fn", 0xc2},
      {0.1, "float8_e4m3fn", 0x1d},
      {1e-10, "float8_e4m3fn", 0x00},
      {-1e-10, "float8_e4m3fn", 0x80},
      {240, "float8_e4m3fn", 0x77},
      {31, "float8_e4m3fn", 0x60},
      {240, "float8_e4m3fnuz", 0x7f},
      {1.0, "float8_e4m3fnuz", 0x40},
      {-2.5, "float8_e4m3fnuz", 0xca},
      {0.1, "float8_e4m3fnuz", 0x25},
      {-1e-10, "float8_e4m3fnuz", 0x00},
      {-0.0, "float8_e4m3fnuz", 0x00},  // no negative zero
      {30, "float8_e4m3b11fnuz", 0x7f},
      {1.0, "float8_e4m3b11fnuz", 0x58},
      {-2.5, "float8_e4m3b11fnuz", 0xe2},
      {0.1, "float8_e4m3b11fnuz", 0x3d},
      {57344, "float8_e5m2", 0x7b},
      {1.0, "float8_e5m2", 0x3c},
      {-2.5, "float8_e5m2", 0xc1},
      {0.1, "float8_e5m2", 0x2e},
      {464, "float8_e5m2", 0x5f},
      {1000, "float8_e5m2", 0x64},
      {61440, "float8_e5m2", 0x7c},
      {"Infinity", "float8_e5m2", 0x7c},
      {"-Infinity", "float8_e5m2", 0xfc},
      {-0.0, "float8_e5m2", 0x80},
      {57344, "float8_e5m2fnuz", 0x7f},
      {1.0, "float8_e5m2fnuz", 0x40},
      {-2.5, "float8_e5m2fnuz", 0xc5},
      {0.1, "float8_e5m2fnuz", 0x32},
      {"0x7f", "float8_e5m2fnuz", 0x7f},
      {1.0, "float8_e3m4", 0x30},
      {-2.5, "float8_e3m4", 0xc4},
      {0.1, "float8_e3m4", 0x06},
      {0.75, "float8_e3m4", 0x28},
      {3.0, "float8_e3m4", 0x48},
      {15.5, "float8_e3m4", 0x6f},
      {16.0, "float8_e3m4", 0x70},  // overflow: infinity
      {1e-10, "float8_e3m4", 0x00},
      {"Infinity", "float8_e3m4", 0x70},
      {"-Infinity", "float8_e3m4", 0xf0},
      {1.0, "float8_e8m0fnu", 0x7f},
      {2.0, "float8_e8m0fnu", 0x80},
      {0.5, "float8_e8m0fnu", 0x7e},
      {3.0, "float8_e8m0fnu", 0x81},
      {6.0, "float8_e8m0fnu", 0x82},
      {0.75, "float8_e8m0fnu", 0x7f},
      {5.877471754111438e-39, "float8_e8m0fnu", 0x00},   // 2^-127
      {1.7014118346046923e+38, "float8_e8m0fnu", 0xfe},  // 2^127
      {"NaN", "float8_e8m0fnu", 0xff},
      {"0x42", "float8_e8m0fnu", 0x42},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.value.dump() + " as " + c.type);
    EXPECT_EQ(fill_bits(c.value, c.type), c.bits);
    const auto m = ArrayMetadata::from_v3(array_doc({4}, {2}, c.type, c.value));
    EXPECT_EQ(le_bits(m.fill_value), c.bits);
    EXPECT_EQ(m.fill_value.size(), dt(c.type).size);
  }
}

TEST(Metadata, NaNEncodingPerFloatVariant) {
  struct Case {
    const char* type;
    std::uint64_t nan;
    std::vector<std::uint64_t> all_nans;  // every pattern that decodes to NaN
  };
  const Case cases[] = {
      {"float8_e4m3fn", 0x7f, {0x7f, 0xff}},
      {"float8_e4m3fnuz", 0x80, {0x80}},
      {"float8_e4m3b11fnuz", 0x80, {0x80}},
      {"float8_e5m2", 0x7e, {0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff}},
      {"float8_e5m2fnuz", 0x80, {0x80}},
      {"float8_e3m4", 0x78, {0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a,
                             0x7b, 0x7c, 0x7d, 0x7e, 0x7f, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5,
                             0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff}},
      {"float8_e8m0fnu", 0xff, {0xff}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.type);
    const auto& t = dt(c.type);
    EXPECT_EQ(fill_bits("NaN", c.type), c.nan);
    EXPECT_TRUE(std::isnan(decode_float(c.nan, *t.float_format, 8)));
    std::vector<std::uint64_t> nans;
    for (std::uint64_t bits = 0; bits < 256; ++bits) {
      if (std::isnan(decode_float(bits, *t.float_format, 8))) nans.push_back(bits);
    }
    EXPECT_EQ(nans, c.all_nans);
    // The formats without infinity turn infinities into NaN, as ml_dtypes does.
    if (!t.float_format->has_infinity && !t.float_format->exponent_only) {
      EXPECT_TRUE(std::isnan(decode_float(fill_bits("Infinity", c.type), *t.float_format, 8)));
      EXPECT_TRUE(std::isnan(decode_float(fill_bits("-Infinity", c.type), *t.float_format, 8)));
      EXPECT_TRUE(std::isnan(decode_float(fill_bits(1e6, c.type), *t.float_format, 8)));
    }
  }
}

TEST(Metadata, InvalidFloatFillValuesRejected) {
  const std::pair<json, const char*> cases[] = {
      {"nan", "float32"},
      {"inf", "float32"},
      {"Inf", "float64"},
      {"1.5", "float32"},
      {"0x7fc000000", "float32"},  // nine digits: too many
      {"0x123", "float8_e5m2"},
      {"0x12345", "bfloat16"},
      {true, "float32"},
      {json::array(), "float64"},
      {json::object(), "float16"},
      {"0xg", "float16"},
      {json::array({1.0}), "float32"},
  };
  for (const auto& [value, type] : cases) {
    EXPECT_THROW((void)parse_fill_value(value, dt(type)), FormatError)
        << value.dump() << " as " << type;
  }
}

TEST(Metadata, ComplexFillValues) {
  auto parts32 = [](const json& v) {
    auto bytes = parse_fill_value(v, dt("complex64"));
    EXPECT_EQ(bytes.size(), 8u);
    return std::pair{le_bits({bytes.data(), 4}), le_bits({bytes.data() + 4, 4})};
  };
  EXPECT_EQ(parts32(json::array({1.0, 2.0})),
            (std::pair<std::uint64_t, std::uint64_t>(0x3f800000, 0x40000000)));
  EXPECT_EQ(parts32(json::array({"NaN", "-Infinity"})),
            (std::pair<std::uint64_t, std::uint64_t>(0x7fc00000, 0xff800000)));
  EXPECT_EQ(parts32(json::array({"0x7fc00001", 0})),
            (std::pair<std::uint64_t, std::uint64_t>(0x7fc00001, 0)));
  EXPECT_EQ(parts32(3.0), (std::pair<std::uint64_t, std::uint64_t>(0x40400000, 0)));
  EXPECT_EQ(parts32(nullptr), (std::pair<std::uint64_t, std::uint64_t>(0, 0)));

  const auto c128 = parse_fill_value(json::array({-1.0, "Infinity"}), dt("complex128"));
  ASSERT_EQ(c128.size(), 16u);
  EXPECT_EQ(le_bits({c128.data(), 8}), 0xbff0000000000000u);
  EXPECT_EQ(le_bits({c128.data() + 8, 8}), 0x7ff0000000000000u);

  for (const json& bad : {json::array({1.0}), json::array({1.0, 2.0, 3.0}), json(true),
                          json::array({"x", 1.0}), json::object()}) {
    EXPECT_THROW((void)parse_fill_value(bad, dt("complex64")), FormatError) << bad.dump();
  }
}

TEST(Metadata, FillValueToJsonRoundTrips) {
  const std::pair<json, const char*> cases[] = {
      {-5, "int8"},
      {std::numeric_limits<std::int64_t>::min(), "int64"},
      {std::numeric_limits<std::uint64_t>::max(), "uint64"},
      {1.5, "float32"},
      {"NaN", "float32"},
      {"Infinity", "float64"},
      {"-Infinity", "float16"},
      {1.0, "bfloat16"},
      {"NaN", "bfloat16"},
      {448.0, "float8_e4m3fn"},
      {"NaN", "float8_e4m3fnuz"},
      {-0.5, "float8_e5m2"},
      {json::array({1.0, "NaN"}), "complex64"},
      {json::array({"-Infinity", 2.5}), "complex128"},
      {true, "bool"},
  };
  for (const auto& [value, type] : cases) {
    SCOPED_TRACE(value.dump() + " as " + type);
    const auto bytes = parse_fill_value(value, dt(type));
    const json back = fill_value_to_json(bytes, dt(type));
    EXPECT_EQ(back, value);
    EXPECT_EQ(parse_fill_value(back, dt(type)), bytes);
  }
}

// ---------------------------------------------------------------------------------------------
// encode_float / decode_float

struct Float8Reference {
  const char* type;
  double max_finite;
  double min_subnormal;
  double sum_abs_finite;  // sum of |x| over every finite pattern, from ml_dtypes
  int infinities;
};

const Float8Reference kFloat8[] = {
    {"float8_e4m3fn", 448.0, 0.001953125, 10815.75, 0},
    {"float8_e4m3fnuz", 240.0, 0.0009765625, 5887.875, 0},
    {"float8_e4m3b11fnuz", 30.0, 0.0001220703125, 735.984375, 0},
    {"float8_e5m2", 57344.0, 1.52587890625e-05, 720895.9995117188, 2},
    {"float8_e5m2fnuz", 57344.0, 7.62939453125e-06, 720895.9997558594, 0},
    {"float8_e3m4", 15.5, 0.015625, 744.0, 2},
};

TEST(Metadata, Float8ExhaustiveRoundTrip) {
  for (const auto& ref : kFloat8) {
    SCOPED_TRACE(ref.type);
    const auto& fmt = *dt(ref.type).float_format;
    double sum_abs = 0;
    double max_finite = 0;
    int infinities = 0;
    std::set<double> seen;
    for (std::uint64_t bits = 0; bits < 256; ++bits) {
      const double v = decode_float(bits, fmt, 8);
      if (std::isnan(v)) {
        // Every NaN re-encodes to the canonical NaN of the format, which is a NaN too.
        EXPECT_TRUE(std::isnan(decode_float(encode_float(v, fmt, 8), fmt, 8)));
        continue;
      }
      if (std::isinf(v)) {
        ++infinities;
      } else {
        sum_abs += std::fabs(v);
        max_finite = std::max(max_finite, v);
        // No two patterns decode to one value, except +0 / -0.
        if (v != 0) EXPECT_TRUE(seen.insert(v).second) << "duplicate value " << v;
      }
      EXPECT_EQ(encode_float(v, fmt, 8), bits) << "pattern 0x" << std::hex << bits << " = " << v;
    }
    EXPECT_EQ(sum_abs, ref.sum_abs_finite);
    EXPECT_EQ(max_finite, ref.max_finite);
    EXPECT_EQ(decode_float(1, fmt, 8), ref.min_subnormal);
    EXPECT_EQ(infinities, ref.infinities);
    // Positive patterns increase monotonically up to the largest finite value.
    double previous = -1;
    for (std::uint64_t bits = 0; bits < 128; ++bits) {
      const double v = decode_float(bits, fmt, 8);
      if (std::isnan(v) || std::isinf(v)) break;
      EXPECT_GT(v, previous) << std::hex << bits;
      previous = v;
    }
  }
}

TEST(Metadata, Float8RoundsToNearestEven) {
  for (const auto& ref : kFloat8) {
    SCOPED_TRACE(ref.type);
    const auto& fmt = *dt(ref.type).float_format;
    // Between two adjacent positive finite values: the midpoint goes to the even pattern,
    // anything nearer one of them goes to it.
    for (std::uint64_t bits = 0; bits + 1 < 128; ++bits) {
      const double lo = decode_float(bits, fmt, 8);
      const double hi = decode_float(bits + 1, fmt, 8);
      if (!std::isfinite(lo) || !std::isfinite(hi)) break;
      const double mid = (lo + hi) / 2;
      EXPECT_EQ(encode_float(mid, fmt, 8), (bits % 2 == 0) ? bits : bits + 1) << mid;
      EXPECT_EQ(encode_float(lo + (hi - lo) / 4, fmt, 8), bits) << lo;
      EXPECT_EQ(encode_float(hi - (hi - lo) / 4, fmt, 8), bits + 1) << hi;
      // Negative values mirror them (fnuz: except that -0 becomes +0).
      if (lo != 0) {
        EXPECT_EQ(encode_float(-lo, fmt, 8), bits | 0x80) << -lo;
      }
    }
  }
}

TEST(Metadata, Float8E8M0Exhaustive) {
  // Unsigned powers of two, 2^(bits - 127); 0xff is NaN; no zero, no infinity.
  const auto& fmt = *dt("float8_e8m0fnu").float_format;
  for (std::uint64_t bits = 0; bits < 255; ++bits) {
    const double v = decode_float(bits, fmt, 8);
    ASSERT_EQ(v, std::ldexp(1.0, static_cast<int>(bits) - 127)) << bits;
    ASSERT_EQ(encode_float(v, fmt, 8), bits) << bits;
  }
  EXPECT_TRUE(std::isnan(decode_float(0xff, fmt, 8)));
  EXPECT_EQ(encode_float(std::nan(""), fmt, 8), 0xffu);
  EXPECT_EQ(encode_float(INFINITY, fmt, 8), 0xffu);
  EXPECT_EQ(encode_float(1e300, fmt, 8), 0xffu);  // beyond 2^127: NaN, as ml_dtypes
  EXPECT_EQ(encode_float(1e-300, fmt, 8), 0x00u);
}

TEST(Metadata, Float8E8M0RoundsLikeMlDtypes) {
  // ml_dtypes rounds to the nearest power of two by value (ties up): 1.42 -> 1, 2.9 -> 2,
  // 5.9 -> 4, 1.5 -> 2. Rounding the logarithm instead puts the threshold at sqrt(2) * 2^k.
  const auto& fmt = *dt("float8_e8m0fnu").float_format;
  EXPECT_EQ(encode_float(1.42, fmt, 8), 0x7fu);
  EXPECT_EQ(encode_float(1.4142, fmt, 8), 0x7fu);
  EXPECT_EQ(encode_float(1.5, fmt, 8), 0x80u);
  EXPECT_EQ(encode_float(2.9, fmt, 8), 0x80u);
  EXPECT_EQ(encode_float(5.9, fmt, 8), 0x81u);
  EXPECT_EQ(encode_float(0.7, fmt, 8), 0x7eu);
}

TEST(Metadata, HalfAndBFloat16ExhaustiveRoundTrip) {
  const auto& half = *dt("float16").float_format;
  const auto& bf16 = *dt("bfloat16").float_format;
  double sum_abs = 0;
  int nans = 0;
  for (std::uint64_t bits = 0; bits < 65536; ++bits) {
    const double h = decode_float(bits, half, 16);
    if (std::isnan(h)) {
      ++nans;
      EXPECT_TRUE(std::isnan(decode_float(encode_float(h, half, 16), half, 16)));
    } else {
      if (std::isfinite(h)) sum_abs += std::fabs(h);
      ASSERT_EQ(encode_float(h, half, 16), bits) << std::hex << bits;
    }
    // bfloat16 is the top half of a float32.
    const double b = decode_float(bits, bf16, 16);
    const float reference = std::bit_cast<float>(static_cast<std::uint32_t>(bits << 16));
    if (std::isnan(reference)) {
      EXPECT_TRUE(std::isnan(b));
    } else {
      ASSERT_EQ(b, static_cast<double>(reference)) << std::hex << bits;
      ASSERT_EQ(encode_float(b, bf16, 16), bits) << std::hex << bits;
    }
  }
  EXPECT_EQ(nans, 2046);
  EXPECT_EQ(sum_abs, 201261055.875);  // NumPy float16
}

TEST(Metadata, EncodeFloatMatchesFloat32Conversion) {
  // With the float32 format, encode_float must agree with the hardware's double -> float.
  const auto& single = *dt("float32").float_format;
  std::mt19937 rng(7);
  int checked = 0;
  for (int i = 0; i < 20000; ++i) {
    // A random float32, widened, with the 29 low mantissa bits the narrowing drops made random
    // (or exactly half an ulp, a tie): every rounding case, subnormals included.
    const float f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    if (!std::isfinite(f)) continue;
    const std::uint64_t low = (i % 4 == 0) ? (std::uint64_t{1} << 28) : (rng() & ((1u << 29) - 1));
    const double v =
        std::bit_cast<double>(std::bit_cast<std::uint64_t>(static_cast<double>(f)) ^ low);
    if (std::fabs(v) > 3.4e38) continue;
    const auto expected = std::bit_cast<std::uint32_t>(static_cast<float>(v));
    ASSERT_EQ(encode_float(v, single, 32), expected) << v;
    ++checked;
  }
  EXPECT_GT(checked, 15000);
}

}  // namespace
}  // namespace zarr_device
