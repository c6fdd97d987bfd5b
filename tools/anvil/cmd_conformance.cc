// anvil conformance DIR...: runs ONNX backend test cases (model.onnx plus
// test_data_set_*/input_*.pb, output_*.pb) and compares the outputs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anvil/error.h"
#include "anvil/model_info.h"
#include "anvil/tensor_io.h"
#include "commands.h"

namespace anvil::cli {

namespace {

namespace fs = std::filesystem;

constexpr double kRtol = 1e-3, kAtol = 1e-7;

struct ConformanceArgs {
  std::vector<std::string> dirs;
  std::string expect, json;
  int threads = 1;
  bool quiet = false;
  bool summary = false;
};

// Case counts by status: pass (random outputs included), fail, error, unsupported, invalid.
struct Tally {
  int cases = 0, pass = 0, fail = 0, error = 0, unsupported = 0, invalid = 0;
  void add(const std::string& status) {
    ++cases;
    if (status == "pass" || status == "pass-random") ++pass;
    else if (status == "fail") ++fail;
    else if (status == "error") ++error;
    else if (status == "unsupported") ++unsupported;
    else ++invalid;
  }
  nlohmann::json json() const {
    return {{"cases", cases}, {"pass", pass}, {"fail", fail}, {"error", error}, {"unsupported", unsupported},
            {"invalid", invalid}};
  }
};

void print_tallies(const char* title, const std::map<std::string, Tally>& tallies) {
  fmt::print("\n{:<40} {:>6} {:>6} {:>6} {:>6} {:>11} {:>7}\n", title, "cases", "pass", "fail", "error",
             "unsupported", "invalid");
  for (const auto& [name, t] : tallies)
    fmt::print("{:<40} {:>6} {:>6} {:>6} {:>6} {:>11} {:>7}\n", name, t.cases, t.pass, t.fail, t.error, t.unsupported,
               t.invalid);
}

struct CaseResult {
  std::string status;  // pass, fail, error, unsupported, invalid
  std::string detail;
};

// 16-bit floats compare as floats, with the float tolerances (ONNX's runner
// does the same); the 8- and 4-bit types compare exactly, decoded.
double element(const Tensor& t, int64_t i) { return element_as_double(t, i); }

// Empty string when equal within tolerance, else what differs.
std::string compare(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype()) return fmt::format("dtype {} != expected {}", dtype_name(got.dtype()), dtype_name(want.dtype()));
  if (got.shape() != want.shape()) return fmt::format("shape {} != expected {}", shape_str(got.shape()), shape_str(want.shape()));
  bool exact = !dtype_is_float(got.dtype());
  if (got.dtype() == DType::kString) {
    for (int64_t i = 0; i < got.numel(); ++i)
      if (got.data<std::string>()[i] != want.data<std::string>()[i])
        return fmt::format("element {}: got \"{}\" expected \"{}\"", i, got.data<std::string>()[i],
                           want.data<std::string>()[i]);
    return "";
  }
  if (got.dtype() == DType::kInt64 || got.dtype() == DType::kUInt64)
    return std::memcmp(got.raw(), want.raw(), got.nbytes()) == 0 ? "" : "integer values differ";
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = element(got, i), w = element(want, i);
    if (std::isnan(w) && std::isnan(g)) continue;
    bool ok = exact ? g == w : (g == w || std::fabs(g - w) <= kAtol + kRtol * std::fabs(w));
    if (!ok) return fmt::format("element {}: got {} expected {}", i, g, w);
  }
  return "";
}

// Sequences item by item; optionals: both empty, or their values alike.
std::string compare_value(const Tensor& got, const Tensor& want) {
  if (got.empty() || want.empty())
    return got.empty() == want.empty() ? "" : got.empty() ? "got an optional without a value" : "expected no value";
  if (got.is_sequence() != want.is_sequence())
    return got.is_sequence() ? "got a sequence, expected a tensor" : "got a tensor, expected a sequence";
  if (!got.is_sequence()) return compare(got, want);
  if (got.items().size() != want.items().size())
    return fmt::format("a sequence of {} tensors, expected {}", got.items().size(), want.items().size());
  for (size_t i = 0; i < got.items().size(); ++i)
    if (std::string diff = compare(got.items()[i], want.items()[i]); !diff.empty())
      return fmt::format("sequence item {}: {}", i, diff);
  return "";
}

// Outputs drawn at random (as ONNX's runner treats them): the same shape and
// type, finite values, and values within the expected values' range (0
// included) widened by its width on each side, since another draw keeps other
// elements (a training-mode Dropout) and so reaches other extremes.
std::string compare_random(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype()) return fmt::format("dtype {} != expected {}", dtype_name(got.dtype()), dtype_name(want.dtype()));
  if (got.shape() != want.shape()) return fmt::format("shape {} != expected {}", shape_str(got.shape()), shape_str(want.shape()));
  double lo = 0, hi = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    lo = std::min(lo, element(want, i));
    hi = std::max(hi, element(want, i));
  }
  const double slack = (hi - lo) + kAtol + kRtol * std::max(std::fabs(lo), std::fabs(hi));
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = element(got, i);
    if (!(g >= lo - slack && g <= hi + slack))
      return fmt::format("element {}: {} is outside the expected range [{}, {}]", i, g, lo, hi);
  }
  return "";
}

std::vector<fs::path> sorted_files(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) files.push_back(e.path());
  // input_10 after input_9: order by the number after the prefix.
  std::sort(files.begin(), files.end(), [&](const fs::path& a, const fs::path& b) {
    auto num = [&](const fs::path& p) {
      std::string s = p.stem().string().substr(prefix.size());
      return s.empty() ? 0L : std::strtol(s.c_str(), nullptr, 10);
    };
    return num(a) < num(b);
  });
  return files;
}

CaseResult run_case(const fs::path& dir, int threads) {
  SessionOptions opts;
  opts.num_threads = threads;
  std::optional<Session> session;
  try {
    session.emplace(Session::from_file((dir / "model.onnx").string(), opts));
  } catch (const Error& e) {
    return {e.kind() == ErrorKind::kUnsupported ? "unsupported" : "invalid", e.what()};
  }
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return {"error", "no test_data_set_* folder"};
  for (const fs::path& set : sets) {
    try {
      std::map<std::string, Tensor> inputs;
      std::vector<fs::path> in_files = sorted_files(set, "input_");
      for (size_t i = 0; i < in_files.size(); ++i) {
        std::string name;
        const bool declared = i < session->inputs().size();
        const ValueKind kind = declared ? session->inputs()[i].kind : ValueKind::kTensor;
        Tensor t = read_value_pb(in_files[i].string(), kind, declared ? session->inputs()[i].dtype : DType::kUndefined,
                                 &name);
        if (declared) name = session->inputs()[i].name;
        inputs[name] = std::move(t);
      }
      std::vector<Tensor> outputs = session->run(inputs);
      std::vector<fs::path> out_files = sorted_files(set, "output_");
      if (out_files.size() != outputs.size())
        return {"fail", fmt::format("{} outputs, expected {}", outputs.size(), out_files.size())};
      // Random outputs that match exactly (a Dropout of ratio 0) still count as plain passes.
      const bool random = session->draws_random_values();
      bool drawn = false;
      for (size_t i = 0; i < outputs.size(); ++i) {
        const ValueInfo& info = session->outputs()[i];
        const Tensor want = read_value_pb(out_files[i].string(), info.kind, info.dtype);
        std::string diff = compare_value(outputs[i], want);
        if (!diff.empty() && random) {
          diff = compare_random(outputs[i], want);
          drawn = true;
        }
        if (!diff.empty()) return {"fail", fmt::format("{}: output {}: {}", set.filename().string(), i, diff)};
      }
      if (drawn) return {"pass-random", "outputs drawn at random: checked for shape, type and range"};
    } catch (const Error& e) {
      return {e.kind() == ErrorKind::kUnsupported ? "unsupported" : "error", e.what()};
    }
  }
  return {"pass", ""};
}

// A case folder holds model.onnx; any other folder is searched one level down.
std::vector<fs::path> expand(const std::vector<std::string>& dirs) {
  std::vector<fs::path> cases;
  for (const std::string& d : dirs) {
    std::error_code ec;
    if (!fs::is_directory(d, ec)) throw Error(ErrorKind::kInvalidArgument, "'" + d + "' is not a folder");
    if (fs::exists(fs::path(d) / "model.onnx")) {
      cases.push_back(d);
      continue;
    }
    std::vector<fs::path> sub;
    for (const auto& e : fs::directory_iterator(d))
      if (e.is_directory() && fs::exists(e.path() / "model.onnx")) sub.push_back(e.path());
    if (sub.empty()) throw Error(ErrorKind::kInvalidArgument, "'" + d + "' holds no test case (no model.onnx)");
    std::sort(sub.begin(), sub.end());
    cases.insert(cases.end(), sub.begin(), sub.end());
  }
  return cases;
}

std::set<std::string> read_expect(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorKind::kInvalidArgument, "cannot read expectation file '" + path + "'");
  std::set<std::string> names;
  for (std::string line; std::getline(in, line);) {
    line.erase(0, line.find_first_not_of(" \t"));
    line.erase(line.find_last_not_of(" \t\r") + 1);
    if (!line.empty() && line[0] != '#') names.insert(line);
  }
  return names;
}

int conformance(const ConformanceArgs& a) {
  std::vector<fs::path> cases = expand(a.dirs);
  std::set<std::string> expected;
  if (!a.expect.empty()) expected = read_expect(a.expect);
  std::map<std::string, int> counts;
  nlohmann::json report = nlohmann::json::object();
  std::vector<std::string> regressions, newly_passing;
  std::map<std::string, Tally> per_folder, per_op;
  for (const fs::path& dir : cases) {
    std::string name = dir.filename().string();
    CaseResult r = run_case(dir, a.threads);
    ++counts[r.status];
    report[name] = r.status;
    if (a.summary) {
      per_folder[dir.parent_path().filename().string()].add(r.status);
      try {
        for (const std::string& op : model_operators((dir / "model.onnx").string())) per_op[op].add(r.status);
      } catch (const Error&) {
        per_op["(unreadable model)"].add(r.status);
      }
    }
    const bool passed = r.status == "pass" || r.status == "pass-random";
    if (!a.quiet || !passed)
      fmt::print("{:<11} {}{}\n", r.status.c_str(), name, r.detail.empty() ? "" : "  (" + r.detail + ")");
    bool listed = expected.count(name) != 0;
    if (listed && !passed) regressions.push_back(name);
    if (!a.expect.empty() && !listed && passed) newly_passing.push_back(name);
  }
  // Random-output cases pass on shape, type and range; they are counted apart.
  const int passes = counts["pass"] + counts["pass-random"];
  int failed = static_cast<int>(cases.size()) - passes;
  fmt::print("\n{} cases: {} pass ({} of them random outputs, checked by shape, type and range), {} fail, {} error, "
             "{} unsupported, {} invalid\n",
             cases.size(), passes, counts["pass-random"], counts["fail"], counts["error"], counts["unsupported"],
             counts["invalid"]);
  nlohmann::json doc{{"cases", report}};
  if (a.summary) {
    // A case counts once per folder, and once for every operator its model uses.
    print_tallies("folder", per_folder);
    print_tallies("operator (cases using it)", per_op);
    for (const auto& [name, t] : per_folder) doc["per_folder"][name] = t.json();
    for (const auto& [name, t] : per_op) doc["per_op"][name] = t.json();
  }
  if (!a.json.empty()) {
    std::ofstream out(a.json);
    if (!out) throw Error(ErrorKind::kInvalidArgument, "cannot write '" + a.json + "'");
    out << doc.dump(1) << "\n";
  }
  if (a.expect.empty()) {
    fmt::print("{} passed, {} failed\n", passes, failed);
    return failed ? 1 : 0;
  }
  for (const auto& n : newly_passing) fmt::print("newly passing (add to {}): {}\n", a.expect, n);
  for (const auto& n : regressions) fmt::print("REGRESSION: {} is in {} but does not pass\n", n, a.expect);
  int expected_run = static_cast<int>(expected.size());
  fmt::print("{} passed, {} failed\n", expected_run - static_cast<int>(regressions.size()),
             static_cast<int>(regressions.size()));
  return regressions.empty() ? 0 : 1;
}

}  // namespace

Command add_conformance(CLI::App& app) {
  auto a = std::make_shared<ConformanceArgs>();
  app.add_option("dirs", a->dirs, "case folders, or folders of case folders")->required();
  app.add_option("--expect", a->expect, "file listing the cases that must pass (one per line)");
  app.add_option("--json", a->json, "write {case: status} as JSON to FILE");
  app.add_option("-t,--threads", a->threads, "threads per case")->check(CLI::Range(1, 4096));
  app.add_flag("-q,--quiet", a->quiet, "print only the cases that do not pass");
  app.add_flag("--summary", a->summary, "print (and add to --json) the counts per folder and per operator");
  return [a] { return conformance(*a); };
}

}  // namespace anvil::cli
