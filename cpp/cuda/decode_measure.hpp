// Internal to cpp/cuda: what the read path and the decode benchmark share.
#pragma once

#include <cstddef>

#include "gpu/read_plan.hpp"
#include "nvcomp_api.hpp"
#include "zarr_device/cuda.hpp"

namespace zarr_device::cuda {

// The device decoders nvCOMP offers here.
gpu::DeviceDecoders present_decoders(const Nvcomp& nvcomp);
// Worker threads for the CPU stages: the setting, or one per core.
std::size_t worker_count(const HostThreads& io);

}  // namespace zarr_device::cuda
