// Anvil's Winograd convolution: 3x3 windows at stride 1 as F(4x4, 3x3) over
// the blocked activation layouts of conv_gemm (gemm.h), for CPUs where
// oneDNN 2.6 has none (every ISA below AVX-512), and on AVX-512 for large
// planes, where oneDNN's is F(2x2, 3x3) at batch 1 (kernels/dnnl/conv.cc).
//
// Each 4x4 output tile reads a 6x6 input patch; per channel the patch is
// transformed into 36 values (V = B^T d B), the weights once into 36 values
// per (input, output) channel pair (U = G g G^T), and the tile's output is
// the inverse transform of the 36 products M[e] = V[e] x U[e], each a GEMM
// of [tiles x C_in] by [C_in x C_out] on the packed GEMM's micro-kernel: 36
// multiplies for 16 outputs instead of 144 (4x fewer), for transforms that
// read and write each activation once more. A block of tiles is transformed
// into the thread's buffer, sized to stay in L2 with the products of one
// panel of output channels, which are transformed back as soon as they are
// done.
#pragma once

#include <cstdint>

#include "anvil/tensor.h"
#include "kernels/vec/vec_kernels.h"

namespace anvil::kernels::vec {

// Products per tile (6 x 6) and output pixels per tile side.
constexpr int kWinogradProducts = 36;
constexpr int kWinogradTile = 4;

// The weights w [C_out, C_in, 3, 3] transformed (U = G g G^T) and packed
// for `g`: kWinogradProducts matrices [C_in, C_out], each as pack_gemm_b
// packs it, one after another (winograd_packed_floats each).
Tensor pack_winograd_weights(const GemmKernels& g, const float* w, int64_t cout, int64_t cin);
int64_t winograd_packed_floats(const GemmKernels& g, int64_t cout, int64_t cin);

// A 3x3 convolution at stride 1 and dilation 1 (one group) over blocked
// activations, per batch item: y = relu?(conv(x, w) + bias + residual), x, y
// and the residual in the blocked layout of GemmKernels::width channels
// (nChw8c on AVX2). C_in and C_out are multiples of the width.
struct WinogradConvArgs {
  const float* x = nullptr;                   // the first batch item
  int64_t batch = 1, x_item = 0, y_item = 0;  // floats from one batch item to the next
  int64_t cin = 0, ih = 0, iw = 0;
  int64_t cout = 0, oh = 0, ow = 0;
  int64_t pad_top = 0, pad_left = 0;  // the end paddings follow from the output's size
  const float* u_packed = nullptr;    // pack_winograd_weights
  const float* bias = nullptr;        // [C_out] or null
  const float* residual = nullptr;    // laid out as y, or null; may be y
  float* y = nullptr;
  bool relu = false;
  // Tiles per block (0: a thread's whole share where it fits three quarters
  // of the L2, else as many as fit half of it; tests set fewer).
  int64_t block_tiles = 0;
  // Whether the micro-kernel asks the L2 for the weights' next panel block
  // while it computes (GemmPrefetch; as GemmArgs::prefetch_b, where the
  // weights stream from memory).
  bool prefetch_b = false;
};
void conv_winograd(const VecKernels& k, const WinogradConvArgs& args);

// The row tiles (GemmKernels::mr tiles each) of a batch's output planes:
// the units the threads split.
int64_t winograd_row_tiles(const GemmKernels& g, int64_t batch, int64_t oh, int64_t ow);
// Bytes of the packed, transformed weights.
int64_t winograd_weight_bytes(const GemmKernels& g, int64_t cout, int64_t cin);

}  // namespace anvil::kernels::vec
