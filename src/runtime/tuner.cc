#include "runtime/tuner.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <type_traits>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "anvil/cpu.h"
#include "core/vector_isa.h"

namespace anvil::runtime {

namespace {

constexpr int kFileVersion = 1;

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string cpu_id() {
  const CpuInfo& cpu = cpu_info();
  return fmt::format("{} / {} / oneDNN {}", cpu.model_name, vector_isa_name(vector_isa()), dnnl_isa_name());
}

// The entries of a cache file by key: none when it is missing, and none, with
// `error` set, when it is malformed (any entry without a "choice" string).
std::map<std::string, nlohmann::json> read_choices(const std::string& path, std::string* error) {
  std::map<std::string, nlohmann::json> out;
  std::ifstream in(path);
  if (!in) return out;  // no file yet
  try {
    const nlohmann::json doc = nlohmann::json::parse(in);
    if (const int v = doc.at("version").get<int>(); v != kFileVersion)
      throw std::runtime_error(fmt::format("version {}; this Anvil writes version {}", v, kFileVersion));
    for (const auto& [key, entry] : doc.at("choices").items()) {
      entry.at("choice").get<std::string>();
      out[key] = entry;
    }
  } catch (const std::exception& e) {
    if (error) *error = e.what();
    return {};
  }
  return out;
}

}  // namespace

Tuner::Tuner(std::string cache_path, std::string model_id)
    : path_(std::move(cache_path)), model_id_(std::move(model_id)), cpu_id_(cpu_id()) {
  std::string error;
  for (const auto& [key, entry] : read_choices(path_, &error)) choices_[key] = entry.at("choice").get<std::string>();
  if (!error.empty()) {
    fmt::print(stderr, "anvil: warning: ignoring the tuning cache '{}' ({}); it will be rewritten\n", path_, error);
    dirty_ = true;
  }
}

std::string Tuner::key(const ir::Node& node, const std::vector<kernels::TensorType>& types,
                       const std::vector<kernels::Layout>& incoming, int threads) const {
  // The first output's name tells apart unnamed nodes of one op type.
  const ir::Value* out = node.outputs.empty() ? nullptr : node.outputs[0];
  std::string k = fmt::format("{} | {} -> {} | t{} |", model_id_, node.describe(), out ? out->name : "", threads);
  for (size_t i = 0; i < types.size(); ++i) {
    k += fmt::format(" {}{}", dtype_name(types[i].dtype), shape_str(types[i].shape));
    if (i < incoming.size() && incoming[i]) k += fmt::format(":{}", incoming[i]->name());
  }
  k += fmt::format(" | {}", cpu_id_);
  return k;
}

std::optional<std::string> Tuner::cached(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = choices_.find(key);
  if (it == choices_.end()) return std::nullopt;
  return it->second;
}

void Tuner::record(const std::string& key, const std::string& choice, const std::map<std::string, double>& ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  choices_[key] = choice;
  timings_[key] = ms;
  dirty_ = true;
  ++timed_;
}

void Tuner::count_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++cached_hits_;
}

size_t Tuner::timed_nodes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return timed_;
}

size_t Tuner::cached_nodes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_hits_;
}

void Tuner::save() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!dirty_) return;
  std::error_code ec;
  const std::filesystem::path path(path_);
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  // Other sessions and processes may share the file: under an exclusive lock,
  // merge what it holds now with this session's choices, write a temporary
  // of our own, and rename it over the file.
  const int lock_fd = ::open((path_ + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd >= 0) ::flock(lock_fd, LOCK_EX);
  std::map<std::string, nlohmann::json> merged = read_choices(path_, nullptr);
  for (const auto& [key, choice] : choices_) {
    nlohmann::json entry{{"choice", choice}};
    if (auto t = timings_.find(key); t != timings_.end()) entry["median_ms"] = t->second;
    merged[key] = entry;
  }
  nlohmann::json doc{{"version", kFileVersion}, {"choices", nlohmann::json::object()}};
  for (auto& [key, entry] : merged) doc["choices"][key] = std::move(entry);
  std::string tmp = path_ + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  bool written = false;
  if (fd >= 0) {
    // Node names need not be UTF-8: invalid bytes are replaced rather than failing the plan.
    const std::string text = doc.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    written = ::close(fd) == 0 && written;
    if (written) std::filesystem::rename(tmp, path, ec);
    if (!written || ec) std::filesystem::remove(tmp, ec);
    written = written && !ec;
  }
  if (lock_fd >= 0) ::close(lock_fd);  // releases the lock
  if (!written) {
    fmt::print(stderr, "anvil: warning: cannot write the tuning cache '{}'\n", path_);
    return;  // still dirty: the next plan tries again
  }
  dirty_ = false;
}

double time_kernel(const kernels::Kernel& kernel, const std::vector<kernels::TensorType>& types,
                   const std::vector<const Tensor*>& constants, const std::vector<kernels::TensorType>& outputs) {
  std::vector<std::shared_ptr<void>> storage;
  auto buffer = [&](const kernels::TensorType& t, bool fill) {
    const size_t bytes = std::max<size_t>(kernels::type_bytes(t), 64);
    std::shared_ptr<void> mem(std::aligned_alloc(64, (bytes + 63) / 64 * 64), std::free);
    if (!mem) throw std::bad_alloc();
    if (fill && t.dtype == DType::kFloat32) {
      std::mt19937 gen(7);
      std::uniform_real_distribution<float> dist(-1.f, 1.f);
      auto* f = static_cast<float*>(mem.get());
      for (size_t i = 0; i < bytes / sizeof(float); ++i) f[i] = dist(gen);
    } else {
      std::memset(mem.get(), 0, bytes);
    }
    storage.push_back(mem);
    return Tensor::view(t.dtype, t.shape, mem.get());
  };
  std::vector<Tensor> ins, outs;
  ins.reserve(types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    kernels::TensorType t = types[i];
    t.layout = kernel.input_layout(i);
    if (t.dtype == DType::kUndefined) ins.emplace_back();
    else if (i < constants.size() && constants[i] && !t.layout) ins.push_back(*constants[i]);
    else ins.push_back(buffer(t, true));
  }
  for (const kernels::TensorType& t : outputs) outs.push_back(buffer(t, false));
  kernels::RunContext ctx;
  for (size_t i = 0; i < ins.size(); ++i) ctx.inputs.push_back(types[i].dtype == DType::kUndefined ? nullptr : &ins[i]);
  for (Tensor& t : outs) ctx.outputs.push_back(&t);
  std::shared_ptr<void> scratch(std::aligned_alloc(64, (kernel.scratch_bytes() + 64) / 64 * 64), std::free);
  ctx.scratch = scratch.get();

  using Clock = std::chrono::steady_clock;
  kernel.run(ctx);  // warm-up: caches, pages, oneDNN's lazy set-up
  std::vector<double> ms;
  const Clock::time_point start = Clock::now();
  while (ms.size() < 5 || (ms.size() < 50 && Clock::now() - start < std::chrono::milliseconds(20))) {
    const Clock::time_point t0 = Clock::now();
    kernel.run(ctx);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2), ms.end());
  return ms[ms.size() / 2];
}

namespace {

// An attribute's value as text: numbers, strings and their lists; tensors,
// graphs and types by their kind only (their contents change no kernel's
// choice that their shapes, hashed with the inputs, would not).
std::string attribute_text(const ir::AttrValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, float> || std::is_same_v<T, std::string>) {
          return fmt::format("{}", v);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<float>> ||
                             std::is_same_v<T, std::vector<std::string>>) {
          return fmt::format("[{}]", fmt::join(v, ","));
        } else {
          return "<object>";
        }
      },
      value);
}

}  // namespace

std::string model_fingerprint(const ir::Graph& graph) {
  uint64_t h = fnv1a("anvil-model");
  for (const ir::Value* v : graph.inputs()) h = fnv1a(v->name + ";", h);
  // Each node with its wiring and attributes: a re-exported model whose
  // nodes keep their names but not their edges plans differently.
  for (const auto& node : graph.nodes()) {
    h = fnv1a(node->describe(), h);
    for (const auto& [name, value] : node->attrs.all()) h = fnv1a(name + "=" + attribute_text(value) + ";", h);
    for (const ir::Value* v : node->inputs) {
      h = fnv1a(v ? "<" + v->name : std::string("<"), h);
      if (v && v->is_constant()) h = fnv1a(fmt::format("{}{};", dtype_name(v->constant->dtype()), shape_str(v->constant->shape())), h);
    }
    for (const ir::Value* v : node->outputs) h = fnv1a(v ? ">" + v->name : std::string(">"), h);
  }
  for (const ir::Value* v : graph.outputs()) h = fnv1a("=>" + v->name, h);
  return fmt::format("{:016x}", h);
}

std::string default_tune_cache_path() {
  if (const char* p = std::getenv("ANVIL_TUNE_CACHE"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fmt::format("{}/anvil/tune.json", x);
  if (const char* home = std::getenv("HOME"); home && *home) return fmt::format("{}/.cache/anvil/tune.json", home);
  return "anvil-tune.json";
}

}  // namespace anvil::runtime
