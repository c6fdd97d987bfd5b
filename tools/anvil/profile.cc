// Per-node profile of `anvil bench --profile`: a table per node and per op
// type, and a Chrome trace (chrome://tracing, Perfetto) of the profiled runs.
#include <algorithm>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anvil/error.h"
#include "commands.h"

namespace anvil::cli {

namespace {

struct NodeTotals {
  const NodeProfile* first = nullptr;  // names, impl, layout, shape
  double total_us = 0;
};

std::string truncated(const std::string& s, size_t width) {
  return s.size() <= width ? s : s.substr(0, width - 1) + "~";
}

}  // namespace

void print_profile(const std::vector<RunProfile>& runs, const char* unit) {
  if (runs.empty() || runs.front().nodes.empty()) {
    fmt::print("profile: no kernels run (every node was folded at plan time)\n");
    return;
  }
  // Steps run in the same order every run (dynamic steps included).
  const size_t steps = runs.front().nodes.size();
  std::vector<NodeTotals> nodes(steps);
  double run_total = 0;
  for (const RunProfile& r : runs) {
    run_total += r.total_us;
    for (size_t i = 0; i < steps && i < r.nodes.size(); ++i) {
      if (!nodes[i].first) nodes[i].first = &r.nodes[i];
      nodes[i].total_us += r.nodes[i].duration_us;
    }
  }
  const double n = static_cast<double>(runs.size());
  const double mean_run_ms = run_total / n / 1000.0;
  fmt::print("\nper-node profile: mean of {} {}{}, {:.3f} ms per {}\n", runs.size(), unit, runs.size() == 1 ? "" : "s",
             mean_run_ms, unit);
  fmt::print("{:<36} {:<16} {:<28} {:<18} {:<18} {:>9} {:>6}\n", "node", "op", "implementation", "layout",
             "output shape", "mean ms", "share");
  for (const NodeTotals& t : nodes) {
    const NodeProfile& p = *t.first;
    double ms = t.total_us / n / 1000.0;
    fmt::print("{:<36} {:<16} {:<28} {:<18} {:<18} {:>9.4f} {:>5.1f}%\n", truncated(p.node, 36), truncated(p.op, 16),
               truncated(p.impl, 28), truncated(p.layout, 18), truncated(shape_str(p.output_shape), 18), ms,
               100.0 * ms / mean_run_ms);
  }
  std::map<std::string, std::pair<int, double>> by_op;
  for (const NodeTotals& t : nodes) {
    auto& [count, us] = by_op[t.first->op];
    ++count;
    us += t.total_us;
  }
  std::vector<std::pair<std::string, std::pair<int, double>>> ops(by_op.begin(), by_op.end());
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  fmt::print("\nby op type\n{:<20} {:>6} {:>10} {:>7}\n", "op", "nodes", "mean ms", "share");
  for (const auto& [op, v] : ops) {
    double ms = v.second / n / 1000.0;
    fmt::print("{:<20} {:>6} {:>10.4f} {:>6.1f}%\n", op, v.first, ms, 100.0 * ms / mean_run_ms);
  }
}

void write_chrome_trace(const std::vector<RunProfile>& runs, const std::string& path) {
  nlohmann::json events = nlohmann::json::array();
  double offset = 0;
  for (size_t r = 0; r < runs.size(); ++r) {
    events.push_back({{"name", fmt::format("run {}", r)}, {"cat", "run"}, {"ph", "X"}, {"pid", 1}, {"tid", 1},
                      {"ts", offset}, {"dur", runs[r].total_us}});
    for (const NodeProfile& p : runs[r].nodes)
      events.push_back({{"name", p.node},
                        {"cat", p.op},
                        {"ph", "X"},
                        {"pid", 1},
                        {"tid", 2},
                        {"ts", offset + p.start_us},
                        {"dur", p.duration_us},
                        {"args", {{"op", p.op}, {"impl", p.impl}, {"layout", p.layout},
                                  {"output_shape", shape_str(p.output_shape)}}}});
    offset += runs[r].total_us + 10;  // a small gap between runs
  }
  nlohmann::json trace = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  std::ofstream out(path);
  if (!out) throw Error(ErrorKind::kInvalidArgument, "cannot write '" + path + "'");
  out << trace.dump() << "\n";
  if (!out) throw Error(ErrorKind::kInvalidArgument, "cannot write '" + path + "'");
}

}  // namespace anvil::cli
