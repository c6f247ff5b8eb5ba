// Tests of the metadata stage: zarr.json (v3) and .zarray (v2) parsing, data types, fill value
// encodings and the float formats behind bfloat16 and the float8 variants. Reference bit patterns
// come from ml_dtypes 0.6 / NumPy.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "codecs/codec_chain.hpp"
#include "test_util.hpp"
#include "zarr_device/dtype.hpp"
#include "zarr_device/errors.hpp"
#include "zarr_device/json_document.hpp"
#include "zarr_device/metadata.hpp"

namespace zarr_device {
namespace {

using test::array_doc;
using test::Bytes;
using test::json;
using test::le_bits;
using test::le_bytes;

const DataType& dt(std::string_view name) { return DataType::from_v3_name(name); }

std::uint64_t fill_bits(const json& value, std::string_view dtype) {
  return le_bits(parse_fill_value(value, dt(dtype)));
}

json base_doc() { return array_doc({10, 20}, {5, 7}, "int32", 0); }

// Parses `doc` expecting FormatError; returns its message.
std::string format_error(const json& doc) {
  try {
    (void)ArrayMetadata::from_v3(doc);
  } catch (const FormatError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected FormatError, got another exception: " << e.what() << " for "
                  << doc.dump();
    return {};
  }
  ADD_FAILURE() << "expected FormatError for " << doc.dump();
  return {};
}

// ---------------------------------------------------------------------------------------------
// Data types

struct TypeInfo {
  const char* name;
  DTypeClass cls;
  int size;
  int swap_unit;
};

const TypeInfo kAllTypes[] = {
    {"bool", DTypeClass::kBool, 1, 1},
    {"int8", DTypeClass::kInt, 1, 1},
    {"int16", DTypeClass::kInt, 2, 2},
    {"int32", DTypeClass::kInt, 4, 4},
    {"int64", DTypeClass::kInt, 8, 8},
    {"uint8", DTypeClass::kUInt, 1, 1},
    {"uint16", DTypeClass::kUInt, 2, 2},
    {"uint32", DTypeClass::kUInt, 4, 4},
    {"uint64", DTypeClass::kUInt, 8, 8},
    {"float16", DTypeClass::kFloat, 2, 2},
    {"float32", DTypeClass::kFloat, 4, 4},
    {"float64", DTypeClass::kFloat, 8, 8},
    {"complex64", DTypeClass::kComplex, 8, 4},
    {"complex128", DTypeClass::kComplex, 16, 8},
    {"bfloat16", DTypeClass::kFloat, 2, 2},
    {"float8_e4m3fn", DTypeClass::kFloat, 1, 1},
    {"float8_e4m3fnuz", DTypeClass::kFloat, 1, 1},
    {"float8_e4m3b11fnuz", DTypeClass::kFloat, 1, 1},
    {"float8_e5m2", DTypeClass::kFloat, 1, 1},
    {"float8_e5m2fnuz", DTypeClass::kFloat, 1, 1},
    {"float8_e3m4", DTypeClass::kFloat, 1, 1},
    {"float8_e8m0fnu", DTypeClass::kFloat, 1, 1},
};

TEST(Metadata, EveryDataTypeNameParses) {
  EXPECT_EQ(DataType::all().size(), std::size(kAllTypes));
  for (const auto& t : kAllTypes) {
    SCOPED_TRACE(t.name);
    auto doc =
        array_doc({4, 3}, {2, 3}, t.name, t.cls == DTypeClass::kBool ? json(false) : json(0));
    const auto m = ArrayMetadata::from_v3(doc);
    ASSERT_NE(m.dtype, nullptr);
    EXPECT_EQ(m.dtype->name, t.name);
    EXPECT_EQ(m.dtype->cls, t.cls);
    EXPECT_EQ(m.dtype->size, t.size);
    EXPECT_EQ(m.dtype->swap_unit, t.swap_unit);
    EXPECT_EQ(m.dtype->float_format.has_value(),
              t.cls == DTypeClass::kFloat || t.cls == DTypeClass::kComplex);
    EXPECT_EQ(m.fill_value, Bytes(t.size, std::byte{0}));
    EXPECT_EQ(&DataType::from_v3_name(t.name), m.dtype);  // one object per type
  }
}

TEST(Metadata, UnknownDataTypesRaiseFormatError) {
  for (const char* name :
       {"float128", "int", "Float32", "<f4", "string", "", "float8_e4m3", "complex256", "r16"}) {
    SCOPED_TRACE(name);
    EXPECT_THROW((void)DataType::from_v3_name(name), FormatError);
    auto doc = base_doc();
    doc["data_type"] = name;
    EXPECT_NE(format_error(doc).find("data type"), std::string::npos);
  }
  auto doc = base_doc();
  doc["data_type"] = 32;
  format_error(doc);
}

TEST(Metadata, V2TypeStrings) {
  struct Case {
    const char* typestr;
    const char* name;
    Endian endian;
  };
  const Case cases[] = {
      {"|b1", "bool", Endian::kLittle},      {"|i1", "int8", Endian::kLittle},
      {"<i2", "int16", Endian::kLittle},     {">i4", "int32", Endian::kBig},
      {"<i8", "int64", Endian::kLittle},     {"|u1", "uint8", Endian::kLittle},
      {">u2", "uint16", Endian::kBig},       {"<u4", "uint32", Endian::kLittle},
      {">u8", "uint64", Endian::kBig},       {"<f2", "float16", Endian::kLittle},
      {">f4", "float32", Endian::kBig},      {"<f8", "float64", Endian::kLittle},
      {"<c8", "complex64", Endian::kLittle}, {">c16", "complex128", Endian::kBig},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.typestr);
    Endian endian = c.endian == Endian::kBig ? Endian::kLittle : Endian::kBig;
    const auto& t = DataType::from_v2_typestr(c.typestr, endian);
    EXPECT_EQ(t.name, c.name);
    EXPECT_EQ(endian, c.endian);
    // And back, with '|' for one-byte types.
    const std::string expected =
        t.size == 1 ? "|" + std::string(c.typestr).substr(1) : std::string(c.typestr);
    EXPECT_EQ(t.v2_typestr(c.endian), expected);
  }
  for (const char* bad : {"", "f4", "=f4", "<f16", "<U10", "|O", "<M8[ns]", "<f3", "<i"}) {
    SCOPED_TRACE(bad);
    Endian endian{};
    EXPECT_THROW((void)DataType::from_v2_typestr(bad, endian), FormatError);
  }
  for (const char* v3_only :
       {"bfloat16", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e3m4", "float8_e8m0fnu"}) {
    EXPECT_THROW((void)dt(v3_only).v2_typestr(Endian::kLittle), FormatError) << v3_only;
  }
}

// ---------------------------------------------------------------------------------------------
// Chunk key encodings

TEST(Metadata, ChunkKeyEncodings) {
  const std::vector<std::int64_t> coords = {1, 0, 12};
  struct Case {
    json encoding;
    const char* key;
    const char* key_0d;
  };
  const Case cases[] = {
      {"default", "c/1/0/12", "c"},
      {{{"name", "default"}}, "c/1/0/12", "c"},
      {{{"name", "default"}, {"configuration", {{"separator", "/"}}}}, "c/1/0/12", "c"},
      {{{"name", "default"}, {"configuration", {{"separator", "."}}}}, "c.1.0.12", "c"},
      {"v2", "1.0.12", "0"},
      {{{"name", "v2"}}, "1.0.12", "0"},
      {{{"name", "v2"}, {"configuration", {{"separator", "."}}}}, "1.0.12", "0"},
      {{{"name", "v2"}, {"configuration", {{"separator", "/"}}}}, "1/0/12", "0"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.encoding.dump());
    auto doc = array_doc({10, 10, 100}, {5, 5, 5}, "uint8");
    doc["chunk_key_encoding"] = c.encoding;
    const auto m = ArrayMetadata::from_v3(doc);
    EXPECT_EQ(m.chunk_key_encoding.key(coords), c.key);
    EXPECT_EQ(m.chunk_key_encoding.key({}), c.key_0d);
    // to_json round trips.
    auto doc2 = doc;
    doc2["chunk_key_encoding"] = m.chunk_key_encoding.to_json();
    EXPECT_EQ(ArrayMetadata::from_v3(doc2).chunk_key_encoding.key(coords), c.key);
  }
  for (const json& bad : {json("v3"), json(7), json::object(), json({{"name", 1}}),
                          json({{"name", "default"}, {"configuration", {{"separator", "-"}}}}),
                          json({{"name", "v2"}, {"configuration", {{"separator", 1}}}})}) {
    auto doc = base_doc();
    doc["chunk_key_encoding"] = bad;
    format_error(doc);
  }
}

// ---------------------------------------------------------------------------------------------
// Fill values

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
    format_error(array_doc({4}, {2}, type, value));
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

// ---------------------------------------------------------------------------------------------
// zarr.json

TEST(Metadata, ParsesAV3Document) {
  json doc = base_doc();
  doc["attributes"] = {{"units", "m"}};
  doc["dimension_names"] = {"x", nullptr};
  doc["codecs"] = json::array({"bytes", {{"name", "zstd"}, {"configuration", {{"level", 3}}}}});
  doc["storage_transformers"] = json::array();
  doc["extension"] = {{"must_understand", false}, {"anything", 1}};
  const auto m = ArrayMetadata::from_v3(doc);
  EXPECT_EQ(m.zarr_format, 3);
  EXPECT_EQ(m.shape, (std::vector<std::int64_t>{10, 20}));
  EXPECT_EQ(m.chunk_shape, (std::vector<std::int64_t>{5, 7}));
  EXPECT_EQ(m.dtype->name, "int32");
  EXPECT_EQ(m.num_elements(), 200);
  EXPECT_EQ(m.grid_shape(), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(m.attributes, (json{{"units", "m"}}));
  ASSERT_TRUE(m.dimension_names.has_value());
  ASSERT_EQ(m.dimension_names->size(), 2u);
  EXPECT_EQ((*m.dimension_names)[0], std::optional<std::string>("x"));
  EXPECT_EQ((*m.dimension_names)[1], std::nullopt);
  // String codec entries are normalised to objects.
  ASSERT_EQ(m.codecs.size(), 2u);
  EXPECT_EQ(m.codecs[0], (json{{"name", "bytes"}}));
  EXPECT_EQ(m.codecs[1]["name"], "zstd");
  EXPECT_EQ(m.document, doc);
}

TEST(Metadata, ZeroDimensionalAndEmptyArrays) {
  auto m = ArrayMetadata::from_v3(array_doc({}, {}, "float64", 1.5));
  EXPECT_TRUE(m.shape.empty());
  EXPECT_EQ(m.num_elements(), 1);
  EXPECT_TRUE(m.grid_shape().empty());
  m = ArrayMetadata::from_v3(array_doc({0, 5}, {3, 3}, "uint8"));
  EXPECT_EQ(m.num_elements(), 0);
  EXPECT_EQ(m.grid_shape(), (std::vector<std::int64_t>{0, 2}));
}

TEST(Metadata, InvalidShapesRaiseFormatError) {
  const std::int64_t big = std::int64_t{1} << 40;
  const std::pair<json, json> cases[] = {
      // shape, chunk_shape
      {json::array({-1}), json::array({1})},
      {json::array({10, -5}), json::array({1, 1})},
      {json::array({big, big}), json::array({1, 1})},  // product overflows
      {json::array({std::numeric_limits<std::uint64_t>::max()}), json::array({1})},
      {json::array({1.5}), json::array({1})},
      {json::array({"10"}), json::array({1})},
      {json(10), json::array({1})},
      {json::object(), json::array({1})},
      {json::array({10}), json::array({0})},  // zero chunk extent
      {json::array({10}), json::array({-2})},
      {json::array({10}), json(5)},
      {json::array({10, 10}), json::array({5})},                 // rank mismatch
      {json::array({10}), json::array({5, 5})},                  // rank mismatch
      {json::array({10, 10}), json::array({1 << 23, 1 << 23})},  // chunk too large to decode
  };
  for (const auto& [shape, chunks] : cases) {
    SCOPED_TRACE(shape.dump() + " / " + chunks.dump());
    auto doc = base_doc();
    doc["shape"] = shape;
    doc["chunk_grid"]["configuration"]["chunk_shape"] = chunks;
    format_error(doc);
  }
  // The message says what is wrong.
  auto doc = base_doc();
  doc["shape"] = {big, big};
  doc["chunk_grid"]["configuration"]["chunk_shape"] = {1, 1};
  EXPECT_NE(format_error(doc).find("64 bits"), std::string::npos);
  doc = base_doc();
  doc["chunk_grid"]["configuration"]["chunk_shape"] = {5};
  EXPECT_NE(format_error(doc).find("dimensions"), std::string::npos);
}

TEST(Metadata, InvalidDocumentsRaiseFormatError) {
  std::vector<std::pair<std::string, json>> cases;
  auto with = [&](const std::string& what, auto edit) {
    json doc = base_doc();
    edit(doc);
    cases.emplace_back(what, doc);
  };
  with("not an object", [](json& d) { d = json::array(); });
  with("zarr_format 2", [](json& d) { d["zarr_format"] = 2; });
  with("zarr_format string", [](json& d) { d["zarr_format"] = "3"; });
  with("no zarr_format", [](json& d) { d.erase("zarr_format"); });
  with("group", [](json& d) { d["node_type"] = "group"; });
  with("no node_type", [](json& d) { d.erase("node_type"); });
  with("no shape", [](json& d) { d.erase("shape"); });
  with("no data_type", [](json& d) { d.erase("data_type"); });
  with("no chunk_grid", [](json& d) { d.erase("chunk_grid"); });
  with("no fill_value", [](json& d) { d.erase("fill_value"); });
  with("no codecs", [](json& d) { d.erase("codecs"); });
  with("no chunk_key_encoding", [](json& d) { d.erase("chunk_key_encoding"); });
  with("unknown chunk grid", [](json& d) { d["chunk_grid"]["name"] = "rectilinear"; });
  with("chunk grid string", [](json& d) { d["chunk_grid"] = "regular"; });
  with("chunk grid without configuration", [](json& d) { d["chunk_grid"].erase("configuration"); });
  with("chunk grid without chunk_shape",
       [](json& d) { d["chunk_grid"]["configuration"] = json::object(); });
  with("chunk grid configuration not an object", [](json& d) {
    d["chunk_grid"]["configuration"] = json::array({5, 7});
  });
  with("unknown field", [](json& d) { d["my_extension"] = {{"x", 1}}; });
  with("unknown field must_understand true", [](json& d) {
    d["my_extension"] = {{"must_understand", true}};
  });
  with("unknown scalar field", [](json& d) { d["my_extension"] = 5; });
  with("codecs not a list", [](json& d) { d["codecs"] = {{"name", "bytes"}}; });
  with("codecs empty", [](json& d) { d["codecs"] = json::array(); });
  with("codec without name", [](json& d) { d["codecs"] = json::array({json::object()}); });
  with("codec name not a string", [](json& d) { d["codecs"] = json::array({{{"name", 5}}}); });
  with("codec entry a number", [](json& d) { d["codecs"] = json::array({5}); });
  with("codec configuration not an object", [](json& d) {
    d["codecs"] = json::array({{{"name", "bytes"}, {"configuration", json::array()}}});
  });
  with("attributes not an object", [](json& d) { d["attributes"] = json::array(); });
  with("storage transformers", [](json& d) {
    d["storage_transformers"] = json::array({{{"name", "something"}}});
  });
  with("dimension_names too short", [](json& d) { d["dimension_names"] = {"x"}; });
  with("dimension_names not strings", [](json& d) { d["dimension_names"] = {"x", 3}; });
  with("dimension_names a string", [](json& d) { d["dimension_names"] = "xy"; });
  with("fill value of the wrong type", [](json& d) { d["fill_value"] = "NaN"; });
  for (const auto& [what, doc] : cases) {
    SCOPED_TRACE(what);
    format_error(doc);
  }
  // Messages name the offending field.
  json doc = base_doc();
  doc["my_extension"] = {{"x", 1}};
  EXPECT_NE(format_error(doc).find("my_extension"), std::string::npos);
  doc = base_doc();
  doc["chunk_grid"]["name"] = "rectilinear";
  EXPECT_NE(format_error(doc).find("chunk_grid"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// .zarray

json zarray(json edits = json::object()) {
  json z = {{"zarr_format", 2}, {"shape", {6, 4, 2}},    {"chunks", {3, 2, 2}},
            {"dtype", "<f4"},   {"compressor", nullptr}, {"fill_value", 0},
            {"order", "C"},     {"filters", nullptr}};
  for (auto& [k, v] : edits.items()) z[k] = v;
  return z;
}

TEST(Metadata, V2COrder) {
  const auto m = ArrayMetadata::from_v2(zarray(), json::object());
  EXPECT_EQ(m.zarr_format, 2);
  EXPECT_EQ(m.shape, (std::vector<std::int64_t>{6, 4, 2}));
  EXPECT_EQ(m.chunk_shape, (std::vector<std::int64_t>{3, 2, 2}));
  EXPECT_EQ(m.dtype->name, "float32");
  EXPECT_EQ(m.codecs, json::parse(R"([{"name": "bytes", "configuration": {"endian": "little"}}])"));
  EXPECT_EQ(m.chunk_key_encoding.kind, ChunkKeyEncoding::Kind::kV2);
  const std::vector<std::int64_t> coords = {1, 0, 1};
  EXPECT_EQ(m.chunk_key_encoding.key(coords), "1.0.1");
}

TEST(Metadata, V2FOrderSynthesisesTranspose) {
  auto m = ArrayMetadata::from_v2(zarray({{"order", "F"}}), json::object());
  EXPECT_EQ(m.codecs, json::parse(R"([
      {"name": "transpose", "configuration": {"order": [2, 1, 0]}},
      {"name": "bytes", "configuration": {"endian": "little"}}])"));
  m = ArrayMetadata::from_v2(zarray({{"order", "F"}, {"shape", {5, 7}}, {"chunks", {2, 3}}}),
                             json::object());
  EXPECT_EQ(m.codecs[0],
            json::parse(R"({"name": "transpose", "configuration": {"order": [1, 0]}})"));
  // One dimension: F and C are the same layout, no transpose.
  m = ArrayMetadata::from_v2(zarray({{"order", "F"}, {"shape", {5}}, {"chunks", {2}}}),
                             json::object());
  EXPECT_EQ(m.codecs.size(), 1u);
  EXPECT_EQ(m.codecs[0]["name"], "bytes");
}

TEST(Metadata, V2ByteOrderAndCompressor) {
  auto m = ArrayMetadata::from_v2(
      zarray(
          {{"dtype", ">i8"}, {"compressor", {{"id", "zstd"}, {"level", 1}, {"checksum", false}}}}),
      json::object());
  EXPECT_EQ(m.dtype->name, "int64");
  EXPECT_EQ(m.codecs, json::parse(R"([
      {"name": "bytes", "configuration": {"endian": "big"}},
      {"name": "numcodecs.zstd", "configuration": {"level": 1, "checksum": false}}])"));
  // One-byte types get no endian.
  m = ArrayMetadata::from_v2(zarray({{"dtype", "|u1"}, {"compressor", {{"id", "zlib"}}}}),
                             json::object());
  EXPECT_EQ(m.codecs, json::parse(R"([
      {"name": "bytes"}, {"name": "numcodecs.zlib", "configuration": {}}])"));
}

TEST(Metadata, V2DimensionSeparatorAndFill) {
  const std::vector<std::int64_t> coords = {2, 0, 1};
  auto m = ArrayMetadata::from_v2(zarray({{"dimension_separator", "/"}}), json::object());
  EXPECT_EQ(m.chunk_key_encoding.key(coords), "2/0/1");
  m = ArrayMetadata::from_v2(zarray({{"dimension_separator", "."}}), json::object());
  EXPECT_EQ(m.chunk_key_encoding.key(coords), "2.0.1");
  m = ArrayMetadata::from_v2(zarray({{"dimension_separator", nullptr}}), json::object());
  EXPECT_EQ(m.chunk_key_encoding.key(coords), "2.0.1");

  m = ArrayMetadata::from_v2(zarray({{"fill_value", nullptr}}), json::object());
  EXPECT_EQ(m.fill_value, Bytes(4, std::byte{0}));
  m = ArrayMetadata::from_v2(zarray({{"fill_value", "NaN"}}), json::object());
  EXPECT_EQ(le_bits(m.fill_value), 0x7fc00000u);
  m = ArrayMetadata::from_v2(zarray({{"dtype", "<i2"}, {"fill_value", -3}}), json::object());
  EXPECT_EQ(le_bits(m.fill_value), 0xfffdu);
  // The fill value is stored little endian even for a big-endian array.
  m = ArrayMetadata::from_v2(zarray({{"dtype", ">i2"}, {"fill_value", 258}}), json::object());
  EXPECT_EQ(m.fill_value, (Bytes{std::byte{2}, std::byte{1}}));

  m = ArrayMetadata::from_v2(zarray(), json{{"title", "t"}});
  EXPECT_EQ(m.attributes, (json{{"title", "t"}}));
  m = ArrayMetadata::from_v2(zarray(), json());
  EXPECT_EQ(m.attributes, json::object());
}

TEST(Metadata, V2InvalidDocumentsRaiseFormatError) {
  const json cases[] = {
      {{"zarr_format", 3}},
      {{"order", "K"}},
      {{"dtype", "<f16"}},
      {{"dtype", 4}},
      {{"dtype", "|O"}},
      {{"shape", {6, -4, 2}}},
      {{"chunks", {3, 2}}},
      {{"chunks", {3, 0, 2}}},
      {{"dimension_separator", "-"}},
      {{"filters", json::array({{{"id", "delta"}, {"dtype", "<f4"}}})}},
      {{"compressor", {{"level", 1}}}},
      {{"compressor", "zlib"}},
      {{"compressor", {{"id", 5}}}},
      {{"fill_value", "zero"}},
  };
  for (const auto& edit : cases) {
    EXPECT_THROW((void)ArrayMetadata::from_v2(zarray(edit), json::object()), FormatError)
        << edit.dump();
  }
  EXPECT_THROW((void)ArrayMetadata::from_v2(json::array(), json::object()), FormatError);
  json no_shape = zarray();
  no_shape.erase("shape");
  EXPECT_THROW((void)ArrayMetadata::from_v2(no_shape, json::object()), FormatError);
}

// ---------------------------------------------------------------------------------------------
// Hostile documents: typed errors, before any large allocation or deep recursion.

std::span<const std::byte> text_bytes(const std::string& text) {
  return {reinterpret_cast<const std::byte*>(text.data()), text.size()};
}

TEST(JsonDocument, LimitsDepthSizeAndEncoding) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THROW((void)parse_json_document(text_bytes(deep), "'deep'"), FormatError);
  const std::string nested_ok = std::string(60, '[') + std::string(60, ']');
  EXPECT_NO_THROW((void)parse_json_document(text_bytes(nested_ok), "'ok'"));
  EXPECT_THROW((void)parse_json_document(text_bytes("{\"a\": \"\xff\xfe\"}"), "'utf8'"),
               FormatError);
  EXPECT_THROW((void)parse_json_document(text_bytes("{\"a\": 1"), "'cut'"), FormatError);
  try {
    (void)parse_json_document(text_bytes(std::string(1000, ' ')), "'big'", {.max_bytes = 100});
    ADD_FAILURE() << "a document over the limit parsed";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'big'"), std::string::npos);
  }
}

TEST(ArrayMetadataLimits, AtMost64Dimensions) {
  EXPECT_NO_THROW((void)ArrayMetadata::from_v3(
      array_doc(std::vector<std::int64_t>(64, 1), std::vector<std::int64_t>(64, 1), "uint8")));
  EXPECT_THROW((void)ArrayMetadata::from_v3(array_doc(std::vector<std::int64_t>(1000, 1),
                                                      std::vector<std::int64_t>(1000, 1), "uint8")),
               FormatError);
  // 2^62 elements describe fine (nothing is allocated for them) but never overflow.
  EXPECT_NO_THROW(
      (void)ArrayMetadata::from_v3(array_doc({std::int64_t{1} << 62}, {1024}, "uint8")));
  EXPECT_THROW((void)ArrayMetadata::from_v3(array_doc({std::int64_t{1} << 62, 4}, {1, 1}, "uint8")),
               FormatError);
}

json nested_shards(int levels) {
  json codecs = json::array({{{"name", "bytes"}}});
  for (int i = 0; i < levels; ++i) {
    codecs = json::array({{{"name", "sharding_indexed"},
                           {"configuration", {{"chunk_shape", {1}}, {"codecs", codecs}}}}});
  }
  return codecs;
}

TEST(ArrayMetadataLimits, ShardsNestAFewLevelsDeep) {
  const auto build = [](int levels) {
    const auto meta =
        ArrayMetadata::from_v3(array_doc({4}, {1}, "uint8", 0, nested_shards(levels)));
    return codecs::CodecChain(meta.codecs, {meta.chunk_shape, meta.dtype, meta.fill_value});
  };
  // Many chains built on one thread: the limit counts nesting, not chains alive.
  std::vector<codecs::CodecChain> chains;
  for (int i = 0; i < 20; ++i) chains.push_back(build(3));
  EXPECT_NO_THROW((void)build(8));
  EXPECT_THROW((void)build(9), FormatError);
  // (Documents nested thousands of levels deep never get this far: parse_json_document stops
  // them at 64 levels; copying such a json value recurses in the JSON library itself.)
  EXPECT_THROW((void)build(20), FormatError);
}

}  // namespace
}  // namespace zarr_device
