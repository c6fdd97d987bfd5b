// Loss ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (which is
// LogSoftmax over the class axis, then the same NLL; its optional second
// output is that log-probability).
//
// Input [N, C, d1..dk], target [N, d1..dk] of class indices, optional
// weight [C]. Per element: loss = -input[n, t, d] * weight[t], and 0 (with
// weight 0) where t == ignore_index. reduction "none" keeps [N, d1..dk],
// "sum" adds them, "mean" divides the sum by the sum of the weights used.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

enum class Reduce { kNone, kSum, kMean };

class LossKernel : public Kernel {
 public:
  LossKernel(const ir::Node& node, bool softmax) : softmax_(softmax) {
    const std::string r = node.attrs.get_string("reduction", "mean");
    reduce_ = r == "none" ? Reduce::kNone : r == "sum" ? Reduce::kSum : Reduce::kMean;
    if (node.attrs.has("ignore_index")) ignore_ = node.attrs.get_int("ignore_index", 0);
  }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    // The schema checked the reduction and the shapes of target and weight.
    const Shape& x = ctx.input_shape(0);
    n_ = x[0];
    classes_ = x[1];
    inner_ = shape_numel(Shape(x.begin() + 2, x.end()));
    has_weight_ = ctx.has_input(2);
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    if (ctx.in(0).dtype() == DType::kFloat32) compute<float>(ctx);
    else compute<double>(ctx);
  }

 private:
  template <typename T>
  void compute(const RunContext& ctx) const {
    const T* x = ctx.in(0).data<T>();
    const Tensor& target = ctx.in(1);
    const T* weight = has_weight_ ? ctx.in(2).data<T>() : nullptr;
    // SoftmaxCrossEntropyLoss: NLL over log_softmax(x), written to the
    // log_prob output when asked for, else to a temporary.
    std::vector<T> own;
    if (softmax_) {
      T* log_prob = nullptr;
      if (ctx.outputs.size() > 1 && ctx.outputs[1]) {
        log_prob = ctx.out(1).data<T>();
      } else {
        own.resize(static_cast<size_t>(n_ * classes_ * inner_));
        log_prob = own.data();
      }
      log_softmax(x, log_prob);
      x = log_prob;
    }
    const int64_t count = n_ * inner_;
    std::vector<T> losses(static_cast<size_t>(count));
    double total = 0, weights = 0;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t n = i / inner_, d = i % inner_;
      const int64_t t = target.dtype() == DType::kInt64 ? target.data<int64_t>()[i] : target.data<int32_t>()[i];
      if (ignore_ && t == *ignore_) {
        losses[static_cast<size_t>(i)] = T(0);
        continue;
      }
      ANVIL_CHECK(t >= 0 && t < classes_, ErrorKind::kInvalidArgument,
                  "{}: target {} is not a class index in [0, {})", softmax_ ? "SoftmaxCrossEntropyLoss"
                                                                            : "NegativeLogLikelihoodLoss",
                  t, classes_);
      const T w = weight ? weight[t] : T(1);
      const T loss = -x[(n * classes_ + t) * inner_ + d] * w;
      losses[static_cast<size_t>(i)] = loss;
      total += static_cast<double>(loss);
      weights += static_cast<double>(w);
    }
    T* out = ctx.out(0).data<T>();
    if (reduce_ == Reduce::kNone) std::copy(losses.begin(), losses.end(), out);
    else if (reduce_ == Reduce::kSum) *out = static_cast<T>(total);
    else *out = static_cast<T>(total / weights);  // 0 / 0 (everything ignored) is NaN, as in ONNX's reference
  }

  template <typename T>
  void log_softmax(const T* x, T* y) const {
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t d = 0; d < inner_; ++d) {
        const T* px = x + n * classes_ * inner_ + d;
        T* py = y + n * classes_ * inner_ + d;
        T m = -std::numeric_limits<T>::infinity();
        for (int64_t c = 0; c < classes_; ++c) m = std::max(m, px[c * inner_]);
        if (std::isinf(m)) m = 0;
        T sum = 0;
        for (int64_t c = 0; c < classes_; ++c) sum += std::exp(px[c * inner_] - m);
        const T log_sum = std::log(sum);
        for (int64_t c = 0; c < classes_; ++c) py[c * inner_] = (px[c * inner_] - m) - log_sum;
      }
  }

  bool softmax_;
  Reduce reduce_ = Reduce::kMean;
  std::optional<int64_t> ignore_;
  bool has_weight_ = false;
  int64_t n_ = 0, classes_ = 0, inner_ = 1;
};

}  // namespace

ANVIL_REGISTER_OP_VERSIONS("NegativeLogLikelihoodLoss", 12, 13);
ANVIL_REGISTER_OP_VERSIONS("SoftmaxCrossEntropyLoss", 12, 13);
ANVIL_REGISTER_KERNEL_TYPED("NegativeLogLikelihoodLoss", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<LossKernel>(n, false);
}, {kFloats, kInt32And64, kFloats});
ANVIL_REGISTER_KERNEL_TYPED("SoftmaxCrossEntropyLoss", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<LossKernel>(n, true);
}, {kFloats, kInt32And64, kFloats});

}  // namespace anvil::kernels
