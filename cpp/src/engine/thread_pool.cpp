#include "engine/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>

namespace zarr_device::engine {

std::size_t worker_count(int threads) {
  if (threads > 0) return static_cast<std::size_t>(threads);
  // Asked by every read, and each asking reads a file of /sys: once is enough.
  static const std::size_t cores = std::max(1U, std::thread::hardware_concurrency());
  return cores;
}

ThreadPool::ThreadPool(std::size_t threads) { grow(threads); }

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

ThreadPool& ThreadPool::shared(std::size_t threads) {
  // Leaked on purpose: joining workers during static destruction races with other destructors.
  static auto* pool = new ThreadPool(0);
  pool->grow(threads);
  return *pool;
}

void ThreadPool::grow(std::size_t threads) {
  std::lock_guard lock(mutex_);
  while (threads_.size() < threads) threads_.emplace_back([this] { worker(); });
}

void ThreadPool::worker() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (stopping_ && tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void ThreadPool::parallel_for(std::size_t count, std::size_t workers,
                              const std::function<void(std::size_t)>& body) {
  if (count == 0) return;
  struct Loop {
    std::atomic<std::size_t> next{0};
    std::atomic<bool> failed{false};
    std::mutex mutex;
    std::condition_variable done;
    std::size_t active = 0;  // helpers inside run()
    bool closed = false;     // the caller has finished: helpers not yet started must not start
    std::exception_ptr error;
  };
  auto loop = std::make_shared<Loop>();
  // Items are claimed in runs of a sixteenth of a worker's share: a claim per item has every
  // thread take the counter's cache line from the others, which for many small items (a plan of
  // 65536 chunks) costs more than the items.
  const std::size_t run_length =
      std::max<std::size_t>(1, count / (16 * std::max<std::size_t>(workers, 1)));
  auto run = [loop, count, run_length, &body] {
    while (!loop->failed.load(std::memory_order_relaxed)) {
      const std::size_t first = loop->next.fetch_add(run_length);
      if (first >= count) break;
      const std::size_t end = std::min(count, first + run_length);
      for (std::size_t i = first; i < end && !loop->failed.load(std::memory_order_relaxed); ++i) {
        try {
          body(i);
        } catch (...) {
          std::lock_guard lock(loop->mutex);
          if (!loop->error) loop->error = std::current_exception();
          loop->failed = true;
        }
      }
    }
  };
  const std::size_t helpers = std::min(workers, count) - (workers > 0 ? 1 : 0);
  {
    std::lock_guard lock(mutex_);
    for (std::size_t h = 0; h < helpers; ++h) {
      tasks_.emplace_back([loop, run] {
        {
          std::lock_guard lock(loop->mutex);
          if (loop->closed) return;
          ++loop->active;
        }
        run();
        std::lock_guard lock(loop->mutex);
        if (--loop->active == 0) loop->done.notify_all();
      });
    }
  }
  if (helpers > 0) wake_.notify_all();  // a loop of one item wakes no one
  // The caller works too, so a loop started from inside a worker cannot wait on queued helpers
  // that no free worker will pick up.
  run();
  std::unique_lock lock(loop->mutex);
  loop->closed = true;
  loop->done.wait(lock, [&] { return loop->active == 0; });
  if (loop->error) std::rethrow_exception(loop->error);
}

std::future<void> ThreadPool::submit(std::function<void()> task) {
  auto packaged = std::make_shared<std::packaged_task<void()>>(std::move(task));
  auto future = packaged->get_future();
  {
    std::lock_guard lock(mutex_);
    tasks_.emplace_back([packaged] { (*packaged)(); });
  }
  wake_.notify_one();
  return future;
}

void ByteBudget::acquire(std::size_t bytes) {
  std::unique_lock lock(mutex_);
  freed_.wait(lock, [&] { return used_ == 0 || used_ + bytes <= capacity_; });
  used_ += bytes;
}

void ByteBudget::release(std::size_t bytes) {
  {
    std::lock_guard lock(mutex_);
    used_ -= bytes;
  }
  freed_.notify_all();
}

}  // namespace zarr_device::engine
