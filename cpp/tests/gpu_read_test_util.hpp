// Helpers of the tests of a device read's host stages (test_gpu_read_plan.cpp,
// test_gpu_read_staging.cpp, test_gpu_decode_share.cpp): arrays of known values, whole-array read
// targets, plans with every device decoder present, and leaves of a given size.
#pragma once

#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "device_read/read_plan.hpp"
#include "test_util.hpp"
#include "zarr_device/array.hpp"

namespace zarr_device::device_read::test_support {

using test::json;

inline const json kZstdCrc =
    json::array({{{"name", "bytes"}}, {{"name", "zstd"}}, {{"name", "crc32c"}}});

inline json sharded(const std::vector<std::int64_t>& inner, const json& codecs) {
  return json::array({{{"name", "sharding_indexed"},
                       {"configuration", {{"chunk_shape", inner}, {"codecs", codecs}}}}});
}

inline DeviceDecoders all_decoders() {
  DeviceDecoders d;
  d.present.fill(true);
  d.present[static_cast<std::size_t>(DecodeKind::kChecksum)] = false;
  return d;
}

// An array in `store` at `path`, filled with 0, 1, 2, ... (as int32) where `fill` says.
inline std::shared_ptr<const Array> make_array(const std::shared_ptr<Store>& store,
                                               const std::string& path,
                                               std::vector<std::int64_t> shape,
                                               std::vector<std::int64_t> chunks, const json& codecs,
                                               bool fill = true) {
  auto array =
      Array::create(store, path, test::array_doc(shape, chunks, "int32", 0, codecs), false);
  if (fill) {
    std::vector<std::int32_t> values(static_cast<std::size_t>(test::product(shape)));
    std::iota(values.begin(), values.end(), 1);
    array->write(test::full_selection(shape),
                 {reinterpret_cast<const std::byte*>(values.data()), values.size() * 4});
  }
  return array;
}

inline ReadTarget whole(const std::shared_ptr<const Array>& array, std::vector<std::byte>& out) {
  const auto& shape = array->metadata().shape;
  out.assign(static_cast<std::size_t>(test::product(shape)) * 4, std::byte{0});
  return {array.get(), test::full_selection(shape),
          StridedView{out.data(), shape, test::c_strides(shape, 4)}};
}

inline std::vector<Leaf> plan(std::span<const ReadTarget> targets,
                              GpuDecode policy = GpuDecode::kChecked,
                              const DeviceDecoders& decoders = all_decoders()) {
  return plan_reads(targets, decoders, policy, engine::ThreadPool::shared(2), 2);
}

// A leaf of `spec` stored in `length` bytes, planned as `planned` says besides (key "k" unless it
// says otherwise).
inline Leaf sized_leaf(Route route, std::size_t length, const ChunkSpec& spec,
                       PlannedChunk planned = {}) {
  planned.spec = &spec;
  if (planned.key.empty()) planned.key = "k";
  Leaf leaf(std::move(planned));
  leaf.decoding.route = route;
  leaf.stored.length = length;
  return leaf;
}

}  // namespace zarr_device::device_read::test_support
