// The Python face of the engine (module zarr_device._core). Thin: selections arrive normalised,
// metadata travels as JSON text, and the GIL is released while chunks move.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <tuple>

#include "zarr_device/array.hpp"
#include "zarr_device/errors.hpp"
#include "zarr_device/store.hpp"

namespace nb = nanobind;
using namespace nb::literals;
namespace zd = zarr_device;

namespace {

// A store implemented in Python (an object with get/set/erase/erase_prefix/list_dir/describe),
// used to feed bytes from zarr-python's stores (object stores, fsspec) into the engine.
class PythonStore final : public zd::Store {
 public:
  explicit PythonStore(nb::object impl) : impl_(std::move(impl)) {}
  ~PythonStore() override {
    nb::gil_scoped_acquire gil;
    impl_.reset();
  }

  std::optional<zd::Buffer> get(std::string_view key, zd::ByteRange range) const override {
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
    nb::gil_scoped_acquire gil;
    call("set", std::string(key), nb::bytes(value.data(), value.size()));
  }
  void erase(std::string_view key) override {
    nb::gil_scoped_acquire gil;
    call("erase", std::string(key));
  }
  void erase_prefix(std::string_view prefix) override {
    nb::gil_scoped_acquire gil;
    call("erase_prefix", std::string(prefix));
  }
  std::vector<std::string> list_dir(std::string_view prefix) const override {
    nb::gil_scoped_acquire gil;
    return nb::cast<std::vector<std::string>>(call("list_dir", std::string(prefix)));
  }
  std::optional<std::uint64_t> size(std::string_view key) const override {
    nb::gil_scoped_acquire gil;
    nb::object result = call("size", std::string(key));
    if (result.is_none()) return std::nullopt;
    return nb::cast<std::uint64_t>(result);
  }
  std::string describe() const override {
    nb::gil_scoped_acquire gil;
    return nb::cast<std::string>(call("describe"));
  }

 private:
  template <typename... Args>
  nb::object call(const char* method, Args&&... args) const {
    try {
      return impl_.attr(method)(std::forward<Args>(args)...);
    } catch (nb::python_error& e) {
      // Errors raised in Python code become store errors that keep the Python message.
      throw zd::StoreError(std::string("store.") + method + " failed: " + e.what());
    }
  }
  nb::object impl_;
};

std::vector<zd::DimSlice> to_selection(
    const std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>& sel) {
  std::vector<zd::DimSlice> out;
  out.reserve(sel.size());
  for (const auto& [start, step, count] : sel) out.push_back({start, step, count});
  return out;
}

zd::IoOptions io_options(int threads, std::size_t max_inflight_bytes) {
  zd::IoOptions options;
  options.threads = threads;
  if (max_inflight_bytes > 0) options.max_inflight_bytes = max_inflight_bytes;
  return options;
}

const char* exception_name(zd::ErrorKind kind) {
  switch (kind) {
    case zd::ErrorKind::kFormat:
      return "FormatError";
    case zd::ErrorKind::kCodec:
      return "CodecError";
    case zd::ErrorKind::kChecksum:
      return "ChecksumError";
    case zd::ErrorKind::kStore:
      return "StoreError";
    case zd::ErrorKind::kNotFound:
      return "NodeNotFoundError";
    case zd::ErrorKind::kSelection:
      return "SelectionError";
    case zd::ErrorKind::kUsage:
      return "UsageError";
    case zd::ErrorKind::kDevice:
      return "DeviceError";
    case zd::ErrorKind::kOutOfMemory:
      return "OutOfMemoryError";
  }
  return "ZarrDeviceError";
}

using Selection = std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>;

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "zarr-device engine";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const zd::Error& e) {
      nb::object errors = nb::module_::import_("zarr_device.errors");
      nb::object cls = errors.attr(exception_name(e.kind()));
      PyErr_SetString(cls.ptr(), e.what());
    }
  });

  nb::class_<zd::Store>(m, "Store")
      .def(
          "get",
          [](const zd::Store& s, const std::string& key, std::int64_t offset,
             std::int64_t length) -> nb::object {
            std::optional<zd::Buffer> value;
            {
              nb::gil_scoped_release release;
              value = s.get(key, {offset, length});
            }
            if (!value) return nb::none();
            return nb::bytes(value->data(), value->size());
          },
          "key"_a, "offset"_a = 0, "length"_a = -1)
      .def(
          "set",
          [](zd::Store& s, const std::string& key, nb::bytes value) {
            s.set(key, {static_cast<const std::byte*>(value.data()), value.size()});
          },
          "key"_a, "value"_a)
      .def("erase", &zd::Store::erase, "key"_a)
      .def("erase_prefix", &zd::Store::erase_prefix, "prefix"_a)
      .def("list_dir", &zd::Store::list_dir, "prefix"_a)
      .def("exists", &zd::Store::exists, "key"_a)
      .def("size", &zd::Store::size, "key"_a)
      .def("describe", &zd::Store::describe);

  m.def(
      "local_store", [](const std::string& root) { return zd::make_local_store(root); }, "root"_a);
  m.def("memory_store", [] { return zd::make_memory_store(); });
  m.def(
      "python_store",
      [](nb::object impl) -> std::shared_ptr<zd::Store> {
        return std::make_shared<PythonStore>(std::move(impl));
      },
      "impl"_a);

  nb::class_<zd::Array>(m, "Array")
      .def_static(
          "open",
          [](std::shared_ptr<zd::Store> store, const std::string& path) {
            return std::const_pointer_cast<zd::Array>(zd::Array::open(store, path));
          },
          "store"_a, "path"_a, nb::call_guard<nb::gil_scoped_release>())
      .def_static(
          "create",
          [](std::shared_ptr<zd::Store> store, const std::string& path, const std::string& document,
             bool overwrite) {
            nlohmann::json doc;
            try {
              doc = nlohmann::json::parse(document);
            } catch (const nlohmann::json::exception& e) {
              throw zd::FormatError(std::string("metadata is not valid JSON: ") + e.what());
            }
            return std::const_pointer_cast<zd::Array>(
                zd::Array::create(store, path, doc, overwrite));
          },
          "store"_a, "path"_a, "document"_a, "overwrite"_a,
          nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("path", &zd::Array::path)
      .def_prop_ro("store", &zd::Array::store)
      .def_prop_ro("zarr_format", [](const zd::Array& a) { return a.metadata().zarr_format; })
      .def_prop_ro("shape", [](const zd::Array& a) { return a.metadata().shape; })
      .def_prop_ro("chunk_shape", [](const zd::Array& a) { return a.metadata().chunk_shape; })
      .def_prop_ro("inner_chunk_shape", &zd::Array::inner_chunk_shape)
      .def_prop_ro("dtype",
                   [](const zd::Array& a) { return std::string(a.metadata().dtype->name); })
      .def_prop_ro("itemsize", [](const zd::Array& a) { return a.metadata().dtype->size; })
      .def_prop_ro(
          "fill_value_json",
          [](const zd::Array& a) {
            return zd::fill_value_to_json(a.metadata().fill_value, *a.metadata().dtype).dump();
          })
      .def_prop_ro("attributes_json",
                   [](const zd::Array& a) { return a.metadata().attributes.dump(); })
      .def_prop_ro("document_json", [](const zd::Array& a) { return a.metadata().document.dump(); })
      .def_prop_ro("codecs_json", [](const zd::Array& a) { return a.codecs_json().dump(); })
      .def("describe", &zd::Array::describe)
      .def(
          "read",
          [](const zd::Array& a, const Selection& selection,
             nb::ndarray<std::uint8_t, nb::c_contig, nb::device::cpu> out, int threads,
             std::size_t max_inflight_bytes) {
            const auto sel = to_selection(selection);
            std::span<std::byte> bytes{reinterpret_cast<std::byte*>(out.data()), out.size()};
            nb::gil_scoped_release release;
            a.read(sel, bytes, io_options(threads, max_inflight_bytes));
          },
          "selection"_a, "out"_a, "threads"_a = 0, "max_inflight_bytes"_a = 0)
      .def(
          "write",
          [](const zd::Array& a, const Selection& selection,
             nb::ndarray<const std::uint8_t, nb::c_contig, nb::device::cpu> values, int threads,
             std::size_t max_inflight_bytes) {
            const auto sel = to_selection(selection);
            std::span<const std::byte> bytes{reinterpret_cast<const std::byte*>(values.data()),
                                             values.size()};
            nb::gil_scoped_release release;
            a.write(sel, bytes, io_options(threads, max_inflight_bytes));
          },
          "selection"_a, "values"_a, "threads"_a = 0, "max_inflight_bytes"_a = 0);
}
