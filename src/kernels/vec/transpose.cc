// Transpose of 4-byte elements that moves the innermost axis (NCHW <-> NHWC,
// K^T in attention): after merging axes that stay together, the copy is a
// batch of 2-D transposes, done in cache-sized blocks of 8x8 (4x4 on SSE4.1)
// register tiles. Permutations that keep the innermost axis are row copies,
// which the reference kernel already does with memcpy; those, and other
// element sizes, go to it.
#include <algorithm>

#include "kernels/ref/common.h"
#include "kernels/registry.h"
#include "kernels/vec/vec_kernels.h"

namespace anvil::kernels {
namespace {

constexpr int64_t kBlock = 64;  // a block of 64x64 4-byte values: 16 KiB read, 16 KiB written

class VecTransposeKernel : public Kernel {
 public:
  explicit VecTransposeKernel(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, dtype_size(ctx.input_dtype(0)) == 4, ErrorKind::kUnsupported,
                        "the vectorized Transpose moves 4-byte elements");
    const Shape& in = ctx.input_shape(0);
    const size_t rank = in.size();
    std::vector<int64_t> perm = ctx.attrs().get_ints("perm");
    if (!ctx.attrs().has("perm"))
      for (size_t i = 0; i < rank; ++i) perm.push_back(static_cast<int64_t>(rank - 1 - i));
    const std::vector<int64_t> in_strides = contiguous_strides(in);
    const Shape& out = ctx.output_shape(0);
    // Output axes with their input strides, unit axes dropped, neighbours that
    // stay contiguous in the input merged.
    dims_.clear();
    src_strides_.clear();
    for (size_t a = 0; a < rank; ++a) {
      const int64_t stride = in_strides[static_cast<size_t>(perm[a])];
      if (out[a] == 1) continue;
      if (!dims_.empty() && src_strides_.back() == stride * out[a]) {
        dims_.back() *= out[a];
        src_strides_.back() = stride;
        continue;
      }
      dims_.push_back(out[a]);
      src_strides_.push_back(stride);
    }
    const auto contiguous = std::find(src_strides_.begin(), src_strides_.end(), 1);
    if (dims_.size() < 2 || contiguous == src_strides_.end() || contiguous + 1 == src_strides_.end())
      ctx.fail(ErrorKind::kUnsupported, "the permutation keeps the innermost axis: a row copy");
    dst_strides_ = contiguous_strides(dims_);
    p_ = static_cast<size_t>(contiguous - src_strides_.begin());
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const auto* src = static_cast<const uint32_t*>(ctx.in(0).raw());
    auto* dst = static_cast<uint32_t*>(ctx.out(0).raw());
    const size_t m = dims_.size() - 1;
    // The 2-D problem: input rows along output axis m (src_ld apart), input
    // columns along output axis p_ (contiguous in the input).
    const int64_t rows = dims_[m], cols = dims_[p_];
    const int64_t src_ld = src_strides_[m], dst_ld = dst_strides_[p_];
    int64_t outer = 1;
    for (size_t d = 0; d < m; ++d)
      if (d != p_) outer *= dims_[d];
    const int64_t row_blocks = (rows + kBlock - 1) / kBlock, col_blocks = (cols + kBlock - 1) / kBlock;
    const int64_t items = outer * row_blocks * col_blocks;
    const auto transpose = vec::vec_kernels().transpose32;
#pragma omp parallel for if (outer * rows * cols > 32768)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t cb = item % col_blocks, rb = item / col_blocks % row_blocks, o = item / col_blocks / row_blocks;
      int64_t src_off = 0, dst_off = 0, rem = o;
      for (size_t d = m; d-- > 0;) {
        if (d == p_) continue;
        const int64_t i = rem % dims_[d];
        rem /= dims_[d];
        src_off += i * src_strides_[d];
        dst_off += i * dst_strides_[d];
      }
      const int64_t r0 = rb * kBlock, c0 = cb * kBlock;
      transpose(src + src_off + r0 * src_ld + c0, src_ld, dst + dst_off + c0 * dst_ld + r0, dst_ld,
                std::min(kBlock, rows - r0), std::min(kBlock, cols - c0));
    }
  }

  std::string impl_name() const override { return vec::vec_impl_name(); }

 private:
  Shape dims_;                                        // merged output dimensions
  std::vector<int64_t> src_strides_, dst_strides_;  // per merged output dimension
  size_t p_ = 0;                                      // the output axis contiguous in the input
};

// anvil.TokensToImage and anvil.ImageToTokens (passes/tokens_as_image.cc)
// where they are not views (an image that must be plain, layouts turned off
// by ANVIL_CONV_LAYOUT=plain): per batch item, a 2-D transpose of [rows,
// cols] 4-byte elements in the blocks above.
class VecTokensImageKernel : public Kernel {
 public:
  explicit VecTokensImageKernel(const ir::Node& node) : to_image_(node.op_type == "TokensToImage") {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, dtype_size(ctx.input_dtype(0)) == 4, ErrorKind::kUnsupported,
                        "the vectorized transpose moves 4-byte elements");
    const Shape& x = ctx.input_shape(0);  // the schema checked rank >= 3
    batch_ = x[0];
    rows_ = to_image_ ? shape_numel(Shape(x.begin() + 1, x.end() - 1)) : x[1];
    cols_ = to_image_ ? x.back() : shape_numel(Shape(x.begin() + 2, x.end()));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const auto* src = static_cast<const uint32_t*>(ctx.in(0).raw());
    auto* dst = static_cast<uint32_t*>(ctx.out(0).raw());
    const int64_t rows = rows_, cols = cols_, item_size = rows * cols;
    if (batch_ * item_size == 0) return;
    const int64_t row_blocks = (rows + kBlock - 1) / kBlock, col_blocks = (cols + kBlock - 1) / kBlock;
    const auto transpose = vec::vec_kernels().transpose32;
#pragma omp parallel for if (batch_ * item_size > 32768)
    for (int64_t item = 0; item < batch_ * row_blocks * col_blocks; ++item) {
      const int64_t cb = item % col_blocks, rb = item / col_blocks % row_blocks, n = item / col_blocks / row_blocks;
      const int64_t r0 = rb * kBlock, c0 = cb * kBlock;
      transpose(src + n * item_size + r0 * cols + c0, cols, dst + n * item_size + c0 * rows + r0, rows,
                std::min(kBlock, rows - r0), std::min(kBlock, cols - c0));
    }
  }

  std::string impl_name() const override { return vec::vec_impl_name(); }

 private:
  bool to_image_;
  int64_t batch_ = 0, rows_ = 0, cols_ = 0;  // each batch item's input is [rows, cols]
};

ANVIL_REGISTER_KERNEL_CLASS("Transpose", kVec, VecTransposeKernel);
static Registrar tokens_to_image_vec("TokensToImage", Backend::kVec, factory_of<VecTokensImageKernel>(), "anvil");
static Registrar image_to_tokens_vec("ImageToTokens", Backend::kVec, factory_of<VecTokensImageKernel>(), "anvil");

}  // namespace
}  // namespace anvil::kernels
