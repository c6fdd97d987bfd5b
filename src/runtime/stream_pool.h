// runtime::StreamPool — the session's inference streams: N threads, each
// running queued requests one at a time with its own OpenMP team of M threads
// (OpenMP's thread count is per calling thread, so the teams never share
// workers). Requests wait in one FIFO queue; any idle stream takes the next.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace anvil::runtime {

class StreamPool {
 public:
  using Job = std::function<void()>;  // must not throw: it reports its own errors

  StreamPool(int streams, int threads_per_stream);
  // Finishes every queued job, then joins the streams.
  ~StreamPool();
  StreamPool(const StreamPool&) = delete;
  StreamPool& operator=(const StreamPool&) = delete;

  void submit(Job job);
  int streams() const { return static_cast<int>(workers_.size()); }
  int threads_per_stream() const { return threads_per_stream_; }
  // Jobs waiting for a stream (not counting those running).
  size_t queued() const;
  // Blocks until no job is queued or running.
  void wait_idle() const;
  // True on a thread of any StreamPool (inside a job).
  static bool on_stream_thread();

 private:
  void serve();

  int threads_per_stream_;
  void stop_and_join();

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  mutable std::condition_variable idle_;
  std::deque<Job> queue_;
  int running_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace anvil::runtime
