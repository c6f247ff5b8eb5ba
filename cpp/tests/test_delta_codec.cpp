// numcodecs' delta filter (numcodecs.delta, a Zarr v2 filter): differences stored in `astype`,
// integers wrapping as NumPy's do, floats summed one after another; the byte orders its
// configuration names. zarr-python's own reads are compared with in
// python/tests/test_v2_filters.py.
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "codec_test_util.hpp"
#include "codecs/codec_chain.hpp"

namespace zarr_device {
namespace {

using namespace test;

template <typename T>
Bytes bytes_of(const std::vector<T>& values) {
  Bytes out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

template <typename T>
std::vector<T> values_of(const Buffer& buffer) {
  std::vector<T> out(buffer.size() / sizeof(T));
  std::memcpy(out.data(), buffer.data(), buffer.size());
  return out;
}

TEST(DeltaCodec, StoresDifferencesInTheNarrowerTypeAndWraps) {
  const auto codec = make("numcodecs.delta", {{"dtype", "<i4"}, {"astype", "<i1"}});
  const std::vector<std::int32_t> values = {100, 120, -100, -100, 27, 2147483647};
  const Buffer encoded = codec->encode(to_buffer(bytes_of(values)));
  // 120 - 100 = 20; -100 - 120 = -220 -> 36; 0; 127; 2147483647 - 27 -> low byte 0xE4 = -28.
  EXPECT_EQ(values_of<std::int8_t>(encoded), (std::vector<std::int8_t>{100, 20, 36, 0, 127, -28}));
  // The sum of the stored differences only keeps the low byte's information: what numcodecs
  // returns too (its cumsum of int8 differences cast to int32).
  EXPECT_EQ(values_of<std::int32_t>(codec->decode(encoded, values.size() * 4)),
            (std::vector<std::int32_t>{100, 120, 156, 156, 283, 255}));
  const auto same = make("numcodecs.delta", {{"dtype", "<i4"}});
  test::expect_round_trip(*same, bytes_of(values));
  EXPECT_EQ(same->to_json(), json({{"id", "delta"}, {"dtype", "<i4"}}));
}

TEST(DeltaCodec, ReadsTheByteOrdersItsConfigurationNames) {
  const auto v2 = context_for(&kUInt8, 2);  // a v2 filter, which sees the serialized bytes
  const auto codec = make("numcodecs.delta", {{"dtype", ">u2"}, {"astype", ">u2"}}, v2);
  // 0x0102 then 0x0105: stored as 0x0102 and 3, big-endian.
  const Bytes decoded = test::from_hex("01020105");
  EXPECT_EQ(test::to_bytes(codec->encode(to_buffer(decoded))), test::from_hex("01020003"));
  test::expect_round_trip(*codec, test::typed_data(4096, 2, 1));
  const auto widening = make("numcodecs.delta", {{"dtype", "<i2"}, {"astype", ">i8"}}, v2);
  test::expect_round_trip(*widening, test::typed_data(4096, 2, 2));
  // In a v3 array it sees little-endian elements in memory: a big-endian type is refused.
  EXPECT_THROW((void)make("numcodecs.delta", {{"dtype", ">u2"}}), FormatError);
  EXPECT_NO_THROW((void)make("numcodecs.delta", {{"dtype", "|u1"}}));
}

TEST(DeltaCodec, FloatsSumInTheirOwnPrecisionAndKeepTheFirstAsItIs) {
  const auto codec = make("numcodecs.delta", {{"dtype", "<f4"}});
  const std::vector<float> values = {-0.0F, 0.1F, 0.3F, 1e30F, 1.0F};
  const Buffer encoded = codec->encode(to_buffer(bytes_of(values)));
  const auto decoded = values_of<float>(codec->decode(encoded, values.size() * 4));
  EXPECT_TRUE(std::signbit(decoded[0]));  // -0.0, not 0 + -0.0
  // What float32 arithmetic gives back, one sum after another (1.0 is lost next to 1e30).
  const auto diffs = values_of<float>(encoded);
  float sum = diffs[0];
  for (std::size_t i = 1; i < diffs.size(); ++i) {
    sum += diffs[i];
    EXPECT_EQ(std::bit_cast<std::uint32_t>(decoded[i]), std::bit_cast<std::uint32_t>(sum)) << i;
  }
  test::expect_round_trip(*make("numcodecs.delta", {{"dtype", ">f8"}}, context_for(&kUInt8, 2)),
                          test::typed_data(800, 8, 3));
}

TEST(DeltaCodec, RefusesWhatItDoesNotReadByName) {
  EXPECT_THROW((void)make("numcodecs.delta", json::object()), FormatError);
  EXPECT_THROW((void)make("numcodecs.delta", {{"dtype", "<f8"}, {"astype", "<f4"}}), FormatError);
  EXPECT_THROW((void)make("numcodecs.delta", {{"dtype", "<f2"}}), FormatError);
  EXPECT_THROW((void)make("numcodecs.delta", {{"dtype", "<i4"}, {"astype", "<f4"}}), FormatError);
  EXPECT_THROW((void)make("numcodecs.delta", {{"dtype", "nonsense"}}), FormatError);
  const auto codec = make("numcodecs.delta", {{"dtype", "<i4"}, {"astype", "<i2"}});
  test::expect_decode_error(*codec, Bytes(7), 14, "not whole elements");
  test::expect_wrong_sizes_rejected(*codec, Bytes(8), 16);
  test::fuzz_decode(*codec, Bytes(64), 128, 200, 4);
}

// zarr-python 3 lists it before the bytes codec of a v3 array; the chain runs it right after a
// little-endian bytes codec, and writes it back where the metadata had it.
TEST(DeltaCodec, AV3ChainTakesItBeforeALittleEndianBytesCodec) {
  const json delta = {{"name", "numcodecs.delta"}, {"configuration", {{"dtype", "<i4"}}}};
  const json little = {{"name", "bytes"}, {"configuration", {{"endian", "little"}}}};
  const json codecs = json::array({delta, little, {{"name", "zstd"}}});
  const codecs::CodecChain chain(codecs, make_spec({6}, "int32"), 3);
  const std::vector<std::int32_t> values = {5, 7, 2, 2, -9, 100};
  const Bytes logical = bytes_of(values);
  const auto stored = chain.encode(logical);
  ASSERT_TRUE(stored.has_value());
  const Buffer inner = chain.bytes_to_bytes()[1]->decode(*stored, std::nullopt);
  EXPECT_EQ(values_of<std::int32_t>(inner), (std::vector<std::int32_t>{5, 2, -5, 0, -11, 109}));
  Bytes out(values.size() * 4);
  const std::vector<std::int64_t> shape = {6};
  const std::vector<DimSlice> all = {{0, 1, 6}};
  chain.decode_into(*stored, all, c_view(out, shape, 4));
  EXPECT_EQ(out, bytes_of(values));
  EXPECT_EQ(chain.to_json()[0]["name"], "numcodecs.delta");
  EXPECT_EQ(chain.to_json()[1]["name"], "bytes");
  const json big = {{"name", "bytes"}, {"configuration", {{"endian", "big"}}}};
  EXPECT_THROW(codecs::CodecChain(json::array({delta, big}), make_spec({6}, "int32"), 3),
               FormatError);
  const json transpose = {{"name", "transpose"}, {"configuration", {{"order", {0}}}}};
  EXPECT_THROW(
      codecs::CodecChain(json::array({delta, transpose, little}), make_spec({6}, "int32"), 3),
      FormatError);
}

}  // namespace
}  // namespace zarr_device
