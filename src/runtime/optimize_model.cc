// anvil::optimize_model: import, the graph passes, ONNX export (`anvil optimize`).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "anvil/model_info.h"
#include "core/check.h"
#include "ir/schema.h"
#include "kernels/registry.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "passes/pipeline.h"
#include "runtime/constant_evaluator.h"
#include "runtime/kernel_support.h"
#include "runtime/type_propagation.h"

namespace anvil {

namespace {

size_t live_nodes(const ir::Graph& g) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += !node->dead;
  return n;
}

void write_whole(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    ANVIL_CHECK(out.good(), ErrorKind::kInvalidArgument, "cannot write '{}'", path);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out.good()) {
      std::remove(tmp.c_str());
      fail(ErrorKind::kInvalidArgument, "cannot write '{}' (disk full?)", path);
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    fail(ErrorKind::kInvalidArgument, "cannot write '{}': {}", path, ec.message());
  }
}

}  // namespace

OptimizeResult optimize_model(const std::string& in, const std::string& out, int level) {
  ANVIL_CHECK(level >= 0 && level <= 3, ErrorKind::kInvalidArgument, "optimization level must be 0 to 3, got {}", level);
  std::unique_ptr<ir::Graph> graph = onnx_io::import_model_file(in, runtime::kernel_support);
  OptimizeResult result;
  result.nodes_before = live_nodes(*graph);
  ir::infer_types(*graph);
  runtime::propagate_types(*graph);
  passes::optimize(*graph, level, runtime::reference_evaluator());
  result.nodes_after = live_nodes(*graph);
  std::map<std::string, size_t> ops;
  for (const auto& n : graph->nodes())
    if (!n->dead) ++ops[n->domain.empty() ? n->op_type : n->domain + "." + n->op_type];
  result.ops.assign(ops.begin(), ops.end());
  write_whole(out, onnx_io::export_model(*graph));
  return result;
}

}  // namespace anvil
