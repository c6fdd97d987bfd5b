// Pattern-matching helpers shared by the fusion passes: they read the graph
// and never change it, so a pass can test a whole pattern before rewriting;
// and the few rewriting steps the passes share (absorb, add_attention, ...).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace anvil::passes {

// `n` is live, in the default domain, and of type `op`.
bool is_op(const ir::Node* n, const char* op);
// `n` is live, in Anvil's internal domain, and of type `op` (FusedMatMul, ...).
bool is_anvil_op(const ir::Node* n, const char* op);
// `n` is a live convolution: ONNX's Conv or anvil.FusedConv.
bool is_convolution(const ir::Node* n);
// Transpose `t`'s permutation of an input of `rank` axes (the axes reversed
// when the attribute is absent); empty when it is not one.
std::vector<int64_t> transpose_permutation(const ir::Node& t, size_t rank);
// The live producer of `v` when it is an `op` node, else nullptr.
ir::Node* producer_op(const ir::Value* v, const char* op);
// The value of a constant float32/float64 tensor with one element, of rank 0 or 1.
std::optional<double> scalar_value(const ir::Value* v);
// `v` is a one-element float constant within `rel_tol` of `expected`.
bool is_scalar(const ir::Value* v, double expected, double rel_tol = 1e-4);
// For a two-input node: the operand that is not `v` (nullptr when `v` is not an operand).
ir::Value* other_operand(const ir::Node& n, const ir::Value* v);
// `v` is a float32 constant.
bool is_float_constant(const ir::Value* v);
// A float32 constant of `n` values in one axis.
bool is_float_vector(const ir::Value* v, int64_t n);
// `v` is a float32 matrix (rank 2, dims possibly symbolic).
bool is_float32_matrix(const ir::Value* v);
// Every value is `v` (true for none).
bool all_equal_to(const std::vector<int64_t>& values, int64_t v);
// A live 2-D convolution with explicit pads (or none), dense, constant
// float32 weights of `kernel` x `kernel` (and bias, if any), no residual input.
bool is_plain_2d_conv(const ir::Node& conv, int64_t kernel);
// One of those with a 1x1 window at stride 1, no pads and one group: a
// product over the channels at each pixel.
bool is_unit_conv(const ir::Node& conv);

// An activation a fused node applies as its last step (a oneDNN eltwise
// post-op): "Relu", "LeakyRelu", "Elu", "Clip", "Sigmoid", "Tanh",
// "HardSigmoid", "HardSwish", "Gelu" (erf), "GeluTanh" or "Swish", with its
// parameters (LeakyRelu/Elu/Swish: alpha; HardSigmoid: alpha, beta; Clip: min, max).
struct FusedActivation {
  std::string name;
  float alpha = 0.f, beta = 0.f;
};
// The activation node `act` as a fusable one; nullopt when it is not one, or
// its parameters are not constants.
std::optional<FusedActivation> fusable_activation(const ir::Node& act);
// Sets the activation, activation_alpha and activation_beta attributes.
void set_activation(ir::Node& fused, const FusedActivation& act);
// What set_activation wrote on `fused` (an empty name: none).
FusedActivation activation_of(const ir::Node& fused);

// Moves `next`'s output onto `fused` as its output `index` (which it now
// computes; outputs before it stay, or are absent) and kills `next`.
void absorb(ir::Node& fused, ir::Node& next, size_t index = 0);
// A constant int64 vector of `values` (a Reshape's target, Split's sizes,
// Gather's indices), named graph.unique_name(name).
ir::Value* int64_constant(ir::Graph& graph, const std::string& name, const std::vector<int64_t>& values);
// A new float32 constant [values.size()] (its name made unique).
ir::Value* float_constant(ir::Graph& graph, const std::string& name, const std::vector<float>& values);
// An ONNX Attention node (opset 23, its first version, whatever the model's)
// over `inputs` writing `y`, with `heads` query and key/value heads and the
// scale given: what the attention fusions make.
ir::Node* add_attention(ir::Graph& graph, std::vector<ir::Value*> inputs, ir::Value* y, const std::string& name,
                        int64_t heads, double scale);

// The axes a ReduceMean (or another reduction whose axes became an input at
// opset 18: not ReduceSum's, at 13) names: its attribute, or its constant
// input from opset 18; empty when it names none
// (every axis, or none with noop_with_empty_axes); nullopt when the input
// is not a constant. As written: negative axes are not normalized.
std::optional<std::vector<int64_t>> reduce_axes(const ir::Node& n);
// The first of the trailing axes a reduction with keepdims covers exactly
// (from some axis to the last of `rank`), as a positive index; nullopt for
// any other set of axes.
std::optional<int64_t> trailing_axis(const ir::Node& reduction, int rank);
// A float constant shaped like x's normalized dims from `axis` on, `size`
// values (leading 1s allowed): it broadcasts one value per normalized
// element, as LayerNormalization's and RMSNormalization's scales do.
bool per_element(const ir::Value* v, const ir::SymShape& x, int64_t axis, int64_t size);
// A new float32 constant of `size` ones, named after `base`: the scale a
// normalization written out without one gets.
ir::Value* ones_constant(ir::Graph& graph, int64_t size, const std::string& base);

// A Pad's constant pads, begin then end for each axis of its input (the
// attribute before opset 11, the input from then on), when they are two per
// axis of a known rank, its mode is ONNX's and it has no `axes` (opset 18);
// nullopt otherwise (a Pad its kernel is left to judge).
std::optional<std::vector<int64_t>> constant_pads(const ir::Node& pad);

// The same number, or the same named symbol: equal at run time, whatever the inputs.
bool surely_same_dim(const ir::Dim& a, const ir::Dim& b);
// `t` has a shape of `dims`, dim by dim surely (whatever its element type).
bool surely_has_dims(const ir::Type& t, const ir::SymShape& dims);
// A mask Attention takes for scores [b, h, s, s'] as the scores' Add or
// Where took it: rank 1-4, one entry per key (its last dim surely s'), each
// other dim, aligned from the right, 1, surely the scores' or against a
// scores dim known above 1 (the output keeps the scores' shape).
bool fits_attention_mask(const ir::Type& mask, const ir::Type& scores);
// Both types have the same rank and every dimension is surely the same.
bool surely_same_shape(const ir::Type& a, const ir::Type& b);

}  // namespace anvil::passes
