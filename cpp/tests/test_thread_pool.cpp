// Tests of the engine's worker pool and byte budget: every index runs once, the first error comes
// back, nested loops do not deadlock, and the budget bounds what is held at once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/thread_pool.hpp"
#include "test_util.hpp"

namespace zarr_device {
namespace {

using engine::BudgetLease;
using engine::ByteBudget;
using engine::ThreadPool;
using namespace std::chrono_literals;

TEST(ThreadPool, ParallelForRunsEveryIndexExactlyOnce) {
  ThreadPool pool(4);
  EXPECT_EQ(pool.size(), 4u);
  // (Counts about the runs items are claimed in: a sixteenth of a worker's share.)
  for (std::size_t count : {0, 1, 2, 3, 7, 16, 17, 100, 255, 256, 257, 5000, 65537}) {
    for (std::size_t workers : {0, 1, 2, 4, 16}) {
      SCOPED_TRACE("count " + std::to_string(count) + ", workers " + std::to_string(workers));
      std::vector<std::atomic<int>> runs(count);
      pool.parallel_for(count, workers, [&](std::size_t i) { ++runs[i]; });
      for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(runs[i].load(), 1) << i;
    }
  }
}

TEST(ThreadPool, ParallelForUsesSeveralThreads) {
  ThreadPool pool(3);
  std::mutex mutex;
  std::set<std::thread::id> threads;
  std::atomic<int> inside{0};
  std::atomic<int> most_inside{0};
  pool.parallel_for(64, 4, [&](std::size_t) {
    const int now = ++inside;
    int seen = most_inside.load();
    while (now > seen && !most_inside.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(1ms);
    {
      std::lock_guard lock(mutex);
      threads.insert(std::this_thread::get_id());
    }
    --inside;
  });
  EXPECT_GT(threads.size(), 1u);
  EXPECT_LE(most_inside.load(), 4);  // never more than `workers` at once
  // One worker: everything on the calling thread, in order.
  std::vector<std::size_t> order;
  const auto caller = std::this_thread::get_id();
  pool.parallel_for(10, 1, [&](std::size_t i) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    order.push_back(i);
  });
  EXPECT_EQ(order, (std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(ThreadPool, ParallelForPropagatesTheFirstException) {
  ThreadPool pool(4);
  // Sequential: the first failing index is the one reported, and nothing after it runs.
  std::atomic<int> ran{0};
  try {
    pool.parallel_for(100, 1, [&](std::size_t i) {
      ++ran;
      if (i >= 10) throw std::runtime_error("index " + std::to_string(i));
    });
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "index 10");
  }
  EXPECT_EQ(ran.load(), 11);

  // Parallel: one of the thrown exceptions comes back, with its type intact, and the loop stops
  // early instead of running every remaining index.
  for (int trial = 0; trial < 20; ++trial) {
    std::atomic<int> started{0};
    try {
      pool.parallel_for(10000, 4, [&](std::size_t i) {
        ++started;
        if (i % 7 == 3) throw SelectionError("bad " + std::to_string(i));
        std::this_thread::sleep_for(std::chrono::microseconds(10));
      });
      ADD_FAILURE() << "no exception";
    } catch (const SelectionError& e) {
      EXPECT_TRUE(std::string(e.what()).starts_with("bad ")) << e.what();
    }
    EXPECT_LT(started.load(), 1000);
  }

  // The pool is still usable afterwards.
  std::atomic<int> count{0};
  pool.parallel_for(50, 4, [&](std::size_t) { ++count; });
  EXPECT_EQ(count.load(), 50);
}

TEST(ThreadPool, ExceptionsDoNotOutliveTheLoop) {
  // Helpers queued but not yet started when the loop ends must not touch the body afterwards
  // (the sanitizers catch a use of the destroyed lambda).
  ThreadPool pool(2);
  for (int i = 0; i < 200; ++i) {
    std::vector<int> local(8, 0);
    try {
      pool.parallel_for(8, 8, [&local](std::size_t j) {
        local[j] = 1;
        if (j == 0) throw std::logic_error("stop");
      });
    } catch (const std::logic_error&) {
    }
  }
  SUCCEED();
}

TEST(ThreadPool, NestedParallelForDoesNotDeadlock) {
  test::run_with_deadline(20s, [] {
    ThreadPool pool(2);  // fewer workers than the outer loop's bodies
    std::vector<std::atomic<int>> runs(16 * 16);
    pool.parallel_for(16, 4, [&](std::size_t i) {
      pool.parallel_for(16, 4, [&](std::size_t j) {
        std::this_thread::sleep_for(50us);
        ++runs[i * 16 + j];
      });
    });
    for (const auto& r : runs) ASSERT_EQ(r.load(), 1);
    // Three levels, on the shared pool the engine uses.
    std::atomic<int> leaves{0};
    auto& shared = ThreadPool::shared(3);
    shared.parallel_for(4, 3, [&](std::size_t) {
      shared.parallel_for(
          4, 3, [&](std::size_t) { shared.parallel_for(4, 3, [&](std::size_t) { ++leaves; }); });
    });
    EXPECT_EQ(leaves.load(), 64);
  });
}

TEST(ThreadPool, SubmittedTasksRunInOrderAndCarryTheirErrors) {
  ThreadPool pool(1);  // one worker: tasks run one after another, in the order submitted
  std::vector<int> order;
  std::mutex mutex;
  std::vector<std::future<void>> done;
  for (int i = 0; i < 8; ++i) {
    done.push_back(pool.submit([&, i] {
      std::lock_guard lock(mutex);
      order.push_back(i);
    }));
  }
  auto failing = pool.submit([] { throw std::runtime_error("stage failed"); });
  for (auto& f : done) f.get();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_THROW(failing.get(), std::runtime_error);
}

TEST(ThreadPool, SubmittedTaskMayRunAParallelLoop) {
  // A pipeline stage submitted to the pool runs its own parallel loop on the pool: the next
  // stage, queued behind that loop's helpers, starts as the helpers run out of work.
  ThreadPool pool(4);
  std::atomic<int> sum{0};
  std::vector<std::future<void>> stages;
  for (int s = 0; s < 6; ++s) {
    stages.push_back(pool.submit(
        [&] { pool.parallel_for(100, 4, [&](std::size_t i) { sum += static_cast<int>(i); }); }));
  }
  for (auto& f : stages) f.get();
  EXPECT_EQ(sum.load(), 6 * 4950);
}

TEST(ThreadPool, SharedPoolGrows) {
  auto& pool = ThreadPool::shared(2);
  EXPECT_GE(pool.size(), 2u);
  EXPECT_EQ(&ThreadPool::shared(5), &pool);
  EXPECT_GE(pool.size(), 5u);
  EXPECT_GE(ThreadPool::shared(1).size(), 5u);  // never shrinks
}

TEST(ThreadPool, ByteBudgetNeverExceedsCapacity) {
  test::run_with_deadline(20s, [] {
    constexpr std::size_t kCapacity = 1000;
    ByteBudget budget(kCapacity);
    std::atomic<std::size_t> held{0};
    std::atomic<std::size_t> most{0};
    std::atomic<bool> over{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(t);
        for (int i = 0; i < 300; ++i) {
          const std::size_t bytes = 1 + rng() % 400;
          BudgetLease lease(budget, bytes);
          const std::size_t now = held += bytes;
          if (now > kCapacity) over = true;
          std::size_t seen = most.load();
          while (now > seen && !most.compare_exchange_weak(seen, now)) {
          }
          if (i % 16 == 0) std::this_thread::sleep_for(20us);
          held -= bytes;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_FALSE(over.load());
    EXPECT_LE(most.load(), kCapacity);
    EXPECT_GT(most.load(), 400u);  // several leases were held together
  });
}

TEST(ThreadPool, ByteBudgetOversizeRequestRunsAlone) {
  test::run_with_deadline(20s, [] {
    constexpr std::size_t kCapacity = 100;
    ByteBudget budget(kCapacity);
    // Alone, a request larger than the capacity proceeds at once.
    { BudgetLease big(budget, 10 * kCapacity); }

    // Small leases churn on four threads while large ones are taken now and then. (The small ones
    // stop after a while, so a large request cannot be starved forever.)
    std::atomic<int> holders{0};
    std::atomic<bool> big_shared{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 400; ++i) {
          BudgetLease lease(budget, 30);
          ++holders;
          std::this_thread::sleep_for(5us);
          --holders;
        }
      });
    }
    for (int i = 0; i < 10; ++i) {
      BudgetLease big(budget, 5 * kCapacity);
      if (holders.load() != 0) big_shared = true;
      std::this_thread::sleep_for(50us);
      if (holders.load() != 0) big_shared = true;
    }
    for (auto& t : threads) t.join();
    EXPECT_FALSE(big_shared.load()) << "an oversize lease was held alongside others";
  });
}

}  // namespace
}  // namespace zarr_device
