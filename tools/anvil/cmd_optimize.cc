// anvil optimize: the graph after Anvil's passes, as an ONNX file that Anvil
// (and, without com.anvil nodes, any ONNX runtime) runs.
#include <fmt/format.h>

#include "anvil/model_info.h"
#include "commands.h"

namespace anvil::cli {

Command add_optimize(CLI::App& app) {
  auto in = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto level = std::make_shared<int>(3);
  app.add_option("model", *in, "ONNX file to optimize")->required();
  app.add_option("output", *out, "where to write the optimized ONNX file")->required();
  app.add_option("-O,--opt-level", *level, "graph optimization level 0-3 (default 3)")->check(CLI::Range(0, 3));
  return [in, out, level] {
    OptimizeResult r = optimize_model(*in, *out, *level);
    fmt::print("wrote {}: {} nodes -> {} nodes (level {})\n", *out, r.nodes_before, r.nodes_after, *level);
    for (const auto& [op, count] : r.ops) fmt::print("  {:<28}{}\n", op, count);
    return 0;
  };
}

}  // namespace anvil::cli
