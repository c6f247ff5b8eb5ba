// What decoding a large zstd chunk in windows of its output costs against decoding it whole, on
// one thread: a 64 MiB chunk of float32 normal values (stored about 0.92) and of bf16 weights
// (about 0.78), zstd level 1 without a checksum, as zarr-python writes it; decoded whole into
// place (one window of the whole chunk, what a host read and a slot-sized CPU decode do) and in
// windows of 1-16 MiB (what a chunk staged in parts does), through the chain's stream decoder
// (CodecChain::stream_decoder), stored bytes pulled in 2 MiB pieces from memory either way. Best
// of 5; not part of the build.
//
//   cmake -S . -B build/release -G Ninja && ninja -C build/release zarr_device_core
//   g++ -O2 -std=c++20 -Icpp/src -Icpp/include bench/probes/probe_window_decode.cpp \
//     build/release/libzarr_device_core.a -lzstd -llz4 -lz -lblosc -pthread -o /tmp/probe_wd
//   /tmp/probe_wd
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "codecs/codec_chain.hpp"
#include "zarr_device/dtype.hpp"

using namespace zarr_device;

namespace {

constexpr std::size_t kPiece = std::size_t{2} << 20;

// `stored` in pieces of kPiece bytes, each copied into one buffer, as a store's reads are.
StreamDecoder::Source pieces_of(const Buffer& stored) {
  auto piece = std::make_shared<std::vector<std::byte>>(kPiece);
  auto at = std::make_shared<std::size_t>(0);
  return [&stored, piece, at]() -> std::span<const std::byte> {
    const std::size_t n = std::min(kPiece, stored.size() - *at);
    std::memcpy(piece->data(), stored.data() + *at, n);
    *at += n;
    return {piece->data(), n};
  };
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void probe(const char* name, const char* dtype, const std::vector<std::byte>& chunk) {
  const std::size_t element = std::strcmp(dtype, "float32") == 0 ? 4 : 2;
  ChunkSpec spec;
  spec.shape = {static_cast<std::int64_t>(chunk.size() / element)};
  spec.dtype = &DataType::from_v3_name(dtype);
  spec.fill_value.assign(element, std::byte{0});
  const codecs::CodecChain chain(
      nlohmann::json::parse(
          R"([{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 1}}])"),
      spec);
  const auto stored = *chain.encode(chunk);
  std::vector<std::byte> out(chunk.size());
  const std::vector<DimSlice> all = {DimSlice{0, 1, spec.shape[0]}};
  const StridedView view{out.data(), spec.shape, {static_cast<std::int64_t>(element)}};
  double whole = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    auto decoder = chain.stream_decoder(stored.size(), pieces_of(stored));
    decoder->fill(*chain.stream_target(all, view));
    decoder->finish();
    whole = std::min(whole, seconds_since(t0));
  }
  std::printf("%s (stored %.3f): whole %.2f GB/s", name,
              static_cast<double>(stored.size()) / static_cast<double>(chunk.size()),
              static_cast<double>(chunk.size()) / whole / 1e9);
  for (const std::size_t window :
       {std::size_t{1} << 20, std::size_t{4} << 20, std::size_t{16} << 20}) {
    double best = 1e9;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      auto decoder = chain.stream_decoder(stored.size(), pieces_of(stored));
      for (std::size_t at = 0; at < out.size(); at += window) {
        decoder->fill({out.data() + at, std::min(window, out.size() - at)});
      }
      decoder->finish();
      best = std::min(best, seconds_since(t0));
    }
    std::printf(", windows of %zu MiB %.2f GB/s", window >> 20,
                static_cast<double>(chunk.size()) / best / 1e9);
  }
  std::printf("\n");
}

}  // namespace

int main() {
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  std::vector<std::byte> f32(kBytes);
  for (std::size_t i = 0; i < kBytes; i += 4) {
    const float v = normal(rng);
    std::memcpy(f32.data() + i, &v, 4);
  }
  probe("float32 normal", "float32", f32);
  std::vector<std::byte> bf16(kBytes);
  for (std::size_t i = 0; i < kBytes; i += 2) {
    const float v = normal(rng) * 0.02F;
    std::uint32_t bits = 0;
    std::memcpy(&bits, &v, 4);
    const auto half = static_cast<std::uint16_t>(bits >> 16);
    std::memcpy(bf16.data() + i, &half, 2);
  }
  probe("bf16 weights", "bfloat16", bf16);
  return 0;
}
