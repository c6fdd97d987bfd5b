// RMSNormalization (opset 23; fuse_rms_norm.cc makes it from LLaMA-style
// RMSNorms written out) over float32 rows: one pass sums each row's
// squares, one scales it, on the ISA's vectors (VecKernels::rms_norm_row),
// rows split between threads. Other types, and scales that are neither one
// value per normalized element nor one in all, are the reference kernel's
// (ref/normalization.cc, which reports a scale that does not broadcast).
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

ANVIL_REGISTER_KERNEL_CLASS_TYPED("RMSNormalization", kVec, VecRmsNormKernel, {kFloat32Only});

}  // namespace
}  // namespace anvil::kernels
