// Spatial geometry of Conv, ConvTranspose and pooling nodes: kernel, strides,
// dilations, begin/end pads and output sizes, from the ONNX attributes
// (kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, output_padding,
// output_shape) and the output sizes the op schema computed; and Gemm's
// product dimensions. Shared by the reference and the oneDNN kernels so both
// agree.
#pragma once

#include <vector>

#include "kernels/kernel.h"

namespace anvil::kernels {

struct SpatialGeometry {
  std::vector<int64_t> kernel;      // per spatial dimension
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;   // ONNX meaning: 1 = dense
  std::vector<int64_t> pads_begin;
  std::vector<int64_t> pads_end;    // includes the extra end padding of ceil_mode
  std::vector<int64_t> ceil_extra;  // pooling: end padding added by ceil_mode (not real padding)
  std::vector<int64_t> output_padding;  // ConvTranspose only
  std::vector<int64_t> out;         // output spatial sizes
};

// The same geometry padded to three spatial dimensions (leading unit
// dimensions), for loops that treat 1-D and 2-D as 3-D.
struct Geometry3 {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  int64_t s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, p[3] = {0, 0, 0};
  int64_t real_end[3] = {1, 1, 1};  // in + the model's end padding (without ceil_mode's extra)

  Geometry3() = default;
  Geometry3(const Shape& x, const SpatialGeometry& g) {
    const size_t rank = g.kernel.size(), off = 3 - rank;
    for (size_t i = 0; i < rank; ++i) {
      in[off + i] = x[2 + i];
      out[off + i] = g.out[i];
      k[off + i] = g.kernel[i];
      s[off + i] = g.strides[i];
      d[off + i] = g.dilations[i];
      p[off + i] = g.pads_begin[i];
      int64_t extra = i < g.ceil_extra.size() ? g.ceil_extra[i] : 0;
      real_end[off + i] = x[2 + i] + (i < g.pads_end.size() ? g.pads_end[i] : 0) - extra;
    }
  }
  int64_t in_plane() const { return in[0] * in[1] * in[2]; }
  int64_t out_plane() const { return out[0] * out[1] * out[2]; }
  int64_t taps() const { return k[0] * k[1] * k[2]; }
};

// x is [N, C, D1, ..., Dk]; `kernel` holds the k spatial kernel sizes (from W);
// `y` the convolution's output shape when it is not the node's output 0 (gradients).
SpatialGeometry conv_geometry(const PrepareContext& ctx, const Shape& x, const std::vector<int64_t>& kernel,
                              const Shape* y = nullptr);
SpatialGeometry conv_transpose_geometry(const PrepareContext& ctx, const Shape& x,
                                        const std::vector<int64_t>& kernel);
// Kernel from the kernel_shape attribute (required); `y` the pooling's
// output shape when it is not the node's output 0 (gradients).
SpatialGeometry pool_geometry(const PrepareContext& ctx, const Shape& x, const Shape* y = nullptr);

// A Gemm-like node's product: A (input 0) and B (input 1) read through the
// transA / transB attributes as [m, k] and [k, n]. Checked here (invalid
// model otherwise), since a fused op's schema (GemmReluGrad) does not.
struct GemmDims {
  int64_t m, k, n;
  bool trans_a, trans_b;
};
GemmDims gemm_dims(const PrepareContext& ctx);

}  // namespace anvil::kernels
