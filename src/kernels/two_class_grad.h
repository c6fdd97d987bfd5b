// The dims of anvil.TwoClassReluGrad and anvil.BitGemm and the checks of
// their outputs, shared by the reference (kernels/ref/two_class_grad.cc) and
// vectorized (kernels/vec/bit_gemm.cc) kernels; the ops are described there.
#pragma once

#include "kernels/kernel.h"

namespace anvil::kernels {

struct TwoClassDims {
  int64_t rows = 0, width = 0;  // H [rows, width]
};

// The shapes, which the op's schema checked before prepare() (dZ [rows, 2],
// W [2, width] or [width, 2] with transB, H [rows, width]), and the outputs,
// which it does not: u, w and the gate's bits by rows, then up to 3 optional ones.
inline TwoClassDims check_two_class_relu_grad(const PrepareContext& ctx) {
  const size_t outputs = ctx.node().outputs.size();
  ANVIL_PREPARE_CHECK(ctx, outputs >= 3 && outputs <= 6 && ctx.node().output(0) && ctx.node().output(1) &&
                               ctx.node().output(2),
                      ErrorKind::kInvalidModel,
                      "writes u, w and the gate's bits by rows (outputs 0 to 2), then up to 3 optional ones; got {} "
                      "outputs", outputs);
  const Shape& h = ctx.input_shape(2);
  return {h[0], h[1]};
}

struct BitGemmDims {
  int64_t m = 0, k = 0, cols = 0;
  bool gated = false, sums = false;
};

// The shapes, which the op's schema checked before prepare() (B [m,
// ceil(k / 8)] uint8, T [k, cols] or [cols, k] with transB, row_scale [m],
// k_scale [k], gate [m, cols] optional), and the outputs, which it does not:
// Y, then optionally its column sums.
inline BitGemmDims check_bit_gemm(const PrepareContext& ctx, bool trans_b) {
  const size_t outputs = ctx.node().outputs.size();
  ANVIL_PREPARE_CHECK(ctx, outputs >= 1 && outputs <= 2 && ctx.node().output(0), ErrorKind::kInvalidModel,
                      "writes Y (output 0) and optionally its column sums; got {} outputs{}", outputs,
                      outputs >= 1 && !ctx.node().output(0) ? ", Y omitted" : "");
  return {ctx.input_shape(2)[0], ctx.input_shape(3)[0], ctx.input_shape(1)[trans_b ? 0 : 1], ctx.has_input(4),
          ctx.node().output(1) != nullptr};
}

}  // namespace anvil::kernels
