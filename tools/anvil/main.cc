// anvil — run, benchmark and check ONNX models on the CPU.
#include <cstdio>
#include <exception>

#include "anvil/error.h"
#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"anvil: a CPU inference engine for ONNX models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "anvil 0.1.0");
  std::vector<std::pair<CLI::App*, anvil::cli::Command>> commands;
  auto add = [&](const char* name, const char* help, anvil::cli::Command (*fn)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    commands.emplace_back(sub, fn(*sub));
  };
  add("info", "CPU, ISA extensions and the kernels Anvil will use", anvil::cli::add_info);
  add("run", "run a model once and write its outputs", anvil::cli::add_run);
  add("bench", "measure latency, throughput and memory of a model", anvil::cli::add_bench);
  add("conformance", "run ONNX backend test cases", anvil::cli::add_conformance);
  add("inspect", "a model's inputs and outputs with their inferred (symbolic) types", anvil::cli::add_inspect);
  add("optimize", "write the graph after Anvil's passes as an ONNX file", anvil::cli::add_optimize);
  add("serve", "serve models over HTTP (KServe v2 protocol)", anvil::cli::add_serve);
  add("train", "train an ONNX classifier's weights on .npy data", anvil::cli::add_train);

  auto known = [&](const std::string& name) {
    for (const auto& c : commands)
      if (c.first->get_name() == name) return true;
    return false;
  };
  if (argc > 1 && argv[1][0] != '-' && !known(argv[1])) {
    std::fprintf(stderr, "anvil: error: unknown command '%s' (commands: info, run, bench, conformance, inspect, optimize, serve, train)\n", argv[1]);
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    std::fprintf(stderr, "anvil: error: %s (see 'anvil --help')\n", msg.c_str());
    return 1;
  }
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run();
  } catch (const anvil::Error& e) {
    std::fprintf(stderr, "anvil: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "anvil: error: out of memory\n");
    return 5;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "anvil: error: internal error: %s\n", e.what());
    return 6;
  }
  return 1;
}
