// Spatial geometry of Conv, ConvTranspose and pooling nodes: kernel, strides,
// dilations, begin/end pads and output sizes, from the ONNX attributes
// (kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, output_padding,
// output_shape). Shared by the reference and the oneDNN kernels so both agree.
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

// x is [N, C, D1, ..., Dk]; `kernel` holds the k spatial kernel sizes (from W).
SpatialGeometry conv_geometry(const PrepareContext& ctx, const Shape& x, const std::vector<int64_t>& kernel);
SpatialGeometry conv_transpose_geometry(const PrepareContext& ctx, const Shape& x,
                                        const std::vector<int64_t>& kernel);
// Kernel from the kernel_shape attribute (required).
SpatialGeometry pool_geometry(const PrepareContext& ctx, const Shape& x);

}  // namespace anvil::kernels
