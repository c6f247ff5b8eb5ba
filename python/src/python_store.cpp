// Stores implemented in Python: how zarr-python's stores (object stores, fsspec) feed bytes into
// the engine (zarr_device/io/stores.py makes the Python side).
#include "python_store.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "zarr_device/errors.hpp"

namespace nb = nanobind;
namespace zd = zarr_device;

namespace {

// A store implemented in Python (an object with get/set/erase/erase_prefix/list_dir/describe),
// used to feed bytes from zarr-python's stores (object stores, fsspec) into the engine.
class PythonStore : public zd::Store {
 public:
  PythonStore(nb::object impl, bool read_only) : impl_(std::move(impl)), read_only_(read_only) {}
  ~PythonStore() override {
    nb::gil_scoped_acquire gil;
    impl_.reset();
  }

  std::optional<zd::Buffer> get(std::string_view key, zd::ByteRange range) const override {
    zd::validate_key(key);
    nb::gil_scoped_acquire gil;
    nb::object result = call("get", std::string(key), range.offset, range.length);
    if (result.is_none()) return std::nullopt;
    if (!nb::isinstance<nb::bytes>(result)) {
      throw zd::StoreError("store.get('" + std::string(key) + "') did not return bytes");
    }
    auto bytes = nb::borrow<nb::bytes>(result);
    return zd::Buffer::copy_of({static_cast<const std::byte*>(bytes.data()), bytes.size()});
  }
  void set(std::string_view key, std::span<const std::byte> value) override {
    check_writable();
    zd::validate_key(key);
    nb::gil_scoped_acquire gil;
    call("set", std::string(key), nb::bytes(value.data(), value.size()));
  }
  void erase(std::string_view key) override {
    check_writable();
    zd::validate_key(key);
    nb::gil_scoped_acquire gil;
    call("erase", std::string(key));
  }
  void erase_prefix(std::string_view prefix) override {
    check_writable();
    zd::validate_path(prefix);
    nb::gil_scoped_acquire gil;
    call("erase_prefix", std::string(prefix));
  }
  bool read_only() const override { return read_only_; }
  std::vector<std::string> list_dir(std::string_view prefix) const override {
    zd::validate_path(prefix);
    nb::gil_scoped_acquire gil;
    return nb::cast<std::vector<std::string>>(call("list_dir", std::string(prefix)));
  }
  std::optional<std::uint64_t> size(std::string_view key) const override {
    zd::validate_key(key);
    nb::gil_scoped_acquire gil;
    nb::object result = call("size", std::string(key));
    if (result.is_none()) return std::nullopt;
    return nb::cast<std::uint64_t>(result);
  }
  std::string describe() const override {
    nb::gil_scoped_acquire gil;
    return nb::cast<std::string>(call("describe"));
  }

 protected:
  static std::string first_line_of(const nb::python_error& e) {
    std::string text = nb::str(e.value()).c_str();
    text = text.substr(0, text.find('\n'));
    const std::string kind = nb::cast<std::string>(e.type().attr("__name__"));
    return text.empty() ? kind : text;
  }

  template <typename... Args>
  nb::object call(const char* method, Args&&... args) const {
    try {
      return impl_.attr(method)(std::forward<Args>(args)...);
    } catch (nb::python_error& e) {
      // Errors raised in Python code become store errors with the exception's own words: its
      // first line, not the traceback nanobind's what() carries, nor the multi-line debug dumps
      // some clients append (obstore's "Debug source: ...").
      throw zd::StoreError(std::string("store.") + method + " failed: " + first_line_of(e));
    }
  }

 private:
  nb::object impl_;
  bool read_only_;
};

// The memory of a Python object that offers it contiguously (bytes, a NumPy view of a client's
// buffer), shared without a copy: released, under the GIL, when the last Buffer of it goes. (A
// copy of each fetched chunk into fresh memory cost as much as decoding it.) The GIL is held.
zd::Buffer shared_bytes(nb::handle item, const std::string& key) {
  auto* view = new Py_buffer{};
  if (PyObject_GetBuffer(item.ptr(), view, PyBUF_CONTIG_RO) != 0) {
    delete view;
    PyErr_Clear();
    throw zd::StoreError("the store's value of '" + key + "' is not contiguous bytes");
  }
  std::shared_ptr<const void> owner(view, [](const Py_buffer* held) {
    nb::gil_scoped_acquire gil;
    PyBuffer_Release(const_cast<Py_buffer*>(held));
    delete held;
  });
  return {std::move(owner), static_cast<const std::byte*>(view->buf),
          static_cast<std::size_t>(view->len)};
}

// One whose Python side also has get_many(keys) -> [bytes | None], sizes_many(keys) ->
// [int | None] and get_ranges([(key, [(offset, length)])]) -> [[bytes] | None]: the engine's
// reads hand it many chunks (or many ranges of shards) at once, and it makes their requests
// together.
class BatchedPythonStore final : public PythonStore, public zd::BatchedGets {
 public:
  using PythonStore::PythonStore;

  std::vector<std::optional<zd::Buffer>> get_many(
      std::span<const std::string> keys) const override {
    nb::gil_scoped_acquire gil;
    const nb::list result = call_many("get_many", keys);
    std::vector<std::optional<zd::Buffer>> values;
    values.reserve(keys.size());
    for (nb::handle item : result) {
      if (item.is_none()) {
        values.emplace_back(std::nullopt);
      } else {
        values.emplace_back(shared_bytes(item, keys[values.size()]));
      }
    }
    return values;
  }

  std::vector<std::optional<std::uint64_t>> sizes_many(
      std::span<const std::string> keys) const override {
    nb::gil_scoped_acquire gil;
    return nb::cast<std::vector<std::optional<std::uint64_t>>>(call_many("sizes_many", keys));
  }

  std::vector<std::optional<std::vector<zd::Buffer>>> get_ranges(
      std::span<const zd::KeyRanges> asked) const override {
    for (const auto& one : asked) zd::validate_key(one.key);
    nb::gil_scoped_acquire gil;
    nb::list request;
    for (const auto& one : asked) {
      nb::list ranges;
      for (const auto& range : one.ranges)
        ranges.append(nb::make_tuple(range.offset, range.length));
      request.append(nb::make_tuple(one.key, ranges));
    }
    nb::object result = call("get_ranges", request);
    if (!nb::isinstance<nb::list>(result) || nb::len(result) != asked.size()) {
      throw zd::StoreError("store.get_ranges did not return a list of " +
                           std::to_string(asked.size()) + " answers");
    }
    std::vector<std::optional<std::vector<zd::Buffer>>> answers;
    answers.reserve(asked.size());
    for (nb::handle item : nb::borrow<nb::list>(result)) {
      const auto& one = asked[answers.size()];
      if (item.is_none()) {
        answers.emplace_back();
        continue;
      }
      if (!nb::isinstance<nb::list>(item) || nb::len(item) != one.ranges.size()) {
        throw zd::StoreError("store.get_ranges did not return " +
                             std::to_string(one.ranges.size()) + " values for '" + one.key + "'");
      }
      auto& values = answers.emplace_back(std::vector<zd::Buffer>{});
      for (nb::handle value : nb::borrow<nb::list>(item))
        values->push_back(shared_bytes(value, one.key));
    }
    return answers;
  }

 private:
  // `method(keys)` of the Python side, which must answer a list of one item per key. The GIL is
  // held.
  nb::list call_many(const char* method, std::span<const std::string> keys) const {
    for (const auto& key : keys) zd::validate_key(key);
    nb::object result = call(method, std::vector<std::string>(keys.begin(), keys.end()));
    if (!nb::isinstance<nb::list>(result) || nb::len(result) != keys.size()) {
      throw zd::StoreError(std::string("store.") + method + " did not return a list of " +
                           std::to_string(keys.size()) + " values");
    }
    return nb::borrow<nb::list>(result);
  }
};

}  // namespace

std::shared_ptr<zd::Store> make_python_store(nb::object impl, bool read_only) {
  if (nb::hasattr(impl, "get_many") && nb::hasattr(impl, "sizes_many") &&
      nb::hasattr(impl, "get_ranges")) {
    return std::make_shared<BatchedPythonStore>(std::move(impl), read_only);
  }
  return std::make_shared<PythonStore>(std::move(impl), read_only);
}
