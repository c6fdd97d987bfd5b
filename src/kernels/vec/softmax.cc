// Softmax and LogSoftmax over the last axis of float32 tensors, and
// anvil.MaskedSoftmax (Softmax(X + Mask), fused by fuse_masked_softmax.cc):
// one pass adds the mask and finds the row's max, one exponentiates and sums,
// one scales, with Anvil's vectorized exp. The mask broadcasts as Add would
// (an attention padding mask [B, 1, 1, S] against scores [B, H, S, S]).
//
// oneDNN's softmax comes first for a plain Softmax; this kernel runs the
// fused op, and the plain ones where oneDNN declines.
#include <algorithm>

#include "kernels/ref/common.h"
#include "kernels/registry.h"
#include "kernels/vec/vec_kernels.h"

namespace anvil::kernels {
namespace {

class VecSoftmaxKernel : public Kernel {
 public:
  explicit VecSoftmaxKernel(const ir::Node& node) : log_(node.op_type == "LogSoftmax") {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const bool masked = ctx.node().op_type == "MaskedSoftmax";
    ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(0) == DType::kFloat32, ErrorKind::kUnsupported,
                        "the vectorized Softmax takes float32");
    const Shape& out = ctx.output_shape(0);
    const int64_t rank = static_cast<int64_t>(out.size());
    if (!masked) {
      const int64_t axis = ctx.attrs().get_int("axis", ctx.opset() < 13 ? 1 : -1);
      const bool last = rank > 0 && (axis == -1 || axis == rank - 1);
      ANVIL_PREPARE_CHECK(ctx, last, ErrorKind::kUnsupported, "the vectorized Softmax runs over the last axis");
    }
    row_ = rank ? out.back() : 1;
    rows_ = row_ ? shape_numel(out) / row_ : 0;
    outer_ = rank > 1 ? Shape(out.begin(), out.end() - 1) : Shape{};
    x_strides_ = broadcast_strides(ctx.input_shape(0), out);
    mask_strides_ = masked ? broadcast_strides(ctx.input_shape(1), out) : std::vector<int64_t>(out.size(), 0);
    masked_ = masked;
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    if (rows_ == 0 || row_ == 0) return;
    const float* x = ctx.in(0).data<float>();
    const float* mask = masked_ ? ctx.in(1).data<float>() : nullptr;
    float* y = ctx.out(0).data<float>();
    const auto softmax = vec::vec_kernels().softmax_row;
    const int64_t x_step = x_strides_.empty() ? 0 : x_strides_.back();
    const int mask_step = mask_strides_.empty() ? 0 : static_cast<int>(mask_strides_.back());
#pragma omp parallel for if (rows_ > 1 && rows_ * row_ > 16384)
    for (int64_t r = 0; r < rows_; ++r) {
      int64_t x_off = 0, mask_off = 0, rem = r;
      for (size_t d = outer_.size(); d-- > 0;) {
        const int64_t i = rem % outer_[d];
        rem /= outer_[d];
        x_off += i * x_strides_[d];
        mask_off += i * mask_strides_[d];
      }
      float* out_row = y + r * row_;
      const float* x_row = x + x_off;
      if (x_step == 0) {  // X broadcast along the row (a rare model): spread it first, then normalize in place
        std::fill(out_row, out_row + row_, x_row[0]);
        x_row = out_row;
      }
      softmax(x_row, mask ? mask + mask_off : nullptr, mask_step, row_, out_row, log_);
    }
  }

  // A plain Softmax may overwrite its input: each row is read before it is written.
  int inplace_input() const override { return masked_ ? -1 : 0; }
  std::string impl_name() const override { return vec::vec_impl_name(); }

 private:
  bool log_, masked_ = false;
  int64_t rows_ = 0, row_ = 1;
  Shape outer_;                                  // the output's dimensions before the last
  std::vector<int64_t> x_strides_, mask_strides_;  // per output dimension (0: broadcast)
};

ANVIL_REGISTER_KERNEL_CLASS_TYPED("Softmax", kVec, VecSoftmaxKernel, {kFloat32Only});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("LogSoftmax", kVec, VecSoftmaxKernel, {kFloat32Only});
static Registrar masked_softmax("MaskedSoftmax", Backend::kVec, factory_of<VecSoftmaxKernel>(), "anvil",
                                {{kFloat32Only}});

}  // namespace
}  // namespace anvil::kernels
