#include "core/pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

namespace anvil {

std::pair<uintptr_t, size_t> inner_pages(const void* data, size_t bytes) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + bytes) / page * page;
  return {first, last > first ? last - first : 0};
}

size_t drop_inner_pages(const void* data, size_t bytes) {
  const auto [first, length] = inner_pages(data, bytes);
  if (length == 0 || ::madvise(reinterpret_cast<void*>(first), length, MADV_DONTNEED) != 0) return 0;
  return length;
}

PageDropper::PageDropper(const void* data, size_t bytes) : base_(reinterpret_cast<uintptr_t>(data)), bytes_(bytes) {}

void PageDropper::drop_through(size_t done) {
  const uintptr_t from = std::max(base_, dropped_to_), to = base_ + std::min(done, bytes_);
  if (to <= from) return;
  const auto [first, length] = inner_pages(reinterpret_cast<const void*>(from), to - from);
  if (length && drop_inner_pages(reinterpret_cast<const void*>(first), length) == length) {
    dropped_ += length;
    dropped_to_ = first + length;
  }
}

}  // namespace anvil
