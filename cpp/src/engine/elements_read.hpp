// Host reads of large chunks whose elements are stored as they are (no codecs, or a crc32c after
// them) by several threads at once. The host read's loop gives each chunk to one thread, so an
// array of one 1 GiB chunk, or a tensor-parallel rank's rows of it, was read (and checksummed) by
// one thread while the others waited. Here the stretch a selection covers (the whole chunk, rows,
// part of a row) is read straight into the output in pieces side by side, and under a crc32c the
// rest of the chunk is checksummed in pieces side by side too, the pieces' checksums joined in
// stored order.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "codecs/codec_chain.hpp"
#include "engine/thread_pool.hpp"
#include "zarr_device/store.hpp"

namespace zarr_device::engine {

// Chunks at least this large are read so (a piece each per thread below that is not worth its
// hand-off).
inline constexpr std::size_t kElementsReadBytes = std::size_t{64} << 20;
// The pieces the threads take.
inline constexpr std::size_t kElementsPieceBytes = std::size_t{8} << 20;

// Reads `within` of the chunk at `key` into `region` on up to `workers` threads of `pool` where
// the chunk is stored as its elements (little-endian, C order) with at most one crc32c after
// them, `within` covers one stretch of them and `region` takes it in runs of at least
// `min_run` bytes; false, having done nothing, otherwise, and where the stored value is not of
// the size that says (the caller's decode then says what is wrong). A missing chunk fills
// `region` with the fill value. ChecksumError where the checksum differs; StoreError where the
// value ends while read. Holds at most `workers` pieces of kDecodePieceBytes besides the output
// (`budget`).
bool read_stored_elements(const codecs::CodecChain& chain, const Store& store,
                          const std::string& key, std::span<const DimSlice> within,
                          const StridedView& region, std::size_t min_run, ThreadPool& pool,
                          std::size_t workers, ByteBudget& budget);

}  // namespace zarr_device::engine
