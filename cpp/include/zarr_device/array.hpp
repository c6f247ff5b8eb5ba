// The engine's entry point: an open Zarr array that reads and writes selections in parallel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "zarr_device/array_metadata.hpp"
#include "zarr_device/codec.hpp"
#include "zarr_device/settings.hpp"
#include "zarr_device/store.hpp"

namespace zarr_device {

namespace codecs {
class CodecChain;
}

// How a call on the host runs; each field starts from the setting of its name (settings.hpp).
struct IoOptions {
  // Worker threads fetching and decoding chunks; 0 = one per core.
  int threads = settings().threads;
  // Bytes of fetched and decoded chunk data held at once (host memory in flight). A chunk larger
  // than the whole budget still proceeds, alone.
  std::size_t max_inflight_bytes = settings().max_inflight_bytes;
};

class Array {
 public:
  // Opens the array at `path` (zarr.json, or .zarray for Zarr v2). Throws NotFoundError when there
  // is none, FormatError when its metadata is invalid.
  static std::shared_ptr<const Array> open(std::shared_ptr<Store> store, const std::string& path);
  // Writes `document` (a v3 zarr.json object) at `path` and opens it. Existing nodes at `path` are
  // removed first when `overwrite`, else cause UsageError.
  static std::shared_ptr<const Array> create(std::shared_ptr<Store> store, const std::string& path,
                                             const nlohmann::json& document, bool overwrite);

  [[nodiscard]] const ArrayMetadata& metadata() const { return metadata_; }
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] const std::shared_ptr<Store>& store() const { return store_; }
  // The chunk codec chain with every default filled in, as {"name", "configuration"} entries.
  [[nodiscard]] nlohmann::json codecs_json() const;
  // The prepared codec chain of the chunks (for readers that run stages elsewhere).
  [[nodiscard]] const codecs::CodecChain& chain() const { return *chain_; }
  // The shape of the inner chunks when sharded, else of the chunks.
  [[nodiscard]] std::vector<std::int64_t> inner_chunk_shape() const;

  // Reads the elements `selection` picks (one DimSlice per dimension, in bounds, step >= 1) into
  // `out`, a C-contiguous buffer of the selection's shape. Chunks are fetched and decoded in
  // parallel and written straight into their place.
  void read(std::span<const DimSlice> selection, std::span<std::byte> out,
            const IoOptions& options = {}) const;
  // Writes C-contiguous `values` of the selection's shape; partial chunks are read, updated and
  // written back. Chunks left holding only the fill value are removed, as zarr-python does.
  void write(std::span<const DimSlice> selection, std::span<const std::byte> values,
             const IoOptions& options = {}) const;

  // "array 'path' in file:///root", for messages.
  [[nodiscard]] std::string describe() const;
  // The store key of the chunk (the shard, when sharded) at grid position `chunk`.
  [[nodiscard]] std::string chunk_key(std::span<const std::int64_t> chunk) const;

  Array(std::shared_ptr<Store> store, std::string path, ArrayMetadata metadata);
  ~Array();

 private:
  std::shared_ptr<Store> store_;
  std::string path_;
  ArrayMetadata metadata_;
  std::unique_ptr<codecs::CodecChain> chain_;
};

// One array's part of a read of many: a selection of `array` into `out`, a C-contiguous buffer of
// the selection's shape.
struct ReadRequest {
  const Array* array = nullptr;
  std::vector<DimSlice> selection;
  std::span<std::byte> out;
};

// Reads many arrays (or selections of them) in one parallel pass: every chunk of every request is
// work for the same pool under one memory budget, so no array waits for another's slowest chunk.
// Errors name the array and the chunk.
void read_many(std::span<const ReadRequest> requests, const IoOptions& options = {});

// Validates `selection` against `shape` (SelectionError when out of bounds or malformed).
void check_selection(std::span<const DimSlice> selection, std::span<const std::int64_t> shape);

// check_selection, then that a C-ordered buffer of `buffer_bytes` holds the selection's elements of
// `element_size` bytes (UsageError "<buffer> <buffer_bytes> bytes, the selection <n>", `buffer`
// being e.g. "output buffer holds"). Returns the selection's shape.
std::vector<std::int64_t> check_selection_and_buffer(std::span<const DimSlice> selection,
                                                     std::span<const std::int64_t> shape,
                                                     std::size_t element_size,
                                                     std::size_t buffer_bytes,
                                                     std::string_view buffer);

}  // namespace zarr_device
