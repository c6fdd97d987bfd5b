// The training data pipeline: datasets, a batching DataLoader with thread or
// fork() workers, and ordered parallel map/imap for generating data.
//
//   auto data = std::make_shared<train::TensorDataset>(images_u8, labels);  // uint8 -> float32 / 255
//   train::LoaderOptions o;
//   o.batch_size = 256;
//   o.num_workers = 2;
//   train::DataLoader loader(data, o);
//   for (int epoch = 0; epoch < 10; ++epoch) {
//     loader.start_epoch(epoch);  // the order is a function of (seed, epoch) only
//     train::Batch b;
//     while (loader.next(b)) trainer.step({{"x", b.fields[0]}, {"y", b.fields[1]}}, lr);
//   }
//
// Whatever the number and kind of workers, next() returns the same batches,
// byte for byte, in the same order: workers only change who computes them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "anvil/tensor.h"

namespace anvil::train {

// A table of samples with fields() fields (e.g. features and labels). fill()
// may be called from several threads at once, and (for process workers) in a
// fork()ed child, where it must not use OpenMP.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual int fields() const = 0;
  // The shape of one sample of `field`; a batch is [rows] + this.
  virtual Shape sample_shape(int field) const = 0;
  // The dtype of `field` in a batch.
  virtual DType field_dtype(int field) const = 0;
  // Writes samples indices[0..count) of `field` into rows row_offset.. of
  // `out`, a preallocated [rows, sample_shape...] tensor of field_dtype,
  // every element of those rows: the loader does not zero batches first.
  virtual void fill(int field, const int64_t* indices, int64_t count, Tensor& out, int64_t row_offset) const = 0;
};

// In-memory features [N, ...] (float32, or uint8 expanded per batch to
// float32 x/255, so the stored copy takes a quarter of the memory) and labels
// [N, ...] (int64 or int32, batched as int64; or float32 targets, batched as
// they are). Field 0: features, 1: labels.
class TensorDataset : public Dataset {
 public:
  // Throws Error(kInvalidArgument) for other dtypes, scalars or row counts
  // that differ.
  TensorDataset(Tensor features, Tensor labels);
  int64_t size() const override { return rows_; }
  int fields() const override { return 2; }
  Shape sample_shape(int field) const override;
  DType field_dtype(int field) const override;
  void fill(int field, const int64_t* indices, int64_t count, Tensor& out, int64_t row_offset) const override;

  const Tensor& features() const { return features_; }
  const Tensor& labels() const { return labels_; }

 private:
  Tensor features_, labels_;
  int64_t rows_;
  void check_target(int field, const int64_t* indices, int64_t count, const Tensor& out, int64_t row_offset) const;
};

// Features and labels from two .npy (or .pb) files, loaded into memory.
std::shared_ptr<TensorDataset> npy_dataset(const std::string& features_path, const std::string& labels_path);

// A numeric CSV file: one sample per line, column `label_column` (negative
// counts from the end: -1 is the last) a non-negative integer label, the
// others float32 features. A first line with no numeric cell is a header.
// Blank lines are skipped. The file is untrusted: any malformed content is an
// Error(kInvalidArgument) naming file:line.
std::shared_ptr<TensorDataset> csv_dataset(const std::string& path, int label_column = -1);
// The same for a file's contents; `path` names it in messages.
std::shared_ptr<TensorDataset> csv_dataset_from_text(const std::string& text, const std::string& path,
                                                     int label_column = -1);

// kThreads: K threads share the dataset. kProcesses: K fork()ed children, each
// with a copy-on-write copy of the dataset as it was at start_epoch(), that
// fill batch slots in shared memory (for a fill() that does not scale across
// threads, e.g. one that holds a lock). Workers are started by
// start_epoch() and exit after the epoch's last batch, unless persistent;
// process workers are restarted when an epoch is abandoned half-way.
enum class WorkerKind { kThreads, kProcesses };

struct LoaderOptions {
  int64_t batch_size = 32;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;  // drop a last batch smaller than batch_size
  int num_workers = 0;     // 0: batches are made on the calling thread, in next()
  WorkerKind worker_kind = WorkerKind::kThreads;
  int prefetch_factor = 2;          // at most prefetch_factor * num_workers batches made ahead
  bool persistent_workers = false;  // keep workers (and their worker_init) across epochs
  // Runs first in each worker (thread or child process), with its id 0..num_workers-1.
  std::function<void(int worker_id)> worker_init;
  // Without workers: the threads that fill a large batch on the calling
  // thread's behalf (0: OpenMP's default), as many as the steps use.
  int threads = 0;
};

struct Batch {
  std::vector<Tensor> fields;  // one [rows, sample...] tensor per dataset field
  int64_t rows = 0;
  int64_t index = 0;  // the batch's number in its epoch
};

// The seed of epoch `epoch`'s shuffle: splitmix64's (epoch + 1)-th output
// from state `seed`, so neighbouring seeds and epochs give unrelated orders.
uint64_t epoch_seed(uint64_t seed, int epoch);
// The sample order of an epoch: 0..size-1, shuffled (when `shuffle`) by
// std::shuffle with std::mt19937_64(epoch_seed(seed, epoch)). A pure
// function, so a resumed run replays it (for one standard library).
std::vector<int64_t> epoch_order(int64_t size, uint64_t seed, int epoch, bool shuffle);

// The number of threads an OpenMP parallel region started by the calling
// thread would use (1 inside loader and map workers).
int current_intra_op_threads();

class BatchSource;  // the workers behind a DataLoader (loader_internal.h)

// One consumer: start_epoch() and next() are called from one thread at a time.
class DataLoader {
 public:
  // Throws Error(kInvalidArgument) for a null dataset or bad options.
  DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t batches() const { return batches_; }
  const LoaderOptions& options() const { return options_; }
  // Starts (or restarts) an epoch; batches of an unfinished one are dropped.
  void start_epoch(int epoch);
  // The epoch's next batch, in order; false after the last one (then
  // non-persistent workers have exited). A dataset error is rethrown as an
  // anvil::Error naming the batch (the following batches still come); a
  // worker process that dies is an Error(kInternal), and the loader then
  // needs start_epoch().
  bool next(Batch& out);

 private:
  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  int64_t batches_ = 0;
  std::vector<int64_t> order_;
  bool started_ = false;
  int64_t next_batch_ = 0;  // num_workers == 0
  std::unique_ptr<BatchSource> source_;
};

namespace detail {

// K threads that compute indices 0..count-1 for a consumer that takes them in
// order: at most `bound` indices are claimed but not yet released, so the
// caller's results fit in a ring of `bound` places (index i at i % bound).
// Thread w computes indices w, w + K, ... (as PyTorch deals batches), so which
// worker makes what, and so its messages, do not depend on timing. Each
// thread sets its OpenMP thread count to 1, then runs `init`.
class OrderedWorkers {
 public:
  using Produce = std::function<void(int64_t index, int worker)>;
  OrderedWorkers(int workers, int64_t bound, std::function<void(int)> init, Produce produce);
  ~OrderedWorkers();
  OrderedWorkers(const OrderedWorkers&) = delete;
  OrderedWorkers& operator=(const OrderedWorkers&) = delete;

  // A new run of `count` indices; waits for the threads to finish what they
  // are computing and discards results not yet taken.
  void begin(int64_t count);
  // Waits for the next index; false when the run is over. When computing it
  // threw (or a thread's init did), rethrows that, the index released.
  bool wait_next(int64_t& index);
  // The caller has taken the result of the index wait_next gave.
  void release();

 private:
  int64_t bound_;
  std::function<void(int)> init_;
  Produce produce_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  int64_t count_ = 0, delivered_ = 0, busy_ = 0;
  std::vector<int64_t> next_;  // per thread: the next index it computes
  bool stop_ = false;
  std::vector<char> done_;                  // ring: index produced
  std::vector<std::exception_ptr> errors_;  // ring: what producing it threw
  std::exception_ptr fatal_;                // an init that threw
  std::vector<std::thread> threads_;

  void run(int worker);
  void stop();  // joins the threads
  bool claim(int worker, int64_t& index);
};

void check_map_arguments(int64_t count, int workers, int64_t bound);

}  // namespace detail

// fn(0..count-1) computed lazily by `workers` threads (0: by the caller, in
// next()), delivered in order, with at most `bound` results computed ahead.
// An exception from fn(i) is rethrown by the next() that would return i.
template <typename T>
class Imap {
 public:
  Imap(int64_t count, std::function<T(int64_t)> fn, int workers, int64_t bound) : fn_(std::move(fn)), count_(count) {
    detail::check_map_arguments(count, workers, bound);
    if (workers == 0) return;
    ring_.resize(static_cast<size_t>(bound));
    workers_ = std::make_unique<detail::OrderedWorkers>(
        workers, bound, nullptr, [this, bound](int64_t i, int) { ring_[static_cast<size_t>(i % bound)] = fn_(i); });
    workers_->begin(count);
  }

  bool next(T& out) {
    if (next_ == count_) return false;
    if (!workers_) {
      out = fn_(next_++);
      return true;
    }
    int64_t i;
    ++next_;  // before waiting: a rethrown error consumes its index too
    if (!workers_->wait_next(i)) return false;
    std::optional<T>& place = ring_[static_cast<size_t>(i) % ring_.size()];
    out = std::move(*place);
    place.reset();
    workers_->release();
    return true;
  }

 private:
  std::function<T(int64_t)> fn_;
  int64_t count_, next_ = 0;
  std::vector<std::optional<T>> ring_;
  std::unique_ptr<detail::OrderedWorkers> workers_;  // last: its threads stop before ring_ goes
};

// [fn(0), ..., fn(count-1)] computed by `workers` threads (0: the caller);
// the first failing index's exception is rethrown.
template <typename T>
std::vector<T> parallel_map(int64_t count, std::function<T(int64_t)> fn, int workers) {
  const int64_t bound = workers > 0 ? 4 * static_cast<int64_t>(workers) : 1;
  Imap<T> items(count, std::move(fn), workers, bound);
  std::vector<T> out;
  out.reserve(static_cast<size_t>(count));
  T item{};
  while (items.next(item)) out.push_back(std::move(item));
  return out;
}

}  // namespace anvil::train
