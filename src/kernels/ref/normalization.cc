// Normalizations over part of a tensor's axes:
// - LayerNormalization (opset 17): over the axes from `axis` to the end, then
//   scale and shift; the optional Mean and InvStdDev outputs are written when
//   the model asks for them (training graphs).
// - InstanceNormalization: over the spatial axes of each (n, c), then the
//   per-channel scale and shift.
// - MeanVarianceNormalization: over `axes` (default N, H, W).
// - LRN: each element divided by a power of the sum of squares of its `size`
//   channel neighbours.
// - RMSNormalization (opset 23): x / sqrt(mean(x^2 over the axes from `axis`)
//   + epsilon) * scale.
// - LpNormalization: x divided by its L1 or L2 norm along `axis`.
// Statistics accumulate in double.
#include <algorithm>
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

// Mean and 1 / sqrt(variance + eps) of `n` elements `stride` apart.
template <typename T>
std::pair<double, double> moments(const T* x, int64_t n, int64_t stride, double eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i * stride]);
  const double mean = n ? sum / static_cast<double>(n) : 0;
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i * stride]) - mean;
    sq += d * d;
  }
  return {mean, 1.0 / std::sqrt((n ? sq / static_cast<double>(n) : 0) + eps)};
}

class InstanceNormKernel : public Kernel {
 public:
  explicit InstanceNormKernel(const ir::Node& node) : eps_(node.attrs.get_float("epsilon", 1e-5f)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);  // the schema checked [N, C, ...] and scale, B of [C]
    planes_ = x[0] * x[1];
    channels_ = x[1];
    plane_ = shape_numel(Shape(x.begin() + 2, x.end()));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    dispatch_dtype(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T>) {
        const T *x = ctx.in(0).data<T>(), *scale = ctx.in(1).data<T>(), *bias = ctx.in(2).data<T>();
        T* y = ctx.out(0).data<T>();
#pragma omp parallel for if (planes_ * plane_ > 32768)
        for (int64_t p = 0; p < planes_; ++p) {
          const auto [mean, inv] = moments(x + p * plane_, plane_, 1, static_cast<double>(eps_));
          const int64_t c = p % channels_;
          for (int64_t i = 0; i < plane_; ++i)
            y[p * plane_ + i] = static_cast<T>((static_cast<double>(x[p * plane_ + i]) - mean) * inv *
                                                   static_cast<double>(scale[c]) + static_cast<double>(bias[c]));
        }
      }
    });
  }

 private:
  float eps_;
  int64_t planes_ = 0, channels_ = 1, plane_ = 1;
};

// GroupNormalization: the moments of each group of C / num_groups channels
// (a contiguous block per batch element); scale and bias are per channel
// (opset 21) or per group (18).
class GroupNormKernel : public Kernel {
 public:
  explicit GroupNormKernel(const ir::Node& node)
      : eps_(node.attrs.get_float("epsilon", 1e-5f)), groups_(node.attrs.get_int("num_groups", 1)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);  // the schema checked the groups, scale and bias
    batch_ = x[0];
    channels_ = x[1];
    plane_ = shape_numel(Shape(x.begin() + 2, x.end()));
    per_channel_ = ctx.opset() >= 21;
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T *x = ctx.in(0).data<T>(), *scale = ctx.in(1).data<T>(), *bias = ctx.in(2).data<T>();
      T* y = ctx.out(0).data<T>();
      const int64_t per_group = channels_ / groups_, block = per_group * plane_;
#pragma omp parallel for if (batch_ * channels_ * plane_ > 32768)
      for (int64_t bg = 0; bg < batch_ * groups_; ++bg) {
        const auto [mean, inv] = moments(x + bg * block, block, 1, static_cast<double>(eps_));
        const int64_t g = bg % groups_;
        for (int64_t i = 0; i < block; ++i) {
          const int64_t p = per_channel_ ? g * per_group + i / plane_ : g;
          y[bg * block + i] = static_cast<T>((static_cast<double>(x[bg * block + i]) - mean) * inv *
                                                 static_cast<double>(scale[p]) + static_cast<double>(bias[p]));
        }
      }
    });
  }

 private:
  float eps_;
  int64_t groups_;
  int64_t batch_ = 0, channels_ = 0, plane_ = 1;
  bool per_channel_ = true;
};

// (x - mean) / (std + 1e-9) over `axes`, as ONNX's definition and test data compute it.
class MeanVarianceNormKernel : public Kernel {
 public:
  explicit MeanVarianceNormKernel(const ir::Node& node)
      : axes_(node.attrs.get_ints("axes", std::vector<int64_t>{0, 2, 3})) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);
    const auto rank = static_cast<int64_t>(x.size());
    reduced_.assign(x.size(), false);
    for (int64_t a : axes_) reduced_[static_cast<size_t>(normalize_axis(ctx, a, rank))] = true;
    shape_ = x;
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      compute(ctx.in(0).data<T>(), ctx.out(0).data<T>());
    });
  }

 private:
  // Groups are the elements that share their kept coordinates.
  template <typename T>
  void compute(const T* x, T* y) const {
    const int64_t n = shape_numel(shape_);
    std::vector<int64_t> group(static_cast<size_t>(n));
    int64_t groups = 1;
    std::vector<int64_t> kept_stride(shape_.size(), 0);
    for (size_t d = shape_.size(); d-- > 0;)
      if (!reduced_[d]) {
        kept_stride[d] = groups;
        groups *= shape_[d];
      }
    for (int64_t i = 0; i < n; ++i) {
      int64_t rem = i, g = 0;
      for (size_t d = shape_.size(); d-- > 0;) {
        g += (rem % shape_[d]) * kept_stride[d];
        rem /= shape_[d];
      }
      group[static_cast<size_t>(i)] = g;
    }
    std::vector<double> sum(static_cast<size_t>(groups), 0), sq(static_cast<size_t>(groups), 0);
    std::vector<int64_t> count(static_cast<size_t>(groups), 0);
    for (int64_t i = 0; i < n; ++i) {
      const auto g = static_cast<size_t>(group[static_cast<size_t>(i)]);
      sum[g] += static_cast<double>(x[i]);
      ++count[g];
    }
    for (size_t g = 0; g < sum.size(); ++g) sum[g] = count[g] ? sum[g] / static_cast<double>(count[g]) : 0;
    for (int64_t i = 0; i < n; ++i) {
      const auto g = static_cast<size_t>(group[static_cast<size_t>(i)]);
      const double d = static_cast<double>(x[i]) - sum[g];
      sq[g] += d * d;
    }
    for (int64_t i = 0; i < n; ++i) {
      const auto g = static_cast<size_t>(group[static_cast<size_t>(i)]);
      const double std = std::sqrt(count[g] ? sq[g] / static_cast<double>(count[g]) : 0);
      y[i] = static_cast<T>((static_cast<double>(x[i]) - sum[g]) / (std + 1e-9));
    }
  }

  std::vector<int64_t> axes_;
  std::vector<bool> reduced_;
  Shape shape_;
};

// LRN: y = x / (bias + alpha / size * sum of x^2 over channels [c - (size-1)/2, c + ceil((size-1)/2)]) ^ beta.
class LrnKernel : public Kernel {
 public:
  explicit LrnKernel(const ir::Node& node)
      : alpha_(node.attrs.get_float("alpha", 1e-4f)),
        beta_(node.attrs.get_float("beta", 0.75f)),
        bias_(node.attrs.get_float("bias", 1.f)),
        size_(node.attrs.get_int("size", 0)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, size_ >= 1, ErrorKind::kInvalidModel, "size {} must be >= 1", size_);
    const Shape& x = ctx.input_shape(0);
    ANVIL_PREPARE_CHECK(ctx, x.size() >= 3, ErrorKind::kInvalidArgument, "input {} must be [N, C, D1, ...]",
                        shape_str(x));
    batch_ = x[0];
    channels_ = x[1];
    plane_ = shape_numel(Shape(x.begin() + 2, x.end()));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      compute(ctx.in(0).data<T>(), ctx.out(0).data<T>());
    });
  }

 private:
  template <typename T>
  void compute(const T* x, T* y) const {
    const int64_t before = (size_ - 1) / 2, after = size_ - 1 - before;
#pragma omp parallel for collapse(2) if (batch_ * channels_ * plane_ * size_ > 32768)
    for (int64_t n = 0; n < batch_; ++n)
      for (int64_t c = 0; c < channels_; ++c) {
        const int64_t lo = std::max<int64_t>(0, c - before), hi = std::min(channels_ - 1, c + after);
        for (int64_t i = 0; i < plane_; ++i) {
          double sq = 0;
          for (int64_t k = lo; k <= hi; ++k) {
            const double v = static_cast<double>(x[(n * channels_ + k) * plane_ + i]);
            sq += v * v;
          }
          const int64_t at = (n * channels_ + c) * plane_ + i;
          const double scale = std::pow(static_cast<double>(bias_) + static_cast<double>(alpha_) / size_ * sq,
                                        static_cast<double>(beta_));
          y[at] = static_cast<T>(static_cast<double>(x[at]) / scale);
        }
      }
  }

  float alpha_, beta_, bias_;
  int64_t size_;
  int64_t batch_ = 0, channels_ = 0, plane_ = 1;
};

// Rows of the elements from `axis` on (RMSNormalization) or lanes along `axis` (LpNormalization).
class NormKernel : public Kernel {
 public:
  NormKernel(const ir::Node& node, bool rms)
      : rms_(rms), eps_(node.attrs.get_float("epsilon", 1e-5f)), p_(node.attrs.get_int("p", 2)),
        axis_(node.attrs.get_int("axis", -1)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, rms_ || p_ == 1 || p_ == 2, ErrorKind::kInvalidModel, "p {} is not 1 or 2", p_);
    const Shape& x = ctx.input_shape(0);
    const auto axis = static_cast<size_t>(normalize_axis(ctx, axis_, static_cast<int64_t>(x.size())));
    outer_ = shape_numel(Shape(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(axis)));
    len_ = rms_ ? shape_numel(Shape(x.begin() + static_cast<std::ptrdiff_t>(axis), x.end())) : x[axis];
    inner_ = rms_ ? 1 : shape_numel(Shape(x.begin() + static_cast<std::ptrdiff_t>(axis) + 1, x.end()));
    if (rms_) {
      // ONNX lets the scale's float type differ from X's; this kernel reads both as one
      ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(1) == ctx.input_dtype(0), ErrorKind::kUnsupported,
                          "a {} scale beside {} X", dtype_name(ctx.input_dtype(1)), dtype_name(ctx.input_dtype(0)));
      const int64_t scale = shape_numel(ctx.input_shape(1));
      ANVIL_PREPARE_CHECK(ctx, scale == len_ || scale == 1, ErrorKind::kInvalidArgument,
                          "scale {} does not broadcast to the normalized {} elements", shape_str(ctx.input_shape(1)),
                          len_);
    }
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      compute<T>(ctx);
    });
  }

 private:
  template <typename T>
  void compute(const RunContext& ctx) const {
    const T* x = ctx.in(0).data<T>();
    const T* scale = rms_ ? ctx.in(1).data<T>() : nullptr;
    const bool one_scale = rms_ && ctx.in(1).numel() == 1;
    T* y = ctx.out(0).data<T>();
    for (int64_t o = 0; o < outer_; ++o)
      for (int64_t i = 0; i < inner_; ++i) {
        const int64_t base = o * len_ * inner_ + i;
        double acc = 0;
        for (int64_t k = 0; k < len_; ++k) {
          const double v = static_cast<double>(x[base + k * inner_]);
          acc += rms_ || p_ == 2 ? v * v : std::fabs(v);
        }
        const double norm = rms_ ? std::sqrt(acc / static_cast<double>(len_) + static_cast<double>(eps_))
                                 : p_ == 2 ? std::sqrt(acc) : acc;
        for (int64_t k = 0; k < len_; ++k) {
          const int64_t at = base + k * inner_;
          // An all-zero row over a zero norm: 0 for LpNormalization; NaN (0 / 0) for RMSNormalization,
          // as ONNX's function body and the vectorized kernel give.
          double v = norm == 0 && !rms_ ? 0.0 : static_cast<double>(x[at]) / norm;
          if (rms_) v *= static_cast<double>(scale[one_scale ? 0 : k]);
          y[at] = static_cast<T>(v);
        }
      }
  }

  bool rms_;
  float eps_;
  int64_t p_, axis_;
  int64_t outer_ = 1, len_ = 1, inner_ = 1;
};

ANVIL_REGISTER_KERNEL_CLASS("LayerNormalization", kRef, LayerNormKernel);
ANVIL_REGISTER_OP_VERSIONS("RMSNormalization", 23, 28);
ANVIL_REGISTER_KERNEL_TYPED("RMSNormalization", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<NormKernel>(n, true);
}, {kFloats, kFloats});
ANVIL_REGISTER_OP_VERSIONS("LpNormalization", 1, 22);
ANVIL_REGISTER_KERNEL_TYPED("LpNormalization", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<NormKernel>(n, false);
}, {kFloats});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("InstanceNormalization", kRef, InstanceNormKernel, {kFloats});
// 18: scale and bias per group; 21: per channel, stash_type (float32 or wider here).
ANVIL_REGISTER_OP_VERSIONS("GroupNormalization", 18, 21);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("GroupNormalization", kRef, GroupNormKernel, {kFloats});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("MeanVarianceNormalization", kRef, MeanVarianceNormKernel, {kFloats});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("LRN", kRef, LrnKernel, {kFloats});

}  // namespace
}  // namespace anvil::kernels
