// Reference anvil.FusedMatMul: the reference MatMul (of copies with their last
// two axes swapped, for transA / transB), then the bias along the last
// dimension, the residual add and the activation — the oracle for the
// oneDNN post-op path (passes/fuse_matmul.cc describes the op); and
// anvil.FusedGemm: the reference Gemm, then the activation.
#include <vector>

#include "kernels/activation.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

class RefFusedMatMul : public Kernel {
 public:
  explicit RefFusedMatMul(const ir::Node& node) : matmul_node_(node) {
    matmul_node_.op_type = "MatMul";
    matmul_node_.domain = "";
    matmul_node_.inputs.resize(2);
    trans_a_ = matmul_node_.attrs.get_int("transA", 0) != 0;
    trans_b_ = matmul_node_.attrs.get_int("transB", 0) != 0;
    matmul_node_.attrs.erase("transA");
    matmul_node_.attrs.erase("transB");
    const FusedActivationSpec act = take_activation(matmul_node_);
    activation_ = act.name;
    alpha_ = act.alpha;
    beta_ = act.beta;
  }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, is_known_activation(activation_), ErrorKind::kInvalidModel, "unknown activation '{}'",
                        activation_);
    for (size_t i = 0; i < ctx.num_inputs(); ++i)
      ANVIL_PREPARE_CHECK(ctx, !ctx.has_input(i) || ctx.input_dtype(i) == DType::kFloat32, ErrorKind::kUnsupported,
                          "fused matmul is float32 only (input {} is {})", i, dtype_name(ctx.input_dtype(i)));
    matmul_ = Registry::global().make_reference(matmul_node_);
    const TensorType a = operand_type(ctx, 0, trans_a_), b = operand_type(ctx, 1, trans_b_);
    PrepareContext mm_ctx(matmul_node_, {a, b}, {trans_a_ ? nullptr : ctx.constant(0), trans_b_ ? nullptr : ctx.constant(1)},
                          ctx.num_threads());
    std::vector<TensorType> out = matmul_->prepare(mm_ctx);
    has_bias_ = ctx.has_input(2);
    has_sum_ = ctx.has_input(3);
    ANVIL_PREPARE_CHECK(ctx, !has_sum_ || ctx.input_shape(3) == out[0].shape, ErrorKind::kInvalidArgument,
                        "residual {} must have the output's shape {}", shape_str(ctx.input_shape(3)),
                        shape_str(out[0].shape));
    return out;
  }

  size_t scratch_bytes() const override { return matmul_->scratch_bytes(); }
  int inplace_input() const override { return has_sum_ ? 3 : -1; }

  void run(const RunContext& ctx) const override {
    Tensor& y = ctx.out(0);
    const int64_t total = y.numel();
    // The residual may share memory with y (in place): save it before the matmul overwrites y.
    const float* sum = has_sum_ ? ctx.in(3).data<float>() : nullptr;
    std::vector<float> saved;
    if (sum && static_cast<const void*>(sum) == y.raw()) {
      saved.assign(sum, sum + total);
      sum = saved.data();
    }
    RunContext mm_ctx;
    Tensor a_t = trans_a_ ? last_two_swapped(ctx.in(0)) : Tensor(), b_t = trans_b_ ? last_two_swapped(ctx.in(1)) : Tensor();
    mm_ctx.inputs = {trans_a_ ? &a_t : ctx.inputs[0], trans_b_ ? &b_t : ctx.inputs[1]};
    mm_ctx.outputs = {&y};
    mm_ctx.scratch = ctx.scratch;
    matmul_->run(mm_ctx);
    float* out = y.data<float>();
    if (has_bias_) {
      const float* bias = ctx.in(2).data<float>();
      const int64_t n = ctx.in(2).numel();
      for (int64_t i = 0; i < total; ++i) out[i] += bias[i % n];
    }
    if (sum)
      for (int64_t i = 0; i < total; ++i) out[i] += sum[i];
    apply_activation(out, total, activation_, alpha_, beta_);
  }

 private:
  // Input i's type as the plain MatMul reads it: its last two axes swapped when `trans`.
  static TensorType operand_type(const PrepareContext& ctx, size_t i, bool trans) {
    TensorType t = ctx.input_type(i);
    if (trans) std::swap(t.shape[t.shape.size() - 2], t.shape.back());  // the schema checked rank >= 2
    return t;
  }

  // A copy of `x` with its last two axes swapped.
  static Tensor last_two_swapped(const Tensor& x) {
    Shape shape = x.shape();
    const int64_t rows = shape[shape.size() - 2], cols = shape.back(), batch = x.numel() / std::max<int64_t>(rows * cols, 1);
    std::swap(shape[shape.size() - 2], shape.back());
    Tensor y(DType::kFloat32, shape);
    const float* src = x.data<float>();
    float* dst = y.data<float>();
    for (int64_t m = 0; m < batch; ++m)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) dst[(m * cols + c) * rows + r] = src[(m * rows + r) * cols + c];
    return y;
  }

  ir::Node matmul_node_;
  std::unique_ptr<Kernel> matmul_;
  bool trans_a_ = false, trans_b_ = false;
  std::string activation_;
  float alpha_ = 0, beta_ = 0;
  bool has_bias_ = false, has_sum_ = false;
};

class RefFusedGemm : public Kernel {
 public:
  explicit RefFusedGemm(const ir::Node& node) : gemm_node_(node) {
    gemm_node_.op_type = "Gemm";
    gemm_node_.domain = "";
    activation_ = take_activation(gemm_node_);
  }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, is_known_activation(activation_.name), ErrorKind::kInvalidModel, "unknown activation '{}'",
                        activation_.name);
    gemm_ = Registry::global().make_reference(gemm_node_);
    std::vector<TensorType> inputs;
    std::vector<const Tensor*> constants;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      inputs.push_back(ctx.input_type(i));
      constants.push_back(ctx.constant(i));
    }
    PrepareContext gemm_ctx(gemm_node_, inputs, constants, ctx.num_threads());
    return gemm_->prepare(gemm_ctx);
  }

  size_t scratch_bytes() const override { return gemm_->scratch_bytes(); }

  void run(const RunContext& ctx) const override {
    gemm_->run(ctx);
    Tensor& y = ctx.out(0);
    apply_activation(y.data<float>(), y.numel(), activation_.name, activation_.alpha, activation_.beta);
  }

 private:
  ir::Node gemm_node_;
  std::unique_ptr<Kernel> gemm_;
  FusedActivationSpec activation_;
};

static Registrar fused_gemm_ref(
    "FusedGemm", Backend::kRef,
    [](const ir::Node& n) -> std::unique_ptr<Kernel> { return std::make_unique<RefFusedGemm>(n); }, "anvil",
    {{kFloat32Only}});

static Registrar fused_matmul_ref(
    "FusedMatMul", Backend::kRef,
    [](const ir::Node& n) -> std::unique_ptr<Kernel> { return std::make_unique<RefFusedMatMul>(n); }, "anvil");

}  // namespace

}  // namespace anvil::kernels
