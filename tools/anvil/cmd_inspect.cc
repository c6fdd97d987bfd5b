// anvil inspect: a model's inputs and outputs with the types Anvil infers
// (symbolic dims named after the model's, e.g. float32[batch,sequence,768]).
#include <fmt/format.h>

#include "commands.h"

namespace anvil::cli {

namespace {

std::string type_str(const ValueInfo& v) {
  if (v.dtype == DType::kUndefined && v.shape.empty()) return "?";
  std::string s = v.dtype == DType::kUndefined ? "?" : dtype_name(v.dtype);
  if (!v.rank_known) return s + "[...]";
  s += "[";
  for (size_t i = 0; i < v.shape.size(); ++i) {
    if (i) s += ",";
    if (v.shape[i] >= 0) s += std::to_string(v.shape[i]);
    else s += i < v.dim_names.size() && !v.dim_names[i].empty() ? v.dim_names[i] : "?";
  }
  return s + "]";
}

}  // namespace

Command add_inspect(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  app.add_option("model", *model, "ONNX file")->required();
  return [model] {
    SessionOptions options;
    options.optimization_level = 0;
    Session session = load_session(*model, options);
    size_t width = 8;
    for (const auto* list : {&session.inputs(), &session.outputs()})
      for (const ValueInfo& v : *list) width = std::max(width, v.name.size() + 2);
    fmt::print("inputs:\n");
    for (const ValueInfo& v : session.inputs()) fmt::print("  {:<{}}{}\n", v.name, width, type_str(v));
    fmt::print("outputs:\n");
    for (const ValueInfo& v : session.outputs()) fmt::print("  {:<{}}{}\n", v.name, width, type_str(v));
    return 0;
  };
}

}  // namespace anvil::cli
