// Tests of the metadata stage: zarr.json (v3) and .zarray (v2) parsing, data types, chunk key
// encodings and hostile documents. Fill values and the float formats behind them are in
// test_fill_values.cpp.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "codecs/codec_chain.hpp"
#include "test_util.hpp"
#include "zarr_device/array_metadata.hpp"
#include "zarr_device/dtype.hpp"
#include "zarr_device/errors.hpp"
#include "zarr_device/json_document.hpp"

namespace zarr_device {
namespace {

using test::array_doc;
using test::Bytes;
using test::json;
using test::le_bits;
using test::le_bytes;

const DataType& dt(std::string_view name) { return DataType::from_v3_name(name); }

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

// NumPy's time types as zarr-python writes them: int64 counts, the unit the array's.
json time_type(const char* name, json unit, json scale) {
  return {{"name", name}, {"configuration", {{"unit", std::move(unit)}, {"scale_factor", scale}}}};
}

TEST(Metadata, V3TimeTypes) {
  struct Case {
    json type;
    const char* dtype;
    const char* unit;
  };
  const Case cases[] = {
      {time_type("numpy.datetime64", "s", 1), "numpy.datetime64", "s"},
      {time_type("numpy.datetime64", "ns", 1), "numpy.datetime64", "ns"},
      {time_type("numpy.timedelta64", "ms", 10), "numpy.timedelta64", "10ms"},
      {time_type("numpy.datetime64", "μs", 3), "numpy.datetime64", "3us"},
      {time_type("numpy.timedelta64", "generic", 1), "numpy.timedelta64", "generic"},
      {time_type("numpy.datetime64", "Y", 2147483647), "numpy.datetime64", "2147483647Y"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.type.dump());
    auto doc = base_doc();
    doc["data_type"] = c.type;
    doc["fill_value"] = "NaT";
    const auto m = ArrayMetadata::from_v3(doc);
    EXPECT_EQ(m.dtype->name, c.dtype);
    EXPECT_TRUE(m.dtype->holds_time());
    EXPECT_EQ(m.dtype->cls, DTypeClass::kInt);
    EXPECT_EQ(m.dtype->size, 8);
    EXPECT_EQ(m.time_unit, c.unit);
    EXPECT_EQ(m.fill_value, le_bytes(std::uint64_t{1} << 63, 8));  // NaT
    EXPECT_EQ(fill_value_to_json(m.fill_value, *m.dtype), std::numeric_limits<std::int64_t>::min());
    doc["fill_value"] = -5;
    EXPECT_EQ(ArrayMetadata::from_v3(doc).fill_value, le_bytes(static_cast<std::uint64_t>(-5), 8));
  }
  const json bad[] = {
      "numpy.datetime64",                              // the unit is missing
      json{{"name", "numpy.datetime64"}},              // so is the configuration
      time_type("numpy.datetime32", "s", 1),           // no such type
      time_type("numpy.datetime64", "sec", 1),         // no such unit
      time_type("numpy.datetime64", 1, 1),             // a unit is a name
      time_type("numpy.datetime64", "s", 0),           // scale factors start at 1
      time_type("numpy.datetime64", "s", 2147483648),  // and end below 2^31
      time_type("numpy.datetime64", "s", 1.5),         // as integers
      time_type("numpy.timedelta64", "generic", 2),    // no multiple of no unit
      json{{"name", "numpy.datetime64"}, {"configuration", {{"unit", "s"}}}},
      json{{"name", "numpy.datetime64"},
           {"configuration", {{"unit", "s"}, {"scale_factor", 1}, {"calendar", "julian"}}}},
      json{{"name", "numpy.datetime64"},
           {"configuration", {{"unit", "s"}, {"scale_factor", 1}}},
           {"must_understand", false}},
      json{{"name", "null_terminated_bytes"}, {"configuration", {{"length_bytes", 4}}}},
  };
  for (const auto& type : bad) {
    SCOPED_TRACE(type.dump());
    auto doc = base_doc();
    doc["data_type"] = type;
    EXPECT_NE(format_error(doc).find("data type"), std::string::npos);
  }
  auto doc = base_doc();
  doc["data_type"] = time_type("numpy.datetime64", "s", 1);
  doc["fill_value"] = "NaN";  // NaT is a time type's only name of a value
  EXPECT_NE(format_error(doc).find("fill value"), std::string::npos);
  // Zarr v2 spells the unit into the type string, so a type alone cannot name it.
  EXPECT_THROW((void)DataType::time_type("numpy.datetime64").v2_typestr(Endian::kLittle),
               FormatError);
  EXPECT_THROW((void)DataType::time_type("int64"), FormatError);
  for (const auto& t : DataType::all()) EXPECT_FALSE(t.holds_time()) << t.name;
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

TEST(Metadata, V2TimeTypes) {
  struct Case {
    const char* typestr;
    const char* dtype;
    const char* unit;
    Endian endian;
  };
  const Case cases[] = {
      {"<M8[ns]", "numpy.datetime64", "ns", Endian::kLittle},
      {">m8[10s]", "numpy.timedelta64", "10s", Endian::kBig},
      {"<M8", "numpy.datetime64", "generic", Endian::kLittle},
      {"<m8[D]", "numpy.timedelta64", "D", Endian::kLittle},
      {">M8[1us]", "numpy.datetime64", "us", Endian::kBig},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.typestr);
    const auto m = ArrayMetadata::from_v2(
        zarray({{"dtype", c.typestr}, {"fill_value", -9223372036854775807LL - 1}}), json::object());
    EXPECT_EQ(m.dtype->name, c.dtype);
    EXPECT_EQ(m.time_unit, c.unit);
    EXPECT_EQ(m.fill_value, le_bytes(std::uint64_t{1} << 63, 8));
    EXPECT_EQ(m.codecs[0]["configuration"]["endian"], c.endian == Endian::kBig ? "big" : "little");
  }
  // No fill value: NaT, the type's default (zarr-python reads chunks never written as NaT).
  EXPECT_EQ(
      ArrayMetadata::from_v2(zarray({{"dtype", "<M8[s]"}, {"fill_value", nullptr}}), json::object())
          .fill_value,
      le_bytes(std::uint64_t{1} << 63, 8));
  for (const char* bad :
       {"|M8[ns]", "=M8[ns]", "<M8[]", "<M8[ns", "<M8ns]", "<M8[0s]", "<M8[xs]", "<M8[generic]",
        "<m8[3generic]", "<M8[2147483648s]", "<M8[12345678901s]", "<M4[s]"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW((void)ArrayMetadata::from_v2(zarray({{"dtype", bad}}), json::object()),
                 FormatError);
  }
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
      {{"filters", json::array({{{"id", "fixedscaleoffset"}, {"dtype", "<f4"}}})}},
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
