#include "kernels/weight_cache.h"

namespace anvil::kernels {

Tensor WeightCache::get(const Tensor& source, const std::string& layout_key, const std::function<Tensor()>& pack) {
  auto key = std::make_pair(source.raw(), layout_key);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = entries_.find(key); it != entries_.end()) return it->second.packed;
  }
  Tensor packed = pack();  // outside the lock: packing a large weight takes a while
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, inserted] = entries_.emplace(key, Entry{source, packed});
  return it->second.packed;  // a concurrent packer may have won; both results are equal
}

size_t WeightCache::packed_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t bytes = 0;
  for (const auto& [key, e] : entries_) bytes += e.packed.nbytes();
  return bytes;
}

size_t WeightCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

}  // namespace anvil::kernels
