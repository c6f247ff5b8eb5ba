// What a parallel loop costs per item when its items are tiny (a plan of many chunks): the engine's
// ThreadPool::parallel_for over 65536 trivial items, 1 to 16 workers, best of 20. Measured once
// to decide how its threads claim items; not part of the build.
//
//   cmake -S . -B build/release -G Ninja && ninja -C build/release zarr_device_core
//   g++ -O2 -std=c++20 -Icpp/src -Icpp/include bench/probes/probe_parallel_for.cpp \
//     build/release/libzarr_device_core.a -pthread -o /tmp/probe_pf && /tmp/probe_pf
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "engine/thread_pool.hpp"

int main() {
  auto& pool = zarr_device::engine::ThreadPool::shared(16);
  std::vector<std::uint64_t> out(std::size_t{1} << 16);
  for (const std::size_t workers : {1, 2, 4, 16}) {
    double best = 1e9;
    for (int rep = 0; rep < 20; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      pool.parallel_for(out.size(), workers, [&](std::size_t i) { out[i] = i * 2654435761U; });
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("workers %2zu: 65536 trivial items %.2f ms (%.1f ns an item)\n", workers,
                best * 1e3, best * 1e9 / static_cast<double>(out.size()));
  }
  return 0;
}
