// Internal to cpp/cuda: what the read path and the decode benchmark share.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <span>

#include "gpu/read_plan.hpp"
#include "nvcomp_api.hpp"
#include "zarr_device/cuda.hpp"

namespace zarr_device::cuda {

// The device decoders nvCOMP offers here.
gpu::DeviceDecoders present_decoders(const Nvcomp& nvcomp);
// Worker threads for the CPU stages: the setting, or one per core.
std::size_t worker_count(const IoOptions& io);

// Times the GPU decode stage alone over the chunks of `selection` that a read would decode with
// nvCOMP (see measure_cuda_decode in zarr_device/cuda.hpp).
nlohmann::json measure_decode(const Array& array, std::span<const DimSlice> selection, int device,
                              int repeats, const CudaReadOptions& options);

}  // namespace zarr_device::cuda
