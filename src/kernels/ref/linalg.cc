// Det: the determinant of each square matrix in the last two axes, by LU
// decomposition with partial pivoting, in double.
#include <cmath>
#include <utility>
#include <vector>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

double determinant(std::vector<double>& a, int64_t n) {
  double det = 1;
  for (int64_t c = 0; c < n; ++c) {
    int64_t pivot = c;
    for (int64_t r = c + 1; r < n; ++r)
      if (std::fabs(a[r * n + c]) > std::fabs(a[pivot * n + c])) pivot = r;
    if (a[pivot * n + c] == 0) return 0;
    if (pivot != c) {
      for (int64_t k = 0; k < n; ++k) std::swap(a[c * n + k], a[pivot * n + k]);
      det = -det;
    }
    det *= a[c * n + c];
    for (int64_t r = c + 1; r < n; ++r) {
      const double f = a[r * n + c] / a[c * n + c];
      for (int64_t k = c; k < n; ++k) a[r * n + k] -= f * a[c * n + k];
    }
  }
  return det;
}

class DetKernel : public Kernel {
 public:
  explicit DetKernel(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);  // the schema checked [*, M, M]
    n_ = x.back();
    count_ = shape_numel(Shape(x.begin(), x.end() - 2));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    dispatch_dtype(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T>) {
        const T* x = ctx.in(0).data<T>();
        T* y = ctx.out(0).data<T>();
        std::vector<double> a(static_cast<size_t>(n_ * n_));
        for (int64_t m = 0; m < count_; ++m) {
          for (int64_t i = 0; i < n_ * n_; ++i) a[static_cast<size_t>(i)] = static_cast<double>(x[m * n_ * n_ + i]);
          y[m] = static_cast<T>(determinant(a, n_));
        }
      }
    });
  }

 private:
  int64_t n_ = 0, count_ = 0;
};

}  // namespace

ANVIL_REGISTER_KERNEL_CLASS_TYPED("Det", kRef, DetKernel, {kFloats});

}  // namespace anvil::kernels
