// A small string-keyed LRU cache. Not thread-safe: the owner locks.
#pragma once

#include <cstddef>
#include <list>
#include <string>
#include <unordered_map>
#include <utility>

namespace anvil {

template <typename V>
class LruCache {
 public:
  explicit LruCache(size_t capacity = 16) : capacity_(capacity ? capacity : 1) {}

  void set_capacity(size_t capacity) {
    capacity_ = capacity ? capacity : 1;
    trim();
  }
  size_t size() const { return order_.size(); }

  // The value for `key` (now the most recently used), or V{} when absent.
  V find(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return V{};
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }

  void insert(const std::string& key, V value) {
    if (auto it = index_.find(key); it != index_.end()) {
      it->second->second = std::move(value);
      order_.splice(order_.begin(), order_, it->second);
      return;
    }
    order_.emplace_front(key, std::move(value));
    index_[key] = order_.begin();
    trim();
  }

 private:
  void trim() {
    while (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }

  size_t capacity_;
  std::list<std::pair<std::string, V>> order_;  // most recently used first
  std::unordered_map<std::string, typename std::list<std::pair<std::string, V>>::iterator> index_;
};

}  // namespace anvil
