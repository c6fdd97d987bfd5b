// The optimizer steps of ONNX's ai.onnx.preview.training domain, as training
// graphs export them: Adagrad, Momentum (standard or Nesterov) and Adam. Each
// takes the learning rate R and step count T, then n tensors to optimize, their
// n gradients and the n (Adam: 2n) state tensors, and returns the n updated
// tensors and states. The gradient is regularized first (g + norm_coefficient
// * x). Computed in double per element.
#include <cmath>
#include <string>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

constexpr const char* kTraining = "ai.onnx.preview.training";

enum class Optimizer { kAdagrad, kMomentum, kAdam };

class OptimizerKernel : public Kernel {
 public:
  OptimizerKernel(const ir::Node& node, Optimizer kind)
      : kind_(kind),
        states_(kind == Optimizer::kAdam ? 2 : 1),
        decay_(node.attrs.get_float("decay_factor", 0.f)),
        epsilon_(node.attrs.get_float("epsilon", 0.f)),
        norm_(node.attrs.get_float("norm_coefficient", 0.f)),
        norm_post_(node.attrs.get_float("norm_coefficient_post", 0.f)),
        alpha_(node.attrs.get_float("alpha", kind == Optimizer::kAdam ? 0.9f : 0.f)),
        beta_(node.attrs.get_float("beta", kind == Optimizer::kAdam ? 0.999f : 0.f)),
        nesterov_(node.attrs.get_string("mode", "standard") == "nesterov") {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const size_t per = 2 + states_;  // x, g and the states
    ANVIL_PREPARE_CHECK(ctx, ctx.num_inputs() >= 2 + per && (ctx.num_inputs() - 2) % per == 0, ErrorKind::kInvalidModel,
                        "expects R, T and {} inputs per optimized tensor, got {} inputs", per, ctx.num_inputs());
    n_ = (ctx.num_inputs() - 2) / per;
    ANVIL_PREPARE_CHECK(ctx, ctx.node().outputs.size() == n_ * (1 + states_), ErrorKind::kInvalidModel,
                        "{} optimized tensors need {} outputs, got {}", n_, n_ * (1 + states_), ctx.node().outputs.size());
    if (kind_ == Optimizer::kMomentum) {
      const std::string mode = ctx.attrs().get_string("mode", "standard");
      ANVIL_PREPARE_CHECK(ctx, mode == "standard" || mode == "nesterov", ErrorKind::kInvalidModel,
                          "mode '{}' is not standard or nesterov", mode);
    }
    for (size_t i : {0u, 1u})
      ANVIL_PREPARE_CHECK(ctx, shape_numel(ctx.input_shape(i)) == 1, ErrorKind::kInvalidArgument,
                          "{} must be a scalar, got {}", i ? "T" : "R", shape_str(ctx.input_shape(i)));
    std::vector<TensorType> out;
    for (size_t k = 0; k < per - 1; ++k)  // x, then each state: outputs like the inputs they update
      for (size_t i = 0; i < n_; ++i) {
        const size_t src = 2 + (k == 0 ? i : (k + 1) * n_ + i);
        for (size_t other : {2 + i, 2 + n_ + i})
          ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(other) == ctx.input_shape(src), ErrorKind::kInvalidArgument,
                              "the tensors of optimized input {} differ in shape: {} and {}", i,
                              shape_str(ctx.input_shape(other)), shape_str(ctx.input_shape(src)));
        out.push_back(ctx.input_type(src));
      }
    return out;
  }

  void run(const RunContext& ctx) const override {
    const double r = element_as_double(ctx.in(0), 0), t = element_as_double(ctx.in(1), 0);
    for (size_t i = 0; i < n_; ++i) {
      const std::vector<float> x = tensor_to_floats(ctx.in(2 + i)), g = tensor_to_floats(ctx.in(2 + n_ + i));
      std::vector<float> s1 = tensor_to_floats(ctx.in(2 + 2 * n_ + i));
      std::vector<float> s2 = states_ == 2 ? tensor_to_floats(ctx.in(2 + 3 * n_ + i)) : std::vector<float>{};
      std::vector<float> y(x.size());
      for (size_t e = 0; e < x.size(); ++e) {
        const double gr = static_cast<double>(norm_) * x[e] + g[e];
        double xn = 0;  // every case sets it; GCC cannot see that the switch is exhaustive
        switch (kind_) {
          case Optimizer::kAdagrad: {
            const double h = s1[e] + gr * gr;
            xn = x[e] - r / (1 + t * decay_) * gr / (std::sqrt(h) + epsilon_);
            s1[e] = static_cast<float>(h);
            break;
          }
          case Optimizer::kMomentum: {
            const double v = alpha_ * s1[e] + (t > 0 ? beta_ : 1.0) * gr;
            xn = x[e] - r * (nesterov_ ? gr + alpha_ * v : v);
            s1[e] = static_cast<float>(v);
            break;
          }
          case Optimizer::kAdam: {
            const double v = alpha_ * s1[e] + (1 - alpha_) * gr, h = beta_ * s2[e] + (1 - beta_) * gr * gr;
            const double ra = t > 0 ? r * std::sqrt(1 - std::pow(beta_, t)) / (1 - std::pow(alpha_, t)) : r;
            xn = (1 - norm_post_) * (x[e] - ra * (v / (std::sqrt(h) + epsilon_)));
            s1[e] = static_cast<float>(v);
            s2[e] = static_cast<float>(h);
            break;
          }
        }
        y[e] = static_cast<float>(xn);
      }
      store(ctx, i, y);
      store(ctx, n_ + i, s1);
      if (states_ == 2) store(ctx, 2 * n_ + i, s2);
    }
  }

 private:
  static void store(const RunContext& ctx, size_t o, const std::vector<float>& v) {
    if (o < ctx.outputs.size() && ctx.outputs[o]) floats_to_tensor(v, *ctx.outputs[o]);
  }

  Optimizer kind_;
  size_t states_;
  double decay_, epsilon_, norm_, norm_post_, alpha_, beta_;
  bool nesterov_;
  size_t n_ = 0;
};

KernelFactory optimizer(Optimizer kind) {
  return [kind](const ir::Node& n) -> std::unique_ptr<Kernel> { return std::make_unique<OptimizerKernel>(n, kind); };
}

const InputTypes kOptimizerInputs{{kFloats, kInt32And64, kFloats | kHalfs}};
const Registrar adagrad("Adagrad", Backend::kRef, optimizer(Optimizer::kAdagrad), kTraining, kOptimizerInputs);
const Registrar momentum("Momentum", Backend::kRef, optimizer(Optimizer::kMomentum), kTraining, kOptimizerInputs);
const Registrar adam("Adam", Backend::kRef, optimizer(Optimizer::kAdam), kTraining, kOptimizerInputs);

}  // namespace
}  // namespace anvil::kernels
