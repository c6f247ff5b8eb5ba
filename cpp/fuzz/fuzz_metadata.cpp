// fuzz_metadata: the metadata parser and the codec configurations it leads to.
//
// Input: [mode][document bytes...].
//   mode bit 0 clear: the bytes are a zarr.json: parse_json_document, then ArrayMetadata::from_v3;
//   mode bit 0 set:   the bytes are a .zarray, optionally followed by a NUL byte and a .zattrs:
//                     ArrayMetadata::from_v2;
//   mode bit 1 set:   the document is also opened as an array through a memory store
//                     (Array::open): a few elements read (no chunks: fill value), one written
//                     and read back.
// For metadata that parses, the codec chain is built as Array's constructor builds it, its
// to_json() is built again (and must give the same JSON), the fill value goes through
// fill_value_to_json and back, and, for chunks of at most 4 KiB, a chunk is encoded and decoded
// back. Findings besides crashes: a normalised chain that no longer parses or changes, a fill value
// that does not survive its JSON form, a round trip that changes a chunk, and exceptions that are
// not zarr_device::Error (from_v3/from_v2 promise FormatError; with ZARR_DEVICE_FUZZ_IGNORE
// listing "json.exception", nlohmann::json's own exceptions are let pass).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "fuzz_common.hpp"
#include "zarr_device/array.hpp"
#include "zarr_device/json_document.hpp"
#include "zarr_device/store.hpp"

namespace {

using namespace zarr_device;
using namespace zarr_device::fuzz;

std::span<const std::byte> as_bytes(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const std::byte*>(data), size};
}

bool is_nan_bits(std::span<const std::byte> value, const DataType& dtype) {
  if (dtype.cls != DTypeClass::kFloat && dtype.cls != DTypeClass::kComplex) return false;
  const json j = fill_value_to_json(value, dtype);
  const auto has_nan = [](const json& v) { return v.is_string() && v == "NaN"; };
  if (j.is_array()) return has_nan(j[0]) || has_nan(j[1]);
  return has_nan(j);
}

void check_fill_value(const ArrayMetadata& m) {
  const DataType& dtype = *m.dtype;
  const json j = fill_value_to_json(m.fill_value, dtype);
  std::vector<std::byte> back;
  if (!expect_errors([&] { back = parse_fill_value(j, dtype); })) {
    finding("fill value " + j.dump() + " written by fill_value_to_json does not parse back as " +
            std::string(dtype.name));
  }
  // NaN payloads are not kept by the JSON form ("NaN"); everything else must be.
  if (back != m.fill_value && !is_nan_bits(m.fill_value, dtype)) {
    finding("fill value of type " + std::string(dtype.name) + " changes through its JSON form " +
            j.dump());
  }
}

void check_chain(const ArrayMetadata& m) {
  const ChunkSpec spec{m.chunk_shape, m.dtype, m.fill_value};
  std::optional<codecs::CodecChain> chain;
  if (!expect_errors([&] { chain.emplace(m.codecs, spec, m.zarr_format); })) return;
  const json normalised = chain->to_json();
  std::optional<codecs::CodecChain> again;
  if (!expect_errors([&] { again.emplace(normalised, spec, m.zarr_format); })) {
    finding("codec chain " + normalised.dump() + " from to_json() does not parse again");
  }
  if (again->to_json() != normalised) {
    finding("codec chain " + normalised.dump() +
            " changes when parsed again: " + again->to_json().dump());
  }
  (void)chain->is_plain();
  (void)chain->supports_partial_decode();
  (void)chain->fixed_encoded_size();
  (void)chain->shard_layout();

  // A small chunk through the chain and back.
  if (spec.nbytes() > 4096) return;
  const auto chunk = sample_chunk(spec, 0, spec.nbytes());
  std::optional<Buffer> encoded;
  if (!expect_errors([&] { encoded = chain->encode(chunk); }) || !encoded) return;
  std::vector<std::byte> back(chunk.size());
  std::vector<DimSlice> all;
  for (auto e : spec.shape) all.push_back({0, 1, e});
  const StridedView view{back.data(), spec.shape, place::c_strides(spec.shape, spec.dtype->size)};
  if (!expect_errors([&] { chain->decode_into(*encoded, all, view); })) {
    finding("codec chain " + normalised.dump() + " cannot decode the chunk it just encoded");
  }
  if (back != chunk) finding("codec chain " + normalised.dump() + " changes a chunk it encodes");
}

void check_metadata(const ArrayMetadata& m) {
  (void)m.num_elements();
  const auto grid = m.grid_shape();
  std::vector<std::int64_t> last(grid.size());
  for (std::size_t i = 0; i < grid.size(); ++i) last[i] = grid[i] > 0 ? grid[i] - 1 : 0;
  (void)m.chunk_key_encoding.key(last);
  (void)m.chunk_key_encoding.to_json();
  check_fill_value(m);
  check_chain(m);
}

// The array opened from the document, over an empty memory store: reads of its first and last
// elements and of a few elements spread over it must give the fill value (no chunk is stored);
// for chunks of at most 64 KiB, one element is written and read back.
void open_as_array(std::span<const std::byte> zarray,
                   std::optional<std::span<const std::byte>> zattrs, bool v2) {
  auto store = make_memory_store();
  store->set(v2 ? ".zarray" : "zarr.json", zarray);
  if (zattrs) store->set(".zattrs", *zattrs);
  std::shared_ptr<const Array> array;
  if (!expect_errors([&] { array = Array::open(store, ""); })) return;
  const ArrayMetadata& meta = array->metadata();
  const auto& shape = meta.shape;
  const std::size_t es = meta.dtype->size;
  IoOptions options;
  options.threads = 1;

  const auto read = [&](const std::vector<DimSlice>& selection) {
    std::size_t n = es;
    for (const auto& s : selection) n *= static_cast<std::size_t>(s.count);
    std::vector<std::byte> out(n, std::byte{0xA5});
    if (!expect_errors([&] { array->read(selection, out, options); })) return out;
    for (std::size_t i = 0; i < n; i += es) {
      if (std::memcmp(out.data() + i, meta.fill_value.data(), es) != 0) {
        finding("a read of an array without chunks gave something else than the fill value");
      }
    }
    return out;
  };
  if (std::any_of(shape.begin(), shape.end(), [](auto e) { return e == 0; })) {
    std::vector<DimSlice> none;
    for (auto e : shape) none.push_back({0, 1, e});
    read(none);
    return;
  }
  std::vector<DimSlice> first;
  std::vector<DimSlice> last;
  std::vector<DimSlice> spread;
  for (auto e : shape) {
    first.push_back({0, 1, 1});
    last.push_back({e - 1, 1, 1});
    const std::int64_t count = std::min<std::int64_t>(3, e);
    spread.push_back({0, count > 1 ? (e - 1) / (count - 1) : 1, count});
  }
  read(first);
  read(last);
  if (shape.size() <= 4) read(spread);

  // One element written at the end of the array and read back.
  if (array->chain().spec().nbytes() > (std::size_t{64} << 10)) return;
  std::vector<std::byte> value = meta.fill_value;
  value[0] ^= std::byte{1};
  if (!expect_errors([&] { array->write(last, value, options); })) return;
  std::vector<std::byte> back(es);
  if (!expect_errors([&] { array->read(last, back, options); })) {
    finding("an element just written cannot be read back");
  }
  if (back != value) finding("an element written and read back changed");
}

// Seeds for when no golden files are at hand (scripts/fuzz.sh adds those and more).
const char* const kSeeds[] = {
    R"({"zarr_format": 3, "node_type": "array", "shape": [10, 7], "data_type": "float32",
 "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 4]}},
 "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
 "fill_value": "NaN", "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}},
 {"name": "bytes", "configuration": {"endian": "little"}},
 {"name": "zstd", "configuration": {"level": 0, "checksum": false}}, {"name": "crc32c"}],
 "attributes": {"a": [1, 2]}, "dimension_names": ["y", null]})",
    R"({"zarr_format": 3, "node_type": "array", "shape": [8, 8], "data_type": "uint16",
 "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 8]}},
 "chunk_key_encoding": {"name": "v2", "configuration": {"separator": "."}}, "fill_value": 3,
 "codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [4, 4],
 "codecs": [{"name": "bytes", "configuration": {"endian": "big"}},
 {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle",
 "typesize": 2, "blocksize": 0}}], "index_codecs": [{"name": "bytes",
 "configuration": {"endian": "little"}}, {"name": "crc32c"}], "index_location": "start"}}]})",
    R"({"zarr_format": 2, "shape": [20, 30], "chunks": [10, 10], "dtype": "<i4",
 "compressor": {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": -1, "blocksize": 0},
 "fill_value": 0, "order": "F", "filters": null, "dimension_separator": "/"})",
    R"({"zarr_format": 2, "shape": [5], "chunks": [2], "dtype": ">f8",
 "compressor": {"id": "lz4", "acceleration": 1}, "fill_value": "-Infinity", "order": "C",
 "filters": null})",
};

void write_seeds(const std::string& dir) {
  int n = 0;
  for (const char* doc : kSeeds) {
    const std::string text(doc);
    const bool v2 = text.find("\"zarr_format\": 2") != std::string::npos;
    for (std::uint8_t mode : {0, 2}) {
      std::string seed(1, static_cast<char>(mode | (v2 ? 1 : 0)));
      seed += text;
      if (v2 && mode == 2) seed += std::string(1, '\0') + R"({"note": "attrs"})";
      write_file(dir + "/builtin_" + std::to_string(n++),
                 {reinterpret_cast<const std::byte*>(seed.data()), seed.size()});
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  export_if_asked("fuzz_metadata",
                  "[mode: bit0 v2, bit1 also Array::open][zarr.json | "
                  ".zarray[NUL .zattrs]]",
                  json::array(), write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  const auto text = as_bytes(data + 1, size - 1);
  const bool v2 = (mode & 1) != 0;

  std::span<const std::byte> first = text;
  std::optional<std::span<const std::byte>> second;
  if (v2) {
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (text[i] == std::byte{0}) {
        first = text.first(i);
        second = text.subspan(i + 1);
        break;
      }
    }
  }

  // The array first: what a user reaches through open_array and indexing.
  if (mode & 2) open_as_array(first, second, v2);
  unless_json_exceptions_ignored([&] {
    expect_errors([&] {
      const json doc = parse_json_document(first, v2 ? "'.zarray'" : "'zarr.json'");
      if (!v2) {
        check_metadata(ArrayMetadata::from_v3(doc));
        return;
      }
      const json attrs = second ? parse_json_document(*second, "'.zattrs'") : json(json::object());
      check_metadata(ArrayMetadata::from_v2(doc, attrs));
    });
  });
  return 0;
}
