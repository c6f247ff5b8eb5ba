#include "zarr_device/nodes.hpp"

#include <algorithm>
#include <array>

#include "zarr_device/errors.hpp"
#include "zarr_device/json_document.hpp"

namespace zarr_device {
namespace {

using json = nlohmann::json;

constexpr std::array<std::string_view, 5> kMetadataNames = {"zarr.json", ".zarray", ".zgroup",
                                                            ".zattrs", ".zmetadata"};

bool is_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Whether `relative` (a path under the array) is a key `encoding` produces for an array of
// `rank` dimensions or, with `prefix`, leads to one: "c" (0-d) or "c<sep>i<sep>j..." (default);
// "0" (0-d) or "i<sep>j..." (v2).
bool matches_chunk_key(std::string_view relative, const ChunkKeyEncoding& encoding,
                       std::size_t rank, bool prefix) {
  std::string_view rest = relative;
  if (encoding.kind == ChunkKeyEncoding::Kind::kDefault) {
    if (!rest.starts_with("c")) return false;
    rest.remove_prefix(1);
    if (rank == 0) return rest.empty() && !prefix;
    if (rest.empty() || rest.front() != encoding.separator) return false;
    rest.remove_prefix(1);
  } else if (rank == 0) {
    return rest == "0" && !prefix;
  }
  for (std::size_t seen = 1;; ++seen) {
    const auto at = std::min(rest.find(encoding.separator), rest.size());
    if (!is_digits(rest.substr(0, at))) return false;
    if (at == rest.size()) return !prefix && seen == rank;
    rest.remove_prefix(at + 1);
    if (rest.empty()) return prefix && seen < rank;
  }
}

// Removes, under `directory` (relative to the array at `path`), the values whose keys match, and
// descends into the prefixes that can lead to one; directories left empty go too.
void erase_matching(Store& store, const std::string& path, const std::string& directory,
                    const ChunkKeyEncoding& encoding, std::size_t rank) {
  const std::string here = join_key(path, directory);
  for (const auto& name : store.list_dir(here)) {
    const std::string relative = join_key(directory, name);
    const std::string key = join_key(path, relative);
    if (store.exists(key)) {
      if (matches_chunk_key(relative, encoding, rank, false)) store.erase(key);
    } else if (encoding.separator == '/' &&
               matches_chunk_key(relative + "/", encoding, rank, true)) {
      erase_matching(store, path, relative, encoding, rank);
    }
  }
  if (!directory.empty() && store.list_dir(here).empty()) store.erase_prefix(here);
}

}  // namespace

std::optional<json> read_document(const Store& store, std::string_view key) {
  auto bytes = store.get(key);
  if (!bytes) return std::nullopt;
  return parse_json_document(bytes->span(), "'" + std::string(key) + "' in " + store.describe());
}

void write_document(Store& store, std::string_view key, const json& document) {
  const std::string text = document.dump(2);
  store.set(key, {reinterpret_cast<const std::byte*>(text.data()), text.size()});
}

NodeKind node_kind(const Store& store, std::string_view path) {
  validate_path(path);
  const std::string v3 = join_key(path, "zarr.json");
  if (store.exists(v3)) {
    const auto doc = read_document(store, v3);
    if (!doc || !doc->is_object()) return NodeKind::kNone;
    const auto type = doc->value("node_type", json());
    if (type == "array") return NodeKind::kArray;
    if (type == "group") return NodeKind::kGroup;
    return NodeKind::kNone;
  }
  if (store.exists(join_key(path, ".zarray"))) return NodeKind::kArray;
  if (store.exists(join_key(path, ".zgroup"))) return NodeKind::kGroup;
  return NodeKind::kNone;
}

json update_attributes(Store& store, std::string_view path, const json& set,
                       const std::vector<std::string>& remove, bool replace) {
  validate_path(path);
  if (!set.is_object()) throw UsageError("attributes must be a JSON object");
  const std::string where = "node '" + std::string(path) + "' in " + store.describe();
  const auto apply = [&](json attributes) {
    if (!attributes.is_object()) throw FormatError(where + ": attributes are not a JSON object");
    if (replace) attributes = json::object();
    for (const auto& [k, v] : set.items()) attributes[k] = v;
    for (const auto& k : remove) attributes.erase(k);
    return attributes;
  };
  const std::string v3 = join_key(path, "zarr.json");
  if (store.exists(v3)) {
    const auto lock = store.lock_document(v3);
    auto doc = read_document(store, v3);
    if (!doc) throw NotFoundError(where + ": the node was removed");
    if (!doc->is_object()) throw FormatError(where + ": zarr.json is not a JSON object");
    auto attributes = apply(doc->value("attributes", json::object()));
    (*doc)["attributes"] = attributes;
    write_document(store, v3, *doc);
    return attributes;
  }
  // Zarr v2 keeps attributes in .zattrs, which may not exist yet: the node's own document is
  // the one locked.
  for (const char* marker : {".zarray", ".zgroup"}) {
    const std::string key = join_key(path, marker);
    if (!store.exists(key)) continue;
    const auto lock = store.lock_document(key);
    const std::string zattrs = join_key(path, ".zattrs");
    auto attributes = apply(read_document(store, zattrs).value_or(json::object()));
    write_document(store, zattrs, attributes);
    return attributes;
  }
  throw NotFoundError(where + ": no array or group there");
}

void erase_chunks(Store& store, std::string_view path, const ChunkKeyEncoding& encoding,
                  std::size_t rank) {
  validate_path(path);
  const bool nested =
      encoding.kind == ChunkKeyEncoding::Kind::kDefault && rank > 0 && encoding.separator == '/';
  if (nested) {
    erase_matching(store, std::string(path), "c", encoding, rank);  // everything is under c/
  } else {
    erase_matching(store, std::string(path), "", encoding, rank);
  }
}

void erase_node(Store& store, std::string_view path) {
  validate_path(path);
  NodeKind kind = NodeKind::kNone;
  try {
    kind = node_kind(store, path);
  } catch (const FormatError&) {
    kind = NodeKind::kArray;  // a zarr.json that does not parse: its own chunks cannot be known
  }
  if (kind == NodeKind::kNone) return;
  if (kind == NodeKind::kArray) {
    std::optional<ArrayMetadata> metadata;
    try {
      if (auto doc = read_document(store, join_key(path, "zarr.json"))) {
        metadata = ArrayMetadata::from_v3(*doc);
      } else if (auto zarray = read_document(store, join_key(path, ".zarray"))) {
        metadata = ArrayMetadata::from_v2(*zarray, json::object());
      }
    } catch (const FormatError&) {
      // Unreadable metadata: which keys are its chunks is unknown, so they stay (a new array
      // made here removes the keys of its own encoding).
    }
    if (metadata) erase_chunks(store, path, metadata->chunk_key_encoding, metadata->shape.size());
  } else {
    for (const auto& name : store.list_dir(path)) {
      const std::string child = join_key(path, name);
      if (std::find(kMetadataNames.begin(), kMetadataNames.end(), name) != kMetadataNames.end()) {
        continue;
      }
      if (!store.exists(child)) erase_node(store, child);  // nothing happens unless a node
    }
  }
  for (const auto name : kMetadataNames) store.erase(join_key(path, name));
  if (!path.empty() && store.list_dir(path).empty()) store.erase_prefix(path);
}

}  // namespace zarr_device
