// Turning CUDA runtime failures into the engine's typed errors, with where they happened.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "zarr_device/errors.hpp"

namespace zarr_device::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                          int line) {
  std::string message = std::string(call) + " failed: " + cudaGetErrorName(status) + " (" +
                        cudaGetErrorString(status) + ") at " + file + ":" + std::to_string(line);
  cudaGetLastError();  // clear the sticky error of a failed allocation
  if (status == cudaErrorMemoryAllocation) throw OutOfMemoryError(message);
  throw DeviceError(message);
}

// DeviceError unless CUDA device `device` exists on this machine.
void check_device(int device);

}  // namespace zarr_device::cuda

// The message is built only on failure.
#define ZD_CUDA_CHECK(call)                                                         \
  do {                                                                              \
    const cudaError_t zd_status_ = (call);                                          \
    if (zd_status_ != cudaSuccess) {                                                \
      ::zarr_device::cuda::throw_cuda_error(zd_status_, #call, __FILE__, __LINE__); \
    }                                                                               \
  } while (0)
