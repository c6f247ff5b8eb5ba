#include "device_read/decode_share.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <memory>
#include <optional>

#include "codecs/codec_chain.hpp"
#include "zarr_device/errors.hpp"

namespace zarr_device::device_read {

double decode_seconds(double device_bytes, double cpu_bytes, double largest, double fetched,
                      const DecodeRates& rates) {
  const double threads = static_cast<double>(std::max<std::size_t>(rates.cpu_threads, 1));
  double device = 0;
  if (device_bytes > 0) {
    const double lanes = static_cast<double>(std::max<std::size_t>(rates.device_lanes, 1));
    device = std::max(largest, device_bytes / lanes) / rates.device_chunk;
  }
  // The CPU threads fetch every stored byte and decode their share. A CPU-decoded chunk waits
  // decoded in a staging slot until its batch crosses: the ring holds so many at once, and all of
  // its slots but the one crossing are being filled (fetch_ahead), each with a batch of as many
  // chunks as fit the slot (pack_batches fills the slots of batches that decode).
  double cpu = fetched / rates.cpu_fetch / threads;
  if (cpu_bytes > 0) {
    const double staging = static_cast<double>(std::max<std::size_t>(rates.staging.bytes, 1));
    const double slots_wanted = static_cast<double>(std::max<std::size_t>(rates.staging.slots, 1));
    const double slots = std::clamp(std::floor(staging / largest), 1.0, slots_wanted);
    const double per_slot = std::max(1.0, std::floor(staging / slots / largest));
    const double in_flight = std::max(slots - 1, 1.0) * per_slot;
    const double lanes = std::min(threads, in_flight);
    cpu = std::max({cpu + cpu_bytes / rates.cpu_thread / threads,
                    cpu_bytes / (lanes * rates.cpu_thread), largest / rates.cpu_thread});
  }
  return std::max(device, cpu);
}

std::size_t hardware_queues(const char* max_connections) {
  constexpr std::size_t kDefault = 8;
  if (max_connections == nullptr) return kDefault;
  const char* end = max_connections + std::strlen(max_connections);
  std::size_t value = 0;
  const auto [last, error] = std::from_chars(max_connections, end, value);
  if (error != std::errc() || last != end || value < 1 || value > 32) return kDefault;
  return value;
}

double device_chunk_rate(std::span<const Leaf> leaves, DecodeKind kind, const DecodeRates& rates) {
  const Leaf* largest = nullptr;
  for (const auto& leaf : leaves) {
    if (leaf.decoding.route != Route::kDeviceDecode || leaf.decoding.codec != kind ||
        leaf.part.chunk)
      continue;
    if (!largest || leaf.planned().spec->nbytes() > largest->planned().spec->nbytes()) {
      largest = &leaf;
    }
  }
  // Nothing is moved past largest_shared whatever the rate; a store whose requests wait on a round
  // trip (BatchedGets) is not asked for a chunk's first bytes while the read is planned.
  if (largest == nullptr || largest->planned().chain == nullptr ||
      largest->planned().spec->nbytes() > rates.largest_shared ||
      dynamic_cast<const BatchedGets*>(largest->planned().array->store().get()) != nullptr) {
    return rates.device_chunk;
  }
  const Leaf& leaf = *largest;
  const auto& planned = leaf.planned();
  const auto codecs = planned.chain->bytes_to_bytes();
  const auto decoding = codecs.empty() ? std::nullopt : codecs.front()->device_decoding();
  if (!decoding || decoding->first_block == nullptr) return rates.device_chunk;
  try {
    std::uint64_t stored = leaf.stored.length;
    std::shared_ptr<const ValueReader> value = leaf.stored.value;
    if (!leaf.stored.sized) {  // (a chunk sized by its fetch: its file's size)
      value = planned.source().open(planned.key);
      if (!value) return rates.device_chunk;
      stored = value->size() - leaf.stored.offset;
    }
    if (!value) {
      value = key_reader(planned.source(), planned.key, leaf.stored.offset + leaf.stored.length);
    }
    std::array<std::byte, 32> head{};
    const std::size_t got = value->read_into(
        leaf.stored.offset + leaf.decoding.header,
        {head.data(), static_cast<std::size_t>(std::min<std::uint64_t>(head.size(), stored))});
    const std::size_t block = decoding->first_block({head.data(), got});
    const double ratio = static_cast<double>(stored) / static_cast<double>(planned.spec->nbytes());
    if (block == 0 || ratio < kSmallBlockRatio ||
        static_cast<double>(block) / ratio > kSmallBlockBytes) {
      return rates.device_chunk;
    }
  } catch (const Error&) {  // unreadable now: its fetch will say why
    return rates.device_chunk;
  }
  return rates.device_chunk * kSmallBlockSpeedup;
}

DecodeRates deflate_rates(const DecodeRates& rates) {
  constexpr double kDeviceChunk = 10e6;
  constexpr std::size_t kChunksPerLane = 4;
  constexpr double kCpuThread = 0.11e9;
  DecodeRates deflate = rates;
  deflate.device_chunk = kDeviceChunk;
  deflate.device_lanes = rates.device_lanes * kChunksPerLane;
  deflate.cpu_thread = kCpuThread;
  deflate.largest_shared = SIZE_MAX;
  return deflate;
}

std::size_t share_decodes(std::span<Leaf> leaves, DecodeKind kind, const DecodeRates& rates,
                          Route route) {
  double total = 0;
  double largest = 0;
  double fetched = 0;
  for (const auto& leaf : leaves) {
    fetched += static_cast<double>(leaf.stored.length);
    if (leaf.decoding.route != route || leaf.decoding.codec != kind) continue;
    const auto decoded = static_cast<double>(leaf.planned().spec->nbytes());
    total += decoded;
    largest = std::max(largest, decoded);
  }
  if (total == 0 || largest > static_cast<double>(rates.largest_shared)) return 0;
  if (decode_seconds(0, total, largest, fetched, rates) >=
      decode_seconds(total, 0, largest, fetched, rates)) {
    return 0;
  }
  std::size_t moved = 0;
  for (auto& leaf : leaves) {
    if (leaf.decoding.route != route || leaf.decoding.codec != kind) continue;
    leaf.decoding.route = Route::kCpuDecode;
    ++moved;
  }
  return moved;
}

}  // namespace zarr_device::device_read
