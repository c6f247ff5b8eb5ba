// A fixed pool of worker threads running parallel loops, and a byte budget that bounds the host
// memory those loops hold at once.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace zarr_device::engine {

class ThreadPool {
 public:
  explicit ThreadPool(std::size_t threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The process-wide pool, grown to at least `threads` workers.
  static ThreadPool& shared(std::size_t threads);

  // Runs body(i) for i in [0, count) on up to `workers` threads (the caller is one of them).
  // The first exception stops the loop (items not started are skipped) and is rethrown here.
  void parallel_for(std::size_t count, std::size_t workers,
                    const std::function<void(std::size_t)>& body);

  // Runs `task` on a worker; the future holds its exception. Tasks start in the order given, so
  // a pipeline can queue its next stage behind the helpers of the current one.
  std::future<void> submit(std::function<void()> task);

  [[nodiscard]] std::size_t size() const { return threads_.size(); }

 private:
  void worker();
  void grow(std::size_t threads);

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;  // first in, first out
  std::vector<std::thread> threads_;
  bool stopping_ = false;
};

// The workers a `threads` setting asks for: that many, or one per core for 0.
std::size_t worker_count(int threads);

class ByteBudget {
 public:
  explicit ByteBudget(std::size_t capacity) : capacity_(capacity) {}
  // Blocks until `bytes` fit; a request larger than the capacity waits until nothing else is held.
  void acquire(std::size_t bytes);
  void release(std::size_t bytes);

 private:
  std::mutex mutex_;
  std::condition_variable freed_;
  std::size_t capacity_;
  std::size_t used_ = 0;
};

// Holds budget for one scope.
class BudgetLease {
 public:
  BudgetLease(ByteBudget& budget, std::size_t bytes) : budget_(budget), bytes_(bytes) {
    budget_.acquire(bytes_);
  }
  ~BudgetLease() { budget_.release(bytes_); }
  BudgetLease(const BudgetLease&) = delete;
  BudgetLease& operator=(const BudgetLease&) = delete;

 private:
  ByteBudget& budget_;
  std::size_t bytes_;
};

}  // namespace zarr_device::engine
