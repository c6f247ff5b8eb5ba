// The engine's I/O settings, each written down once: the table in settings.cpp gives every
// setting's name, default, environment variable (ZARR_DEVICE_<NAME>), documentation and valid
// values, and lists the few variables read from the environment alone. The values in force are
// process-wide, read from the environment at first use; a call takes them once, as it starts, into
// its options (IoOptions, ReadOptions, CudaWriteOptions), which then travel with it. The Python
// package reads and changes them through the same table (zarr_device.get_config / set_config).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace zarr_device {

// Which compressed chunks the GPU decodes, and where. nvCOMP's decoders trust their input: a
// malformed frame can fault the GPU context, hang, or write past its output (docs/architecture.md,
// "nvCOMP on malformed frames"), and framing checks on the CPU cannot catch damage inside a
// compressed block. A decoder process of its own (one per GPU, isolated_decoder.hpp) keeps those
// failures away from the caller's context and memory. (Numbered as the table lists the choices.)
enum class GpuDecode {
  kChecked = 0,   // chunks a crc32c verified on the CPU vouches for decode in the caller's
                  // process; the rest in the decoder process (on the CPU where there is none)
  kTrusted = 1,   // every chunk nvCOMP can decode, in the caller's process
  kOff = 2,       // none: decode on CPU threads, copy the result once
  kIsolated = 3,  // every compressed chunk in the decoder process (on the CPU where there is
                  // none): for data whose writer is not trusted, which a crc32c cannot vouch for
};

// Which chunks the GPU compresses when writing from device memory.
enum class GpuEncode {
  kOn = 0,    // zstd chunks with nvCOMP (standard zstd frames; the codec's level is not applied)
  kOff = 1,   // every chunk on CPU threads, after the GPU has laid out its elements
  kAuto = 2,  // as kOn, except chunks byte-shuffled before zstd: CPU threads compress those,
              // since nvCOMP decodes libzstd's frames of them faster than its own (a load
              // outlasts its save many times over)
};

// Whether reads onto a GPU decode part of the chunks the GPU could decode on CPU threads instead.
enum class DecodeSharing {
  kAuto = 0,  // where a CPU share makes the read end sooner (few chunks, or large ones)
  kOff = 1,   // never: every chunk the GPU can decode is decoded there
};

// One value of every setting; settings_table() says what each means.
struct Settings {
  // The table's defaults (without the environment: see settings()).
  Settings();
  // The defaults overridden by the environment's ZARR_DEVICE_<NAME> variables. UsageError naming
  // the variable when one holds a value the setting does not take.
  static Settings from_environment();

  int threads;
  std::size_t max_inflight_bytes;
  GpuDecode gpu_decode;
  std::size_t staging_bytes;
  std::size_t decode_bytes;
  std::size_t decoder_bytes;
  int staging_slots;
  GpuEncode gpu_encode;
  DecodeSharing decode_sharing;
  std::size_t zstd_block_bytes;

  bool operator==(const Settings&) const = default;
};

// The values in force: Settings::from_environment() on first use (its UsageError is raised by
// every call until the variable is fixed), then what set_settings() made them. Thread-safe.
Settings settings();
// Replaces the values in force (for calls whose options are made afterwards). UsageError naming
// the setting when a value is outside its range; nothing changes then. Thread-safe.
void set_settings(const Settings& values);

enum class SettingKind {
  kCount,   // an integer from minimum to maximum
  kSize,    // a byte count from minimum to maximum, with an optional unit ("256MiB", "1GB")
  kChoice,  // one of `choices`
};

// One row of the table.
struct SettingInfo {
  std::string_view name;      // the member of Settings, and the setting's name in Python
  std::string_view variable;  // the environment variable: ZARR_DEVICE_<NAME>
  SettingKind kind;
  std::string_view default_text;  // the default, as the environment variable would hold it
  std::uint64_t minimum = 0;      // kCount, kSize
  std::uint64_t maximum = 0;      //
  std::span<const std::string_view> choices;  // kChoice, in the order of the enum's values
  std::string_view doc;                       // what the setting does, for people
  // The setting's value in Settings: the number, or the index of the choice.
  std::uint64_t (*get)(const Settings&);
  void (*set)(Settings&, std::uint64_t);
  // kSize: 0 is taken too, below `minimum`, and means "chosen by the engine" (the doc says how).
  bool zero_is_automatic = false;
};

std::span<const SettingInfo> settings_table();

// The GPU memory that reads onto a device of `device_memory` bytes decode in: `decode_bytes`, or
// where that is 0 (the default) kAutomaticDecodeShare of the device's memory, at least
// kAutomaticDecodeMinimum. Large chunks decode as fast as that memory lets many decode at once
// (each decodes slowly on one thread block, with a multiple of its size of memory: the benchmark
// notebook, "What bounds large chunks; reads on one CUDA hardware queue"), so a larger device's
// default lets more of them decode; a small one keeps the minimum.
inline constexpr std::size_t kAutomaticDecodeShare = 32;
inline constexpr std::size_t kAutomaticDecodeMinimum = std::size_t{2} << 30;
std::size_t decode_memory_for(std::size_t decode_bytes, std::size_t device_memory);
// The GPU memory lent to a device's decoder process (gpu_decode "checked" or "isolated" on chunks
// without a checksum): its arena of stored bytes and its arena of decoded ones, a third and two
// thirds of `decoder_bytes`, or where that is 0 (the default) of kDecoderStagingMultiple times
// `staging_bytes` (so that every staging slot's batch can be in the process at once, with room
// for what it decodes to), at most a kDecoderShare-th of the device's memory and at least
// kDecoderMinimum. The process decodes only as many batches at once as are in its arenas.
inline constexpr std::size_t kDecoderStagingMultiple = 3;
inline constexpr std::size_t kDecoderShare = 16;
inline constexpr std::size_t kDecoderMinimum = std::size_t{576} << 20;
struct DecoderArenas {
  std::size_t input = 0;
  std::size_t output = 0;
};
DecoderArenas decoder_arenas_for(std::size_t decoder_bytes, std::size_t staging_bytes,
                                 std::size_t device_memory);
// The row of `name`; UsageError naming the settings there are for any other name.
const SettingInfo& setting_info(std::string_view name);

// A byte count as people write it ("256MiB", "1GB", "1.5GiB", "1048576"): the number times the
// unit (decimal kB..TB, binary KiB..TiB; a fraction or an exponent truncated), blanks around
// either. The one parser of sizes: the environment's, the settings' and, through the Python
// module (zarr_device's parse_size), the command line's.
struct ByteCount {
  enum Kind { kNotASize, kTooLarge, kBytes } kind = kNotASize;
  std::uint64_t bytes = 0;  // kBytes
};
ByteCount parse_byte_count(std::string_view text);

// `text` as `setting` takes it from the environment: the number (a count; a size with an optional
// unit, as parse_byte_count reads it) or the index of the choice. UsageError
// beginning with `what` (the variable, or the setting) when it is not a valid value.
std::uint64_t parse_setting(const SettingInfo& setting, std::string_view text,
                            std::string_view what);

// The variables the engine reads from the environment alone, besides the settings' own: where a
// library is, and switches for finding faults. They are not settings because no call changes
// them: each is read where it takes effect (a library as it loads, the trace as a read ends).
enum class EnvironmentVariable {
  kNvcompLibrary,  // ZARR_DEVICE_NVCOMP_LIBRARY
  kCufileLibrary,  // ZARR_DEVICE_CUFILE_LIBRARY
  kTrace,          // ZARR_DEVICE_TRACE
  kLeakWarnings,   // ZARR_DEVICE_LEAK_WARNINGS
  kDecoder,        // ZARR_DEVICE_DECODER
};

struct EnvironmentVariableInfo {
  EnvironmentVariable which;
  std::string_view variable;
  std::string_view doc;  // what it does and what it takes, for people
};

std::span<const EnvironmentVariableInfo> environment_variables();
// The variable's name.
std::string_view variable_name(EnvironmentVariable which);
// Its value now; nullopt where it is not set.
std::optional<std::string> environment_value(EnvironmentVariable which);

}  // namespace zarr_device
