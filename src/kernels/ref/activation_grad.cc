// Training kernels of the anvil domain: fused activation gradients (emitted by
// the autodiff in src/train/gradients/: one pass over the data instead of the
// compare, select and multiply nodes the composed form would run), and the
// dropout training runs (train/training_mode.cc).
//
//   anvil.ReluGrad(dy, y) = dy where y > 0, else 0   (y: Relu's output, or its input)
//   anvil.GemmReluGrad(a, b, y) = ReluGrad(Gemm(a, b), y), attributes transA
//     and transB (passes/fuse_relu_grad.cc); the reference runs the two. An
//     optional second output, [1, N], sums the first's columns (a bias's
//     gradient, passes/fuse_bias_grad.cc); an optional third, [K, N], is
//     A^T x y (a classifier head's weight gradient, passes/fuse_head_grad.cc).
//   anvil.TrainingDropout(x, step) -> (y, mask), attributes ratio and seed:
//     element i is kept when a counter-based hash of (seed, step, i) maps to
//     a uniform draw >= ratio; kept elements are scaled by 1 / (1 - ratio).
//     The draws depend on nothing else (not the plan, the thread count or
//     how many runs came before), so a resumed run draws the same masks.
#include <algorithm>

#include "kernels/activation.h"
#include "kernels/nn_geometry.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

class ReluGradKernel : public Kernel {
 public:
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(0) == ctx.input_shape(1), ErrorKind::kInvalidModel,
                        "the gradient {} and the activation {} differ in shape", shape_str(ctx.input_shape(0)),
                        shape_str(ctx.input_shape(1)));
    return ctx.output_types();
  }
  int inplace_input() const override { return 0; }  // dx over dy: a 100 MB gradient is not written anew

  void run(const RunContext& ctx) const override {
    relu_grad(ctx.in(0).data<float>(), ctx.in(1).data<float>(), ctx.out(0).data<float>(), ctx.out(0).numel());
  }
};

class RefGemmReluGrad : public Kernel {
 public:
  explicit RefGemmReluGrad(const ir::Node& node) : gemm_node_(node) {
    gemm_node_.op_type = "Gemm";
    gemm_node_.domain = "";
    gemm_node_.opset = std::max(gemm_node_.opset, 13);  // fused from a MatMul of any opset; Gemm's C optional from 11
    gemm_node_.inputs.resize(2);
    gemm_node_.outputs.resize(1);  // the column sums are this kernel's
  }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    gemm_dims(ctx);  // checks that A and B multiply
    gemm_ = Registry::global().make_reference(gemm_node_);
    PrepareContext gemm_ctx(gemm_node_, {ctx.input_type(0), ctx.input_type(1)}, {ctx.constant(0), ctx.constant(1)},
                            ctx.num_threads());
    std::vector<TensorType> out = gemm_->prepare(gemm_ctx);
    ANVIL_PREPARE_CHECK(ctx, out[0].shape == ctx.input_shape(2), ErrorKind::kInvalidModel,
                        "the product {} and the activation {} differ in shape", shape_str(out[0].shape),
                        shape_str(ctx.input_shape(2)));
    const size_t outputs = ctx.node().outputs.size();  // the column sums, A^T x y: this kernel's
    out.resize(std::max<size_t>(1, outputs));
    for (size_t o = 1; o < outputs; ++o)
      if (ctx.node().output(o)) out[o] = ctx.output_type(o);
    trans_a_ = ctx.attrs().get_int("transA", 0) != 0;
    if (outputs > 2 && ctx.node().output(2)) {
      const Shape& a = ctx.input_shape(0);
      const Shape want{a[trans_a_ ? 0 : 1], out[0].shape[1]};
      ANVIL_PREPARE_CHECK(ctx, out[2].shape == want, ErrorKind::kInvalidModel, "A^T x y is {}, not {}",
                          shape_str(out[2].shape), shape_str(want));
    }
    return out;
  }

  size_t scratch_bytes() const override { return gemm_->scratch_bytes(); }

  void run(const RunContext& ctx) const override {
    RunContext gemm_ctx;
    gemm_ctx.inputs = {ctx.inputs[0], ctx.inputs[1]};
    gemm_ctx.outputs = {ctx.outputs[0]};
    gemm_ctx.scratch = ctx.scratch;
    gemm_->run(gemm_ctx);
    float* dx = ctx.out(0).data<float>();
    const float* y = ctx.in(2).data<float>();
    relu_grad(dx, y, dx, ctx.out(0).numel());
    const int64_t m = ctx.out(0).shape()[0], n = ctx.out(0).shape()[1];
    if (ctx.outputs.size() > 1 && ctx.outputs[1])
      for (int64_t j = 0; j < n; ++j) {  // in double, down each column: the reference
        double sum = 0;
        for (int64_t i = 0; i < m; ++i) sum += dx[i * n + j];
        ctx.out(1).data<float>()[j] = static_cast<float>(sum);
      }
    if (ctx.outputs.size() > 2 && ctx.outputs[2]) {
      const float* a = ctx.in(0).data<float>();
      const int64_t k = ctx.out(2).shape()[0];
      for (int64_t q = 0; q < k; ++q)
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int64_t i = 0; i < m; ++i)
            sum += static_cast<double>(trans_a_ ? a[q * m + i] : a[i * k + q]) * static_cast<double>(y[i * n + j]);
          ctx.out(2).data<float>()[q * n + j] = static_cast<float>(sum);
        }
    }
  }

 private:
  ir::Node gemm_node_;
  std::unique_ptr<Kernel> gemm_;
  bool trans_a_ = false;
};

// splitmix64's finaliser: a well-mixed 64-bit value of any counter.
inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

class TrainingDropoutKernel : public Kernel {
 public:
  explicit TrainingDropoutKernel(const ir::Node& node)
      : ratio_(node.attrs.get_float("ratio", 0.5f)), seed_(static_cast<uint64_t>(node.attrs.get_int("seed", 0))) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ratio_ >= 0 && ratio_ < 1, ErrorKind::kInvalidModel, "ratio {} is not in [0, 1)", ratio_);
    ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(1) == DType::kInt64 && shape_numel(ctx.input_shape(1)) == 1,
                        ErrorKind::kInvalidArgument, "the step must be one int64");
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const float* x = ctx.in(0).data<float>();
    float* y = ctx.out(0).data<float>();
    bool* mask = ctx.out(1).data<bool>();
    const uint64_t key = mix(seed_ ^ mix(static_cast<uint64_t>(ctx.in(1).data<int64_t>()[0])));
    // Keep when the top 24 bits, as a fraction of 2^24, are >= ratio.
    const uint64_t threshold = static_cast<uint64_t>(static_cast<double>(ratio_) * (1 << 24));
    const float scale = 1.f / (1.f - ratio_);
    const int64_t n = ctx.out(0).numel();
#pragma omp parallel for if (n > 65536) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const bool keep = (mix(key + static_cast<uint64_t>(i)) >> 40) >= threshold;
      mask[i] = keep;
      y[i] = keep ? x[i] * scale : 0.f;
    }
  }

 private:
  float ratio_;
  uint64_t seed_;
};

static Registrar training_dropout("TrainingDropout", Backend::kRef,
                                  [](const ir::Node& n) { return std::make_unique<TrainingDropoutKernel>(n); },
                                  "anvil", {{kFloat32Only, dtype_bit(DType::kInt64)}});

static Registrar gemm_relu_grad(
    "GemmReluGrad", Backend::kRef, [](const ir::Node& n) { return std::make_unique<RefGemmReluGrad>(n); }, "anvil",
    {{kFloat32Only}});

static Registrar relu_grad("ReluGrad", Backend::kRef, [](const ir::Node&) { return std::make_unique<ReluGradKernel>(); },
                           "anvil", {{kFloat32Only}});

}  // namespace

}  // namespace anvil::kernels
