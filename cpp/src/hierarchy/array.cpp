// An opened array: its metadata, its codec chain and where it lives; how a selection of it is
// checked, and the key of each of its chunks. Reads and writes of its data are the engine's.
#include "zarr_device/array.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "codecs/codec_chain.hpp"
#include "zarr_device/nodes.hpp"

namespace zarr_device {
namespace {

using json = nlohmann::json;

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

std::string Array::chunk_key(std::span<const std::int64_t> chunk) const {
  return join_key(path_, metadata_.chunk_key_encoding.key(chunk));
}

std::vector<std::int64_t> Array::inner_chunk_shape() const { return chain_->decoded_chunk_shape(); }

}  // namespace zarr_device
