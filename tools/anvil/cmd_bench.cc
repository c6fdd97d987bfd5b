// anvil bench: the inference article's method — warm-up, then C cycles of I
// timed runs; per-cycle and overall statistics, memory, optional JSON.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anvil/error.h"
#include "commands.h"

namespace anvil::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::string model;
  std::vector<std::string> inputs;
  std::vector<std::string> shapes;
  int threads = 0, batch = 1, cycles = 3, iters = 100, warmup = 10, opt_level = 3;
  std::string json;
  bool profile = false;
  std::string profile_json;
  int profile_runs = 20;
  bool tune = false;
  std::string tune_cache;
  std::string mode = "latency";  // latency | throughput | async
  std::string streams = "auto";
  int requests = 0;  // per cycle in throughput/async mode (0: 50 per stream)
  int inflight = 0;  // requests kept queued or running (0: streams, 2 in async mode)
};

struct Stats {
  double mean, median, p90, p99, min, max;
};

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.size() == 1) return sorted[0];
  double pos = p * static_cast<double>(sorted.size() - 1);
  size_t lo = static_cast<size_t>(pos);
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

Stats stats_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  return {sum / static_cast<double>(v.size()), percentile(v, 0.5), percentile(v, 0.9), percentile(v, 0.99), v.front(),
          v.back()};
}

nlohmann::json to_json(const Stats& s) {
  return {{"mean_ms", s.mean}, {"median_ms", s.median}, {"p90_ms", s.p90},
          {"p99_ms", s.p99},   {"min_ms", s.min},       {"max_ms", s.max}};
}

void print_row(const std::string& label, const Stats& s) {
  fmt::print("{:<9} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f}\n", label, s.mean, s.median, s.p90, s.p99,
             s.min, s.max);
}

// Throughput counts `batch` inferences per run, so a --batch that sized no
// input (a model whose first dimensions are fixed, or inputs read from files
// of another batch) would report a made-up figure.
void check_batch_applies(int batch, const std::map<std::string, Tensor>& inputs) {
  if (batch == 1) return;
  for (const auto& [name, t] : inputs)
    if (t.rank() > 0 && t.shape()[0] == batch) return;
  throw Error(ErrorKind::kInvalidArgument,
              fmt::format("--batch {} sizes no input: the model's first dimensions are fixed (export it with a "
                          "symbolic batch axis) or the input files have another batch",
                          batch));
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// One cycle of `requests` runs through run_async, `inflight` of them queued or
// running at any time (each completion submits the next). Returns the wall
// time; each request's latency (submission to completion) goes to `latencies`.
double async_cycle(const Session& session, const std::map<std::string, Tensor>& inputs, int requests, int inflight,
                   std::vector<double>& latencies) {
  std::mutex m;
  std::condition_variable all_done;
  int submitted = 0, finished = 0;
  std::exception_ptr failure;
  std::function<void()> submit_next;
  submit_next = [&] {  // called with `m` held
    ++submitted;
    const auto start = Clock::now();
    session.run_async(inputs, [&, start](std::vector<Tensor>, std::exception_ptr error) {
      const double ms = ms_since(start);
      std::lock_guard<std::mutex> lock(m);
      latencies.push_back(ms);
      if (error && !failure) failure = error;
      if (++finished == requests) all_done.notify_all();
      if (submitted < requests) submit_next();
    });
  };
  const auto t0 = Clock::now();
  {
    std::unique_lock<std::mutex> lock(m);
    for (int i = 0; i < std::min(inflight, requests); ++i) submit_next();
    all_done.wait(lock, [&] { return finished == requests; });
  }
  if (failure) std::rethrow_exception(failure);
  return ms_since(t0);
}

int bench_async(const BenchArgs& a, Session& session, const std::map<std::string, Tensor>& inputs, double create_ms,
                double first_ms, const PlanStats& plan) {
  const int requests = a.requests > 0 ? a.requests : 50 * session.streams();
  const int inflight = a.inflight > 0 ? a.inflight : (a.mode == "async" ? 2 : session.streams());
  std::vector<double> warm;
  async_cycle(session, inputs, std::max(a.warmup, 1) * session.streams(), inflight, warm);
  std::vector<double> throughputs, latencies;
  for (int c = 0; c < a.cycles; ++c) {
    std::vector<double> cycle_latencies;
    const double wall_ms = async_cycle(session, inputs, requests, inflight, cycle_latencies);
    throughputs.push_back(requests * a.batch * 1000.0 / wall_ms);
    latencies.insert(latencies.end(), cycle_latencies.begin(), cycle_latencies.end());
    if (isatty(STDERR_FILENO)) fmt::print(stderr, "\rcycle {}/{}  {:.1f} inferences/s   ", c + 1, a.cycles, throughputs.back());
  }
  if (isatty(STDERR_FILENO)) fmt::print(stderr, "\r{:60}\r", "");
  std::vector<double> sorted = throughputs;
  std::sort(sorted.begin(), sorted.end());
  const double median_throughput = percentile(sorted, 0.5);
  const Stats latency = stats_of(latencies);
  const size_t rss = peak_rss_bytes();
  const int threads = session.streams() * session.threads_per_stream();

  fmt::print("model {}  mode {}  streams {} x {} threads  batch {}  {} in flight\n", a.model, a.mode,
             session.streams(), session.threads_per_stream(), a.batch, inflight);
  fmt::print("session creation {:.1f} ms, first run {:.1f} ms (plans the model)\n", create_ms, first_ms);
  for (size_t c = 0; c < throughputs.size(); ++c)
    fmt::print("cycle {}: {:.1f} inferences/s ({} requests)\n", c + 1, throughputs[c], requests);
  fmt::print("throughput {:.1f} inferences/s (median of {} cycles)\n", median_throughput, throughputs.size());
  fmt::print("latency ms: median {:.3f}  p90 {:.3f}  p99 {:.3f}  max {:.3f}\n", latency.median, latency.p90,
             latency.p99, latency.max);
  fmt::print("peak RSS {}, planned arena {} per stream, weights {}\n", format_bytes(rss),
             format_bytes(plan.arena_bytes), format_bytes(plan.weight_bytes));
  if (!a.json.empty()) {
    nlohmann::json j = {{"model", a.model},
                        {"mode", a.mode},
                        {"threads", threads},
                        {"streams", session.streams()},
                        {"threads_per_stream", session.threads_per_stream()},
                        {"inflight", inflight},
                        {"requests_per_cycle", requests},
                        {"batch", a.batch},
                        {"session_create_ms", create_ms},
                        {"first_run_ms", first_ms},
                        {"cycle_throughputs_per_s", throughputs},
                        {"throughput_per_s", median_throughput},
                        {"latency", to_json(latency)},
                        {"peak_rss_bytes", rss},
                        {"arena_bytes", plan.arena_bytes},
                        {"weight_bytes", plan.weight_bytes}};
    std::ofstream out(a.json);
    if (!out) throw Error(ErrorKind::kInvalidArgument, "cannot write '" + a.json + "'");
    out << j.dump(2) << "\n";
  }
  return 0;
}

int bench(const BenchArgs& a) {
  bool tty = isatty(STDERR_FILENO);
  SessionOptions opts;
  opts.num_threads = a.threads;
  opts.optimization_level = a.opt_level;
  opts.tune = a.tune;
  opts.tune_cache = a.tune_cache;
  if (a.mode == "throughput") opts.mode = ExecutionMode::kThroughput;
  opts.streams = parse_streams(a.streams);
  if (a.mode != "throughput" && opts.streams > 0)
    throw Error(ErrorKind::kInvalidArgument, "--streams needs --mode throughput");
  auto t0 = Clock::now();
  Session session = load_session(a.model, opts, a.batch);
  double create_ms = ms_since(t0);
  std::map<std::string, Tensor> inputs = random_inputs(session, read_inputs(session, a.inputs), 0, a.batch, a.shapes);
  check_batch_applies(a.batch, inputs);

  t0 = Clock::now();
  session.run(inputs);
  double first_ms = ms_since(t0);
  PlanStats plan = session.plan_stats(inputs);
  if (a.mode != "latency") return bench_async(a, session, inputs, create_ms, first_ms, plan);
  for (int i = 0; i < a.warmup; ++i) session.run(inputs);

  std::vector<Stats> cycles;
  std::vector<double> all;
  for (int c = 0; c < a.cycles; ++c) {
    std::vector<double> times;
    for (int i = 0; i < a.iters; ++i) {
      auto s = Clock::now();
      session.run(inputs);
      times.push_back(ms_since(s));
      if (tty && (i % 10 == 0 || i + 1 == a.iters))
        fmt::print(stderr, "\rcycle {}/{}  run {}/{}  last {:.3f} ms   ", c + 1, a.cycles, i + 1, a.iters, times.back());
    }
    all.insert(all.end(), times.begin(), times.end());
    cycles.push_back(stats_of(times));
  }
  if (tty) fmt::print(stderr, "\r{:60}\r", "");
  Stats overall = stats_of(all);
  double throughput = a.batch * 1000.0 / overall.mean;
  size_t rss = peak_rss_bytes();
  int threads = a.threads > 0 ? a.threads : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));

  fmt::print("model {}  threads {}  batch {}\n", a.model, threads, a.batch);
  fmt::print("session creation {:.1f} ms, first run {:.1f} ms (plans the model)\n", create_ms, first_ms);
  print_tuning(session);
  fmt::print("{:<9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}   (ms, {} runs per cycle)\n", "cycle", "mean", "median",
             "p90", "p99", "min", "max", a.iters);
  for (size_t c = 0; c < cycles.size(); ++c) print_row(std::to_string(c + 1), cycles[c]);
  print_row("overall", overall);
  fmt::print("throughput {:.1f} inferences/s\n", throughput);
  fmt::print("peak RSS {}, planned arena {}, weights {}, {} kernels per run\n", format_bytes(rss),
             format_bytes(plan.arena_bytes), format_bytes(plan.weight_bytes), plan.num_steps);

  if (a.profile || !a.profile_json.empty()) {
    // Profiled after the timed cycles, so the timings above carry no profiling overhead.
    std::vector<RunProfile> profiles(static_cast<size_t>(a.profile_runs));
    for (RunProfile& p : profiles) session.run(inputs, &p);
    if (a.profile) print_profile(profiles);
    if (!a.profile_json.empty()) {
      write_chrome_trace(profiles, a.profile_json);
      fmt::print("Chrome trace of {} runs written to {}\n", profiles.size(), a.profile_json);
    }
  }

  if (!a.json.empty()) {
    nlohmann::json j = {{"model", a.model},
                        {"threads", threads},
                        {"batch", a.batch},
                        {"session_create_ms", create_ms},
                        {"first_run_ms", first_ms},
                        {"cycles", nlohmann::json::array()},
                        {"overall", to_json(overall)},
                        {"throughput_per_s", throughput},
                        {"peak_rss_bytes", rss},
                        {"arena_bytes", plan.arena_bytes},
                        {"weight_bytes", plan.weight_bytes}};
    for (const Stats& s : cycles) j["cycles"].push_back(to_json(s));
    std::ofstream out(a.json);
    if (!out) throw Error(ErrorKind::kInvalidArgument, "cannot write '" + a.json + "'");
    out << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

Command add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  app.add_option("model", a->model, "ONNX file or zoo:NAME (built in: zoo:resnet18, zoo:mobilenet_v2)")->required();
  app.add_option("-i,--input", a->inputs, "NAME=FILE; missing inputs get seeded random data");
  app.add_option("--shape", a->shapes, "NAME=1x128: shape of a random input (symbolic dimensions)");
  app.add_option("-t,--threads", a->threads, "threads (0: all cores)")->check(CLI::Range(0, 4096));
  app.add_option("-b,--batch", a->batch, "batch size for zoo models and symbolic batch dimensions")->check(CLI::Range(1, 1 << 20));
  app.add_option("-c,--cycles", a->cycles, "timed cycles")->check(CLI::Range(1, 1000));
  app.add_option("-n,--iters", a->iters, "timed runs per cycle")->check(CLI::Range(1, 1000000));
  app.add_option("-w,--warmup", a->warmup, "untimed runs before the first cycle")->check(CLI::Range(0, 1000000));
  app.add_option("-O,--opt-level", a->opt_level, "graph optimization level 0-3 (3: blocked layouts between nodes)")->check(CLI::Range(0, 3));
  add_tune_options(app, &a->tune, &a->tune_cache);
  app.add_option("--json", a->json, "write the results as JSON to FILE");
  app.add_flag("--profile", a->profile, "print the time of every node and of every op type");
  app.add_option("--profile-json", a->profile_json, "write a Chrome trace (Perfetto) of the profiled runs to FILE");
  app.add_option("--profile-runs", a->profile_runs, "profiled runs after the timed cycles")->check(CLI::Range(1, 100000));
  app.add_option("--mode", a->mode,
                 "latency: one run at a time on all threads; throughput: concurrent streams; async: run_async "
                 "with requests queued behind the running one")
      ->check(CLI::IsMember({"latency", "throughput", "async"}));
  app.add_option("--streams", a->streams, "throughput mode: concurrent streams, or auto (by cores and model size)");
  app.add_option("--requests", a->requests, "requests per cycle in throughput/async mode (default 50 per stream)")
      ->check(CLI::Range(1, 100000000));
  app.add_option("--inflight", a->inflight, "requests queued or running at once (default: streams; async: 2)")
      ->check(CLI::Range(1, 1000000));
  return [a] { return bench(*a); };
}

}  // namespace anvil::cli
