// Anvil's own vectorized loops for ops that oneDNN does not run (Where,
// Transpose) or not as one pass (inner-axis reductions without a primitive
// per shape, Softmax of a masked sum), compiled once per vector
// ISA (vec_kernels_{sse41,avx2,avx512}.cc) and picked at start-up by
// vector_isa(), which ANVIL_MAX_ISA caps.
//
// These are single-threaded row routines; the op kernels beside them
// (where.cc, reduce.cc, transpose.cc, softmax.cc) split the work over
// OpenMP threads and call them per row or tile.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/vector_isa.h"
#include "ir/elementwise_chain.h"

namespace anvil::kernels::vec {

// kSquaredDeviation: in sum_columns the squares of x - shift[j] (the second
// pass of a variance about the columns' means); reduce_rows, which takes no
// shift, reads it as kSumSquare.
enum class Reduction { kSum, kMean, kMax, kMin, kSumSquare, kL1, kL2, kLogSumExp, kSquaredDeviation };

// The most columns sum_columns and extreme_columns take at once: their runs
// and the caller's accumulators stay in L1.
constexpr int64_t kFoldColumns = 2048;

using ir::ChainOp;
using ir::ChainOperand;
using ir::ChainStep;

// The activations the packed GEMM applies in its epilogue (those of
// kernels/activation.h that have a vectorized form here).
enum class GemmActivation { kNone, kRelu, kLeakyRelu, kClip, kSigmoid, kSwish, kHardSigmoid, kHardSwish, kGelu, kGeluTanh };

struct GemmEpilogue {
  GemmActivation activation = GemmActivation::kNone;
  float alpha = 0, beta = 0;  // LeakyRelu's slope, Clip's bounds, Swish's alpha, HardSigmoid's alpha and beta
  // A ReLU's gradient (training): C is kept where gate > 0 and zeroed
  // elsewhere, after the activation; gate is [m, n], rows gate_ld apart.
  const float* gate = nullptr;
  int64_t gate_ld = 0;
  bool any() const { return activation != GemmActivation::kNone || gate; }
};

// The last k-block's epilogue applied in registers, before a whole-width
// tile is stored: c = relu?(acc * row_scale[r] + bias), then zeroed where
// gate <= 0. bias is at the tile's first column, gate at its first row and
// column, row_scale at its first row; any may be null. A ReLU network's
// training epilogues are all of this kind; others (GELU, ...) and partial
// tiles take GemmKernels::epilogue (no row_scale there), a pass
// over the stored tile, which stalled on the gate's loads right after C's
// stores (perf; likely 4 KiB aliasing: both matrices' rows are a page apart).
struct GemmTileFinish {
  const float* bias = nullptr;
  const float* gate = nullptr;
  int64_t gate_ld = 0;
  bool relu = false;
  const float* row_scale = nullptr;  // the attention's softmax normalization
  // The tile's column sums (after the gate) added here, in double: the
  // calling thread's row of GemmOutput::column_sums at the tile's first
  // column. Null: none.
  double* column_sums = nullptr;
  // A^T x gate for the tile's rows added here, in double (GemmOutput::
  // gate_products): row q of the calling thread's [gate_a_k, n] block at
  // the tile's first column, rows gate_products_ld apart; gate_a the tile's
  // first row of A (gate_a_k floats a row, gate_a_ld apart). Null: none.
  const float* gate_a = nullptr;
  int64_t gate_a_ld = 0;
  int gate_a_k = 0;
  double* gate_products = nullptr;
  int64_t gate_products_ld = 0;
};

// Lines a micro-kernel asks the L2 for while it runs, spread over its k
// steps: its share of the B panel block the sweep reads next. Weights that
// stream from memory (a transformer's at short sequences, 340 MB in
// BERT-base) otherwise arrive only as the first row tile of each panel
// asks for them, and the cores wait for memory there while it idles under
// the other row tiles (BERT-base's 32 x 768 x 3072 products: 0.94 -> 0.64
// ms on two AVX-512 cores, 1.36 -> 0.97 on AVX2; bench/tools/stream_gemm_ab).
struct GemmPrefetch {
  const float* next = nullptr;  // null: none
  int64_t lines = 0;            // 64-byte lines from next on
};

// A 2-D convolution's input read as a GEMM's A (an implicit im2col): row p
// is output pixel (p / ow, p % ow), column k = (kh_i * kw + kw_i) * channels
// + c is channel c under tap (kh_i, kw_i); zero where the window leaves the
// image. The image (x) is one batch item in the blocked layout of the
// vector width (nChw8c on AVX2: channel blocks of `width`, each a plane of
// ih x iw pixels of `width` floats); channels is a multiple of the width.
struct ConvGather {
  const float* x = nullptr;
  int64_t channels = 0, ih = 0, iw = 0, ow = 0;
  int64_t kh = 0, kw = 0, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

// The register-blocked core of the packed GEMM (gemm.h drives it).
struct GemmKernels {
  int mr, nr, kc;  // tile rows, tile columns (a packed panel's width), k-block of the packing
  // The k-blocks for an L2 share under kLargeL2Bytes and for one at least
  // that large: vec_kernels() and vec_kernels_for() set kc to the one this
  // CPU takes (gemm_impl.h, kGemmKc).
  int kc_small_l2, kc_large_l2;
  int width;       // floats per vector (nr is a multiple)
  // The k-block of products of many rows swept a row tile at a time across
  // the panels (gemm.cc, gemm_part_row_sweep); 0: this ISA does not.
  int row_sweep_kc;
  // Whether products against a prepacked B read A from packed blocks even
  // where its rows are contiguous (the tile reading A in place spills).
  bool pack_contiguous_a;
  // c[m x n] = init + a[m x kc] * b for m <= mr, n <= nr: a's rows lda apart,
  // b one packed panel block (nr floats per k), init null (zero), c itself
  // (accumulate) or another matrix, ldc apart like c. `finish` (null: none)
  // only with n a multiple of width. `prefetch`: lines to ask the L2 for
  // meanwhile (none when its `next` is null).
  void (*tile)(const float* a, int64_t lda, const float* b, int64_t kc, const float* init, float* c, int64_t ldc,
               int m, int n, const GemmTileFinish* finish, GemmPrefetch prefetch);
  // The same with a from a packed panel: mr floats per k (rows past m unset:
  // never read), and c's (and init's) vectors of a row ldv floats apart
  // (width: contiguous; n then a multiple of width unless ldv == width).
  void (*tile_packed_a)(const float* a, const float* b, int64_t kc, const float* init, float* c, int64_t ldc,
                        int64_t ldv, int m, int n, const GemmTileFinish* finish, GemmPrefetch prefetch);
  // A row tile of m <= mr rows (lda apart, columns contiguous) over kc
  // columns into tile_packed_a's layout (rows past m unset).
  void (*pack_a)(const float* a, int64_t lda, int m, int64_t kc, float* out);
  // Output pixels [p0, p0 + m) (m <= mr) and columns [k0, k0 + kc) of a
  // convolution's implicit A into tile_packed_a's layout (k0 and kc
  // multiples of width; rows past m zero).
  void (*gather_conv_a)(const ConvGather& conv, int64_t p0, int m, int64_t k0, int64_t kc, float* out);
  // The ISA's transpose32 (below), which packs a transposed B per run.
  void (*transpose32)(const uint32_t* src, int64_t src_ld, uint32_t* dst, int64_t dst_ld, int64_t rows, int64_t cols);
  // c[r][j] = act(c[r][j] + bias[j]) for r < rows, j < cols, then zero where
  // gate[r * e.gate_ld + j] <= 0 when gate is set (the tile's part of e.gate);
  // bias and gate may be null.
  void (*epilogue)(float* c, int64_t ldc, int64_t rows, int64_t cols, const float* bias, const float* gate,
                   const GemmEpilogue& e);
};

// A 2-D pooling window: kernel, stride, dilation (1: dense) and leading padding.
struct PoolWindow {
  int64_t kh, kw, sh, sw, dh, dw, ph, pw;
};

// F(4x4, 3x3) Winograd transforms of one tile, a vector of channels at a
// time (winograd.h drives them).
struct WinogradKernels {
  // The tile whose 6x6 input patch starts at (row0, col0) of one channel
  // block's plane x (ih x iw pixels of `width` floats; zero outside it):
  // its 36 transformed vectors, element e at v + e * v_stride.
  void (*input_tile)(const float* x, int64_t ih, int64_t iw, int64_t row0, int64_t col0, float* v,
                     int64_t v_stride);
  // The 4x4 output tile (its first rows x cols inside the output) from the
  // 36 products at m + e * m_stride, plus bias (one vector, or null) and the
  // residual (laid out as y, or null; may be y), then ReLU if asked; y is the
  // tile's first pixel, rows ow pixels apart.
  void (*output_tile)(const float* m, int64_t m_stride, const float* bias, const float* residual, float* y,
                      int64_t ow, int rows, int cols, bool relu);
};

// A product by a 0/1 matrix, done by table lookups rather than
// multiplications (anvil.BitGemm, kernels/vec/bit_gemm.cc drives it): one
// block of Y = diag(row_scale) B diag(k_scale) T, zeroed where gate <= 0 or NaN.
// K is cut into chunks of kBitChunk rows of T; a table holds the 16 sums of
// each chunk's rows (scaled by k_scale) over the block's columns, and each
// row of Y adds, per chunk, the entry its four bits of B pick: one vector
// add and one load stand for four multiply-adds. The sums are float32 sums
// in another order than a GEMM's.
constexpr int64_t kBitChunk = 4;           // rows of T a table entry sums
constexpr int64_t kBitColumns = 32;        // columns of Y a block spans (at most)
constexpr int64_t kBitGroupChunks = 256;   // chunks whose tables are held at once, at most
constexpr int64_t kBitTableFloats = kBitGroupChunks * 16 * kBitColumns;  // 512 KiB: they stay in L2

struct BitGemmBlock {
  // B: bit k % 8 of byte k / 8 of row r (row_bytes = ceil(k / 8) bytes apart)
  // is B[r, k]; bits at k_size and past are ignored.
  const uint8_t* bits = nullptr;
  int64_t row_bytes = 0;
  // T[k, j] at t[k * t_k_stride + j * t_j_stride], for k < k_size.
  const float* t = nullptr;
  int64_t t_k_stride = 0, t_j_stride = 0, k_size = 0;
  const float* k_scale = nullptr;    // [k_size]
  const float* row_scale = nullptr;  // one per row of B and Y
  const float* gate = nullptr;       // [rows of Y, gate_ld] at Y's column 0; null: none
  int64_t gate_ld = 0;
  float* y = nullptr;  // Y's row 0, column 0
  int64_t ldy = 0;
  int64_t r0 = 0, rows = 0;  // the block's rows
  int64_t j0 = 0, cols = 0;  // its columns, cols <= kBitColumns
  // The block's column sums of Y (after the gate) written here, cols
  // floats; null: none.
  float* column_sums = nullptr;
  float* tables = nullptr;  // scratch of kBitTableFloats floats, 64-byte aligned
  // Chunks tabulated at once (even, at most kBitGroupChunks): Y's rows are
  // added to once per group after the first.
  int64_t group_chunks = kBitGroupChunks;
};

struct BitGemmKernels {
  void (*block)(const BitGemmBlock& b);
  // One row of a two-class head's gradient (anvil.TwoClassReluGrad): bit j
  // of bits is h[j] > 0 for j < n (ceil(n / 8) bytes, the last one's high
  // bits zero); gate_sums[j] += u where h[j] > 0; head[j] += a h[j] and
  // head[n + j] += b h[j]. gate_sums and head may be null.
  void (*gate_row)(const float* h, int64_t n, float u, float a, float b, uint8_t* bits, float* gate_sums,
                   float* head);
};

// The cells of ONNX's recurrent ops with their default activations
// (vec/recurrent.cc drives them), over `units` hidden units of one batch
// row: xw is the input's projection with the biases, q = H_{t-1} R^T, both
// laid out per gate, `units` floats apart, in ONNX's gate order; the
// activations' inputs are clipped to [-clip, clip] where clip >= 0.
struct RecurrentKernels {
  // RNN: h = tanh(xw + q).
  void (*rnn_cell)(const float* xw, const float* q, int64_t units, float clip, float* h);
  // LSTM, gates [i, o, f, c]: c (in place) = f c + i tanh(c~), h = o tanh(c),
  // with f = 1 - i under input_forget; peepholes p (i, o, f: p, p + p_ld,
  // p + 2 p_ld) or null.
  void (*lstm_cell)(const float* xw, const float* q, int64_t units, float clip, bool input_forget, const float* p,
                    int64_t p_ld, float* c, float* h);
  // GRU, gates [z, r, h]: z = sigmoid, and r = sigmoid, or r * h_prev where
  // h_prev is given (no linear_before_reset: R_h then multiplies it).
  void (*gru_gates)(const float* xw, const float* q, int64_t units, float clip, const float* h_prev, float* z,
                    float* r);
  // GRU's new state: h = (1 - z) tanh(xw_h + a) + z h_prev, a = r (q_h + rb_h)
  // with linear_before_reset (r given), else q_h + rb_h; rb_h may be null.
  void (*gru_output)(const float* xw_h, const float* q_h, const float* rb_h, const float* r, const float* z,
                     const float* h_prev, int64_t units, float clip, float* h);
};

struct VecKernels {
  // o[j] = c[j * sc] ? x[j * sx] : y[j * sy] for j < n, on 4-byte elements;
  // each stride is 0 (a broadcast value) or 1.
  void (*select32)(const bool* c, const uint32_t* x, const uint32_t* y, uint32_t* o, int64_t n, int sc, int sx,
                   int sy);
  // dst[j * dst_ld + i] = src[i * src_ld + j] for i < rows, j < cols (4-byte elements).
  void (*transpose32)(const uint32_t* src, int64_t src_ld, uint32_t* dst, int64_t dst_ld, int64_t rows,
                      int64_t cols);
  // out[r] = the reduction of x[r * n, r * n + n) for r < rows (Mean divides by n;
  // Max and Min propagate NaN).
  void (*reduce_rows)(Reduction kind, const float* x, int64_t rows, int64_t n, float* out);
  // Reductions over leading or middle axes, rows folded into columns, for
  // j < n <= kFoldColumns, rows `ld` floats apart. sum_columns: acc[j] +=
  // the sum over r < rows of the reduction's term of x[r * ld + j] (Sum and
  // Mean: x; SumSquare and L2: x * x; L1: |x|; LogSumExp: exp(x - shift[j]);
  // SquaredDeviation: (x - shift[j])^2; shift null otherwise), added in
  // float over runs of rows and the runs in double (a run that leaves
  // float's range is added again in double).
  // extreme_columns: ext[j] = the max (Max) or min (Min) of ext[j] and the
  // column's values; NaN propagates.
  void (*sum_columns)(Reduction kind, const float* x, int64_t rows, int64_t ld, int64_t n, const float* shift,
                      double* acc);
  void (*extreme_columns)(Reduction kind, const float* x, int64_t rows, int64_t ld, int64_t n, float* ext);
  // One row of n: y = softmax(x + mask) (or its log); mask may be null, or a
  // single value broadcast over the row when mask_stride is 0.
  void (*softmax_row)(const float* x, const float* mask, int mask_stride, int64_t n, float* y, bool log);
  // One row of n: y = x / sqrt(mean(x^2) + eps) * scale (n values; one,
  // broadcast, with one_scale). y may be x.
  void (*rms_norm_row)(const float* x, int64_t n, const float* scale, bool one_scale, float eps, float* y);
  // The mean and the population variance of x[0, n) (n > 0): two passes,
  // each summed in float lanes over runs and the runs in double.
  void (*moments_row)(const float* x, int64_t n, double* mean, double* variance);
  // The exps of one query's attention scores, in place: s[j] = exp(t[j] -
  // max t), t = s * scale + mask (mask null: none), for j < n, zeros from n
  // to len; returns 1 / their sum. A row with an infinite max (every key
  // masked) or a NaN sum gives zeros and 0, as the reference attention.
  float (*attention_exps)(float* s, int64_t n, int64_t len, float scale, const float* mask);
  // y[j] = the chain applied to x[j] for j < n; operands[s] points at step s's
  // operand values for this block (kRow and kFull; null otherwise). y may be x.
  void (*chain_block)(const ChainStep* steps, int count, const float* x, const float* const* operands, float* y,
                      int64_t n);
  // Inference batch normalization of `rows` rows of n floats, y = (x - mean)
  // * scale + shift, then max(y, 0) with relu (NaN gives 0): with per_lane
  // one mean, scale and shift per position j < n of a row (a pixel's
  // channels), else the single mean[0], scale[0], shift[0] for every value
  // (a plane of one channel). y may be x.
  void (*batch_norm_rows)(const float* x, float* y, int64_t rows, int64_t n, const float* mean, const float* scale,
                          const float* shift, bool per_lane, bool relu);
  // y[j] = x[j] * sigmoid(alpha * x[j]) for j < n (Swish; SiLU at alpha 1),
  // within a few ulp (exp(-|alpha x|) taken as 0 below 2^-126); y may be x.
  void (*swish)(const float* x, float* y, int64_t n, float alpha);
  // y[j] = sigmoid(x[j]) for j < n, within a few ulp (0 below about -87.33); y may be x.
  void (*sigmoid)(const float* x, float* y, int64_t n);
  // A single row's products (gemm_impl.h): dot_rows: out[r] = the dot product
  // of w's row r (n floats) and x, for r < rows; add_scaled_rows: out[j] +=
  // the sum over r < rows of h[r] * w[r * ld + j], for j < n.
  void (*dot_rows)(const float* w, const float* x, int64_t rows, int64_t n, float* out);
  void (*add_scaled_rows)(const float* w, int64_t ld, const float* h, int64_t rows, int64_t n, float* out);
  GemmKernels gemm;
  // Output rows [oh_begin, oh_end) of max pooling over one plane of ih x iw
  // pixels, each `channels` contiguous floats, pixels src_pixel (dst_pixel)
  // floats apart: a channel block of nChw8c / nChw16c, or NHWC's pixels. As
  // the reference: the first tap in the window, then any greater one.
  void (*max_pool_rows)(const float* src, int64_t ih, int64_t iw, int64_t src_pixel, float* dst, int64_t ow,
                        int64_t dst_pixel, int64_t channels, const PoolWindow& w, int64_t oh_begin, int64_t oh_end);
  // The gradient of max_pool_rows for output rows [oh_begin, oh_end) of one
  // plane: dy (ow pixels a row, dy_pixel floats apart) added into dx, laid
  // out as x and zeroed by the caller, at each window's first maximum; with
  // relu_gate only where that maximum is positive (anvil.MaxPoolGrad).
  void (*max_pool_grad_rows)(const float* dy, int64_t ow, int64_t dy_pixel, const float* x, int64_t ih, int64_t iw,
                             int64_t x_pixel, float* dx, int64_t channels, const PoolWindow& w, bool relu_gate,
                             int64_t oh_begin, int64_t oh_end);
  WinogradKernels winograd;
  BitGemmKernels bit_gemm;
  RecurrentKernels recurrent;
};

// An L2 share (per logical CPU) of this size or more takes GemmKernels::kc_large_l2.
constexpr size_t kLargeL2Bytes = size_t{1} << 20;

const VecKernels& vec_kernels();                 // for vector_isa()
const VecKernels& vec_kernels_for(VectorIsa isa);  // tests: each path
// The GEMM's k-block for an L2 share of l2_bytes (0: unknown, the short one).
int gemm_kc_for_l2(const GemmKernels& g, size_t l2_bytes);

// "vec:avx2": the implementation name kernels report in plans and profiles.
const char* vec_impl_name();

}  // namespace anvil::kernels::vec
