// Zarr nodes (arrays and groups) as a whole: finding what is at a path, changing a node's
// attributes in place, and removing a node without touching anything that is not Zarr data.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zarr_device/array_metadata.hpp"
#include "zarr_device/store.hpp"

namespace zarr_device {

// The JSON document at `key`, parsed with the limits of json_document.hpp; nullopt when there is
// none. FormatError names the key and the store.
std::optional<nlohmann::json> read_document(const Store& store, std::string_view key);

// Writes `document` at `key` (atomically, as every store write).
void write_document(Store& store, std::string_view key, const nlohmann::json& document);

enum class NodeKind { kNone, kArray, kGroup };
// What is at `path`: a v3 zarr.json says, else a v2 .zarray or .zgroup.
NodeKind node_kind(const Store& store, std::string_view path);

// Changes the attributes of the node at `path` and returns them as stored: every key of `set`
// is set, every name in `remove` removed (after `set` replaced them all when `replace`). The node's
// metadata document is locked, read as it is now and rewritten, so concurrent updates of
// different attributes all land. NotFoundError when there is no node.
nlohmann::json update_attributes(Store& store, std::string_view path, const nlohmann::json& set,
                                 const std::vector<std::string>& remove, bool replace);

// Removes the node at `path` and the nodes below it: their metadata documents and, for arrays,
// the keys their chunk key encoding produces. Anything else under the path (files of other
// programs) stays. Nothing happens when there is no node.
void erase_node(Store& store, std::string_view path);

// Removes the values under array `path` whose keys `encoding` produces for an array of `rank`
// dimensions (its chunks), and nothing else. Stale chunks of an array removed by hand must not
// turn into data of a new array made at its path.
void erase_chunks(Store& store, std::string_view path, const ChunkKeyEncoding& encoding,
                  std::size_t rank);

}  // namespace zarr_device
