#include "ir/op_versions.h"

#include <map>

namespace anvil::ir {

namespace {

const std::map<std::string, std::vector<int>>& history_table() {
  static const std::map<std::string, std::vector<int>> table = {
#include "ir/onnx_op_versions.inc"
  };
  return table;
}

}  // namespace

const std::vector<int>& onnx_op_history(const std::string& op) {
  static const std::vector<int> none;
  auto it = history_table().find(op);
  return it == history_table().end() ? none : it->second;
}

int onnx_op_version(const std::string& op, int opset) {
  int version = 0;
  for (int v : onnx_op_history(op))
    if (v <= opset) version = v;
  return version;
}

}  // namespace anvil::ir
