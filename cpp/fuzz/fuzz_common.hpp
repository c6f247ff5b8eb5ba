// Shared pieces of the libFuzzer targets in cpp/fuzz (built with -DZARR_DEVICE_FUZZ=ON, run by
// scripts/fuzz.sh).
//
// Contract of every target: the engine's typed errors (zarr_device::Error and its subclasses) are
// the expected outcome of bad input and are caught; anything else is a finding: a crash, a
// sanitizer report, a leak, an allocation over libFuzzer's -malloc_limit_mb / -rss_limit_mb, an
// exception of another type (left uncaught, so the process aborts at the throw site and the stack
// shows who threw it) or a broken invariant checked here (two decode paths disagreeing, an
// encode/decode round trip changing the data), reported through finding().
//
// Besides fuzzing, each target answers two environment variables in LLVMFuzzerInitialize, then
// exits (scripts/fuzz.sh uses them to make seed corpora that match the targets' tables):
//   ZARR_DEVICE_FUZZ_TABLE=<file>  writes the target's table (codec chains, chunk specs, input
//                                  layout) as JSON, read by cpp/fuzz/make_seeds.py;
//   ZARR_DEVICE_FUZZ_SEEDS=<dir>   writes seed inputs encoded by the engine's own encoders.
// While fuzzing: ZARR_DEVICE_FUZZ_VERBOSE=1 prints every engine error caught (to replay one
// input), ZARR_DEVICE_FUZZ_IGNORE=<a>|<b> lets findings whose message contains <a> or <b> pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codecs/codec_chain.hpp"
#include "place/chunk_grid.hpp"
#include "place/strided_copy.hpp"
#include "zarr_device/array_metadata.hpp"
#include "zarr_device/buffer.hpp"
#include "zarr_device/codec.hpp"
#include "zarr_device/errors.hpp"

namespace zarr_device::fuzz {

using json = nlohmann::json;

// Whether a finding's message contains one of the '|'-separated strings of
// ZARR_DEVICE_FUZZ_IGNORE (known findings, so that a long run can look past them for others).
inline bool is_ignored(const std::string& what) {
  static const std::vector<std::string> ignored = [] {
    std::vector<std::string> out;
    const char* list = std::getenv("ZARR_DEVICE_FUZZ_IGNORE");
    std::string rest = list != nullptr ? list : "";
    while (!rest.empty()) {
      const std::size_t bar = rest.find('|');
      if (bar != 0) out.push_back(rest.substr(0, bar));
      rest = bar == std::string::npos ? "" : rest.substr(bar + 1);
    }
    return out;
  }();
  for (const auto& known : ignored) {
    if (what.find(known) != std::string::npos) return true;
  }
  return false;
}

// A broken invariant: print it and abort, so libFuzzer saves the input as a crash (or return,
// when it is an ignored known one).
inline void finding(const std::string& what) {
  if (is_ignored(what)) return;
  std::fprintf(stderr, "\n==zarr-device-fuzz== FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// ZARR_DEVICE_FUZZ_VERBOSE=1 prints every error caught (for triage: run the target on one input).
inline bool verbose() {
  static const bool on = [] {
    const char* v = std::getenv("ZARR_DEVICE_FUZZ_VERBOSE");
    return v != nullptr && *v != '\0' && *v != '0';
  }();
  return on;
}

// Runs `f`; an engine Error is the expected answer to bad input (returns false). Any other
// exception propagates and, uncaught, ends the process at its throw site.
template <typename F>
bool expect_errors(F&& f) {
  try {
    f();
    if (verbose()) std::fprintf(stderr, "  ok\n");
    return true;
  } catch (const Error& e) {
    if (verbose()) std::fprintf(stderr, "  error: %s\n", e.what());
    return false;
  }
}

// Runs `f`. Exceptions of nlohmann::json (a metadata accessor used on the wrong JSON type) are
// findings like any other non-Error exception, unless ZARR_DEVICE_FUZZ_IGNORE lists
// "json.exception": then they are caught here (only then, so that otherwise the stack still shows
// where they were thrown).
template <typename F>
void unless_json_exceptions_ignored(F&& f) {
  static const bool ignore = is_ignored("[json.exception.");
  if (!ignore) {
    f();
    return;
  }
  try {
    f();
  } catch (const nlohmann::json::exception&) {
  }
}

// Consumes the fuzzer's bytes front to back.
class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint16_t u16() {
    const std::uint16_t lo = byte();
    return static_cast<std::uint16_t>(lo | (byte() << 8));
  }
  // The remaining bytes as a Buffer that owns an exact-sized copy, so that ASan sees any read past
  // its end.
  Buffer rest() {
    const std::size_t n = size_ - std::min(pos_, size_);
    Buffer b = Buffer::copy_of({reinterpret_cast<const std::byte*>(data_ + pos_), n});
    pos_ = size_;
    return b;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// A RangeReader over a stored value, as a store gives one: ranges are cut short at the end, and
// each read returns its own exact-sized copy. Requests a correct engine never makes (negative
// offsets or lengths) are findings.
inline RangeReader range_reader_over(const Buffer& value, std::size_t* reads = nullptr) {
  return [value, reads](std::int64_t offset, std::int64_t length) -> std::optional<Buffer> {
    if (offset < 0 || length < 0) {
      finding("RangeReader asked for offset " + std::to_string(offset) + ", length " +
              std::to_string(length));
    }
    if (reads != nullptr) ++*reads;
    const auto size = static_cast<std::uint64_t>(value.size());
    const auto off = static_cast<std::uint64_t>(offset);
    if (off > size) return Buffer();
    const std::uint64_t n = std::min<std::uint64_t>(static_cast<std::uint64_t>(length), size - off);
    return Buffer::copy_of(value.span().subspan(off, n));
  };
}

// A tiny deterministic generator for choices derived from one input byte.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ULL + 0x1234567ULL) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  std::int64_t below(std::int64_t n) {
    return n <= 1 ? 0 : static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(n));
  }

 private:
  std::uint64_t state_;
};

// One table entry of a whole-chunk decode: a chunk spec and the codec chain of its metadata.
struct ChainCase {
  std::string label;
  json document;  // {"shape", "data_type", "fill_value", "codecs"}
  std::optional<codecs::CodecChain> chain;
};

inline ChunkSpec chunk_spec_of(const json& entry) {
  ChunkSpec spec;
  spec.shape = entry.at("shape").get<std::vector<std::int64_t>>();
  spec.dtype = &DataType::from_v3_name(entry.at("data_type").get<std::string>());
  spec.fill_value = parse_fill_value(entry.at("fill_value"), *spec.dtype);
  return spec;
}

// Builds every entry's chain once; a table entry the engine refuses is a bug in the table.
inline std::vector<ChainCase> build_chain_cases(const json& table) {
  std::vector<ChainCase> cases;
  for (const auto& entry : table) {
    ChainCase c;
    c.label = entry.at("label").get<std::string>();
    c.document = entry;
    try {
      c.chain.emplace(entry.at("codecs"), chunk_spec_of(entry), 3);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fuzz table entry '%s' is refused by the engine: %s\n", c.label.c_str(),
                   e.what());
      std::abort();
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

// A selection inside `shape` and a destination for it in `storage`, chosen by `variant`:
//   bit 0..1: layout of the destination (0 C order, 1 C order with gaps between elements and
//             rows, 2 Fortran order, 3 Fortran order with gaps);
//   the rest seeds the per-dimension start, step and count (full selection when `full`).
struct Placement {
  std::vector<DimSlice> selection;
  StridedView view;
  std::vector<std::byte> storage;
};

inline Placement make_placement(const std::vector<std::int64_t>& shape, std::size_t element_size,
                                std::uint8_t variant, bool full) {
  Placement p;
  Rng rng(variant);
  std::vector<std::int64_t> counts;
  for (auto extent : shape) {
    DimSlice s{0, 1, extent};
    if (!full) {
      s.start = rng.below(extent);
      s.step = 1 + rng.below(3);
      const std::int64_t most = (extent - 1 - s.start) / s.step + 1;
      s.count = 1 + rng.below(most);
    }
    p.selection.push_back(s);
    counts.push_back(s.count);
  }
  const int layout = variant & 3;
  const std::int64_t gap = (layout & 1) ? 2 : 1;
  const std::size_t rank = counts.size();
  std::vector<std::int64_t> strides(rank);
  auto es = static_cast<std::int64_t>(element_size);
  std::int64_t stride = es * gap;
  auto place = [&](std::size_t d) {
    strides[d] = stride;
    stride *= counts[d] + (gap - 1);
  };
  if (layout < 2) {
    for (std::size_t d = rank; d-- > 0;) place(d);
  } else {
    for (std::size_t d = 0; d < rank; ++d) place(d);
  }
  p.storage.assign(static_cast<std::size_t>(stride) + element_size, std::byte{0xA5});
  p.view = StridedView{p.storage.data(), counts, strides};
  return p;
}

// The element at multi-index `index` of a strided view.
inline const std::byte* element_at(const StridedView& v, const std::vector<std::int64_t>& index) {
  const std::byte* p = v.data;
  for (std::size_t d = 0; d < index.size(); ++d) p += index[d] * v.byte_strides[d];
  return p;
}

// Calls f(index) for every multi-index of `shape`, in C order (once for rank 0).
inline void for_each_index(const std::vector<std::int64_t>& shape,
                           const std::function<void(const std::vector<std::int64_t>&)>& f) {
  std::size_t count = 1;
  for (auto e : shape) count *= static_cast<std::size_t>(e);
  std::vector<std::int64_t> index(shape.size(), 0);
  for (std::size_t i = 0; i < count; ++i) {
    place::c_order_coords(i, shape, index);
    f(index);
  }
}

// Checks that `part` (a decode of `selection`) holds the same elements as `whole` (a decode of the
// whole chunk into a C-contiguous view).
inline void check_same_elements(const StridedView& whole, const Placement& part,
                                std::size_t element_size, const std::string& what) {
  for_each_index(part.view.shape, [&](const std::vector<std::int64_t>& index) {
    std::vector<std::int64_t> source(index.size());
    for (std::size_t d = 0; d < index.size(); ++d) {
      source[d] = part.selection[d].start + index[d] * part.selection[d].step;
    }
    if (std::memcmp(element_at(whole, source), element_at(part.view, index), element_size) != 0) {
      finding(what + ": decoded elements differ from the whole-chunk decode");
    }
  });
}

// Whether a decode into a placement wrote only inside the elements it selected (the gaps of a
// padded view must keep their 0xA5 filler).
inline void check_gaps_untouched(const Placement& p, std::size_t element_size,
                                 const std::string& what) {
  std::vector<bool> inside(p.storage.size(), false);
  for_each_index(p.view.shape, [&](const std::vector<std::int64_t>& index) {
    const auto offset = static_cast<std::size_t>(element_at(p.view, index) - p.storage.data());
    for (std::size_t i = 0; i < element_size; ++i) inside[offset + i] = true;
  });
  for (std::size_t i = 0; i < p.storage.size(); ++i) {
    if (!inside[i] && p.storage[i] != std::byte{0xA5}) {
      finding(what + ": decode wrote outside the selected elements of its destination");
    }
  }
}

// Chunk contents for seeds: pseudo-random, smooth (compressible), or fill value but one element.
inline std::vector<std::byte> sample_chunk(const ChunkSpec& spec, int kind, std::uint64_t seed) {
  const std::size_t es = spec.dtype->size;
  const std::size_t n = static_cast<std::size_t>(spec.num_elements());
  std::vector<std::byte> out(n * es);
  Rng rng(seed);
  for (std::size_t i = 0; i < n; ++i) {
    std::byte* e = out.data() + i * es;
    if (kind == 2 && i != n / 2) {
      std::memcpy(e, spec.fill_value.data(), es);
      continue;
    }
    for (std::size_t b = 0; b < es; ++b) {
      e[b] = static_cast<std::byte>(kind == 0 ? rng.next() : (b == 0 ? (i * 7) % 13 : 0));
    }
    if (spec.dtype->cls == DTypeClass::kBool) e[0] = static_cast<std::byte>(rng.next() & 1);
  }
  return out;
}

inline void write_file(const std::string& path, std::span<const std::byte> bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

// The answers to ZARR_DEVICE_FUZZ_TABLE / ZARR_DEVICE_FUZZ_SEEDS (see the top of this file).
// Returns normally when neither is set.
// `target` names the target, `input` describes how it reads its input, `entries` are its table.
inline void export_if_asked(std::string_view target, std::string_view input, json entries,
                            const std::function<void(const std::string&)>& seeds) {
  const json table = {{"target", target}, {"input", input}, {"entries", std::move(entries)}};
  bool done = false;
  if (const char* path = std::getenv("ZARR_DEVICE_FUZZ_TABLE")) {
    const std::string text = table.dump(1);
    write_file(path, {reinterpret_cast<const std::byte*>(text.data()), text.size()});
    done = true;
  }
  if (const char* dir = std::getenv("ZARR_DEVICE_FUZZ_SEEDS")) {
    seeds(dir);
    done = true;
  }
  if (done) std::exit(0);
}

}  // namespace zarr_device::fuzz
