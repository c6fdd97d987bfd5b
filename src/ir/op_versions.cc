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

const std::map<std::string, std::vector<int>>& type_only_table() {
  static const std::map<std::string, std::vector<int>> table = {
#include "ir/onnx_type_only_versions.inc"
  };
  return table;
}

}  // namespace

bool onnx_version_widens_types_only(const std::string& op, int version) {
  auto it = type_only_table().find(op);
  if (it == type_only_table().end()) return false;
  for (int v : it->second)
    if (v == version) return true;
  return false;
}

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
