// The GPU write path as one object per write (write_from_cuda): the pipeline (cuda_writer.cpp:
// which chunks the GPU encodes, their leaves, the batches and the two slots they take in turn, and
// the CPU's read-modify-write for the rest), a batch's device stage (write_submit.cpp: lay out,
// mark, compress, copy back) and its host stage (write_store.cpp: checksums, shard assembly, the
// store). Internal to cpp/cuda.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codecs/codec_chain.hpp"
#include "codecs/shard_layout.hpp"
#include "engine/thread_pool.hpp"
#include "place/chunk_grid.hpp"
#include "write_plan.hpp"
#include "write_ring.hpp"
#include "zarr_device/cuda_io.hpp"

namespace zarr_device::cuda {

class Writer {
 public:
  Writer(const Array& array, int device, const CudaWriteOptions& options)
      : array_(array),
        device_(device),
        options_(options),
        workers_(engine::worker_count(options.io.threads)),
        pool_(engine::ThreadPool::shared(workers_)) {}

  void write(std::span<const DimSlice> selection, const void* values, std::size_t nbytes);

 private:
  // Leaves of a chunk the selection covers whole (its origin at `origin` in `values`).
  void plan_item(WriteItem& item, std::span<const std::int64_t> chunk,
                 std::span<const std::int64_t> origin);
  // A batch's device stage (write_submit.cpp): lay out, mark and compress its leaves on the
  // slot's stream; then, once the compressed sizes are known, their copy to pinned memory.
  void launch(WriteSlot& slot, std::span<WriteItem> items);
  void copy_back(WriteSlot& slot, std::span<WriteItem> items);
  // Its host stage (write_store.cpp), while the GPU works on the next batch.
  void store(WriteSlot& slot, std::span<WriteItem> items);
  void write_through_host(std::span<const DimSlice> selection,
                          const place::GridIntersection::Item& item);
  [[nodiscard]] std::string where(const std::string& key) const {
    return array_.describe() + ", chunk '" + key + "'";
  }

  const Array& array_;
  int device_;
  CudaWriteOptions options_;
  std::size_t workers_;
  engine::ThreadPool& pool_;
  const codecs::CodecChain* leaf_chain_ = nullptr;  // the chain each leaf is encoded with
  const codecs::ShardLayout* shard_ = nullptr;
  EncodePlan plan_;
  std::size_t leaf_bytes_ = 0;
  std::size_t max_output_ = 0;  // the compressor's bound for one leaf
  const std::byte* values_ = nullptr;
  std::vector<std::int64_t> value_strides_;
  WriteContext* ctx_ = nullptr;
};

}  // namespace zarr_device::cuda
