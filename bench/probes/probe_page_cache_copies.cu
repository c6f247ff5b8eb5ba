// Can a GPU copy chunks straight out of the page cache, skipping the CPU's copy into pinned
// staging? Maps a warm 4 GiB file, registers pieces of the mapping read-only with CUDA
// (cudaHostRegisterReadOnly) and copies them to the device, against the limits of the staged
// path (page cache -> pinned with 16 threads, pinned -> device). Measured once to decide the read
// path's design (docs/architecture.md, "Copies straight from the page cache"); not part of the
// build.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 bench/probes/probe_page_cache_copies.cu -o /tmp/probe
//   /tmp/probe          # one process: limits, registration rates, pipelined mapped reads
//   /tmp/probe two      # two processes at once, each its half of the file
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1);} } while (0)
using clk = std::chrono::steady_clock;
static double secs(clk::time_point a) { return std::chrono::duration<double>(clk::now() - a).count(); }
static size_t MiB(size_t n) { return n << 20; }

template <class F> void par(int n, F f) { std::vector<std::thread> t; for (int i = 0; i < n; ++i) t.emplace_back(f, i); for (auto& x : t) x.join(); }

struct Setup { int fd; size_t total; char* dev; };

// Pipelined mapped read of [begin, end): R threads register pieces of P bytes (after populating
// them), a copy is queued per piece on one of 4 streams, and pieces are unregistered once copied.
double mapped_read(const Setup& s, size_t begin, size_t end, size_t P, int R, bool populate, double* reg_ms, double* unreg_ms) {
  auto t0 = clk::now();
  char* map = (char*)mmap(nullptr, end - begin, PROT_READ, MAP_SHARED, s.fd, begin);
  if (map == MAP_FAILED) { perror("mmap"); exit(1); }
  std::vector<cudaStream_t> st(4); for (auto& x : st) CK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
  struct Done { char* p; cudaEvent_t e; };
  std::mutex m; std::condition_variable cv; std::deque<Done> done; bool over = false;
  std::atomic<double> rt{0}, ut{0};
  std::thread unreg([&] {
    for (;;) {
      std::unique_lock l(m); cv.wait(l, [&] { return !done.empty() || over; });
      if (done.empty()) return;
      Done d = done.front(); done.pop_front(); l.unlock();
      CK(cudaEventSynchronize(d.e)); cudaEventDestroy(d.e);
      auto u0 = clk::now(); CK(cudaHostUnregister(d.p)); double u = secs(u0); double c = ut.load(); while (!ut.compare_exchange_weak(c, c + u)) {}
    }
  });
  std::atomic<size_t> next{0};
  par(R, [&](int t) {
    for (size_t o; (o = next.fetch_add(P)) < end - begin;) {
      size_t n = std::min(P, end - begin - o);
      if (populate) madvise(map + o, n, MADV_POPULATE_READ);
      auto r0 = clk::now(); CK(cudaHostRegister(map + o, n, cudaHostRegisterReadOnly)); double r = secs(r0);
      double c = rt.load(); while (!rt.compare_exchange_weak(c, c + r)) {}
      cudaEvent_t e; CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      cudaStream_t x = st[(o / P) % 4];
      CK(cudaMemcpyAsync(s.dev + begin + o, map + o, n, cudaMemcpyHostToDevice, x));
      CK(cudaEventRecord(e, x));
      { std::lock_guard l(m); done.push_back({map + o, e}); } cv.notify_one();
    }
  });
  { std::lock_guard l(m); over = true; } cv.notify_one();
  unreg.join();
  for (auto& x : st) { CK(cudaStreamSynchronize(x)); cudaStreamDestroy(x); }
  munmap(map, end - begin);
  *reg_ms = rt.load() * 1e3; *unreg_ms = ut.load() * 1e3;
  return (end - begin) / secs(t0) / 1e9;
}

int main(int argc, char** argv) {
  const char* path = "/tmp/dma_probe.bin";
  size_t total = MiB(4096);
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    int w = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    std::vector<char> buf(MiB(64));
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = char(i * 2654435761u >> 13);
    for (size_t o = 0; o < total; o += buf.size()) { buf[0] = char(o >> 20); if (write(w, buf.data(), buf.size()) < 0) return 1; }
    close(w); fd = open(path, O_RDONLY);
  }
  { std::vector<char> b(MiB(8)); for (size_t o = 0; o < total; o += b.size()) if (pread(fd, b.data(), b.size(), o) <= 0) break; }
  if (argc > 1 && !strcmp(argv[1], "two")) {
    // Two processes at once, each its half of the file onto the GPU, mapped.
    auto t0 = clk::now();
    int pipes[2][2];
    for (int p = 0; p < 2; ++p) {
      if (pipe(pipes[p]) != 0) return 1;
      if (fork() == 0) {
        char* dev; CK(cudaMalloc(&dev, total));
        Setup s{fd, total, dev};
        double r, u;
        const double g = mapped_read(s, p * total / 2, (p + 1) * total / 2, MiB(64), 2, true, &r, &u);
        char line[200]; snprintf(line, sizeof line, "  process %d: mapped %.2f GB/s (register %.0f ms, unregister %.0f ms)\n", p, g, r, u);
        if (write(pipes[p][1], line, strlen(line)) < 0) {}
        _exit(0);
      }
    }
    for (int p = 0; p < 2; ++p) wait(nullptr);
    const double s = secs(t0);
    for (int p = 0; p < 2; ++p) { char buf[200] = {0}; if (read(pipes[p][0], buf, sizeof buf - 1) > 0) printf("%s", buf); }
    printf("two processes, mapped halves: %.2f GB/s together (process start and cudaMalloc included)\n", total / s / 1e9);
    return 0;
  }
  char* dev; CK(cudaMalloc(&dev, total));
  Setup s{fd, total, dev};
  {
    // The staged path's limits: page cache -> pinned (16 threads, 8 MiB reads), pinned -> device.
    char* pinned; CK(cudaHostAlloc((void**)&pinned, total, 0));
    memset(pinned, 0, total);
    auto t0 = clk::now();
    std::atomic<size_t> next{0};
    par(16, [&](int) { for (size_t o; (o = next.fetch_add(MiB(8))) < total;) if (pread(fd, pinned + o, MiB(8), o) != (ssize_t)MiB(8)) abort(); });
    double a = secs(t0);
    cudaStream_t st; CK(cudaStreamCreate(&st));
    t0 = clk::now();
    CK(cudaMemcpyAsync(dev, pinned, total, cudaMemcpyHostToDevice, st)); CK(cudaStreamSynchronize(st));
    printf("page cache -> pinned, 16 threads: %.2f GB/s; pinned -> device: %.2f GB/s\n", total / a / 1e9, total / secs(t0) / 1e9);
    cudaFreeHost(pinned);
  }
  // A. populate rate and registration scaling, no copies
  {
    char* map = (char*)mmap(nullptr, total, PROT_READ, MAP_SHARED, fd, 0);
    auto t0 = clk::now();
    std::atomic<size_t> next{0};
    par(16, [&](int) { for (size_t o; (o = next.fetch_add(MiB(64))) < total;) madvise(map + o, MiB(64), MADV_POPULATE_READ); });
    printf("populate 4 GiB of the mapping, 16 threads: %.1f ms\n", secs(t0) * 1e3);
    for (int T : {1, 2, 4, 8}) for (size_t P : {MiB(16), MiB(64)}) {
      std::atomic<size_t> nx{0};
      t0 = clk::now();
      par(T, [&](int) { for (size_t o; (o = nx.fetch_add(P)) < total;) CK(cudaHostRegister(map + o, P, cudaHostRegisterReadOnly)); });
      double r = secs(t0);
      nx = 0; t0 = clk::now();
      par(T, [&](int) { for (size_t o; (o = nx.fetch_add(P)) < total;) CK(cudaHostUnregister(map + o)); });
      double u = secs(t0);
      printf("register %d threads, %3zu MiB pieces: %.2f GB/s; unregister %.2f GB/s\n", T, P >> 20, total / r / 1e9, total / u / 1e9);
    }
    munmap(map, total);
  }
  // C. pipelined mapped reads
  for (int populate : {0, 1}) for (int R : {1, 2, 4}) for (size_t P : {MiB(16), MiB(64)}) {
    double r, u;
    double g = mapped_read(s, 0, total, P, R, populate, &r, &u);
    printf("mapped read, %d registering threads%s, %2zu MiB pieces: %.2f GB/s (register %.0f ms, unregister %.0f ms)\n", R, populate ? " (populated)" : "", P >> 20, g, r, u);
  }
  return 0;
}
