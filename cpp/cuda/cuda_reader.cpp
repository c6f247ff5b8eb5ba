// The GPU read path: plan the chunks (and inner chunks of shards) a selection touches, fetch their
// bytes into a ring of pinned staging slots from many threads, copy each slot to the GPU in one
// transfer, decode there (nvCOMP) or place directly (kernels), while the next slot is filled.
#include <cuda_runtime_api.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "codecs/codec_chain.hpp"
#include "codecs/crc32c.hpp"
#include "cuda_check.hpp"
#include "cufile_api.hpp"
#include "device_memory.hpp"
#include "engine/thread_pool.hpp"
#include "kernels.hpp"
#include "nvcomp_api.hpp"
#include "place/chunk_grid.hpp"
#include "place/strided_copy.hpp"
#include "zarr_device/cuda.hpp"
#include "zarr_device/device.hpp"

namespace zarr_device {
namespace cuda {
namespace {

constexpr std::size_t kMaxBatch = 8192;       // leaves per slot
constexpr std::size_t kPieceBytes = 1 << 20;  // unit of parallel reads: small enough to balance
constexpr std::size_t kStagingAlignment = 256;
constexpr std::size_t kMaxDecodeRegions = 8;   // CUDA's hardware queues per device, by default
constexpr std::size_t kInPlace = SIZE_MAX;     // a leaf decoded straight into its destination
constexpr std::size_t kPlaced = SIZE_MAX - 1;  // a leaf already in its destination

std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

// How one stored chunk reaches its place on the GPU.
enum class Route {
  kFill,       // not stored: fill value
  kCopy,       // stored bytes are the elements: copy or scatter from staging
  kGpuDecode,  // one compressor nvCOMP decodes, then copy or scatter
  kCpuDecode,  // decoded on a CPU thread into staging, then copy or scatter
};

struct Leaf {
  std::string key;
  // The version of the stored value read: a shard's, opened when its index was read and shared
  // by its inner chunks; a whole chunk's, opened for its batch.
  std::shared_ptr<const ValueReader> value;
  std::uint64_t offset = 0;  // byte range of the stored value to fetch
  std::uint64_t length = 0;
  const codecs::CodecChain* chain = nullptr;
  const ChunkSpec* spec = nullptr;          // the array the array->bytes codec sees
  std::vector<DimSlice> selection;          // inside that array (after array->array codecs)
  StridedView destination;                  // device memory, likewise
  std::vector<DimSlice> decoded_selection;  // the same before array->array codecs
  StridedView decoded_destination;
  Route route = Route::kFill;
  GpuCodec codec = GpuCodec::kZstd;
  std::size_t header = 0;   // framing bytes nvCOMP does not take (numcodecs zlib/lz4)
  std::size_t trailer = 0;  // checksum and framing bytes at the end
  int crc32c = 0;           // crc32c codecs to verify (on the CPU) and strip
  bool swap = false;        // big-endian elements
  // Filled while batching:
  std::size_t staging = 0;         // offset in the slot
  std::size_t staged = 0;          // bytes in the slot
  std::size_t scratch = kInPlace;  // GPU decodes: offset in the decode scratch, or one of these
  std::size_t decode_scratch = 0;  // GPU decodes: bytes of decode scratch (0: decoded in place)
};

// A chunk changed between the plan of a read and its fetch (a writer replaced it): the read starts
// again from a new plan, so it never mixes two versions of one chunk.
class ValueChanged : public StoreError {
 public:
  using StoreError::StoreError;
};
constexpr int kReadAttempts = 3;

// What decoding chunks at once costs in device memory: nvCOMP's temporary memory, linear in the
// chunks of one call, then scratch for the chunks not decoded straight into place.
struct DecodeCost {
  std::size_t first = 0;      // temporary bytes for a call's first chunk
  std::size_t per_chunk = 0;  // for each further chunk
  // Region bytes of a call of `chunks` chunks (at least one) whose scratch totals `scratch`.
  [[nodiscard]] std::size_t region(std::size_t chunks, std::size_t scratch) const {
    return align_up(first + per_chunk * (chunks - 1), kStagingAlignment) + scratch;
  }
};

Leaf make_leaf(std::string key, const codecs::CodecChain& chain, std::vector<DimSlice> selection,
               const StridedView& destination) {
  Leaf leaf;
  leaf.key = std::move(key);
  leaf.chain = &chain;
  leaf.decoded_selection = selection;
  leaf.decoded_destination = destination;
  leaf.selection = std::move(selection);
  leaf.destination = destination;
  leaf.spec = &chain.map_to_encoded(leaf.selection, leaf.destination);
  return leaf;
}

// The decoded selection's shape and its C-contiguous strides (CPU decodes stage data so).
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> staged_layout(const Leaf& leaf) {
  std::vector<std::int64_t> counts;
  for (const auto& s : leaf.decoded_selection) counts.push_back(s.count);
  auto strides = place::c_strides(counts, leaf.spec->dtype->size);
  return {std::move(counts), std::move(strides)};
}

[[nodiscard]] std::size_t selection_bytes(const Leaf& leaf) {
  std::size_t n = leaf.spec->dtype->size;
  for (const auto& s : leaf.selection) n *= static_cast<std::size_t>(s.count);
  return n;
}

[[nodiscard]] bool in_place(const Leaf& leaf, std::size_t alignment) {
  return !leaf.swap && place::is_full(leaf.selection, leaf.spec->shape) &&
         place::is_c_contiguous(leaf.destination, leaf.spec->dtype->size) &&
         reinterpret_cast<std::uintptr_t>(leaf.destination.data) % alignment == 0;
}

// Decides how a chunk decoded by `chain` travels.
void choose_route(Leaf& leaf, const Nvcomp& nvcomp, GpuDecode policy) {
  const auto& chain = *leaf.chain;
  const auto layout = chain.array_to_bytes().plain_layout();
  if (!layout) {
    leaf.route = Route::kCpuDecode;
    return;
  }
  leaf.swap = *layout == Endian::kBig && leaf.spec->dtype->swap_unit > 1;
  auto b2b = chain.bytes_to_bytes();
  std::size_t n = b2b.size();
  while (n > 0 && b2b[n - 1]->name() == "crc32c") {
    ++leaf.crc32c;
    --n;
  }
  leaf.trailer = 4 * static_cast<std::size_t>(leaf.crc32c);
  if (n == 0) {
    leaf.route = Route::kCopy;
    return;
  }
  const std::string_view name = b2b[0]->name();
  if (n == 1 && (name == "zstd" || name == "numcodecs.zstd")) {
    leaf.codec = GpuCodec::kZstd;
  } else if (n == 1 && (name == "gzip" || name == "numcodecs.gzip")) {
    leaf.codec = GpuCodec::kGzip;
  } else if (n == 1 && name == "numcodecs.zlib") {
    leaf.codec = GpuCodec::kDeflate;
    leaf.header = 2;
    leaf.trailer += 4;
  } else if (n == 1 && name == "numcodecs.lz4") {
    leaf.codec = GpuCodec::kLz4;
    leaf.header = 4;
  } else {
    leaf.route = Route::kCpuDecode;
    return;
  }
  const bool allowed =
      policy == GpuDecode::kTrusted || (policy == GpuDecode::kChecked && leaf.crc32c > 0);
  leaf.route = allowed && nvcomp.decompressor(leaf.codec) ? Route::kGpuDecode : Route::kCpuDecode;
}

// Checks what the CPU can check cheaply before a GPU decoder, which trusts its input, sees the
// bytes. Returns false when the stream is not of the plain form the GPU path takes (several zstd
// frames, unknown sizes, ...): the chunk is then decoded on the CPU, which raises on corruption.
[[nodiscard]] bool gpu_can_take(const Leaf& leaf, std::span<const std::byte> stored,
                                std::size_t expected) {
  if (stored.size() < leaf.header + leaf.trailer) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(stored.data());
  const std::size_t n = stored.size() - 4 * static_cast<std::size_t>(leaf.crc32c);
  switch (leaf.codec) {
    case GpuCodec::kZstd:
      return ZSTD_getFrameContentSize(p, n) == expected && ZSTD_findFrameCompressedSize(p, n) == n;
    case GpuCodec::kGzip: {
      if (n < 18 || p[0] != 0x1f || p[1] != 0x8b || p[2] != 8) return false;
      const std::uint32_t isize = static_cast<std::uint32_t>(p[n - 4]) | (p[n - 3] << 8) |
                                  (p[n - 2] << 16) | (static_cast<std::uint32_t>(p[n - 1]) << 24);
      return isize == static_cast<std::uint32_t>(expected);
    }
    case GpuCodec::kDeflate:
      return n >= 6 && (p[0] & 0x0f) == 8 && (p[1] & 0x20) == 0 && ((p[0] << 8) | p[1]) % 31 == 0;
    case GpuCodec::kLz4: {
      if (n < 4) return false;
      const std::uint32_t size = static_cast<std::uint32_t>(p[0]) | (p[1] << 8) | (p[2] << 16) |
                                 (static_cast<std::uint32_t>(p[3]) << 24);
      return size == expected;
    }
  }
  return false;
}

struct PendingCheck {
  std::string key;
  std::size_t index;     // in the batch's status arrays
  std::size_t expected;  // decoded bytes
};

// The per-batch arrays nvCOMP reads and writes, at the end of each slot (host and device).
struct BatchArrays {
  const void** inputs;
  std::size_t* input_sizes;
  std::size_t* capacities;
  std::size_t* sizes;
  void** outputs;
  int* statuses;
  static constexpr std::size_t bytes() { return kMaxBatch * (5 * sizeof(void*) + sizeof(int)); }
  static BatchArrays at(std::byte* base) {
    BatchArrays a{};
    a.inputs = reinterpret_cast<const void**>(base);
    a.input_sizes = reinterpret_cast<std::size_t*>(base + kMaxBatch * 8);
    a.capacities = reinterpret_cast<std::size_t*>(base + kMaxBatch * 16);
    a.sizes = reinterpret_cast<std::size_t*>(base + kMaxBatch * 24);
    a.outputs = reinterpret_cast<void**>(base + kMaxBatch * 32);
    a.statuses = reinterpret_cast<int*>(base + kMaxBatch * 40);
    return a;
  }
};

struct Slot {
  std::byte* host = nullptr;    // pinned: data, then batch arrays
  std::byte* device = nullptr;  // the same layout on the GPU
  std::size_t capacity = 0;     // data bytes
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
  std::vector<PendingCheck> checks;
  bool busy = false;
};

// A device's staging ring, made once and kept: pinned allocations are slow and synchronise.
class DeviceContext {
 public:
  DeviceContext(int device, std::size_t staging_bytes, int slots)
      : device_(device), gpu_(get_device("cuda:" + std::to_string(device))) {
    // A slot's allocation (data, then the batch arrays) is a whole number of the driver's 2 MiB
    // pages, so the ring and the decode regions hold exactly twice the staging.
    constexpr std::size_t kPage = std::size_t{2} << 20;
    const std::size_t per_slot =
        align_up(std::max<std::size_t>(staging_bytes / std::max(slots, 1), kPage), kPage);
    slots_.resize(static_cast<std::size_t>(std::max(slots, 1)));
    for (auto& s : slots_) s.capacity = per_slot - BatchArrays::bytes();
    // The driver's own device memory for the ring's streams and the decoders' kernels (measured
    // on an H200: 4 MiB for 12 streams, 6-10 MiB in all) comes out of the decode memory, so that
    // a read's device memory stays within its output plus twice the staging.
    constexpr std::size_t kDriverShare = std::size_t{16} << 20;
    const std::size_t staged = per_slot * slots_.size();
    decode_memory_ = staged >= 8 * kDriverShare ? staged - kDriverShare : staged;
  }
  ~DeviceContext() {
    for (auto& s : slots_) release(s);
  }
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  // Slots are allocated when first used: a small read pins one slot, not the whole ring.
  Slot& slot(std::size_t b) {
    Slot& s = slots_[b % slots_.size()];
    if (!s.host) {
      const std::size_t total = s.capacity + BatchArrays::bytes();
      s.host = static_cast<std::byte*>(gpu_->allocate_host(total));
      try {
        s.device = static_cast<std::byte*>(gpu_->allocate(total));
        s.stream = static_cast<cudaStream_t>(gpu_->create_stream());
        s.done = static_cast<cudaEvent_t>(gpu_->create_event());
      } catch (...) {
        release(s);
        throw;
      }
      streams.push_back(s.stream);
    }
    return s;
  }

  // Frees what a slot holds (the Device's frees accept null) once its stream is idle.
  void release(Slot& s) noexcept {
    try {
      if (s.stream) gpu_->synchronize_stream(s.stream);
    } catch (...) {  // NOLINT(bugprone-empty-catch): a failed device is being let go of
    }
    gpu_->deallocate_host(s.host);
    gpu_->deallocate(s.device);
    gpu_->destroy_event(s.done);
    gpu_->destroy_stream(s.stream);
    const std::size_t capacity = s.capacity;
    s = Slot{};
    s.capacity = capacity;
  }

  std::mutex mutex;  // one read at a time per device
  std::vector<Slot> slots_;
  int device_;
  std::shared_ptr<Device> gpu_;
  std::vector<StreamHandle> streams;  // of the slots allocated
  // Decode memory (nvCOMP's temporary memory, then decoded chunks on their way to a strided
  // place): the staging's size in all, which keeps a read's device memory within the output plus
  // twice the staging, split into regions that batches use in turn; batches in different regions
  // decode at once. See Reader::prepare_decodes for how many.
  void use_decode_regions(std::size_t count) {
    if (regions_.size() == count) return;
    for (auto* s : streams) gpu_->synchronize_stream(s);  // their work may use the old regions
    regions_.clear();
    for (std::size_t i = 0; i < count; ++i) regions_.push_back(std::make_unique<SharedTemp>(gpu_));
    decode_budget = decode_memory_ / count / kStagingAlignment * kStagingAlignment;
  }
  SharedTemp& decode_region(std::size_t batch) { return *regions_[batch % regions_.size()]; }
  std::size_t decode_budget = 0;  // bytes per region

 private:
  std::size_t decode_memory_ = 0;
  std::vector<std::unique_ptr<SharedTemp>> regions_;
};

std::shared_ptr<DeviceContext> context_for(int device, const CudaReadOptions& options) {
  // Leaked: freeing pinned memory at exit races with the driver's own teardown.
  static auto* cache = new ContextCache<DeviceContext, std::pair<std::size_t, int>>();
  return cache->get(device, {options.staging_bytes, options.slots}, [&] {
    return std::make_shared<DeviceContext>(device, options.staging_bytes, options.slots);
  });
}

// Moves a C-ordered chunk of `spec` in device memory (`src`), restricted to `selection`, into
// `dst`: one copy when the layouts agree, else the strided kernel.
void place_on_device(const std::byte* src, const ChunkSpec& spec,
                     std::span<const DimSlice> selection, const StridedView& dst, bool swap,
                     cudaStream_t stream) {
  const std::size_t es = spec.dtype->size;
  const auto source = place::select_in_c_order(spec.shape, selection, es);
  if (!swap && place::is_full(selection, spec.shape) && place::is_c_contiguous(dst, es)) {
    ZD_CUDA_CHECK(cudaMemcpyAsync(dst.data, src, spec.nbytes(), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  launch_strided_copy(
      plan_strided_copy(src + source.offset, source.strides, dst, es, swap, spec.dtype->swap_unit),
      stream);
  ZD_CUDA_CHECK(cudaGetLastError());
}

class Reader {
 public:
  Reader(const Array& array, int device, const CudaReadOptions& options)
      : array_(array),
        device_(device),
        options_(options),
        nvcomp_(Nvcomp::instance()),
        workers_(options.io.threads > 0 ? static_cast<std::size_t>(options.io.threads)
                                        : std::max(1U, std::thread::hardware_concurrency())),
        pool_(engine::ThreadPool::shared(workers_)) {}

  void read(std::span<const DimSlice> selection, void* out, std::size_t out_nbytes);
  nlohmann::json measure_decode(std::span<const DimSlice> selection, int repeats);

 private:
  std::vector<Leaf> plan(std::span<const DimSlice> selection, const StridedView& out);
  // GPUDirect Storage: reads the leaves that are stored as their elements and land whole and
  // contiguous straight from their files into place; returns those it could not (for the ring).
  std::vector<Leaf> read_from_files(std::vector<Leaf> leaves, const FileBacked& files);
  // A batch's CPU stage (reads into the pinned slot, checks) and its GPU stage (one transfer,
  // decoding, placing). The CPU stage of the next batch runs while this one is submitted.
  void fetch(DeviceContext& ctx, Slot& slot, std::span<Leaf> batch);
  void check_staged(DeviceContext& ctx, Slot& slot, Leaf& leaf);
  // Sizes what GPU decodes cost and splits the decode memory into regions for them.
  void prepare_decodes(DeviceContext& ctx, std::span<Leaf> leaves);
  void submit(DeviceContext& ctx, Slot& slot, std::span<Leaf> batch, std::size_t region);
  void finish(Slot& slot);
  [[nodiscard]] std::string where(const std::string& key) const {
    return array_.describe() + ", chunk '" + key + "'";
  }

  const Array& array_;
  int device_;
  CudaReadOptions options_;
  const Nvcomp& nvcomp_;
  std::array<DecodeCost, 4> costs_{};  // by GpuCodec
  std::size_t workers_;
  engine::ThreadPool& pool_;
};

std::vector<Leaf> Reader::plan(std::span<const DimSlice> selection, const StridedView& out) {
  const auto& meta = array_.metadata();
  const auto& chain = array_.chain();
  const place::GridIntersection grid(selection, meta.chunk_shape);
  const auto* shard = chain.shard_layout();
  std::vector<std::vector<Leaf>> per_chunk(grid.size());
  const Store& store = *array_.store();
  pool_.parallel_for(grid.size(), workers_, [&](std::size_t i) {
    place::GridIntersection::Item item;
    grid.at(i, item);
    const std::string key = join_key(array_.path(), meta.chunk_key_encoding.key(item.chunk));
    try {
      const StridedView region = place::subview(out, item.out_offset, item.count);
      auto& leaves = per_chunk[i];
      if (!shard) {
        const auto size = store.size(key);
        Leaf leaf = make_leaf(key, chain, item.within, region);
        if (size) {
          leaf.length = *size;
          choose_route(leaf, nvcomp_, options_.gpu_decode);
        }
        leaves.push_back(std::move(leaf));
        return;
      }
      const auto& inner = shard->inner();
      // The shard's index and its chunks come from one open version of it.
      const auto value = store.open(key);
      if (!value) {
        leaves.push_back(make_leaf(key, chain, item.within, region));
        return;
      }
      const RangeReader reader = [&](std::int64_t offset,
                                     std::int64_t length) -> std::optional<Buffer> {
        if (offset < 0 || length < 0) return std::nullopt;
        return value->read(static_cast<std::uint64_t>(offset), static_cast<std::uint64_t>(length));
      };
      const auto index = shard->read_index(reader, value->size());
      const auto cps = shard->chunks_per_shard();
      const place::GridIntersection inner_grid(item.within, inner.spec().shape);
      place::GridIntersection::Item sub;
      for (std::size_t j = 0; j < inner_grid.size(); ++j) {
        inner_grid.at(j, sub);
        std::size_t linear = 0;
        for (std::size_t d = 0; d < sub.chunk.size(); ++d) {
          linear =
              linear * static_cast<std::size_t>(cps[d]) + static_cast<std::size_t>(sub.chunk[d]);
        }
        Leaf leaf =
            make_leaf(key, inner, sub.within, place::subview(region, sub.out_offset, sub.count));
        if (index[linear]) {
          leaf.value = value;
          leaf.offset = index[linear]->offset;
          leaf.length = index[linear]->nbytes;
          choose_route(leaf, nvcomp_, options_.gpu_decode);
        }
        leaves.push_back(std::move(leaf));
      }
    } catch (Error& e) {
      e.add_context(where(key));
      throw;
    }
  });
  std::vector<Leaf> leaves;
  for (auto& chunk : per_chunk) {
    for (auto& leaf : chunk) leaves.push_back(std::move(leaf));
  }
  return leaves;
}

std::vector<Leaf> Reader::read_from_files(std::vector<Leaf> leaves, const FileBacked& files) {
  constexpr std::uint64_t kGdsPiece = std::uint64_t{16} << 20;
  const auto& cufile = CuFile::instance();
  std::map<std::string, std::unique_ptr<CuFile::File>> opened;
  std::map<std::string, const Leaf*> first_leaf;
  for (const auto& leaf : leaves) {
    opened.emplace(leaf.key, nullptr);
    first_leaf.emplace(leaf.key, &leaf);
  }
  std::vector<std::map<std::string, std::unique_ptr<CuFile::File>>::iterator> slots;
  for (auto it = opened.begin(); it != opened.end(); ++it) slots.push_back(it);
  pool_.parallel_for(slots.size(), workers_, [&](std::size_t i) {
    const std::string& key = slots[i]->first;
    const Leaf& leaf = *first_leaf.at(key);
    // GPUDirect needs O_DIRECT; file systems without it (tmpfs) still work in compat mode. A
    // shard's chunks come from the version whose index was read; a chunk's file must still be
    // the size planned.
    const int fd = leaf.value ? leaf.value->open_file(true) : files.open_file(key, true);
    if (fd < 0) return;
    struct stat st {};
    if (!leaf.value &&
        (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) != leaf.length)) {
      ::close(fd);
      throw ValueChanged(where(key) + ": the chunk was replaced while it was read");
    }
    try {
      slots[i]->second = cufile.open(fd, key);
    } catch (const Error&) {
      // Not registrable (file system, driver): those chunks take the staging ring instead.
    }
  });
  struct Piece {
    std::size_t leaf;
    std::uint64_t offset;
    std::uint64_t length;
  };
  std::vector<Piece> pieces;
  std::vector<Leaf> rest;
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    if (!opened[leaves[i].key]) continue;
    for (std::uint64_t o = 0; o < leaves[i].length; o += kGdsPiece) {
      pieces.push_back({i, o, std::min(kGdsPiece, leaves[i].length - o)});
    }
  }
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  pool_.parallel_for(pieces.size(), workers_, [&](std::size_t p) {
    const auto& piece = pieces[p];
    const auto& leaf = leaves[piece.leaf];
    try {
      ZD_CUDA_CHECK(cudaSetDevice(device_));
      const std::size_t got = opened.at(leaf.key)->read(
          leaf.destination.data, piece.length, static_cast<off_t>(leaf.offset + piece.offset),
          static_cast<off_t>(piece.offset));
      if (got != piece.length) throw CodecError("chunk changed or vanished while it was read");
    } catch (Error& e) {
      e.add_context(where(leaf.key));
      throw;
    }
  });
  for (auto& leaf : leaves) {
    if (!opened[leaf.key]) rest.push_back(std::move(leaf));
  }
  return rest;
}

void Reader::prepare_decodes(DeviceContext& ctx, std::span<Leaf> leaves) {
  std::size_t max_chunk = 0;
  std::array<bool, 4> present{};
  for (const auto& leaf : leaves) {
    if (leaf.route != Route::kGpuDecode) continue;
    max_chunk = std::max(max_chunk, leaf.spec->nbytes());
    present[static_cast<std::size_t>(leaf.codec)] = true;
  }
  if (max_chunk == 0) return;
  for (std::size_t c = 0; c < present.size(); ++c) {
    if (!present[c]) continue;
    const auto* d = nvcomp_.decompressor(static_cast<GpuCodec>(c));
    const std::size_t first = d->temp_size(1, max_chunk, max_chunk);
    costs_[c] = {first,
                 std::max<std::size_t>(d->temp_size(2, max_chunk, 2 * max_chunk) - first, 1)};
  }
  double staged = 0;
  double cost = 0;
  for (auto& leaf : leaves) {
    if (leaf.route != Route::kGpuDecode) continue;
    const auto* d = nvcomp_.decompressor(leaf.codec);
    leaf.decode_scratch =
        in_place(leaf, d->output_alignment) ? 0 : align_up(leaf.spec->nbytes(), kStagingAlignment);
    staged += static_cast<double>(align_up(leaf.length, kStagingAlignment));
    cost += static_cast<double>(costs_[static_cast<std::size_t>(leaf.codec)].per_chunk +
                                leaf.decode_scratch);
  }
  // nvCOMP decodes a chunk per thread block: its speed follows the chunks decoded at once, not how
  // they are split into calls (measured on an H200, 256 KiB zstd chunks: about 17 GB/s with 512
  // in flight, 30 with 1024, 95 with 8192), while its temporary memory grows with them (about
  // three times a chunk per chunk). A batch is cut where its slot or its decode region is full,
  // and the batches of R regions decode at once: min(R x a slot's chunks, the decode memory's
  // chunks) in flight. The fewest regions that reach the memory's limit make the largest calls;
  // more streams than CUDA's hardware queues would share them.
  const auto slots = static_cast<double>(ctx.slots_.size());
  const auto regions = static_cast<std::size_t>(std::ceil(slots * staged / cost));
  ctx.use_decode_regions(
      std::clamp<std::size_t>(regions, 1, std::min(ctx.slots_.size(), kMaxDecodeRegions)));
}

// Bytes a leaf needs in the staging slot.
std::size_t staged_bytes(const Leaf& leaf) {
  switch (leaf.route) {
    case Route::kFill:
      return leaf.spec->dtype->size;
    case Route::kCopy:
    case Route::kGpuDecode:
      return leaf.length;
    case Route::kCpuDecode:
      return selection_bytes(leaf);
  }
  return 0;
}

void Reader::finish(Slot& slot) {
  if (!slot.busy) return;
  slot.busy = false;
  ZD_CUDA_CHECK(cudaEventSynchronize(slot.done));
  const auto arrays = BatchArrays::at(slot.host + slot.capacity);
  for (const auto& check : slot.checks) {
    const int status = arrays.statuses[check.index];
    const std::size_t size = arrays.sizes[check.index];
    if (status != 0 || size != check.expected) {
      throw CodecError(where(check.key) + ": the GPU decoder reported status " +
                       std::to_string(status) + " and " + std::to_string(size) +
                       " bytes, expected " + std::to_string(check.expected));
    }
  }
  slot.checks.clear();
}

// Checks on the CPU what the GPU will trust in a leaf's staged bytes: checksums, framing, sizes.
// A leaf the GPU path does not take is decoded here instead (which raises the CPU's typed error
// when it is corrupt) and copied to its place.
void Reader::check_staged(DeviceContext& ctx, Slot& slot, Leaf& leaf) {
  std::span<const std::byte> stored{slot.host + leaf.staging, leaf.length};
  for (int c = 0; c < leaf.crc32c; ++c) {
    const std::size_t n = stored.size();
    if (n < 4) throw CodecError("crc32c: chunk of " + std::to_string(n) + " bytes is too short");
    std::uint32_t want = 0;
    std::memcpy(&want, stored.data() + n - 4, 4);
    const std::uint32_t got = codecs::crc32c(stored.first(n - 4));
    if (got != want) {
      char text[64];
      std::snprintf(text, sizeof text, "crc32c mismatch: stored %08x, computed %08x", want, got);
      throw ChecksumError(text);
    }
    stored = stored.first(n - 4);
  }
  if (leaf.route == Route::kCopy && stored.size() != leaf.spec->nbytes()) {
    throw CodecError("chunk holds " + std::to_string(stored.size()) + " bytes, expected " +
                     std::to_string(leaf.spec->nbytes()) + " for its shape and data type");
  }
  if (leaf.route != Route::kGpuDecode ||
      gpu_can_take(leaf, {slot.host + leaf.staging, leaf.length}, leaf.spec->nbytes())) {
    return;
  }
  // Decode on the CPU into pageable memory, then copy that region over.
  Buffer bytes = Buffer::copy_of({slot.host + leaf.staging, leaf.length});
  const std::size_t nbytes = selection_bytes(leaf);
  ByteArray decoded(nbytes);
  auto [counts, strides] = staged_layout(leaf);
  leaf.chain->decode_into(bytes, leaf.decoded_selection,
                          StridedView{decoded.data(), counts, strides});
  // Rare (unusual framing): a synchronous detour through a temporary device buffer.
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  const DeviceBuffer tmp(ctx.gpu_, nbytes);
  auto* dev = static_cast<std::byte*>(tmp.data());
  ZD_CUDA_CHECK(cudaMemcpy(dev, decoded.data(), nbytes, cudaMemcpyHostToDevice));
  launch_strided_copy(
      plan_strided_copy(dev, strides, leaf.decoded_destination, leaf.spec->dtype->size, false, 1),
      nullptr);
  const cudaError_t launched = cudaGetLastError();
  const cudaError_t synced = cudaDeviceSynchronize();
  ZD_CUDA_CHECK(launched);
  ZD_CUDA_CHECK(synced);
  leaf.scratch = kPlaced;
}

void Reader::fetch(DeviceContext& ctx, Slot& slot, std::span<Leaf> batch) {
  const Store& store = *array_.store();
  // 0. One open version of each whole chunk (shards were opened when planned), kept while the
  // batch is read, so every piece of a chunk comes from the same version of it.
  auto from_store = [](const Leaf& l) { return l.route != Route::kFill; };
  std::vector<std::size_t> opened;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (from_store(batch[i]) && !batch[i].value) opened.push_back(i);
  }
  struct Close {
    std::span<Leaf> batch;
    const std::vector<std::size_t>& opened;
    ~Close() {
      for (const std::size_t i : opened) batch[i].value.reset();
    }
  } close{batch, opened};
  pool_.parallel_for(opened.size(), workers_, [&](std::size_t i) {
    auto& leaf = batch[opened[i]];
    leaf.value = store.open(leaf.key);
    if (!leaf.value || leaf.value->size() != leaf.offset + leaf.length) {
      throw ValueChanged(where(leaf.key) + ": the chunk was replaced while it was read");
    }
  });
  // 1. Fetch: pieces of about kPieceBytes, read in parallel into the pinned slot. A piece holds
  // whole leaves stored back to back (a whole shard is then a few large reads, not thousands of
  // small ones) and checks them while their bytes are still in its core's cache; a leaf longer
  // than a piece is read in parts and checked once they are all in.
  struct Piece {
    std::size_t first;     // the piece's leaves: [first, end)
    std::size_t end;       //
    std::uint64_t offset;  // where the piece starts in the first leaf's stored value
    std::size_t length;    // bytes to read (0: a fill element or a CPU decode)
    bool checks_leaves;    // holds its leaves whole
  };
  auto staged_from_store = [](const Leaf& l) {
    return l.route == Route::kCopy || l.route == Route::kGpuDecode;
  };
  std::vector<Piece> pieces;
  std::vector<std::size_t> long_leaves;
  for (std::size_t i = 0; i < batch.size();) {
    const auto& leaf = batch[i];
    if (!staged_from_store(leaf)) {
      pieces.push_back({i, i + 1, 0, 0, false});
      ++i;
    } else if (leaf.length > kPieceBytes) {
      for (std::uint64_t o = 0; o < leaf.length; o += kPieceBytes) {
        pieces.push_back(
            {i, i + 1, o,
             static_cast<std::size_t>(std::min<std::uint64_t>(kPieceBytes, leaf.length - o)),
             false});
      }
      long_leaves.push_back(i);
      ++i;
    } else {
      std::size_t j = i + 1;
      std::uint64_t length = leaf.length;
      while (j < batch.size() && staged_from_store(batch[j]) && batch[j].key == leaf.key &&
             batch[j].offset == leaf.offset + length && batch[j].staging == leaf.staging + length &&
             length + batch[j].length <= kPieceBytes) {
        length += batch[j].length;
        ++j;
      }
      pieces.push_back({i, j, 0, static_cast<std::size_t>(length), true});
      i = j;
    }
  }
  pool_.parallel_for(pieces.size(), workers_, [&](std::size_t p) {
    const auto& piece = pieces[p];
    std::size_t at = piece.first;
    try {
      auto& leaf = batch[at];
      std::byte* dst = slot.host + leaf.staging;
      switch (leaf.route) {
        case Route::kFill:
          std::memcpy(dst, leaf.chain->spec().fill_value.data(), leaf.spec->dtype->size);
          return;
        case Route::kCpuDecode: {
          auto stored = leaf.value->read(leaf.offset, leaf.length);
          if (stored.size() != leaf.length) {
            throw CodecError("chunk is shorter than its shard index says");
          }
          auto [counts, strides] = staged_layout(leaf);
          leaf.chain->decode_into(stored, leaf.decoded_selection,
                                  StridedView{dst, counts, strides});
          return;
        }
        default: {
          const auto got =
              leaf.value->read_into(leaf.offset + piece.offset, {dst + piece.offset, piece.length});
          if (got != piece.length) throw CodecError("chunk is shorter than its shard index says");
          if (!piece.checks_leaves) return;
          for (; at < piece.end; ++at) check_staged(ctx, slot, batch[at]);
        }
      }
    } catch (Error& e) {
      e.add_context(where(batch[at].key));
      throw;
    }
  });
  // 2. Check the leaves read in parts.
  pool_.parallel_for(long_leaves.size(), workers_, [&](std::size_t i) {
    auto& leaf = batch[long_leaves[i]];
    try {
      check_staged(ctx, slot, leaf);
    } catch (Error& e) {
      e.add_context(where(leaf.key));
      throw;
    }
  });
}

void Reader::submit(DeviceContext& ctx, Slot& slot, std::span<Leaf> batch,
                    std::size_t region_index) {
  // 3. One transfer of the slot's data, then decode and place on the GPU.
  std::size_t used = 0;
  for (const auto& leaf : batch) used = std::max(used, leaf.staging + leaf.staged);
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  ZD_CUDA_CHECK(cudaMemcpyAsync(slot.device, slot.host, used, cudaMemcpyHostToDevice, slot.stream));

  // Group the GPU decodes by codec. A group is decoded in as few calls as fit the batch's decode
  // region (a batch is cut where its region is full, so one call unless codecs are mixed).
  std::map<GpuCodec, std::vector<std::size_t>> decodes;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    auto& leaf = batch[i];
    if (leaf.route != Route::kGpuDecode || leaf.scratch == kPlaced) continue;
    decodes[leaf.codec].push_back(i);
  }
  auto host_arrays = BatchArrays::at(slot.host + slot.capacity);
  auto device_arrays = BatchArrays::at(slot.device + slot.capacity);
  std::size_t next = 0;
  for (const auto& group : decodes) {
    const GpuCodec codec = group.first;
    const std::vector<std::size_t>& members = group.second;  // named: the lambda below uses it
    const auto* d = nvcomp_.decompressor(codec);
    std::size_t max_chunk = 0;
    for (std::size_t i : members) max_chunk = std::max(max_chunk, batch[i].spec->nbytes());
    struct Call {
      std::size_t begin, end;  // in members
      std::size_t temp_bytes;  // then the scratch, from align_up(temp_bytes)
      std::size_t region_bytes;
    };
    std::vector<Call> calls;
    std::size_t region_bytes = 0;
    const auto& cost = costs_[static_cast<std::size_t>(codec)];
    // Greedy calls within the budget; then again with calls of equal length, so that a group
    // a little over the budget is not decoded as one full call and one small one.
    auto plan_calls = [&](std::size_t most) {
      calls.clear();
      region_bytes = 0;
      for (std::size_t b = 0; b < members.size();) {
        std::size_t e = b;
        std::size_t scratch = 0;
        for (; e < members.size() && e - b < most; ++e) {
          auto& leaf = batch[members[e]];
          const std::size_t own = leaf.decode_scratch;
          if (e > b && cost.region(e - b + 1, scratch + own) > ctx.decode_budget) break;
          leaf.scratch = own ? scratch : kInPlace;
          scratch += own;
        }
        const std::size_t temp = d->temp_size(e - b, max_chunk, (e - b) * max_chunk);
        calls.push_back({b, e, temp, align_up(temp, kStagingAlignment) + scratch});
        region_bytes = std::max(region_bytes, calls.back().region_bytes);
        b = e;
      }
    };
    plan_calls(SIZE_MAX);
    if (calls.size() > 1) plan_calls((members.size() + calls.size() - 1) / calls.size());
    auto& region = ctx.decode_region(region_index);
    std::byte* memory = region.acquire(region_bytes, slot.stream, ctx.streams);
    const std::size_t first = next;
    for (const auto& call : calls) {
      std::byte* scratch = memory + align_up(call.temp_bytes, kStagingAlignment);
      for (std::size_t m = call.begin; m < call.end; ++m, ++next) {
        const auto& leaf = batch[members[m]];
        const std::size_t expected = leaf.spec->nbytes();
        host_arrays.inputs[next] = slot.device + leaf.staging + leaf.header;
        host_arrays.input_sizes[next] = leaf.length - leaf.header - leaf.trailer;
        host_arrays.capacities[next] = expected;
        host_arrays.outputs[next] = leaf.scratch == kInPlace
                                        ? static_cast<void*>(leaf.destination.data)
                                        : scratch + leaf.scratch;
        slot.checks.push_back({leaf.key, next, expected});
      }
    }
    const std::size_t count = next - first;
    // The arrays travel with the batch (small: a few entries per chunk).
    ZD_CUDA_CHECK(cudaMemcpyAsync(device_arrays.inputs + first, host_arrays.inputs + first,
                                  count * sizeof(void*), cudaMemcpyHostToDevice, slot.stream));
    ZD_CUDA_CHECK(cudaMemcpyAsync(device_arrays.input_sizes + first,
                                  host_arrays.input_sizes + first, count * sizeof(std::size_t),
                                  cudaMemcpyHostToDevice, slot.stream));
    ZD_CUDA_CHECK(cudaMemcpyAsync(device_arrays.capacities + first, host_arrays.capacities + first,
                                  count * sizeof(std::size_t), cudaMemcpyHostToDevice,
                                  slot.stream));
    ZD_CUDA_CHECK(cudaMemcpyAsync(device_arrays.outputs + first, host_arrays.outputs + first,
                                  count * sizeof(void*), cudaMemcpyHostToDevice, slot.stream));
    for (const auto& call : calls) {
      const std::size_t at = first + call.begin;
      const std::size_t n = call.end - call.begin;
      d->decompress(device_arrays.inputs + at, device_arrays.input_sizes + at,
                    device_arrays.capacities + at, device_arrays.sizes + at, n,
                    call.temp_bytes ? memory : nullptr, call.temp_bytes, device_arrays.outputs + at,
                    device_arrays.statuses + at, slot.stream);
      // Chunks decoded into the scratch move to their place before the next call reuses it.
      std::byte* scratch = memory + align_up(call.temp_bytes, kStagingAlignment);
      for (std::size_t m = call.begin; m < call.end; ++m) {
        auto& leaf = batch[members[m]];
        if (leaf.scratch == kInPlace) continue;
        place_on_device(scratch + leaf.scratch, *leaf.spec, leaf.selection, leaf.destination,
                        leaf.swap, slot.stream);
        leaf.scratch = kPlaced;
      }
    }
    region.release(slot.stream);
    ZD_CUDA_CHECK(cudaMemcpyAsync(host_arrays.statuses + first, device_arrays.statuses + first,
                                  count * sizeof(int), cudaMemcpyDeviceToHost, slot.stream));
    ZD_CUDA_CHECK(cudaMemcpyAsync(host_arrays.sizes + first, device_arrays.sizes + first,
                                  count * sizeof(std::size_t), cudaMemcpyDeviceToHost,
                                  slot.stream));
  }

  // Whole chunks that land in contiguous, adjacent places are copied together.
  struct CopyMerger {
    cudaStream_t stream;
    std::byte* dst = nullptr;
    const std::byte* src = nullptr;
    std::size_t n = 0;
    void add(std::byte* d, const std::byte* s, std::size_t bytes) {
      if (n && d == dst + n && s == src + n) {
        n += bytes;
        return;
      }
      flush();
      dst = d;
      src = s;
      n = bytes;
    }
    void flush() {
      if (n) ZD_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream));
      n = 0;
    }
  } copies{slot.stream};
  for (auto& leaf : batch) {
    if (leaf.scratch == kPlaced) continue;
    const std::byte* staged = slot.device + leaf.staging;
    const std::size_t es = leaf.spec->dtype->size;
    switch (leaf.route) {
      case Route::kFill: {
        const auto& fill = leaf.chain->spec().fill_value;
        const bool zero =
            std::all_of(fill.begin(), fill.end(), [](std::byte b) { return b == std::byte{0}; });
        const auto& dst = leaf.decoded_destination;
        if (zero && place::is_c_contiguous(dst, es)) {
          std::size_t n = es;
          for (auto e : dst.shape) n *= static_cast<std::size_t>(e);
          ZD_CUDA_CHECK(cudaMemsetAsync(dst.data, 0, n, slot.stream));
        } else {
          const std::vector<std::int64_t> zeros(dst.shape.size(), 0);
          launch_strided_copy(plan_strided_copy(staged, zeros, dst, es, false, 1), slot.stream);
          ZD_CUDA_CHECK(cudaGetLastError());
        }
        break;
      }
      case Route::kCopy:
        if (!leaf.swap && place::is_full(leaf.selection, leaf.spec->shape) &&
            place::is_c_contiguous(leaf.destination, es)) {
          copies.add(leaf.destination.data, staged, leaf.spec->nbytes());
          break;
        }
        place_on_device(staged, *leaf.spec, leaf.selection, leaf.destination, leaf.swap,
                        slot.stream);
        break;
      case Route::kGpuDecode:  // decoded in place or placed after its call
        break;
      case Route::kCpuDecode: {
        const auto [counts, strides] = staged_layout(leaf);
        const auto& dst = leaf.decoded_destination;
        if (place::is_c_contiguous(dst, es)) {
          ZD_CUDA_CHECK(cudaMemcpyAsync(dst.data, staged, leaf.staged, cudaMemcpyDeviceToDevice,
                                        slot.stream));
        } else {
          launch_strided_copy(plan_strided_copy(staged, strides, dst, es, false, 1), slot.stream);
          ZD_CUDA_CHECK(cudaGetLastError());
        }
        break;
      }
    }
  }
  copies.flush();
  ZD_CUDA_CHECK(cudaEventRecord(slot.done, slot.stream));
  slot.busy = true;
}

void Reader::read(std::span<const DimSlice> selection, void* out, std::size_t out_nbytes) {
  const std::size_t es = array_.metadata().dtype->size;
  const auto shape = check_selection_and_buffer(selection, array_.metadata().shape, es, out_nbytes,
                                                "output buffer holds");
  check_device(device_);
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  if (options_.consumer_stream != 0) {
    // `out` may have been freed and reallocated on that stream: let its earlier work finish.
    ZD_CUDA_CHECK(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(options_.consumer_stream)));
  }
  const auto context = context_for(device_, options_);
  auto& ctx = *context;
  std::lock_guard lock(ctx.mutex);
  const StridedView out_view{static_cast<std::byte*>(out), shape, place::c_strides(shape, es)};
  auto leaves = plan(selection, out_view);
  const auto* files = dynamic_cast<const FileBacked*>(array_.store().get());
  if (files && files->io() == LocalIo::kGds && CuFile::instance().available()) {
    std::vector<Leaf> direct;
    std::vector<Leaf> staged;
    for (auto& leaf : leaves) {
      const bool eligible = leaf.route == Route::kCopy && leaf.crc32c == 0 && !leaf.swap &&
                            leaf.length == leaf.spec->nbytes() &&
                            place::is_full(leaf.selection, leaf.spec->shape) &&
                            place::is_c_contiguous(leaf.destination, leaf.spec->dtype->size);
      (eligible ? direct : staged).push_back(std::move(leaf));
    }
    for (auto& leaf : read_from_files(std::move(direct), *files)) staged.push_back(std::move(leaf));
    leaves = std::move(staged);
  }

  // Pack the leaves into batches: as many as fit a slot, and whose GPU decodes fit a region.
  prepare_decodes(ctx, leaves);
  const std::size_t capacity = ctx.slots_.front().capacity;  // every slot's
  std::vector<std::pair<std::size_t, std::size_t>> batches;
  for (std::size_t begin = 0; begin < leaves.size();) {
    std::size_t used = 0;
    std::size_t end = begin;
    std::size_t decodes = 0;
    std::size_t scratch = 0;
    while (end < leaves.size() && end - begin < kMaxBatch) {
      auto& leaf = leaves[end];
      const std::size_t need = staged_bytes(leaf);
      const std::size_t at = align_up(used, kStagingAlignment);
      if (at + need > capacity) {
        if (end == begin) {
          throw OutOfMemoryError(where(leaf.key) + ": chunk of " + std::to_string(need) +
                                 " bytes is larger than a staging slot (" +
                                 std::to_string(capacity) + " bytes); raise staging_bytes");
        }
        break;
      }
      if (leaf.route == Route::kGpuDecode) {
        const auto& cost = costs_[static_cast<std::size_t>(leaf.codec)];
        if (decodes > 0 &&
            cost.region(decodes + 1, scratch + leaf.decode_scratch) > ctx.decode_budget) {
          break;
        }
        ++decodes;
        scratch += leaf.decode_scratch;
      }
      leaf.staging = at;
      leaf.staged = need;
      used = at + need;
      ++end;
    }
    batches.emplace_back(begin, end);
    begin = end;
  }
  // Tells the store which bytes the next batch needs, so cold data is being read from the disk
  // while this batch is copied and decoded.
  auto announce = [&](std::size_t b) {
    if (b >= batches.size()) return;
    const Store& store = *array_.store();
    for (std::size_t i = batches[b].first; i < batches[b].second;) {
      const auto& leaf = leaves[i];
      std::size_t j = i + 1;
      std::uint64_t end = leaf.offset + leaf.length;
      while (j < batches[b].second && leaves[j].key == leaf.key && leaves[j].offset == end) {
        end += leaves[j].length;
        ++j;
      }
      if (leaf.route == Route::kCopy || leaf.route == Route::kGpuDecode) {
        store.will_need(leaf.key, leaf.offset, end - leaf.offset);
      }
      i = j;
    }
  };

  // Batch b uses slot b % slots. The CPU stage of batch b + 1 is queued on the pool behind the
  // helpers of batch b's, so the threads that finish their share of b's reads go on to b + 1's
  // instead of waiting for b's slowest read (with one slot there is nothing to overlap).
  const std::size_t lookahead = ctx.slots_.size() > 1 ? 1 : 0;
  auto slot_of = [&](std::size_t b) -> Slot& { return ctx.slot(b); };
  auto batch_of = [&](std::size_t b) {
    return std::span<Leaf>{leaves.data() + batches[b].first, batches[b].second - batches[b].first};
  };
  std::deque<std::future<void>> fetching;
  std::size_t started = 0;
  try {
    announce(0);
    for (std::size_t b = 0; b < batches.size(); ++b) {
      while (started < batches.size() && started <= b + lookahead) {
        Slot& slot = slot_of(started);
        finish(slot);  // its previous batch is off the slot and checked
        announce(started + 1);
        fetching.push_back(pool_.submit(
            [this, &ctx, &slot, batch = batch_of(started)] { fetch(ctx, slot, batch); }));
        ++started;
      }
      auto fetched = std::move(fetching.front());
      fetching.pop_front();
      fetched.get();
      submit(ctx, slot_of(b), batch_of(b), b);
    }
    for (auto& slot : ctx.slots_) finish(slot);
  } catch (...) {
    // Let queued reads end (they write into the slots and read `leaves`), then drain what was
    // enqueued on the GPU, so nothing writes into `out` after we return.
    for (auto& f : fetching) {
      try {
        f.get();
      } catch (...) {  // NOLINT(bugprone-empty-catch): the first error is the one reported
      }
    }
    for (auto& slot : ctx.slots_) {
      if (slot.stream) cudaStreamSynchronize(slot.stream);
      slot.busy = false;
      slot.checks.clear();
    }
    throw;
  }
}

// Times the GPU decode stage alone: every chunk of the selection that nvCOMP would decode is put
// in device memory first, then decoded in batches of kMaxBatch (as a read does, without the
// fetches and copies around it). Chunks are decoded into one device buffer; nothing is placed.
nlohmann::json Reader::measure_decode(std::span<const DimSlice> selection, int repeats) {
  check_selection(selection, array_.metadata().shape);
  check_device(device_);
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  std::vector<std::int64_t> shape;
  for (const auto& s : selection) shape.push_back(s.count);
  const StridedView nowhere{nullptr, shape, place::c_strides(shape, array_.metadata().dtype->size)};
  auto leaves = plan(selection, nowhere);
  std::erase_if(leaves, [](const Leaf& l) { return l.route != Route::kGpuDecode; });
  if (leaves.empty()) throw UsageError("no chunk of the selection is decoded on the GPU");
  const GpuCodec codec = leaves.front().codec;
  std::erase_if(leaves, [&](const Leaf& l) { return l.codec != codec; });
  const auto* d = nvcomp_.decompressor(codec);
  std::size_t in_bytes = 0;
  std::size_t out_bytes = 0;
  for (auto& leaf : leaves) {
    leaf.staging = in_bytes;
    in_bytes += align_up(leaf.length, kStagingAlignment);
    leaf.scratch = out_bytes;
    out_bytes += align_up(leaf.spec->nbytes(), kStagingAlignment);
  }
  const auto gpu = get_device("cuda:" + std::to_string(device_));
  DeviceScratch input(gpu), output(gpu), temp(gpu), arrays(gpu);
  std::byte* in = input.reserve(in_bytes);
  std::byte* out = output.reserve(out_bytes);
  {  // stage the compressed bytes
    std::vector<std::byte> host(in_bytes);
    pool_.parallel_for(leaves.size(), workers_, [&](std::size_t i) {
      const auto& leaf = leaves[i];
      const auto got = array_.store()->get_range_into(leaf.key, leaf.offset,
                                                      {host.data() + leaf.staging, leaf.length});
      if (!got || *got != leaf.length) throw CodecError(where(leaf.key) + ": short read");
    });
    ZD_CUDA_CHECK(cudaMemcpy(in, host.data(), in_bytes, cudaMemcpyHostToDevice));
  }
  const std::size_t n = leaves.size();
  std::vector<const void*> inputs(n);
  std::vector<std::size_t> input_sizes(n), capacities(n);
  std::vector<void*> outputs(n);
  std::size_t max_chunk = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& leaf = leaves[i];
    inputs[i] = in + leaf.staging + leaf.header;
    input_sizes[i] = leaf.length - leaf.header - leaf.trailer;
    capacities[i] = leaf.spec->nbytes();
    outputs[i] = out + leaf.scratch;
    max_chunk = std::max(max_chunk, capacities[i]);
  }
  std::byte* dev = arrays.reserve(n * (5 * sizeof(void*) + sizeof(int)) + 64);
  auto* d_inputs = reinterpret_cast<const void**>(dev);
  auto* d_input_sizes = reinterpret_cast<std::size_t*>(dev + n * 8);
  auto* d_capacities = reinterpret_cast<std::size_t*>(dev + n * 16);
  auto* d_sizes = reinterpret_cast<std::size_t*>(dev + n * 24);
  auto* d_outputs = reinterpret_cast<void**>(dev + n * 32);
  auto* d_statuses = reinterpret_cast<int*>(dev + n * 40);
  ZD_CUDA_CHECK(cudaMemcpy(d_inputs, inputs.data(), n * 8, cudaMemcpyHostToDevice));
  ZD_CUDA_CHECK(cudaMemcpy(d_input_sizes, input_sizes.data(), n * 8, cudaMemcpyHostToDevice));
  ZD_CUDA_CHECK(cudaMemcpy(d_capacities, capacities.data(), n * 8, cudaMemcpyHostToDevice));
  ZD_CUDA_CHECK(cudaMemcpy(d_outputs, outputs.data(), n * 8, cudaMemcpyHostToDevice));
  const std::size_t batch = std::min(n, kMaxBatch);
  const std::size_t temp_bytes = d->temp_size(batch, max_chunk, batch * max_chunk);
  std::byte* t = temp_bytes ? temp.reserve(temp_bytes) : nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ZD_CUDA_CHECK(cudaEventCreate(&start));
  ZD_CUDA_CHECK(cudaEventCreate(&stop));
  double best = 1e30;
  for (int r = 0; r < std::max(repeats, 1) + 1; ++r) {  // the first run warms up
    ZD_CUDA_CHECK(cudaEventRecord(start, nullptr));
    for (std::size_t b = 0; b < n; b += batch) {
      const std::size_t m = std::min(batch, n - b);
      d->decompress(d_inputs + b, d_input_sizes + b, d_capacities + b, d_sizes + b, m, t,
                    temp_bytes, d_outputs + b, d_statuses + b, nullptr);
    }
    ZD_CUDA_CHECK(cudaEventRecord(stop, nullptr));
    ZD_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    ZD_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (r > 0) best = std::min(best, static_cast<double>(ms) / 1e3);
  }
  // How the rate depends on the batch size and on how many batches run at once (each stream with
  // temporary memory of its own): a read's batches are one slot's chunks, a few hundred.
  // Also with the compressed bytes left in pinned host memory, which the decoder then reads across
  // PCIe itself (no device copy of the input).
  nlohmann::json sweep = nlohmann::json::array();
  std::byte* pinned = static_cast<std::byte*>(gpu->allocate_host(in_bytes));
  ZD_CUDA_CHECK(cudaMemcpy(pinned, in, in_bytes, cudaMemcpyDeviceToHost));
  std::vector<const void*> host_inputs(n);
  for (std::size_t i = 0; i < n; ++i) {
    host_inputs[i] = pinned + (static_cast<const std::byte*>(inputs[i]) - in);
  }
  DeviceScratch host_input_array(gpu);
  auto* d_host_inputs = reinterpret_cast<const void**>(host_input_array.reserve(n * 8));
  ZD_CUDA_CHECK(cudaMemcpy(d_host_inputs, host_inputs.data(), n * 8, cudaMemcpyHostToDevice));
  for (const bool from_host : {false, true})
    for (const std::size_t size : {std::size_t{64}, std::size_t{128}, std::size_t{256},
                                   std::size_t{512}, std::size_t{1024}}) {
      // More streams than CUDA's 8 hardware queues (CUDA_DEVICE_MAX_CONNECTIONS) share queues.
      for (const std::size_t streams : {std::size_t{1}, std::size_t{2}, std::size_t{4},
                                        std::size_t{8}, std::size_t{12}, std::size_t{16}}) {
        if (from_host && (streams == 1 || streams > 4 || size < 256)) continue;
        if (streams > 8 && size > 256) continue;
        const void** sources = from_host ? d_host_inputs : d_inputs;
        const std::size_t m = std::min(size, n);
        const std::size_t each = d->temp_size(m, max_chunk, m * max_chunk);
        std::vector<DeviceScratch> temps;
        std::vector<cudaStream_t> queues(streams);
        for (std::size_t s = 0; s < streams; ++s) {
          temps.emplace_back(gpu);
          temps.back().reserve(std::max<std::size_t>(each, 1));
          ZD_CUDA_CHECK(cudaStreamCreateWithFlags(&queues[s], cudaStreamNonBlocking));
        }
        double fastest = 1e30;
        for (int r = 0; r < 2; ++r) {
          ZD_CUDA_CHECK(cudaDeviceSynchronize());
          ZD_CUDA_CHECK(cudaEventRecord(start, nullptr));
          for (auto* q : queues) ZD_CUDA_CHECK(cudaStreamWaitEvent(q, start, 0));
          for (std::size_t b = 0, k = 0; b < n; b += m, ++k) {
            const std::size_t c = std::min(m, n - b);
            d->decompress(sources + b, d_input_sizes + b, d_capacities + b, d_sizes + b, c,
                          temps[k % streams].data(), each, d_outputs + b, d_statuses + b,
                          queues[k % streams]);
          }
          ZD_CUDA_CHECK(cudaDeviceSynchronize());
          ZD_CUDA_CHECK(cudaEventRecord(stop, nullptr));
          ZD_CUDA_CHECK(cudaEventSynchronize(stop));
          float ms = 0;
          ZD_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
          if (r > 0) fastest = std::min(fastest, static_cast<double>(ms) / 1e3);
        }
        for (auto* q : queues) cudaStreamDestroy(q);
        sweep.push_back({{"batch", m},
                         {"streams", streams},
                         {"input", from_host ? "pinned host" : "device"},
                         {"temp_bytes_each", each},
                         {"seconds", fastest}});
      }
    }
  gpu->deallocate_host(pinned);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::vector<int> statuses(n);
  ZD_CUDA_CHECK(cudaMemcpy(statuses.data(), d_statuses, n * sizeof(int), cudaMemcpyDeviceToHost));
  const auto failed = std::count_if(statuses.begin(), statuses.end(), [](int s) { return s != 0; });
  std::size_t decoded = 0;
  for (const auto& leaf : leaves) decoded += leaf.spec->nbytes();
  std::size_t compressed = 0;
  for (const auto& leaf : leaves) compressed += leaf.length;
  return {{"seconds", best},
          {"chunks", n},
          {"compressed_bytes", compressed},
          {"decoded_bytes", decoded},
          {"failed_chunks", failed},
          {"batch", batch},
          {"temp_bytes", temp_bytes},
          {"sweep", sweep}};
}

}  // namespace
}  // namespace cuda

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

nlohmann::json cuda_info() {
  nlohmann::json info = {{"compiled", true}, {"devices", cuda_device_count()}};
  int runtime = 0;
  int driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  info["runtime_version"] = runtime;
  info["driver_version"] = driver;
  const auto& nvcomp = cuda::Nvcomp::instance();
  info["nvcomp"] = nvcomp.loaded() ? nlohmann::json(nvcomp.library()) : nlohmann::json(nullptr);
  if (!nvcomp.loaded()) info["nvcomp_error"] = nvcomp.error();
  info["nvcomp_zstd_compression"] = nvcomp.compressor(cuda::GpuCodec::kZstd) != nullptr;
  const auto& cufile = cuda::CuFile::instance();
  info["cufile"] = cufile.available() ? nlohmann::json(cufile.library()) : nlohmann::json(nullptr);
  if (!cufile.available()) info["cufile_error"] = cufile.error();
  return info;
}

void read_to_cuda(const Array& array, std::span<const DimSlice> selection, int device, void* out,
                  std::size_t out_nbytes, const CudaReadOptions& options) {
  for (int attempt = 1;; ++attempt) {
    try {
      cuda::Reader(array, device, options).read(selection, out, out_nbytes);
      return;
    } catch (const cuda::ValueChanged& e) {
      // Every chunk is read again, from a new plan: the output is rewritten whole.
      if (attempt == cuda::kReadAttempts) {
        throw StoreError(std::string(e.what()) + " (" + std::to_string(attempt) +
                         " times: the array is being rewritten faster than it can be read)");
      }
    }
  }
}

nlohmann::json measure_cuda_decode(const Array& array, std::span<const DimSlice> selection,
                                   int device, int repeats, const CudaReadOptions& options) {
  return cuda::Reader(array, device, options).measure_decode(selection, repeats);
}

}  // namespace zarr_device
