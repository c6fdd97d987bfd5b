#include "kernels/weight_cache.h"

#include <algorithm>
#include <cstdint>

#include "core/check.h"
#include "core/pages.h"

namespace anvil::kernels {

namespace {

// Below this a release saves too little to be worth a restore.
constexpr size_t kMinReleaseBytes = size_t{1} << 16;

}  // namespace

Tensor WeightCache::get(const Tensor& source, const std::string& layout_key, const std::function<Tensor()>& pack,
                        Unpack unpack) {
  return get_consuming(source, layout_key, [&](const Consumed&) { return pack(); }, std::move(unpack));
}

Tensor WeightCache::get_consuming(const Tensor& source, const std::string& layout_key,
                                  const std::function<Tensor(const Consumed&)>& pack, Unpack unpack) {
  auto key = std::make_pair(source.raw(), layout_key);
  // Packing runs under the lock: release() must not drop a source while it is read.
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = entries_.find(key); it != entries_.end()) return it->second.packed;
  check_not_lost(source);
  restore_locked(source);
  Entry entry{source, Tensor(), std::move(unpack)};
  // What release() asks, with the entry made here (it holds the source too) as the one that unpacks.
  const bool may_drop = entry.unpack && consumable_.count(source.raw()) && source.nbytes() >= kMinReleaseBytes &&
                        source.use_count() == 2 + entries_of(source);
  PageDropper pages(source.raw(), source.nbytes());
  Consumed consumed;
  if (may_drop) consumed = [&pages](size_t bytes) { pages.drop_through(bytes); };
  try {
    entry.packed = pack(consumed);
  } catch (...) {
    if (pages.dropped() > 0) lost_.insert(source.raw());  // nothing can restore what was dropped
    throw;
  }
  const Tensor packed = entries_.emplace(key, std::move(entry)).first->second.packed;
  if (pages.dropped() > 0) released_[source.raw()] = pages.dropped();
  return packed;
}

void WeightCache::check_not_lost(const Tensor& source) const {
  ANVIL_CHECK(!lost_.count(source.raw()), ErrorKind::kInternal,
              "a weight's packing failed after its original's pages were dropped: the session cannot use it");
}

void WeightCache::set_consumable(const Tensor& source, bool consumable) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (consumable) consumable_.insert(source.raw());
  else consumable_.erase(source.raw());
}

long WeightCache::entries_of(const Tensor& source, bool* unpackable) const {
  long entries = 0;
  for (auto it = entries_.lower_bound({source.raw(), std::string()}); it != entries_.end() && it->first.first == source.raw(); ++it) {
    if (unpackable) *unpackable |= static_cast<bool>(it->second.unpack);
    ++entries;
  }
  return entries;
}

size_t WeightCache::release(const Tensor& source) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (released_.count(source.raw()) || source.nbytes() < kMinReleaseBytes) return 0;
  bool unpackable = false;
  const long entries = entries_of(source, &unpackable);
  // Only bytes the session alone holds: `source` and the entries' copies of it,
  // never a caller's tensor or a view shared with another value.
  if (!unpackable || source.use_count() != 1 + entries) return 0;
  const size_t length = drop_inner_pages(source.raw(), source.nbytes());
  if (length == 0) return 0;
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
  check_not_lost(source);
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
