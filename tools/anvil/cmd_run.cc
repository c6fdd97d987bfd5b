// anvil run MODEL [-i NAME=FILE]... [-o DIR]: one inference, outputs as .pb files.
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
  std::string out_dir;
  int threads = 0;
  uint64_t seed = 0;
  int opt_level = 2;
  bool show_plan = false;
};

std::string file_name_for(const std::string& name) {
  std::string s = name;
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  return s.empty() ? "output" : s;
}

int run(const RunArgs& a) {
  SessionOptions opts;
  opts.num_threads = a.threads;
  opts.optimization_level = a.opt_level;
  Session session = load_session(a.model, opts);
  std::map<std::string, Tensor> inputs = random_inputs(session, read_inputs(a.inputs), a.seed);
  if (a.show_plan)
    for (const std::string& line : session.describe_plan(inputs)) fmt::print("  {}\n", line);

  auto t0 = std::chrono::steady_clock::now();
  std::vector<Tensor> outputs = session.run(inputs);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  if (!a.out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.out_dir, ec);
    if (ec) throw Error(ErrorKind::kInvalidArgument, fmt::format("cannot create output folder '{}': {}", a.out_dir, ec.message()));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string& name = session.outputs()[i].name;
    std::string where;
    if (!a.out_dir.empty()) {
      where = (std::filesystem::path(a.out_dir) / (file_name_for(name) + ".pb")).string();
      write_tensor_pb(where, outputs[i], name);
    }
    fmt::print("output {:<24} {:<8} {:<20} {}\n", name, dtype_name(outputs[i].dtype()), shape_str(outputs[i].shape()),
               where);
  }
  fmt::print("time: {:.3f} ms (first run, includes planning)\n", ms);
  return 0;
}

}  // namespace

Command add_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  app.add_option("model", a->model, "ONNX file or zoo:NAME")->required();
  app.add_option("-i,--input", a->inputs, "NAME=FILE (.pb TensorProto or .npy); missing inputs get random data");
  app.add_option("-o,--output-dir", a->out_dir, "write each output to DIR/<output name>.pb");
  app.add_option("-t,--threads", a->threads, "threads (0: all cores)")->check(CLI::Range(0, 4096));
  app.add_option("--seed", a->seed, "seed of the random inputs");
  app.add_option("-O,--opt-level", a->opt_level, "graph optimization level 0-2")->check(CLI::Range(0, 2));
  app.add_flag("--plan", a->show_plan, "print the kernel chosen for each node");
  return [a] { return run(*a); };
}

}  // namespace anvil::cli
