// The settings table: defaults, the environment's grammar (counts, sizes with units, choices) and
// its errors, the values in force and the option structs that start from them.
#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "device_read/staging_shape.hpp"
#include "device_read/write_slots.hpp"
#include "zarr_device/cuda_io.hpp"
#include "zarr_device/errors.hpp"
#include "zarr_device/settings.hpp"

namespace zd = zarr_device;

namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

// Each test starts from and leaves the values in force as they were.
class Settings : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = zd::settings(); }
  void TearDown() override { zd::set_settings(saved_); }

 private:
  zd::Settings saved_;
};

// Sets an environment variable for one scope.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    setenv(name, value, 1);  // NOLINT(concurrency-mt-unsafe): tests set it before any thread reads
  }
  ~ScopedVariable() { unsetenv(name_.c_str()); }  // NOLINT(concurrency-mt-unsafe)
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  std::string name_;
};

std::uint64_t parse(std::string_view name, std::string_view text) {
  return zd::parse_setting(zd::setting_info(name), text, name);
}

// The message of the UsageError that parsing `text` raises ("" when none is raised).
std::string refusal(std::string_view name, std::string_view text) {
  try {
    parse(name, text);
  } catch (const zd::UsageError& e) {
    return e.what();
  }
  return "";
}

TEST_F(Settings, TheTableGivesEverySettingAVariableADefaultAndDocumentation) {
  std::set<std::string_view> names;
  for (const auto& setting : zd::settings_table()) {
    EXPECT_TRUE(names.insert(setting.name).second) << setting.name;
    std::string variable = "ZARR_DEVICE_";
    for (const char c : setting.name) variable += static_cast<char>(std::toupper(c));
    EXPECT_EQ(setting.variable, variable);
    EXPECT_FALSE(setting.doc.empty()) << setting.name;
    EXPECT_EQ(&zd::setting_info(setting.name), &setting);
    EXPECT_NO_THROW(parse(setting.name, setting.default_text)) << setting.name;
  }
  EXPECT_EQ(names,
            (std::set<std::string_view>{"threads", "max_inflight_bytes", "gpu_decode", "gpu_encode",
                                        "staging_bytes", "decode_bytes", "decoder_bytes",
                                        "staging_slots", "decode_sharing", "zstd_block_bytes"}));
  try {
    (void)zd::setting_info("stagingbytes");
    FAIL() << "an unknown setting was found";
  } catch (const zd::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("staging_bytes"), std::string::npos) << e.what();
  }
}

TEST_F(Settings, DefaultsAreTheTables) {
  const zd::Settings defaults;
  EXPECT_EQ(defaults.threads, 0);
  EXPECT_EQ(defaults.max_inflight_bytes, 256 * kMiB);
  EXPECT_EQ(defaults.gpu_decode, zd::GpuDecode::kChecked);
  EXPECT_EQ(defaults.gpu_encode, zd::GpuEncode::kAuto);
  EXPECT_EQ(defaults.decode_sharing, zd::DecodeSharing::kAuto);
  EXPECT_EQ(defaults.staging_bytes, 768 * kMiB);
  EXPECT_EQ(defaults.decode_bytes, 0U);   // sized by the device
  EXPECT_EQ(defaults.decoder_bytes, 0U);  // sized by the staging and the device
  EXPECT_EQ(defaults.staging_slots, 12);
  for (const auto& setting : zd::settings_table()) {
    EXPECT_EQ(setting.get(defaults), parse(setting.name, setting.default_text)) << setting.name;
  }
}

TEST_F(Settings, SizesTakeTheUnitsOfSizesPy) {
  EXPECT_EQ(parse("max_inflight_bytes", "1048576"), kMiB);
  EXPECT_EQ(parse("max_inflight_bytes", "256MiB"), 256 * kMiB);
  EXPECT_EQ(parse("max_inflight_bytes", " 256 mib "), 256 * kMiB);
  EXPECT_EQ(parse("max_inflight_bytes", "1.5GiB"), 3 * 512 * kMiB);
  EXPECT_EQ(parse("max_inflight_bytes", ".5KiB"), 512U);
  EXPECT_EQ(parse("max_inflight_bytes", "2GB"), 2'000'000'000U);
  EXPECT_EQ(parse("max_inflight_bytes", "1e3kB"), 1'000'000U);
  EXPECT_EQ(parse("max_inflight_bytes", "3k"), 3000U);
  EXPECT_EQ(parse("max_inflight_bytes", "7b"), 7U);
  EXPECT_EQ(parse("max_inflight_bytes", "1TiB"), kMiB * kMiB);
  EXPECT_EQ(parse("max_inflight_bytes", "1.9"), 1U);  // truncated, as int(float) does
  // Whole numbers are exact beyond a double's 53 bits.
  EXPECT_EQ(parse("max_inflight_bytes", "9007199254740993"), 9007199254740993U);
  for (const char* bad : {"", "lots", "256 MiBs", "1.", ".", "-1", "1e-3", "1e", "1 2", "0x10",
                          "256MiB,", "inf", "nan"}) {
    EXPECT_NE(refusal("max_inflight_bytes", bad).find("is not a size"), std::string::npos) << bad;
  }
  EXPECT_NE(refusal("max_inflight_bytes", "0").find("at least 1 B"), std::string::npos);
  EXPECT_NE(refusal("staging_bytes", "1MiB").find("at least 2 MiB"), std::string::npos);
  EXPECT_NE(refusal("max_inflight_bytes", "16EiB").find("not a size"), std::string::npos);
  for (const char* huge : {"18446744073709551616", "1e400", "20000000TiB"}) {
    EXPECT_NE(refusal("max_inflight_bytes", huge).find("at most"), std::string::npos) << huge;
  }
}

TEST_F(Settings, ADecodeMemoryOfZeroIsSizedByTheDevice) {
  EXPECT_EQ(parse("decode_bytes", "0"), 0U);
  EXPECT_EQ(parse("decode_bytes", "2MiB"), 2 * kMiB);
  EXPECT_EQ(refusal("decode_bytes", "1MiB"),
            "decode_bytes must be 0 (automatic) or at least 2 MiB, not '1MiB'");
  // Only the setting that says so takes 0 below its minimum.
  EXPECT_NE(refusal("staging_bytes", "0").find("must be at least 2 MiB"), std::string::npos);
  zd::Settings values;
  values.decode_bytes = 1;
  EXPECT_THROW(zd::set_settings(values), zd::UsageError);
  values.decode_bytes = 0;
  zd::set_settings(values);
  EXPECT_EQ(zd::settings().decode_bytes, 0U);

  constexpr std::size_t kGiB = std::size_t{1} << 30;
  EXPECT_EQ(zd::decode_memory_for(0, 141 * kGiB), 141 * kGiB / 32);  // an H200: 4.4 GiB
  EXPECT_EQ(zd::decode_memory_for(0, 80 * kGiB), 5 * kGiB / 2);
  EXPECT_EQ(zd::decode_memory_for(0, 24 * kGiB), 2 * kGiB);  // at least the minimum
  EXPECT_EQ(zd::decode_memory_for(0, 0), 2 * kGiB);
  EXPECT_EQ(zd::decode_memory_for(512 * kMiB, 141 * kGiB), 512 * kMiB);  // a size set is kept
  // The decoder process's arenas: three times the staging, a third for stored bytes.
  const auto arenas = zd::decoder_arenas_for(0, 768 * kMiB, 80 * kGiB);
  EXPECT_EQ(arenas.input, 768 * kMiB);
  EXPECT_EQ(arenas.output, 1536 * kMiB);
  const auto share = zd::decoder_arenas_for(0, 768 * kMiB, 24 * kGiB);  // a 16th of the GPU
  EXPECT_EQ(share.input, 512 * kMiB);
  EXPECT_EQ(share.output, 1024 * kMiB);
  const auto least = zd::decoder_arenas_for(0, 2 * kMiB, 80 * kGiB);  // at least 576 MiB
  EXPECT_EQ(least.input, 192 * kMiB);
  EXPECT_EQ(least.output, 384 * kMiB);
  const auto set = zd::decoder_arenas_for(3 * kGiB, 768 * kMiB, 8 * kGiB);  // a size set is kept
  EXPECT_EQ(set.input, kGiB);
  EXPECT_EQ(set.output, 2 * kGiB);
}

TEST_F(Settings, CountsAndChoicesAreCheckedAgainstTheirRanges) {
  EXPECT_EQ(parse("threads", " 8 "), 8U);
  EXPECT_EQ(parse("threads", "+4096"), 4096U);
  EXPECT_EQ(parse("staging_slots", "1"), 1U);
  EXPECT_EQ(refusal("threads", "-1"), "threads must be from 0 to 4096, not -1");
  EXPECT_EQ(refusal("threads", "4097"), "threads must be from 0 to 4096, not 4097");
  EXPECT_EQ(refusal("threads", "x"), "threads must be an integer, not 'x'");
  EXPECT_EQ(refusal("threads", "1.5"), "threads must be an integer, not '1.5'");
  EXPECT_EQ(refusal("staging_slots", "0"), "staging_slots must be from 1 to 256, not 0");
  EXPECT_NE(refusal("threads", "99999999999999999999999").find("from 0 to 4096"),
            std::string::npos);
  EXPECT_EQ(parse("gpu_decode", "trusted"), static_cast<std::uint64_t>(zd::GpuDecode::kTrusted));
  EXPECT_EQ(parse("gpu_encode", "off"), static_cast<std::uint64_t>(zd::GpuEncode::kOff));
  EXPECT_EQ(parse("gpu_encode", "auto"), static_cast<std::uint64_t>(zd::GpuEncode::kAuto));
  EXPECT_EQ(refusal("gpu_decode", "Checked"),
            "gpu_decode must be 'checked', 'trusted', 'off' or 'isolated', not 'Checked'");
}

TEST_F(Settings, TheEnvironmentOverridesDefaultsAndBadValuesNameTheVariable) {
  {
    const ScopedVariable threads("ZARR_DEVICE_THREADS", "3");
    const ScopedVariable budget("ZARR_DEVICE_MAX_INFLIGHT_BYTES", "64MiB");
    const ScopedVariable decode("ZARR_DEVICE_GPU_DECODE", "off");
    const ScopedVariable staging("ZARR_DEVICE_STAGING_BYTES", "1.5GiB");
    const auto values = zd::Settings::from_environment();
    EXPECT_EQ(values.threads, 3);
    EXPECT_EQ(values.max_inflight_bytes, 64 * kMiB);
    EXPECT_EQ(values.gpu_decode, zd::GpuDecode::kOff);
    EXPECT_EQ(values.staging_bytes, 1536 * kMiB);
    EXPECT_EQ(values.gpu_encode, zd::Settings().gpu_encode);  // not set: the default
  }
  EXPECT_EQ(zd::Settings::from_environment(), zd::Settings());
  for (const auto& [variable, value] :
       std::vector<std::pair<const char*, const char*>>{{"ZARR_DEVICE_GPU_DECODE", "bogus"},
                                                        {"ZARR_DEVICE_STAGING_BYTES", "256 MiBs"},
                                                        {"ZARR_DEVICE_STAGING_BYTES", "1MiB"},
                                                        {"ZARR_DEVICE_THREADS", "-1"},
                                                        {"ZARR_DEVICE_STAGING_SLOTS", "0"}}) {
    const ScopedVariable bad(variable, value);
    try {
      (void)zd::Settings::from_environment();
      ADD_FAILURE() << variable << "=" << value << " was taken";
    } catch (const zd::UsageError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(std::string("the environment variable ") + variable, 0),
                0U)
          << e.what();
    }
  }
}

TEST_F(Settings, SetSettingsChangesWhatCallsStartFrom) {
  zd::Settings changed = zd::settings();
  changed.threads = 3;
  changed.max_inflight_bytes = 5 * kMiB;
  changed.staging_bytes = 32 * kMiB;
  changed.staging_slots = 4;
  changed.gpu_decode = zd::GpuDecode::kTrusted;
  changed.gpu_encode = zd::GpuEncode::kOff;
  changed.decode_sharing = zd::DecodeSharing::kOff;
  zd::set_settings(changed);
  EXPECT_EQ(zd::settings(), changed);
  const zd::IoOptions io;
  EXPECT_EQ(io.threads, 3);
  EXPECT_EQ(io.max_inflight_bytes, 5 * kMiB);
  const auto read = zd::ReadOptions::from_settings();
  EXPECT_EQ(read.threads, 3);
  EXPECT_EQ(read.staging_bytes, 32 * kMiB);
  EXPECT_EQ(read.slots, 4);
  EXPECT_EQ(read.gpu_decode, zd::GpuDecode::kTrusted);
  EXPECT_EQ(read.decode_sharing, zd::DecodeSharing::kOff);
  const zd::CudaWriteOptions write;
  EXPECT_EQ(write.io.threads, 3);
  EXPECT_EQ(write.io.max_inflight_bytes, 5 * kMiB);
  EXPECT_EQ(write.staging_bytes, 32 * kMiB);
  EXPECT_EQ(write.gpu_encode, zd::GpuEncode::kOff);
  // A read's options are what the settings were as it started: changed later, they stay.
  zd::set_settings(zd::Settings{});
  EXPECT_EQ(read.staging_bytes, 32 * kMiB);
  EXPECT_EQ(zd::ReadOptions::from_settings().staging_bytes, zd::Settings{}.staging_bytes);
}

// The staging a read's options configure, worked out once: whole 2 MiB pages a slot, at least one
// slot and one page, never more than the staging in all.
TEST(StagingShape, CutsTheStagingIntoWholePages) {
  using zd::device_read::StagingShape;
  const auto shape = StagingShape::of(768 * kMiB, 12, 0);
  EXPECT_EQ(shape.bytes, 768 * kMiB);
  EXPECT_EQ(shape.slots, 12U);
  EXPECT_EQ(shape.slot_bytes, 64 * kMiB);
  EXPECT_EQ(StagingShape::of(100 * kMiB, 12, 0).slot_bytes, 8 * kMiB);  // 8.33 MiB, rounded down
  EXPECT_EQ(StagingShape::of(2 * kMiB, 12, 0).slot_bytes, 2 * kMiB);    // at least a page
  EXPECT_EQ(StagingShape::of(64 * kMiB, 0, 0).slots, 1U);
  for (std::size_t staging = 4 * kMiB; staging < 2048 * kMiB; staging = staging * 3 / 2) {
    for (std::size_t slots = 1; slots <= 16; ++slots) {
      const auto cut = StagingShape::of(staging, slots, kMiB);
      EXPECT_EQ(cut.slot_bytes % zd::device_read::kSlotPage, 0U);
      if (staging >= slots * zd::device_read::kSlotPage)
        EXPECT_LE(cut.slots * cut.slot_bytes, staging);
    }
  }
  EXPECT_NE(StagingShape::of(64 * kMiB, 4, 0), StagingShape::of(64 * kMiB, 4, kMiB));
}

TEST_F(Settings, OutOfRangeValuesAreRefusedAndChangeNothing) {
  const zd::Settings before = zd::settings();
  zd::Settings bad = before;
  bad.threads = -1;
  try {
    zd::set_settings(bad);
    FAIL() << "threads=-1 was taken";
  } catch (const zd::UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "threads must be from 0 to 4096, not -1");
  }
  bad = before;
  bad.staging_bytes = kMiB;
  EXPECT_THROW(zd::set_settings(bad), zd::UsageError);
  bad = before;
  bad.gpu_decode = static_cast<zd::GpuDecode>(7);
  EXPECT_THROW(zd::set_settings(bad), zd::UsageError);
  EXPECT_EQ(zd::settings(), before);
}

TEST_F(Settings, ReadersSeeWholeValuesWhileOthersSetThem) {
  zd::Settings a = zd::settings();
  zd::Settings b = a;
  a.threads = 1;
  a.staging_slots = 1;
  b.threads = 2;
  b.staging_slots = 2;
  zd::set_settings(a);  // readers may run before any writer
  std::atomic<bool> mixed = false;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        if (t % 2 == 0) {
          zd::set_settings(i % 2 == 0 ? a : b);
        } else {
          const auto now = zd::settings();
          if (now.threads != now.staging_slots) mixed = true;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_FALSE(mixed);
}

// staging_bytes means the whole pinned staging for writes as for reads: the writer's two slots
// share it.
TEST(WriteStaging, EachOfTheTwoSlotsIsHalfTheStaging) {
  EXPECT_EQ(zd::device_read::kWriteSlots, 2U);
  EXPECT_EQ(zd::device_read::write_slot_bytes(768 * kMiB), 384 * kMiB);
  EXPECT_EQ(zd::device_read::write_slot_bytes(2 * kMiB), kMiB);  // the smallest staging_bytes
  EXPECT_EQ(zd::device_read::write_slot_bytes(3 * kMiB), kMiB);
  for (std::uint64_t staging = 2 * kMiB; staging < 64 * kMiB; staging += 333'333) {
    const auto slot = zd::device_read::write_slot_bytes(staging);
    EXPECT_LE(zd::device_read::kWriteSlots * slot, staging);
    EXPECT_GT(zd::device_read::kWriteSlots * (slot + kMiB), staging);
  }
}

}  // namespace
