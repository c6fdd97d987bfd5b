// train::DataLoader, its thread workers, and the ordered workers behind Imap
// (data_loader.h). Process workers are in loader_processes.cc.
#include "train/data_loader.h"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <numeric>
#include <random>
#include <system_error>

#include "core/check.h"
#include "core/checked.h"
#include "train/loader_internal.h"

namespace anvil::train {

namespace {

constexpr int kMaxWorkers = 256;

std::string batch_context(int64_t index, int worker) {
  return worker < 0 ? fmt::format("data loader batch {}", index)
                    : fmt::format("data loader worker {}, batch {}", worker, index);
}

}  // namespace

void rethrow_in_context(const std::string& where) {
  try {
    throw;
  } catch (const Error& e) {
    throw Error(e.kind(), where + ": " + e.what());
  } catch (const std::bad_alloc&) {
    throw Error(ErrorKind::kOutOfMemory, where + ": out of memory");
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kInvalidArgument, where + ": " + e.what());
  } catch (...) {
    throw Error(ErrorKind::kInvalidArgument, where + ": unknown exception");
  }
}

// ---- Epoch order ----

uint64_t epoch_seed(uint64_t seed, int epoch) {
  constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
  uint64_t z = seed + (static_cast<uint64_t>(epoch) + 1) * kGolden;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::vector<int64_t> epoch_order(int64_t size, uint64_t seed, int epoch, bool shuffle) {
  ANVIL_CHECK(size >= 0 && epoch >= 0, ErrorKind::kInvalidArgument,
              "epoch_order: size and epoch must be >= 0, got {} and {}", size, epoch);
  std::vector<int64_t> order(static_cast<size_t>(size));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shuffle) {
    std::mt19937_64 engine(epoch_seed(seed, epoch));
    std::shuffle(order.begin(), order.end(), engine);
  }
  return order;
}

int current_intra_op_threads() { return omp_get_max_threads(); }

// ---- Batches ----

BatchLayout batch_layout(const Dataset& dataset, int64_t batch_size) {
  BatchLayout layout;
  ANVIL_CHECK(dataset.fields() >= 1 && dataset.size() >= 0, ErrorKind::kInvalidArgument,
              "data loader: the dataset has {} fields and {} samples", dataset.fields(), dataset.size());
  for (int f = 0; f < dataset.fields(); ++f) {
    const DType dtype = dataset.field_dtype(f);
    ANVIL_CHECK(dtype != DType::kUndefined && dtype != DType::kString, ErrorKind::kInvalidArgument,
                "data loader: field {} has dtype {}; batches hold numeric tensors", f, dtype_name(dtype));
    Shape sample = dataset.sample_shape(f);
    const int64_t row = checked_mul(shape_numel(sample), static_cast<int64_t>(dtype_size(dtype)), "a sample's bytes");
    checked_mul(row, batch_size, "a batch's bytes");
    layout.dtypes.push_back(dtype);
    layout.samples.push_back(std::move(sample));
    layout.row_bytes.push_back(row);
  }
  return layout;
}

// The caller's own batches (no workers) are made between steps, while the
// OpenMP team waits: its threads split the rows of a large batch (fill() is
// already called from several loader threads at once). A worker fills alone:
// it must not start a team of its own, and a fork()ed one cannot.
void fill_batch(const Dataset& dataset, const int64_t* indices, int64_t rows, std::vector<Tensor>& fields,
                int64_t index, int worker, int threads) {
  constexpr int64_t kBytesPerThread = int64_t{1} << 20;
  int64_t bytes = 0;
  for (const Tensor& t : fields) bytes += static_cast<int64_t>(t.nbytes());
  const int64_t team = threads > 0 ? threads : omp_get_max_threads();
  threads = worker < 0 ? static_cast<int>(std::clamp<int64_t>(bytes / kBytesPerThread, 1, team)) : 1;
  auto fill_rows = [&](int64_t r0, int64_t r1) {
    for (size_t f = 0; f < fields.size(); ++f) dataset.fill(static_cast<int>(f), indices + r0, r1 - r0, fields[f], r0);
  };
  std::exception_ptr error;
  try {
    if (threads == 1) {
      fill_rows(0, rows);  // no OpenMP region at all in a worker: a fork()ed process has no team
    } else {
#pragma omp parallel num_threads(threads)
      {
        const int t = omp_get_thread_num(), team = omp_get_num_threads();
        try {
          fill_rows(rows * t / team, rows * (t + 1) / team);
        } catch (...) {
#pragma omp critical(anvil_fill_batch_error)
          if (!error) error = std::current_exception();
        }
      }
    }
    if (error) std::rethrow_exception(error);
  } catch (...) {
    rethrow_in_context(batch_context(index, worker));
  }
}

Batch make_batch(const Dataset& dataset, const int64_t* indices, int64_t rows, int64_t index, int worker,
                 int threads) {
  Batch b;
  b.rows = rows;
  b.index = index;
  try {
    for (int f = 0; f < dataset.fields(); ++f) {
      Shape shape = dataset.sample_shape(f);
      shape.insert(shape.begin(), rows);
      // Uninitialized: fill() writes every row, and zeroing a batch of 25,000
      // x 512 floats cost a page-faulting memset per step.
      b.fields.push_back(Tensor::uninitialized(dataset.field_dtype(f), std::move(shape)));
    }
  } catch (...) {
    rethrow_in_context(batch_context(index, worker));
  }
  fill_batch(dataset, indices, rows, b.fields, index, worker, threads);
  return b;
}

namespace {

// Whether `b`'s tensors can take a batch of `rows` in place: the same
// fields, dtypes and shapes, each held by `b` alone (the caller let go of
// the last batch's tensors).
bool batch_reusable(const Batch& b, const Dataset& dataset, int64_t rows) {
  if (b.fields.size() != static_cast<size_t>(dataset.fields())) return false;
  for (int f = 0; f < dataset.fields(); ++f) {
    const Tensor& t = b.fields[static_cast<size_t>(f)];
    Shape shape = dataset.sample_shape(f);
    shape.insert(shape.begin(), rows);
    if (t.use_count() != 1 || t.dtype() != dataset.field_dtype(f) || t.shape() != shape) return false;
  }
  return true;
}

}  // namespace

// ---- Ordered worker threads ----

namespace detail {

void check_map_arguments(int64_t count, int workers, int64_t bound) {
  ANVIL_CHECK(count >= 0, ErrorKind::kInvalidArgument, "map: count must be >= 0, got {}", count);
  ANVIL_CHECK(workers >= 0 && workers <= kMaxWorkers, ErrorKind::kInvalidArgument,
              "map: workers must be in [0, {}], got {}", kMaxWorkers, workers);
  ANVIL_CHECK(bound >= 1 && bound <= (int64_t{1} << 30), ErrorKind::kInvalidArgument,
              "map: bound must be in [1, 2^30], got {}", bound);
}

OrderedWorkers::OrderedWorkers(int workers, int64_t bound, std::function<void(int)> init, Produce produce)
    : bound_(bound),
      init_(std::move(init)),
      produce_(std::move(produce)),
      next_(static_cast<size_t>(workers)),
      done_(static_cast<size_t>(bound), 0),
      errors_(static_cast<size_t>(bound)) {
  try {
    for (int w = 0; w < workers; ++w) threads_.emplace_back(&OrderedWorkers::run, this, w);
  } catch (const std::system_error& e) {
    stop();
    fail(ErrorKind::kOutOfMemory, "cannot start {} worker threads: {}", workers, e.what());
  }
}

OrderedWorkers::~OrderedWorkers() { stop(); }

void OrderedWorkers::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
}

void OrderedWorkers::run(int worker) {
  // The ICV is per thread: the caller's OpenMP thread count stays as it was,
  // and K workers never start K teams of all the cores.
  omp_set_num_threads(1);
  if (init_) {
    std::exception_ptr error;
    try {
      init_(worker);
    } catch (...) {
      error = std::current_exception();
    }
    if (error) {
      // Moved under the lock, so only the consumer's thread holds the exception from here on.
      std::lock_guard<std::mutex> lock(mu_);
      if (!fatal_) fatal_ = std::move(error);
      done_cv_.notify_all();
      return;
    }
  }
  int64_t i;
  while (claim(worker, i)) {
    std::exception_ptr error;
    try {
      produce_(i, worker);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    --busy_;
    errors_[static_cast<size_t>(i % bound_)] = std::move(error);
    done_[static_cast<size_t>(i % bound_)] = 1;
    done_cv_.notify_all();
  }
}

bool OrderedWorkers::claim(int worker, int64_t& index) {
  std::unique_lock<std::mutex> lock(mu_);
  int64_t& next = next_[static_cast<size_t>(worker)];
  work_cv_.wait(lock, [&] { return stop_ || (next < count_ && next < delivered_ + bound_); });
  if (stop_) return false;
  index = next;
  next += static_cast<int64_t>(next_.size());
  ++busy_;
  return true;
}

void OrderedWorkers::begin(int64_t count) {
  std::unique_lock<std::mutex> lock(mu_);
  count_ = 0;  // no new claims while the indices in progress finish
  done_cv_.wait(lock, [&] { return busy_ == 0; });
  std::fill(done_.begin(), done_.end(), 0);
  std::fill(errors_.begin(), errors_.end(), nullptr);
  std::iota(next_.begin(), next_.end(), int64_t{0});
  count_ = count;
  delivered_ = 0;
  work_cv_.notify_all();
}

bool OrderedWorkers::wait_next(int64_t& index) {
  std::unique_lock<std::mutex> lock(mu_);
  if (delivered_ == count_) return false;
  const size_t slot = static_cast<size_t>(delivered_ % bound_);
  done_cv_.wait(lock, [&] { return done_[slot] || fatal_; });
  if (!done_[slot]) std::rethrow_exception(fatal_);
  index = delivered_;
  if (errors_[slot]) {
    std::exception_ptr error = std::move(errors_[slot]);
    errors_[slot] = nullptr;
    done_[slot] = 0;
    ++delivered_;
    work_cv_.notify_all();
    std::rethrow_exception(error);
  }
  return true;
}

void OrderedWorkers::release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_[static_cast<size_t>(delivered_ % bound_)] = 0;
    ++delivered_;
  }
  work_cv_.notify_all();
}

}  // namespace detail

// ---- Thread workers ----

namespace {

class ThreadSource : public BatchSource {
 public:
  ThreadSource(std::shared_ptr<const Dataset> dataset, const LoaderOptions& o)
      : dataset_(std::move(dataset)),
        batch_size_(o.batch_size),
        ring_(static_cast<size_t>(o.prefetch_factor) * static_cast<size_t>(o.num_workers)) {
    auto init = [hook = o.worker_init](int w) {
      if (!hook) return;
      try {
        hook(w);
      } catch (...) {
        rethrow_in_context(fmt::format("data loader worker {}: worker_init", w));
      }
    };
    workers_ = std::make_unique<detail::OrderedWorkers>(o.num_workers, static_cast<int64_t>(ring_.size()), init,
                                                        [this](int64_t b, int w) { produce(b, w); });
  }

  void begin(std::vector<int64_t> order, int64_t batches) override {
    workers_->begin(0);  // the threads are idle once this returns: order_ is ours to replace
    order_ = std::move(order);
    workers_->begin(batches);
  }

  bool next(Batch& out) override {
    int64_t b;
    if (!workers_->wait_next(b)) return false;
    Batch& place = ring_[static_cast<size_t>(b) % ring_.size()];
    out = std::move(place);
    place = Batch{};
    workers_->release();
    return true;
  }

 private:
  std::shared_ptr<const Dataset> dataset_;
  int64_t batch_size_;
  std::vector<int64_t> order_;
  std::vector<Batch> ring_;                          // batch b at b % size
  std::unique_ptr<detail::OrderedWorkers> workers_;  // last: its threads stop first

  void produce(int64_t b, int worker) {
    const int64_t rows = batch_rows(static_cast<int64_t>(order_.size()), batch_size_, b);
    ring_[static_cast<size_t>(b) % ring_.size()] =
        make_batch(*dataset_, order_.data() + b * batch_size_, rows, b, worker);
  }
};

}  // namespace

std::unique_ptr<BatchSource> make_thread_source(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options) {
  return std::make_unique<ThreadSource>(std::move(dataset), options);
}

// ---- DataLoader ----

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  ANVIL_CHECK(dataset_ != nullptr, ErrorKind::kInvalidArgument, "DataLoader: the dataset is null");
  const LoaderOptions& o = options_;
  ANVIL_CHECK(o.batch_size >= 1, ErrorKind::kInvalidArgument, "DataLoader: batch_size must be >= 1, got {}",
              o.batch_size);
  ANVIL_CHECK(o.num_workers >= 0 && o.num_workers <= kMaxWorkers, ErrorKind::kInvalidArgument,
              "DataLoader: num_workers must be in [0, {}], got {}", kMaxWorkers, o.num_workers);
  ANVIL_CHECK(o.prefetch_factor >= 1 && o.prefetch_factor <= 1024, ErrorKind::kInvalidArgument,
              "DataLoader: prefetch_factor must be in [1, 1024], got {}", o.prefetch_factor);
  batch_layout(*dataset_, o.batch_size);
  const int64_t n = dataset_->size();
  batches_ = o.drop_last ? n / o.batch_size : n / o.batch_size + (n % o.batch_size != 0);
}

DataLoader::~DataLoader() = default;

void DataLoader::start_epoch(int epoch) {
  started_ = false;
  std::vector<int64_t> order = epoch_order(dataset_->size(), options_.seed, epoch, options_.shuffle);
  if (options_.num_workers == 0) {
    order_ = std::move(order);
    next_batch_ = 0;
  } else {
    // Non-persistent workers live for one epoch (worker_init runs each time).
    if (!options_.persistent_workers) source_.reset();
    if (!source_)
      source_ = options_.worker_kind == WorkerKind::kThreads ? make_thread_source(dataset_, options_)
                                                             : make_process_source(dataset_, options_);
    source_->begin(std::move(order), batches_);
  }
  started_ = true;
}

bool DataLoader::next(Batch& out) {
  ANVIL_CHECK(started_, ErrorKind::kInvalidArgument, "DataLoader::next() needs start_epoch() first");
  if (options_.num_workers == 0) {
    if (next_batch_ == batches_) return false;
    const int64_t b = next_batch_++;  // before making it: a failing batch is skipped, as with workers
    const int64_t rows = batch_rows(dataset_->size(), options_.batch_size, b);
    const int64_t* indices = order_.data() + b * options_.batch_size;
    // The last batch's memory where the caller let go of it: a new batch of
    // 25,000 x 512 floats (a fresh mapping, malloc's threshold being 32 MiB)
    // page-faulted all of its 51 MB every step.
    if (batch_reusable(out, *dataset_, rows)) {
      try {
        fill_batch(*dataset_, indices, rows, out.fields, b, -1, options_.threads);
      } catch (...) {
        out = Batch{};  // part old batch, part new: not a batch to keep
        throw;
      }
      out.rows = rows;
      out.index = b;
    } else {
      out = make_batch(*dataset_, indices, rows, b, -1, options_.threads);
    }
    return true;
  }
  if (!source_) return false;
  if (source_->next(out)) return true;
  if (!options_.persistent_workers) source_.reset();
  return false;
}

}  // namespace anvil::train
