// Float32 reductions over the innermost axes (LayerNorm's mean and variance,
// a softmax's max and sum, pooling over a sequence) with Anvil's vectorized
// row folds. Reductions over other axes, and other dtypes, go to the
// reference kernel.
//
// Sums accumulate in double lanes, as the reference's do; max and min use
// plain float compares and look for a NaN only when one may have passed.
#include <algorithm>

#include "kernels/ref/common.h"
#include "kernels/registry.h"
#include "kernels/vec/vec_kernels.h"

namespace anvil::kernels {
namespace {

using vec::Reduction;

class VecReduceKernel : public Kernel {
 public:
  explicit VecReduceKernel(Reduction r) : r_(r) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.has_input(0) && ctx.input_dtype(0) == DType::kFloat32, ErrorKind::kUnsupported,
                        "the vectorized reductions take float32");
    const Shape& x = ctx.input_shape(0);
    const int64_t rank = static_cast<int64_t>(x.size());
    const std::vector<bool> reduced = reduced_axes(ctx, rank);
    // The reduced axes (size-1 axes aside) must be the innermost ones.
    row_ = 1;
    bool inner = true;
    for (int64_t i = rank; i-- > 0;) {
      if (x[i] == 1) continue;
      if (reduced[i] && !inner)
        ctx.fail(ErrorKind::kUnsupported, "the vectorized reductions reduce only the innermost axes");
      if (reduced[i]) row_ *= x[i];
      else inner = false;
    }
    rows_ = row_ ? shape_numel(x) / row_ : shape_numel(ctx.output_shape(0));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const float* x = ctx.in(0).data<float>();
    float* y = ctx.out(0).data<float>();
    const auto reduce = vec::vec_kernels().reduce_rows;
    // Blocks of rows of about 16K elements each, so short rows still split well.
    const int64_t per_block = std::max<int64_t>(1, 16384 / std::max<int64_t>(row_, 1));
    const int64_t blocks = (rows_ + per_block - 1) / per_block;
#pragma omp parallel for if (rows_ > 1 && rows_ * row_ > 32768)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t first = b * per_block, count = std::min(per_block, rows_ - first);
      reduce(r_, x + first * row_, count, row_, y + first);
    }
  }

  std::string impl_name() const override { return vec::vec_impl_name(); }

 private:
  Reduction r_;
  int64_t rows_ = 0, row_ = 1;  // rows_ results, each over row_ contiguous elements
};

#define ANVIL_VEC_REDUCE(op, r)                                                    \
  ANVIL_REGISTER_KERNEL(op, kVec, [](const ir::Node&) -> std::unique_ptr<Kernel> { \
    return std::make_unique<VecReduceKernel>(r);                                   \
  })
ANVIL_VEC_REDUCE("ReduceSum", Reduction::kSum);
ANVIL_VEC_REDUCE("ReduceMean", Reduction::kMean);
ANVIL_VEC_REDUCE("ReduceMax", Reduction::kMax);
ANVIL_VEC_REDUCE("ReduceMin", Reduction::kMin);
ANVIL_VEC_REDUCE("ReduceSumSquare", Reduction::kSumSquare);
ANVIL_VEC_REDUCE("ReduceL1", Reduction::kL1);
ANVIL_VEC_REDUCE("ReduceL2", Reduction::kL2);
ANVIL_VEC_REDUCE("ReduceLogSumExp", Reduction::kLogSumExp);
#undef ANVIL_VEC_REDUCE

}  // namespace
}  // namespace anvil::kernels
