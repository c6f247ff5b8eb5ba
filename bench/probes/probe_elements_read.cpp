// Host reads of one large chunk stored as its elements (no codecs, or a crc32c after them), by
// several threads side by side (engine/elements_read.hpp) against the ways such reads went before,
// called directly in the same run: a quarter of its rows (a tensor-parallel rank's share) taken in
// one pass over the chunk by one thread (engine::SelectionStream over its stored bytes), and the
// whole chunk read by one thread (Store::get_into without a checksum; with one, read whole into
// memory and decoded: CodecChain::decode_into). A 1 GiB int32 chunk in a local store, in the page
// cache; GB/s of the bytes read out, best of 5; not part of the build.
//
//   cmake -S . -B build/release -G Ninja && ninja -C build/release zarr_device_core
//   g++ -O2 -std=c++20 -Icpp/src -Icpp/include bench/probes/probe_elements_read.cpp \
//     build/release/libzarr_device_core.a -lzstd -llz4 -lz -lblosc -pthread -o /tmp/probe_er
//   /tmp/probe_er /tmp/probe_er_data
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "engine/piece_decode.hpp"
#include "engine/selection_stream.hpp"
#include "place/strided_copy.hpp"
#include "zarr_device/array.hpp"

using namespace zarr_device;

namespace {

constexpr std::int64_t kSide = 16384;  // int32 [16384, 16384]: 1 GiB

double best_seconds(const std::function<void()>& read) {
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    read();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string root = argc > 1 ? argv[1] : "/tmp/probe_er_data";
  auto store = make_local_store(root);
  const std::vector<std::int64_t> shape = {kSide, kSide};
  const std::size_t total = static_cast<std::size_t>(kSide * kSide) * 4;
  std::vector<std::int32_t> values(static_cast<std::size_t>(kSide * kSide));
  std::iota(values.begin(), values.end(), 1);
  const std::vector<DimSlice> whole = {{0, 1, kSide}, {0, 1, kSide}};
  const std::vector<DimSlice> quarter = {{kSide / 4, 1, kSide / 4}, {0, 1, kSide}};
  std::printf("one %zu MiB int32 chunk, %u hardware threads; GB/s, best of 5\n", total >> 20,
              std::thread::hardware_concurrency());
  for (const bool crc : {false, true}) {
    const std::string path = crc ? "crc" : "plain";
    nlohmann::json codecs = nlohmann::json::array({{{"name", "bytes"}}});
    if (crc) codecs.push_back({{"name", "crc32c"}});
    const nlohmann::json doc = {
        {"zarr_format", 3},
        {"node_type", "array"},
        {"shape", shape},
        {"data_type", "int32"},
        {"chunk_grid", {{"name", "regular"}, {"configuration", {{"chunk_shape", shape}}}}},
        {"chunk_key_encoding", {{"name", "default"}}},
        {"fill_value", 0},
        {"codecs", codecs}};
    auto array = Array::create(store, path, doc, true);
    array->write(whole, {reinterpret_cast<const std::byte*>(values.data()), total});
    const std::string key = path + "/c/0/0";
    std::vector<std::byte> out(total);
    const std::size_t quarter_bytes = total / 4;
    auto read = [&](const std::vector<DimSlice>& sel, std::size_t bytes) {
      array->read(sel, {out.data(), bytes});
    };
    // Before: the quarter in one pass over the chunk's stored bytes, on one thread.
    auto one_pass = [&] {
      const auto value = store->open(key);
      engine::SelectionStream stream(shape, quarter, 4, engine::stored_bytes(value, 0, total, crc),
                                     engine::kDecodePieceBytes);
      stream.fill({out.data(), quarter_bytes});
      stream.finish();
    };
    // Before: the whole chunk on one thread.
    auto whole_one = [&] {
      if (!crc) {
        (void)store->get_into(key, std::span<std::byte>(out.data(), total));
        return;
      }
      const auto value = store->open(key);
      const std::vector<std::int64_t> counts = shape;
      const StridedView region{out.data(), counts, place::c_strides(counts, 4)};
      array->chain().decode_into(value->read(0, value->size()), whole, region);
    };
    const double q_new = best_seconds([&] { read(quarter, quarter_bytes); });
    const double q_old = best_seconds(one_pass);
    const double w_new = best_seconds([&] { read(whole, total); });
    const double w_old = best_seconds(whole_one);
    std::printf(
        "%-13s quarter of the rows: %6.2f (one thread's pass %6.2f, %.2fx)   whole: %6.2f "
        "(one thread %6.2f, %.2fx)\n",
        crc ? "bytes+crc32c" : "bytes", quarter_bytes / q_new / 1e9, quarter_bytes / q_old / 1e9,
        q_old / q_new, total / w_new / 1e9, total / w_old / 1e9, w_old / w_new);
    if (!std::equal(out.begin(), out.end(), reinterpret_cast<const std::byte*>(values.data()))) {
      std::printf("  whole read differs from the values written\n");
      return 1;
    }
  }
  return 0;
}
