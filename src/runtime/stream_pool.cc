#include "runtime/stream_pool.h"

#include <omp.h>

namespace anvil::runtime {

namespace {
thread_local bool t_on_stream_thread = false;
}  // namespace

StreamPool::StreamPool(int streams, int threads_per_stream) : threads_per_stream_(threads_per_stream) {
  workers_.reserve(static_cast<size_t>(streams));
  try {
    for (int i = 0; i < streams; ++i) workers_.emplace_back([this] { serve(); });
  } catch (...) {  // no thread left joinable behind a failed start (std::terminate otherwise)
    stop_and_join();
    throw;
  }
}

StreamPool::~StreamPool() { stop_and_join(); }

void StreamPool::stop_and_join() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_)
    if (t.joinable()) t.join();
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

void StreamPool::wait_idle() const {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [this] { return queue_.empty() && running_ == 0; });
}

bool StreamPool::on_stream_thread() { return t_on_stream_thread; }

void StreamPool::serve() {
  t_on_stream_thread = true;
  omp_set_num_threads(threads_per_stream_);
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      job = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    job();
    job = nullptr;  // what the job captured goes before the pool is told it is idle
    std::lock_guard<std::mutex> lock(mutex_);
    --running_;
    if (queue_.empty() && running_ == 0) idle_.notify_all();
  }
}

}  // namespace anvil::runtime
