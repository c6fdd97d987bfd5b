// GroupNorm as PyTorch exports it, an InstanceNormalization over the
// channels folded into groups, becomes one GroupNormalization (opset 21:
// scale and bias per channel):
//
//   Reshape(InstanceNormalization(Reshape(x [N, C, S...], [N, G, L]), s, b), x's shape)
//     =>  GroupNormalization(x, s[c / (C / G)], b[c / (C / G)], num_groups = G)
//
// Apart, the Reshapes need plain data, so a network whose convolutions keep
// their own layouts (PoolFormer's GroupNorm(1, C) before every token mixer
// and MLP) reordered to plain and back around each normalization; the one
// node runs in the layout it arrives in (kernels/dnnl/instance_norm.cc),
// and fold_instance_norm_affine then takes the per-channel Mul and Add
// after it. A late pass, so that the shapes have folded. Shapes come from
// inference from the graph's inputs (ir::infer_run_time_facts), not from
// types a file declares.
#include <vector>

#include "ir/schema.h"
#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

// G when `folded` is x [N, C, S...] folded to [N, G, L] with G dividing C; 0 otherwise.
int64_t groups_of(const ir::Type& x, const ir::Type& folded) {
  if (!x.has_shape() || x.rank() < 3 || !folded.has_shape() || folded.rank() != 3) return 0;
  const ir::SymShape &xd = x.dims(), &fd = folded.dims();
  if (!surely_same_dim(xd[0], fd[0]) || !xd[1].is_known() || !fd[1].is_known()) return 0;
  const int64_t channels = xd[1].value, groups = fd[1].value;
  return groups >= 1 && channels >= groups && channels % groups == 0 ? groups : 0;
}

// Each group's value repeated for its channels: [G] -> [C].
ir::Value* per_channel(ir::Graph& graph, const ir::Value* per_group, int64_t channels, const std::string& name) {
  const Tensor& g = *per_group->constant;
  const int64_t per = channels / g.numel();
  Tensor t(DType::kFloat32, {channels});
  for (int64_t c = 0; c < channels; ++c) t.data<float>()[c] = g.data<float>()[c / per];
  return graph.add_constant(graph.unique_name(name), std::move(t));
}

class FuseGroupNorm : public Pass {
 public:
  std::string name() const override { return "fuse_group_norm"; }
  bool run(ir::Graph& graph) override {
    const ir::InferredFacts facts = ir::infer_run_time_facts(graph);  // the rewrite keeps every value's meaning
    return rewrite_each_node(graph, [&](ir::Node& unfold) {
      if (!is_op(&unfold, "Reshape") || !unfold.output(0)) return false;
      ir::Node* norm = producer_op(unfold.input(0), "InstanceNormalization");
      if (!norm || !used_once(graph, norm->output(0))) return false;
      ir::Node* fold = producer_op(norm->input(0), "Reshape");
      if (!fold || !used_once(graph, fold->output(0))) return false;
      ir::Value* x = fold->input(0);
      if (!x || x->dtype() != DType::kFloat32) return false;
      const ir::Type &xt = facts.type_of(x), &folded = facts.type_of(fold->output(0));
      if (!surely_same_shape(facts.type_of(unfold.output(0)), xt)) return false;
      const int64_t groups = groups_of(xt, folded);
      if (!groups || !is_float_vector(norm->input(1), groups) || !is_float_vector(norm->input(2), groups)) return false;
      const int64_t channels = xt.dims()[1].value;
      ir::Value* scale = per_channel(graph, norm->input(1), channels, unfold.name + "/scale");
      ir::Value* bias = per_channel(graph, norm->input(2), channels, unfold.name + "/bias");
      const float epsilon = norm->attrs.get_float("epsilon", 1e-5f);
      unfold.op_type = "GroupNormalization";
      unfold.domain = "";
      unfold.opset = 21;  // scale and bias per channel; the model's opset stays
      unfold.attrs = {};
      unfold.attrs.set("num_groups", groups);
      unfold.attrs.set("epsilon", epsilon);
      unfold.inputs = {x, scale, bias};
      norm->dead = true;
      fold->dead = true;
      return true;
    });
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_group_norm() { return std::make_unique<FuseGroupNorm>(); }

}  // namespace anvil::passes
