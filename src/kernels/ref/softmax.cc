// Softmax and LogSoftmax: before opset 13 the input is flattened to 2-D at
// `axis` (default 1); from 13 the normalisation runs along `axis` (default -1).
#include <algorithm>
#include <cmath>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

class SoftmaxKernel : public Kernel {
 public:
  SoftmaxKernel(const ir::Node& node, bool log) : log_(log) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    DType d = ctx.input_dtype(0);
    ANVIL_PREPARE_CHECK(ctx, dtype_in(d, kFloats), ErrorKind::kUnsupported, "dtype {} is not supported", dtype_name(d));
    const Shape& x = ctx.input_shape(0);
    int64_t rank = static_cast<int64_t>(x.size());
    bool legacy = ctx.opset() < 13;
    int64_t axis = normalize_axis(ctx, ctx.attrs().get_int("axis", legacy ? 1 : -1), std::max<int64_t>(rank, 1));
    outer_ = 1;
    for (int64_t i = 0; i < axis; ++i) outer_ *= x[i];
    if (legacy) {
      dim_ = shape_numel(x) / std::max<int64_t>(outer_, 1);
      inner_ = 1;
    } else {
      dim_ = rank ? x[axis] : 1;
      inner_ = 1;
      for (int64_t i = axis + 1; i < rank; ++i) inner_ *= x[i];
    }
    return {ctx.input_type(0)};
  }

  void run(const RunContext& ctx) const override {
    if (ctx.in(0).dtype() == DType::kFloat32) compute<float>(ctx.in(0).data<float>(), ctx.out(0).data<float>());
    else compute<double>(ctx.in(0).data<double>(), ctx.out(0).data<double>());
  }

 private:
  template <typename T>
  void compute(const T* x, T* y) const {
    int64_t lanes = outer_ * inner_;
#pragma omp parallel for if (lanes * dim_ > 32768)
    for (int64_t l = 0; l < lanes; ++l) {
      int64_t o = l / inner_, i = l % inner_;
      const T* px = x + o * dim_ * inner_ + i;
      T* py = y + o * dim_ * inner_ + i;
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t k = 0; k < dim_; ++k) m = std::max(m, px[k * inner_]);
      T sum = 0;
      for (int64_t k = 0; k < dim_; ++k) {
        T e = std::exp(px[k * inner_] - m);
        sum += e;
        if (!log_) py[k * inner_] = e;
      }
      if (log_) {
        T ls = std::log(sum);
        for (int64_t k = 0; k < dim_; ++k) py[k * inner_] = px[k * inner_] - m - ls;
      } else {
        for (int64_t k = 0; k < dim_; ++k) py[k * inner_] /= sum;
      }
    }
  }

  bool log_;
  int64_t outer_ = 1, dim_ = 1, inner_ = 1;
};

ANVIL_REGISTER_KERNEL("Softmax", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<SoftmaxKernel>(n, false);
});
ANVIL_REGISTER_KERNEL("LogSoftmax", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<SoftmaxKernel>(n, true);
});

}  // namespace

}  // namespace anvil::kernels
