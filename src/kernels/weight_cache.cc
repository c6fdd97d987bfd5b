#include "kernels/weight_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

#include "core/check.h"

namespace anvil::kernels {

namespace {

// Below this a release saves too little to be worth a restore.
constexpr size_t kMinReleaseBytes = size_t{1} << 16;

// The whole pages inside [data, data + bytes): those madvise may drop without
// touching the allocator's bookkeeping around the buffer.
std::pair<uintptr_t, size_t> inner_pages(const void* data, size_t bytes) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + bytes) / page * page;
  return {first, last > first ? last - first : 0};
}

}  // namespace

Tensor WeightCache::get(const Tensor& source, const std::string& layout_key, const std::function<Tensor()>& pack,
                        Unpack unpack) {
  auto key = std::make_pair(source.raw(), layout_key);
  // Packing runs under the lock: release() must not drop a source while it is read.
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = entries_.find(key); it != entries_.end()) return it->second.packed;
  restore_locked(source);
  auto [it, inserted] = entries_.emplace(key, Entry{source, pack(), std::move(unpack)});
  return it->second.packed;
}

size_t WeightCache::release(const Tensor& source) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (released_.count(source.raw()) || source.nbytes() < kMinReleaseBytes) return 0;
  bool unpackable = false;
  long entries = 0;
  for (auto it = entries_.lower_bound({source.raw(), std::string()}); it != entries_.end() && it->first.first == source.raw(); ++it) {
    unpackable |= static_cast<bool>(it->second.unpack);
    ++entries;
  }
  // Only bytes the session alone holds: `source` and the entries' copies of it,
  // never a caller's tensor or a view shared with another value.
  if (!unpackable || source.use_count() != 1 + entries) return 0;
  auto [first, length] = inner_pages(source.raw(), source.nbytes());
  if (length == 0 || ::madvise(reinterpret_cast<void*>(first), length, MADV_DONTNEED) != 0) return 0;
  released_[source.raw()] = length;
  return length;
}

size_t WeightCache::prune_unused() {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t freed = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    const void* source = it->first.first;
    bool keep = it->second.packed.use_count() > 1;
    if (!keep && released_.count(source) && it->second.unpack) {  // the last copy that can restore it stays
      keep = true;
      for (auto other = entries_.lower_bound({source, std::string()});
           other != entries_.end() && other->first.first == source; ++other)
        if (other != it && other->second.unpack) keep = false;
    }
    if (keep) {
      ++it;
    } else {
      freed += it->second.packed.nbytes();
      it = entries_.erase(it);
    }
  }
  return freed;
}

void WeightCache::restore(const Tensor& source) {
  std::lock_guard<std::mutex> lock(mutex_);
  restore_locked(source);
}

void WeightCache::restore_locked(const Tensor& source) {
  auto r = released_.find(source.raw());
  if (r == released_.end()) return;
  for (auto it = entries_.lower_bound({source.raw(), std::string()}); it != entries_.end() && it->first.first == source.raw(); ++it) {
    if (!it->second.unpack) continue;
    it->second.unpack(it->second.packed, const_cast<void*>(source.raw()));  // the bytes it held before release
    released_.erase(r);
    return;
  }
  ANVIL_INTERNAL_CHECK(false);  // release() requires an entry that unpacks
}

size_t WeightCache::packed_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t bytes = 0;
  for (const auto& [key, e] : entries_) bytes += e.packed.nbytes();
  return bytes;
}

size_t WeightCache::released_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t bytes = 0;
  for (const auto& [source, n] : released_) bytes += n;
  return bytes;
}

size_t WeightCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

}  // namespace anvil::kernels
