// Giving a buffer's memory back to the system while the buffer stays
// allocated: for bytes that will never be read again (a weight once packed, a
// file's bytes once copied), so that they and their successor are not both
// whole in memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

namespace anvil {

// The whole pages inside [data, data + bytes) as (first address, length): the
// ones that can be dropped without touching the allocator's bookkeeping
// around the buffer, which shares the partial pages at its ends.
std::pair<uintptr_t, size_t> inner_pages(const void* data, size_t bytes);

// Drops the whole pages inside [data, data + bytes) (MADV_DONTNEED): they
// read as zeros afterwards, or as the file's bytes in a private file mapping.
// Returns the bytes dropped (0 when there are none or madvise fails).
size_t drop_inner_pages(const void* data, size_t bytes);

// Drops a buffer's whole pages front to back as its reader reports how far
// it has read: each call drops the whole pages read since the last, so a
// page is given back once, and the partial pages at the buffer's ends stay.
class PageDropper {
 public:
  PageDropper(const void* data, size_t bytes);
  // The bytes [data, data + done) will not be read again.
  void drop_through(size_t done);
  size_t dropped() const { return dropped_; }  // bytes given back so far

 private:
  uintptr_t base_;
  size_t bytes_;
  uintptr_t dropped_to_ = 0;  // where the pages given back end
  size_t dropped_ = 0;
};

}  // namespace anvil
