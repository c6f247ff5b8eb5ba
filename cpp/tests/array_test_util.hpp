// Helpers of the engine's end-to-end tests (test_array.cpp, test_array_parallel.cpp): the
// parameterised fixture of arrays in a memory or a local directory store, and reads into fresh
// buffers to compare against a naive in-memory model.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "zarr_device/array.hpp"
#include "zarr_device/store.hpp"

namespace array_tests {

namespace zd = zarr_device;
using zd::DimSlice;
using zd::IoOptions;
using zd::test::array_doc;
using zd::test::Bytes;
using zd::test::json;
using zd::test::product;

struct StoreKind {
  const char* name;
  bool local;
};

inline void PrintTo(const StoreKind& kind, std::ostream* os) { *os << kind.name; }

using ArrayPtr = std::shared_ptr<const zd::Array>;

class Array : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override {
    if (GetParam().local) {
      dir_ = std::make_unique<zd::test::TempDir>();
      store_ = zd::make_local_store(dir_->path());
    } else {
      store_ = zd::make_memory_store();
    }
  }

  ArrayPtr create(const json& doc, const std::string& path = "arr") {
    return zd::Array::create(store_, path, doc, false);
  }

  void put(const std::string& key, std::span<const std::byte> value) { store_->set(key, value); }
  void put_json(const std::string& key, const json& value) {
    put(key, zd::test::bytes_of(value.dump()));
  }

  std::unique_ptr<zd::test::TempDir> dir_;
  std::shared_ptr<zd::Store> store_;
};

inline std::size_t element_size(const zd::Array& a) { return a.metadata().dtype->size; }

inline Bytes read(const zd::Array& a, const std::vector<DimSlice>& sel,
                  const IoOptions& options = {}) {
  Bytes out(product(zd::test::selection_shape(sel)) * element_size(a), std::byte{0xEE});
  a.read(sel, out, options);
  return out;
}

inline Bytes read_all(const zd::Array& a, const IoOptions& options = {}) {
  return read(a, zd::test::full_selection(a.metadata().shape), options);
}

// A C-contiguous buffer of `shape` holding the fill value everywhere.
inline Bytes filled(const zd::Array& a) {
  Bytes out;
  const auto n = product(a.metadata().shape);
  for (std::int64_t i = 0; i < n; ++i) {
    out.insert(out.end(), a.metadata().fill_value.begin(), a.metadata().fill_value.end());
  }
  return out;
}

inline std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline json sharded_codecs(const std::vector<std::int64_t>& inner, json inner_codecs,
                           const char* location = "end") {
  return json::array({{{"name", "sharding_indexed"},
                       {"configuration",
                        {{"chunk_shape", inner},
                         {"codecs", std::move(inner_codecs)},
                         {"index_location", location}}}}});
}

}  // namespace array_tests
