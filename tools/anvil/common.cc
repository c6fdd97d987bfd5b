#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>

#include "anvil/error.h"
#include "anvil/tensor_io.h"
#include "anvil/zoo.h"
#include "commands.h"

namespace anvil::cli {

Session load_session(const std::string& model, const SessionOptions& options, int batch) {
  if (model.rfind("zoo:", 0) == 0) return zoo_session(model.substr(4), options, batch);
  return Session::from_file(model, options);
}

std::map<std::string, Tensor> read_inputs(const Session& session, const std::vector<std::string>& specs) {
  std::map<std::string, Tensor> inputs;
  for (const std::string& spec : specs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      throw Error(ErrorKind::kInvalidArgument, "input '" + spec + "' must be written NAME=FILE");
    const std::string name = spec.substr(0, eq), file = spec.substr(eq + 1);
    // A sequence or optional input reads its .pb as a SequenceProto or OptionalProto.
    const auto info = std::find_if(session.inputs().begin(), session.inputs().end(),
                                   [&](const ValueInfo& i) { return i.name == name; });
    const bool value = info != session.inputs().end() && info->kind != ValueKind::kTensor &&
                       file.size() > 3 && file.compare(file.size() - 3, 3, ".pb") == 0;
    inputs[name] = value ? read_value_pb(file, info->kind, info->dtype) : read_tensor_file(file);
  }
  return inputs;
}

namespace {
template <typename T, typename Dist>
void fill(Tensor& t, std::mt19937_64& rng, Dist dist) {
  for (int64_t i = 0; i < t.numel(); ++i) t.data<T>()[i] = static_cast<T>(dist(rng));
}
}  // namespace

namespace {

// "1x128" -> {1, 128}; "" -> {} (a scalar).
Shape parse_shape(const std::string& spec, const std::string& option) {
  Shape shape;
  size_t start = 0;
  while (start < spec.size()) {
    size_t x = spec.find('x', start);
    std::string item = spec.substr(start, x == std::string::npos ? std::string::npos : x - start);
    char* end = nullptr;
    long long d = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || d < 0)
      throw Error(ErrorKind::kInvalidArgument, "--shape '" + option + "': dimensions must be written like 1x128");
    shape.push_back(d);
    if (x == std::string::npos) break;
    start = x + 1;
  }
  return shape;
}

std::map<std::string, Shape> parse_shapes(const Session& session, const std::vector<std::string>& specs) {
  std::map<std::string, Shape> shapes;
  for (const std::string& spec : specs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      throw Error(ErrorKind::kInvalidArgument, "--shape '" + spec + "' must be written NAME=1x128");
    std::string name = spec.substr(0, eq);
    bool known = false;
    for (const ValueInfo& info : session.inputs()) known |= info.name == name;
    if (!known) throw Error(ErrorKind::kInvalidArgument, "--shape: the model has no input named '" + name + "'");
    shapes[name] = parse_shape(spec.substr(eq + 1), spec);
  }
  return shapes;
}

}  // namespace

std::map<std::string, Tensor> random_inputs(const Session& session, std::map<std::string, Tensor> given,
                                            uint64_t seed, int batch, const std::vector<std::string>& shape_specs) {
  std::mt19937_64 rng(seed);
  if (!given.empty()) return given;  // inputs given by hand: a missing one is an error, not random data
  std::map<std::string, Shape> fixed = parse_shapes(session, shape_specs);
  // A symbol sized by one input's --shape sizes it in every input that shares
  // it (BERT's attention_mask follows input_ids' sequence).
  std::map<std::string, int64_t> symbols;
  for (const ValueInfo& info : session.inputs())
    if (auto it = fixed.find(info.name); it != fixed.end())
      for (size_t d = 0; d < info.dim_names.size() && d < it->second.size(); ++d)
        if (!info.dim_names[d].empty()) symbols.emplace(info.dim_names[d], it->second[d]);
  for (const ValueInfo& info : session.inputs()) {
    Shape shape = info.shape;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] >= 0) continue;
      auto sym = d < info.dim_names.size() ? symbols.find(info.dim_names[d]) : symbols.end();
      shape[d] = sym != symbols.end() ? sym->second : d == 0 ? batch : 1;
    }
    if (auto it = fixed.find(info.name); it != fixed.end()) shape = it->second;
    Tensor t(info.dtype, shape);
    switch (info.dtype) {
      case DType::kFloat32: fill<float>(t, rng, std::uniform_real_distribution<float>(-1.f, 1.f)); break;
      case DType::kFloat64: fill<double>(t, rng, std::uniform_real_distribution<double>(-1.0, 1.0)); break;
      case DType::kInt64: fill<int64_t>(t, rng, std::uniform_int_distribution<int64_t>(0, 9)); break;
      case DType::kInt32: fill<int32_t>(t, rng, std::uniform_int_distribution<int32_t>(0, 9)); break;
      case DType::kUInt8: fill<uint8_t>(t, rng, std::uniform_int_distribution<int>(0, 255)); break;
      case DType::kInt8: fill<int8_t>(t, rng, std::uniform_int_distribution<int>(-128, 127)); break;
      case DType::kBool: fill<bool>(t, rng, std::uniform_int_distribution<int>(0, 1)); break;
      default:
        throw Error(ErrorKind::kUnsupported, fmt::format("cannot make random data for input '{}' of type {}",
                                                         info.name, dtype_name(info.dtype)));
    }
    given[info.name] = std::move(t);
  }
  return given;
}

std::map<std::string, Tensor> read_case_inputs(const Session& session, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(ErrorKind::kInvalidArgument, "case folder '" + dir + "' does not exist or is not a folder");
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_regular_file() && (entry.path().extension() == ".npy" || entry.path().extension() == ".pb") &&
        entry.path().filename().string().rfind("output_", 0) != 0)
      files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::map<std::string, Tensor> inputs;
  for (const fs::path& f : files) {
    std::string name = f.stem().string();
    // input_K.pb: the K-th input, of its kind (ONNX's test data leaves sequences and optionals unnamed).
    const ValueInfo* info = nullptr;
    if (name.rfind("input_", 0) == 0 && name.size() > 6 &&
        name.find_first_not_of("0123456789", 6) == std::string::npos && name.size() < 12) {
      const size_t k = std::stoul(name.substr(6));
      if (k < session.inputs().size()) info = &session.inputs()[k];
    }
    Tensor t = f.extension() != ".pb" ? read_tensor_npy(f.string())
               : info ? read_value_pb(f.string(), info->kind, info->dtype, &name)
                      : read_tensor_pb(f.string(), &name);
    if (name.empty() && info) name = info->name;
    if (name.empty()) name = f.stem().string();
    if (!inputs.emplace(name, std::move(t)).second)
      throw Error(ErrorKind::kInvalidArgument, "case folder '" + dir + "' holds input '" + name + "' twice");
  }
  if (inputs.empty()) throw Error(ErrorKind::kInvalidArgument, "case folder '" + dir + "' holds no .npy or .pb inputs");
  return inputs;
}

std::string format_bytes(size_t bytes) {
  if (bytes >= (size_t{1} << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
  if (bytes >= 1024) return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / 1024);
  return fmt::format("{} B", bytes);
}

// The process's own resident high-water mark (VmHWM in /proc/self/status).
// getrusage's ru_maxrss is not used: across fork and exec it keeps the
// launcher's figure when that is larger (a Python harness holding a model).
size_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return static_cast<size_t>(std::strtoull(line.c_str() + 6, nullptr, 10)) * 1024;
  struct rusage ru{};  // no /proc: the best figure left
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<size_t>(ru.ru_maxrss) * 1024;
}

int parse_streams(const std::string& text) {
  if (text == "auto") return 0;
  try {
    size_t used = 0;
    const int n = std::stoi(text, &used);
    if (used == text.size() && n >= 1) return n;
  } catch (const std::exception&) {
  }
  throw Error(ErrorKind::kInvalidArgument, "--streams must be 'auto' or a positive count, got '" + text + "'");
}

void add_tune_options(CLI::App& app, bool* tune, std::string* cache) {
  app.add_flag("--tune", *tune,
               "time the alternative kernels of each node when planning and keep the fastest (choices cached)");
  app.add_option("--tune-cache", *cache,
                 "the tuning cache file (default $ANVIL_TUNE_CACHE, else $XDG_CACHE_HOME/anvil/tune.json, "
                 "else ~/.cache/anvil/tune.json)")
      ->needs("--tune");
}

void print_tuning(const Session& session) {
  const TuningStats t = session.tuning_stats();
  if (t.cache_path.empty()) return;
  fmt::print("tuning: {} nodes timed, {} from the cache {}\n", t.timed_nodes, t.cached_nodes, t.cache_path);
}

}  // namespace anvil::cli
