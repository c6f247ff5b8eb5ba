// The options of a read onto a device, which travel with the call.
#pragma once

#include <cstddef>
#include <cstdint>

#include "zarr_device/settings.hpp"

namespace zarr_device {

// How a read onto a device runs: the settings in force as the call starts (settings.hpp), which
// then travel with it to every stage, and what the caller says of this call alone. Made from the
// settings where a call begins (the Python module's calls, or a C++ caller's), and only so: no
// stage looks the settings up again, and no field has a default of its own to drift from them.
struct ReadOptions {
  // The settings in force now.
  static ReadOptions from_settings();
  static ReadOptions from(const Settings& values);

  // CPU threads that fetch, check and decode what the GPU does not; 0 = one per core. A read
  // onto a device has no byte budget (IoOptions::max_inflight_bytes): its host memory is the
  // pinned staging plus, for each thread decoding a chunk on the CPU, that chunk's stored bytes
  // and its codecs' buffers.
  int threads = 0;
  // Pinned host memory that chunk bytes pass through on their way to the GPU, split into `slots`
  // slots (of staging_bytes / slots each; fewer slots when a chunk does not fit one) that are
  // filled, copied and decoded in turn, so reads overlap copies and decoding. A slot is allocated
  // on its first use and kept for later reads to the device (made again when these settings
  // change). Device memory: the output, a copy of each slot, and decode_bytes.
  std::size_t staging_bytes = 0;
  int slots = 1;
  // Device memory for GPU decoding (nvCOMP's working memory, chunks on their way to a strided
  // place): taken as reads need it, up to this, and kept with the ring. Reads of chunks a slot
  // holds few of decode in it together with the slots' device copies (the device memory stays
  // the same: the output, the staging and this). 0: sized by the device (decode_memory_for).
  std::size_t decode_bytes = 0;
  // The cudaStream_t the caller uses `out` on (cudaStreamLegacy, 1, for the legacy default
  // stream): the read's writes wait for the work queued on it so far (its memory may have been
  // freed and reallocated there), and the read may complete in stream order (see
  // read_many_to_cuda). 0 for none.
  std::uintptr_t consumer_stream = 0;
  GpuDecode gpu_decode = GpuDecode::kChecked;
  DecodeSharing decode_sharing = DecodeSharing::kAuto;
  // Complete in stream order on the consumer streams even when chunks decode on the GPU, instead
  // of waiting for the decoders' statuses: the host goes on to the next read while this one
  // decodes, as torch's non-blocking copies do. Every chunk is still checked on the host first
  // (crc32c, framing; see gpu_decode), but a chunk the GPU then fails to decode is reported late:
  // by synchronize_cuda_reads, or by the next read onto the device (raised before it reads), as
  // a CodecError naming the array and the chunk. The output of the failed read holds nothing to
  // rely on. Needs a consumer stream; reads without one wait as always.
  bool non_blocking = false;

 private:
  ReadOptions() = default;
};

}  // namespace zarr_device
