// Execution modes: streams, run_async (futures and callbacks), their errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "anvil/error.h"
#include "anvil/session.h"
#include "ir/builder.h"

namespace anvil {
namespace {

// y = relu(x): every output is checked against max(x, 0).
Session relu_session(const SessionOptions& options) {
  ir::GraphBuilder b(1);
  b.output(b.relu(b.input("x", {2, 64})), "y");
  return Session::from_graph(b.finish(), options);
}

Tensor ramp(float start) {
  Tensor t(DType::kFloat32, {2, 64});
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + static_cast<float>(i) - 64.f;
  return t;
}

bool is_relu_of(const Tensor& y, float start) {
  for (int64_t i = 0; i < y.numel(); ++i)
    if (y.data<float>()[i] != std::max(0.f, start + static_cast<float>(i) - 64.f)) return false;
  return true;
}

SessionOptions throughput(int threads, int streams) {
  SessionOptions o;
  o.num_threads = threads;
  o.mode = ExecutionMode::kThroughput;
  o.streams = streams;
  return o;
}

TEST(Streams, AutoSplitsTheThreadsIntoOneThreadStreams) {
  Session s = relu_session(throughput(2, 0));
  EXPECT_EQ(s.streams(), 2);
  EXPECT_EQ(s.threads_per_stream(), 1);
  Session t = relu_session(throughput(4, 2));
  EXPECT_EQ(t.streams(), 2);
  EXPECT_EQ(t.threads_per_stream(), 2);
  SessionOptions latency;
  latency.num_threads = 3;
  Session l = relu_session(latency);
  EXPECT_EQ(l.streams(), 1);
  EXPECT_EQ(l.threads_per_stream(), 3);
}

TEST(Streams, MoreStreamsThanThreadsIsRefused) {
  try {
    relu_session(throughput(2, 3));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("streams"), std::string::npos);
  }
}

TEST(Streams, ConcurrentFuturesReturnEveryRequestsOwnOutputs) {
  Session s = relu_session(throughput(2, 2));
  std::vector<Tensor> inputs;
  std::vector<std::future<std::vector<Tensor>>> results;
  for (int r = 0; r < 64; ++r) {
    inputs.push_back(ramp(static_cast<float>(r)));
    results.push_back(s.run_async({{"x", inputs.back()}}));
  }
  for (int r = 0; r < 64; ++r) EXPECT_TRUE(is_relu_of(results[r].get()[0], static_cast<float>(r))) << "request " << r;
}

TEST(Streams, StreamsRunConcurrentlyWithTheirOwnTeams) {
  // The first callback waits for the second: with one stream this would never end.
  Session s = relu_session(throughput(2, 2));
  std::mutex m;
  std::condition_variable cv;
  bool second_done = false, first_saw_second = false;
  std::atomic<int> team_sizes_ok{0};
  Tensor a = ramp(0), b = ramp(1);
  std::promise<void> finished;
  s.run_async({{"x", a}}, [&](std::vector<Tensor> out, std::exception_ptr err) {
    if (!err && is_relu_of(out[0], 0) && omp_get_max_threads() == 1) ++team_sizes_ok;
    std::unique_lock<std::mutex> lock(m);
    first_saw_second = cv.wait_for(lock, std::chrono::seconds(20), [&] { return second_done; });
    finished.set_value();
  });
  s.run_async({{"x", b}}, [&](std::vector<Tensor> out, std::exception_ptr err) {
    if (!err && is_relu_of(out[0], 1) && omp_get_max_threads() == 1) ++team_sizes_ok;
    std::lock_guard<std::mutex> lock(m);
    second_done = true;
    cv.notify_all();
  });
  finished.get_future().wait();
  EXPECT_TRUE(first_saw_second);
  EXPECT_EQ(team_sizes_ok.load(), 2);
}

TEST(Streams, LatencyModeRunsRequestsInOrderOnAllThreads) {
  SessionOptions o;
  o.num_threads = 2;
  Session s = relu_session(o);
  std::vector<int> order;
  std::mutex m;
  std::vector<Tensor> inputs;
  std::vector<std::future<void>> done;
  for (int r = 0; r < 8; ++r) inputs.push_back(ramp(static_cast<float>(r)));
  std::vector<std::promise<void>> promises(8);
  for (int r = 0; r < 8; ++r)
    s.run_async({{"x", inputs[r]}}, [&, r](std::vector<Tensor> out, std::exception_ptr err) {
      std::lock_guard<std::mutex> lock(m);
      if (!err && is_relu_of(out[0], static_cast<float>(r)) && omp_get_max_threads() == 2) order.push_back(r);
      promises[r].set_value();
    });
  for (auto& p : promises) p.get_future().wait();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(Streams, BadInputsThrowBeforeQueueing) {
  Session s = relu_session(throughput(2, 2));
  try {
    s.run_async({{"x", Tensor(DType::kFloat32, {2, 63})}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  }
  EXPECT_EQ(s.queued_requests(), 0u);
}

TEST(Streams, ACallbackThatThrowsDoesNotStopTheStream) {
  Session s = relu_session(throughput(1, 1));
  Tensor a = ramp(0), b = ramp(2);
  s.run_async({{"x", a}}, [](std::vector<Tensor>, std::exception_ptr) { throw std::runtime_error("user bug"); });
  EXPECT_TRUE(is_relu_of(s.run_async({{"x", b}}).get()[0], 2));
}

TEST(Streams, DestroyingTheSessionFinishesQueuedRequests) {
  std::atomic<int> finished{0};
  Tensor a = ramp(3);
  {
    Session s = relu_session(throughput(1, 1));
    for (int r = 0; r < 16; ++r)
      s.run_async({{"x", a}}, [&](std::vector<Tensor> out, std::exception_ptr err) {
        if (!err && is_relu_of(out[0], 3)) ++finished;
      });
  }
  EXPECT_EQ(finished.load(), 16);
}

}  // namespace
}  // namespace anvil
