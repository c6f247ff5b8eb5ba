#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "devices/device.hpp"
#include "zarr_device/cuda_io.hpp"
#include "zarr_device/errors.hpp"

namespace zd = zarr_device;

namespace {

// The contract every device keeps: memory round trips through copies ordered on a stream.
void round_trip(zd::Device& device) {
  const std::size_t n = 1 << 20;
  auto* host_in = static_cast<unsigned char*>(device.allocate_host(n));
  auto* host_out = static_cast<unsigned char*>(device.allocate_host(n));
  for (std::size_t i = 0; i < n; ++i) host_in[i] = static_cast<unsigned char>(i * 7 + 3);
  std::memset(host_out, 0, n);
  void* a = device.allocate(n);
  void* b = device.allocate(n);
  auto stream = device.create_stream();
  auto other = device.create_stream();
  auto event = device.create_event();
  device.copy_async(a, host_in, n, zd::CopyKind::kHostToDevice, stream);
  device.copy_async(b, a, n, zd::CopyKind::kDeviceToDevice, stream);
  device.fill_async(b, 0xAB, 16, stream);
  device.record(event, stream);
  device.wait(other, event);  // the copy back runs on another stream, after the event
  device.copy_async(host_out, b, n, zd::CopyKind::kDeviceToHost, other);
  device.synchronize_stream(other);
  for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(host_out[i], 0xAB);
  EXPECT_EQ(std::memcmp(host_out + 16, host_in + 16, n - 16), 0);
  device.synchronize(event);
  device.destroy_event(event);
  device.destroy_stream(other);
  device.destroy_stream(stream);
  device.deallocate(b);
  device.deallocate(a);
  device.deallocate_host(host_out);
  device.deallocate_host(host_in);
}

}  // namespace

TEST(Devices, CpuDeviceKeepsTheContract) {
  auto cpu = zd::get_device("cpu");
  EXPECT_EQ(cpu->kind(), zd::DeviceKind::kCpu);
  EXPECT_EQ(cpu->name(), "cpu");
  round_trip(*cpu);
}

TEST(Devices, RegistrySharesDevicesAndRejectsBadNames) {
  EXPECT_EQ(zd::get_device("cpu"), zd::get_device("cpu:0"));
  EXPECT_THROW((void)zd::get_device("tpu:0"), zd::UsageError);
  EXPECT_THROW((void)zd::get_device("cuda:x"), zd::UsageError);
  EXPECT_THROW((void)zd::get_device("cuda:-1"), zd::UsageError);
  EXPECT_THROW((void)zd::get_device("cuda:"), zd::UsageError);
  // A GPU past the last one (or any, in a build or on a machine without CUDA) is a DeviceError.
  EXPECT_THROW((void)zd::get_device("cuda:4096"), zd::DeviceError);
  // By kind and index, as the engine asks: the same devices, the same refusals.
  EXPECT_EQ(zd::get_device("cpu", 0), zd::get_device("cpu"));
  EXPECT_THROW((void)zd::get_device("tpu", 0), zd::UsageError);
  EXPECT_THROW((void)zd::get_device("cuda", -1), zd::UsageError);
  EXPECT_THROW((void)zd::get_device("cuda", 4096), zd::DeviceError);
}

TEST(Devices, RegistryTakesNewKinds) {
  int made = 0;
  zd::DeviceRegistry::instance().add("test-device", [&made](int /*index*/) {
    ++made;
    return zd::make_cpu_device();
  });
  auto first = zd::get_device("test-device:2");
  auto again = zd::get_device("test-device:2");
  EXPECT_EQ(first, again);
  EXPECT_EQ(made, 1);
}

TEST(Devices, DeviceBufferFreesWithItsOwner) {
  zd::DeviceBuffer buffer(zd::get_device("cpu"), 4096);
  ASSERT_NE(buffer.data(), nullptr);
  EXPECT_EQ(buffer.size(), 4096U);
  std::memset(buffer.data(), 1, buffer.size());  // ASan checks the extent
  zd::DeviceBuffer empty(zd::get_device("cpu"), 0);
  EXPECT_NE(empty.data(), nullptr);
}

// GPU: these run where a CUDA device is present (the GPU machine's filter is "Cuda*").
TEST(CudaDevice, KeepsTheContract) {
  if (zd::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto gpu = zd::get_device("cuda:0");
  EXPECT_EQ(gpu->kind(), zd::DeviceKind::kCuda);
  EXPECT_EQ(gpu->name(), "cuda:0");
  round_trip(*gpu);
}

TEST(CudaDevice, PinnedMemoryOfAnySizeRoundTrips) {
  if (zd::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto gpu = zd::get_device("cuda:0");
  auto stream = gpu->create_stream();
  for (const std::size_t n :
       {std::size_t{1}, std::size_t{4097}, (std::size_t{2} << 20) + 1, std::size_t{40} << 20}) {
    auto* in = static_cast<unsigned char*>(gpu->allocate_host(n));
    auto* out = static_cast<unsigned char*>(gpu->allocate_host(n));
    for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<unsigned char>(i * 13 + n);
    std::memset(out, 0, n);
    zd::DeviceBuffer device_copy(gpu, n);
    gpu->copy_async(device_copy.data(), in, n, zd::CopyKind::kHostToDevice, stream);
    gpu->copy_async(out, device_copy.data(), n, zd::CopyKind::kDeviceToHost, stream);
    gpu->synchronize_stream(stream);
    EXPECT_EQ(std::memcmp(in, out, n), 0) << n << " bytes";
    gpu->deallocate_host(out);
    gpu->deallocate_host(in);
  }
  gpu->destroy_stream(stream);
  // More than the machine has: a typed error, and the device stays usable.
  EXPECT_THROW((void)gpu->allocate_host(std::size_t{1} << 50), zd::OutOfMemoryError);
  gpu->deallocate_host(gpu->allocate_host(1 << 20));
}

TEST(CudaDevice, AllocationFailureIsOutOfMemory) {
  if (zd::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto gpu = zd::get_device("cuda:0");
  EXPECT_THROW((void)gpu->allocate(std::size_t{1} << 50), zd::OutOfMemoryError);
  // The failed allocation leaves the device usable.
  zd::DeviceBuffer ok(gpu, 1 << 20);
  EXPECT_NE(ok.data(), nullptr);
}
