// serving::HttpServer — KServe v2 REST endpoints over cpp-httplib for a set
// of ModelRunners, plus Prometheus metrics:
//
//   GET  /v2/health/live, /v2/health/ready, /v2
//   GET  /v2/models/{name}[/versions/{v}]           metadata
//   GET  /v2/models/{name}[/versions/{v}]/ready
//   POST /v2/models/{name}[/versions/{v}]/infer     JSON tensors or the binary extension
//   GET  /metrics
//
// Every error is a JSON body {"error": "..."} with a 4xx/5xx status.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "serving/metrics.h"
#include "serving/model_runner.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace anvil::serving {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                             // 0: any free port (port() tells)
  int http_threads = 32;                       // connections served at once
  size_t max_request_bytes = size_t{32} << 20; // larger bodies get 413
};

class HttpServer {
 public:
  // `metrics` must be the one the runners record into; both outlive the server.
  HttpServer(const HttpOptions& options, std::vector<ModelRunner*> models, Metrics* metrics);
  ~HttpServer();

  // Binds the port; throws anvil::Error (invalid argument) when it cannot.
  void bind();
  int port() const { return port_; }
  // Serves until stop(); the requests in flight are answered before it returns.
  void serve();
  // From any thread: stop accepting, report not ready, let serve() return.
  void stop();

 private:
  void add_routes();
  ModelRunner* find_model(const std::string& name) const;
  void infer(ModelRunner& model, const httplib::Request& req, httplib::Response& res);

  class ParseSlot;
  static constexpr size_t kLargeBody = size_t{1} << 20;
  static constexpr int kMaxLargeParses = 2;
  enum State { kIdle, kServing, kStopped };

  HttpOptions options_;
  std::map<std::string, ModelRunner*> models_;
  Metrics* metrics_;
  std::unique_ptr<httplib::Server> http_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> stop_requested_{false};
  std::atomic<State> state_{kIdle};
  int port_ = 0;
  int listen_fd_ = -1;  // the listening socket, once bound
  std::mutex parse_mutex_;
  std::condition_variable parse_free_;
  int large_parses_ = 0;
};

}  // namespace anvil::serving
