// Normalizations over float32 rows on the ISA's vectors, rows split between
// threads; other types are the reference kernels' (ref/normalization.cc).
// - RMSNormalization (opset 23; fuse_rms_norm.cc makes it from LLaMA-style
//   RMSNorms written out): one pass sums each row's squares, one scales it
//   (VecKernels::rms_norm_row). Scales that are neither one value per
//   normalized element nor one in all are the reference's, which reports a
//   scale that does not broadcast.
// - InstanceNormalization over plain [N, C, ...] (PyTorch's GroupNorm
//   exports as one over [N, groups, ...], then the affine Mul and Add): each
//   plane's mean and variance in two passes (VecKernels::moments_row), then
//   the per-channel scale and shift as inference batch normalization
//   (batch_norm_rows). The reference's double loops took 10% of a
//   wav2vec-style feature extractor's run.
#include <cmath>

#include "kernels/ref/common.h"
#include "kernels/registry.h"
#include "kernels/vec/vec_kernels.h"

namespace anvil::kernels {
namespace {

class VecRmsNormKernel : public Kernel {
 public:
  explicit VecRmsNormKernel(const ir::Node& node)
      : eps_(node.attrs.get_float("epsilon", 1e-5f)), axis_(node.attrs.get_int("axis", -1)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);
    const auto axis = static_cast<size_t>(normalize_axis(ctx, axis_, static_cast<int64_t>(x.size())));
    row_ = shape_numel(Shape(x.begin() + static_cast<std::ptrdiff_t>(axis), x.end()));
    rows_ = row_ ? shape_numel(x) / row_ : 0;
    const int64_t scale = shape_numel(ctx.input_shape(1));
    ANVIL_PREPARE_CHECK(ctx, scale == row_ || scale == 1, ErrorKind::kUnsupported, "a scale the reference checks");
    one_scale_ = scale == 1 && row_ != 1;
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const float* x = ctx.in(0).data<float>();
    const float* scale = ctx.in(1).data<float>();
    float* y = ctx.out(0).data<float>();
    const auto norm = vec::vec_kernels().rms_norm_row;
#pragma omp parallel for if (rows_ > 1 && rows_ * row_ > 16384)
    for (int64_t r = 0; r < rows_; ++r) norm(x + r * row_, row_, scale, one_scale_, eps_, y + r * row_);
  }

  int inplace_input() const override { return 0; }  // each row is read before it is written
  std::string impl_name() const override { return vec::vec_impl_name(); }

 private:
  float eps_;
  int64_t axis_;
  int64_t rows_ = 0, row_ = 1;
  bool one_scale_ = false;
};

class VecInstanceNormKernel : public Kernel {
 public:
  explicit VecInstanceNormKernel(const ir::Node& node) : eps_(node.attrs.get_float("epsilon", 1e-5f)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);  // the schema checked [N, C, ...] and scale, B of [C]
    channels_ = x[1];
    plane_ = shape_numel(Shape(x.begin() + 2, x.end()));
    planes_ = plane_ ? shape_numel(x) / plane_ : 0;
    ANVIL_PREPARE_CHECK(ctx, plane_ > 0, ErrorKind::kUnsupported, "empty planes: the reference kernel");
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const float *x = ctx.in(0).data<float>(), *scale = ctx.in(1).data<float>(), *bias = ctx.in(2).data<float>();
    float* y = ctx.out(0).data<float>();
    const vec::VecKernels& k = vec::vec_kernels();
#pragma omp parallel for if (planes_ * plane_ > 32768)
    for (int64_t p = 0; p < planes_; ++p) {
      double mean = 0, variance = 0;
      k.moments_row(x + p * plane_, plane_, &mean, &variance);
      const int64_t c = p % channels_;
      const auto m = static_cast<float>(mean);
      const auto factor = static_cast<float>(static_cast<double>(scale[c]) / std::sqrt(variance + static_cast<double>(eps_)));
      k.batch_norm_rows(x + p * plane_, y + p * plane_, 1, plane_, &m, &factor, bias + c, false, false);
    }
  }

  int inplace_input() const override { return 0; }  // each plane is read before it is written
  std::string impl_name() const override { return vec::vec_impl_name(); }

 private:
  float eps_;
  int64_t planes_ = 0, channels_ = 1, plane_ = 1;
};

ANVIL_REGISTER_KERNEL_CLASS_TYPED("RMSNormalization", kVec, VecRmsNormKernel, {kFloat32Only});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("InstanceNormalization", kVec, VecInstanceNormKernel, {kFloat32Only});

}  // namespace
}  // namespace anvil::kernels
