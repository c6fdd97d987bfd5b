// The training data pipeline (train/data_loader.h): datasets, the DataLoader
// with thread and process workers, parallel_map and Imap, against rows
// gathered by hand and orders computed here with the standard library.
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <thread>

#include "anvil/error.h"
#include "anvil/tensor_io.h"
#include "train/data_loader.h"

namespace anvil {
namespace {

using train::Batch;
using train::DataLoader;
using train::LoaderOptions;
using train::TensorDataset;
using train::WorkerKind;

// The message of the anvil::Error `fn` throws, after checking its kind.
template <typename Fn>
std::string error_of(Fn&& fn, ErrorKind kind = ErrorKind::kInvalidArgument) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an anvil::Error: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no anvil::Error thrown";
  return "";
}

// Waits up to 5 s for `done`, so a test on a loaded machine is not flaky.
template <typename Pred>
bool eventually(Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// Memory that fork()ed workers and the test both see: counters for process workers.
struct SharedCounters {
  explicit SharedCounters(size_t n) : n(n) {
    void* p =
        mmap(nullptr, n * sizeof(std::atomic<int64_t>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    c = new (p) std::atomic<int64_t>[n]();
  }
  ~SharedCounters() { munmap(c, n * sizeof(std::atomic<int64_t>)); }
  std::atomic<int64_t>& operator[](size_t i) { return c[i]; }
  size_t n;
  std::atomic<int64_t>* c;
};

// features[i][j] = 10 i + j (float32, [n, 3]); labels[i] = 100 + i (int32).
std::shared_ptr<TensorDataset> counting_dataset(int64_t n) {
  Tensor x(DType::kFloat32, {n, 3});
  Tensor y(DType::kInt32, {n});
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 3; ++j) x.data<float>()[i * 3 + j] = static_cast<float>(10 * i + j);
    y.data<int32_t>()[i] = static_cast<int32_t>(100 + i);
  }
  return std::make_shared<TensorDataset>(x, y);
}

std::vector<int64_t> shuffled(int64_t n, uint64_t engine_seed) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::mt19937_64 engine(engine_seed);
  std::shuffle(order.begin(), order.end(), engine);
  return order;
}

std::vector<Batch> epoch(DataLoader& loader, int e) {
  loader.start_epoch(e);
  std::vector<Batch> out;
  Batch b;
  while (loader.next(b)) out.push_back(b);
  return out;
}

LoaderOptions options(int64_t batch_size, int workers, WorkerKind kind = WorkerKind::kThreads) {
  LoaderOptions o;
  o.batch_size = batch_size;
  o.num_workers = workers;
  o.worker_kind = kind;
  return o;
}

// ---- Order ----

TEST(DataLoader, EpochSeedIsSplitmix64) {
  // splitmix64's first three outputs from state 0 (published reference values).
  EXPECT_EQ(train::epoch_seed(0, 0), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(train::epoch_seed(0, 1), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(train::epoch_seed(0, 2), 0x06c45d188009454fULL);
  EXPECT_EQ(train::epoch_seed(7, 2), 0xe6984080bab12a02ULL);  // state 7 + 3 * golden, by hand in Python
}

TEST(DataLoader, ShuffleIsStdShuffleWithTheEpochsEngine) {
  EXPECT_EQ(train::epoch_order(10, 7, 2, true), shuffled(10, 0xe6984080bab12a02ULL));
  std::vector<int64_t> identity(10);
  std::iota(identity.begin(), identity.end(), int64_t{0});
  EXPECT_EQ(train::epoch_order(10, 7, 2, false), identity);
  EXPECT_NE(train::epoch_order(10, 7, 2, true), identity);
  EXPECT_NE(train::epoch_order(10, 7, 2, true), train::epoch_order(10, 7, 3, true));
  error_of([] { train::epoch_order(10, 0, -1, true); });
}

// ---- Batches ----

TEST(DataLoader, BatchesAreTheHandGatheredRows) {
  LoaderOptions o = options(4, 0);
  o.seed = 5;
  DataLoader loader(counting_dataset(10), o);
  EXPECT_EQ(loader.batches(), 3);
  const std::vector<int64_t> order = shuffled(10, 0xc097314d939736f8ULL);  // epoch_seed(5, 1)
  const std::vector<Batch> batches = epoch(loader, 1);
  ASSERT_EQ(batches.size(), 3u);
  for (int64_t b = 0; b < 3; ++b) {
    const Batch& batch = batches[static_cast<size_t>(b)];
    const int64_t rows = b < 2 ? 4 : 2;
    EXPECT_EQ(batch.rows, rows);
    EXPECT_EQ(batch.index, b);
    ASSERT_EQ(batch.fields.size(), 2u);
    EXPECT_EQ(batch.fields[0].shape(), (Shape{rows, 3}));
    EXPECT_EQ(batch.fields[1].shape(), (Shape{rows}));
    ASSERT_EQ(batch.fields[1].dtype(), DType::kInt64);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = order[static_cast<size_t>(b * 4 + r)];
      for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(batch.fields[0].data<float>()[r * 3 + j], 10.f * i + j);
      EXPECT_EQ(batch.fields[1].data<int64_t>()[r], 100 + i);
    }
  }
}

// The caller's own batches refill the last batch's tensors where the
// caller let go of them, and never where it still holds one.
TEST(DataLoader, CallersBatchesReuseReleasedTensorsOnly) {
  LoaderOptions o = options(4, 0);
  o.shuffle = false;
  DataLoader loader(counting_dataset(12), o);
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  const void* first = b.fields[0].raw();
  ASSERT_TRUE(loader.next(b));  // batch 1: rows 4-7, in batch 0's memory
  EXPECT_EQ(b.fields[0].raw(), first);
  EXPECT_EQ(b.index, 1);
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(b.fields[0].data<float>()[r * 3 + 2], static_cast<float>(10 * (4 + r) + 2));
    EXPECT_EQ(b.fields[1].data<int64_t>()[r], 104 + r);
  }
  const Tensor held = b.fields[0];  // the caller keeps batch 1's features
  ASSERT_TRUE(loader.next(b));      // batch 2: rows 8-11, elsewhere
  EXPECT_NE(b.fields[0].raw(), held.raw());
  EXPECT_EQ(held.data<float>()[0], 40.f);
  EXPECT_EQ(b.fields[0].data<float>()[0], 80.f);
  EXPECT_EQ(b.fields[1].data<int64_t>()[3], 111);
  EXPECT_FALSE(loader.next(b));
}

// Without workers, a batch of 2 MiB or more is filled by the caller's OpenMP
// team, each thread its share of the rows: every row lands in its place.
TEST(DataLoader, CallersLargeBatchesAreFilledByItsTeam) {
  const int64_t samples = 6000, width = 130;  // a batch of 5,000: 2.6 MB of floats
  Tensor x(DType::kUInt8, {samples, width});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>((i * 7 + i / width) % 256);
  Tensor y(DType::kInt64, {samples});
  for (int64_t i = 0; i < samples; ++i) y.data<int64_t>()[i] = i;
  LoaderOptions o = options(5000, 0);
  o.seed = 3;  // shuffled: each thread's rows gather from all over the dataset
  DataLoader loader(std::make_shared<TensorDataset>(x, y), o);
  const int previous = omp_get_max_threads();
  omp_set_num_threads(2);
  const std::vector<Batch> batches = epoch(loader, 0);
  omp_set_num_threads(previous);
  ASSERT_EQ(batches.size(), 2u);
  for (const Batch& b : batches)
    for (int64_t r = 0; r < b.rows; ++r) {
      const int64_t sample = b.fields[1].data<int64_t>()[r];
      for (int64_t j = 0; j < width; ++j) {
        const int64_t i = sample * width + j;
        ASSERT_EQ(b.fields[0].data<float>()[r * width + j], static_cast<float>((i * 7 + i / width) % 256) / 255.f)
            << "batch " << b.index << " row " << r;
      }
    }
}

TEST(DataLoader, Uint8FeaturesAreExpandedToXOver255) {
  Tensor x(DType::kUInt8, {128, 2});  // every byte value once
  for (int i = 0; i < 256; ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(i);
  Tensor y(DType::kInt64, {128});
  LoaderOptions o = options(128, 0);
  o.shuffle = false;
  DataLoader loader(std::make_shared<TensorDataset>(x, y), o);
  const std::vector<Batch> batches = epoch(loader, 0);
  ASSERT_EQ(batches.size(), 1u);
  const Tensor& f = batches[0].fields[0];
  ASSERT_EQ(f.dtype(), DType::kFloat32);
  ASSERT_EQ(f.shape(), (Shape{128, 2}));
  for (int i = 0; i < 256; ++i) EXPECT_EQ(f.data<float>()[i], static_cast<float>(i) / 255.f) << i;
  EXPECT_EQ(f.data<float>()[0], 0.f);
  EXPECT_EQ(f.data<float>()[255], 1.f);
}

TEST(DataLoader, DropLastCounts) {
  const auto count = [](int64_t n, int64_t bs, bool drop) {
    LoaderOptions o = options(bs, 0);
    o.drop_last = drop;
    DataLoader loader(counting_dataset(n), o);
    const std::vector<Batch> batches = epoch(loader, 0);
    EXPECT_EQ(static_cast<int64_t>(batches.size()), loader.batches());
    for (const Batch& b : batches) {
      if (drop) {
        EXPECT_EQ(b.rows, bs);
      }
    }
    return loader.batches();
  };
  EXPECT_EQ(count(10, 4, false), 3);
  EXPECT_EQ(count(10, 4, true), 2);
  EXPECT_EQ(count(8, 4, false), 2);
  EXPECT_EQ(count(8, 4, true), 2);
  EXPECT_EQ(count(3, 4, true), 0);
  EXPECT_EQ(count(3, 4, false), 1);
  EXPECT_EQ(count(0, 4, false), 0);
}

// uint8 images [37, 2, 3] and int32 labels, so both conversions cross the workers.
std::shared_ptr<TensorDataset> image_dataset() {
  Tensor x(DType::kUInt8, {37, 2, 3});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>((i * 37) % 256);
  Tensor y(DType::kInt32, {37});
  for (int64_t i = 0; i < 37; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  return std::make_shared<TensorDataset>(x, y);
}

void expect_image_batches(const std::vector<Batch>& batches, const std::vector<int64_t>& order,
                          const std::string& what) {
  ASSERT_EQ(batches.size(), 8u) << what;
  for (size_t b = 0; b < batches.size(); ++b) {
    const int64_t rows = b < 7 ? 5 : 2;
    ASSERT_EQ(batches[b].fields[0].shape(), (Shape{rows, 2, 3})) << what;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = order[b * 5 + static_cast<size_t>(r)];
      for (int64_t j = 0; j < 6; ++j)
        ASSERT_EQ(batches[b].fields[0].data<float>()[r * 6 + j], static_cast<float>(((i * 6 + j) * 37) % 256) / 255.f)
            << what << " batch " << b;
      ASSERT_EQ(batches[b].fields[1].data<int64_t>()[r], i % 10) << what;
    }
  }
}

TEST(DataLoader, ConcurrentWorkersGiveTheSameBatches) {
  // The parent has OpenMP threads when it forks.
#pragma omp parallel
  {
    volatile int x = omp_get_thread_num();
    (void)x;
  }
  struct Config {
    int workers;
    WorkerKind kind;
    int prefetch;
    bool persistent;
  };
  const Config configs[] = {{0, WorkerKind::kThreads, 2, false},  {1, WorkerKind::kThreads, 2, false},
                            {2, WorkerKind::kThreads, 2, true},   {2, WorkerKind::kProcesses, 2, false},
                            {3, WorkerKind::kProcesses, 1, true}, {2, WorkerKind::kThreads, 1, false}};
  for (const Config& c : configs) {
    LoaderOptions o = options(5, c.workers, c.kind);
    o.seed = 11;
    o.prefetch_factor = c.prefetch;
    o.persistent_workers = c.persistent;
    DataLoader loader(image_dataset(), o);
    const std::string what = std::to_string(c.workers) + (c.kind == WorkerKind::kThreads ? " threads" : " processes");
    expect_image_batches(epoch(loader, 0), shuffled(37, 0x50f5647d2380309dULL), what + ", epoch 0");
    expect_image_batches(epoch(loader, 1), shuffled(37, train::epoch_seed(11, 1)), what + ", epoch 1");
  }
}

TEST(DataLoader, AbandonedEpochRestartsCleanly) {
  for (WorkerKind kind : {WorkerKind::kThreads, WorkerKind::kProcesses}) {
    for (bool persistent : {false, true}) {
      LoaderOptions o = options(5, 2, kind);
      o.seed = 11;
      o.persistent_workers = persistent;
      DataLoader loader(image_dataset(), o);
      loader.start_epoch(3);
      Batch b;
      ASSERT_TRUE(loader.next(b));  // the rest of epoch 3 is in flight when epoch 0 starts
      expect_image_batches(epoch(loader, 0), shuffled(37, 0x50f5647d2380309dULL), "after an abandoned epoch");
    }
  }
}

// ---- Workers ----

// A dataset of n samples (one float each, = its index) that counts fill()
// calls of field 0 (batches started) in shared memory, and optionally fails.
class ProbeDataset : public train::Dataset {
 public:
  explicit ProbeDataset(int64_t n) : n_(n), counters_(4) {}
  int64_t size() const override { return n_; }
  int fields() const override { return 1; }
  Shape sample_shape(int) const override { return {}; }
  DType field_dtype(int) const override { return DType::kFloat32; }
  void fill(int, const int64_t* indices, int64_t count, Tensor& out, int64_t row_offset) const override {
    counters_[0].fetch_add(1);
    const int threads = train::current_intra_op_threads();
    counters_[1].store(std::max<int64_t>(counters_[1].load(), threads));  // the largest count seen in a fill
    if (fill_hook) fill_hook(indices, count);
    for (int64_t r = 0; r < count; ++r) out.data<float>()[row_offset + r] = static_cast<float>(indices[r]);
  }
  int64_t started() const { return counters_[0].load(); }
  int64_t max_threads() const { return counters_[1].load(); }
  std::function<void(const int64_t*, int64_t)> fill_hook;

 private:
  int64_t n_;
  mutable SharedCounters counters_;
};

void check_prefetch_bound(WorkerKind kind) {
  auto data = std::make_shared<ProbeDataset>(20);
  LoaderOptions o = options(1, 2, kind);
  o.prefetch_factor = 2;
  o.shuffle = false;
  DataLoader loader(data, o);
  loader.start_epoch(0);
  const int64_t bound = 4;  // prefetch_factor * num_workers
  for (int64_t consumed = 0; consumed <= 20; ++consumed) {
    const int64_t expected = std::min<int64_t>(20, consumed + bound);
    // The workers fill up to the bound, and then stop.
    EXPECT_TRUE(eventually([&] { return data->started() >= expected; })) << consumed;
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    EXPECT_EQ(data->started(), expected) << "after " << consumed << " batches taken";
    Batch b;
    if (consumed < 20) {
      ASSERT_TRUE(loader.next(b));
      EXPECT_EQ(b.fields[0].data<float>()[0], static_cast<float>(consumed));
    } else {
      EXPECT_FALSE(loader.next(b));
    }
  }
}

TEST(DataLoader, ConcurrentPrefetchIsBoundedThreads) { check_prefetch_bound(WorkerKind::kThreads); }
TEST(DataLoader, PrefetchIsBoundedProcesses) { check_prefetch_bound(WorkerKind::kProcesses); }

TEST(DataLoader, ThreadWorkersUseOneOpenMPThread) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(3);
  auto data = std::make_shared<ProbeDataset>(12);
  std::atomic<int> init_threads{0};
  LoaderOptions o = options(2, 2);
  o.worker_init = [&](int) { init_threads.fetch_add(omp_get_max_threads()); };
  {
    DataLoader loader(data, o);
    EXPECT_EQ(epoch(loader, 0).size(), 6u);
  }
  EXPECT_EQ(init_threads.load(), 2);    // 1 in each of the 2 workers
  EXPECT_EQ(data->max_threads(), 1);    // and in every fill
  EXPECT_EQ(omp_get_max_threads(), 3);  // the caller's count is untouched
  std::vector<int> in_map = train::parallel_map<int>(
      8, [](int64_t) { return omp_get_max_threads(); }, 2);
  EXPECT_EQ(in_map, std::vector<int>(8, 1));
  EXPECT_EQ(omp_get_max_threads(), 3);
  omp_set_num_threads(before);
}

TEST(DataLoader, WorkerInitRunsOncePerWorker) {
  for (WorkerKind kind : {WorkerKind::kThreads, WorkerKind::kProcesses}) {
    for (bool persistent : {false, true}) {
      SharedCounters calls(3);
      LoaderOptions o = options(2, 3, kind);
      o.persistent_workers = persistent;
      o.worker_init = [&calls](int id) { calls[static_cast<size_t>(id)].fetch_add(1); };
      DataLoader loader(counting_dataset(10), o);
      EXPECT_EQ(epoch(loader, 0).size(), 5u);
      EXPECT_EQ(epoch(loader, 1).size(), 5u);
      const int64_t per_worker = persistent ? 1 : 2;  // new workers each epoch unless persistent
      for (size_t id = 0; id < 3; ++id)
        EXPECT_EQ(calls[id].load(), per_worker) << "worker " << id << (persistent ? " persistent" : "");
    }
  }
}

std::shared_ptr<ProbeDataset> failing_at_7(std::function<void()> fail) {
  auto data = std::make_shared<ProbeDataset>(10);
  data->fill_hook = [fail](const int64_t* indices, int64_t count) {
    for (int64_t r = 0; r < count; ++r)
      if (indices[r] == 7) fail();
  };
  return data;
}

// Batches 0..4 of two samples; batch 3 (samples 6, 7) fails, the rest come.
void expect_batch_3_fails(DataLoader& loader, const std::string& message, ErrorKind kind) {
  loader.start_epoch(0);
  Batch b;
  for (int64_t i = 0; i < 5; ++i) {
    if (i == 3) {
      const std::string m = error_of([&] { loader.next(b); }, kind);
      EXPECT_NE(m.find("batch 3"), std::string::npos) << m;
      EXPECT_NE(m.find(message), std::string::npos) << m;
      continue;
    }
    ASSERT_TRUE(loader.next(b)) << i;
    EXPECT_EQ(b.index, i);
    EXPECT_EQ(b.fields[0].data<float>()[0], 2.f * i);
  }
  EXPECT_FALSE(loader.next(b));
}

TEST(DataLoader, ConcurrentDatasetErrorsComeFromNext) {
  for (int workers : {0, 2}) {
    for (WorkerKind kind : {WorkerKind::kThreads, WorkerKind::kProcesses}) {
      LoaderOptions o = options(2, workers, kind);
      o.shuffle = false;
      DataLoader anvil_error(failing_at_7([] { throw Error(ErrorKind::kInvalidArgument, "bad sample 7"); }), o);
      expect_batch_3_fails(anvil_error, "bad sample 7", ErrorKind::kInvalidArgument);
      DataLoader foreign(failing_at_7([] { throw std::runtime_error("disk gone"); }), o);
      expect_batch_3_fails(foreign, "disk gone", ErrorKind::kInvalidArgument);
    }
  }
}

TEST(DataLoader, WorkerInitErrors) {
  for (WorkerKind kind : {WorkerKind::kThreads, WorkerKind::kProcesses}) {
    LoaderOptions o = options(2, 2, kind);
    o.worker_init = [](int id) {
      if (id == 1) throw std::runtime_error("no GPU here");
    };
    DataLoader loader(counting_dataset(10), o);
    loader.start_epoch(0);
    Batch b;
    const std::string m = error_of([&] {
      while (loader.next(b)) {
      }
    });
    EXPECT_NE(m.find("worker 1: worker_init: no GPU here"), std::string::npos) << m;
  }
}

TEST(DataLoader, DeadWorkerProcessIsAnError) {
  const pid_t parent = getpid();
  for (bool killed : {false, true}) {
    auto data = failing_at_7([parent, killed] {
      if (getpid() == parent) return;
      if (killed) kill(getpid(), SIGKILL);
      _exit(7);
    });
    LoaderOptions o = options(2, 2, WorkerKind::kProcesses);
    o.shuffle = false;
    DataLoader loader(data, o);
    loader.start_epoch(0);
    Batch b;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(loader.next(b));
    const std::string m = error_of([&] { loader.next(b); }, ErrorKind::kInternal);
    EXPECT_NE(m.find("worker 1"), std::string::npos) << m;
    EXPECT_NE(m.find("batch 3"), std::string::npos) << m;
    EXPECT_NE(m.find(killed ? "killed by signal 9" : "exited with code 7"), std::string::npos) << m;
    EXPECT_EQ(error_of([&] { loader.next(b); }, ErrorKind::kInternal), m);  // it stays stopped
    loader.start_epoch(0);                                                  // new workers
    ASSERT_TRUE(loader.next(b));
    EXPECT_EQ(b.fields[0].data<float>()[0], 0.f);
  }
}

std::string children_file() { return "/proc/self/task/" + std::to_string(gettid()) + "/children"; }

// This thread's child processes, zombies included (Linux lists them per thread).
size_t child_processes() {
  std::ifstream in(children_file());
  size_t n = 0;
  for (std::string pid; in >> pid;) ++n;
  return n;
}

TEST(DataLoader, WorkerProcessesExitAndAreReaped) {
  if (!std::ifstream(children_file())) GTEST_SKIP() << "the kernel does not list child processes in /proc";
  const size_t before = child_processes();
  for (bool persistent : {false, true}) {
    LoaderOptions o = options(2, 3, WorkerKind::kProcesses);
    o.persistent_workers = persistent;
    {
      DataLoader loader(counting_dataset(10), o);
      loader.start_epoch(0);
      EXPECT_EQ(child_processes(), before + 3);
      Batch b;
      while (loader.next(b)) {
      }
      EXPECT_EQ(child_processes(), before + (persistent ? 3 : 0)) << "after the epoch";
      loader.start_epoch(1);
      ASSERT_TRUE(loader.next(b));  // destroyed with batches in flight
    }
    EXPECT_EQ(child_processes(), before) << "after the loader";
  }
}

TEST(DataLoader, BadOptionsAndMisuse) {
  auto data = counting_dataset(4);
  error_of([&] { DataLoader(nullptr, LoaderOptions{}); });
  error_of([&] { DataLoader(data, options(0, 0)); });
  error_of([&] { DataLoader(data, options(2, -1)); });
  LoaderOptions o = options(2, 1);
  o.prefetch_factor = 0;
  error_of([&] { DataLoader(data, o); });
  DataLoader loader(data, options(2, 0));
  Batch b;
  EXPECT_NE(error_of([&] { loader.next(b); }).find("start_epoch"), std::string::npos);
  error_of([&] { loader.start_epoch(-1); });
  // A batch so large its byte count overflows int64.
  error_of([&] { DataLoader(data, options(int64_t{1} << 62, 0)); });
}

// ---- Datasets ----

TEST(TensorDataset, ChecksItsTensors) {
  Tensor x(DType::kFloat32, {4, 2});
  EXPECT_NE(error_of([&] { TensorDataset(x, Tensor(DType::kInt64, {3})); }).find("features have 4 rows"),
            std::string::npos);
  error_of([&] { TensorDataset(Tensor(DType::kFloat64, {4, 2}), Tensor(DType::kInt64, {4})); });
  error_of([&] { TensorDataset(x, Tensor(DType::kFloat64, {4})); });
  // float32 labels are regression or binary targets, batched as float32.
  Tensor targets(DType::kFloat32, {4});
  for (int i = 0; i < 4; ++i) targets.data<float>()[i] = 0.5f * i;
  TensorDataset regression(x, targets);
  EXPECT_EQ(regression.field_dtype(1), DType::kFloat32);
  Tensor picked(DType::kFloat32, {2});
  const int64_t rows[] = {3, 1};
  regression.fill(1, rows, 2, picked, 0);
  EXPECT_EQ(picked.data<float>()[0], 1.5f);
  EXPECT_EQ(picked.data<float>()[1], 0.5f);
  error_of([&] { TensorDataset(x, Tensor(DType::kInt64, {})); });
  error_of([&] { TensorDataset(x, Tensor()); });
  TensorDataset d(x, Tensor(DType::kInt64, {4}));
  Tensor out(DType::kFloat32, {2, 2});
  const int64_t bad_index[] = {4};
  error_of([&] { d.fill(0, bad_index, 1, out, 0); });
  const int64_t ok[] = {0, 1};
  error_of([&] { d.fill(0, ok, 2, out, 1); });  // rows 1..2 of a batch of 2
  error_of([&] { d.fill(2, ok, 2, out, 0); });
  Tensor wrong(DType::kInt64, {2, 2});
  error_of([&] { d.fill(0, ok, 2, wrong, 0); });
}

struct TempDir {
  TempDir() : path(std::filesystem::temp_directory_path() / ("anvil_data_" + std::to_string(getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name, const std::string& text) const {
    const std::string p = (path / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  std::filesystem::path path;
};

TEST(TensorDataset, FromNpyFiles) {
  TempDir dir;
  Tensor x(DType::kUInt8, {3, 2});
  for (int i = 0; i < 6; ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(50 * i);
  Tensor y(DType::kInt32, {3});
  for (int i = 0; i < 3; ++i) y.data<int32_t>()[i] = 2 - i;
  write_tensor_npy((dir.path / "x.npy").string(), x);
  write_tensor_npy((dir.path / "y.npy").string(), y);
  auto d = train::npy_dataset((dir.path / "x.npy").string(), (dir.path / "y.npy").string());
  EXPECT_EQ(d->size(), 3);
  EXPECT_EQ(d->sample_shape(0), (Shape{2}));
  Tensor out(DType::kFloat32, {1, 2});
  const int64_t idx[] = {2};
  d->fill(0, idx, 1, out, 0);
  EXPECT_EQ(out.data<float>()[1], 250.f / 255.f);
  Tensor labels(DType::kInt64, {1});
  d->fill(1, idx, 1, labels, 0);
  EXPECT_EQ(labels.data<int64_t>()[0], 0);
  error_of([&] { train::npy_dataset((dir.path / "missing.npy").string(), (dir.path / "y.npy").string()); });
  write_tensor_npy((dir.path / "y2.npy").string(), Tensor(DType::kInt64, {2}));
  const std::string m =
      error_of([&] { train::npy_dataset((dir.path / "x.npy").string(), (dir.path / "y2.npy").string()); });
  EXPECT_NE(m.find("y2.npy': TensorDataset: features have 3 rows"), std::string::npos) << m;
}

TEST(CsvDataset, ReadsHeaderLabelColumnAndFeatures) {
  TempDir dir;
  const std::string p = dir.file("good.csv", "a, label ,b\r\n1.5, 2, -3\r\n\n  4e1 ,0,+5\n");
  auto d = train::csv_dataset(p, 1);
  ASSERT_EQ(d->size(), 2);
  EXPECT_EQ(d->features().shape(), (Shape{2, 2}));
  const float* x = d->features().data<float>();
  EXPECT_EQ(std::vector<float>(x, x + 4), (std::vector<float>{1.5f, -3.f, 40.f, 5.f}));
  const int64_t* y = d->labels().data<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(y, y + 2), (std::vector<int64_t>{2, 0}));
  // No header, label last by default.
  auto e = train::csv_dataset(dir.file("plain.csv",
                                       "\xEF\xBB\xBF"
                                       "0.25,1\n0.5,3"));  // after a byte order mark
  ASSERT_EQ(e->size(), 2);
  EXPECT_EQ(e->features().data<float>()[1], 0.5f);
  EXPECT_EQ(e->labels().data<int64_t>()[1], 3);
}

TEST(CsvDataset, BadFilesAreOneLineErrors) {
  TempDir dir;
  const auto message = [&](const std::string& text, int label_column = -1) {
    const std::string p = dir.file("bad.csv", text);
    return error_of([&] { train::csv_dataset(p, label_column); });
  };
  const std::string at = (dir.path / "bad.csv").string();
  std::string m = message("x,y,z\n1,2,3\n1,abc,3\n");
  EXPECT_NE(m.find(at + ":3: cell 2 ('abc')"), std::string::npos) << m;
  m = message("1,2,3\n4,5\n");
  EXPECT_NE(m.find(at + ":2: 2 cells, but the first line has 3"), std::string::npos) << m;
  m = message("1,,3\n");
  EXPECT_NE(m.find(at + ":1: cell 2 ('') is not a number"), std::string::npos) << m;
  EXPECT_NE(message("").find("no data rows (it is empty)"), std::string::npos);
  EXPECT_NE(message("\n\r\n \n").find("(it is empty)"), std::string::npos);
  EXPECT_NE(message("a,b\n").find("(only a header)"), std::string::npos);
  m = message("1,2\n3,1.5\n");
  EXPECT_NE(m.find(at + ":2: the label (cell 2, '1.5') must be a non-negative integer"), std::string::npos) << m;
  EXPECT_NE(message("1,-2\n").find("non-negative integer"), std::string::npos);
  EXPECT_NE(message("1,99999999999999999999\n").find("non-negative integer"), std::string::npos);
  EXPECT_NE(message("nan,1\n").find("not a finite float32"), std::string::npos);
  EXPECT_NE(message("1e39,1\n").find("not a finite float32"), std::string::npos);
  EXPECT_NE(message("1\n2\n").find("at least 2 columns"), std::string::npos);
  EXPECT_NE(message("1,2\n", 5).find("label column 5 out of range"), std::string::npos);
  EXPECT_NE(message(std::string(1000, 'z') + ",1\n2,1\n").find("...'"), std::string::npos);  // cut short
  m = message("1,\x01\x02\n");
  EXPECT_EQ(m.find('\x01'), std::string::npos);  // control bytes escaped: one printable line
  EXPECT_NE(error_of([&] { train::csv_dataset((dir.path / "missing.csv").string()); }).find("does not exist"),
            std::string::npos);
  error_of([&] { train::csv_dataset(dir.path.string()); });  // a directory
}

TEST(CsvDataset, RandomBytesNeverCrash) {
  TempDir dir;
  std::mt19937 rng(3);
  const char alphabet[] = "0123456789,,,\n\n.-+eE \r\tnaix\"\x00\xff";
  for (int trial = 0; trial < 300; ++trial) {
    std::string text(rng() % 64, ' ');
    for (char& c : text) c = alphabet[rng() % (sizeof alphabet - 1)];
    const std::string p = dir.file("fuzz.csv", text);
    try {
      auto d = train::csv_dataset(p, static_cast<int>(rng() % 5) - 2);
      EXPECT_GT(d->size(), 0);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    }
  }
}

// ---- parallel_map and Imap ----

TEST(ParallelMap, ConcurrentResultsInOrder) {
  const auto square = [](int64_t i) {
    std::this_thread::sleep_for(std::chrono::microseconds((i * 7919) % 500));  // finish out of order
    return i * i;
  };
  for (int workers : {0, 1, 3}) {
    const std::vector<int64_t> out = train::parallel_map<int64_t>(40, square, workers);
    ASSERT_EQ(out.size(), 40u);
    for (int64_t i = 0; i < 40; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], i * i) << workers;
  }
  EXPECT_TRUE(train::parallel_map<int>(
                  0, [](int64_t) { return 1; }, 2)
                  .empty());
  // The first failing index's exception, even when a later one fails first.
  try {
    train::parallel_map<int>(
        10,
        [](int64_t i) -> int {
          if (i == 5) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            throw std::runtime_error("five");
          }
          if (i == 6) throw std::runtime_error("six");
          return 0;
        },
        3);
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "five");
  }
  error_of([] {
    train::parallel_map<int>(
        -1, [](int64_t) { return 0; }, 1);
  });
  error_of([] {
    train::parallel_map<int>(
        1, [](int64_t) { return 0; }, -1);
  });
}

TEST(Imap, ConcurrentBoundedAndOrdered) {
  std::atomic<int64_t> started{0};
  train::Imap<std::string> items(
      30,
      [&](int64_t i) {
        started.fetch_add(1);
        return std::to_string(i);
      },
      2, 3);
  for (int64_t taken = 0; taken <= 30; ++taken) {
    const int64_t expected = std::min<int64_t>(30, taken + 3);
    EXPECT_TRUE(eventually([&] { return started.load() >= expected; })) << taken;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(started.load(), expected) << "after " << taken << " taken";
    std::string s;
    if (taken < 30) {
      ASSERT_TRUE(items.next(s));
      EXPECT_EQ(s, std::to_string(taken));
    } else {
      EXPECT_FALSE(items.next(s));
    }
  }
  error_of([] {
    train::Imap<int>(
        3, [](int64_t) { return 0; }, 1, 0);
  });
}

TEST(Imap, LazyOnTheCallerWithoutWorkers) {
  int64_t calls = 0;
  train::Imap<int64_t> items(
      3,
      [&](int64_t i) {
        ++calls;
        return 10 * i;
      },
      0, 1);
  EXPECT_EQ(calls, 0);
  int64_t v;
  ASSERT_TRUE(items.next(v));
  EXPECT_EQ(v, 0);
  EXPECT_EQ(calls, 1);
}

TEST(Imap, ConcurrentErrorsComeInOrderAndTheRestFollow) {
  train::Imap<int> items(
      5,
      [](int64_t i) -> int {
        if (i == 2) throw Error(ErrorKind::kInvalidArgument, "two");
        return static_cast<int>(i);
      },
      2, 2);
  int v;
  ASSERT_TRUE(items.next(v));
  ASSERT_TRUE(items.next(v));
  EXPECT_EQ(error_of([&] { items.next(v); }), "two");
  ASSERT_TRUE(items.next(v));
  EXPECT_EQ(v, 3);
  ASSERT_TRUE(items.next(v));
  EXPECT_EQ(v, 4);
  EXPECT_FALSE(items.next(v));
}

}  // namespace
}  // namespace anvil
