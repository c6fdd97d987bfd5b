// The optimization levels and the passes each one runs.
//   0: nothing
//   1: cleanup — identity elimination, shape folding (known elements of
//      shapes under symbolic dims; Shapes read before Transposes, and late before Reshapes), constant folding, common-subexpression
//      elimination, dead code; then, late, Transpose / Reshape elimination
//   2: + fusions — Conv+BatchNorm, GELU, Swish (x * sigmoid(x)), Conv/MatMul
//      + bias + residual Add + activation (oneDNN post-ops), multi-head
//      attention, LayerNormalization;
//      then, once those have settled, an InstanceNormalization's affine Mul
//      and Add folded into its scale and bias (once the identity Reshapes
//      around it are gone), transposes folded into the matmuls
//      that read them, products of one input by several weights as one
//      (a layer's Q, K and V projections), the Softmax of a masked sum (late, so that the
//      attention fusion sees its Add + Softmax first) and chains of
//      element-wise ops (late, so they take only what no other fusion did),
//      and, where the advisor says it pays, a 1x1 convolution with the
//      depthwise 3x3 after it (late, once both carry their activations)
//   3: + layouts (the planner keeps the convolutions' blocked layouts between
//      nodes); late, a Reshape splitting an image's channels with a Transpose
//      moving the split's inner part last becomes the channels moved last
//      first, which reads those layouts as they are (where the advisor says
//      the image arrives in one)
//   Late passes run after the others reach a fixed point, so the fusions see
//   the exporter's shuffles as it wrote them.
#pragma once

#include <memory>
#include <vector>

#include "passes/pass.h"

namespace anvil::passes {

std::vector<std::unique_ptr<Pass>> passes_for_level(int level, const ConstantEvaluator& evaluator);
// The passes that run after the level's others have reached a fixed point.
std::vector<std::unique_ptr<Pass>> late_passes_for_level(int level, const FusionAdvisor& advisor = {});
// Runs the level's passes until none changes the graph, then the late ones
// likewise; returns the rounds run. `advisor` (may be empty) decides the
// fusions that pay only on some machines.
int optimize(ir::Graph& graph, int level, const ConstantEvaluator& evaluator, const FusionAdvisor& advisor = {});

std::unique_ptr<Pass> make_eliminate_identity();
std::unique_ptr<Pass> make_channels_last_before_split(FusionAdvisor advisor);
std::unique_ptr<Pass> make_fold_shapes();
// Shapes read before Transposes; with `reshapes` also Shapes of Reshapes as their targets.
std::unique_ptr<Pass> make_shape_of_shuffle(bool reshapes);
std::unique_ptr<Pass> make_fold_constants(ConstantEvaluator evaluator);
// An If of a constant condition as the nodes of the branch it takes.
std::unique_ptr<Pass> make_inline_constant_if();
std::unique_ptr<Pass> make_simplify_reshapes();
std::unique_ptr<Pass> make_fold_matmul_transpose();
std::unique_ptr<Pass> make_fuse_shared_input_matmuls();
std::unique_ptr<Pass> make_fuse_qkv_attention();
std::unique_ptr<Pass> make_eliminate_common_subexpressions();
std::unique_ptr<Pass> make_dead_code();
std::unique_ptr<Pass> make_fold_pad();
std::unique_ptr<Pass> make_global_pool_from_reduce_mean();
std::unique_ptr<Pass> make_fuse_conv_batchnorm();
std::unique_ptr<Pass> make_fold_linear_batchnorm();
std::unique_ptr<Pass> make_fold_instance_norm_affine();
std::unique_ptr<Pass> make_fuse_conv_activation();
std::unique_ptr<Pass> make_fuse_batchnorm_activation();
std::unique_ptr<Pass> make_fuse_squeeze_excite();
std::unique_ptr<Pass> make_fuse_channel_shuffle();
std::unique_ptr<Pass> make_tokens_as_image();
std::unique_ptr<Pass> make_fuse_group_norm();
std::unique_ptr<Pass> make_fuse_gelu();
std::unique_ptr<Pass> make_fuse_swish();
std::unique_ptr<Pass> make_fuse_matmul();
std::unique_ptr<Pass> make_fuse_relu_grad();
std::unique_ptr<Pass> make_fuse_bias_grad();
std::unique_ptr<Pass> make_fuse_head_grad();
std::unique_ptr<Pass> make_fuse_attention();
std::unique_ptr<Pass> make_fuse_sequence_first_attention();
std::unique_ptr<Pass> make_fuse_folded_heads_attention();
std::unique_ptr<Pass> make_fuse_head_attention();
std::unique_ptr<Pass> make_fuse_rms_norm();
std::unique_ptr<Pass> make_conv_transpose_as_depth_to_space();
std::unique_ptr<Pass> make_fuse_layer_norm();
std::unique_ptr<Pass> make_fuse_masked_softmax();
std::unique_ptr<Pass> make_fuse_elementwise_chain();
std::unique_ptr<Pass> make_fuse_conv_depthwise(FusionAdvisor advisor);
std::unique_ptr<Pass> make_fuse_two_class_gate_grad(FusionAdvisor advisor);

}  // namespace anvil::passes
