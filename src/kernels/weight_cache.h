// Packed copies of constant weights, shared by every plan of a session.
//
// A session keeps one plan per set of input shapes; without this cache each
// plan would reorder the same weights into oneDNN's layout again and hold its
// own copy (a BERT session serving ten sequence lengths would hold ten).
// Entries are keyed by the source tensor's address and the packed layout, and
// keep the source alive so that its address cannot be reused by another
// tensor while the entry exists. Thread-safe.
//
// One copy of each weight: once every reader of a constant reads only its
// packed copies, the session release()s the original, whose pages go back to
// the system (the tensor keeps its address, its bytes read as zeros). Before
// anything else reads it, restore() rebuilds it from a packed copy with the
// entry's unpack function (a exact reorder back to the plain layout).
//
// The first plan goes further for a constant it reads last and only packed:
// the planner marks it consumable while the reader is prepared, and a pack
// that walks its source in order (get_consuming) drops each part once it is
// packed, so that the original and its packed copy are never both whole in
// memory (VGG-16's 411 MB classifier weight would otherwise double the peak).
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "anvil/tensor.h"

namespace anvil::kernels {

class WeightCache {
 public:
  // Writes the plain bytes of a packed tensor to `dst` (source.nbytes() bytes).
  using Unpack = std::function<void(const Tensor& packed, void* dst)>;

  // The packed form of `source` for `layout_key`; `pack` makes it on the first
  // request (restoring a released source first); `unpack` undoes it.
  Tensor get(const Tensor& source, const std::string& layout_key, const std::function<Tensor()>& pack,
             Unpack unpack = nullptr);
  // Told by a pack that reads its source front to back: its first `bytes`
  // will not be read again.
  using Consumed = std::function<void(size_t bytes)>;
  // get(), where `pack` is given a Consumed that drops those pages when
  // `source` is marked consumable and release() could drop it (null
  // otherwise). A source it dropped any of counts as released. A pack that
  // throws after reporting progress leaves the source's bytes lost (every
  // later get or restore of it throws kInternal): it must make everything
  // that can fail before its first report.
  Tensor get_consuming(const Tensor& source, const std::string& layout_key,
                       const std::function<Tensor(const Consumed&)>& pack, Unpack unpack);
  // Marks (or unmarks) `source` as one the node being prepared reads last,
  // with every earlier reader packed (the planner's call).
  void set_consumable(const Tensor& source, bool consumable);
  // Drops the pages of `source` when it has a packed copy that can be unpacked,
  // is large enough to be worth it, and no tensor but `source` and this
  // cache's entries holds its bytes; returns the bytes dropped (0: kept).
  size_t release(const Tensor& source);
  // Rebuilds a released `source` (a no-op otherwise).
  void restore(const Tensor& source);
  // Drops the packed copies no kernel holds any more (the losers of a tuned
  // choice), keeping for each released source one copy to restore it from.
  // Returns the bytes freed.
  size_t prune_unused();
  size_t packed_bytes() const;
  // The bytes of the weights the model's products read on every run (the
  // session counts them before planning): kernels whose best choice depends
  // on whether the weights stay in the caches across runs read it (0: not
  // known).
  void set_model_weight_bytes(size_t bytes) { model_weight_bytes_ = bytes; }
  size_t model_weight_bytes() const { return model_weight_bytes_; }
  size_t released_bytes() const;
  size_t size() const;

 private:
  struct Entry {
    Tensor source;
    Tensor packed;
    Unpack unpack;
  };
  void restore_locked(const Tensor& source);
  // Throws kInternal for a source a failed consuming pack left partly dropped.
  void check_not_lost(const Tensor& source) const;
  // The entries packed from `source`; `unpackable` set when one can restore it.
  long entries_of(const Tensor& source, bool* unpackable = nullptr) const;

  mutable std::mutex mutex_;
  std::map<std::pair<const void*, std::string>, Entry> entries_;
  std::map<const void*, size_t> released_;  // source address -> bytes dropped
  std::set<const void*> consumable_;
  std::set<const void*> lost_;  // sources a pack failed on after dropping some of their pages
  size_t model_weight_bytes_ = 0;
};

}  // namespace anvil::kernels
