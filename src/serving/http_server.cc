#include "serving/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <charconv>
#include <chrono>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anvil/error.h"
#include "serving/kserve.h"

namespace anvil::serving {

namespace {

constexpr const char* kJson = "application/json";

void reply_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(error_json(message), kJson);
}

int status_of(const Error& e) {
  switch (e.kind()) {
    case ErrorKind::kInvalidArgument: case ErrorKind::kUnsupported: return 400;
    case ErrorKind::kOutOfMemory: return 503;
    default: return 500;
  }
}

// Bodies are read only when their size is declared: cpp-httplib checks its
// limit against Content-Length, but would read a chunked body, or inflate a
// compressed one, without bound.
bool refuse_unbounded_body(const httplib::Request& req, httplib::Response& res) {
  if (req.method != "POST" && req.method != "PUT") return false;
  if (req.has_header("Transfer-Encoding")) {
    reply_error(res, 411, "chunked bodies are not accepted: send Content-Length");
    return true;
  }
  if (!req.has_header("Content-Length")) {
    reply_error(res, 411, "the request needs a Content-Length");
    return true;
  }
  const std::string encoding = req.get_header_value("Content-Encoding");
  if (!encoding.empty() && encoding != "identity") {
    reply_error(res, 415, "compressed bodies (Content-Encoding: " + escape_control(encoding.substr(0, 40)) +
                              ") are not accepted");
    return true;
  }
  return false;
}

// "/v2/models/NAME[/versions/V][/ACTION]" -> NAME and ACTION ("" for metadata); false otherwise.
bool parse_model_path(const std::string& path, std::string& name, std::string& action) {
  std::vector<std::string> parts;
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    parts.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  if (parts.size() < 3 || parts[0] != "v2" || parts[1] != "models" || parts[2].empty()) return false;
  name = parts[2];
  size_t next = 3;
  if (parts.size() >= 5 && parts[3] == "versions") next = 5;
  if (parts.size() == next) {
    action = "";
    return true;
  }
  if (parts.size() == next + 1 && !parts[next].empty()) {
    action = parts[next];
    return true;
  }
  return false;
}

std::optional<size_t> header_length_of(const httplib::Request& req) {
  if (!req.has_header("Inference-Header-Content-Length")) return std::nullopt;
  const std::string text = req.get_header_value("Inference-Header-Content-Length");
  size_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    throw Error(ErrorKind::kInvalidArgument, "Inference-Header-Content-Length must be a byte count, got '" + text + "'");
  return value;
}

void check_requested_outputs(const InferRequest& request, const Session& session) {
  for (const RequestedOutput& o : request.outputs) {
    bool known = false;
    for (const ValueInfo& v : session.outputs()) known = known || v.name == o.name;
    if (!known) throw Error(ErrorKind::kInvalidArgument, "the model has no output named '" + o.name + "'");
  }
}

std::map<std::string, Tensor> input_map(InferRequest& request) {
  std::map<std::string, Tensor> inputs;
  for (InferInput& in : request.inputs)
    if (!inputs.emplace(in.name, std::move(in.tensor)).second)
      throw Error(ErrorKind::kInvalidArgument, "input '" + in.name + "' is given twice");
  return inputs;
}

}  // namespace

HttpServer::HttpServer(const HttpOptions& options, std::vector<ModelRunner*> models, Metrics* metrics)
    : options_(options), metrics_(metrics), http_(std::make_unique<httplib::Server>()) {
  for (ModelRunner* m : models)
    if (!models_.emplace(m->name(), m).second)
      throw Error(ErrorKind::kInvalidArgument, "two models are named '" + m->name() + "'");
  const int threads = options.http_threads;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http_->set_payload_max_length(options.max_request_bytes);
  // SO_REUSEADDR only: cpp-httplib's default also sets SO_REUSEPORT, which lets a
  // second server bind a port in use and silently take half its connections.
  http_->set_socket_options([this](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd_ = sock;
  });
  http_->set_keep_alive_max_count(1000);
  http_->set_read_timeout(30, 0);
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string reason = res.status == 404 ? "no such endpoint" : "bad request";
    if (res.status == 413) {
      // cpp-httplib caps form-encoded bodies at 8 KiB whatever the limit: what `curl -d` sends by default.
      reason = req.get_header_value("Content-Type") == "application/x-www-form-urlencoded"
                   ? "a form-encoded body is limited to 8 KiB: send the request with Content-Type: application/json"
                   : "the request body is larger than the server's limit (--max-request-mb)";
    }
    res.set_content(error_json(reason), kJson);
  });
  http_->set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    return refuse_unbounded_body(req, res) ? httplib::Server::HandlerResponse::Handled
                                           : httplib::Server::HandlerResponse::Unhandled;
  });
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    reply_error(res, 500, "internal error");
  });
  add_routes();
}

HttpServer::~HttpServer() = default;

// Holds one of the large-parse slots (when `large`) for its lifetime.
class HttpServer::ParseSlot {
 public:
  ParseSlot(HttpServer& server, bool large) : server_(large ? &server : nullptr) {
    if (!server_) return;
    std::unique_lock<std::mutex> lock(server_->parse_mutex_);
    server_->parse_free_.wait(lock, [this] { return server_->large_parses_ < kMaxLargeParses; });
    ++server_->large_parses_;
  }
  ~ParseSlot() {
    if (!server_) return;
    std::lock_guard<std::mutex> lock(server_->parse_mutex_);
    --server_->large_parses_;
    server_->parse_free_.notify_one();
  }

 private:
  HttpServer* server_;
};

ModelRunner* HttpServer::find_model(const std::string& name) const {
  auto it = models_.find(name);
  return it == models_.end() ? nullptr : it->second;
}

void HttpServer::bind() {
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
  } else {
    port_ = http_->bind_to_port(options_.host, options_.port) ? options_.port : -1;
  }
  if (port_ <= 0)
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("cannot listen on {}:{} (address in use, or not this machine's)", options_.host,
                            options_.port));
  // Debian's cpp-httplib 0.11 listens with a backlog of 5: 16 clients
  // connecting at once overflowed it, and a dropped handshake costs the
  // client a second or more. Listening again on the bound socket raises it.
  if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);
}

void HttpServer::serve() {
  state_ = kServing;
  if (!stop_requested_) {
    ready_ = true;
    http_->listen_after_bind();
  }
  ready_ = false;
  state_ = kStopped;
}

void HttpServer::stop() {
  stop_requested_ = true;
  ready_ = false;
  // cpp-httplib's stop() does nothing before its listen loop runs: wait for that
  // (serve() may be between its start and the loop), unless serve() is not
  // running at all, in which case it will see stop_requested_.
  while (state_ == kServing && !http_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (state_ == kServing) http_->stop();
}

void HttpServer::add_routes() {
  http_->Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"live":true})", kJson);
  });
  http_->Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& res) {
    res.status = ready_ ? 200 : 503;
    res.set_content(ready_ ? R"({"ready":true})" : R"({"ready":false})", kJson);
  });
  http_->Get("/v2", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(nlohmann::json{{"name", "anvil"}, {"version", ANVIL_VERSION},
                                   {"extensions", {"binary_tensor_data"}}}.dump(), kJson);
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_->prometheus_text(), "text/plain; version=0.0.4");
  });

  auto model_route = [this](const httplib::Request& req, httplib::Response& res, bool post) {
    std::string name, action;
    if (!parse_model_path(req.path, name, action) || (post != (action == "infer")) ||
        !(action.empty() || action == "ready" || action == "infer")) {
      reply_error(res, 404, "no such endpoint: " + escape_control(req.path.substr(0, 200)));
      return;
    }
    ModelRunner* model = find_model(name);
    if (!model) {
      std::string served;
      for (const auto& m : models_) served += (served.empty() ? "" : ", ") + m.first;
      reply_error(res, 404, fmt::format("model '{}' is not served (served: {})", escape_control(name.substr(0, 200)),
                                        served));
      return;
    }
    if (action.empty()) {
      res.set_content(model_metadata_json(name, model->session().inputs(), model->session().outputs()), kJson);
    } else if (action == "ready") {
      res.status = ready_ ? 200 : 503;
      res.set_content(nlohmann::json{{"name", name}, {"ready", ready_.load()}}.dump(), kJson);
    } else {
      infer(*model, req, res);
    }
  };
  http_->Get(R"(/v2/models/.+)", [model_route](const httplib::Request& req, httplib::Response& res) {
    model_route(req, res, false);
  });
  http_->Post(R"(/v2/models/.+)", [model_route](const httplib::Request& req, httplib::Response& res) {
    model_route(req, res, true);
  });
}

void HttpServer::infer(ModelRunner& model, const httplib::Request& req, httplib::Response& res) {
  if (!ready_) {
    reply_error(res, 503, "the server is shutting down");
    return;
  }
  InferRequest request;
  std::future<std::vector<Tensor>> pending;
  try {
    {
      // A parsed JSON document takes ~20x its text: few large ones at a time.
      ParseSlot slot(*this, req.body.size() > kLargeBody);
      request = parse_infer_request(req.body, header_length_of(req));
    }
    check_requested_outputs(request, model.session());
    pending = model.submit(input_map(request));
  } catch (const QueueFull& e) {
    metrics_->record_rejection(model.name());
    reply_error(res, 503, e.what());
    return;
  } catch (const Error& e) {
    metrics_->record_failure(model.name());
    reply_error(res, status_of(e), e.what());
    return;
  } catch (const std::bad_alloc&) {
    metrics_->record_failure(model.name());
    reply_error(res, 503, "out of memory");
    return;
  }
  try {
    std::vector<Tensor> outputs = pending.get();
    EncodedResponse response =
        encode_infer_response(model.name(), request.id, model.session().outputs(), outputs, request);
    if (response.header_length) {
      res.set_header("Inference-Header-Content-Length", std::to_string(*response.header_length));
      res.set_content(std::move(response.body), "application/octet-stream");
    } else {
      res.set_content(std::move(response.body), kJson);
    }
  } catch (const Error& e) {
    reply_error(res, status_of(e), e.what());
  } catch (const std::bad_alloc&) {
    reply_error(res, 503, "out of memory");
  }
}

}  // namespace anvil::serving
