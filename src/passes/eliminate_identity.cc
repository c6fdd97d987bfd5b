// Removes Identity nodes, Pad nodes whose pads are all zero (torchvision's
// DenseNet exports one before each transition's AveragePool), Casts to the
// type their input has (Hugging Face's GPT-2 casts its attention scores to
// their own float32 around the softmax), and Dropout whose mask nobody reads
// in inference mode or with a ratio of 0.
#include <algorithm>

#include "core/dtype_set.h"
#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

// Pads of zero on every side leave the data as it is, whatever the mode. A
// Pad that is not valid stays, for its kernel to judge (constant_pads).
bool pads_nothing(const ir::Node& pad) {
  const std::optional<std::vector<int64_t>> pads = constant_pads(pad);
  return pads && std::all_of(pads->begin(), pads->end(), [](int64_t v) { return v == 0; });
}

bool is_removable(const ir::Graph& graph, const ir::Node& n) {
  if (n.op_type == "Identity" && n.domain.empty()) return true;
  if (n.op_type == "Pad" && n.domain.empty()) return pads_nothing(n);
  if (n.op_type == "Cast" && n.domain.empty())  // `saturate` changes only casts into float8
    return n.input(0)->dtype() != DType::kUndefined && n.input(0)->dtype() == dtype_from_onnx_code(n.attrs.get_int("to", 0));
  if (n.op_type != "Dropout" || !n.domain.empty()) return false;
  const ir::Value* mask = n.output(1);
  if (mask && (mask->is_graph_output || use_count(graph, mask))) return false;
  // A ratio of 0 keeps every element, in training mode too (torchvision's
  // Swin exports its attention dropouts so: ratio 0, training_mode true).
  if (const std::optional<double> ratio = scalar_value(n.input(1)); ratio && *ratio == 0.0) return true;
  const ir::Value* training = n.input(2);  // opset 12+: a constant false is inference
  if (training && !(training->is_constant() && training->constant->numel() == 1 &&
                    !*training->constant->data<bool>()))
    return false;
  return true;
}

class EliminateIdentity : public Pass {
 public:
  std::string name() const override { return "eliminate_identity"; }
  bool run(ir::Graph& graph) override {
    bool changed = false;
    for (const auto& n : graph.nodes()) {
      if (n->dead || !n->input(0) || !n->output(0) || !is_removable(graph, *n)) continue;
      ir::Value* in = n->input(0);
      ir::Value* out = n->output(0);
      // Keep the node when both ends are graph boundaries: an output must stay a distinct value.
      if (out->is_graph_output && (in->is_graph_output || in->is_graph_input || in->is_constant())) continue;
      if (out->is_graph_output) {
        // Rename so the graph output keeps its name: the producer now writes `out` directly.
        if (in->producer && used_once(graph, in)) {
          for (ir::Value*& o : in->producer->outputs)
            if (o == in) o = out;
          out->producer = in->producer;
          n->dead = true;
          changed = true;
        }
        continue;
      }
      graph.replace_uses(out, in);
      n->dead = true;
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_eliminate_identity() { return std::make_unique<EliminateIdentity>(); }

}  // namespace anvil::passes
