// Softmax, LogSoftmax and Hardmax: before opset 13 the input is coerced to
// 2-D at `axis` (default 1) and each row is normalised; from opset 13 the
// normalisation runs along `axis` alone (default -1). Softmax and LogSoftmax
// subtract the maximum first, so large inputs neither overflow nor lose
// precision; Hardmax puts 1 at the first maximum and 0 elsewhere.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/ref/broadcast.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

enum class Normalization { kSoftmax, kLogSoftmax, kHardmax };

class SoftmaxKernel : public Kernel {
 public:
  explicit SoftmaxKernel(Normalization kind) : kind_(kind) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.num_inputs() == 1 && ctx.has_input(0), ErrorKind::kInvalidModel,
                        "expects 1 input, got {}", ctx.num_inputs());
    DType d = ctx.input_dtype(0);
    ANVIL_PREPARE_CHECK(ctx, dtype_in(d, kFloats | kHalfs), ErrorKind::kUnsupported, "dtype {} is not supported",
                        dtype_name(d));
    const Shape& x = ctx.input_shape(0);
    const int64_t rank = static_cast<int64_t>(x.size());
    const bool legacy = ctx.opset() < 13;
    int64_t axis = ctx.attrs().get_int("axis", legacy ? 1 : -1);
    if (legacy) {
      // Flatten semantics: axis may equal the rank (every row has one element).
      ANVIL_PREPARE_CHECK(ctx, axis >= -rank && axis <= rank, ErrorKind::kInvalidArgument,
                          "axis {} is out of range for rank {}", axis, rank);
      if (axis < 0) axis += rank;
    } else {
      axis = rank == 0 ? 0 : normalize_axis(ctx, axis, rank);
    }
    set_geometry(x, axis, legacy);
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    // 16-bit floats: in float32, with the stored intermediates (the shifted
    // inputs, their exponentials and the sum, accumulated in float32) rounded
    // to the 16-bit type, as ONNX's reference and ONNX Runtime compute them.
    if (ctx.in(0).dtype() == DType::kFloat16)
      return via_float32({&ctx.in(0)}, ctx.out(0), [&](const auto& w, float* y) {
        compute<float>(w[0].data(), y, [](float v) { return static_cast<float>(Half(v)); });
      });
    if (ctx.in(0).dtype() == DType::kBFloat16)
      return via_float32({&ctx.in(0)}, ctx.out(0), [&](const auto& w, float* y) {
        compute<float>(w[0].data(), y, [](float v) { return static_cast<float>(BFloat16(v)); });
      });
    if (ctx.in(0).dtype() == DType::kFloat32) compute<float>(ctx.in(0).data<float>(), ctx.out(0).data<float>());
    else compute<double>(ctx.in(0).data<double>(), ctx.out(0).data<double>());
  }

  int inplace_input() const override { return 0; }

 protected:
  // Normalised along `axis` of `x` (and every axis after it when `legacy`).
  void set_geometry(const Shape& x, int64_t axis, bool legacy) {
    const int64_t rank = static_cast<int64_t>(x.size());
    outer_ = 1;
    for (int64_t i = 0; i < std::min(axis, rank); ++i) outer_ *= x[i];
    dim_ = 1;
    inner_ = 1;
    for (int64_t i = axis; i < rank; ++i) {
      if (legacy || i == axis) dim_ *= x[i];
      else inner_ *= x[i];
    }
  }

  // One lane is the `dim_` elements normalised together, `inner_` apart. It
  // reads each element before overwriting it, so x and y may alias.
  // `round` stores an intermediate in the data's type (identity for float32/64).
  template <typename T, typename Round = T (*)(T)>
  void compute(const T* x, T* y, Round round = [](T v) { return v; }) const {
    const bool rounds = !std::is_same_v<Round, T (*)(T)>;
    const int64_t lanes = outer_ * inner_;
    if (lanes == 0 || dim_ == 0) return;
#pragma omp parallel for if (lanes * dim_ > 32768)
    for (int64_t l = 0; l < lanes; ++l) {
      const int64_t o = l / inner_, i = l % inner_;
      const T* px = x + o * dim_ * inner_ + i;
      T* py = y + o * dim_ * inner_ + i;
      if (kind_ == Normalization::kHardmax) {
        int64_t first = 0;
        for (int64_t k = 1; k < dim_; ++k)
          if (px[k * inner_] > px[first * inner_]) first = k;
        for (int64_t k = 0; k < dim_; ++k) py[k * inner_] = k == first ? T(1) : T(0);
        continue;
      }
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t k = 0; k < dim_; ++k) m = std::max(m, px[k * inner_]);
      if (std::isinf(m)) m = 0;  // all -inf or some +inf: no finite shift helps; let IEEE decide
      T sum = 0;
      if (kind_ == Normalization::kLogSoftmax) {
        for (int64_t k = 0; k < dim_; ++k) sum += std::exp(px[k * inner_] - m);
        // (x - m) - log(sum), not x - (m + log(sum)), which loses log(sum) next to a large m.
        const T log_sum = std::log(sum);
        for (int64_t k = 0; k < dim_; ++k) py[k * inner_] = (px[k * inner_] - m) - log_sum;
      } else {
        for (int64_t k = 0; k < dim_; ++k) {
          T e = round(std::exp(round(px[k * inner_] - m)));
          py[k * inner_] = e;
          sum += e;
        }
        if (rounds) {
          sum = round(sum);
          for (int64_t k = 0; k < dim_; ++k) py[k * inner_] /= sum;
          continue;
        }
        const T inv = T(1) / sum;
        for (int64_t k = 0; k < dim_; ++k) py[k * inner_] *= inv;
      }
    }
  }

  Normalization kind_;
  int64_t outer_ = 1, dim_ = 1, inner_ = 1;
};

// anvil.MaskedSoftmax(X, Mask) = Softmax(X + Mask) over the last axis
// (fuse_masked_softmax.cc; Anvil's vectorized kernel runs it first): the
// broadcast sum written to the output, then normalised in place.
class MaskedSoftmaxKernel : public SoftmaxKernel {
 public:
  MaskedSoftmaxKernel() : SoftmaxKernel(Normalization::kSoftmax) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& out = ctx.output_shape(0);  // the schema broadcast X and Mask, both float32
    ANVIL_PREPARE_CHECK(ctx, !out.empty(), ErrorKind::kInvalidModel, "X and Mask must have rank >= 1");
    set_geometry(out, static_cast<int64_t>(out.size()) - 1, false);
    sum_ = BroadcastPlan(out, ctx.input_shape(0), ctx.input_shape(1));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    float* y = ctx.out(0).data<float>();
    sum_.apply(ctx.in(0).data<float>(), ctx.in(1).data<float>(), y, [](float a, float b) { return a + b; });
    compute<float>(y, y);
  }

  int inplace_input() const override { return -1; }

 private:
  BroadcastPlan sum_;
};

ANVIL_REGISTER_KERNEL("Softmax", kRef, [](const ir::Node&) -> std::unique_ptr<Kernel> {
  return std::make_unique<SoftmaxKernel>(Normalization::kSoftmax);
});
ANVIL_REGISTER_KERNEL("LogSoftmax", kRef, [](const ir::Node&) -> std::unique_ptr<Kernel> {
  return std::make_unique<SoftmaxKernel>(Normalization::kLogSoftmax);
});
ANVIL_REGISTER_KERNEL("Hardmax", kRef, [](const ir::Node&) -> std::unique_ptr<Kernel> {
  return std::make_unique<SoftmaxKernel>(Normalization::kHardmax);
});
static Registrar masked_softmax("MaskedSoftmax", Backend::kRef,
                                [](const ir::Node&) -> std::unique_ptr<Kernel> {
                                  return std::make_unique<MaskedSoftmaxKernel>();
                                },
                                "anvil", {{kFloat32Only}});

}  // namespace

}  // namespace anvil::kernels
