// anvil serve: the KServe v2 REST server (src/serving) for one or more models,
// with dynamic batching, a bounded queue, metrics and a graceful stop on
// SIGTERM or SIGINT (requests in flight are answered first).
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "anvil/error.h"
#include "commands.h"
#include "serving/http_server.h"
#include "serving/model_runner.h"

namespace anvil::cli {

namespace {

struct ServeArgs {
  std::vector<std::string> models;
  std::string host = "127.0.0.1";
  int port = 8000;
  int threads = 0, opt_level = 3;
  std::string streams = "auto";
  int max_batch = 1;
  int max_queue_delay_us = 0;
  int max_queue = 64;
  double max_request_mb = 32;
  int http_threads = 32;
};

// "NAME=PATH", or PATH (named by its file stem), or zoo:NAME.
std::pair<std::string, std::string> model_spec(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq != std::string::npos) {
    if (eq == 0 || eq + 1 == spec.size())
      throw Error(ErrorKind::kInvalidArgument, "model '" + spec + "' must be written PATH or NAME=PATH");
    return {spec.substr(0, eq), spec.substr(eq + 1)};
  }
  if (spec.rfind("zoo:", 0) == 0) return {spec.substr(4), spec};
  return {std::filesystem::path(spec).stem().string(), spec};
}

int serve(const ServeArgs& a) {
  // Signals go to the watcher thread below only: block them before any thread starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGUSR1);  // how serve() ending on its own wakes the watcher
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  SessionOptions options;
  options.num_threads = a.threads;
  options.optimization_level = a.opt_level;
  options.mode = ExecutionMode::kThroughput;
  options.streams = parse_streams(a.streams);
  serving::BatchingOptions batching;
  batching.max_batch = a.max_batch;
  batching.max_queue_delay = std::chrono::microseconds(a.max_queue_delay_us);
  batching.max_queue = static_cast<size_t>(a.max_queue);

  serving::Metrics metrics;
  std::vector<std::unique_ptr<serving::ModelRunner>> runners;
  std::vector<serving::ModelRunner*> served;
  for (const std::string& spec : a.models) {
    auto [name, path] = model_spec(spec);
    runners.push_back(std::make_unique<serving::ModelRunner>(name, load_session(path, options), batching, &metrics));
    serving::ModelRunner& r = *runners.back();
    served.push_back(&r);
    fmt::print("model '{}' from {}: {} streams x {} threads, {}\n", name, path, r.session().streams(),
               r.session().threads_per_stream(),
               r.batchable() ? fmt::format("dynamic batching up to {} rows, {} us delay", r.max_batch(),
                                           a.max_queue_delay_us)
                             : std::string("no batch axis: one request per run"));
  }
  serving::HttpOptions http;
  http.host = a.host;
  http.port = a.port;
  http.http_threads = a.http_threads;
  http.max_request_bytes = static_cast<size_t>(a.max_request_mb * 1024 * 1024);
  serving::HttpServer server(http, served, &metrics);
  server.bind();

  std::thread watcher([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    if (signal == SIGUSR1) return;  // serve() ended on its own
    fmt::print(stderr, "anvil serve: {}: finishing the requests in flight\n", signal == SIGTERM ? "SIGTERM" : "SIGINT");
    server.stop();
  });
  fmt::print("listening on http://{}:{}\n", a.host, server.port());
  std::fflush(stdout);
  server.serve();
  pthread_kill(watcher.native_handle(), SIGUSR1);  // a no-op for a watcher that has returned
  watcher.join();
  runners.clear();  // answers every queued request, then stops the streams
  fmt::print(stderr, "anvil serve: stopped\n");
  return 0;
}

}  // namespace

Command add_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  app.add_option("models", a->models, "ONNX files (NAME=PATH to name one; default: the file's stem) or zoo:NAME")
      ->required();
  app.add_option("--host", a->host, "address to listen on (0.0.0.0: every interface)");
  app.add_option("-p,--port", a->port, "port (0: any free port; the line 'listening on ...' tells)")
      ->check(CLI::Range(0, 65535));
  app.add_option("-t,--threads", a->threads, "threads of each model (0: all cores)")->check(CLI::Range(0, 4096));
  app.add_option("--streams", a->streams, "concurrent runs per model, or auto (by cores and model size)");
  app.add_option("--max-batch", a->max_batch, "dynamic batching: rows per run for models with a batch axis (1: off)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--max-queue-delay-us", a->max_queue_delay_us,
                 "dynamic batching: how long a batch waits for more requests")
      ->check(CLI::Range(0, 10000000));
  app.add_option("--max-queue", a->max_queue, "requests waiting per model; more get 503")->check(CLI::Range(1, 1000000));
  app.add_option("--max-request-mb", a->max_request_mb, "largest request body in MiB; larger get 413")
      ->check(CLI::Range(0.001, 16384.0));
  app.add_option("--http-threads", a->http_threads, "connections served at once")->check(CLI::Range(1, 4096));
  app.add_option("-O,--opt-level", a->opt_level, "graph optimization level 0-3")->check(CLI::Range(0, 3));
  return [a] { return serve(*a); };
}

}  // namespace anvil::cli
