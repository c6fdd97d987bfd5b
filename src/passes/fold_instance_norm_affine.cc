// A per-channel Mul and/or Add after an InstanceNormalization, or a
// GroupNormalization of opset 21 (scale and bias per channel: what
// fuse_group_norm makes), folds into its scale and bias:
//   InstanceNormalization(x, s, b) * g + h  =>  InstanceNormalization(x, s * g, b * g + h)
// with g and h float32 constants of one value per channel of x (or one in
// all). PyTorch exports GroupNorm(C, C) (wav2vec2's feature extractor) as an
// InstanceNormalization with unit scale and zero bias, then the affine as a
// Mul and an Add: two more passes over the tensor, on plain data where the
// convolutions around it keep their own layouts. The export reshapes to
// [N, groups, -1] and back around the normalization; with as many groups as
// channels both are identities, which simplify_reshapes removes (hence a
// late pass). With fewer groups fuse_group_norm makes the three one
// GroupNormalization first, whose Mul and Add fold here the same way.
#include <optional>
#include <vector>

#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

// The `channels` values of a float32 constant that broadcasts one value per
// channel (axis 1) of a tensor of `rank` axes: one value in all, or a shape
// whose dims, aligned from the right, are 1 but the channel axis's.
std::optional<std::vector<float>> per_channel_values(const ir::Value* v, int rank, int64_t channels) {
  if (!is_float_constant(v)) return std::nullopt;
  const Tensor& t = *v->constant;
  if (t.rank() > rank) return std::nullopt;
  const int channel_axis = t.rank() - (rank - 1);  // axis 1 of x, aligned from the right
  for (int i = 0; i < t.rank(); ++i)
    if (t.dim(i) != 1 && !(i == channel_axis && t.dim(i) == channels)) return std::nullopt;
  const float* p = t.data<float>();
  if (t.numel() == 1) return std::vector<float>(static_cast<size_t>(channels), p[0]);
  return std::vector<float>(p, p + channels);
}

// `v`'s only consumer (pass.h's single_consumer) when it is an `op` node, else nullptr.
ir::Node* only_consumer_op(const ir::Graph& graph, const ir::Value* v, const char* op) {
  ir::Node* next = v ? single_consumer(graph, v) : nullptr;
  return is_op(next, op) ? next : nullptr;
}

class FoldInstanceNormAffine : public Pass {
 public:
  std::string name() const override { return "fold_instance_norm_affine"; }
  bool run(ir::Graph& graph) override {
    return rewrite_each_node(graph, [&](ir::Node& norm) {
      if (!is_op(&norm, "InstanceNormalization") && !(is_op(&norm, "GroupNormalization") && norm.opset >= 21))
        return false;
      const ir::Value* x = norm.input(0);
      if (!x || x->dtype() != DType::kFloat32 || !x->type.has_shape() || x->type.rank() < 3) return false;
      const int rank = x->type.rank();
      const int64_t channels = x->type.dims()[1].value;
      if (channels < 1) return false;
      // A scale and bias as the normalization takes them (the schema checks the rest).
      if (!is_float_vector(norm.input(1), channels) || !is_float_vector(norm.input(2), channels)) return false;
      const float *scale = norm.input(1)->constant->data<float>(), *bias = norm.input(2)->constant->data<float>();
      std::vector<float> s(scale, scale + channels), b(bias, bias + channels);
      ir::Node* last = nullptr;
      if (ir::Node* mul = only_consumer_op(graph, norm.output(0), "Mul")) {
        const auto g = per_channel_values(other_operand(*mul, norm.output(0)), rank, channels);
        if (g) {
          for (size_t c = 0; c < s.size(); ++c) {
            s[c] *= (*g)[c];
            b[c] *= (*g)[c];
          }
          last = mul;
        }
      }
      const ir::Value* y = last ? last->output(0) : norm.output(0);
      if (ir::Node* add = only_consumer_op(graph, y, "Add")) {
        const auto h = per_channel_values(other_operand(*add, y), rank, channels);
        if (h) {
          for (size_t c = 0; c < b.size(); ++c) b[c] += (*h)[c];
          if (last) absorb(norm, *last);
          last = add;
        }
      }
      if (!last) return false;
      absorb(norm, *last);
      norm.inputs[1] = float_constant(graph, norm.name + "/scale", s);
      norm.inputs[2] = float_constant(graph, norm.name + "/bias", b);
      return true;
    });
  }
};

}  // namespace

std::unique_ptr<Pass> make_fold_instance_norm_affine() { return std::make_unique<FoldInstanceNormAffine>(); }

}  // namespace anvil::passes
