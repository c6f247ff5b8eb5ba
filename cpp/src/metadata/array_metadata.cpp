#include "zarr_device/array_metadata.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "zarr_device/errors.hpp"

namespace zarr_device {
namespace {

using json = nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "the engine stores decoded elements in little-endian order");

std::int64_t checked_product(std::span<const std::int64_t> extents, const char* what) {
  std::int64_t n = 1;
  for (auto e : extents) {
    if (e != 0 && n > std::numeric_limits<std::int64_t>::max() / e) {
      throw FormatError(std::string(what) + " has more elements than fit in 64 bits");
    }
    n *= e;
  }
  return n;
}

// NumPy's limit, and far beyond any real array: refusing more keeps every per-dimension loop and
// allocation small whatever the metadata says.
constexpr std::size_t kMaxDimensions = 64;

std::vector<std::int64_t> parse_extents(const json& value, const char* what, bool allow_zero) {
  if (!value.is_array()) throw FormatError(std::string(what) + " must be a list of integers");
  if (value.size() > kMaxDimensions) {
    throw FormatError(std::string(what) + " has " + std::to_string(value.size()) +
                      " dimensions; at most " + std::to_string(kMaxDimensions) + " are supported");
  }
  std::vector<std::int64_t> out;
  for (const auto& v : value) {
    if (!v.is_number_integer())
      throw FormatError(std::string(what) + " must be a list of integers");
    if (v.is_number_unsigned() &&
        v.get<std::uint64_t>() >
            static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      throw FormatError(std::string(what) + " has an extent that does not fit in 64 bits");
    }
    const auto e = v.get<std::int64_t>();
    if (e < 0 || (!allow_zero && e == 0)) {
      throw FormatError(std::string(what) + " has an invalid extent " + std::to_string(e));
    }
    out.push_back(e);
  }
  checked_product(out, what);
  return out;
}

void check_chunk_size(const std::vector<std::int64_t>& chunk, const DataType& dtype) {
  const std::int64_t n = checked_product(chunk, "chunk shape");
  // A chunk is decoded into memory whole: refuse sizes that cannot be addressed (hostile metadata
  // must not turn into a giant allocation request further down).
  if (n > (std::int64_t{1} << 46) / dtype.size) {
    throw FormatError("chunk shape of " + std::to_string(n) + " elements is too large");
  }
}

ChunkKeyEncoding parse_key_encoding(const json& value) {
  ChunkKeyEncoding enc;
  std::string name;
  json config = json::object();
  if (value.is_string()) {
    name = value.get<std::string>();
  } else if (value.is_object() && value.contains("name") && value["name"].is_string()) {
    name = value["name"].get<std::string>();
    if (value.contains("configuration")) config = value["configuration"];
  } else {
    throw FormatError("chunk_key_encoding must be a name or an object with a name");
  }
  if (name == "default") {
    enc.kind = ChunkKeyEncoding::Kind::kDefault;
    enc.separator = '/';
  } else if (name == "v2") {
    enc.kind = ChunkKeyEncoding::Kind::kV2;
    enc.separator = '.';
  } else {
    throw FormatError("unsupported chunk_key_encoding '" + name + "'");
  }
  if (config.is_object() && config.contains("separator")) {
    const auto sep = config["separator"];
    if (!sep.is_string() || (sep != "/" && sep != ".")) {
      throw FormatError("chunk_key_encoding separator must be \"/\" or \".\"");
    }
    enc.separator = sep.get<std::string>()[0];
  }
  return enc;
}

json normalise_codecs(const json& codecs) {
  if (!codecs.is_array()) throw FormatError("codecs must be a list");
  json out = json::array();
  for (const auto& c : codecs) {
    if (c.is_string()) {
      out.push_back({{"name", c}});
    } else if (c.is_object() && c.contains("name") && c["name"].is_string()) {
      if (c.contains("configuration") && !c["configuration"].is_object()) {
        throw FormatError("codec '" + c["name"].get<std::string>() +
                          "' has a configuration that is not an object");
      }
      out.push_back(c);
    } else {
      throw FormatError("codec entry " + c.dump() + " has no name");
    }
  }
  if (out.empty()) throw FormatError("codecs must not be empty");
  return out;
}

const json& require(const json& doc, const char* key) {
  if (!doc.is_object() || !doc.contains(key)) {
    throw FormatError(std::string("metadata has no '") + key + "'");
  }
  return doc[key];
}

}  // namespace

std::string ChunkKeyEncoding::key(std::span<const std::int64_t> coords) const {
  std::string key;
  if (kind == Kind::kDefault) {
    key = "c";
    for (auto c : coords) {
      key += separator;
      key += std::to_string(c);
    }
    return key;
  }
  if (coords.empty()) return "0";
  for (std::size_t i = 0; i < coords.size(); ++i) {
    if (i) key += separator;
    key += std::to_string(coords[i]);
  }
  return key;
}

json ChunkKeyEncoding::to_json() const {
  return {{"name", kind == Kind::kDefault ? "default" : "v2"},
          {"configuration", {{"separator", std::string(1, separator)}}}};
}

namespace {

// A unit as NumPy's type names write it: "10s" for a scale factor of 10, "us" for "μs".
std::string time_unit_name(std::string_view unit, std::int64_t factor) {
  const std::string name = unit == "μs" ? std::string("us") : std::string(unit);
  return factor == 1 ? name : std::to_string(factor) + name;
}

// zarr-python's {"name": "numpy.datetime64" (or "numpy.timedelta64"), "configuration": {"unit":
// "s", "scale_factor": 10}}: the type and its unit as NumPy names it ("10s").
void parse_v3_time_type(const json& type, ArrayMetadata& m) {
  const auto unsupported = [&] { return unsupported_data_type(type.dump()); };
  if (type.size() != 2 || !type.contains("name") || !type["name"].is_string() ||
      !type.contains("configuration")) {
    throw unsupported();
  }
  const auto& config = type["configuration"];
  if (!config.is_object() || config.size() != 2 || !config.contains("unit") ||
      !config.contains("scale_factor")) {
    throw unsupported();
  }
  m.dtype = &DataType::time_type(type["name"].get<std::string>());
  const auto& unit = config["unit"];
  const auto& scale = config["scale_factor"];
  if (!unit.is_string() || !is_time_unit(unit.get<std::string>())) {
    throw FormatError("data type " + type.dump() + " has an unknown time unit");
  }
  if (!scale.is_number_integer() || scale.get<std::int64_t>() < 1 ||
      scale.get<std::int64_t>() >= (std::int64_t{1} << 31)) {
    throw FormatError("data type " + type.dump() + " needs a scale_factor from 1 to 2^31 - 1");
  }
  const auto factor = scale.get<std::int64_t>();
  if (unit.get<std::string>() == "generic" && factor != 1) throw unsupported();
  m.time_unit = time_unit_name(unit.get<std::string>(), factor);
}

// NumPy's v2 type strings of time types: "<M8[ns]", ">m8[10s]", "<M8" (the generic unit). Returns
// false for other types.
bool parse_v2_time_type(std::string_view typestr, Endian& endian, ArrayMetadata& m) {
  if (typestr.size() < 3 || (typestr.substr(1, 2) != "M8" && typestr.substr(1, 2) != "m8")) {
    return false;
  }
  const auto unsupported = [&] { return unsupported_data_type("'" + std::string(typestr) + "'"); };
  if (typestr[0] != '<' && typestr[0] != '>') throw unsupported();
  endian = typestr[0] == '<' ? Endian::kLittle : Endian::kBig;
  m.dtype = &DataType::time_type(typestr[1] == 'M' ? "numpy.datetime64" : "numpy.timedelta64");
  std::string_view rest = typestr.substr(3);
  if (rest.empty()) {
    m.time_unit = "generic";
    return true;
  }
  if (rest.size() < 3 || rest.front() != '[' || rest.back() != ']') throw unsupported();
  rest = rest.substr(1, rest.size() - 2);
  std::size_t digits = 0;
  while (digits < rest.size() && digits < 10 && rest[digits] >= '0' && rest[digits] <= '9')
    ++digits;
  const std::string_view unit = rest.substr(digits);
  if (!is_time_unit(unit) || unit == "generic") throw unsupported();
  const auto factor = digits > 0 ? std::stoll(std::string(rest.substr(0, digits))) : 1;
  if (factor < 1 || factor >= (std::int64_t{1} << 31)) throw unsupported();
  m.time_unit = time_unit_name(unit, factor);
  return true;
}

ArrayMetadata parse_v3(const json& doc) {
  if (!doc.is_object()) throw FormatError("zarr.json is not a JSON object");
  const auto& format = require(doc, "zarr_format");
  if (format != 3) throw FormatError("zarr_format " + format.dump() + " is not 3");
  const auto& node_type = require(doc, "node_type");
  if (node_type != "array") throw FormatError("node is a " + node_type.dump() + ", not an array");
  ArrayMetadata m;
  m.zarr_format = 3;
  m.document = doc;
  m.shape = parse_extents(require(doc, "shape"), "shape", true);
  const auto& type_name = require(doc, "data_type");
  if (type_name.is_object()) {
    parse_v3_time_type(type_name, m);
  } else if (type_name.is_string()) {
    m.dtype = &DataType::from_v3_name(type_name.get<std::string>());
  } else {
    throw unsupported_data_type(type_name.dump());
  }

  const auto& grid = require(doc, "chunk_grid");
  if (!grid.is_object() || grid.value("name", "") != "regular" || !grid.contains("configuration") ||
      !grid["configuration"].contains("chunk_shape")) {
    throw FormatError("unsupported chunk_grid " + grid.dump() + " (only 'regular' is supported)");
  }
  m.chunk_shape = parse_extents(grid["configuration"]["chunk_shape"], "chunk_shape", false);
  if (m.chunk_shape.size() != m.shape.size()) {
    throw FormatError("chunk_shape has " + std::to_string(m.chunk_shape.size()) +
                      " dimensions but shape has " + std::to_string(m.shape.size()));
  }
  check_chunk_size(m.chunk_shape, *m.dtype);
  m.chunk_key_encoding = parse_key_encoding(require(doc, "chunk_key_encoding"));
  m.fill_value = parse_fill_value(require(doc, "fill_value"), *m.dtype);
  m.codecs = normalise_codecs(require(doc, "codecs"));
  if (doc.contains("attributes")) {
    if (!doc["attributes"].is_object()) throw FormatError("attributes must be an object");
    m.attributes = doc["attributes"];
  }
  if (doc.contains("storage_transformers") && !doc["storage_transformers"].empty()) {
    throw FormatError("storage transformers are not supported");
  }
  if (doc.contains("dimension_names") && !doc["dimension_names"].is_null()) {
    const auto& names = doc["dimension_names"];
    if (!names.is_array() || names.size() != m.shape.size()) {
      throw FormatError("dimension_names must list one name (or null) per dimension");
    }
    std::vector<std::optional<std::string>> out;
    for (const auto& n : names) {
      if (n.is_null())
        out.emplace_back();
      else if (n.is_string())
        out.emplace_back(n.get<std::string>());
      else
        throw FormatError("dimension_names must be strings or null");
    }
    m.dimension_names = std::move(out);
  }
  for (const auto& [key, value] : doc.items()) {
    static const std::vector<std::string> kKnown = {
        "zarr_format",        "node_type",  "shape",  "data_type",  "chunk_grid",
        "chunk_key_encoding", "fill_value", "codecs", "attributes", "storage_transformers",
        "dimension_names"};
    if (std::find(kKnown.begin(), kKnown.end(), key) != kKnown.end()) continue;
    // Extensions the reader does not know are allowed only when they say so.
    if (!(value.is_object() && value.contains("must_understand") &&
          value["must_understand"] == false)) {
      throw FormatError("unsupported metadata field '" + key + "'");
    }
  }
  return m;
}

ArrayMetadata parse_v2(const json& zarray, const json& zattrs) {
  if (!zarray.is_object()) throw FormatError(".zarray is not a JSON object");
  if (require(zarray, "zarr_format") != 2) throw FormatError(".zarray zarr_format is not 2");
  ArrayMetadata m;
  m.zarr_format = 2;
  m.document = zarray;
  m.shape = parse_extents(require(zarray, "shape"), "shape", true);
  m.chunk_shape = parse_extents(require(zarray, "chunks"), "chunks", false);
  if (m.chunk_shape.size() != m.shape.size()) {
    throw FormatError("chunks has " + std::to_string(m.chunk_shape.size()) +
                      " dimensions but shape has " + std::to_string(m.shape.size()));
  }
  const auto& typestr = require(zarray, "dtype");
  if (!typestr.is_string()) throw unsupported_data_type(typestr.dump());
  Endian endian = Endian::kLittle;
  if (!parse_v2_time_type(typestr.get<std::string>(), endian, m)) {
    m.dtype = &DataType::from_v2_typestr(typestr.get<std::string>(), endian);
  }
  check_chunk_size(m.chunk_shape, *m.dtype);
  m.fill_value = parse_fill_value(zarray.value("fill_value", json()), *m.dtype);
  const std::string order = zarray.value("order", "C");
  if (order != "C" && order != "F") throw FormatError("order must be \"C\" or \"F\"");
  std::string sep = ".";
  if (zarray.contains("dimension_separator") && !zarray["dimension_separator"].is_null()) {
    sep = zarray["dimension_separator"].get<std::string>();
    if (sep != "." && sep != "/") throw FormatError("dimension_separator must be \".\" or \"/\"");
  }
  m.chunk_key_encoding = {ChunkKeyEncoding::Kind::kV2, sep[0]};

  json codecs = json::array();
  if (order == "F" && m.shape.size() > 1) {
    json perm = json::array();
    for (std::size_t i = m.shape.size(); i-- > 0;) perm.push_back(i);
    codecs.push_back({{"name", "transpose"}, {"configuration", {{"order", perm}}}});
  }
  json bytes = {{"name", "bytes"}};
  if (m.dtype->size > 1) {
    bytes["configuration"] = {{"endian", endian == Endian::kLittle ? "little" : "big"}};
  }
  codecs.push_back(bytes);
  // A numcodecs configuration ({"id": ..., options}) as the v3 codec zarr-python names it.
  auto numcodecs = [](json config, const char* what) {
    if (!config.is_object() || !config.contains("id") || !config["id"].is_string()) {
      throw FormatError(std::string(what) + " " + config.dump() + " has no id");
    }
    const std::string id = config["id"].get<std::string>();
    config.erase("id");
    return json{{"name", "numcodecs." + id}, {"configuration", config}};
  };
  // Filters encode the chunk's bytes in order before the compressor, and sit between the bytes
  // codec and the compressor: numcodecs' shuffle, and delta (which reads the bytes as the types
  // its configuration names, byte order included). Others (fixedscaleoffset, ...) are refused by
  // name, not misread.
  if (zarray.contains("filters") && !zarray["filters"].is_null()) {
    const json& filters = zarray["filters"];
    if (!filters.is_array()) throw FormatError("filters must be a list or null");
    for (const json& filter : filters) {
      json codec = numcodecs(filter, "filter");
      const std::string name = codec["name"].get<std::string>();
      if (name != "numcodecs.shuffle" && name != "numcodecs.delta") {
        throw FormatError("the Zarr v2 filter " + filter.dump() +
                          " is not supported (numcodecs' shuffle and delta are; read this array "
                          "with zarr-python)");
      }
      codecs.push_back(std::move(codec));
    }
  }
  if (zarray.contains("compressor") && !zarray["compressor"].is_null()) {
    codecs.push_back(numcodecs(zarray["compressor"], "compressor"));
  }
  m.codecs = codecs;
  if (zattrs.is_object()) m.attributes = zattrs;
  return m;
}

// A value of the wrong JSON type deep inside (a name that is an object, ...) is bad metadata like
// any other: the caller sees FormatError, never the JSON library's own exception.
template <typename F>
ArrayMetadata typed_errors(const char* document, F parse) {
  try {
    return parse();
  } catch (const json::exception& e) {
    throw FormatError(std::string(document) + " is not valid metadata: " + e.what());
  }
}

}  // namespace

ArrayMetadata ArrayMetadata::from_v3(const json& doc) {
  return typed_errors("zarr.json", [&] { return parse_v3(doc); });
}

ArrayMetadata ArrayMetadata::from_v2(const json& zarray, const json& zattrs) {
  return typed_errors(".zarray", [&] { return parse_v2(zarray, zattrs); });
}

std::int64_t ArrayMetadata::num_elements() const { return checked_product(shape, "shape"); }

std::vector<std::int64_t> ArrayMetadata::grid_shape() const {
  std::vector<std::int64_t> grid(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) {
    grid[i] = shape[i] / chunk_shape[i] + (shape[i] % chunk_shape[i] != 0 ? 1 : 0);
  }
  return grid;
}

}  // namespace zarr_device
