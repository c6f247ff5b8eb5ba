#include "zarr_device/array.hpp"

#include <algorithm>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "codecs/codec_chain.hpp"
#include "engine/thread_pool.hpp"
#include "place/chunk_grid.hpp"
#include "place/strided_copy.hpp"
#include "zarr_device/nodes.hpp"

namespace zarr_device {
namespace {

using json = nlohmann::json;

// Below this length, reading a chunk row by row costs more than reading it whole and copying.
constexpr std::size_t kMinRunBytes = 512;

template <typename F>
auto with_format_errors(const std::string& where, F f) {
  try {
    return f();
  } catch (Error& e) {
    e.add_context(where);
    throw;
  } catch (const json::exception& e) {
    throw FormatError(where + ": invalid metadata: " + e.what());
  }
}

}  // namespace

void check_selection(std::span<const DimSlice> selection, std::span<const std::int64_t> shape) {
  if (selection.size() != shape.size()) {
    throw SelectionError("selection has " + std::to_string(selection.size()) +
                         " dimensions, the array has " + std::to_string(shape.size()));
  }
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const auto& s = selection[d];
    if (s.step < 1)
      throw SelectionError("step must be at least 1 in dimension " + std::to_string(d));
    if (s.count < 0 || s.start < 0) {
      throw SelectionError("negative start or count in dimension " + std::to_string(d));
    }
    if (s.count > 0 && (s.start >= shape[d] || (shape[d] - 1 - s.start) / s.step < s.count - 1)) {
      throw SelectionError("selection is out of bounds in dimension " + std::to_string(d) +
                           " of extent " + std::to_string(shape[d]));
    }
  }
}

std::vector<std::int64_t> check_selection_and_buffer(std::span<const DimSlice> selection,
                                                     std::span<const std::int64_t> shape,
                                                     std::size_t element_size,
                                                     std::size_t buffer_bytes,
                                                     std::string_view buffer) {
  check_selection(selection, shape);
  std::vector<std::int64_t> counts;
  std::size_t n = element_size;
  for (const auto& s : selection) {
    counts.push_back(s.count);
    n *= static_cast<std::size_t>(s.count);
  }
  if (buffer_bytes != n) {
    throw UsageError(std::string(buffer) + " " + std::to_string(buffer_bytes) +
                     " bytes, the selection " + std::to_string(n));
  }
  return counts;
}

Array::Array(std::shared_ptr<Store> store, std::string path, ArrayMetadata metadata)
    : store_(std::move(store)), path_(std::move(path)), metadata_(std::move(metadata)) {
  ChunkSpec spec{metadata_.chunk_shape, metadata_.dtype, metadata_.fill_value};
  chain_ = std::make_unique<codecs::CodecChain>(metadata_.codecs, std::move(spec),
                                                metadata_.zarr_format);
}

Array::~Array() = default;

std::string Array::describe() const { return "array '" + path_ + "' in " + store_->describe(); }

std::shared_ptr<const Array> Array::open(std::shared_ptr<Store> store, const std::string& path) {
  validate_path(path);
  const std::string where = "array '" + path + "' in " + store->describe();
  return with_format_errors(where, [&]() -> std::shared_ptr<const Array> {
    // Probed before read: a path through a file (a non-node name) is absent, not a failure.
    const std::string v3 = join_key(path, "zarr.json");
    if (auto doc = store->exists(v3) ? read_document(*store, v3) : std::nullopt) {
      if (doc->is_object() && doc->value("node_type", "") == "group") {
        throw NotFoundError("node is a group, not an array");
      }
      return std::make_shared<const Array>(store, path, ArrayMetadata::from_v3(*doc));
    }
    const std::string v2 = join_key(path, ".zarray");
    if (auto zarray = store->exists(v2) ? read_document(*store, v2) : std::nullopt) {
      auto zattrs = read_document(*store, join_key(path, ".zattrs")).value_or(json::object());
      return std::make_shared<const Array>(store, path, ArrayMetadata::from_v2(*zarray, zattrs));
    }
    throw NotFoundError("no array found (no zarr.json or .zarray)");
  });
}

std::shared_ptr<const Array> Array::create(std::shared_ptr<Store> store, const std::string& path,
                                           const json& document, bool overwrite) {
  validate_path(path);
  const std::string where = "array '" + path + "' in " + store->describe();
  return with_format_errors(where, [&]() -> std::shared_ptr<const Array> {
    // Validate everything before touching the store.
    auto probe = std::make_shared<const Array>(store, path, ArrayMetadata::from_v3(document));
    json doc = document;
    doc["codecs"] = probe->codecs_json();
    bool exists = true;
    try {
      exists = node_kind(*store, path) != NodeKind::kNone;
    } catch (const FormatError&) {
      // Metadata that does not parse is a node all the same.
    }
    if (exists && !overwrite)
      throw UsageError("a node already exists there (use mode 'w' to replace it)");
    // Only Zarr data goes: the node and the nodes below it, and chunks of this array's key
    // encoding left behind by one removed by other means (they would read as its data).
    if (overwrite) erase_node(*store, path);
    const auto& meta = probe->metadata();
    erase_chunks(*store, path, meta.chunk_key_encoding, meta.shape.size());
    write_document(*store, join_key(path, "zarr.json"), doc);
    return std::make_shared<const Array>(store, path, ArrayMetadata::from_v3(doc));
  });
}

json Array::codecs_json() const { return chain_->to_json(); }

std::vector<std::int64_t> Array::inner_chunk_shape() const {
  // The shard's chunk_shape is in the dimensions the sharding codec sees; transposes before it
  // permute them, so map it back to the array's own order.
  std::vector<std::size_t> dims(metadata_.shape.size());
  for (std::size_t i = 0; i < dims.size(); ++i) dims[i] = i;
  for (const auto& c : codecs_json()) {
    const std::string name = c.value("name", "");
    if (name == "transpose") {
      const auto order = c["configuration"]["order"].get<std::vector<std::size_t>>();
      const auto before = dims;
      for (std::size_t i = 0; i < order.size(); ++i) dims[i] = before[order[i]];
    } else if (name == "sharding_indexed") {
      const auto inner = c["configuration"]["chunk_shape"].get<std::vector<std::int64_t>>();
      std::vector<std::int64_t> shape(inner.size());
      for (std::size_t i = 0; i < inner.size(); ++i) shape[dims[i]] = inner[i];
      return shape;
    }
  }
  return metadata_.chunk_shape;
}

namespace {

// One target of a host read, prepared: its output as a strided view, its chunks as a grid.
struct PreparedRead {
  const Array* array;
  StridedView out;
  place::GridIntersection grid;
};

// Reads one chunk of a target (item of its grid) into its place in the output. `fetched`: its
// value, already fetched with others (nullopt inside: there is none); null: ask the store.
void read_chunk(const Array& array, const place::GridIntersection::Item& item,
                const StridedView& out, engine::ByteBudget& budget,
                const std::optional<Buffer>* fetched = nullptr) {
  const auto& meta = array.metadata();
  const auto& chain = array.chain();
  const Store& store = *array.store();
  const std::size_t es = meta.dtype->size;
  const std::size_t chunk_bytes = chain.spec().nbytes();
  const std::string key = join_key(array.path(), meta.chunk_key_encoding.key(item.chunk));
  const StridedView region = place::subview(out, item.out_offset, item.count);
  try {
    if (fetched) {
      if (!*fetched) {
        place::fill_strided(region, meta.fill_value);
        return;
      }
      const engine::BudgetLease lease(budget, chain.decode_memory());
      chain.decode_into(**fetched, item.within, region);
      return;
    }
    std::vector<std::span<std::byte>> rows;
    if (chain.is_plain() && place::is_full(item.within, meta.chunk_shape) &&
        place::contiguous_runs(region, es, kMinRunBytes, rows)) {
      // Stored bytes are the elements as the output wants them: read straight into place (into
      // the rows of the region when it is not one block: no intermediate buffer, no copy).
      auto size = store.get_into(key, std::span<const std::span<std::byte>>(rows));
      if (!size) {
        place::fill_strided(region, meta.fill_value);
      } else if (*size != chunk_bytes) {
        throw CodecError("chunk holds " + std::to_string(*size) + " bytes, expected " +
                         std::to_string(chunk_bytes) + " for its shape and data type");
      }
      return;
    }
    if (chain.supports_partial_decode()) {
      engine::BudgetLease lease(budget, chunk_bytes);
      // One open version of the shard for its index and its chunks: a rewrite of the shard
      // meanwhile is not seen at all, rather than seen in part.
      const auto value = store.open(key);
      if (!value) {
        place::fill_strided(region, meta.fill_value);
        return;
      }
      const RangeReader reader = [&](std::int64_t offset,
                                     std::int64_t length) -> std::optional<Buffer> {
        if (offset < 0 || length < 0) return std::nullopt;
        return value->read(static_cast<std::uint64_t>(offset), static_cast<std::uint64_t>(length));
      };
      chain.decode_partial(reader, value->size(), item.within, region);
      return;
    }
    // The stored chunk and every buffer between its codecs, at their bounds.
    engine::BudgetLease lease(budget, chain.decode_memory());
    auto encoded = store.get(key);
    if (!encoded) {
      place::fill_strided(region, meta.fill_value);
      return;
    }
    chain.decode_into(*encoded, item.within, region);
  } catch (Error& e) {
    e.add_context(array.describe() + ", chunk '" + key + "'");
    throw;
  }
}

// Chunk i of the targets of a read (one index space over every target's chunks): its target and
// its item.
std::size_t locate(std::span<const PreparedRead> reads, std::span<const std::size_t> first,
                   std::size_t i, place::GridIntersection::Item& item) {
  const auto t =
      static_cast<std::size_t>(std::upper_bound(first.begin(), first.end(), i) - first.begin()) - 1;
  reads[t].grid.at(i - first[t], item);
  return t;
}

// The store of a target when it fetches many values in one call; null otherwise.
const BatchedGets* batched_gets(const PreparedRead& read) {
  return dynamic_cast<const BatchedGets*>(read.array->store().get());
}

// Whether a chunk of such a store is fetched whole with others: a chunk always, a shard when the
// read wants all of it (else its index and the inner chunks wanted are read by range, which
// reads nothing unwanted).
bool fetched_whole(const PreparedRead& read, const place::GridIntersection::Item& item) {
  return !read.array->chain().supports_partial_decode() ||
         place::is_full(item.within, read.array->metadata().chunk_shape);
}

// Reads `chunks` (indices as for locate()) of targets whose stores fetch in batches: windows of
// them fetched by one call each, the next window fetched while this one decodes. A window holds
// values of one store, at most kBatchKeys of them and at most half of max_inflight_bytes decoded
// (the other half is the window being fetched), and past 4 values at most kWindowBytes: small
// enough that decoding starts soon and overlaps the fetching of the rest, with some requests at
// once however large the values (whole shards).
void read_batched(std::span<const PreparedRead> reads, std::span<const std::size_t> first,
                  std::span<const std::size_t> chunks, engine::ByteBudget& budget,
                  std::size_t inflight_bytes, engine::ThreadPool& pool, std::size_t workers) {
  constexpr std::size_t kBatchKeys = 1024;
  constexpr std::size_t kWindowBytes = std::size_t{32} << 20;
  constexpr std::size_t kFewValues = 4;
  struct Window {
    std::size_t begin = 0;
    std::size_t end = 0;
    std::vector<std::optional<Buffer>> values;
  };
  place::GridIntersection::Item item;
  auto target_of = [&](std::size_t k) { return locate(reads, first, chunks[k], item); };
  auto window_from = [&](std::size_t begin) {
    Window w{begin, begin, {}};
    if (begin >= chunks.size()) return w;
    const BatchedGets* store = batched_gets(reads[target_of(begin)]);
    std::size_t bytes = 0;
    while (w.end < chunks.size() && w.end - begin < kBatchKeys) {
      const std::size_t t = target_of(w.end);
      const std::size_t chunk_bytes = reads[t].array->chain().spec().nbytes();
      const std::size_t after = bytes + chunk_bytes;
      if (w.end > begin && (batched_gets(reads[t]) != store || after > inflight_bytes / 2 ||
                            (after > kWindowBytes && w.end - begin >= kFewValues))) {
        break;
      }
      bytes += chunk_bytes;
      ++w.end;
    }
    return w;
  };
  auto fetch = [&](Window& w) {
    std::vector<std::string> keys;
    keys.reserve(w.end - w.begin);
    place::GridIntersection::Item at;
    std::size_t t = 0;
    for (std::size_t k = w.begin; k < w.end; ++k) {
      t = locate(reads, first, chunks[k], at);
      const auto& meta = reads[t].array->metadata();
      keys.push_back(join_key(reads[t].array->path(), meta.chunk_key_encoding.key(at.chunk)));
    }
    try {
      w.values = batched_gets(reads[t])->get_many(keys);
    } catch (Error& e) {
      e.add_context(reads[t].array->describe() + ", chunks '" + keys.front() + "' to '" +
                    keys.back() + "'");
      throw;
    }
    if (w.values.size() != keys.size()) {
      throw StoreError(reads[t].array->describe() + ": the store returned " +
                       std::to_string(w.values.size()) + " values for " +
                       std::to_string(keys.size()) + " keys");
    }
  };
  if (chunks.empty()) return;
  Window current = window_from(0);
  fetch(current);
  while (current.begin < chunks.size()) {
    Window next = window_from(current.end);
    // The next window's requests go out while this one decodes (on a thread of its own: the
    // pool's are decoding, and the requests mostly wait on the network).
    std::future<void> fetching;
    if (next.begin < chunks.size()) fetching = std::async(std::launch::async, [&] { fetch(next); });
    try {
      pool.parallel_for(current.end - current.begin, workers, [&](std::size_t k) {
        place::GridIntersection::Item chunk;
        const std::size_t t = locate(reads, first, chunks[current.begin + k], chunk);
        read_chunk(*reads[t].array, chunk, reads[t].out, budget, &current.values[k]);
      });
    } catch (...) {
      if (fetching.valid()) fetching.wait();  // it writes into `next`
      throw;
    }
    if (fetching.valid()) fetching.get();
    current = std::move(next);
  }
}

}  // namespace

void read_many(std::span<const ReadRequest> requests, const IoOptions& options) {
  std::vector<PreparedRead> reads;
  reads.reserve(requests.size());
  std::vector<std::size_t> first{0};  // one index space over every target's chunks
  for (const auto& r : requests) {
    const auto& meta = r.array->metadata();
    const std::size_t es = meta.dtype->size;
    const auto shape = check_selection_and_buffer(r.selection, meta.shape, es, r.out.size(),
                                                  "output buffer holds");
    reads.push_back({r.array, StridedView{r.out.data(), shape, place::c_strides(shape, es)},
                     place::GridIntersection(r.selection, meta.chunk_shape)});
    first.push_back(first.back() + reads.back().grid.size());
  }
  // One budget and one parallel loop for them all: no target waits for another's slowest chunk.
  engine::ByteBudget budget(options.max_inflight_bytes);
  const std::size_t workers = engine::worker_count(options.threads);
  auto& pool = engine::ThreadPool::shared(workers);
  const bool any_batched = std::any_of(
      reads.begin(), reads.end(), [](const PreparedRead& r) { return batched_gets(r) != nullptr; });
  if (!any_batched) {
    pool.parallel_for(first.back(), workers, [&](std::size_t i) {
      place::GridIntersection::Item item;
      const std::size_t t = locate(reads, first, i, item);
      read_chunk(*reads[t].array, item, reads[t].out, budget);
    });
    return;
  }
  // Stores that fetch many values in one call get their chunks' requests in windows; the other
  // targets' chunks are read one request each, as above.
  std::vector<std::size_t> batched;
  std::vector<std::size_t> single;
  for (std::size_t t = 0; t < reads.size(); ++t) {
    const bool batching = batched_gets(reads[t]) != nullptr;
    place::GridIntersection::Item item;
    for (std::size_t i = first[t]; i < first[t + 1]; ++i) {
      reads[t].grid.at(i - first[t], item);
      (batching && fetched_whole(reads[t], item) ? batched : single).push_back(i);
    }
  }
  pool.parallel_for(single.size(), workers, [&](std::size_t k) {
    place::GridIntersection::Item item;
    const std::size_t t = locate(reads, first, single[k], item);
    read_chunk(*reads[t].array, item, reads[t].out, budget);
  });
  read_batched(reads, first, batched, budget, options.max_inflight_bytes, pool, workers);
}

void Array::read(std::span<const DimSlice> selection, std::span<std::byte> out,
                 const IoOptions& options) const {
  const ReadRequest request{this, {selection.begin(), selection.end()}, out};
  read_many({&request, 1}, options);
}

void Array::write(std::span<const DimSlice> selection, std::span<const std::byte> values,
                  const IoOptions& options) const {
  const std::size_t es = metadata_.dtype->size;
  const auto value_shape =
      check_selection_and_buffer(selection, metadata_.shape, es, values.size(), "values hold");
  const auto value_strides = place::c_strides(value_shape, es);
  const place::GridIntersection grid(selection, metadata_.chunk_shape);
  const auto& chunk_shape = metadata_.chunk_shape;
  const auto chunk_strides = place::c_strides(chunk_shape, es);
  const std::size_t chunk_bytes = chain_->spec().nbytes();
  const std::size_t decode_memory = chain_->decode_memory();
  engine::ByteBudget budget(options.max_inflight_bytes);
  const std::size_t workers = engine::worker_count(options.threads);

  engine::ThreadPool::shared(workers).parallel_for(grid.size(), workers, [&](std::size_t i) {
    place::GridIntersection::Item item;
    grid.at(i, item);
    const std::string key = join_key(path_, metadata_.chunk_key_encoding.key(item.chunk));
    try {
      engine::BudgetLease lease(budget, chunk_bytes + decode_memory);
      // Every chunk write holds the chunk's lock, so a read-modify-write here or elsewhere never
      // puts back what it read before another write of the chunk.
      const auto lock = store_->lock_chunk(path_, key);
      ByteArray chunk(chunk_bytes);
      const StridedView chunk_view{chunk.data(), chunk_shape, chunk_strides};
      // Does the selection cover every element of the chunk inside the array?
      bool covers = true;
      for (std::size_t d = 0; d < chunk_shape.size(); ++d) {
        const std::int64_t inside =
            std::min(chunk_shape[d], metadata_.shape[d] - item.chunk[d] * chunk_shape[d]);
        const auto& w = item.within[d];
        if (!(w.start == 0 && w.count == inside && (w.step == 1 || inside == 1))) covers = false;
      }
      std::optional<Buffer> existing;
      if (!covers) existing = store_->get(key);
      if (existing) {
        std::vector<DimSlice> all;
        all.reserve(chunk_shape.size());
        for (auto e : chunk_shape) all.push_back({0, 1, e});
        chain_->decode_into(*existing, all, chunk_view);
      } else {
        place::fill_strided(chunk_view, metadata_.fill_value);
      }
      // Overlay the new values.
      StridedView target{chunk.data(), item.count, {}};
      for (std::size_t d = 0; d < chunk_shape.size(); ++d) {
        target.data += item.within[d].start * chunk_strides[d];
        target.byte_strides.push_back(item.within[d].step * chunk_strides[d]);
      }
      std::int64_t src_offset = 0;
      for (std::size_t d = 0; d < chunk_shape.size(); ++d) {
        src_offset += item.out_offset[d] * value_strides[d];
      }
      place::copy_strided(values.data() + src_offset, value_strides, target, es);
      if (place::is_all_fill(chunk.span(), metadata_.fill_value)) {
        store_->erase(key);
        return;
      }
      auto encoded = chain_->encode(chunk.span());
      if (encoded) {
        store_->set(key, encoded->span());
      } else {
        store_->erase(key);
      }
    } catch (Error& e) {
      e.add_context(describe() + ", chunk '" + key + "'");
      throw;
    }
  });
}

}  // namespace zarr_device
