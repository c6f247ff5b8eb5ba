#include "stores/process_locks.hpp"

#include <condition_variable>
#include <map>
#include <mutex>

namespace zarr_device::stores {
namespace {

// Locks by name within this process: one mutex per name while anyone holds or waits for it.
class LockTable {
 public:
  static LockTable& instance() {
    static LockTable table;
    return table;
  }

  class Held final : public KeyLock {
   public:
    Held(LockTable& table, std::string name) : table_(table), name_(std::move(name)) {}
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;
    ~Held() override { table_.release(name_); }

   private:
    LockTable& table_;
    std::string name_;
  };

  std::unique_ptr<KeyLock> acquire(std::string name) {
    std::unique_lock guard(mutex_);
    auto& entry = entries_[name];
    ++entry.users;
    changed_.wait(guard, [&] { return !entry.held; });
    entry.held = true;
    return std::make_unique<Held>(*this, std::move(name));
  }

 private:
  struct Entry {
    bool held = false;
    int users = 0;  // holding or waiting; the entry goes when none is left
  };

  void release(const std::string& name) {
    std::lock_guard guard(mutex_);
    auto it = entries_.find(name);
    it->second.held = false;
    if (--it->second.users == 0) entries_.erase(it);
    changed_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace

std::unique_ptr<KeyLock> lock_in_process(std::string name) {
  return LockTable::instance().acquire(std::move(name));
}

}  // namespace zarr_device::stores
