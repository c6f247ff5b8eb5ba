#include "zarr_device/store.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "stores/process_locks.hpp"

namespace zarr_device {
namespace {

void check_ranges(std::span<const ByteRange> ranges) {
  for (const auto& range : ranges) {
    if (range.offset < 0 || range.length < 0) {
      throw UsageError("ValueReader::read_many takes offsets and lengths of at least 0");
    }
  }
}

// Reads ranges of a value by key, for stores that cannot hold on to one version of it.
class KeyRangeReader final : public ValueReader {
 public:
  KeyRangeReader(const Store& store, std::string key, std::uint64_t size)
      : store_(store), key_(std::move(key)), size_(size) {}
  std::uint64_t size() const override { return size_; }
  std::size_t read_into(std::uint64_t offset, std::span<std::byte> out) const override {
    auto got = store_.get_range_into(key_, offset, out);
    if (!got) throw StoreError("'" + key_ + "' vanished while it was read");
    return *got;
  }
  std::vector<Buffer> read_many(std::span<const ByteRange> ranges) const override {
    const auto* gets = dynamic_cast<const BatchedGets*>(&store_);
    if (!gets || ranges.size() < 2) return ValueReader::read_many(ranges);
    check_ranges(ranges);
    const KeyRanges asked{key_, {ranges.begin(), ranges.end()}};
    auto answers = gets->get_ranges({&asked, 1});
    if (answers.size() != 1) {
      throw StoreError("'" + key_ + "': the store answered " + std::to_string(answers.size()) +
                       " keys for 1");
    }
    auto& got = answers.front();
    if (!got) throw StoreError("'" + key_ + "' vanished while it was read");
    if (got->size() != ranges.size()) {
      throw StoreError("'" + key_ + "': the store returned " + std::to_string(got->size()) +
                       " ranges for " + std::to_string(ranges.size()));
    }
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      // Cut short only at the value's end, as read() would be.
      const auto offset = static_cast<std::uint64_t>(ranges[i].offset);
      const auto length = static_cast<std::uint64_t>(ranges[i].length);
      const std::uint64_t expected = offset >= size_ ? 0 : std::min(length, size_ - offset);
      if ((*got)[i].size() != expected) {
        throw StoreError("'" + key_ + "': the store returned " + std::to_string((*got)[i].size()) +
                         " bytes at offset " + std::to_string(offset) + " where " +
                         std::to_string(expected) + " were asked for");
      }
    }
    return std::move(*got);
  }

 private:
  const Store& store_;
  std::string key_;
  std::uint64_t size_;
};

// A value as it was when opened: buffers are immutable and shared, so this is a snapshot.
class BufferReader final : public ValueReader {
 public:
  explicit BufferReader(Buffer value) : value_(std::move(value)) {}
  std::uint64_t size() const override { return value_.size(); }
  std::size_t read_into(std::uint64_t offset, std::span<std::byte> out) const override {
    if (offset >= value_.size()) return 0;
    const std::size_t n = std::min<std::size_t>(out.size(), value_.size() - offset);
    if (n) std::memcpy(out.data(), value_.data() + offset, n);
    return n;
  }

 private:
  Buffer value_;
};

}  // namespace

std::shared_ptr<const Store> for_one_operation(const std::shared_ptr<Store>& store) {
  if (const auto* held = dynamic_cast<const HeldRoot*>(store.get())) return held->with_root_held();
  return store;
}

const Store& StoreViews::of(const std::shared_ptr<Store>& store) {
  for (const auto& [viewed, view] : views_) {
    if (viewed == store.get()) return *view;
  }
  views_.emplace_back(store.get(), for_one_operation(store));
  return *views_.back().second;
}

std::shared_ptr<const ValueReader> reader_of(Buffer value) {
  return std::make_shared<BufferReader>(std::move(value));
}

std::shared_ptr<const ValueReader> key_reader(const Store& store, std::string key,
                                              std::uint64_t size) {
  return std::make_shared<KeyRangeReader>(store, std::move(key), size);
}

Buffer ValueReader::read(std::uint64_t offset, std::uint64_t length) const {
  const std::uint64_t total = size();
  const std::uint64_t start = std::min(offset, total);
  ByteArray out(static_cast<std::size_t>(std::min(length, total - start)));
  out.shrink(read_into(start, out.span()));
  return std::move(out).freeze();
}

std::vector<Buffer> ValueReader::read_many(std::span<const ByteRange> ranges) const {
  check_ranges(ranges);
  std::vector<Buffer> out;
  out.reserve(ranges.size());
  for (const auto& range : ranges) {
    out.push_back(
        read(static_cast<std::uint64_t>(range.offset), static_cast<std::uint64_t>(range.length)));
  }
  return out;
}

std::optional<std::size_t> Store::get_into(std::string_view key,
                                           std::span<const std::span<std::byte>> pieces) const {
  auto value = get(key);
  if (!value) return std::nullopt;
  std::size_t total = 0;
  for (const auto& p : pieces) total += p.size();
  if (value->size() != total) return value->size();
  const std::byte* src = value->data();
  for (const auto& p : pieces) {
    if (!p.empty()) std::memcpy(p.data(), src, p.size());
    src += p.size();
  }
  return total;
}

void Store::set_pieces(std::string_view key, std::span<const std::span<const std::byte>> pieces) {
  if (pieces.size() == 1) {
    set(key, pieces[0]);
    return;
  }
  set(key, Buffer::joined(pieces).span());
}

std::optional<std::size_t> Store::get_range_into(std::string_view key, std::uint64_t offset,
                                                 std::span<std::byte> out) const {
  // Offsets past what a signed range can name are past any value's end.
  if (offset > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    if (!exists(key)) return std::nullopt;
    return 0;
  }
  auto value = get(key, {static_cast<std::int64_t>(offset), static_cast<std::int64_t>(out.size())});
  if (!value) return std::nullopt;
  const std::size_t n = std::min(value->size(), out.size());
  if (n) std::memcpy(out.data(), value->data(), n);
  return n;
}

std::shared_ptr<const ValueReader> Store::open(std::string_view key) const {
  const auto total = size(key);
  if (!total) return nullptr;
  return key_reader(*this, std::string(key), *total);
}

bool Store::exists(std::string_view key) const { return get(key, {0, 0}).has_value(); }

std::optional<std::uint64_t> Store::size(std::string_view key) const {
  auto value = get(key);
  if (!value) return std::nullopt;
  return value->size();
}

namespace {

// A lock named by where the data is: the store's location (a URL of its root) joined with the
// key, so store objects on the same data share it, whatever level of it they are rooted at.
std::string location_of(const Store& store, std::string_view key) {
  std::string where = store.describe();
  while (!where.empty() && where.back() == '/') where.pop_back();
  return where + '/' + std::string(key);
}

}  // namespace

std::unique_ptr<KeyLock> Store::lock_chunk(std::string_view node, std::string_view key) const {
  validate_path(node);
  validate_key(key);
  return stores::lock_in_process(location_of(*this, key));
}

std::unique_ptr<KeyLock> Store::lock_document(std::string_view key) const {
  validate_key(key);
  return stores::lock_in_process(location_of(*this, key));
}

void Store::check_writable() const {
  if (read_only()) throw UsageError("store " + describe() + " is read-only");
}

}  // namespace zarr_device
