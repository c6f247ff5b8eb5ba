// fuzz_shard_index: sharded chunk decodes (sharding_indexed) over stored shard bytes.
//
// Input: [config][variant][stored shard bytes...]. `config` picks an entry of kTable (index at
// the start or end, with or without crc32c on the index, several inner chains, nested shards);
// `variant` picks the partial selection and destination layout (fuzz_common.hpp). Each input is
//   A. decoded whole from memory (CodecChain::decode_into), into a C-contiguous buffer;
//   B. decoded whole through a RangeReader over the bytes (decode_partial);
//   C. decoded in part through the RangeReader, D. the same part from memory;
//   E. indexed through ShardLayout::read_index, whose entries are checked against the shard;
//   F. decoded and indexed through ranges with a size larger than the bytes (a shard that shrank
//      after its size was taken: reads near the end come back short);
// and when A succeeds, the shard is encoded again and decoded (round trip). Findings besides
// crashes: the paths disagreeing on success or on the elements, index entries that
// read_index accepts outside the shard's data area or overlapping, writes outside the selected
// elements, a round trip that changes the data.
#include <algorithm>
#include <cstdint>

#include "codecs/shard_layout.hpp"
#include "fuzz_common.hpp"

namespace {

using namespace zarr_device;
using namespace zarr_device::fuzz;

const char* const kTable = R"json([
 {"label": "end, index crc32c, inner bytes", "shape": [8, 8], "data_type": "uint16",
  "fill_value": 0, "codecs": [{"name": "sharding_indexed", "configuration": {
   "chunk_shape": [4, 4], "index_location": "end",
   "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
   "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]},
 {"label": "end, index crc32c, inner zstd", "shape": [8, 8], "data_type": "float32",
  "fill_value": "NaN", "codecs": [{"name": "sharding_indexed", "configuration": {
   "chunk_shape": [4, 2], "index_location": "end",
   "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
              {"name": "zstd", "configuration": {"level": 0, "checksum": false}}],
   "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]},
 {"label": "end, index crc32c, inner crc32c", "shape": [6, 4], "data_type": "int32",
  "fill_value": -7, "codecs": [{"name": "sharding_indexed", "configuration": {
   "chunk_shape": [3, 2], "index_location": "end",
   "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
   "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]},
 {"label": "start, index crc32c, inner bytes", "shape": [8, 8], "data_type": "uint8",
  "fill_value": 255, "codecs": [{"name": "sharding_indexed", "configuration": {
   "chunk_shape": [2, 4], "index_location": "start",
   "codecs": [{"name": "bytes"}],
   "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]},
 {"label": "start, index crc32c, inner zstd", "shape": [4, 8], "data_type": "int16",
  "fill_value": 0, "codecs": [{"name": "sharding_indexed", "configuration": {
   "chunk_shape": [2, 4], "index_location": "start",
   "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
              {"name": "zstd", "configuration": {"level": 1, "checksum": true}}],
   "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]},
 {"label": "start, index crc32c, inner crc32c", "shape": [8, 8], "data_type": "uint16",
  "fill_value": 0, "codecs": [{"name": "sharding_indexed", "configuration": {
   "chunk_shape": [4, 4], "index_location": "start",
   "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
   "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]},
 {"label": "end, plain index, inner bytes", "shape": [8, 8], "data_type": "uint16",
  "fill_value": 0, "codecs": [{"name": "sharding_indexed", "configuration": {
   "chunk_shape": [4, 4], "index_location": "end",
   "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
   "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}]},
 {"label": "end, plain index, inner zstd", "shape": [8, 4], "data_type": "float64",
  "fill_value": 0, "codecs": [{"name": "sharding_indexed", "configuration": {
   "chunk_shape": [2, 2], "index_location": "end",
   "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
              {"name": "zstd", "configuration": {"level": 0, "checksum": false}}],
   "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}]},
 {"label": "end, plain index, inner crc32c", "shape": [8, 8], "data_type": "uint8",
  "fill_value": 0, "codecs": [{"name": "sharding_indexed", "configuration": {
   "chunk_shape": [4, 4], "index_location": "end",
   "codecs": [{"name": "bytes"}, {"name": "crc32c"}],
   "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}]},
 {"label": "start, plain index, inner bytes", "shape": [8, 8], "data_type": "uint16",
  "fill_value": 1, "codecs": [{"name": "sharding_indexed", "configuration": {
   "chunk_shape": [4, 4], "index_location": "start",
   "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
   "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}]},
 {"label": "start, plain index, inner zstd", "shape": [8, 8], "data_type": "uint16",
  "fill_value": 0, "codecs": [{"name": "sharding_indexed", "configuration": {
   "chunk_shape": [4, 4], "index_location": "start",
   "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
              {"name": "zstd", "configuration": {"level": 0, "checksum": false}}],
   "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}]},
 {"label": "start, plain index, inner crc32c", "shape": [4, 4], "data_type": "int64",
  "fill_value": 0, "codecs": [{"name": "sharding_indexed", "configuration": {
   "chunk_shape": [2, 2], "index_location": "start",
   "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
   "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}]},
 {"label": "end, index crc32c, inner transpose big-endian gzip (3-d)", "shape": [4, 4, 4],
  "data_type": "uint32", "fill_value": 0, "codecs": [{"name": "sharding_indexed",
  "configuration": {"chunk_shape": [2, 2, 2], "index_location": "end",
   "codecs": [{"name": "transpose", "configuration": {"order": [2, 1, 0]}},
              {"name": "bytes", "configuration": {"endian": "big"}},
              {"name": "gzip", "configuration": {"level": 5}}],
   "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]},
 {"label": "end, big-endian index crc32c, inner blosc", "shape": [8, 8], "data_type": "float32",
  "fill_value": 0, "codecs": [{"name": "sharding_indexed", "configuration": {
   "chunk_shape": [4, 4], "index_location": "end",
   "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
              {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5,
                                                  "shuffle": "shuffle", "typesize": 4,
                                                  "blocksize": 0}}],
   "index_codecs": [{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "crc32c"}]}}]},
 {"label": "nested shards", "shape": [8, 8], "data_type": "uint8", "fill_value": 0,
  "codecs": [{"name": "sharding_indexed", "configuration": {
   "chunk_shape": [4, 8], "index_location": "end",
   "codecs": [{"name": "sharding_indexed", "configuration": {
     "chunk_shape": [2, 4], "index_location": "start",
     "codecs": [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 0}}],
     "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}],
   "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]},
 {"label": "end, index crc32c, inner gzip zstd (stacked)", "shape": [8, 8], "data_type": "uint8",
  "fill_value": 0, "codecs": [{"name": "sharding_indexed", "configuration": {
   "chunk_shape": [4, 4], "index_location": "end",
   "codecs": [{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 1}},
              {"name": "zstd", "configuration": {"level": 0, "checksum": false}}],
   "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]},
 {"label": "1-d, end, index crc32c, inner transpose crc32c", "shape": [16], "data_type": "int8",
  "fill_value": -1, "codecs": [{"name": "sharding_indexed", "configuration": {
   "chunk_shape": [4], "index_location": "end",
   "codecs": [{"name": "transpose", "configuration": {"order": [0]}}, {"name": "bytes"},
              {"name": "crc32c"}],
   "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]}
])json";

std::vector<ChainCase>& cases() {
  static std::vector<ChainCase> c = build_chain_cases(json::parse(kTable));
  return c;
}

void write_seeds(const std::string& dir) {
  const auto& all = cases();
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& chain = *all[i].chain;
    for (int kind = 0; kind < 3; ++kind) {
      const auto chunk = sample_chunk(chain.spec(), kind, i * 3 + kind);
      std::optional<Buffer> encoded = chain.encode(chunk);
      if (!encoded) continue;
      std::vector<std::byte> seed{static_cast<std::byte>(i), static_cast<std::byte>(kind * 53)};
      seed.insert(seed.end(), encoded->span().begin(), encoded->span().end());
      write_file(dir + "/engine_" + std::to_string(i) + "_" + std::to_string(kind), seed);
    }
  }
}

const char* outcome(bool ok) { return ok ? "succeeds" : "fails"; }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  export_if_asked("fuzz_shard_index", "[entry][variant][shard bytes]", json::parse(kTable),
                  write_seeds);
  cases();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  const auto& all = cases();
  const ChainCase& c = all[in.byte() % all.size()];
  const std::uint8_t variant = in.byte();
  const Buffer shard = in.rest();
  const auto& chain = *c.chain;
  const ChunkSpec& spec = chain.spec();
  const std::size_t es = spec.dtype->size;
  const RangeReader reader = range_reader_over(shard);
  const std::uint64_t total = shard.size();

  std::vector<DimSlice> all_elements;
  for (auto e : spec.shape) all_elements.push_back({0, 1, e});
  const auto strides = place::c_strides(spec.shape, es);

  // A: whole shard from memory.
  std::vector<std::byte> whole(spec.nbytes(), std::byte{0xA5});
  const StridedView whole_view{whole.data(), spec.shape, strides};
  const bool ok_a = expect_errors([&] { chain.decode_into(shard, all_elements, whole_view); });

  // B: whole shard through ranges.
  std::vector<std::byte> ranged(spec.nbytes(), std::byte{0x5A});
  const StridedView ranged_view{ranged.data(), spec.shape, strides};
  const bool ok_b =
      expect_errors([&] { chain.decode_partial(reader, total, all_elements, ranged_view); });
  if (ok_a != ok_b) {
    finding(c.label + ": whole shard from memory " + outcome(ok_a) + ", through ranges " +
            outcome(ok_b));
  }
  if (ok_a && ok_b && whole != ranged) {
    finding(c.label + ": whole shard decodes differently from memory and through ranges");
  }

  // C and D: a partial selection through ranges and from memory.
  Placement pc = make_placement(spec.shape, es, variant, false);
  const bool ok_c =
      expect_errors([&] { chain.decode_partial(reader, total, pc.selection, pc.view); });
  Placement pd = make_placement(spec.shape, es, variant, false);
  const bool ok_d = expect_errors([&] { chain.decode_into(shard, pd.selection, pd.view); });
  if (ok_c != ok_d) {
    finding(c.label + ": partial decode from memory " + outcome(ok_d) + ", through ranges " +
            outcome(ok_c));
  }
  if (ok_a && !ok_c) finding(c.label + ": whole shard decodes, a part of it does not");
  if (ok_c && ok_d && pc.storage != pd.storage) {
    finding(c.label + ": partial decode differs from memory and through ranges");
  }
  if (ok_c) {
    check_gaps_untouched(pc, es, c.label + " (partial, ranges)");
    if (ok_a) check_same_elements(whole_view, pc, es, c.label + " (partial, ranges)");
  }

  // A shard that shrank after its size was taken: ranges near the end come back short.
  {
    const std::uint64_t claimed = total + 1 + (variant >> 3);
    std::vector<std::byte> out(spec.nbytes());
    const StridedView out_view{out.data(), spec.shape, strides};
    expect_errors([&] { chain.decode_partial(reader, claimed, all_elements, out_view); });
    if (const auto* shrunk = chain.shard_layout()) {
      expect_errors([&] { (void)shrunk->read_index(reader, claimed); });
    }
  }

  // E: the index alone.
  const codecs::ShardLayout* layout = chain.shard_layout();
  if (layout == nullptr) {
    finding(c.label + ": a sharding chain without a ShardLayout");
    return 0;
  }
  std::vector<std::optional<codecs::ShardLayout::Entry>> index;
  const bool ok_e = expect_errors([&] { index = layout->read_index(reader, total); });
  if (ok_a && !ok_e) finding(c.label + ": the shard decodes but its index does not");
  if (ok_e) {
    std::size_t expected_entries = 1;
    for (auto n : layout->chunks_per_shard()) expected_entries *= static_cast<std::size_t>(n);
    if (index.size() != expected_entries) finding(c.label + ": index has the wrong entry count");
    // The index's own bytes lie at the start or at the end; every entry must lie in the rest.
    const json& config = c.document["codecs"][0]["configuration"];
    std::uint64_t index_bytes = 16 * expected_entries;
    for (const auto& codec : config["index_codecs"]) {
      if (codec["name"] == "crc32c") index_bytes += 4;
    }
    const bool at_start = config["index_location"] == "start";
    const std::uint64_t lo = at_start ? index_bytes : 0;
    const std::uint64_t hi = at_start ? total : total - index_bytes;
    std::vector<codecs::ShardLayout::Entry> present;
    for (const auto& e : index) {
      if (!e) continue;
      if (e->offset < lo || e->offset > hi || e->nbytes > hi - e->offset) {
        finding(c.label + ": read_index accepted an entry outside the shard's data area");
      }
      present.push_back(*e);
    }
    std::sort(present.begin(), present.end(),
              [](const auto& x, const auto& y) { return x.offset < y.offset; });
    for (std::size_t i = 1; i < present.size(); ++i) {
      if (present[i - 1].offset + present[i - 1].nbytes > present[i].offset) {
        finding(c.label + ": read_index accepted overlapping entries");
      }
    }
  }

  // Round trip.
  if (ok_a) {
    std::optional<Buffer> again;
    if (!expect_errors([&] { again = chain.encode(whole); })) return 0;
    if (!again) {
      // Nothing stored means every inner chunk is fill value.
      for (std::size_t i = 0; i + es <= whole.size(); i += es) {
        if (std::memcmp(whole.data() + i, spec.fill_value.data(), es) != 0) {
          finding(c.label + ": encode stored nothing for a shard that is not all fill value");
        }
      }
      return 0;
    }
    std::vector<std::byte> back(spec.nbytes());
    const StridedView back_view{back.data(), spec.shape, strides};
    if (!expect_errors([&] { chain.decode_into(*again, all_elements, back_view); })) {
      finding(c.label + ": the engine cannot decode the shard it just encoded");
    }
    if (back != whole) finding(c.label + ": encode then decode changed the shard");
  }
  return 0;
}
