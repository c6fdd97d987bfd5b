// Window functions of `size` samples (opset 17): HannWindow, HammingWindow,
// BlackmanWindow; periodic (the default, for spectral analysis: the
// denominator is size) or symmetric (size - 1). Computed in double.
//
// MelWeightMatrix (17): triangular filters that map the dft_length / 2 + 1
// bins of a spectrum onto num_mel_bins mel bands between two edge
// frequencies, as ONNX's reference computes them (its mel step divides the
// range into num_mel_bins + 2 parts, and the edges round down to bins).
#include <cmath>

#include "core/checked.h"
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

class MelWeightMatrixKernel : public Kernel {
 public:
  explicit MelWeightMatrixKernel(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    double v[5];
    for (size_t i = 0; i < 5; ++i) {
      const Tensor& t = ctx.require_constant(i, "a MelWeightMatrix parameter");
      ANVIL_PREPARE_CHECK(ctx, t.numel() == 1, ErrorKind::kInvalidArgument, "input {} must be a scalar, got {}", i,
                          shape_str(t.shape()));
      v[i] = element_as_double(t, 0);
    }
    const auto mel_bins = static_cast<int64_t>(v[0]), dft = static_cast<int64_t>(v[1]), rate = static_cast<int64_t>(v[2]);
    ANVIL_PREPARE_CHECK(ctx, mel_bins > 0 && mel_bins < (int64_t{1} << 24) && dft > 0 && dft < (int64_t{1} << 30) && rate > 0,
                        ErrorKind::kInvalidArgument, "num_mel_bins {}, dft_length {} and sample_rate {} must be positive",
                        mel_bins, dft, rate);
    ANVIL_PREPARE_CHECK(ctx, std::isfinite(v[3]) && std::isfinite(v[4]) && v[3] >= 0 && v[3] <= v[4],
                        ErrorKind::kInvalidArgument, "the edges {} and {} Hz must be ordered and non-negative", v[3],
                        v[4]);
    rows_ = dft / 2 + 1;
    cols_ = mel_bins;
    check_allocation(shape_nbytes({rows_, cols_}, DType::kFloat64), ctx.node().describe() + ": the matrix");
    // The edges as the reference computes them: the mel scale in float32, its steps in double.
    auto mel = [](double hz) {
      const float m = 2595.f * std::log1p(static_cast<float>(hz) / 700.f);
      return static_cast<double>(m) / std::log(10.0);
    };
    const double low = mel(v[3]), high = mel(v[4]), step = (high - low) / static_cast<double>(mel_bins + 2);
    bins_.assign(static_cast<size_t>(mel_bins + 2), 0);
    for (int64_t i = 0; i < mel_bins + 2; ++i) {
      const double hz = 700 * std::expm1((static_cast<double>(i) * step + low) / 2595 * std::log(10.0));
      const double bin = std::floor(static_cast<double>(dft + 1) * hz / static_cast<double>(rate));
      ANVIL_PREPARE_CHECK(ctx, bin >= 0 && bin < static_cast<double>(rows_), ErrorKind::kInvalidArgument,
                          "band edge {} Hz falls outside the {} spectrum bins", hz, rows_);
      bins_[static_cast<size_t>(i)] = static_cast<int64_t>(bin);
    }
    return {{dtype_from_onnx_code(ctx.attrs().get_int("output_datatype", 1)), {rows_, cols_}}};  // the schema checked it
  }

  void run(const RunContext& ctx) const override {
    std::vector<double> w(static_cast<size_t>(rows_ * cols_), 0.0);
    for (int64_t i = 0; i < cols_; ++i) {
      const int64_t lo = bins_[static_cast<size_t>(i)], mid = bins_[static_cast<size_t>(i + 1)],
                    hi = bins_[static_cast<size_t>(i + 2)];
      if (mid == lo) w[static_cast<size_t>(mid * cols_ + i)] = 1;
      for (int64_t j = lo; mid > lo && j <= mid; ++j)
        w[static_cast<size_t>(j * cols_ + i)] = static_cast<double>(j - lo) / static_cast<double>(mid - lo);
      for (int64_t j = mid; j < hi; ++j)
        w[static_cast<size_t>(j * cols_ + i)] = static_cast<double>(hi - j) / static_cast<double>(hi - mid);
    }
    Tensor& y = ctx.out(0);
    Tensor wide(DType::kFloat64, y.shape());
    std::copy(w.begin(), w.end(), wide.data<double>());
    write_scalar_cast(wide, y);
  }

 private:
  // y = wide converted to y's type.
  static void write_scalar_cast(const Tensor& wide, Tensor& y) {
    dispatch_dtype(y.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int64_t i = 0; i < y.numel(); ++i) {
        const double v = wide.data<double>()[i];
        if constexpr (std::is_class_v<T>) y.data<T>()[i] = T(static_cast<float>(v));
        else y.data<T>()[i] = static_cast<T>(v);
      }
    });
  }

  int64_t rows_ = 0, cols_ = 0;
  std::vector<int64_t> bins_;
};

}  // namespace

ANVIL_REGISTER_OP_VERSIONS("MelWeightMatrix", 17, 17);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("MelWeightMatrix", kRef, MelWeightMatrixKernel,
                                  {kInt32And64, kInt32And64, kInt32And64, kFloats | kHalfs, kFloats | kHalfs});
ANVIL_REGISTER_OP_VERSIONS("HannWindow", 17, 21);
ANVIL_REGISTER_OP_VERSIONS("HammingWindow", 17, 21);
ANVIL_REGISTER_OP_VERSIONS("BlackmanWindow", 17, 21);
ANVIL_REGISTER_KERNEL_TYPED("HannWindow", kRef, window_factory(Window::kHann), {kInt32And64});
ANVIL_REGISTER_KERNEL_TYPED("HammingWindow", kRef, window_factory(Window::kHamming), {kInt32And64});
ANVIL_REGISTER_KERNEL_TYPED("BlackmanWindow", kRef, window_factory(Window::kBlackman), {kInt32And64});

}  // namespace anvil::kernels
