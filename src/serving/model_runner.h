// serving::ModelRunner — one served model: a bounded request queue and a
// batcher thread that merges queued requests along the batch axis (dynamic
// batching) and hands each batch to the session's streams.
//
// A batch is formed only when a stream is free, so under light load a request
// runs at once (alone), and under load requests gather into larger batches
// while the streams are busy. A batch takes at most its fair share of the
// waiting rows (waiting / streams, at most max_batch), so that the next stream
// to free up finds work too. It runs once it holds max_batch rows, or when
// requests are left in the queue after it took what fits its share (those
// are the next stream's); otherwise, the queue empty, it waits for more
// requests until max_queue_delay after its first request arrived (0: it
// never waits).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "anvil/session.h"
#include "serving/metrics.h"

namespace anvil::serving {

struct BatchingOptions {
  int max_batch = 1;                              // rows per run; 1 turns batching off
  std::chrono::microseconds max_queue_delay{0};   // how long a batch may wait for more rows
  size_t max_queue = 64;                          // requests waiting; more are refused
};

// The batching rule. The most rows a batch may take when `waiting` rows of
// its key (its own included) are queued for `streams` streams:
int64_t fair_share(int64_t waiting, int64_t streams, int64_t max_batch);
// Whether a batch of `rows`, having taken what fits its share, runs now
// rather than wait for more requests: it is full, or requests are
// `left_waiting` in the queue for the next stream.
bool batch_ready(int64_t rows, bool left_waiting, int64_t max_batch);

// Thrown by submit() when max_queue requests are waiting (HTTP 503).
class QueueFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ModelRunner {
 public:
  ModelRunner(std::string name, Session session, const BatchingOptions& options, Metrics* metrics);
  // Stops taking requests, runs every queued one, waits for the runs.
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  const std::string& name() const { return name_; }
  const Session& session() const { return session_; }
  // Every input and output has the same symbolic first dimension, so requests
  // can be stacked along it.
  bool batchable() const { return batchable_; }
  int max_batch() const { return batchable_ ? options_.max_batch : 1; }

  // Checks the inputs (throws anvil::Error) and queues them; throws QueueFull.
  // The future holds the outputs in the model's output order, or the error.
  std::future<std::vector<Tensor>> submit(std::map<std::string, Tensor> inputs);

 private:
  struct Request;
  void batch_loop();
  std::vector<std::shared_ptr<Request>> take_batch(std::unique_lock<std::mutex>& lock);
  void launch(std::vector<std::shared_ptr<Request>> batch);

  std::string name_;
  Session session_;
  BatchingOptions options_;
  Metrics* metrics_;
  bool batchable_ = false;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Request>> queue_;
  int running_batches_ = 0;
  bool stopping_ = false;
  std::thread batcher_;
};

}  // namespace anvil::serving
