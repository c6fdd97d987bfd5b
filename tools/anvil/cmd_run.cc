// anvil run MODEL [-i NAME=FILE]... [--case DIR]... [-o DIR]: inferences on one
// session, outputs as .pb files.
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "anvil/error.h"
#include "anvil/tensor_io.h"
#include "commands.h"

namespace anvil::cli {

namespace {

struct RunArgs {
  std::string model;
  std::vector<std::string> inputs;
  std::vector<std::string> shapes;
  std::vector<std::string> cases;
  std::string out_dir;
  int threads = 0;
  uint64_t seed = 0;
  int opt_level = 3;
  bool show_plan = false;
  bool tune = false;
  std::string tune_cache;
};

std::string file_name_for(const std::string& name) {
  std::string s = name;
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  return s.empty() ? "output" : s;
}

void write_outputs(const Session& session, const std::vector<Tensor>& outputs, const std::string& out_dir) {
  if (!out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    if (ec) throw Error(ErrorKind::kInvalidArgument, fmt::format("cannot create output folder '{}': {}", out_dir, ec.message()));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string& name = session.outputs()[i].name;
    std::string where;
    if (!out_dir.empty()) {
      where = (std::filesystem::path(out_dir) / (file_name_for(name) + ".pb")).string();
      write_value_pb(where, outputs[i], name, session.outputs()[i].kind);
    }
    const Tensor& o = outputs[i];
    const std::string shape = o.empty()         ? "(no value)"
                              : o.is_sequence() ? fmt::format("sequence of {}", o.items().size())
                                                : shape_str(o.shape());
    fmt::print("output {:<24} {:<8} {:<20} {}\n", name, o.empty() ? "-" : dtype_name(o.dtype()), shape, where);
  }
}

// One inference; returns its time in ms.
double run_once(const Session& session, const std::map<std::string, Tensor>& inputs, bool show_plan,
                const std::string& out_dir) {
  if (show_plan)
    for (const std::string& line : session.describe_plan(inputs)) fmt::print("  {}\n", line);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Tensor> outputs = session.run(inputs);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  write_outputs(session, outputs, out_dir);
  return ms;
}

int run(const RunArgs& a) {
  if (!a.cases.empty() && !(a.inputs.empty() && a.shapes.empty()))
    throw Error(ErrorKind::kInvalidArgument, "--case cannot be combined with -i or --shape");
  SessionOptions opts;
  opts.num_threads = a.threads;
  opts.optimization_level = a.opt_level;
  opts.tune = a.tune;
  opts.tune_cache = a.tune_cache;
  Session session = load_session(a.model, opts);
  if (a.cases.empty()) {
    double ms = run_once(session, random_inputs(session, read_inputs(session, a.inputs), a.seed, 1, a.shapes), a.show_plan,
                         a.out_dir);
    fmt::print("time: {:.3f} ms (first run, includes planning)\n", ms);
    print_tuning(session);
    return 0;
  }
  // Every case runs on the one session: plans are made per distinct input shape.
  for (size_t c = 0; c < a.cases.size(); ++c) {
    std::string name = std::filesystem::path(a.cases[c]).filename().string();
    if (name.empty()) name = std::filesystem::path(a.cases[c]).parent_path().filename().string();
    std::string dir = a.out_dir.empty() ? "" : (std::filesystem::path(a.out_dir) / std::to_string(c)).string();
    fmt::print("case {} ({})\n", c, a.cases[c]);
    double ms = run_once(session, read_case_inputs(session, a.cases[c]), a.show_plan, dir);
    fmt::print("time: {:.3f} ms\n", ms);
  }
  fmt::print("{} cases, {} plans cached\n", a.cases.size(), session.cached_plans());
  print_tuning(session);
  return 0;
}

}  // namespace

Command add_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  app.add_option("model", a->model, "ONNX file or zoo:NAME")->required();
  app.add_option("-i,--input", a->inputs, "NAME=FILE (.pb TensorProto or .npy); missing inputs get random data");
  app.add_option("--shape", a->shapes, "NAME=1x128: shape of a random input (symbolic dimensions)");
  app.add_option("--case", a->cases, "a folder of inputs (NAME.npy or named .pb files); repeat to run several on one "
                 "session, outputs then go to DIR/<case index>/");
  app.add_option("-o,--output-dir", a->out_dir, "write each output to DIR/<output name>.pb");
  app.add_option("-t,--threads", a->threads, "threads (0: all cores)")->check(CLI::Range(0, 4096));
  app.add_option("--seed", a->seed, "seed of the random inputs");
  app.add_option("-O,--opt-level", a->opt_level, "graph optimization level 0-3 (3: blocked layouts between nodes)")->check(CLI::Range(0, 3));
  add_tune_options(app, &a->tune, &a->tune_cache);
  app.add_flag("--plan", a->show_plan, "print the kernel chosen for each node");
  return [a] { return run(*a); };
}

}  // namespace anvil::cli
