#include "zarr_device/codec.hpp"

#include <map>
#include <mutex>
#include <shared_mutex>

#include "codecs/builtin.hpp"

namespace zarr_device {

std::int64_t ChunkSpec::num_elements() const {
  std::int64_t n = 1;
  for (auto extent : shape) n *= extent;
  return n;
}

void ArrayToBytesCodec::decode_partial(const RangeReader& /*read*/, std::uint64_t /*total_size*/,
                                       const ChunkSpec& /*spec*/,
                                       std::span<const DimSlice> /*selection*/,
                                       const StridedView& /*destination*/) const {
  throw UsageError("codec '" + std::string(name()) + "' cannot decode from byte ranges");
}

std::size_t BytesToBytesCodec::max_encoded_size(std::size_t decoded) const {
  if (auto exact = encoded_size(decoded)) return *exact;
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  // zstd, deflate, lz4 and blosc expand incompressible input by well under 1% plus a header.
  const std::size_t slack = decoded / 8 + 1024;
  return decoded > kMax - slack ? kMax : decoded + slack;
}

void BytesToBytesCodec::decode_into(const Buffer& encoded, std::span<std::byte> out) const {
  Buffer decoded = decode(encoded, out.size());
  if (decoded.size() != out.size()) {
    throw CodecError(std::string(name()) + ": decoded " + std::to_string(decoded.size()) +
                     " bytes, expected " + std::to_string(out.size()));
  }
  if (!out.empty()) std::memcpy(out.data(), decoded.data(), out.size());
}

struct CodecRegistry::Impl {
  mutable std::shared_mutex mutex;
  std::map<std::string, CodecFactory, std::less<>> factories;
};

CodecRegistry& CodecRegistry::instance() {
  static CodecRegistry* registry = [] {
    auto* r = new CodecRegistry();
    r->impl_ = std::make_shared<Impl>();
    codecs::register_array_codecs(*r);
    codecs::register_compression_codecs(*r);
    return r;
  }();
  return *registry;
}

void CodecRegistry::add(std::string name, CodecFactory factory) {
  std::unique_lock lock(impl_->mutex);
  impl_->factories[std::move(name)] = std::move(factory);
}

std::shared_ptr<Codec> CodecRegistry::create(std::string_view name,
                                             const nlohmann::json& configuration,
                                             const CodecContext& context) const {
  CodecFactory factory;
  {
    std::shared_lock lock(impl_->mutex);
    auto it = impl_->factories.find(name);
    if (it == impl_->factories.end()) {
      throw FormatError("unknown codec '" + std::string(name) + "'");
    }
    factory = it->second;
  }
  return factory(configuration, context);
}

bool CodecRegistry::contains(std::string_view name) const {
  std::shared_lock lock(impl_->mutex);
  return impl_->factories.find(name) != impl_->factories.end();
}

}  // namespace zarr_device
