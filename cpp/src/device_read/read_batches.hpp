// Batching a device read: leaves packed, in order, into batches that fit a pinned staging slot and
// whose device decodes fit a decode region; the decode memory split into as many regions as the
// data calls for. Pure host logic: every figure it needs is given.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "device_read/read_leaf.hpp"
#include "device_read/staging_alignment.hpp"

namespace zarr_device::device_read {

inline constexpr std::size_t kMaxBatch = 8192;  // leaves per slot
// Decode regions (one stream each) a read may split its decode memory into: as many as CUDA's
// hardware queues (8 unless CUDA_DEVICE_MAX_CONNECTIONS says otherwise), or up to
// kMaxDecodeRegions for chunks so large that a slot holds fewer than kFewPerSlot, whose regions
// hold a chunk or two each and bound what decodes at once. Their streams then share queues, which
// costs them little; calls of many small chunks were slower on more streams than queues (the
// benchmark notebook, "More decode regions for large chunks; small chunk files through io_uring").
inline constexpr std::size_t kHardwareQueues = 8;
inline constexpr std::size_t kMaxDecodeRegions = 32;
inline constexpr double kFewPerSlot = 4;
// Batches of copies: small enough that the copy engine starts early and finds the next batch ready
// (larger batches read slower: the benchmark notebook, "Many arrays: batch sizes, lookahead,
// stream-ordered reads, threads, layouts"); a small read is cut finer, down to kMinBatchBytes,
// where a batch's fixed costs are still small. Batches with decodes fill their slot instead
// (pack_batches).
inline constexpr std::size_t kCopyBatchBytes = std::size_t{8} << 20;
inline constexpr std::size_t kMinBatchBytes = std::size_t{4} << 20;

// What decoding chunks at once costs in device memory: the decoder's temporary memory, linear in
// the chunks of one call, then scratch for the chunks not decoded straight into place.
struct DecodeCost {
  std::size_t first = 0;      // temporary bytes for a call's first chunk
  std::size_t per_chunk = 0;  // for each further chunk
  // Region bytes of a call of `chunks` chunks (at least one) whose scratch totals `scratch`.
  [[nodiscard]] std::size_t region(std::size_t chunks, std::size_t scratch) const {
    return align_up(first + per_chunk * (chunks - 1), kStagingAlignment) + scratch;
  }
};
using DecodeCosts = std::array<DecodeCost, DeviceDecoding::kKinds>;
using PerKind = std::array<std::size_t, DeviceDecoding::kKinds>;

// How many of the leaves' device-decoded chunks a slot of `capacity` bytes holds, on average (at
// least one; infinity when there are none).
double device_decodes_per_slot(std::span<const Leaf> leaves, std::size_t capacity);

// Whether a read of `leaves` through slots of `capacity` bytes decodes in a decode arena of
// `decode_memory` bytes, off its slots (device_read/fifo_ring.hpp), rather than in regions: where a
// slot holds fewer than kFewPerSlot of its device-decoded chunks, their slots, not the decode
// memory, bound how many decode at once (a 64 MiB chunk fills a slot of the default ring: 12 at
// most, each decoding slowly on its thread block: the benchmark notebook, "What bounds large
// chunks; reads on one CUDA hardware queue"). Only where each chunk alone, at `costs` (which plan
// for the worst case) and with its scratch (set by plan_decode_regions), fits a batch's budget
// (off_slot_decode_budget): a batch's bytes and its decoder's memory are two ranges of the arena at
// once, and its decoder's memory is known only once its bytes are across.
bool decodes_off_slots(std::span<const Leaf> leaves, std::size_t capacity,
                       std::size_t decode_memory, const DecodeCosts& costs);

// The decode budget of a batch of such a read: its bytes (a slot, at most, and its arrays) and
// its decoder's memory fit the arena together wherever the ring stands: half of what the first
// leaves (a range that does not fit before the arena's end starts over at its start, and may not
// overlap the batch's first range there).
std::size_t off_slot_decode_budget(std::size_t capacity, std::size_t decode_memory);

// The streams such a read's batches decode on, in turn: as many as decode at once in the arena
// when each chunk's decoder needs about its decoded size (what nvCOMP sizes for bf16 weights from
// their frames) beside its stored bytes, at most kMaxDecodeRegions. A stream holds some of the
// driver's device memory, so a small arena gets few.
std::size_t off_slot_streams(std::span<const Leaf> leaves, std::size_t decode_memory);

// Sets each device decode's scratch (none when it decodes straight into its place: whole,
// contiguous, aligned to its decoder's `output_alignment`) and returns how many regions the decode
// memory (`decode_memory` bytes) of a ring of `slots` slots of `capacity` bytes is best split into.
//
// A batched decoder decodes a chunk per thread block: its speed follows the chunks decoded at once,
// not how they are split into calls (the benchmark notebook, "GPU reads with bounded decode memory;
// GPU writes with in-place checksums"), while its temporary memory grows with them. A batch is cut
// where its slot or its decode region is full, and the batches of R regions decode at once: R x
// min(a slot's chunks, a region's chunks) in flight. The fewest regions that put the most chunks in
// flight make the largest calls, on at most CUDA's hardware queues' streams unless the chunks are
// large (kMaxDecodeRegions). (Large chunks are where this matters: a slot holds one 64 MiB chunk or
// four of 16 MiB, so the regions, not the memory, bound them.) `in_place`: false has every chunk
// decoded into scratch, even those that could land in place (a read that must not write its outputs
// before the consumer's earlier work is done, while its decoding need not wait for it).
std::size_t plan_decode_regions(std::span<Leaf> leaves, const DecodeCosts& costs,
                                const PerKind& output_alignment, std::size_t slots,
                                std::size_t capacity, std::size_t decode_memory,
                                bool in_place = true);

struct Batch {
  std::size_t begin = 0;  // leaves [begin, end)
  std::size_t end = 0;
};

// What a read of `leaves` stages: the leaf that needs the most room in a slot (and its name, for
// messages), and the bytes of all of them.
struct StagingNeed {
  std::size_t largest = 0;
  std::string where;
  std::size_t total = 0;
};
StagingNeed staging_need(std::span<const Leaf> leaves);

// The staged bytes a batch of copies aims at for a read that stages `need` (staging_need of its
// leaves, found once per read: a pass over every leaf) through `slots` slots of `capacity` bytes.
// A read costs about one batch's fetch before the first copy starts and one batch's copy after
// the last fetch ends, so a small read is cut finer. Batches with device decodes fill their slot
// instead: a batched decoder's speed follows the chunks it decodes at once.
std::size_t batch_target(const StagingNeed& need, std::size_t capacity, std::size_t slots);

// A read that waits for its device decodes pays its fetch, its copy and its last decoder call one
// after another, and a decoder call takes milliseconds however few its chunks (a 2 MiB zstd chunk
// decodes on one thread block, so a call of one takes nearly as long as a call of many: the
// benchmark notebook, "Where the many-arrays targets stand"), so such a read of one tensor is cut
// into about kWaitingPieces batches: the first decodes while the rest are fetched and copied, and
// its last call holds a quarter of the chunks. Batches are not cut below kMinDecodeBatchBytes, nor
// is a larger read (one whose quarter fills a slot) cut finer than its slots: its batches already
// overlap.
inline constexpr std::size_t kWaitingPieces = 4;
inline constexpr std::size_t kMinDecodeBatchBytes = std::size_t{4} << 20;

// The staged bytes a batch with device decodes (and none on the CPU) holds at most, for a read
// that stages `need` through slots of `capacity` bytes: `capacity` (a full slot) unless the read
// `waits` for its decodes, then a kWaitingPieces-th of the read (at least kMinDecodeBatchBytes).
std::size_t decode_batch_target(const StagingNeed& need, std::size_t capacity, bool waits);

// How many batches past the one going to the device a read fetches while it goes: batch b uses slot
// b % slots, so the CPU stages of the next fetch_ahead(batch) batches run on the pool while batch b
// is copied and decoded, and the copy engine finds the next slot full when it is done with this
// one. A batch that only copies (or decodes on the device) fetches half the ring ahead: the other
// half holds batches on the device, where device decodes keep their slots until decoded and copies
// stay queued while the host is busy (fetching further ahead read slower: the benchmark notebook,
// "Many arrays: batch sizes, lookahead, stream-ordered reads, threads, layouts"). A batch with
// chunks decoded on CPU threads and none on the device leaves its slot within a copy's time, and
// its fetch is the decode: it fetches all but one slot ahead, so that as many threads decode as the
// ring has slots (a 64 MiB chunk fills a slot of the default ring: half the ring kept fewer than
// half of the threads busy; the benchmark notebook, "CPU-decoded batches fetched further ahead").
// So does a batch of parts whose fetches checksum the bytes around a stretch (checks_around), whose
// fetch is mostly that checksum.
std::size_t fetch_ahead(std::span<const Leaf> batch, std::size_t slots);

// Packs `leaves` in order into batches: as many as fit `target` bytes, or a slot's `capacity` once
// a batch holds a device decode (`decode_target` where it holds no CPU decode: see
// decode_batch_target) or a CPU decode (a single leaf may take up to `capacity`; at most kMaxBatch
// leaves) and whose device decodes fit a region of `decode_budget` bytes; sets each leaf's place
// in its slot. OutOfMemoryError naming the chunk when one leaf is larger than a slot.
std::vector<Batch> pack_batches(std::span<Leaf> leaves, std::size_t capacity, std::size_t target,
                                const DecodeCosts& costs, std::size_t decode_budget,
                                std::size_t decode_target = SIZE_MAX);

}  // namespace zarr_device::device_read
