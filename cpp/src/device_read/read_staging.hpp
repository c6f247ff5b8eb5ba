// The CPU stage of a device read: a batch's stored bytes read into its pinned staging slot by many
// threads, in pieces of about 1 MiB, and checked there (crc32c, the framing a device decoder
// trusts) while they are still in the reading core's cache. Chunks no device decoder takes are
// decoded here instead.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "codecs/crc32c.hpp"
#include "device_read/read_leaf.hpp"
#include "engine/thread_pool.hpp"

namespace zarr_device::device_read {

inline constexpr std::size_t kPieceBytes =
    1 << 20;  // unit of parallel reads: small enough to balance

// A piece of a batch read by one task: whole leaves stored back to back (a whole shard is then a
// few large reads, not thousands of small ones), or a part of one leaf longer than a piece.
struct ReadPiece {
  std::size_t first = 0;      // the piece's leaves: [first, end)
  std::size_t end = 0;        //
  std::uint64_t offset = 0;   // where the piece starts in the first leaf's stored value
  std::size_t length = 0;     // bytes to read (0: a fill element or a CPU decode)
  bool whole_leaves = false;  // holds its leaves whole (and checks them)
};

using codecs::check_crc32c;  // (codecs/crc32c.hpp)

// The pieces of a batch (leaves placed by pack_batches), in order.
std::vector<ReadPiece> plan_pieces(std::span<const Leaf> batch);

// A device-decode leaf that the device decoder cannot take as stored (unusual framing), decoded
// here: `bytes` in the leaf's staged layout (staged_layout), for the device stage to place.
struct CpuDecoded {
  std::size_t leaf = 0;  // in the batch
  ByteArray bytes;
};

// Decodes a leaf on the CPU into its staged layout (from its stored bytes, `stored`): the codecs'
// typed errors for bytes they reject.
ByteArray decode_on_cpu(const Leaf& leaf, const Buffer& stored);

// Reads and checks a batch into `host` (a staging slot) on `pool`: opens one version of each
// whole chunk for the batch (shards keep the version their index came from), ValueChanged when a
// chunk's size is not the one planned. A chunk planned without its size (StoredBytes::sized) is
// sized as it is opened: one not stored becomes a fill (Route::kFill, its element staged), one
// stored in more than its codecs' bound is decoded here. Raises the CPU's typed error, naming the
// chunk, for what fails a check. Returns the leaves decoded here instead of on the device.
std::vector<CpuDecoded> fetch_batch(std::span<Leaf> batch, std::byte* host,
                                    engine::ThreadPool& pool, std::size_t workers);

}  // namespace zarr_device::device_read
