// What planning a GPU read of many small chunks costs on the host: device_read::plan_reads over a 1
// GiB int32 array of 16 KiB zstd + crc32c chunks (65536 files, written under DIR on the first run),
// best of 10 with 1 worker and with 2, and the leaves' destruction after it. Measured to decide
// how a plan builds its leaves; not part of the build.
//
//   cmake -S . -B build/release -G Ninja && ninja -C build/release zarr_device_core
//   g++ -O2 -std=c++20 -Icpp/src -Icpp/include -Icpp/tests bench/probes/probe_plan_small_chunks.cpp \
//     build/release/libzarr_device_core.a -lzstd -llz4 -lz -lblosc -L/usr/local/cuda/lib64 \
//     -lcudart_static -ldl -lrt -pthread -o /tmp/probe_plan && /tmp/probe_plan /tmp/plan16k
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "device_read/read_plan.hpp"
#include "gpu_read_test_util.hpp"

using namespace zarr_device;
using namespace zarr_device::device_read;
using namespace zarr_device::device_read::test_support;

int main(int argc, char** argv) {
  const std::filesystem::path dir = argc > 1 ? argv[1] : "/tmp/plan16k";
  constexpr std::int64_t kChunks = 65536;
  constexpr std::int64_t kPerChunk = 4096;  // int32: 16 KiB
  auto store = make_local_store(dir);
  const auto array = std::filesystem::exists(dir / "a" / "zarr.json")
                         ? Array::open(store, "a")
                         : make_array(store, "a", {kChunks * kPerChunk}, {kPerChunk}, kZstdCrc);
  const auto& shape = array->metadata().shape;
  // The output is only pointed into, never touched.
  const auto out =
      std::make_unique_for_overwrite<std::byte[]>(static_cast<std::size_t>(shape[0]) * 4);
  const ReadTarget target{array.get(), test::full_selection(shape),
                          StridedView{out.get(), shape, test::c_strides(shape, 4)}};
  for (const std::size_t workers : {1, 2}) {
    double plan = 1e9;
    double destroy = 1e9;
    for (int rep = 0; rep < 10; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      auto leaves = plan_reads({&target, 1}, all_decoders(), GpuDecode::kChecked,
                               engine::ThreadPool::shared(2), workers);
      const auto t1 = std::chrono::steady_clock::now();
      leaves = {};
      const auto t2 = std::chrono::steady_clock::now();
      plan = std::min(plan, std::chrono::duration<double, std::milli>(t1 - t0).count());
      destroy = std::min(destroy, std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
    std::printf("workers %zu: %lld leaves planned in %.2f ms, destroyed in %.2f ms\n", workers,
                static_cast<long long>(kChunks), plan, destroy);
  }
  return 0;
}
