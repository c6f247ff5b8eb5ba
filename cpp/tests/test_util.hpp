// Helpers shared by the engine test suites (metadata, place, codec chain, sharding, stores, array,
// thread pool): byte vectors, random data, temporary directories, a naive model of strided
// selections and builders of zarr.json documents.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>
#include <zstd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "zarr_device/buffer.hpp"
#include "zarr_device/codec.hpp"
#include "zarr_device/dtype.hpp"
#include "zarr_device/errors.hpp"
#include "zarr_device/store.hpp"

namespace zarr_device::test {

using Bytes = std::vector<std::byte>;
using json = nlohmann::json;

inline Bytes bytes_of(std::string_view text) {
  Bytes out(text.size());
  if (!text.empty()) std::memcpy(out.data(), text.data(), text.size());
  return out;
}

inline std::string string_of(const Buffer& buffer) {
  return {reinterpret_cast<const char*>(buffer.data()), buffer.size()};
}

inline Bytes to_bytes(const Buffer& buffer) {
  return {buffer.data(), buffer.data() + buffer.size()};
}

inline Bytes random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

// The little-endian bytes of a trivially copyable value (or several).
template <typename T>
Bytes bytes_from(const std::vector<T>& values) {
  Bytes out(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

template <typename T>
std::vector<T> values_from(std::span<const std::byte> bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

// The low `size` bytes of `bits`, little endian.
inline Bytes le_bytes(std::uint64_t bits, std::size_t size) {
  Bytes out(size);
  for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<std::byte>((bits >> (8 * i)) & 0xff);
  return out;
}

inline std::uint64_t le_bits(std::span<const std::byte> bytes) {
  std::uint64_t bits = 0;
  for (std::size_t i = 0; i < bytes.size() && i < 8; ++i) {
    bits |= static_cast<std::uint64_t>(bytes[i]) << (8 * i);
  }
  return bits;
}

inline std::int64_t product(std::span<const std::int64_t> shape) {
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  return n;
}

inline std::vector<std::int64_t> c_strides(std::span<const std::int64_t> shape, std::int64_t es) {
  std::vector<std::int64_t> strides(shape.size());
  std::int64_t s = es;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

// Calls f(index) for every multi-index of `shape`, in C order.
inline void for_each_index(std::span<const std::int64_t> shape,
                           const std::function<void(const std::vector<std::int64_t>&)>& f) {
  for (auto e : shape) {
    if (e == 0) return;
  }
  std::vector<std::int64_t> index(shape.size(), 0);
  while (true) {
    f(index);
    std::size_t d = shape.size();
    while (d-- > 0) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1)) return;
  }
}

// The naive model of a selection: the elements of a C-contiguous array `data` of `shape` that
// `selection` picks, C-contiguous in selection order.
inline Bytes naive_select(const Bytes& data, std::span<const std::int64_t> shape,
                          std::span<const DimSlice> selection, std::size_t es) {
  const auto strides = c_strides(shape, static_cast<std::int64_t>(es));
  std::vector<std::int64_t> counts;
  for (const auto& s : selection) counts.push_back(s.count);
  Bytes out;
  out.reserve(static_cast<std::size_t>(product(counts)) * es);
  for_each_index(counts, [&](const std::vector<std::int64_t>& idx) {
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) {
      offset += (selection[d].start + idx[d] * selection[d].step) * strides[d];
    }
    out.insert(out.end(), data.begin() + offset, data.begin() + offset + es);
  });
  return out;
}

// The naive model of a write: `values` (C-contiguous, the selection's shape) written into the
// C-contiguous array `data` of `shape` at the selected positions.
inline void naive_assign(Bytes& data, std::span<const std::int64_t> shape,
                         std::span<const DimSlice> selection, const Bytes& values, std::size_t es) {
  const auto strides = c_strides(shape, static_cast<std::int64_t>(es));
  std::vector<std::int64_t> counts;
  for (const auto& s : selection) counts.push_back(s.count);
  std::size_t k = 0;
  for_each_index(counts, [&](const std::vector<std::int64_t>& idx) {
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) {
      offset += (selection[d].start + idx[d] * selection[d].step) * strides[d];
    }
    std::memcpy(data.data() + offset, values.data() + k * es, es);
    ++k;
  });
}

// A random selection (start, step, count >= 1) inside each extent of `shape`.
inline std::vector<DimSlice> random_selection(std::mt19937& rng,
                                              std::span<const std::int64_t> shape,
                                              std::int64_t max_step = 3) {
  std::vector<DimSlice> sel;
  for (auto extent : shape) {
    DimSlice s;
    s.start = static_cast<std::int64_t>(rng() % static_cast<std::uint32_t>(extent));
    s.step = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint32_t>(max_step));
    const std::int64_t max_count = (extent - 1 - s.start) / s.step + 1;
    s.count = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint32_t>(max_count));
    sel.push_back(s);
  }
  return sel;
}

inline std::vector<DimSlice> full_selection(std::span<const std::int64_t> shape) {
  std::vector<DimSlice> sel;
  for (auto e : shape) sel.push_back({0, 1, e});
  return sel;
}

inline std::vector<std::int64_t> selection_shape(std::span<const DimSlice> selection) {
  std::vector<std::int64_t> shape;
  for (const auto& s : selection) shape.push_back(s.count);
  return shape;
}

inline std::string describe(std::span<const DimSlice> selection) {
  std::string text = "[";
  for (const auto& s : selection) {
    if (text.size() > 1) text += ", ";
    text += std::to_string(s.start) + ":" + std::to_string(s.step) + "x" + std::to_string(s.count);
  }
  return text + "]";
}

inline std::string describe(std::span<const std::int64_t> shape) {
  std::string text = "(";
  for (auto e : shape) {
    if (text.size() > 1) text += ", ";
    text += std::to_string(e);
  }
  return text + ")";
}

// A C-contiguous view over `data` of `shape`.
inline StridedView c_view(Bytes& data, std::span<const std::int64_t> shape, std::size_t es) {
  return {
      data.data(), {shape.begin(), shape.end()}, c_strides(shape, static_cast<std::int64_t>(es))};
}

inline ChunkSpec make_spec(std::vector<std::int64_t> shape, std::string_view dtype,
                           Bytes fill = {}) {
  ChunkSpec spec;
  spec.shape = std::move(shape);
  spec.dtype = &DataType::from_v3_name(dtype);
  spec.fill_value = fill.empty() ? Bytes(spec.dtype->size, std::byte{0}) : std::move(fill);
  return spec;
}

// A zarr.json document of a regular grid and default chunk keys.
inline json array_doc(const std::vector<std::int64_t>& shape,
                      const std::vector<std::int64_t>& chunks, std::string_view dtype,
                      json fill_value = 0, json codecs = json::array({{{"name", "bytes"}}})) {
  return {{"zarr_format", 3},
          {"node_type", "array"},
          {"shape", shape},
          {"data_type", dtype},
          {"chunk_grid", {{"name", "regular"}, {"configuration", {{"chunk_shape", chunks}}}}},
          {"chunk_key_encoding", {{"name", "default"}, {"configuration", {{"separator", "/"}}}}},
          {"fill_value", std::move(fill_value)},
          {"codecs", std::move(codecs)}};
}

// A fresh directory under the system temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    static std::atomic<unsigned> counter{0};
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("zarr_device_test_" + std::to_string(::getpid()) + "_" + std::to_string(rd()) + "_" +
             std::to_string(counter.fetch_add(1)));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Runs `f` on another thread and fails (then aborts: a deadlocked thread cannot be joined) when it
// has not finished within `limit`.
inline void run_with_deadline(std::chrono::seconds limit, std::function<void()> f) {
  std::packaged_task<void()> task(std::move(f));
  auto done = task.get_future();
  std::thread thread(std::move(task));
  if (done.wait_for(limit) != std::future_status::ready) {
    ADD_FAILURE() << "did not finish within " << limit.count() << " s (deadlock?)";
    std::fprintf(stderr, "aborting: a test deadlocked\n");
    std::abort();
  }
  thread.join();
  done.get();  // rethrows what f threw
}

// A zstd frame of `data` written by libzstd directly, with or without its content size in the
// header and with or without zstd's own checksum (frames other writers make).
inline Bytes zstd_frame(std::span<const std::byte> data, bool content_size, bool checksum) {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, content_size ? 1 : 0);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, checksum ? 1 : 0);
  Bytes out(ZSTD_compressBound(data.size()));
  const std::size_t n = ZSTD_compress2(cctx, out.data(), out.size(), data.data(), data.size());
  ZSTD_freeCCtx(cctx);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(ZSTD_isError(n) ? 0 : n);
  return out;
}

// A store that hands every call to another: test stores derive from it and override the calls
// they count or change.
class ForwardingStore : public Store {
 public:
  explicit ForwardingStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  std::optional<Buffer> get(std::string_view key, ByteRange range) const override {
    return inner_->get(key, range);
  }
  std::shared_ptr<const ValueReader> open(std::string_view key) const override {
    return inner_->open(key);
  }
  std::optional<std::uint64_t> size(std::string_view key) const override {
    return inner_->size(key);
  }
  void set(std::string_view key, std::span<const std::byte> value) override {
    inner_->set(key, value);
  }
  void erase(std::string_view key) override { inner_->erase(key); }
  void erase_prefix(std::string_view prefix) override { inner_->erase_prefix(prefix); }
  std::vector<std::string> list_dir(std::string_view prefix) const override {
    return inner_->list_dir(prefix);
  }
  std::string describe() const override { return inner_->describe(); }

 protected:
  std::shared_ptr<Store> inner_;
};

// A store that records the largest single read of a value opened from it.
class ReadRecordingStore final : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  mutable std::atomic<std::size_t> largest_read{0};

  std::shared_ptr<const ValueReader> open(std::string_view key) const override {
    auto value = inner_->open(key);
    if (!value) return nullptr;
    return std::make_shared<Recording>(std::move(value), &largest_read);
  }

 private:
  class Recording final : public ValueReader {
   public:
    Recording(std::shared_ptr<const ValueReader> inner, std::atomic<std::size_t>* largest)
        : inner_(std::move(inner)), largest_(largest) {}
    std::uint64_t size() const override { return inner_->size(); }
    std::size_t read_into(std::uint64_t offset, std::span<std::byte> out) const override {
      std::size_t seen = largest_->load();
      while (out.size() > seen && !largest_->compare_exchange_weak(seen, out.size())) {
      }
      return inner_->read_into(offset, out);
    }

   private:
    std::shared_ptr<const ValueReader> inner_;
    std::atomic<std::size_t>* largest_;
  };
};

}  // namespace zarr_device::test
