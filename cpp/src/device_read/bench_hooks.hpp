// Entry points of the GPU path for benchmarks only (bench/bench_gpu.py and bench/bench_layouts.py
// reach them through _core.Array.bench_decode_cuda), kept out of the engine's public headers.
// Defined in cpp/cuda/decode_measure.cpp, or in cpp/cuda/no_cuda.cpp for a build without CUDA.
#pragma once

#include <nlohmann/json.hpp>
#include <span>

#include "zarr_device/array.hpp"
#include "zarr_device/read_options.hpp"

namespace zarr_device {

// Times the GPU decode stage alone over the chunks of `selection` that a read would decode with
// nvCOMP (their compressed bytes staged in device memory beforehand): {"seconds",
// "compressed_bytes", "decoded_bytes", "chunks", ...}.
nlohmann::json measure_cuda_decode(const Array& array, std::span<const DimSlice> selection,
                                   int device, int repeats,
                                   const ReadOptions& options = ReadOptions::from_settings());

}  // namespace zarr_device
