#include "zarr_device/settings.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <optional>
#include <string>

#include "zarr_device/errors.hpp"

namespace zarr_device {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kNoLimit = std::numeric_limits<std::size_t>::max();

constexpr std::array<std::string_view, 4> kGpuDecodeChoices = {"checked", "trusted", "off",
                                                               "isolated"};
constexpr std::array<std::string_view, 3> kGpuEncodeChoices = {"on", "off", "auto"};
constexpr std::array<std::string_view, 2> kDecodeSharingChoices = {"auto", "off"};
static_assert(static_cast<std::size_t>(GpuDecode::kChecked) == 0 &&
              static_cast<std::size_t>(GpuDecode::kTrusted) == 1 &&
              static_cast<std::size_t>(GpuDecode::kOff) == 2 &&
              static_cast<std::size_t>(GpuDecode::kIsolated) == 3);
static_assert(static_cast<std::size_t>(GpuEncode::kOn) == 0 &&
              static_cast<std::size_t>(GpuEncode::kOff) == 1 &&
              static_cast<std::size_t>(GpuEncode::kAuto) == 2);

// The one table. A new setting is a member of Settings and a row here (Settings() sets every
// member from its row, so a member without one is left undefined).
const std::array<SettingInfo, 10> kTable = {{
    {"threads",
     "ZARR_DEVICE_THREADS",
     SettingKind::kCount,
     "0",
     0,
     4096,
     {},
     "Worker threads that fetch, check and decode chunks (0: one per core).",
     [](const Settings& s) { return static_cast<std::uint64_t>(s.threads); },
     [](Settings& s, std::uint64_t v) { s.threads = static_cast<int>(v); }},
    {"max_inflight_bytes",
     "ZARR_DEVICE_MAX_INFLIGHT_BYTES",
     SettingKind::kSize,
     "256MiB",
     1,
     kNoLimit,
     {},
     "Host memory that fetched and decoded chunks (and the intermediate buffers of their codecs) "
     "may hold at once on the CPU path: host reads and writes, and the chunks a write from a GPU "
     "covers in part. It bounds a call's memory beyond its data, whatever the array's size (a "
     "chunk larger than the whole budget still proceeds, alone). Reads to a GPU do not use it: "
     "their host memory is the pinned staging (staging_bytes) plus, for each thread decoding a "
     "chunk on the CPU, that chunk's stored bytes and its codecs' buffers.",
     [](const Settings& s) { return std::uint64_t{s.max_inflight_bytes}; },
     [](Settings& s, std::uint64_t v) { s.max_inflight_bytes = v; }},
    {"gpu_decode", "ZARR_DEVICE_GPU_DECODE", SettingKind::kChoice, "checked", 0, 0,
     kGpuDecodeChoices,
     "Which compressed chunks reads to a CUDA device decode on the GPU, and where. nvCOMP trusts "
     "its input: a malformed chunk can fault the GPU context, hang or write past its output. By "
     "default ('checked') chunks a crc32c checksum vouches for (verified on the CPU first) decode "
     "in your process, and other zstd, LZ4, gzip, zlib and Blosc chunks in a decoder process of "
     "its own (one per GPU; it verifies gzip's CRC-32 and zlib's Adler-32 on the GPU), where "
     "a fault, a hang or a write past its output costs that process, not your CUDA context: the "
     "chunk is then decoded on the CPU, and a chunk the CPU rejects too is an error naming it. "
     "'isolated' sends every compressed chunk to the decoder process (for data whose writer you do "
     "not trust: a crc32c guards against damage, not against a forger); 'trusted' decodes every "
     "chunk nvCOMP can in your process (fastest, for data you trust; Blosc chunks still in the "
     "decoder process); 'off' decodes on the CPU. "
     "Where the decoder process cannot start, its chunks decode on the CPU.",
     [](const Settings& s) { return static_cast<std::uint64_t>(s.gpu_decode); },
     [](Settings& s, std::uint64_t v) { s.gpu_decode = static_cast<GpuDecode>(v); }},
    {"staging_bytes",
     "ZARR_DEVICE_STAGING_BYTES",
     SettingKind::kSize,
     "768MiB",
     2 * kMiB,
     kNoLimit,
     {},
     "Pinned host memory that chunk bytes pass through between the host and a GPU, allocated on "
     "first use and kept (a change reallocates on the next call); reads onto devices torch drives "
     "(Apple MPS, Intel XPU, ROCm) stage through at most this much a call. Reads split it into "
     "staging_slots slots, filled, copied and decoded in turn; writes into two halves, one "
     "encoded on the GPU while the other's chunks are stored (a chunk, or a shard, larger than a "
     "half is written through the CPU). A read's GPU memory beyond its data is a copy of each "
     "slot plus decode_bytes; a write's, twice this (laid-out and compressed chunks).",
     [](const Settings& s) { return std::uint64_t{s.staging_bytes}; },
     [](Settings& s, std::uint64_t v) { s.staging_bytes = v; }},
    {"decode_bytes",
     "ZARR_DEVICE_DECODE_BYTES",
     SettingKind::kSize,
     "0",
     2 * kMiB,
     kNoLimit,
     {},
     "GPU memory that reads onto a GPU decode chunks in: nvCOMP's working memory and decoded "
     "chunks on their way to a strided place, taken as reads need it (up to this much) and kept "
     "for later reads until zarr_device.empty_cache(). 0 (the default): a 32nd of the GPU's "
     "memory, at least 2 GiB (4.3 GiB on a 141 GB GPU). nvCOMP's zstd decoder plans about "
     "three times a chunk's decoded size for each chunk it decodes at once, and it is fast only "
     "with many chunks at once: large chunks (16 MiB and more) decode faster with more. Reads of "
     "chunks that a staging slot holds fewer than four of size that memory from the chunks "
     "(about their decoded size) and decode in this memory together with the staging's device "
     "copies, which they do not otherwise use.",
     [](const Settings& s) { return std::uint64_t{s.decode_bytes}; },
     [](Settings& s, std::uint64_t v) { s.decode_bytes = v; },
     true},
    {"decoder_bytes",
     "ZARR_DEVICE_DECODER_BYTES",
     SettingKind::kSize,
     "0",
     64 * kMiB,
     kNoLimit,
     {},
     "GPU memory lent to the decoder process, which decodes chunks without a checksum on the GPU "
     "under gpu_decode 'checked' and 'isolated' (a third for the stored bytes of the batches in "
     "it, two thirds for what they decode to), allocated when it starts and kept until "
     "zarr_device.empty_cache(). The process decodes only as many batches at once as these hold. "
     "0 (the default): three times staging_bytes, so that every staging slot's batch can be in "
     "the process at once, at most a 16th of the GPU's memory and at least 576 MiB. A change "
     "takes effect at the next read that uses the process.",
     [](const Settings& s) { return std::uint64_t{s.decoder_bytes}; },
     [](Settings& s, std::uint64_t v) { s.decoder_bytes = v; },
     true},
    {"staging_slots",
     "ZARR_DEVICE_STAGING_SLOTS",
     SettingKind::kCount,
     "12",
     1,
     256,
     {},
     "Slots the staging of reads to a GPU is split into (fewer when a chunk does not fit one): "
     "more slots let more fetches, copies and decodes overlap.",
     [](const Settings& s) { return static_cast<std::uint64_t>(s.staging_slots); },
     [](Settings& s, std::uint64_t v) { s.staging_slots = static_cast<int>(v); }},
    {"gpu_encode", "ZARR_DEVICE_GPU_ENCODE", SettingKind::kChoice, "auto", 0, 0, kGpuEncodeChoices,
     "Writes from CUDA device memory: 'on' compresses zstd chunks on the GPU (nvCOMP; standard "
     "frames, the codec's level not applied); 'off' compresses on CPU threads (the level "
     "applied); 'auto' (the default) is 'on', except for chunks byte-shuffled before zstd "
     "(compressors='auto' checkpoints of floating-point weights), which CPU threads compress: "
     "nvCOMP reads libzstd's frames of them back onto a GPU faster than its own, and the "
     "compression still outpaces a disk (BENCHMARKS.md, Checkpoint layouts).",
     [](const Settings& s) { return static_cast<std::uint64_t>(s.gpu_encode); },
     [](Settings& s, std::uint64_t v) { s.gpu_encode = static_cast<GpuEncode>(v); }},
    {"decode_sharing", "ZARR_DEVICE_DECODE_SHARING", SettingKind::kChoice, "auto", 0, 0,
     kDecodeSharingChoices,
     "Reads onto a GPU: 'auto' decodes the chunks of a read on CPU threads instead of the GPU "
     "where that ends it sooner (a GPU decodes each chunk slowly and is fast only with many at "
     "once, so reads of few chunks, such as one tensor at a time, are faster on the CPU, and so "
     "are reads of gzip or zlib chunks unless they are hundreds of a MiB or so); 'off' "
     "leaves every chunk the GPU can decode to it.",
     [](const Settings& s) { return static_cast<std::uint64_t>(s.decode_sharing); },
     [](Settings& s, std::uint64_t v) { s.decode_sharing = static_cast<DecodeSharing>(v); }},
    {"zstd_block_bytes",
     "ZARR_DEVICE_ZSTD_BLOCK_BYTES",
     SettingKind::kSize,
     "16KiB",
     0,
     128 * 1024,
     {},
     "Writes: the chunk bytes each zstd block covers at most, in chunks of up to 128 such "
     "blocks (a frame's blocks are ended every this many bytes; larger chunks, and 0, leave them "
     "to libzstd, up to 128 KiB). The frames stay standard zstd, one per chunk, for any reader. "
     "nvCOMP decodes a block's Huffman-coded literals slowly and some of a frame's blocks side "
     "by side, so such blocks decode sooner on a GPU, and arrays of 256 KiB-2 MiB chunks read "
     "faster, for slightly more bytes stored and CPU decoding as fast (BENCHMARKS.md, Appendix: "
     "decisions, and what was measured and not kept). "
     "Writes from GPU memory that nvCOMP compresses keep its own blocks.",
     [](const Settings& s) { return std::uint64_t{s.zstd_block_bytes}; },
     [](Settings& s, std::uint64_t v) { s.zstd_block_bytes = v; }},
}};

// 'text', as Python's repr shows a string.
std::string quoted(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '\'';
  out += text;
  out += '\'';
  return out;
}

// Python's str.isspace for ASCII without the separators \x1c-\x1f: what \s matches in a regular
// expression compiled with re.ASCII.
bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_blank(text.back())) text.remove_suffix(1);
  return text;
}

// "2 MiB", "1 B": the binary unit that divides `bytes`, for messages.
std::string describe_bytes(std::uint64_t bytes) {
  constexpr std::array<std::string_view, 4> kUnits = {"TiB", "GiB", "MiB", "KiB"};
  for (std::size_t i = 0; i < kUnits.size(); ++i) {
    const std::uint64_t unit = std::uint64_t{1} << (10 * (kUnits.size() - i));
    if (bytes >= unit && bytes % unit == 0) {
      return std::to_string(bytes / unit) + " " + std::string(kUnits[i]);
    }
  }
  return std::to_string(bytes) + " B";
}

constexpr std::string_view kSizeExamples = "examples: 1GiB, 512MiB, 256KiB, 2GB, 1048576";

// The units of a size, by their lower-case spelling.
std::optional<std::uint64_t> unit_bytes(std::string_view unit) {
  struct Unit {
    std::string_view name;
    std::uint64_t bytes;
  };
  static constexpr std::array<Unit, 14> kUnits = {{{"", 1},
                                                   {"b", 1},
                                                   {"k", 1000},
                                                   {"kb", 1000},
                                                   {"m", 1000 * 1000},
                                                   {"mb", 1000 * 1000},
                                                   {"g", 1000 * 1000 * 1000},
                                                   {"gb", 1000 * 1000 * 1000},
                                                   {"t", std::uint64_t{1000} * 1000 * 1000 * 1000},
                                                   {"tb", std::uint64_t{1000} * 1000 * 1000 * 1000},
                                                   {"kib", std::uint64_t{1} << 10},
                                                   {"mib", std::uint64_t{1} << 20},
                                                   {"gib", std::uint64_t{1} << 30},
                                                   {"tib", std::uint64_t{1} << 40}}};
  std::string lower(unit);
  for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  for (const auto& u : kUnits) {
    if (u.name == lower) return u.bytes;
  }
  return std::nullopt;
}

// Throws UsageError beginning with `what` unless `value` (a number, or the index of a choice) is
// one `setting` takes; `fits`: false when the value given is negative or beyond 64 bits, which no
// setting takes. `shown`: the value as given.
void check_value(const SettingInfo& setting, bool fits, std::uint64_t value, std::string_view shown,
                 std::string_view what) {
  const std::string refused = std::string(what) + " must be ";
  const std::string given = ", not " + std::string(shown);
  switch (setting.kind) {
    case SettingKind::kCount:
      if (!fits || value < setting.minimum || value > setting.maximum) {
        throw UsageError(refused + "from " + std::to_string(setting.minimum) + " to " +
                         std::to_string(setting.maximum) + given);
      }
      return;
    case SettingKind::kSize:
      if (fits && value < setting.minimum && !(value == 0 && setting.zero_is_automatic)) {
        throw UsageError(refused + (setting.zero_is_automatic ? "0 (automatic) or " : "") +
                         "at least " + describe_bytes(setting.minimum) + given);
      }
      if (!fits || value > setting.maximum) {
        throw UsageError(refused + "at most " + std::to_string(setting.maximum) + " bytes" + given);
      }
      return;
    case SettingKind::kChoice:
      if (!fits || value >= setting.choices.size()) {
        // "'a' or 'b'", "'a', 'b' or 'c'"
        std::string names;
        for (std::size_t i = 0; i < setting.choices.size(); ++i) {
          const bool last = i + 1 == setting.choices.size();
          names += (i == 0 ? "" : last ? " or " : ", ") + quoted(setting.choices[i]);
        }
        throw UsageError(refused + names + given);
      }
      return;
  }
}

}  // namespace

// `\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([a-zA-Z]*)\s*` (ASCII blanks), the number times the
// unit, truncated. A whole number is multiplied exactly; one with a fraction or an exponent in
// double precision, as Python's float does.
ByteCount parse_byte_count(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && is_blank(text[i])) ++i;
  const std::size_t number = i;
  while (i < text.size() && is_digit(text[i])) ++i;
  bool whole = true;
  if (i < text.size() && text[i] == '.') {
    whole = false;
    const std::size_t fraction = ++i;
    while (i < text.size() && is_digit(text[i])) ++i;
    if (i == fraction) return {};  // "1.", "."
  }
  if (i == number) return {};  // no digits
  if (i + 1 < text.size() && (text[i] == 'e' || text[i] == 'E') && is_digit(text[i + 1])) {
    whole = false;
    i += 2;
    while (i < text.size() && is_digit(text[i])) ++i;
  }
  const std::string_view mantissa = text.substr(number, i - number);
  while (i < text.size() && is_blank(text[i])) ++i;
  const std::size_t letters = i;
  while (i < text.size() && is_letter(text[i])) ++i;
  const auto unit = unit_bytes(text.substr(letters, i - letters));
  while (i < text.size() && is_blank(text[i])) ++i;
  if (i != text.size() || !unit) return {};
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  if (whole) {
    std::uint64_t value = 0;
    for (const char c : mantissa) {
      const auto digit = static_cast<std::uint64_t>(c - '0');
      if (value > (kMax - digit) / 10) return {ByteCount::kTooLarge};
      value = value * 10 + digit;
    }
    if (value != 0 && *unit > kMax / value) return {ByteCount::kTooLarge};
    return {ByteCount::kBytes, value * *unit};
  }
  double value = 0;
  const auto [end, error] = std::from_chars(mantissa.data(), mantissa.data() + mantissa.size(),
                                            value, std::chars_format::general);
  if (error != std::errc() || end != mantissa.data() + mantissa.size()) {
    return {ByteCount::kTooLarge};  // beyond a double's range ("1e400")
  }
  const double bytes = value * static_cast<double>(*unit);
  if (!(bytes < 18446744073709551616.0)) return {ByteCount::kTooLarge};  // 2^64
  return {ByteCount::kBytes, static_cast<std::uint64_t>(bytes)};
}

namespace {

std::uint64_t parse_size(const SettingInfo& setting, std::string_view text, std::string_view what) {
  const auto size = parse_byte_count(text);
  if (size.kind == ByteCount::kNotASize) {
    throw UsageError(std::string(what) + ": " + quoted(text) + " is not a size (" +
                     std::string(kSizeExamples) + ")");
  }
  check_value(setting, size.kind == ByteCount::kBytes, size.bytes, quoted(text), what);
  return size.bytes;
}

// An integer as Python's int() of the stripped text takes it, in ASCII and without its '_'
// separators: an optional sign, then digits.
std::uint64_t parse_count(const SettingInfo& setting, std::string_view text,
                          std::string_view what) {
  const std::string_view number = trim(text);
  std::string_view digits = number;
  const bool negative = !digits.empty() && digits.front() == '-';
  if (!digits.empty() && (digits.front() == '-' || digits.front() == '+')) digits.remove_prefix(1);
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  const bool integer = !digits.empty() && is_digit(digits.front()) &&
                       end == digits.data() + digits.size() &&
                       (error == std::errc() || error == std::errc::result_out_of_range);
  if (!integer) throw UsageError(std::string(what) + " must be an integer, not " + quoted(text));
  const bool fits = error == std::errc() && (!negative || value == 0);
  check_value(setting, fits, value, number, what);
  return value;
}

std::uint64_t parse_choice(const SettingInfo& setting, std::string_view text,
                           std::string_view what) {
  const auto& choices = setting.choices;
  const auto found = std::find(choices.begin(), choices.end(), text);
  const auto index = static_cast<std::uint64_t>(found - choices.begin());
  check_value(setting, found != choices.end(), index, quoted(text), what);
  return index;
}

struct Current {
  std::mutex mutex;
  std::optional<Settings> values;  // empty until first read from the environment
};

Current& current() {
  static Current instance;
  return instance;
}

}  // namespace

std::span<const SettingInfo> settings_table() { return kTable; }

std::size_t decode_memory_for(std::size_t decode_bytes, std::size_t device_memory) {
  if (decode_bytes != 0) return decode_bytes;
  return std::max(device_memory / kAutomaticDecodeShare, kAutomaticDecodeMinimum);
}

DecoderArenas decoder_arenas_for(std::size_t decoder_bytes, std::size_t staging_bytes,
                                 std::size_t device_memory) {
  std::size_t total = decoder_bytes;
  if (total == 0) {
    const std::size_t wanted = staging_bytes > SIZE_MAX / kDecoderStagingMultiple
                                   ? SIZE_MAX
                                   : staging_bytes * kDecoderStagingMultiple;
    total = std::max(std::min(wanted, device_memory / kDecoderShare), kDecoderMinimum);
  }
  constexpr std::size_t kAlignment = std::size_t{2} << 20;  // of each arena's size
  const std::size_t input = std::max(total / 3 / kAlignment * kAlignment, kAlignment);
  const std::size_t output =
      std::max((total - std::min(total, input)) / kAlignment * kAlignment, kAlignment);
  return {input, output};
}

const SettingInfo& setting_info(std::string_view name) {
  for (const auto& setting : kTable) {
    if (setting.name == name) return setting;
  }
  std::string names;
  for (const auto& setting : kTable) {
    names += (names.empty() ? "" : ", ") + std::string(setting.name);
  }
  throw UsageError("unknown setting " + quoted(name) + ": the settings are " + names);
}

std::uint64_t parse_setting(const SettingInfo& setting, std::string_view text,
                            std::string_view what) {
  switch (setting.kind) {
    case SettingKind::kCount:
      return parse_count(setting, text, what);
    case SettingKind::kSize:
      return parse_size(setting, text, what);
    case SettingKind::kChoice:
      return parse_choice(setting, text, what);
  }
  throw UsageError(std::string(what) + ": a setting of unknown kind");
}

Settings::Settings() {
  for (const auto& setting : kTable) {
    setting.set(*this, parse_setting(setting, setting.default_text, setting.name));
  }
}

Settings Settings::from_environment() {
  Settings values;
  for (const auto& setting : kTable) {
    const std::string variable(setting.variable);
    if (const char* text = std::getenv(variable.c_str())) {
      setting.set(values, parse_setting(setting, text, "the environment variable " + variable));
    }
  }
  return values;
}

Settings settings() {
  auto& state = current();
  std::lock_guard lock(state.mutex);
  if (!state.values) state.values = Settings::from_environment();
  return *state.values;
}

void set_settings(const Settings& values) {
  for (const auto& setting : kTable) {
    const std::uint64_t value = setting.get(values);
    // A negative count comes back as a huge number: show it as it was.
    const std::string shown = setting.kind == SettingKind::kCount
                                  ? std::to_string(static_cast<std::int64_t>(value))
                                  : std::to_string(value);
    check_value(setting, true, value, shown, setting.name);
  }
  auto& state = current();
  std::lock_guard lock(state.mutex);
  state.values = values;
}

namespace {

constexpr std::array kEnvironmentVariables{
    EnvironmentVariableInfo{
        EnvironmentVariable::kNvcompLibrary, "ZARR_DEVICE_NVCOMP_LIBRARY",
        "The nvCOMP library that GPU decoding and encoding load (a path, or a name the loader "
        "searches for). Unset: the one the `gpu` extra installs (nvidia-libnvcomp-cu13), then "
        "libnvcomp.so.6 or .5 on the library path."},
    EnvironmentVariableInfo{
        EnvironmentVariable::kCufileLibrary, "ZARR_DEVICE_CUFILE_LIBRARY",
        "The cuFile library of GPUDirect Storage reads (a path, or a name the loader searches "
        "for). Unset: the CUDA wheels' copy, then libcufile.so.0 on the library path."},
    EnvironmentVariableInfo{
        EnvironmentVariable::kTrace, "ZARR_DEVICE_TRACE",
        "Set (to anything): each read onto a GPU prints one line to stderr as it ends, with its "
        "leaves, batches, slots, decode calls and the time of each stage. Looked up as each read "
        "ends, so a running process may turn it on and off."},
    EnvironmentVariableInfo{
        EnvironmentVariable::kLeakWarnings, "ZARR_DEVICE_LEAK_WARNINGS",
        "1: the Python module reports the engine objects still alive when the interpreter exits "
        "(for finding reference leaks; arrays held by globals at exit are reported too). Read "
        "when zarr_device is imported."},
    EnvironmentVariableInfo{
        EnvironmentVariable::kDecoder, "ZARR_DEVICE_DECODER",
        "The decoder program that runs nvCOMP on chunks nobody has vouched for, in a process of "
        "its own, so that a malformed chunk cannot fault the caller's GPU context (a path). "
        "Unset: zarr-device-decoder beside the engine's module, where the package installs it."},
};

}  // namespace

std::span<const EnvironmentVariableInfo> environment_variables() { return kEnvironmentVariables; }

std::string_view variable_name(EnvironmentVariable which) {
  for (const auto& info : kEnvironmentVariables) {
    if (info.which == which) return info.variable;
  }
  throw UsageError("an environment variable missing from the table");
}

std::optional<std::string> environment_value(EnvironmentVariable which) {
  const std::string name(variable_name(which));
  const char* text = std::getenv(name.c_str());
  if (text == nullptr) return std::nullopt;
  return std::string(text);
}

}  // namespace zarr_device
