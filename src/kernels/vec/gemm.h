// Anvil's GEMM:
//   C[M, N] = act(A[M, K] * B[K, N] + bias[N] + residual[M, N])
// For a constant right-hand side (packed_gemm), B is packed once, at plan
// time, into panels of the ISA's tile width (pack_gemm_b); A is read in
// place, or on AVX-512 packed a block at a time where a thread's share has
// 4 panels or more (pack_contiguous_a in GemmKernels). For two operands known only at run time (gemm), each run
// packs B, and A where its rows are not contiguous. The blocking follows the usual
// three-level scheme: a k-block of one B panel (in L1 below AVX-512; the
// prepacked k-blocks of AVX-512, and of AVX2 where a logical CPU's share of
// the L2 is 1 MiB or more, are longer, 768) across every row tile of an A block
// that stays in L2; threads split the panels (or, when there are few, the
// rows) so each writes its own part of C. On AVX-512, a product packed per
// run with thousands of rows turns that around: a row tile's A in L1 across
// a k-block of the panels in L2 (the row sweep, gemm.cc).
//
// Why it exists: on CPUs without AVX-512, oneDNN 2.6.3's matmul is its
// gemm:jit sgemm, which takes B only in its plain layout and repacks it on
// every call (docs/status-speed.md). On AVX-512 its brgemm reads a B that
// streams from memory no faster than the first row tile asks for it; this
// GEMM prefetches the next panel while it computes (GemmPrefetch), which
// wins for products of few rows when the weights outgrow the caches.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "anvil/tensor.h"
#include "kernels/vec/vec_kernels.h"

namespace anvil::kernels::vec {

// The epilogue activation for an activation name of kernels/activation.h
// ("" is none); nullopt when the GEMM has no vectorized form of it.
std::optional<GemmActivation> gemm_activation(const std::string& name);

// B (element (i, j) at b[i * stride_k + j * stride_n]) in the packed layout of
// `g`: per k-block of g.kc rows, per panel of g.nr columns, the block's rows
// of the panel, g.nr floats each; columns past n are zero. Scaled by `scale`.
Tensor pack_gemm_b(const GemmKernels& g, const float* b, int64_t k, int64_t n, int64_t stride_k, int64_t stride_n,
                   float scale = 1.f);
// The inverse of pack_gemm_b (scale 1): writes b from the packed floats.
void unpack_gemm_b(const GemmKernels& g, const float* packed, int64_t k, int64_t n, float* b, int64_t stride_k,
                   int64_t stride_n);
// Identifies, in the session's weight cache, B packed for `g` from a source
// read as [k, n] with these strides (one tensor may be read both ways).
std::string gemm_layout_key(const GemmKernels& g, int64_t k, int64_t n, int64_t stride_k, int64_t stride_n);

// What a product writes, and what it adds and applies on the way.
struct GemmOutput {
  const float* bias = nullptr;      // [n] or null
  const float* residual = nullptr;  // [m, n], rows ldc apart, or null; may be c
  float* c = nullptr;               // [m, n], rows ldc apart
  int64_t ldc = 0;
  // 0: a row's columns are contiguous. Else its vectors (GemmKernels::width
  // columns each) are ldv floats apart, as in a blocked activation layout
  // (conv_gemm); n is then a multiple of the width, and only a ReLU or no
  // activation is applied.
  int64_t ldv = 0;
  GemmEpilogue epilogue;
  // gemm() only, with ldv 0: the column sums of C's final values (after the
  // epilogue) added into column_sums + t * n for each OpenMP thread t of the
  // team (the caller zeroes one row of n per thread and adds the rows up),
  // each tile's as it is finished, in cache. Null: none.
  double* column_sums = nullptr;
  // gemm() only, with ldv 0 and epilogue.gate set: A^T x gate, [k, n] (the
  // gate's own values, not the mask, weighted by A's columns: a classifier
  // head's weight gradient beside its input gradient), added into
  // gate_products + t * k * n for each OpenMP thread t of the team (the
  // caller zeroes them and adds them up), each tile's as it is finished.
  // A's columns must be contiguous. Null: none.
  double* gate_products = nullptr;
  // Set by gemm() from the product: A's first row, its rows' distance, k.
  const float* gate_a = nullptr;
  int64_t gate_a_ld = 0, gate_a_k = 0;
};

struct GemmArgs : GemmOutput {
  const float* a = nullptr;  // [m, k], rows lda apart
  int64_t lda = 0;
  int64_t m = 0, k = 0, n = 0;
  const float* b_packed = nullptr;  // pack_gemm_b of [k, n]
  // Whether the tiles prefetch the next panel of B into L2 (GemmPrefetch):
  // it pays where B comes from memory, and costs 1-3% where it comes from
  // the caches (the op kernels ask du::weights_stream).
  bool prefetch_b = true;
};

// Runs the product on the calling thread's OpenMP team size.
void packed_gemm(const GemmKernels& g, const GemmArgs& args);
// The same on the calling thread alone, opening no parallel region: for
// kernels that split their work between the team's threads themselves
// (vec/recurrent.cc), where a nested region would start a team per thread
// wherever nested parallelism is enabled.
void packed_gemm_on_this_thread(const GemmKernels& g, const GemmArgs& args);
// The same for C's columns in B's panels [p0, p1) only (g.nr columns each;
// K > 0): a caller that orders the panels itself.
void packed_gemm_panels_on_this_thread(const GemmKernels& g, const GemmArgs& args, int64_t p0, int64_t p1);

// Row tile `tile`'s share (of `row_tiles` tiles splitting them evenly) of
// the 64-byte lines holding `floats` packed floats from `block` on (null:
// none): what it asks the L2 for while it computes (GemmPrefetch).
GemmPrefetch gemm_prefetch_share(const float* block, int64_t floats, int64_t tile, int64_t row_tiles);

// A matrix read in place: element (i, j) at data[i * row_stride + j * col_stride].
struct GemmMatrix {
  const float* data = nullptr;
  int64_t row_stride = 0, col_stride = 1;
};

// C[M, N] = act(A[M, K] * B[K, N] + bias[N] + residual[M, N]) with neither
// operand packed beforehand (training's products, whose weights change every
// step, and its gradients, A or B transposed): each thread packs the part of
// B its columns need per run (all of B when threads split the rows), the
// whole K when that fits a 2 MiB budget and a k-range of at least one
// k-block otherwise, and A's blocks too where A's rows are not contiguous.
// The packing buffers are kept per thread. When K dwarfs M and N, threads
// split K instead (each packs only its k-range of both) and add their parts:
// the sums then depend on the thread count, not on the run.
struct GemmProduct : GemmOutput {
  GemmMatrix a, b;
  int64_t m = 0, k = 0, n = 0;
};
void gemm(const GemmKernels& g, const GemmProduct& product);

// A 2-D convolution (one group) as a GEMM over blocked activations, per batch
// item: y[p, o] = relu?(sum_k A[p, k] B[k, o] + bias[o] + residual[p, o]),
// A the input read through ConvGather (an implicit im2col, gathered into the
// micro-kernel's panels a row block at a time), B the weights as [KH * KW *
// C_in, C_out] (k = (kh * KW + kw) * C_in + c) packed by pack_gemm_b, y and
// the residual in the input's blocked layout (nChw8c on AVX2). C_in and
// C_out are multiples of GemmKernels::width.
struct ConvGemmArgs {
  ConvGather input;                           // x: the first batch item
  int64_t batch = 1, x_item = 0, y_item = 0;  // floats from one batch item to the next
  int64_t pixels = 0, k = 0, n = 0;           // output pixels per item, KH * KW * C_in, C_out
  const float* b_packed = nullptr;
  const float* bias = nullptr;      // [C_out] or null
  const float* residual = nullptr;  // laid out as y, or null; may be y
  float* y = nullptr;
  bool relu = false;
  bool prefetch_b = true;  // as GemmArgs::prefetch_b
};
void conv_gemm(const GemmKernels& g, const ConvGemmArgs& args);

// A 1-D convolution (one group, dilation 1) over channels-last (NWC)
// activations as products whose A rows overlap: output position r reads the
// taps * C_in floats from input position r * stride - pad_begin on, so A is
// the input itself, rows stride * C_in apart, and B the weights as conv_gemm
// packs them ([taps * C_in, C_out]). Rows whose window reaches into the
// padding are gathered first into `edge_rows` (conv1d_gemm_edge_floats of
// them), zeros standing for the padding. y and the residual are NWC too.
struct Conv1dGemmArgs {
  const float* x = nullptr;  // the first batch item
  int64_t batch = 1, x_item = 0, y_item = 0;  // floats from one batch item to the next
  int64_t length = 0, channels = 0;            // input positions, C_in
  int64_t out_length = 0, taps = 0, stride = 1, pad_begin = 0;
  int64_t n = 0;  // C_out
  const float* b_packed = nullptr;
  const float* bias = nullptr;      // [C_out] or null
  const float* residual = nullptr;  // laid out as y, or null; may be y
  float* y = nullptr;
  GemmEpilogue epilogue;
  bool prefetch_b = true;  // as GemmArgs::prefetch_b
};
int64_t conv1d_gemm_edge_floats(const Conv1dGemmArgs& args);
void conv1d_gemm(const GemmKernels& g, const Conv1dGemmArgs& args, float* edge_rows);

}  // namespace anvil::kernels::vec
