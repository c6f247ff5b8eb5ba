// The DLPack exchange structures (ABI of dlpack.h, version 1.1), for handing device results to
// torch, JAX and CuPy without a copy.
#pragma once

#include <cstdint>

namespace zarr_device::dlpack {

struct Version {
  std::uint32_t major;
  std::uint32_t minor;
};
constexpr Version kVersion{1, 1};

enum DeviceType : std::int32_t { kCPU = 1, kCUDA = 2, kCUDAHost = 3 };

struct Device {
  std::int32_t device_type;
  std::int32_t device_id;
};

enum TypeCode : std::uint8_t {
  kInt = 0,
  kUInt = 1,
  kFloat = 2,
  kBfloat = 4,
  kComplex = 5,
  kBool = 6,
  kFloat8_e3m4 = 7,
  kFloat8_e4m3 = 8,
  kFloat8_e4m3b11fnuz = 9,
  kFloat8_e4m3fn = 10,
  kFloat8_e4m3fnuz = 11,
  kFloat8_e5m2 = 12,
  kFloat8_e5m2fnuz = 13,
  kFloat8_e8m0fnu = 14,
};

struct DataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};

struct Tensor {
  void* data;
  Device device;
  std::int32_t ndim;
  DataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;
  std::uint64_t byte_offset;
};

struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};

struct ManagedTensorVersioned {
  Version version;
  void* manager_ctx;
  void (*deleter)(ManagedTensorVersioned* self);
  std::uint64_t flags;
  Tensor dl_tensor;
};

}  // namespace zarr_device::dlpack
