// LayerNormalization (opset 17): normalizes over the axes from `axis` to the
// end, then scales and shifts. The optional Mean and InvStdDev outputs are
// written when the model asks for them (training graphs).
#include <cmath>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {
namespace {

class LayerNormKernel : public Kernel {
 public:
  explicit LayerNormKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const TensorType& x = ctx.input_type(0);
    dtype_ = x.dtype;
    ANVIL_PREPARE_CHECK(ctx, dtype_in(dtype_, kFloats), ErrorKind::kUnsupported, "dtype {} is not supported",
                        dtype_name(dtype_));
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    ANVIL_PREPARE_CHECK(ctx, rank >= 1, ErrorKind::kInvalidArgument, "input must have rank >= 1");
    const size_t axis = static_cast<size_t>(normalize_axis(ctx, ctx.attrs().get_int("axis", -1), rank));
    eps_ = ctx.attrs().get_float("epsilon", 1e-5f);
    rows_ = 1;
    cols_ = 1;
    for (size_t d = 0; d < x.shape.size(); ++d) (d < axis ? rows_ : cols_) *= x.shape[d];
    Shape norm(x.shape.begin() + static_cast<std::ptrdiff_t>(axis), x.shape.end());
    for (size_t i = 1; i < 3; ++i) {
      if (!ctx.has_input(i)) {
        ANVIL_PREPARE_CHECK(ctx, i == 2, ErrorKind::kInvalidModel, "Scale is required");
        continue;
      }
      ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(i) == dtype_, ErrorKind::kInvalidModel, "input {} must be {}, got {}",
                          i, dtype_name(dtype_), dtype_name(ctx.input_dtype(i)));
      // Scale and B broadcast to the normalized shape; the exporters give exactly that shape (or its size).
      ANVIL_PREPARE_CHECK(ctx, shape_numel(ctx.input_shape(i)) == cols_ || shape_numel(ctx.input_shape(i)) == 1,
                          ErrorKind::kInvalidArgument, "input {} {} does not broadcast to the normalized shape {}", i,
                          shape_str(ctx.input_shape(i)), shape_str(norm));
      broadcast_[i] = shape_numel(ctx.input_shape(i)) == 1 && cols_ != 1;
    }
    std::vector<TensorType> out = ctx.output_types();  // Y, then Mean and InvStdDev if asked for
    for (size_t o = 1; o < out.size(); ++o)
      ANVIL_PREPARE_CHECK(ctx, !ctx.node().output(o) || out[o].dtype == dtype_, ErrorKind::kUnsupported,
                          "statistics in {} (stash_type) for a {} input", dtype_name(out[o].dtype), dtype_name(dtype_));
    return out;
  }

  void run(const RunContext& ctx) const override {
    if (dtype_ == DType::kFloat32) compute<float>(ctx);
    else compute<double>(ctx);
  }

 private:
  template <typename T>
  void compute(const RunContext& ctx) const {
    const T* x = ctx.in(0).data<T>();
    const T* scale = ctx.in(1).data<T>();
    const T* bias = ctx.inputs.size() > 2 && ctx.inputs[2] ? ctx.in(2).data<T>() : nullptr;
    T* y = ctx.out(0).data<T>();
    T* mean_out = ctx.outputs.size() > 1 && ctx.outputs[1] ? ctx.out(1).data<T>() : nullptr;
    T* inv_out = ctx.outputs.size() > 2 && ctx.outputs[2] ? ctx.out(2).data<T>() : nullptr;
    const int64_t cols = cols_;
    const bool bs = broadcast_[1], bb = broadcast_[2];
#pragma omp parallel for if (rows_ * cols_ > 32768)
    for (int64_t r = 0; r < rows_; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      double sum = 0;  // accumulated in double: rows of thousands of floats
      for (int64_t c = 0; c < cols; ++c) sum += static_cast<double>(xr[c]);
      const double mean = cols ? sum / static_cast<double>(cols) : 0;
      double sq = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double d = static_cast<double>(xr[c]) - mean;
        sq += d * d;
      }
      const double inv = 1.0 / std::sqrt((cols ? sq / static_cast<double>(cols) : 0) + static_cast<double>(eps_));
      const T m = static_cast<T>(mean), s = static_cast<T>(inv);
      for (int64_t c = 0; c < cols; ++c) {
        T v = (xr[c] - m) * s * scale[bs ? 0 : c];
        yr[c] = bias ? v + bias[bb ? 0 : c] : v;
      }
      if (mean_out) mean_out[r] = m;
      if (inv_out) inv_out[r] = s;
    }
  }

  DType dtype_ = DType::kUndefined;
  float eps_ = 1e-5f;
  int64_t rows_ = 1, cols_ = 1;
  bool broadcast_[3] = {false, false, false};
};

ANVIL_REGISTER_KERNEL_CLASS("LayerNormalization", kRef, LayerNormKernel);

}  // namespace
}  // namespace anvil::kernels
