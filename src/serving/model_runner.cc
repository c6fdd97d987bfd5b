#include "serving/model_runner.h"

#include <cstring>

#include <fmt/format.h>

#include "core/check.h"

namespace anvil::serving {

using Clock = std::chrono::steady_clock;

struct ModelRunner::Request {
  std::map<std::string, Tensor> inputs;
  int64_t rows = 1;
  std::string key;  // requests with the same key can share a batch
  std::promise<std::vector<Tensor>> promise;
  Clock::time_point arrived;
};

namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

bool leads_with(const ValueInfo& v, const std::string& symbol) {
  return v.kind == ValueKind::kTensor && v.rank_known && !v.shape.empty() && v.shape[0] < 0 &&
         !v.dim_names.empty() && v.dim_names[0] == symbol;
}

bool has_batch_axis(const Session& session) {
  const auto& inputs = session.inputs();
  if (inputs.empty() || inputs[0].dim_names.empty() || inputs[0].dim_names[0].empty()) return false;
  const std::string symbol = inputs[0].dim_names[0];
  for (const ValueInfo& v : inputs)
    if (!leads_with(v, symbol)) return false;
  for (const ValueInfo& v : session.outputs())
    if (!leads_with(v, symbol)) return false;
  return true;
}

// Rows [begin, begin + rows) of `t` along its first axis, as a tensor of its own.
Tensor slice_rows(const Tensor& t, int64_t begin, int64_t rows) {
  Shape shape = t.shape();
  shape[0] = rows;
  Tensor out(t.dtype(), shape);
  const int64_t row_elems = t.dim(0) ? t.numel() / t.dim(0) : 0;
  if (t.dtype() == DType::kString) {
    for (int64_t i = 0; i < rows * row_elems; ++i)
      out.data<std::string>()[i] = t.data<std::string>()[begin * row_elems + i];
  } else if (out.nbytes()) {
    const size_t row_bytes = static_cast<size_t>(row_elems) * dtype_size(t.dtype());
    std::memcpy(out.raw(), static_cast<const char*>(t.raw()) + static_cast<size_t>(begin) * row_bytes, out.nbytes());
  }
  return out;
}

// The requests' tensors of input `name`, stacked along the first axis.
Tensor stack_rows(const std::string& name, const std::vector<const std::map<std::string, Tensor>*>& parts,
                  int64_t rows) {
  const Tensor& first = parts[0]->at(name);
  Shape shape = first.shape();
  shape[0] = rows;
  Tensor out(first.dtype(), shape);
  int64_t at = 0;  // elements written
  for (const auto* part : parts) {
    const Tensor& t = part->at(name);
    if (t.dtype() == DType::kString) {
      for (int64_t i = 0; i < t.numel(); ++i) out.data<std::string>()[at + i] = t.data<std::string>()[i];
    } else if (t.nbytes()) {
      std::memcpy(static_cast<char*>(out.raw()) + static_cast<size_t>(at) * dtype_size(t.dtype()), t.raw(),
                  t.nbytes());
    }
    at += t.numel();
  }
  return out;
}

}  // namespace

ModelRunner::ModelRunner(std::string name, Session session, const BatchingOptions& options, Metrics* metrics)
    : name_(std::move(name)), session_(std::move(session)), options_(options), metrics_(metrics) {
  ANVIL_CHECK(options.max_batch >= 1, ErrorKind::kInvalidArgument, "max batch must be >= 1, got {}", options.max_batch);
  ANVIL_CHECK(options.max_queue >= 1, ErrorKind::kInvalidArgument, "max queue must be >= 1");
  batchable_ = has_batch_axis(session_);
  batcher_ = std::thread([this] { batch_loop(); });
}

ModelRunner::~ModelRunner() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  batcher_.join();
}

std::future<std::vector<Tensor>> ModelRunner::submit(std::map<std::string, Tensor> inputs) {
  session_.check_inputs(inputs);
  auto request = std::make_shared<Request>();
  if (batchable_) {
    request->rows = -1;
    for (const auto& [name, t] : inputs) {
      ANVIL_CHECK(request->rows < 0 || t.dim(0) == request->rows, ErrorKind::kInvalidArgument,
                  "the inputs disagree on the batch size: '{}' has {} rows, another input {}", name, t.dim(0),
                  request->rows);
      request->rows = t.dim(0);
      request->key += fmt::format("{}:{}:{};", name, dtype_name(t.dtype()),
                                  shape_str(Shape(t.shape().begin() + 1, t.shape().end())));
    }
  }
  request->inputs = std::move(inputs);
  request->arrived = Clock::now();
  std::future<std::vector<Tensor>> result = request->promise.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw QueueFull("the server is shutting down");
    if (queue_.size() >= options_.max_queue)
      throw QueueFull(fmt::format("the queue of model '{}' is full ({} requests waiting)", name_, queue_.size()));
    if (metrics_) metrics_->record_enqueued(name_);  // before the batcher can take (and finish) it
    queue_.push_back(std::move(request));
  }
  wake_.notify_all();
  return result;
}

int64_t fair_share(int64_t waiting, int64_t streams, int64_t max_batch) {
  return std::min<int64_t>(max_batch, std::max<int64_t>(1, (waiting + streams - 1) / std::max<int64_t>(streams, 1)));
}

bool batch_ready(int64_t rows, bool left_waiting, int64_t max_batch) {
  // Waiting is for rows that have not come yet. What is left in the queue
  // once the batch has taken what fits its share (the rest of its key's rows,
  // rows of other shapes) is the next stream's, and this stream would idle
  // until the deadline for nothing (with that wait, batching served ResNet-18
  // no faster than no batching at 16 requests in flight).
  return rows >= max_batch || left_waiting;
}

void ModelRunner::batch_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] {
      return (!queue_.empty() && running_batches_ < session_.streams()) ||
             (stopping_ && queue_.empty() && running_batches_ == 0);
    });
    if (queue_.empty()) return;  // stopping, every request answered
    std::vector<std::shared_ptr<Request>> batch = take_batch(lock);
    ++running_batches_;
    lock.unlock();
    launch(std::move(batch));
    lock.lock();
  }
}

std::vector<std::shared_ptr<ModelRunner::Request>> ModelRunner::take_batch(std::unique_lock<std::mutex>& lock) {
  std::vector<std::shared_ptr<Request>> batch{queue_.front()};
  queue_.pop_front();
  int64_t rows = batch[0]->rows;
  const Clock::time_point deadline = batch[0]->arrived + options_.max_queue_delay;
  for (;;) {
    // A fair share of what waits: a batch that took the whole queue would leave
    // the next stream to free up idle while this one works through it.
    int64_t waiting = rows;  // rows this batch could take: its own key's
    for (const auto& r : queue_)
      if (r->key == batch[0]->key) waiting += r->rows;
    const int64_t limit = fair_share(waiting, session_.streams(), max_batch());
    for (auto it = queue_.begin(); it != queue_.end() && rows < limit;) {
      if ((*it)->key == batch[0]->key && rows + (*it)->rows <= limit) {
        rows += (*it)->rows;
        batch.push_back(*it);
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    if (batch_ready(rows, !queue_.empty(), max_batch()) || stopping_ || Clock::now() >= deadline) break;
    wake_.wait_until(lock, deadline);
  }
  return batch;
}

void ModelRunner::launch(std::vector<std::shared_ptr<Request>> batch) {
  int64_t rows = 0;
  for (const auto& r : batch) rows += r->rows;
  std::map<std::string, Tensor> inputs;
  if (batch.size() == 1) {
    inputs = batch[0]->inputs;
  } else {
    std::vector<const std::map<std::string, Tensor>*> parts;
    for (const auto& r : batch) parts.push_back(&r->inputs);
    for (const auto& entry : batch[0]->inputs) inputs[entry.first] = stack_rows(entry.first, parts, rows);
  }
  const Clock::time_point started = Clock::now();
  if (metrics_) metrics_->record_batch(name_, static_cast<int>(rows));

  auto finish = [this, batch, rows, started](std::vector<Tensor> outputs, std::exception_ptr error) {
    const Clock::time_point ended = Clock::now();
    if (!error && batch.size() > 1) {
      for (const Tensor& t : outputs)
        if (t.rank() == 0 || t.dim(0) != rows)
          error = std::make_exception_ptr(
              Error(ErrorKind::kInternal, fmt::format("model '{}': an output's first dimension is {}, not the batch "
                                                      "of {} rows; serve it with --max-batch 1",
                                                      name_, t.rank() ? t.dim(0) : 0, rows)));
    }
    int64_t at = 0;
    for (const auto& r : batch) {
      std::exception_ptr failed = error;
      std::vector<Tensor> mine;
      if (!failed) {
        try {
          if (batch.size() == 1) {
            mine = outputs;
          } else {
            for (const Tensor& t : outputs) mine.push_back(slice_rows(t, at, r->rows));
          }
        } catch (...) {  // slicing ran out of memory: this request fails, the others go on
          failed = std::current_exception();
        }
      }
      at += r->rows;
      // Recorded before the answer: a client that has its answer sees it counted (and no longer in flight).
      if (metrics_) metrics_->record_request(name_, !failed, seconds_between(r->arrived, started),
                                             seconds_between(started, ended));
      if (failed) r->promise.set_exception(failed);
      else r->promise.set_value(std::move(mine));
    }
    // Notified under the lock: once it is released the batcher may return and
    // the runner be destroyed, so nothing of it may be touched after.
    std::lock_guard<std::mutex> lock(mutex_);
    --running_batches_;
    wake_.notify_all();
  };
  try {
    session_.run_async(inputs, finish);
  } catch (...) {
    finish({}, std::current_exception());
  }
}

}  // namespace anvil::serving
