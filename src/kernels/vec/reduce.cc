// Float32 reductions over one run of adjacent axes with Anvil's vectorized
// folds: over the innermost axes (LayerNorm's mean and variance, a softmax's
// max and sum) a row at a time, and over leading or middle axes (a
// sequence's mean pooling, a bias gradient's column sums) rows folded into
// blocks of columns, along memory. Reductions over several separate runs of
// axes, and other dtypes, go to the reference kernel.
//
// Sums add blocks of terms in float and the blocks in double (the
// reference adds every term in double; a float32 result sees the difference
// only where the sum cancels far below its terms), a block that leaves
// float's range, or whose squares may have underflowed, again in double;
// max and min propagate NaN.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/ref/common.h"
#include "kernels/registry.h"
#include "kernels/thread_share.h"
#include "kernels/vec/vec_kernels.h"

namespace anvil::kernels {
namespace {

using vec::Reduction;

constexpr int64_t kMinParallelElements = 32768;
constexpr int64_t kMinRowsToSplit = 128;  // two of the column fold's float runs

class VecReduceKernel : public Kernel {
 public:
  explicit VecReduceKernel(Reduction r) : r_(r) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.has_input(0) && ctx.input_dtype(0) == DType::kFloat32, ErrorKind::kUnsupported,
                        "the vectorized reductions take float32");
    const Shape& x = ctx.input_shape(0);
    const int64_t rank = static_cast<int64_t>(x.size());
    const std::vector<bool> reduced = reduced_axes(ctx, rank);
    // The input as [outer, count, inner]: the reduced axes (size-1 axes
    // aside) must be one run.
    outer_ = count_ = inner_ = 1;
    enum { kBefore, kIn, kAfter } at = kBefore;
    for (int64_t i = 0; i < rank; ++i) {
      if (x[i] == 1) continue;
      if (reduced[i]) {
        if (at == kAfter) ctx.fail(ErrorKind::kUnsupported, "the vectorized reductions reduce one run of adjacent axes");
        at = kIn;
        count_ *= x[i];
      } else {
        if (at == kIn) at = kAfter;
        (at == kBefore ? outer_ : inner_) *= x[i];
      }
    }
    // Fewer columns than a vector (a two-class head's bias gradient, [N, 2]):
    // the reference kernel's loop per column ran 4x faster than the folds
    // with each row as a partial vector.
    ANVIL_PREPARE_CHECK(ctx, inner_ == 1 || inner_ >= 16 || outer_ * count_ * inner_ == 0, ErrorKind::kUnsupported,
                        "the vectorized reductions take at least 16 columns");
    threads_ = std::max(1, ctx.num_threads());
    if (inner_ > 1) {  // columns in blocks of at most kFoldColumns, as even as whole vectors allow
      const int64_t blocks = ceil_div(inner_, vec::kFoldColumns);
      width_ = std::min(inner_, ceil_div(ceil_div(inner_, blocks), 16) * 16);
      blocks_ = ceil_div(inner_, width_);
    }
    return ctx.output_types();
  }

  // Per part of the column folds: the double sums, the extremes and the
  // LogSumExp's shifts of one block of columns.
  size_t scratch_bytes() const override {
    return inner_ > 1 ? static_cast<size_t>(threads_) * static_cast<size_t>(width_) * (sizeof(double) + 2 * sizeof(float))
                      : 0;
  }

  void run(const RunContext& ctx) const override {
    const float* x = ctx.in(0).data<float>();
    float* y = ctx.out(0).data<float>();
    if (inner_ == 1) return run_rows(x, y);
    if (outer_ == 0 || inner_ == 0) return;  // no output
    const bool parallel = outer_ * count_ * inner_ > kMinParallelElements;
    const int team = parallel ? std::min(threads_, omp_get_max_threads()) : 1;
    const int64_t units = outer_ * blocks_;
    if (units >= team || count_ < kMinRowsToSplit) return run_column_blocks(x, y, ctx.scratch, team);
    run_split_rows(x, y, ctx.scratch, team);
  }

  std::string impl_name() const override { return vec::vec_impl_name(); }

 private:
  // One part's accumulators in the scratch (width_ columns each).
  struct Part {
    double* acc;
    float* ext;
    float* shift;
  };
  Part part(void* scratch, int64_t p) const {
    auto* acc = static_cast<double*>(scratch) + p * width_;
    auto* floats = reinterpret_cast<float*>(static_cast<double*>(scratch) + threads_ * width_);
    return {acc, floats + 2 * p * width_, floats + (2 * p + 1) * width_};
  }

  bool sums() const { return r_ != Reduction::kMax && r_ != Reduction::kMin; }
  bool extremes() const { return r_ == Reduction::kMax || r_ == Reduction::kMin || r_ == Reduction::kLogSumExp; }

  // Block u (of outer_ * blocks_): its first input and output element and its width.
  struct Block {
    int64_t x, y, width;
  };
  Block block(int64_t u) const {
    const int64_t o = u / blocks_, c0 = u % blocks_ * width_;
    return {o * count_ * inner_ + c0, o * inner_ + c0, std::min(width_, inner_ - c0)};
  }

  void start(const Part& p, int64_t width) const {
    if (sums()) std::fill(p.acc, p.acc + width, 0.0);
    if (extremes())
      std::fill(p.ext, p.ext + width, r_ == Reduction::kMin ? std::numeric_limits<float>::infinity()
                                                           : -std::numeric_limits<float>::infinity());
  }

  // The LogSumExp's shifts from the columns' maxima: as softmax_shift_of.
  static void shifts_from(const float* max, int64_t width, float* shift) {
    for (int64_t j = 0; j < width; ++j) shift[j] = std::isinf(max[j]) ? 0.f : max[j];
  }

  // Column j's result from a part's accumulators (only those the reduction fills are read).
  float finish(const Part& p, int64_t j) const {
    switch (r_) {
      case Reduction::kMax: case Reduction::kMin: return p.ext[j];
      case Reduction::kMean: return static_cast<float>(p.acc[j] / static_cast<double>(count_));  // 0 / 0: NaN
      case Reduction::kL2: return static_cast<float>(std::sqrt(p.acc[j]));
      case Reduction::kLogSumExp: return p.shift[j] + static_cast<float>(std::log(p.acc[j]));
      default: return static_cast<float>(p.acc[j]);
    }
  }

  void run_rows(const float* x, float* y) const {
    const auto reduce = vec::vec_kernels().reduce_rows;
    // Blocks of rows of about 16K elements each, so short rows still split well.
    const int64_t per_block = std::max<int64_t>(1, 16384 / std::max<int64_t>(count_, 1));
    const int64_t blocks = ceil_div(outer_, per_block);
#pragma omp parallel for if (outer_ > 1 && outer_ * count_ > kMinParallelElements)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t first = b * per_block, rows = std::min(per_block, outer_ - first);
      reduce(r_, x + first * count_, rows, count_, y + first);
    }
  }

  // As many blocks as threads or more: each block's rows on one thread.
  void run_column_blocks(const float* x, float* y, void* scratch, int team) const {
    const auto& k = vec::vec_kernels();
#pragma omp parallel for num_threads(team)
    for (int64_t u = 0; u < outer_ * blocks_; ++u) {
      const Part p = part(scratch, omp_get_thread_num());
      const Block b = block(u);
      start(p, b.width);
      if (extremes()) k.extreme_columns(r_, x + b.x, count_, inner_, b.width, p.ext);
      if (r_ == Reduction::kLogSumExp) shifts_from(p.ext, b.width, p.shift);
      if (sums()) k.sum_columns(r_, x + b.x, count_, inner_, b.width, p.shift, p.acc);
      for (int64_t j = 0; j < b.width; ++j) y[b.y + j] = finish(p, j);
    }
  }

  // Fewer blocks than threads (a bias gradient's [N, C] -> [C]): the rows of
  // each block are split, each range folded into a part of its own, and the
  // block's first part gathers the others'.
  void run_split_rows(const float* x, float* y, void* scratch, int team) const {
    const auto& k = vec::vec_kernels();
    const int64_t units = outer_ * blocks_, splits = team / units, parts = units * splits;  // parts <= team
#pragma omp parallel num_threads(team)
    {
      const int t = omp_get_thread_num(), threads = omp_get_num_threads();
      const auto rows_of = [&](int64_t q) { return share(count_, static_cast<int>(q % splits), static_cast<int>(splits)); };
      const auto first_of = [&](int64_t u) { return part(scratch, u * splits); };
      for (int64_t q = t; q < parts; q += threads) {
        const Part p = part(scratch, q);
        const Block b = block(q / splits);
        const auto [r0, r1] = rows_of(q);
        start(p, b.width);
        if (extremes()) k.extreme_columns(r_, x + b.x + r0 * inner_, r1 - r0, inner_, b.width, p.ext);
      }
      // Max and Min gather their parts below; LogSumExp's exps need each column's max first.
      const Reduction gather = r_ == Reduction::kLogSumExp ? Reduction::kMax : r_;
      const auto gather_extremes = [&](int64_t u) {
        for (int64_t s = 1; s < splits; ++s)
          k.extreme_columns(gather, part(scratch, u * splits + s).ext, 1, 0, block(u).width, first_of(u).ext);
      };
      if (r_ == Reduction::kLogSumExp) {
#pragma omp barrier
        for (int64_t u = t; u < units; u += threads) {
          gather_extremes(u);
          shifts_from(first_of(u).ext, block(u).width, first_of(u).shift);
        }
#pragma omp barrier
      }
      if (sums())
        for (int64_t q = t; q < parts; q += threads) {
          const Block b = block(q / splits);
          const auto [r0, r1] = rows_of(q);
          k.sum_columns(r_, x + b.x + r0 * inner_, r1 - r0, inner_, b.width, first_of(q / splits).shift,
                        part(scratch, q).acc);
        }
#pragma omp barrier
      for (int64_t u = t; u < units; u += threads) {
        const Part first = first_of(u);
        const Block b = block(u);
        if (r_ == Reduction::kMax || r_ == Reduction::kMin) gather_extremes(u);
        if (sums())
          for (int64_t s = 1; s < splits; ++s) {
            const double* other = part(scratch, u * splits + s).acc;
            for (int64_t j = 0; j < b.width; ++j) first.acc[j] += other[j];
          }
        for (int64_t j = 0; j < b.width; ++j) y[b.y + j] = finish(first, j);
      }
    }
  }

  Reduction r_;
  int64_t outer_ = 1, count_ = 1, inner_ = 1;
  int64_t width_ = 0, blocks_ = 0;  // the column folds' blocks
  int threads_ = 1;
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
