// Packed copies of constant weights, shared by every plan of a session.
//
// A session keeps one plan per set of input shapes; without this cache each
// plan would reorder the same weights into oneDNN's layout again and hold its
// own copy (a BERT session serving ten sequence lengths would hold ten).
// Entries are keyed by the source tensor's address and the packed layout, and
// keep the source alive so that its address cannot be reused by another
// tensor while the entry exists. Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "anvil/tensor.h"

namespace anvil::kernels {

class WeightCache {
 public:
  // The packed form of `source` for `layout_key`; `pack` makes it on the first request.
  Tensor get(const Tensor& source, const std::string& layout_key, const std::function<Tensor()>& pack);
  size_t packed_bytes() const;
  size_t size() const;

 private:
  struct Entry {
    Tensor source;
    Tensor packed;
  };
  mutable std::mutex mutex_;
  std::map<std::pair<const void*, std::string>, Entry> entries_;
};

}  // namespace anvil::kernels
