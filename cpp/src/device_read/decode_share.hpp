// Choosing between the GPU and the CPU threads for a read's decoding. A batched GPU decoder decodes
// each chunk on one thread block, slowly, and is fast only with many chunks at once; a CPU thread
// decodes a chunk faster. So a read of few chunks (a single tensor read after another) finishes
// sooner decoded on the CPU, a read of many on the GPU (the benchmark notebook, "Decode sharing
// (`decode_sharing="auto"`, the default)"; DecodeRates' defaults come from there). A read split
// between the two was slower than either: the batches holding CPU decodes held up the GPU's
// (BENCHMARKS.md, Appendix: decisions, and what was measured and not kept). Pure host logic: every
// rate it needs is given.
#pragma once

#include <cstddef>
#include <span>

#include "device_read/read_leaf.hpp"
#include "device_read/staging_shape.hpp"

namespace zarr_device::device_read {

// What the machine decodes and moves, per second (decoded bytes for decoding, stored bytes for
// fetching), and the resources a read has.
struct DecodeRates {
  double device_chunk = 0.2e9;   // one chunk on the device (one thread block)
  std::size_t device_lanes = 0;  // chunks the device decodes at once at that rate (its SMs)
  double cpu_thread = 0.45e9;    // one CPU thread decoding (and checking a crc32c)
  double cpu_fetch = 8e9;        // one CPU thread moving stored bytes into pinned staging
  std::size_t cpu_threads = 1;   // the read's threads
  // The pinned staging: CPU-decoded chunks wait there decoded, in its slots, all but one of
  // them being filled at a time.
  StagingShape staging;
  // Chunks larger than this stay on the device: past a few MiB a chunk decodes faster on the device
  // than on a CPU thread, whose output no longer fits its caches: the reverse of the small chunks
  // the rates above describe, and a read of such chunks took longer shared with the CPU than on the
  // device alone (the benchmark notebook, "Large chunks (machine 1)").
  std::size_t largest_shared = std::size_t{8} << 20;
};

// The estimated seconds of the decoding part of a read whose device decodes total `device_bytes`,
// whose CPU decodes total `cpu_bytes` (the largest chunk of either `largest`), and whose CPU
// stage fetches `fetched` stored bytes.
double decode_seconds(double device_bytes, double cpu_bytes, double largest, double fetched,
                      const DecodeRates& rates);

// The hardware work queues CUDA gives a process's streams on a device, from the value of
// CUDA_DEVICE_MAX_CONNECTIONS (which the driver reads when the process's context is made): 1-32, or
// 8, CUDA's default, when unset or not a number in that range. With one queue (Megatron-LM and NeMo
// set CUDA_DEVICE_MAX_CONNECTIONS=1 for their training processes) the streams share it in order, so
// a consumer's wait for a read's decodes holds the next read's copies behind them: reads one after
// another that do not wait no longer overlap on the device (the benchmark notebook, "What bounds
// large chunks; reads on one CUDA hardware queue"), and such a read is better decoded as a read
// that waits.
std::size_t hardware_queues(const char* max_connections);

// nvCOMP's time for a zstd frame follows the size of its blocks: each block's Huffman-coded
// literals are decoded slowly, the blocks of a frame side by side, so frames of 16 KiB blocks
// (zarr-device's writes of chunks up to 2 MiB) decode kSmallBlockSpeedup times as soon as
// libzstd's 128 KiB blocks (the benchmark notebook, "zstd blocks that GPUs decode sooner").
// DecodeRates::device_chunk describes libzstd's blocks.
inline constexpr double kSmallBlockSpeedup = 2.0;
// Blocks of at most this many decoded bytes are small, judged where a chunk is stored in at least
// kSmallBlockRatio of its size (weights-like data, whose literals dominate, as measured; data
// that compresses far, such as text or zeros, decodes at other rates and keeps the plain rate).
inline constexpr double kSmallBlockBytes = 32 << 10;
inline constexpr double kSmallBlockRatio = 0.5;

// `rates.device_chunk` for a read's device decodes of `kind`, judged from the stored blocks of its
// largest such chunk (its first bytes read where they lie: one small read, not made where the
// chunk is larger than `rates.largest_shared` or its store answers in round trips): the rate
// times kSmallBlockSpeedup where they are small, as is otherwise.
double device_chunk_rate(std::span<const Leaf> leaves, DecodeKind kind, const DecodeRates& rates);

// Moves every decode of `kind` on `route` (the device in the caller's process, or the decoder
// process) to the CPU where the estimate says the read then ends sooner and no chunk of them
// decodes to more than `rates.largest_shared` bytes; returns how many moved.
std::size_t share_decodes(std::span<Leaf> leaves, DecodeKind kind, const DecodeRates& rates,
                          Route route = Route::kDeviceDecode);

// nvCOMP inflates (gzip, zlib) a chunk far more slowly than it decodes zstd, about 10 MB/s a chunk
// with about four chunks an SM at once, where a CPU thread inflates about 110 MB/s: the GPU is the
// sooner only with hundreds of chunks of a MiB or so, the CPU's threads with larger or fewer
// (BENCHMARKS.md, One GPU: gzip and zlib). However large, a chunk may move: the CPU wins there.
DecodeRates deflate_rates(const DecodeRates& rates);

}  // namespace zarr_device::device_read
