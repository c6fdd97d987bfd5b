// Where on 4-byte elements (float32, int32, uint32) with Anvil's vectorized
// select: the three operands' broadcasts are merged into rows over which
// each operand is contiguous or one repeated value, as a causal or padding
// mask ([1, 1, S, S] against [B, H, S, S]) gives. Other dtypes go to the
// reference kernel.
#include <algorithm>

#include "kernels/ref/common.h"
#include "kernels/registry.h"
#include "kernels/vec/vec_kernels.h"

namespace anvil::kernels {
namespace {

constexpr int64_t kChunk = 8192;  // elements per parallel work item

class VecWhereKernel : public Kernel {
 public:
  explicit VecWhereKernel(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const TensorType &c = ctx.input_type(0), &x = ctx.input_type(1), &y = ctx.input_type(2);
    ANVIL_PREPARE_CHECK(ctx, c.dtype == DType::kBool && x.dtype == y.dtype && dtype_size(x.dtype) == 4,
                        ErrorKind::kUnsupported, "the vectorized Where takes a bool condition and 4-byte values");
    merge_dims(ctx.output_shape(0), {c.shape, x.shape, y.shape});
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    if (numel_ == 0) return;
    const bool* c = ctx.in(0).data<bool>();
    const auto* x = static_cast<const uint32_t*>(ctx.in(1).raw());
    const auto* y = static_cast<const uint32_t*>(ctx.in(2).raw());
    auto* o = static_cast<uint32_t*>(ctx.out(0).raw());
    const int64_t inner = dims_.back(), rows = numel_ / inner;
    const int64_t chunks = (inner + kChunk - 1) / kChunk;
    const int s0 = static_cast<int>(strides_[0].back()), s1 = static_cast<int>(strides_[1].back()),
              s2 = static_cast<int>(strides_[2].back());
    const auto select = vec::vec_kernels().select32;
#pragma omp parallel for if (numel_ > 32768)
    for (int64_t item = 0; item < rows * chunks; ++item) {
      const int64_t r = item / chunks, begin = item % chunks * kChunk, n = std::min(kChunk, inner - begin);
      int64_t off[3] = {0, 0, 0}, rem = r;
      for (size_t d = dims_.size() - 1; d-- > 0;) {
        const int64_t i = rem % dims_[d];
        rem /= dims_[d];
        for (int k = 0; k < 3; ++k) off[k] += i * strides_[static_cast<size_t>(k)][d];
      }
      select(c + off[0] + begin * s0, x + off[1] + begin * s1, y + off[2] + begin * s2, o + r * inner + begin, n, s0,
             s1, s2);
    }
  }

  std::string impl_name() const override { return vec::vec_impl_name(); }

 private:
  // Drops unit dimensions and merges neighbours that every operand steps
  // through the same way (contiguously, or broadcast), so rows are long.
  void merge_dims(const Shape& out, const std::vector<Shape>& operands) {
    numel_ = shape_numel(out);
    dims_.clear();
    strides_.assign(operands.size(), {});
    std::vector<std::vector<int64_t>> full;
    for (const Shape& s : operands) full.push_back(broadcast_strides(s, out));
    for (size_t d = 0; d < out.size(); ++d) {
      if (out[d] == 1) continue;
      bool merge = !dims_.empty();
      for (size_t k = 0; merge && k < operands.size(); ++k) merge = strides_[k].back() == full[k][d] * out[d];
      if (merge) {
        dims_.back() *= out[d];
        for (size_t k = 0; k < operands.size(); ++k) strides_[k].back() = full[k][d];
      } else {
        dims_.push_back(out[d]);
        for (size_t k = 0; k < operands.size(); ++k) strides_[k].push_back(full[k][d]);
      }
    }
    if (dims_.empty()) {
      dims_ = {1};
      for (auto& s : strides_) s = {0};
    }
  }

  int64_t numel_ = 0;
  std::vector<int64_t> dims_;
  std::vector<std::vector<int64_t>> strides_;  // per operand, per merged dimension
};

ANVIL_REGISTER_KERNEL_CLASS("Where", kVec, VecWhereKernel);

}  // namespace
}  // namespace anvil::kernels
