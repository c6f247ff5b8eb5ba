// Chunks staged a part at a time. A device read stages each chunk whole in a slot of its pinned
// ring, so a chunk larger than a slot made the ring cut into fewer, larger slots (and one larger
// than the whole ring was refused), and chunks decoded on CPU threads that fill most of a slot
// each had the slots, not the cores, bound how many decode at once (64 MiB chunks in the default
// ring's 64 MiB slots kept fewer threads busy than there were cores: the benchmark notebook,
// "Chunks staged a part at a time"). Such a
// chunk is cut into parts of its decoded bytes, each a leaf of its own in a part of a slot: the
// parts of a copied chunk are read apart, those of a chunk decoded on the CPU are decoded in
// order from one decoder (CodecChain::stream_decoder), by whichever of their fetches comes first,
// and the parts of twice as many such chunks as the read has threads are interleaved, so that
// they decode at once in slots of the ring as configured. Pure host logic.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "device_read/read_batches.hpp"
#include "device_read/read_leaf.hpp"
#include "device_read/staging_shape.hpp"

namespace zarr_device::device_read {

// The default PartSizes::window_budget: with the staging, within the host memory a GPU read may
// hold beyond its ring (512 MiB).
inline constexpr std::size_t kWindowBudget = std::size_t{256} << 20;

// What cutting needs to know of a read.
struct PartSizes {
  StagingShape staging;     // the ring as configured
  std::size_t workers = 1;  // the CPU threads that fetch and decode
  // Host memory the chunks decoding in parts at once may keep besides the staging: each holds
  // its decompressor's history (CodecChain::window_memory: 2 MiB at zstd's default level, 8 MiB
  // at level 19, up to the chunk at levels 20-22) and a piece of its stored bytes.
  std::size_t window_budget = kWindowBudget;
};

// Parts are at least this large (a part costs a leaf, a lock and a copy).
inline constexpr std::size_t kMinPartBytes = std::size_t{1} << 20;
// The chunks decoded on the CPU whose parts interleave, for each of the read's threads: a thread
// that finds the chunk of its next part being decoded by another goes on to another chunk, and
// with more chunks than threads one is free more often. Twice as many read large chunks faster
// than as many; smaller parts helped large arrays but slowed small ones (the benchmark notebook,
// "Chunks staged a part at a time").
inline constexpr std::size_t kChunksPerWorker = 2;

// The bytes of the parts a chunk decoded on the CPU is cut into: a slot holds one of each of the
// read's threads' chunks (at least kMinPartBytes, at most a slot). Copied chunks are cut into
// parts of a batch of copies (kCopyBatchBytes), at most a slot.
std::size_t decoded_part_bytes(const PartSizes& sizes);

// Whether a leaf is better staged in parts: a copy (plain elements, at most one crc32c) or a CPU
// decode (CodecChain::stream_target) that lands whole and contiguous in its destination,
// and is larger than a slot or, decoded on the CPU, so large that the ring's slots hold fewer of
// them than the read has threads; or a device decode larger than the whole ring, which no slot
// can hold and which is then decoded on the CPU in parts.
bool staged_in_parts(const Leaf& leaf, const PartSizes& sizes);

// Replaces the leaves staged_in_parts says so by their parts, in place (device decodes among them
// rerouted to the CPU); the parts of up to kChunksPerWorker x `workers` CPU-decoded chunks in a
// row interleaved (the first part of each, then the second, ...), fewer where their memory
// (read from each chunk's first bytes) would pass `window_budget`. Returns how many chunks were
// cut.
std::size_t cut_into_parts(std::vector<Leaf>& leaves, const PartSizes& sizes);

// Tells the parts in `batch` where they are staged (`host`: its slot) as the batch's fetch is
// started, before any later batch's: a part's fetch may decode the parts of its chunk before it,
// in batches fetched at the same time, into their places.
void lend_part_staging(std::span<Leaf> batch, std::byte* host);

// Whether fetching `leaf` also checksums a share of its chunk's bytes around a stretch (a rank's
// rows of a chunk under a crc32c): such a fetch is the CPU's work more than the copy engine's,
// like a CPU decode's (device_read::fetch_ahead).
bool checks_around(const Leaf& leaf);

// Fetches a part into `staged` (its place in its slot): a copied chunk's part is read, a decoded
// chunk's parts are decoded in order up to it. Once a chunk's parts are all in, its checks are
// those of the whole chunk: its size, its checksum (ChecksumError), its codecs' (CodecError),
// ValueChanged when it was replaced since it was planned. A chunk that failed fails each part
// fetched after. Without `wait`, returns false at once, having done nothing, while another thread
// decodes the chunk (its parts up to that thread's, which may be past this one): the caller
// fetches others meanwhile, and this one later, waiting.
bool fetch_part(const Leaf& part, std::byte* staged, bool wait = true);

}  // namespace zarr_device::device_read
