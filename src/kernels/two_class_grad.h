// The shapes of anvil.TwoClassReluGrad and anvil.BitGemm, checked alike by
// their reference (kernels/ref/two_class_grad.cc) and vectorized
// (kernels/vec/bit_gemm.cc) kernels; the ops are described there.
#pragma once

#include "kernels/kernel.h"
#include "kernels/thread_share.h"

namespace anvil::kernels {

struct TwoClassDims {
  int64_t rows = 0, width = 0;  // H [rows, width]
};

// dZ [rows, 2], W [2, width] ([width, 2] with transB), H [rows, width]; at
// least the three outputs u, w and the gate's bits by rows.
inline TwoClassDims check_two_class_relu_grad(const PrepareContext& ctx, bool trans_b) {
  const Shape &dz = ctx.input_shape(0), &w = ctx.input_shape(1), &h = ctx.input_shape(2);
  ANVIL_PREPARE_CHECK(ctx, h.size() == 2, ErrorKind::kInvalidModel, "H {} is not a matrix", shape_str(h));
  const TwoClassDims d{h[0], h[1]};
  const Shape w_expected = trans_b ? Shape{d.width, 2} : Shape{2, d.width};
  ANVIL_PREPARE_CHECK(ctx, dz == (Shape{d.rows, 2}) && w == w_expected, ErrorKind::kInvalidModel,
                      "dZ {}, W {} and H {} do not match", shape_str(dz), shape_str(w), shape_str(h));
  const size_t outputs = ctx.node().outputs.size();
  ANVIL_PREPARE_CHECK(ctx, outputs >= 3 && outputs <= 6 && ctx.node().output(0) && ctx.node().output(1) &&
                               ctx.node().output(2),
                      ErrorKind::kInvalidModel,
                      "writes u, w and the gate's bits by rows (outputs 0 to 2), then up to 3 optional ones; got {} "
                      "outputs", outputs);
  return d;
}

struct BitGemmDims {
  int64_t m = 0, k = 0, cols = 0;
  bool gated = false, sums = false;
};

// B [m, ceil(k / 8)] (uint8), T [k, cols] ([cols, k] with transB),
// row_scale [m], k_scale [k], gate [m, cols] (optional).
inline BitGemmDims check_bit_gemm(const PrepareContext& ctx, bool trans_b) {
  const Shape &bits = ctx.input_shape(0), &t = ctx.input_shape(1), &rs = ctx.input_shape(2), &ks = ctx.input_shape(3);
  ANVIL_PREPARE_CHECK(ctx, bits.size() == 2 && t.size() == 2 && rs.size() == 1 && ks.size() == 1,
                      ErrorKind::kInvalidModel, "expects B and T of rank 2, row_scale and k_scale of rank 1");
  BitGemmDims d{rs[0], ks[0], t[trans_b ? 0 : 1], ctx.has_input(4), false};
  ANVIL_PREPARE_CHECK(ctx, bits == (Shape{d.m, ceil_div(d.k, 8)}) && t[trans_b ? 1 : 0] == d.k,
                      ErrorKind::kInvalidModel, "B {}, T {}, row_scale {} and k_scale {} do not match", shape_str(bits),
                      shape_str(t), shape_str(rs), shape_str(ks));
  ANVIL_PREPARE_CHECK(ctx, !d.gated || ctx.input_shape(4) == (Shape{d.m, d.cols}), ErrorKind::kInvalidModel,
                      "gate {} does not match the product [{},{}]", shape_str(ctx.input_shape(4)), d.m, d.cols);
  const size_t outputs = ctx.node().outputs.size();
  ANVIL_PREPARE_CHECK(ctx, outputs >= 1 && outputs <= 2 && ctx.node().output(0), ErrorKind::kInvalidModel,
                      "writes Y (output 0) and optionally its column sums; got {} outputs{}", outputs,
                      outputs >= 1 && !ctx.node().output(0) ? ", Y omitted" : "");
  d.sums = ctx.node().output(1) != nullptr;
  return d;
}

}  // namespace anvil::kernels
