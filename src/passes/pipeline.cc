#include "passes/pipeline.h"

#include "core/check.h"
#include "ir/schema.h"
#include "ir/verify.h"

namespace anvil::passes {

size_t use_count(const ir::Graph& graph, const ir::Value* v) {
  size_t n = 0;
  for (const auto& node : graph.nodes())
    if (!node->dead)
      for (const ir::Value* in : node->inputs) n += in == v;
  return n;
}

bool used_once(const ir::Graph& graph, const ir::Value* v) { return !v->is_graph_output && use_count(graph, v) == 1; }

bool rewrite_each_node(ir::Graph& graph, const std::function<bool(ir::Node&)>& rewrite_at) {
  bool changed = false;
  const size_t count = graph.nodes().size();
  for (size_t i = 0; i < count; ++i) changed |= rewrite_at(*graph.nodes()[i]);
  return changed;
}

ir::Node* single_consumer(const ir::Graph& graph, const ir::Value* v) {
  if (!used_once(graph, v)) return nullptr;
  for (const auto& node : graph.nodes())
    if (!node->dead)
      for (const ir::Value* in : node->inputs)
        if (in == v) return node.get();
  return nullptr;
}

Tensor& writable_constant(ir::Graph& graph, ir::Node& node, size_t index) {
  ir::Value* v = node.inputs.at(index);
  ANVIL_INTERNAL_CHECK(v && v->is_constant());
  const bool own = !v->is_graph_input && !v->is_graph_output && !v->is_capture && v->constant->use_count() == 1 &&
                   use_count(graph, v) == 1;
  if (!own) node.inputs[index] = v = graph.add_constant(graph.unique_name(v->name + "_rewritten"), v->constant->clone());
  return *v->constant;
}

void become_constant(ir::Value& v, Tensor t) {
  v.type = ir::Type::tensor(t.dtype(), t.shape());
  v.constant = std::move(t);
  v.producer = nullptr;
}

std::vector<std::unique_ptr<Pass>> passes_for_level(int level, const ConstantEvaluator& evaluator) {
  ANVIL_CHECK(level >= 0 && level <= 3, ErrorKind::kInvalidArgument, "optimization level must be 0 to 3, got {}",
              level);
  std::vector<std::unique_ptr<Pass>> passes;
  if (level >= 1) {
    passes.push_back(make_eliminate_identity());
    passes.push_back(make_fold_shapes());
    passes.push_back(make_shape_of_shuffle(false));
    passes.push_back(make_fold_constants(evaluator));
    passes.push_back(make_inline_constant_if());  // after them: they settle its condition
    passes.push_back(make_eliminate_common_subexpressions());
    passes.push_back(make_dead_code());
  }
  if (level >= 2) {
    passes.push_back(make_fold_pad());
    passes.push_back(make_conv_transpose_as_depth_to_space());
    passes.push_back(make_fuse_conv_batchnorm());
    passes.push_back(make_fold_linear_batchnorm());  // before fuse_matmul, which takes its Add as a bias
    passes.push_back(make_fuse_layer_norm());
    passes.push_back(make_fuse_rms_norm());  // after it: a LayerNorm's variance is a mean of squares too
    // After fuse_layer_norm (an instance norm's means over the plane are its) and
    // before fuse_squeeze_excite, which takes the pools.
    passes.push_back(make_global_pool_from_reduce_mean());
    passes.push_back(make_fuse_gelu());  // before the fusions that take it as a post-op
    passes.push_back(make_fuse_swish());  // likewise
    passes.push_back(make_fuse_conv_activation());
    passes.push_back(make_fuse_batchnorm_activation());  // after fuse_conv_batchnorm: the BNs it cannot fold
    passes.push_back(make_fuse_squeeze_excite());  // after fuse_conv_activation: it takes the convolutions' activations
    passes.push_back(make_fuse_channel_shuffle());
    passes.push_back(make_fuse_matmul());
    passes.push_back(make_fuse_relu_grad());
    passes.push_back(make_fuse_bias_grad());  // after it: it takes the GemmReluGrads that pass makes
    passes.push_back(make_fuse_head_grad());  // likewise
    passes.push_back(make_fuse_attention());
    passes.push_back(make_fuse_sequence_first_attention());
    passes.push_back(make_fuse_folded_heads_attention());
    passes.push_back(make_fuse_head_attention());  // after the three above: what their patterns leave
  }
  return passes;
}

std::vector<std::unique_ptr<Pass>> late_passes_for_level(int level, const FusionAdvisor& advisor) {
  std::vector<std::unique_ptr<Pass>> passes;
  if (level >= 1) {
    passes.push_back(make_simplify_reshapes());
    passes.push_back(make_shape_of_shuffle(true));
    passes.push_back(make_eliminate_identity());
    passes.push_back(make_dead_code());
  }
  if (level >= 2) {
    // First: it reads the loss gradient's Sub and Mul, which the elementwise chains would take.
    if (advisor) passes.push_back(make_fuse_two_class_gate_grad(advisor));
    passes.push_back(make_fuse_group_norm());  // late: once the shapes have folded
    passes.push_back(make_fold_instance_norm_affine());  // late: once the identity Reshapes around it are gone
    passes.push_back(make_fold_matmul_transpose());
    passes.push_back(make_fuse_shared_input_matmuls());
    passes.push_back(make_fuse_qkv_attention());  // after it: it takes the Splits that pass makes
    passes.push_back(make_fuse_masked_softmax());
    passes.push_back(make_fuse_elementwise_chain());
    if (advisor) passes.push_back(make_fuse_conv_depthwise(advisor));
    passes.push_back(make_eliminate_common_subexpressions());  // the shape arithmetic the fusions repeat
    passes.push_back(make_dead_code());
  }
  if (level >= 3) passes.push_back(make_tokens_as_image());
  if (level >= 3 && advisor) passes.push_back(make_channels_last_before_split(advisor));  // where the image arrives in a layout
  return passes;
}

namespace {

// Runs `passes` in turn until none changes the graph; returns the rounds run.
int run_to_fixed_point(ir::Graph& graph, std::vector<std::unique_ptr<Pass>>& passes) {
  constexpr int kMaxRounds = 16;
  int round = 0;
  for (bool changed = !passes.empty(); changed && round < kMaxRounds; ++round) {
    changed = false;
    for (auto& pass : passes) {
      if (pass->run(graph)) {
        changed = true;
        graph.compact();
        graph.topological_sort();  // a fused node may now read a value produced later in the old order
        if (ir::verification_enabled()) ir::verify(graph, ErrorKind::kInternal, "after pass " + pass->name());
      }
    }
  }
  return round;
}

}  // namespace

int optimize(ir::Graph& graph, int level, const ConstantEvaluator& evaluator, const FusionAdvisor& advisor) {
  int rounds = 0;
  if (level >= 2) {
    // Folding settles values that inference at import could not see (the
    // shape of torchvision ViT's class-token Expand, computed from
    // constants by ConstantOfShape, Mul, Equal and Where): everything after
    // it had no known rank, and the fusions match only values that have one.
    // So the types are inferred again before them.
    auto basic = passes_for_level(1, evaluator);
    rounds += run_to_fixed_point(graph, basic);
    ir::refine_types(graph);
  }
  auto passes = passes_for_level(level, evaluator);
  auto late = late_passes_for_level(level, advisor);
  rounds += run_to_fixed_point(graph, passes);
  return rounds + run_to_fixed_point(graph, late);
}

}  // namespace anvil::passes
