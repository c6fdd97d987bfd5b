#include "runtime/stream_pool.h"

#include <omp.h>

namespace anvil::runtime {

StreamPool::StreamPool(int streams, int threads_per_stream) : threads_per_stream_(threads_per_stream) {
  workers_.reserve(static_cast<size_t>(streams));
  for (int i = 0; i < streams; ++i) workers_.emplace_back([this] { serve(); });
}

StreamPool::~StreamPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void StreamPool::submit(Job job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
}

size_t StreamPool::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size();
}

void StreamPool::serve() {
  omp_set_num_threads(threads_per_stream_);
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

}  // namespace anvil::runtime
