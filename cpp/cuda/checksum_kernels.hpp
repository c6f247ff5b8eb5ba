// gzip's CRC-32 and zlib's Adler-32 of decoded buffers, computed on the GPU: nvCOMP's gzip and
// zlib decoders do not check the checksum at the end of a stream, so the decoded bytes are
// checked here, on the stream that decoded them, before they are trusted. The arithmetic is
// codecs/checksum_combine.hpp's, which tests compare with zlib on the host.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace zarr_device::cuda {

enum class ChecksumKind {
  kCrc32,    // gzip's trailer (ISO-HDLC CRC-32, zlib's crc32()); 0 for no bytes
  kAdler32,  // zlib's trailer (RFC 1950, zlib's adler32()); 1 for no bytes
};

// Both launch a few kernels on `stream` and return at once (cudaGetLastError tells of a failed
// launch). Adler-32 takes 16 bytes a buffer from the stream-ordered allocator (cudaMallocAsync)
// for the launch, and still works, more slowly on large buffers, where that fails.

// Writes the checksum of buffer i (inputs[i], sizes[i] bytes, any alignment) to values[i]; all
// three arrays are device arrays of `n`, and every values[i] is written, whatever it held.
void launch_checksums(ChecksumKind kind, const void* const* inputs, const std::size_t* sizes,
                      std::uint32_t* values, std::size_t n, cudaStream_t stream);

// Sets flags[i] to 1 where buffer i's checksum differs from expected[i] and to 0 where it equals
// it (device arrays of `n`). Every flags[i] is written, so the array needs no zeroing beforehand
// and must be this check's own: the launch uses it for the running sums before the comparison,
// so a flag another check set there (launch_mark_non_fill's) would be lost.
void launch_check_checksums(ChecksumKind kind, const void* const* inputs, const std::size_t* sizes,
                            const std::uint32_t* expected, int* flags, std::size_t n,
                            cudaStream_t stream);

}  // namespace zarr_device::cuda
