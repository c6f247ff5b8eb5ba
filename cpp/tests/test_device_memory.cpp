// The GPU paths' scratch memory, through the Device interface: host logic, run on the CPU device.
#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <new>

#include "../cuda/device_memory.hpp"
#include "devices/device.hpp"

namespace zarr_device::cuda {
namespace {

// The CPU device, counting what SharedTemp asks of it.
class CountingDevice final : public Device {
 public:
  [[nodiscard]] DeviceKind kind() const override { return cpu_->kind(); }
  [[nodiscard]] int index() const override { return 0; }
  [[nodiscard]] std::string name() const override { return "counting"; }
  [[nodiscard]] std::size_t memory_bytes() const override { return cpu_->memory_bytes(); }
  [[nodiscard]] void* allocate(std::size_t bytes) override {
    ++allocations;
    last_allocation = bytes;
    return cpu_->allocate(bytes);
  }
  void deallocate(void* pointer) noexcept override { cpu_->deallocate(pointer); }
  [[nodiscard]] void* allocate_host(std::size_t bytes) override {
    return cpu_->allocate_host(bytes);
  }
  void deallocate_host(void* pointer) noexcept override { cpu_->deallocate_host(pointer); }
  [[nodiscard]] StreamHandle create_stream() override { return cpu_->create_stream(); }
  void destroy_stream(StreamHandle stream) noexcept override { cpu_->destroy_stream(stream); }
  [[nodiscard]] EventHandle create_event() override { return cpu_->create_event(); }
  void destroy_event(EventHandle event) noexcept override { cpu_->destroy_event(event); }
  void record(EventHandle event, StreamHandle stream) override { cpu_->record(event, stream); }
  void wait(StreamHandle stream, EventHandle event) override {
    ++waits;
    cpu_->wait(stream, event);
  }
  void synchronize(EventHandle event) override { cpu_->synchronize(event); }
  void synchronize_stream(StreamHandle stream) override {
    ++stream_syncs;
    cpu_->synchronize_stream(stream);
  }
  void copy_async(void* destination, const void* source, std::size_t bytes, CopyKind kind,
                  StreamHandle stream) override {
    cpu_->copy_async(destination, source, bytes, kind, stream);
  }
  void fill_async(void* destination, unsigned char value, std::size_t bytes,
                  StreamHandle stream) override {
    cpu_->fill_async(destination, value, bytes, stream);
  }

  int allocations = 0;
  std::size_t last_allocation = 0;
  int waits = 0;
  int stream_syncs = 0;

 private:
  std::shared_ptr<Device> cpu_ = get_device("cpu");
};

TEST(SharedTemp, GrowsAheadOfTheCallsWithinItsRoom) {
  auto device = std::make_shared<CountingDevice>();
  const std::array<StreamHandle, 3> users{};
  SharedTemp temp(device);
  // The first call of 100 bytes takes four times that, within a room of 1000: later calls of up
  // to 400 bytes reuse it without waiting for every stream again.
  ASSERT_NE(temp.acquire(100, 1000, nullptr, users), nullptr);
  EXPECT_EQ(device->allocations, 1);
  EXPECT_EQ(device->last_allocation, 400U);
  EXPECT_EQ(device->stream_syncs, 3);  // growing waits for every user
  temp.release(nullptr);
  temp.acquire(400, 1000, nullptr, users);
  EXPECT_EQ(device->allocations, 1);
  EXPECT_EQ(device->stream_syncs, 3);
  EXPECT_EQ(device->waits, 1);  // ordered after the previous user instead
  temp.release(nullptr);
  // Past it: up to the room, not four times the call.
  temp.acquire(500, 1000, nullptr, users);
  EXPECT_EQ(device->allocations, 2);
  EXPECT_EQ(device->last_allocation, 1000U);
  EXPECT_EQ(device->stream_syncs, 6);
  // A call larger than the room still gets what it needs.
  temp.acquire(1500, 1000, nullptr, users);
  EXPECT_EQ(device->last_allocation, 1500U);
}

struct Ring {
  int made = 0;  // the how-many-th context made
};
struct RingSettings {
  int size = 0;
  bool operator==(const RingSettings&) const = default;
};
using Rings = ContextPool<Ring, RingSettings>;

TEST(ContextPool, TryAcquireLendsWhatIsFreeAndNeverWaits) {
  Rings pool(2);
  int made = 0;
  auto make = [&] { return std::make_unique<Ring>(Ring{++made}); };
  auto first = pool.try_acquire(0, {1}, make);
  auto second = pool.try_acquire(0, {1}, make);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(made, 2);
  // Both of the device's contexts are lent: nothing, at once, where acquire would wait.
  EXPECT_FALSE(pool.try_acquire(0, {1}, make));
  // Another device has its own.
  EXPECT_TRUE(pool.try_acquire(1, {1}, make));
  EXPECT_EQ(made, 3);
  // One given back is lent again rather than a new one made.
  const int returned = (**first).made;
  first.reset();
  auto again = pool.try_acquire(0, {1}, make);
  ASSERT_TRUE(again);
  EXPECT_EQ((**again).made, returned);
  EXPECT_EQ(made, 3);
}

TEST(ContextPool, ContextsOfOtherSettingsAreNotReused) {
  Rings pool(2);
  int made = 0;
  auto make = [&] { return std::make_unique<Ring>(Ring{++made}); };
  { auto lease = pool.acquire(0, {1}, make); }
  { auto lease = pool.acquire(0, {1}, make); }
  EXPECT_EQ(made, 1);  // kept idle, then reused
  auto lease = pool.try_acquire(0, {2}, make);
  ASSERT_TRUE(lease);
  EXPECT_EQ((**lease).made, 2);
  int idle = 0;
  pool.for_each_idle(0, [&](Ring&) { ++idle; });
  EXPECT_EQ(idle, 0);  // the old one was freed
}

TEST(ContextPool, ReleaseFreesIdleContextsAndKeepsLentOnes) {
  Rings pool(3);
  int made = 0;
  auto make = [&] { return std::make_unique<Ring>(Ring{++made}); };
  { auto lease = pool.acquire(0, {1}, make); }  // idle on device 0
  { auto lease = pool.acquire(1, {1}, make); }  // idle on device 1
  auto lent = pool.acquire(0, {1}, make);       // the idle one, lent
  { auto lease = pool.acquire(0, {1}, make); }  // a second, idle
  EXPECT_EQ(made, 3);
  EXPECT_EQ(pool.release_idle(0), 1U);  // device 0's idle one; the lent one and device 1's stay
  int idle = 0;
  pool.for_each_idle(1, [&](Ring&) { ++idle; });
  EXPECT_EQ(idle, 1);
  // The lent context comes back idle and is lent again; the freed one is made anew.
  const int kept = (*lent).made;
  lent.release();
  auto again = pool.acquire(0, {1}, make);
  EXPECT_EQ((*again).made, kept);
  auto fresh = pool.acquire(0, {1}, make);
  EXPECT_EQ((*fresh).made, 4);
  // Negative: every device's.
  fresh.release();
  EXPECT_EQ(pool.release_idle(-1), 2U);
  EXPECT_EQ(pool.release_idle(-1), 0U);
}

TEST(ContextPool, AFailedMakeLendsNothing) {
  Rings pool(1);
  EXPECT_THROW(
      (void)pool.try_acquire(0, {1}, []() -> std::unique_ptr<Ring> { throw std::bad_alloc(); }),
      std::bad_alloc);
  // The failed one does not count as lent.
  EXPECT_TRUE(pool.try_acquire(0, {1}, [] { return std::make_unique<Ring>(); }));
}

}  // namespace
}  // namespace zarr_device::cuda
