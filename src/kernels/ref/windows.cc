// Window functions of `size` samples (opset 17): HannWindow, HammingWindow,
// BlackmanWindow; periodic (the default, for spectral analysis: the
// denominator is size) or symmetric (size - 1). Computed in double.
#include <cmath>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

enum class Window { kHann, kHamming, kBlackman };

class WindowKernel : public Kernel {
 public:
  WindowKernel(const ir::Node& node, Window w) : window_(w), periodic_(node.attrs.get_int("periodic", 1) != 0) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override { return ctx.output_types(); }

  void run(const RunContext& ctx) const override {
    Tensor& y = ctx.out(0);
    const int64_t size = y.numel();
    const double n = static_cast<double>(periodic_ ? size : size - 1);
    dispatch_dtype(y.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int64_t i = 0; i < size; ++i) {
        const double x = n > 0 ? 2 * M_PI * static_cast<double>(i) / n : 0;
        double v;
        switch (window_) {
          case Window::kHann: v = 0.5 - 0.5 * std::cos(x); break;
          case Window::kHamming: v = 25.0 / 46.0 - 21.0 / 46.0 * std::cos(x); break;
          default: v = 0.42 - 0.5 * std::cos(x) + 0.08 * std::cos(2 * x); break;
        }
        if constexpr (std::is_class_v<T>) y.data<T>()[i] = T(static_cast<float>(v));
        else y.data<T>()[i] = static_cast<T>(v);
      }
    });
  }

 private:
  Window window_;
  bool periodic_;
};

KernelFactory window_factory(Window w) {
  return [w](const ir::Node& n) -> std::unique_ptr<Kernel> { return std::make_unique<WindowKernel>(n, w); };
}

}  // namespace

ANVIL_REGISTER_OP_VERSIONS("HannWindow", 17, 21);
ANVIL_REGISTER_OP_VERSIONS("HammingWindow", 17, 21);
ANVIL_REGISTER_OP_VERSIONS("BlackmanWindow", 17, 21);
ANVIL_REGISTER_KERNEL_TYPED("HannWindow", kRef, window_factory(Window::kHann), {kInt32And64});
ANVIL_REGISTER_KERNEL_TYPED("HammingWindow", kRef, window_factory(Window::kHamming), {kInt32And64});
ANVIL_REGISTER_KERNEL_TYPED("BlackmanWindow", kRef, window_factory(Window::kBlackman), {kInt32And64});

}  // namespace anvil::kernels
