// Resize (opsets 10-19) and Upsample (7, 9) as their kernels read them: the
// options, the output shape and, per axis whose size or mapping changes,
// each output index's taps (input index, weight), worked out once in
// prepare for the reference kernel (ref/resize.cc, any axes and types) and
// the pixel-layout one (dnnl/resize.cc, an image's height and width), so
// that both accept and refuse the same nodes and sample alike.
//
// Interpolation is separable: an output element is the sum over one tap of
// each resampled axis of the product of their weights times the input
// element there. A sample marked `outside` (only tf_crop_and_resize) yields
// extrapolation_value.
#pragma once

#include <string>
#include <vector>

#include "kernels/kernel.h"

namespace anvil::kernels {

struct ResizeTap {
  int64_t index;
  double weight;
};

// How one output index of an axis is computed from the input axis.
struct ResizeSample {
  std::vector<ResizeTap> taps;
  bool outside = false;  // tf_crop_and_resize: outside the input, extrapolation_value
};

struct ResizeAxis {
  size_t axis;
  int64_t in, out;
  std::vector<ResizeSample> samples;
};

struct ResizeOptions {
  std::string mode = "nearest";          // nearest, linear, cubic
  bool antialias = false;                // linear/cubic: widen the filter by 1 / scale when downsampling
  std::string transform = "half_pixel";  // coordinate_transformation_mode
  std::string nearest = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
  float extrapolation = 0.f;
};

// The node's options; `upsample`: an Upsample node.
ResizeOptions resize_options(const ir::Node& node, bool upsample);

struct ResizeSpec {
  Shape out;
  std::vector<ResizeAxis> axes;  // only those that change, in order; none when `out` is empty
};

// The output shape and each changing axis's samples; fails the prepare
// (kInvalidModel or kInvalidArgument) where the inputs or attributes do not
// fit the op.
ResizeSpec resize_spec(const PrepareContext& ctx, const ResizeOptions& options, bool upsample);

}  // namespace anvil::kernels
