// The kernels of a two-class head's gradient kept as its factors
// (passes/fuse_two_class_gate_grad.cc):
//
//   anvil.TwoClassReluGrad(dZ, W, H): the rows of dZ [N, 2] are (u, -u) up
//     to rounding, so ReluGrad(dZ W, H) = diag(u) G diag(w), with u = (dZ[:, 0]
//     - dZ[:, 1]) / 2, w = W[0, :] - W[1, :] and G = [H > 0]. Writes u, w, G
//     packed into bits by rows and by columns, and optionally the gradient's
//     column sums (a bias's gradient) and dZ^T H (the head's weight gradient).
//   anvil.BitGemm(B, T, row_scale, k_scale, gate): Y = diag(row_scale) B
//     diag(k_scale) T for B 0/1, zeroed where gate <= 0 or NaN, optionally with its
//     column sums. The layer below's input gradient is G (diag(w) W2) scaled
//     by u and gated by its ReLU, its weight gradient G^T (diag(u) H1) scaled
//     by w: table lookups instead of multiplications (vec_kernels.h).
//
// The reference kernels are in kernels/ref/two_class_grad.cc.
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "anvil/cpu.h"
#include "kernels/fusion_advice.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"
#include "kernels/thread_share.h"
#include "kernels/two_class_grad.h"
#include "kernels/vec/vec_kernels.h"

namespace anvil::kernels {
namespace {

constexpr int64_t kGateBlockRows = 64;  // rows a thread packs at once: 8 whole bytes of each column's bits
constexpr int64_t kBitRowBlock = 4096;  // rows of Y per task, at most (their bits stay in L2 beside the tables)

int team_size(int threads) { return std::min(omp_get_num_threads(), threads); }

// byte i of x is row i (bit j: column j) -> byte j is column j (bit i: row i).
uint64_t transpose_bits_8x8(uint64_t x) {
  uint64_t t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAull;
  x ^= t ^ (t << 7);
  t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCull;
  x ^= t ^ (t << 14);
  t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ull;
  return x ^ t ^ (t << 28);
}

class VecTwoClassReluGrad : public Kernel {
 public:
  explicit VecTwoClassReluGrad(const ir::Node& node) : trans_b_(node.attrs.get_int("transB", 0) != 0) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const TwoClassDims d = check_two_class_relu_grad(ctx);
    rows_ = d.rows;
    width_ = d.width;
    threads_ = std::max(1, ctx.num_threads());
    return ctx.output_types();
  }

  // Per thread: running totals in double of the gate sums and the two rows
  // of dZ^T H, then their float sums over a block of rows.
  size_t scratch_bytes() const override {
    return static_cast<size_t>(threads_) * static_cast<size_t>(3 * width_) * (sizeof(float) + sizeof(double));
  }

  std::string impl_name() const override { return vec::vec_impl_name(); }

  void run(const RunContext& ctx) const override {
    const float* dz = ctx.in(0).data<float>();
    const float* w_in = ctx.in(1).data<float>();
    const float* h = ctx.in(2).data<float>();
    float* u = ctx.out(0).data<float>();
    float* w = ctx.out(1).data<float>();
    uint8_t* by_rows = ctx.out(2).data<uint8_t>();
    uint8_t* by_cols = output(ctx, 3) ? output(ctx, 3)->data<uint8_t>() : nullptr;
    Tensor *sums = output(ctx, 4), *head = output(ctx, 5);
    for (int64_t j = 0; j < width_; ++j) w[j] = trans_b_ ? w_in[2 * j] - w_in[2 * j + 1] : w_in[j] - w_in[width_ + j];
    for (int64_t r = 0; r < rows_; ++r) u[r] = 0.5f * (dz[2 * r] - dz[2 * r + 1]);
    auto* doubles = static_cast<double*>(ctx.scratch);
    auto* floats = reinterpret_cast<float*>(doubles + threads_ * 3 * width_);
    std::fill(doubles, doubles + threads_ * 3 * width_, 0.0);  // also the slots of threads the team lacks
    const bool totals = sums || head;
    const int64_t blocks = ceil_div(rows_, kGateBlockRows);
#pragma omp parallel if (threads_ > 1 && blocks > 1)
    {
      const int t = omp_get_thread_num(), team = team_size(threads_);
      if (t < team) {
        float* f = floats + t * 3 * width_;
        double* d = doubles + t * 3 * width_;
        const auto [first, last] = share(blocks, t, team);
        for (int64_t block = first; block < last; ++block) {
          if (totals) std::fill(f, f + 3 * width_, 0.f);
          gate_block(block * kGateBlockRows, dz, h, u, by_rows, sums ? f : nullptr, head ? f + width_ : nullptr);
          if (by_cols) transpose_block(block * kGateBlockRows, by_rows, by_cols);
          if (totals)
            for (int64_t j = 0; j < 3 * width_; ++j) d[j] += f[j];
        }
      }
    }
    if (sums) write_totals(doubles, 0, width_, w, sums->data<float>());
    if (head) write_totals(doubles, width_, 2 * width_, nullptr, head->data<float>());
  }

 private:
  static Tensor* output(const RunContext& ctx, size_t i) { return i < ctx.outputs.size() ? ctx.outputs[i] : nullptr; }

  void gate_block(int64_t r0, const float* dz, const float* h, const float* u, uint8_t* by_rows, float* gate_sums,
                  float* head) const {
    const auto gate_row = vec::vec_kernels().bit_gemm.gate_row;
    const int64_t row_bytes = ceil_div(width_, 8);
    for (int64_t r = r0; r < std::min(rows_, r0 + kGateBlockRows); ++r)
      gate_row(h + r * width_, width_, u[r], dz[2 * r], dz[2 * r + 1], by_rows + r * row_bytes, gate_sums, head);
  }

  // The bits of rows [r0, r0 + 64) by columns: bytes r0 / 8 .. of each column's row of G^T.
  void transpose_block(int64_t r0, const uint8_t* by_rows, uint8_t* by_cols) const {
    const int64_t row_bytes = ceil_div(width_, 8), col_bytes = ceil_div(rows_, 8);
    const int64_t bytes = std::min<int64_t>(kGateBlockRows / 8, col_bytes - r0 / 8);
    for (int64_t jb = 0; jb < row_bytes; ++jb) {
      uint64_t cols[8] = {};  // cols[q] byte t: column 8 jb + t over rows r0 + 8 q ..
      for (int64_t q = 0; q < bytes; ++q) {
        uint64_t x = 0;
        for (int64_t i = 0; i < 8; ++i) {
          const int64_t r = r0 + 8 * q + i;
          if (r < rows_) x |= uint64_t{by_rows[r * row_bytes + jb]} << (8 * i);
        }
        cols[q] = transpose_bits_8x8(x);
      }
      for (int64_t t = 0; t < 8 && 8 * jb + t < width_; ++t) {
        uint8_t out[8];
        for (int64_t q = 0; q < 8; ++q) out[q] = static_cast<uint8_t>(cols[q] >> (8 * t));
        std::memcpy(by_cols + (8 * jb + t) * col_bytes + r0 / 8, out, static_cast<size_t>(bytes));
      }
    }
  }

  // out[j] = scale[j] (1 without) x the threads' totals of column `offset` + j.
  void write_totals(const double* doubles, int64_t offset, int64_t n, const float* scale, float* out) const {
    for (int64_t j = 0; j < n; ++j) {
      double total = 0;
      for (int t = 0; t < threads_; ++t) total += doubles[t * 3 * width_ + offset + j];
      out[j] = static_cast<float>(scale ? total * scale[j] : total);
    }
  }

  bool trans_b_;
  int threads_ = 1;
  int64_t rows_ = 0, width_ = 0;
};

class VecBitGemm : public Kernel {
 public:
  explicit VecBitGemm(const ir::Node& node) : trans_b_(node.attrs.get_int("transB", 0) != 0) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const BitGemmDims d = check_bit_gemm(ctx, trans_b_);
    m_ = d.m;
    k_ = d.k;
    cols_ = d.cols;
    gated_ = d.gated;
    sums_ = d.sums;
    threads_ = std::max(1, ctx.num_threads());
    // Row blocks of equal size, so that no thread waits on a short last one.
    row_blocks_ = std::max<int64_t>(1, ceil_div(m_, kBitRowBlock));
    block_rows_ = ceil_div(m_, row_blocks_);
    col_blocks_ = ceil_div(cols_, vec::kBitColumns);
    // One group where the tables of all of K fit; else groups of half that:
    // on the weight gradient (1024 x 25,000 x 1024) 116 ms against 127 with
    // the 512 KiB groups, whose tables share L2 with the bits and the rows
    // of Y each group adds to (bench/tools/binary_gemm_ab, AVX-512, 2 threads).
    const int64_t chunks = 2 * ceil_div(k_, 8);
    group_chunks_ = chunks <= vec::kBitGroupChunks ? vec::kBitGroupChunks : vec::kBitGroupChunks / 2;
    return ctx.output_types();
  }

  // Per thread the tables, then the column sums of each row block.
  size_t scratch_bytes() const override {
    const size_t sums = sums_ ? static_cast<size_t>(row_blocks_ * cols_) : 0;
    return (static_cast<size_t>(threads_) * vec::kBitTableFloats + sums) * sizeof(float);
  }

  std::string impl_name() const override { return vec::vec_impl_name(); }

  void run(const RunContext& ctx) const override {
    const bool sums = sums_;
    auto* scratch = static_cast<float*>(ctx.scratch);
    float* block_sums = scratch + threads_ * vec::kBitTableFloats;
    vec::BitGemmBlock base;
    base.bits = ctx.in(0).data<uint8_t>();
    base.row_bytes = ceil_div(k_, 8);
    base.t = ctx.in(1).data<float>();
    base.t_k_stride = trans_b_ ? 1 : cols_;
    base.t_j_stride = trans_b_ ? k_ : 1;
    base.k_size = k_;
    base.row_scale = ctx.in(2).data<float>();
    base.k_scale = ctx.in(3).data<float>();
    base.gate = gated_ ? ctx.in(4).data<float>() : nullptr;
    base.gate_ld = cols_;
    base.y = ctx.out(0).data<float>();
    base.ldy = cols_;
    base.group_chunks = group_chunks_;
    const int64_t tasks = m_ == 0 ? 0 : row_blocks_ * col_blocks_;
    const auto block_fn = vec::vec_kernels().bit_gemm.block;
#pragma omp parallel if (threads_ > 1 && tasks > 1)
    {
      const int t = omp_get_thread_num(), team = team_size(threads_);
      if (t < team) {
        vec::BitGemmBlock b = base;
        b.tables = scratch + t * vec::kBitTableFloats;
        const auto [first, last] = share(tasks, t, team);
        for (int64_t task = first; task < last; ++task) {  // a row block's column blocks in turn: its bits stay cached
          const int64_t rb = task / col_blocks_, cb = task % col_blocks_;
          b.r0 = rb * block_rows_;
          b.rows = std::min(block_rows_, m_ - b.r0);
          b.j0 = cb * vec::kBitColumns;
          b.cols = std::min(vec::kBitColumns, cols_ - b.j0);
          b.column_sums = sums ? block_sums + rb * cols_ + b.j0 : nullptr;
          block_fn(b);
        }
      }
    }
    if (sums) {
      float* out = ctx.out(1).data<float>();
      for (int64_t j = 0; j < cols_; ++j) {
        double total = 0;
        for (int64_t rb = 0; m_ > 0 && rb < row_blocks_; ++rb) total += block_sums[rb * cols_ + j];
        out[j] = static_cast<float>(total);
      }
    }
  }

 private:
  bool trans_b_, gated_ = false, sums_ = false;
  int threads_ = 1;
  int64_t m_ = 0, k_ = 0, cols_ = 0, row_blocks_ = 1, block_rows_ = 0, col_blocks_ = 0, group_chunks_ = 0;
};

static Registrar two_class_relu_grad("TwoClassReluGrad", Backend::kVec, factory_of<VecTwoClassReluGrad>(), "anvil",
                                     {{kFloat32Only}});
static Registrar bit_gemm("BitGemm", Backend::kVec, factory_of<VecBitGemm>(), "anvil",
                          {{dtype_bit(DType::kUInt8), kFloat32Only}});

}  // namespace

bool two_class_gate_fusion_pays(const ir::Node&) {
  const char* v = std::getenv("ANVIL_FUSE_TWO_CLASS_GATE");
  if (v && std::strcmp(v, "0") == 0) return false;
  if (v && std::strcmp(v, "1") == 0) return true;
  // Each thread's share of its L2 (a core's, or a cluster's split between
  // its cores; SMT siblings split it too) must hold a group's 512 KiB of tables.
  constexpr size_t kTablesFitL2 = size_t{1} << 20;
  const CpuInfo& cpu = cpu_info();
  return vector_isa() == VectorIsa::kAvx512 ||
         (vector_isa() == VectorIsa::kAvx2 && cpu.l2_bytes / static_cast<size_t>(cpu.l2_shared_by) >= kTablesFitL2);
}

}  // namespace anvil::kernels
