// Helpers of the tests of decoding a stored chunk as a stream, apart from its whole decode (its
// stored bytes pulled in pieces, its output in windows: test_stream_decoding.cpp, and each
// codec's decoder alone: test_stream_decoders.cpp): codec chains, compressible data, sources of
// pieces, and the whole decode to compare with.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "codecs/codec_chain.hpp"
#include "test_util.hpp"

namespace zarr_device::test {

inline const char* const kZstd =
    R"([{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 3}}])";
inline const char* const kZstdCrc =
    R"([{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 3}}, {"name": "crc32c"}])";

// Slowly rising little-endian uint16 values with noise: compressible, as array data is.
inline Bytes array_like(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes out(n);
  for (std::size_t i = 0; i + 1 < n; i += 2) {
    const auto v = static_cast<std::uint16_t>(i / 64 + rng() % 7);
    std::memcpy(out.data() + i, &v, 2);
  }
  return out;
}

// `stored` as a stream decoder's source, in pieces of the sizes `cut` gives in turn (the last
// shorter), each copied into the one buffer the piece before was in, as a store's reads are: a
// decoder that kept a view of an earlier piece would see other bytes.
inline StreamDecoder::Source pieces_of(const Bytes& stored, std::vector<std::size_t> cut) {
  struct State {
    std::size_t at = 0;
    std::size_t count = 0;
    Bytes piece;
  };
  auto state = std::make_shared<State>();
  state->piece.resize(std::min(*std::max_element(cut.begin(), cut.end()), stored.size()));
  return [&stored, cut = std::move(cut), state]() -> std::span<const std::byte> {
    if (state->at == stored.size()) return {};
    const std::size_t n = std::min(cut[state->count++ % cut.size()], stored.size() - state->at);
    std::memcpy(state->piece.data(), stored.data() + state->at, n);
    state->at += n;
    return {state->piece.data(), n};
  };
}

// A whole-chunk decode of `stored` into `out`: empty when it succeeds, else the error's kind and
// a description.
struct Outcome {
  bool ok = true;
  ErrorKind kind = ErrorKind::kUsage;
  std::string message;
};

inline Outcome whole(const codecs::CodecChain& chain, const Bytes& stored, Bytes& out) {
  const auto& spec = chain.spec();
  try {
    chain.decode_into(
        Buffer::copy_of(stored), test::full_selection(spec.shape),
        StridedView{out.data(), spec.shape, test::c_strides(spec.shape, spec.dtype->size)});
    return {};
  } catch (const Error& e) {
    return {false, e.kind(), e.what()};
  }
}

// Frames zstd itself writes, several in one chunk of `chunk` (40000 bytes): an empty one, one
// without its size, one smaller than a frame header.
inline Bytes several_frames(const Bytes& chunk) {
  const auto frame = [](std::span<const std::byte> data, bool with_size) {
    return zstd_frame(data, with_size, false);
  };
  Bytes stored;
  for (const auto& f : {frame({}, true), frame(std::span(chunk).first(10), true),
                        frame(std::span(chunk).subspan(10, 20000), false), frame({}, false),
                        frame(std::span(chunk).subspan(20010), true)}) {
    stored.insert(stored.end(), f.begin(), f.end());
  }
  return stored;
}

// A way of decoding a stored chunk apart from the whole decode, into `out`, cut `cut` bytes at a
// time (pieces of its stored bytes, windows of its output, or both).
using DecodeApart = std::function<Outcome(const codecs::CodecChain& chain, const Bytes& stored,
                                          Bytes& out, std::size_t cut)>;

// Damage anywhere in a chunk under a crc32c: a checksum mismatch with the whole decode's message,
// at each of `cuts`, as when the chunk is verified whole before zstd sees it.
inline void expect_damage_is_a_checksum_mismatch(const DecodeApart& apart,
                                                 std::initializer_list<std::size_t> cuts) {
  const auto spec = make_spec({600, 500}, "uint16");
  const Bytes chunk = array_like(spec.nbytes(), 4);
  const codecs::CodecChain chain(json::parse(kZstdCrc), spec);
  const Bytes stored = to_bytes(*chain.encode(chunk));
  std::mt19937 rng(5);
  for (int trial = 0; trial < 60; ++trial) {
    Bytes damaged = stored;
    const std::size_t at = trial < 4 ? damaged.size() - 1 - trial : rng() % damaged.size();
    damaged[at] ^= std::byte{static_cast<unsigned char>(1 + rng() % 255)};
    Bytes reference(chunk.size());
    const Outcome w = whole(chain, damaged, reference);
    ASSERT_FALSE(w.ok);
    ASSERT_EQ(w.kind, ErrorKind::kChecksum) << w.message;
    for (const std::size_t cut : cuts) {
      Bytes out(chunk.size());
      const Outcome o = apart(chain, damaged, out, cut);
      EXPECT_FALSE(o.ok) << "byte " << at;
      EXPECT_EQ(o.kind, ErrorKind::kChecksum) << "byte " << at << ": " << o.message;
      EXPECT_EQ(o.message, w.message);
    }
  }
}

// Random damage without a checksum: the decode apart (cut at random, up to `most` bytes) and the
// whole decode agree on whether the chunk decodes, and on what it decodes to when it does.
inline void expect_random_damage_judged_alike(const DecodeApart& apart, std::size_t most) {
  const auto spec = make_spec({20000}, "uint8");
  const Bytes chunk = array_like(spec.nbytes(), 6);
  const codecs::CodecChain chain(json::parse(kZstd), spec);
  const Bytes stored = to_bytes(*chain.encode(chunk));
  std::mt19937 rng(7);
  int failed = 0;
  for (int trial = 0; trial < 400; ++trial) {
    Bytes damaged = stored;
    for (int flips = 1 + static_cast<int>(rng() % 3); flips > 0; --flips) {
      damaged[rng() % damaged.size()] ^= std::byte{static_cast<unsigned char>(1 + rng() % 255)};
    }
    Bytes reference(chunk.size());
    const Outcome w = whole(chain, damaged, reference);
    Bytes out(chunk.size());
    const Outcome o = apart(chain, damaged, out, 1 + rng() % most);
    ASSERT_EQ(o.ok, w.ok) << "trial " << trial << ": whole '" << w.message << "', apart '"
                          << o.message << "'";
    if (w.ok) {
      EXPECT_EQ(out, reference) << "trial " << trial;
    } else {
      EXPECT_EQ(o.kind, w.kind) << o.message;
      ++failed;
    }
  }
  EXPECT_GT(failed, 100);  // the damage is mostly caught
}

}  // namespace zarr_device::test
