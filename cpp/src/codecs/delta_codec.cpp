// numcodecs' delta filter ("delta" in a Zarr v2 array's filters, "numcodecs.delta" here): each
// element of the chunk, in the order its bytes lie, stored as its difference from the one before
// (the first as it is), in `astype`, which may be narrower than the array's `dtype`. A Zarr v2
// filter sees the chunk's serialized bytes, so it is a bytes->bytes codec here, with both types'
// byte orders from its configuration, as numcodecs reads them. zarr-python 3 lists it among a v3
// array's array->array codecs, where it sees the elements in memory: the chain runs it right
// after a little-endian bytes codec instead (BytesToBytesCodec::listed_before_bytes).
//
// Decoding is numcodecs' `np.cumsum(encoded, out=decoded)`: integers are summed modulo 2^64 (NumPy
// sums narrow integers in 64 bits; a sum modulo 2^64 truncated to the array's width is the same
// number modulo that width), floats one after another in `astype`'s precision, as cumsum does.
// Floats of two different types, and float16, are refused by name rather than rounded otherwise.
#include <bit>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "codecs/compression_common.hpp"

namespace zarr_device::codecs {
namespace {

struct ElementType {
  const DataType* type = nullptr;
  Endian endian = Endian::kLittle;
};

std::uint64_t load(const std::byte* at, const ElementType& t) {
  std::uint64_t v = 0;
  const std::size_t n = t.type->size;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t from = t.endian == Endian::kLittle ? i : n - 1 - i;
    v |= std::uint64_t{std::to_integer<std::uint8_t>(at[from])} << (8 * i);
  }
  // Integers widen as NumPy widens them: signed types by their sign.
  if (t.type->cls == DTypeClass::kInt && n < 8) {
    const std::uint64_t sign = std::uint64_t{1} << (8 * n - 1);
    v = (v ^ sign) - sign;
  }
  return v;
}

void store(std::byte* at, std::uint64_t v, const ElementType& t) {
  const std::size_t n = t.type->size;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t to = t.endian == Endian::kLittle ? i : n - 1 - i;
    at[to] = static_cast<std::byte>(v >> (8 * i));
  }
}

class DeltaCodec final : public BytesToBytesCodec {
 public:
  DeltaCodec(const nlohmann::json& configuration, int zarr_format) {
    const ConfigReader config(name(), configuration);
    const std::string dtype = config.get_string("dtype", "");
    if (dtype.empty()) config.fail("dtype", "is required");
    dtype_ = parse(config, "dtype", dtype);
    astype_ = parse(config, "astype", config.get_string("astype", dtype));
    const bool integers = is_integer(dtype_) && is_integer(astype_);
    const bool floats = dtype_.type->cls == DTypeClass::kFloat && dtype_.type == astype_.type &&
                        (dtype_.type->size == 4 || dtype_.type->size == 8);
    if (!integers && !floats) {
      config.fail("astype", "delta from " + dtype + " to " + config.get_string("astype", dtype) +
                                " is not supported (integers of any width, or float32 or float64 "
                                "to the same type, are); read this array with zarr-python");
    }
    // In a v3 array it sees the elements in memory, little-endian here: a big-endian type there
    // reads them as other numbers (zarr-python reads such an array back as other values than it
    // wrote), so it is refused rather than read one way or the other.
    if (zarr_format == 3 && (dtype_.endian == Endian::kBig || astype_.endian == Endian::kBig) &&
        (dtype_.type->size > 1 || astype_.type->size > 1)) {
      config.fail("dtype",
                  "is big-endian in a Zarr v3 array, whose elements are little-endian in "
                  "memory; read this array with zarr-python");
    }
    configuration_ = {{"id", "delta"}, {"dtype", dtype}};
    if (configuration.contains("astype")) configuration_["astype"] = configuration["astype"];
  }

  [[nodiscard]] std::string_view name() const override { return "numcodecs.delta"; }
  // zarr-python 3 lists it among the array->array codecs of a v3 array.
  [[nodiscard]] bool listed_before_bytes() const override { return true; }
  [[nodiscard]] nlohmann::json to_json() const override { return configuration_; }

  [[nodiscard]] std::optional<std::size_t> encoded_size(std::size_t decoded) const override {
    return decoded / dtype_.type->size * astype_.type->size;
  }

  [[nodiscard]] Buffer decode(const Buffer& encoded, DecodedSize size) const override {
    const std::size_t decoded = decoded_size(encoded.size());
    if (size.exact && decoded != *size.exact) throw_size_mismatch(name(), decoded, *size.exact);
    if (decoded > size.at_most) {
      throw CodecError(std::string(name()) + ": chunk decodes to " + std::to_string(decoded) +
                       " bytes, more than the " + std::to_string(size.at_most) + " its chunk can");
    }
    ByteArray out(decoded);
    accumulate(encoded, out.span());
    return std::move(out).freeze();
  }

  void decode_into(const Buffer& encoded, std::span<std::byte> out) const override {
    const std::size_t decoded = decoded_size(encoded.size());
    if (decoded != out.size()) throw_size_mismatch(name(), decoded, out.size());
    accumulate(encoded, out);
  }

  [[nodiscard]] Buffer encode(const Buffer& decoded) const override {
    const std::size_t d = dtype_.type->size;
    if (decoded.size() % d != 0) {
      throw CodecError(std::string(name()) + ": " + std::to_string(decoded.size()) +
                       " bytes are not a whole number of " + std::to_string(d) + "-byte elements");
    }
    const std::size_t n = decoded.size() / d;
    ByteArray out(n * astype_.type->size);
    const std::byte* in = decoded.data();
    if (dtype_.type->cls == DTypeClass::kFloat) {
      with_float_type([&](auto zero) { float_differences_as<decltype(zero)>(in, out.data(), n); });
    } else {
      // numcodecs subtracts in `dtype` and casts to `astype`: the difference is taken modulo
      // dtype's width and widened by dtype's sign before astype's width truncates it.
      std::uint64_t previous = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t v = load(in + i * d, dtype_);
        store(out.data() + i * astype_.type->size, widen(v - previous), astype_);
        previous = v;
      }
    }
    return std::move(out).freeze();
  }

 private:
  static bool is_integer(const ElementType& t) {
    return t.type->cls == DTypeClass::kInt || t.type->cls == DTypeClass::kUInt;
  }

  static ElementType parse(const ConfigReader& config, const char* key, const std::string& text) {
    ElementType t;
    try {
      t.type = &DataType::from_v2_typestr(text, t.endian);
    } catch (const FormatError&) {
      config.fail(key, "is not a NumPy type string this reading knows: \"" + text + "\"");
    }
    return t;
  }

  // A value of dtype's width, as dtype's sign widens it.
  [[nodiscard]] std::uint64_t widen(std::uint64_t v) const {
    const std::size_t n = dtype_.type->size;
    if (n == 8) return v;
    v &= (std::uint64_t{1} << (8 * n)) - 1;
    if (dtype_.type->cls != DTypeClass::kInt) return v;
    const std::uint64_t sign = std::uint64_t{1} << (8 * n - 1);
    return (v ^ sign) - sign;
  }

  std::size_t decoded_size(std::size_t encoded) const {
    const std::size_t a = astype_.type->size;
    if (encoded % a != 0) {
      throw CodecError(std::string(name()) + ": " + std::to_string(encoded) +
                       " bytes are not a whole number of " + std::to_string(a) + "-byte elements");
    }
    return encoded / a * dtype_.type->size;
  }

  void accumulate(const Buffer& encoded, std::span<std::byte> out) const {
    const std::size_t a = astype_.type->size;
    const std::size_t d = dtype_.type->size;
    const std::size_t n = encoded.size() / a;
    const std::byte* in = encoded.data();
    if (dtype_.type->cls == DTypeClass::kFloat) {
      with_float_type([&](auto zero) { float_sums_as<decltype(zero)>(in, out.data(), n); });
      return;
    }
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < n; ++i) {
      sum += load(in + i * a, astype_);
      store(out.data() + i * d, sum, dtype_);
    }
  }

  // Floats (dtype and astype the same type): the running sum in that type's precision.
  template <typename F>
  void float_sums_as(const std::byte* in, std::byte* out, std::size_t n) const {
    using Bits = std::conditional_t<sizeof(F) == 4, std::uint32_t, std::uint64_t>;
    F sum = 0;
    for (std::size_t i = 0; i < n; ++i) {
      // (The first is copied, as cumsum copies it: 0 + -0.0 would be +0.0.)
      const F v = std::bit_cast<F>(static_cast<Bits>(load(in + i * sizeof(F), astype_)));
      sum = i == 0 ? v : sum + v;
      store(out + i * sizeof(F), std::bit_cast<Bits>(sum), dtype_);
    }
  }

  template <typename F>
  void float_differences_as(const std::byte* in, std::byte* out, std::size_t n) const {
    using Bits = std::conditional_t<sizeof(F) == 4, std::uint32_t, std::uint64_t>;
    F previous = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const F v = std::bit_cast<F>(static_cast<Bits>(load(in + i * sizeof(F), dtype_)));
      const F difference = i == 0 ? v : v - previous;
      store(out + i * sizeof(F), std::bit_cast<Bits>(difference), astype_);
      previous = v;
    }
  }

  // Calls `f` with a zero of dtype's floating-point type (float32 or float64: the constructor
  // refuses the others), which picks the instantiation.
  template <typename Fn>
  void with_float_type(Fn&& f) const {
    if (dtype_.type->size == 4) {
      std::forward<Fn>(f)(float{});
    } else {
      std::forward<Fn>(f)(double{});
    }
  }

  ElementType dtype_;
  ElementType astype_;
  nlohmann::json configuration_;
};

}  // namespace

void register_delta_codec(CodecRegistry& registry) {
  registry.add("numcodecs.delta",
               [](const nlohmann::json& configuration, const CodecContext& context) {
                 return std::make_shared<DeltaCodec>(configuration, context.zarr_format);
               });
}

}  // namespace zarr_device::codecs
