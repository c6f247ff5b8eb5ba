// Sharing a read's decoding between the GPU and the CPU threads. A batched GPU decoder decodes
// each chunk on one thread block, slowly (measured on an H200 with nvCOMP 6, zstd of bf16
// weights: about 0.25 GB/s per chunk), and fast only with many chunks at once; a CPU thread
// decodes a chunk about four times faster. So a read of few chunks (a single tensor read after
// another) or of large ones (16-64 MiB) finishes sooner with some or all of its chunks decoded on
// the CPU, while a read of many chunks gains from a share of them there as long as CPU threads are
// left over from fetching. Pure host logic: every rate it needs is given.
#pragma once

#include <cstddef>
#include <span>

#include "gpu/read_leaf.hpp"

namespace zarr_device::gpu {

// What the machine decodes and moves, per second (decoded bytes for decoding, stored bytes for
// fetching), and the resources a read has.
struct DecodeRates {
  double device_chunk = 0.25e9;   // one chunk on the device (one thread block)
  std::size_t device_lanes = 0;   // chunks the device decodes at once at that rate (its SMs)
  double cpu_thread = 0.9e9;      // one CPU thread decoding (and checking a crc32c)
  double cpu_fetch = 8e9;         // one CPU thread moving stored bytes into pinned staging
  std::size_t cpu_threads = 1;    // the read's threads
  std::size_t staging_bytes = 0;  // the pinned staging: CPU-decoded chunks wait there decoded
  std::size_t slots = 1;          // its slots, about half of them being filled at a time
};

// The estimated seconds of the decoding part of a read whose device decodes total `device_bytes`,
// whose CPU decodes total `cpu_bytes` (the largest chunk of either `largest`), and whose CPU
// stage fetches `fetched` stored bytes.
double decode_seconds(double device_bytes, double cpu_bytes, double largest, double fetched,
                      const DecodeRates& rates);

// Moves device decodes of `kind` to the CPU where the estimate says the read then ends sooner:
// the share of their bytes that minimises it (ties to the device, which leaves the CPU threads to
// fetching), spread evenly over the read so that every batch has its part. Returns how many moved.
std::size_t share_decodes(std::span<Leaf> leaves, DecodeKind kind, const DecodeRates& rates);

}  // namespace zarr_device::gpu
