// fuzz_codec_chain: a whole chunk decode through realistic codec chains.
//
// Input: [chain][variant][stored chunk bytes...]. `chain` picks an entry of kTable (modulo its
// size); `variant` picks the partial selection and the destination layouts (fuzz_common.hpp).
// Each input is decoded
//   A. whole, into a C-contiguous chunk-sized buffer (the direct decode_into path);
//   B. whole, into a padded or Fortran-ordered view (the decode-then-place path);
//   C. a strided partial selection, into a padded or Fortran-ordered view;
//   D. whole, its stored bytes pulled in pieces of 1 to 64 bytes (`variant` picks the size), where
//      the chain decodes as a stream straight into place (CodecChain::stream_decoder into its
//      stream_target: what host reads do with large chunks);
// and when A succeeds, the chunk is encoded again and decoded (round trip). Findings besides
// crashes: A and B (or C, for unsharded chains, or D) disagreeing on success or on the elements,
// writes outside the selected elements, a round trip that changes the data, a checksum mismatch
// whole that is another error from pieces.
#include <algorithm>
#include <cstdint>
#include <memory>

#include "fuzz_common.hpp"

namespace {

using namespace zarr_device;
using namespace zarr_device::fuzz;

// Small chunks (at most a few KiB decoded) so that each execution is fast.
const char* const kTable = R"json([
 {"label": "bytes u8", "shape": [16, 16], "data_type": "uint8", "fill_value": 0,
  "codecs": [{"name": "bytes"}]},
 {"label": "bytes le i32", "shape": [8, 8], "data_type": "int32", "fill_value": -1,
  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]},
 {"label": "bytes be f64", "shape": [4, 6], "data_type": "float64", "fill_value": "NaN",
  "codecs": [{"name": "bytes", "configuration": {"endian": "big"}}]},
 {"label": "zstd f32", "shape": [8, 8], "data_type": "float32", "fill_value": 0,
  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "zstd", "configuration": {"level": 0, "checksum": false}}]},
 {"label": "zstd checksum i16", "shape": [16, 8], "data_type": "int16", "fill_value": 7,
  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "zstd", "configuration": {"level": 3, "checksum": true}}]},
 {"label": "gzip u16", "shape": [8, 8], "data_type": "uint16", "fill_value": 0,
  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "gzip", "configuration": {"level": 5}}]},
 {"label": "blosc lz4 shuffle f32", "shape": [8, 8], "data_type": "float32", "fill_value": 0,
  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle",
                                                 "typesize": 4, "blocksize": 0}}]},
 {"label": "blosc zstd bitshuffle i64", "shape": [4, 8], "data_type": "int64", "fill_value": 0,
  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 3,
                                                 "shuffle": "bitshuffle", "typesize": 8,
                                                 "blocksize": 0}}]},
 {"label": "blosc zlib noshuffle u8", "shape": [32, 8], "data_type": "uint8", "fill_value": 0,
  "codecs": [{"name": "bytes"},
             {"name": "blosc", "configuration": {"cname": "zlib", "clevel": 1,
                                                 "shuffle": "noshuffle", "typesize": 1,
                                                 "blocksize": 0}}]},
 {"label": "blosc blosclz small blocks u16", "shape": [16, 16], "data_type": "uint16",
  "fill_value": 0,
  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "blosc", "configuration": {"cname": "blosclz", "clevel": 9,
                                                 "shuffle": "shuffle", "typesize": 2,
                                                 "blocksize": 64}}]},
 {"label": "crc32c i32", "shape": [8, 8], "data_type": "int32", "fill_value": 0,
  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]},
 {"label": "zstd crc32c f32", "shape": [8, 8], "data_type": "float32", "fill_value": 0,
  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "zstd", "configuration": {"level": 0, "checksum": false}},
             {"name": "crc32c"}]},
 {"label": "gzip zstd u8 (stacked)", "shape": [16, 16], "data_type": "uint8", "fill_value": 0,
  "codecs": [{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 5}},
             {"name": "zstd", "configuration": {"level": 0, "checksum": false}}]},
 {"label": "zstd gzip f32 (stacked)", "shape": [8, 8], "data_type": "float32", "fill_value": 0,
  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "zstd", "configuration": {"level": 0, "checksum": false}},
             {"name": "gzip", "configuration": {"level": 1}}]},
 {"label": "gzip gzip zstd u8 (stacked three)", "shape": [8, 8], "data_type": "uint8",
  "fill_value": 0,
  "codecs": [{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 1}},
             {"name": "gzip", "configuration": {"level": 1}},
             {"name": "zstd", "configuration": {"level": 0, "checksum": false}}]},
 {"label": "transpose zstd f32", "shape": [4, 6], "data_type": "float32", "fill_value": 0,
  "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}},
             {"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "zstd", "configuration": {"level": 0, "checksum": false}}]},
 {"label": "transpose 3d be gzip u32", "shape": [2, 3, 4], "data_type": "uint32",
  "fill_value": 0,
  "codecs": [{"name": "transpose", "configuration": {"order": [2, 0, 1]}},
             {"name": "bytes", "configuration": {"endian": "big"}},
             {"name": "gzip", "configuration": {"level": 5}}]},
 {"label": "two transposes be crc32c c64", "shape": [3, 4], "data_type": "complex64",
  "fill_value": [1.0, -1.0],
  "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}},
             {"name": "transpose", "configuration": {"order": [1, 0]}},
             {"name": "bytes", "configuration": {"endian": "big"}}, {"name": "crc32c"}]},
 {"label": "numcodecs.zlib i32", "shape": [8, 8], "data_type": "int32", "fill_value": 0,
  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "numcodecs.zlib", "configuration": {"level": 1}}]},
 {"label": "numcodecs.gzip i16", "shape": [8, 8], "data_type": "int16", "fill_value": 0,
  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "numcodecs.gzip", "configuration": {"level": 1}}]},
 {"label": "numcodecs.zstd crc32c f64", "shape": [4, 4], "data_type": "float64",
  "fill_value": 0,
  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "numcodecs.zstd", "configuration": {"level": 1, "checksum": false}},
             {"name": "crc32c"}]},
 {"label": "numcodecs.blosc u16", "shape": [8, 8], "data_type": "uint16", "fill_value": 0,
  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "numcodecs.blosc", "configuration": {"cname": "lz4", "clevel": 5,
                                                           "shuffle": 1, "blocksize": 0}}]},
 {"label": "numcodecs.delta i32 zstd", "shape": [8, 8], "data_type": "int32", "fill_value": 0,
  "codecs": [{"name": "numcodecs.delta", "configuration": {"dtype": "<i4"}},
             {"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "zstd", "configuration": {"level": 1, "checksum": false}}]},
 {"label": "numcodecs.lz4 f32", "shape": [8, 8], "data_type": "float32", "fill_value": 0,
  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "numcodecs.lz4", "configuration": {"acceleration": 1}}]},
 {"label": "v2 F order be zlib i32", "shape": [4, 6], "data_type": "int32", "fill_value": 0,
  "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}},
             {"name": "bytes", "configuration": {"endian": "big"}},
             {"name": "numcodecs.zlib", "configuration": {"level": 1}}]},
 {"label": "blosc crc32c bf16", "shape": [8, 8], "data_type": "bfloat16", "fill_value": 0,
  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle",
                                                 "typesize": 2, "blocksize": 0}},
             {"name": "crc32c"}]},
 {"label": "zstd float8", "shape": [16, 16], "data_type": "float8_e4m3fn", "fill_value": "NaN",
  "codecs": [{"name": "bytes"},
             {"name": "zstd", "configuration": {"level": 0, "checksum": false}}]},
 {"label": "zstd bool", "shape": [16, 8], "data_type": "bool", "fill_value": false,
  "codecs": [{"name": "bytes"},
             {"name": "zstd", "configuration": {"level": 0, "checksum": false}}]},
 {"label": "0-d zstd f64", "shape": [], "data_type": "float64", "fill_value": 0,
  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "zstd", "configuration": {"level": 0, "checksum": false}}]},
 {"label": "1-d gzip c128", "shape": [5], "data_type": "complex128", "fill_value": ["NaN", 0],
  "codecs": [{"name": "bytes", "configuration": {"endian": "big"}},
             {"name": "gzip", "configuration": {"level": 5}}]},
 {"label": "transpose then sharding", "shape": [4, 8], "data_type": "uint16", "fill_value": 3,
  "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}},
             {"name": "sharding_indexed", "configuration": {
                "chunk_shape": [4, 2],
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                           {"name": "gzip", "configuration": {"level": 1}}],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                 {"name": "crc32c"}],
                "index_location": "end"}}]},
 {"label": "sharding then zstd", "shape": [4, 4], "data_type": "int32", "fill_value": 0,
  "codecs": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [2, 2],
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                "index_location": "start"}},
             {"name": "zstd", "configuration": {"level": 0, "checksum": false}}]}
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
      std::vector<std::byte> seed{static_cast<std::byte>(i), static_cast<std::byte>(kind * 37)};
      seed.insert(seed.end(), encoded->span().begin(), encoded->span().end());
      write_file(dir + "/engine_" + std::to_string(i) + "_" + std::to_string(kind), seed);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  export_if_asked("fuzz_codec_chain", "[entry][variant][chunk bytes]", json::parse(kTable),
                  write_seeds);
  cases();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  const auto& all = cases();
  const ChainCase& c = all[in.byte() % all.size()];
  const std::uint8_t variant = in.byte();
  const Buffer chunk = in.rest();
  const auto& chain = *c.chain;
  const ChunkSpec& spec = chain.spec();
  const std::size_t es = spec.dtype->size;
  const bool sharded = chain.array_to_bytes().supports_partial_decode();

  // A: the whole chunk, C-contiguous.
  std::vector<std::byte> whole(spec.nbytes());
  const StridedView whole_view{whole.data(), spec.shape, place::c_strides(spec.shape, es)};
  std::vector<DimSlice> all_elements;
  for (auto e : spec.shape) all_elements.push_back({0, 1, e});
  const bool ok_a = expect_errors([&] { chain.decode_into(chunk, all_elements, whole_view); });

  // B: the whole chunk into a view with gaps (never contiguous).
  Placement b = make_placement(spec.shape, es, variant | 1, true);
  const bool ok_b = expect_errors([&] { chain.decode_into(chunk, b.selection, b.view); });
  if (ok_a != ok_b) {
    finding(c.label + ": whole-chunk decode " + (ok_a ? "succeeds" : "fails") +
            " into a contiguous buffer but " + (ok_b ? "succeeds" : "fails") +
            " into a strided view");
  }
  if (ok_a && ok_b) {
    check_same_elements(whole_view, b, es, c.label + " (strided whole)");
    check_gaps_untouched(b, es, c.label + " (strided whole)");
  }

  // C: a strided partial selection.
  Placement p = make_placement(spec.shape, es, variant, false);
  const bool ok_c = expect_errors([&] { chain.decode_into(chunk, p.selection, p.view); });
  if (ok_a && !ok_c) finding(c.label + ": whole-chunk decode succeeds, partial decode fails");
  if (!sharded && ok_c && !ok_a) {
    finding(c.label + ": partial decode succeeds, whole-chunk decode fails");
  }
  if (ok_c) {
    check_gaps_untouched(p, es, c.label + " (partial)");
    if (ok_a) check_same_elements(whole_view, p, es, c.label + " (partial)");
  }

  // D: the whole chunk from pieces (skipped for chains that do not decode as a stream).
  std::vector<std::byte> pieces(spec.nbytes());
  const StridedView pieces_view{pieces.data(), spec.shape, whole_view.byte_strides};
  bool tried = false;
  bool checksum_d = false;
  const bool ok_d = expect_errors([&] {
    try {
      const auto target = chain.stream_target(all_elements, pieces_view);
      if (!target || chunk.size() > chain.max_stored_size()) return;
      const std::size_t piece = 1 + variant % 64;
      std::size_t at = 0;
      // Making the decoder may raise already: the data's size alone tells it is wrong.
      auto decoder = chain.stream_decoder(chunk.size(), [&]() -> std::span<const std::byte> {
        const std::size_t n = std::min(piece, chunk.size() - at);
        at += n;
        return chunk.span().subspan(at - n, n);
      });
      tried = true;
      decoder->fill(*target);
      decoder->finish();
    } catch (const ChecksumError&) {
      tried = checksum_d = true;
      throw;
    } catch (const Error&) {
      tried = true;
      throw;
    }
  });
  if (tried) {
    if (ok_a != ok_d) {
      finding(c.label + ": whole-chunk decode " + (ok_a ? "succeeds" : "fails") +
              " but decoding from pieces " + (ok_d ? "succeeds" : "fails"));
    }
    if (ok_a && ok_d && pieces != whole) {
      finding(c.label + ": decoding from pieces gives other elements");
    }
    if (!ok_a && !ok_d) {
      bool checksum_a = false;
      expect_errors([&] {
        try {
          chain.decode_into(chunk, all_elements, whole_view);
        } catch (const ChecksumError&) {
          checksum_a = true;
          throw;
        }
      });
      // A checksum that fails whole fails from pieces. (The reverse may differ: zstd's own
      // frame checksum fails from pieces where the whole decode's walk over the frames, made
      // before it decodes, finds a later frame broken first.)
      if (checksum_a && !checksum_d) {
        finding(c.label + ": a checksum mismatch whole is another error from pieces");
      }
    }
  }

  // Round trip of what was decoded.
  if (ok_a) {
    std::optional<Buffer> again;
    if (!expect_errors([&] { again = chain.encode(whole); })) return 0;
    if (!again) return 0;  // a shard left all fill value: nothing to store
    std::vector<std::byte> back(spec.nbytes());
    const StridedView back_view{back.data(), spec.shape, whole_view.byte_strides};
    if (!expect_errors([&] { chain.decode_into(*again, all_elements, back_view); })) {
      finding(c.label + ": the engine cannot decode what it just encoded");
    }
    if (back != whole) finding(c.label + ": encode then decode changed the chunk");
  }
  return 0;
}
