// Reference kernels of anvil.TwoClassReluGrad and anvil.BitGemm (the ops
// and their fast kernels: kernels/vec/bit_gemm.cc): the definitions, one
// element at a time, every sum in double.
#include <cstring>

#include "kernels/ref/common.h"
#include "kernels/registry.h"
#include "kernels/thread_share.h"
#include "kernels/two_class_grad.h"

namespace anvil::kernels {
namespace {

Tensor* output(const RunContext& ctx, size_t i) { return i < ctx.outputs.size() ? ctx.outputs[i] : nullptr; }

class RefTwoClassReluGrad : public Kernel {
 public:
  explicit RefTwoClassReluGrad(const ir::Node& node) : trans_b_(node.attrs.get_int("transB", 0) != 0) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    dims_ = check_two_class_relu_grad(ctx);
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const int64_t n = dims_.rows, width = dims_.width, row_bytes = ceil_div(width, 8), col_bytes = ceil_div(n, 8);
    const float *dz = ctx.in(0).data<float>(), *w_in = ctx.in(1).data<float>(), *h = ctx.in(2).data<float>();
    float *u = ctx.out(0).data<float>(), *w = ctx.out(1).data<float>();
    auto weight = [&](int64_t c, int64_t j) { return trans_b_ ? w_in[j * 2 + c] : w_in[c * width + j]; };
    for (int64_t j = 0; j < width; ++j) w[j] = weight(0, j) - weight(1, j);
    for (int64_t r = 0; r < n; ++r) u[r] = 0.5f * (dz[2 * r] - dz[2 * r + 1]);
    auto gate = [&](int64_t r, int64_t j) { return h[r * width + j] > 0.f; };
    uint8_t* by_rows = ctx.out(2).data<uint8_t>();
    std::memset(by_rows, 0, static_cast<size_t>(n * row_bytes));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < width; ++j)
        if (gate(r, j)) by_rows[r * row_bytes + j / 8] |= static_cast<uint8_t>(1u << (j % 8));
    if (Tensor* t = output(ctx, 3)) {
      uint8_t* by_cols = t->data<uint8_t>();
      std::memset(by_cols, 0, static_cast<size_t>(width * col_bytes));
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < width; ++j)
          if (gate(r, j)) by_cols[j * col_bytes + r / 8] |= static_cast<uint8_t>(1u << (r % 8));
    }
    if (Tensor* t = output(ctx, 4))  // the gated gradient's column sums: w_j x the sum of u over the open gates
      for (int64_t j = 0; j < width; ++j) {
        double sum = 0;
        for (int64_t r = 0; r < n; ++r) sum += gate(r, j) ? static_cast<double>(u[r]) : 0.0;
        t->data<float>()[j] = static_cast<float>(sum * w[j]);
      }
    if (Tensor* t = output(ctx, 5))  // dZ^T H
      for (int64_t c = 0; c < 2; ++c)
        for (int64_t j = 0; j < width; ++j) {
          double sum = 0;
          for (int64_t r = 0; r < n; ++r) sum += static_cast<double>(dz[2 * r + c]) * h[r * width + j];
          t->data<float>()[c * width + j] = static_cast<float>(sum);
        }
  }

 private:
  bool trans_b_;
  TwoClassDims dims_;
};

class RefBitGemm : public Kernel {
 public:
  explicit RefBitGemm(const ir::Node& node) : trans_b_(node.attrs.get_int("transB", 0) != 0) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    dims_ = check_bit_gemm(ctx, trans_b_);
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const auto [m, k, cols, gated, sums] = dims_;
    const int64_t row_bytes = ceil_div(k, 8);
    const uint8_t* bits = ctx.in(0).data<uint8_t>();
    const float *t = ctx.in(1).data<float>(), *row_scale = ctx.in(2).data<float>(), *k_scale = ctx.in(3).data<float>();
    const float* gate = gated ? ctx.in(4).data<float>() : nullptr;
    float* y = ctx.out(0).data<float>();
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < cols; ++j) {
        double sum = 0;
        for (int64_t q = 0; q < k; ++q)
          if (bits[r * row_bytes + q / 8] >> (q % 8) & 1)
            sum += static_cast<double>(k_scale[q]) * (trans_b_ ? t[j * k + q] : t[q * cols + j]);
        const bool open = !gate || gate[r * cols + j] > 0.f;
        y[r * cols + j] = open ? static_cast<float>(sum * row_scale[r]) : 0.f;
      }
    if (sums)
      for (int64_t j = 0; j < cols; ++j) {
        double sum = 0;
        for (int64_t r = 0; r < m; ++r) sum += y[r * cols + j];
        ctx.out(1).data<float>()[j] = static_cast<float>(sum);
      }
  }

 private:
  bool trans_b_;
  BitGemmDims dims_;
};

static Registrar two_class_relu_grad("TwoClassReluGrad", Backend::kRef, factory_of<RefTwoClassReluGrad>(), "anvil",
                                     {{kFloat32Only}});
static Registrar bit_gemm("BitGemm", Backend::kRef, factory_of<RefBitGemm>(), "anvil",
                          {{dtype_bit(DType::kUInt8), kFloat32Only}});

}  // namespace
}  // namespace anvil::kernels
