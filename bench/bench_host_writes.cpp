// Host writes of one array by layout, through the engine (what zarr_device's Array.write and
// `a[...] = values` run, the GIL released): a uint16 array of bf16-like values (normal(0, 0.02)
// rounded to bfloat16, 16 MiB of them repeated), written whole into a fresh local array, in 64 MiB shards of 1 MiB chunks
// (zstd level 1 + crc32c, as checkpoints are; and uncompressed) and unsharded in 1 MiB and
// 16 MiB zstd + crc32c chunks, at the default settings (a thread per core, 256 MiB in flight).
// Prints GB/s (bytes of the array per second, 10^9, best of --repeat, into the page cache: no
// fsync); every array is read back and compared. Not part of the build: link it against the core
// library.
//
//   cmake -S . -B /tmp/core -G Ninja -DZARR_DEVICE_CUDA=OFF -DZARR_DEVICE_BUILD_TESTS=OFF \
//     -DCMAKE_BUILD_TYPE=RelWithDebInfo && ninja -C /tmp/core zarr_device_core
//   g++ -O2 -std=c++20 -pthread -Icpp/include -Icpp/src bench/bench_host_writes.cpp \
//     /tmp/core/libzarr_device_core.a -lzstd -llz4 -lz -lblosc -ldl -o /tmp/bench_host_writes
//   /tmp/bench_host_writes DIR [MiB, default 2048] [repeat, default 2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "zarr_device/array.hpp"

using json = nlohmann::json;
namespace zd = zarr_device;

namespace {

constexpr std::int64_t kCols = 4096;  // rows of 8 KiB

json codecs(bool zstd) {
  json inner = json::array({{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}}});
  if (zstd) {
    inner.push_back({{"name", "zstd"}, {"configuration", {{"level", 1}}}});
    inner.push_back({{"name", "crc32c"}});
  }
  return inner;
}

json document(std::int64_t rows, std::int64_t chunk_rows, std::int64_t shard_rows, bool zstd) {
  json chain = codecs(zstd);
  std::int64_t grid_rows = chunk_rows;
  if (shard_rows > 0) {
    chain = json::array({{{"name", "sharding_indexed"},
                          {"configuration", {{"chunk_shape", {chunk_rows, kCols}}, {"codecs", chain}}}}});
    grid_rows = shard_rows;
  }
  return {{"zarr_format", 3},
          {"node_type", "array"},
          {"shape", {rows, kCols}},
          {"data_type", "uint16"},
          {"chunk_grid", {{"name", "regular"}, {"configuration", {{"chunk_shape", {grid_rows, kCols}}}}}},
          {"chunk_key_encoding", {{"name", "default"}, {"configuration", {{"separator", "/"}}}}},
          {"fill_value", 0},
          {"codecs", chain}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [MiB] [repeat]\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  const std::int64_t mib = argc > 2 ? std::atoll(argv[2]) : 2048;
  const int repeat = argc > 3 ? std::atoi(argv[3]) : 2;
  const std::int64_t rows = mib * 128;  // 128 rows of 8 KiB per MiB
  // 16 MiB of values drawn, repeated: a chunk compresses as drawn values do (zstd's window at
  // level 1 is far shorter than the repeat), and the array is made in a moment.
  std::vector<std::uint16_t> values(static_cast<std::size_t>(rows * kCols));
  {
    constexpr std::size_t kDrawn = std::size_t{8} << 20;  // values: 16 MiB
    std::mt19937 rng(0);
    std::normal_distribution<float> normal(0, 0.02F);
    for (std::size_t i = 0; i < std::min(kDrawn, values.size()); ++i) {
      const float f = normal(rng);
      std::uint32_t u = 0;
      std::memcpy(&u, &f, 4);
      values[i] = static_cast<std::uint16_t>(u >> 16);
    }
    for (std::size_t i = kDrawn; i < values.size(); ++i) values[i] = values[i - kDrawn];
  }
  const std::span<const std::byte> bytes{reinterpret_cast<const std::byte*>(values.data()),
                                         values.size() * 2};
  const std::vector<zd::DimSlice> all{{0, 1, rows}, {0, 1, kCols}};
  struct Layout {
    const char* name;
    std::int64_t chunk_rows;
    std::int64_t shard_rows;
    bool zstd;
  };
  const Layout layouts[] = {
      {"64 MiB shards of 1 MiB chunks, zstd + crc32c", 128, 8192, true},
      {"64 MiB shards of 1 MiB chunks, uncompressed", 128, 8192, false},
      {"1 MiB chunks, zstd + crc32c", 128, 0, true},
      {"16 MiB chunks, zstd + crc32c", 2048, 0, true},
  };
  std::printf("%lld MiB, %u hardware threads\n", static_cast<long long>(mib),
              std::thread::hardware_concurrency());
  auto store = zd::make_local_store(dir);
  for (const auto& layout : layouts) {
    double best = 1e30;
    std::shared_ptr<const zd::Array> array;
    for (int r = 0; r < repeat; ++r) {
      array = zd::Array::create(
          store, "a", document(rows, layout.chunk_rows, layout.shard_rows, layout.zstd), true);
      const auto start = std::chrono::steady_clock::now();
      array->write(all, bytes);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::vector<std::byte> back(bytes.size());
    array->read(all, back);
    const bool same = std::memcmp(back.data(), bytes.data(), bytes.size()) == 0;
    std::printf("%-48s %7.2f GB/s%s\n", layout.name, static_cast<double>(bytes.size()) / best / 1e9,
                same ? "" : "  READ BACK OTHER VALUES");
  }
  return 0;
}
