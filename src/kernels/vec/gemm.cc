#include "kernels/vec/gemm.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/checked.h"

namespace anvil::kernels::vec {

namespace {

constexpr int64_t kBlockRows = 144;            // rows of A per L2 block (x kc floats: 144 KiB at kc 256)
constexpr int64_t kMinParallelFlops = 1 << 17;  // below this a second thread costs more than it saves

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Calls f(i, j, offset) for every element (i < k, j < n_padded) of B's
// packed layout, offset being its place there; panels run in parallel.
template <typename F>
void for_each_packed(const GemmKernels& g, int64_t k, int64_t n, F f) {
  const int64_t panels = ceil_div(n, g.nr), n_padded = panels * g.nr;
  for (int64_t k0 = 0; k0 < k; k0 += g.kc) {
    const int64_t rows = std::min<int64_t>(g.kc, k - k0);
#pragma omp parallel for if (rows * n > 65536)
    for (int64_t panel = 0; panel < panels; ++panel) {
      int64_t offset = k0 * n_padded + panel * rows * g.nr;
      for (int64_t i = k0; i < k0 + rows; ++i)
        for (int64_t j = panel * g.nr; j < (panel + 1) * g.nr; ++j) f(i, j, offset++);
    }
  }
}

// The half-open range of `count` items that thread t of `threads` takes.
std::pair<int64_t, int64_t> share(int64_t count, int t, int threads) {
  return {count * t / threads, count * (t + 1) / threads};
}

// C's rows [r0, r1) and panels [p0, p1), a k-block at a time.
void gemm_part(const GemmKernels& g, const GemmArgs& p, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  const int64_t n_padded = ceil_div(p.n, g.nr) * g.nr;
  const bool epilogue = p.bias || p.epilogue.activation != GemmActivation::kNone;
  for (int64_t i0 = r0; i0 < r1; i0 += kBlockRows / g.mr * g.mr) {
    const int64_t i1 = std::min(r1, i0 + kBlockRows / g.mr * g.mr);
    for (int64_t k0 = 0; k0 < p.k; k0 += g.kc) {
      const int64_t kc = std::min<int64_t>(g.kc, p.k - k0);
      const bool last = k0 + kc == p.k;
      const float* block = p.b_packed + k0 * n_padded;
      for (int64_t panel = p0; panel < p1; ++panel) {
        const int64_t j = panel * g.nr;
        const int n = static_cast<int>(std::min<int64_t>(g.nr, p.n - j));
        for (int64_t i = i0; i < i1; i += g.mr) {
          const int m = static_cast<int>(std::min<int64_t>(g.mr, i1 - i));
          float* c = p.c + i * p.ldc + j;
          const float* init = k0 > 0 ? c : p.residual ? p.residual + i * p.ldc + j : nullptr;
          g.tile(p.a + i * p.lda + k0, p.lda, block + panel * kc * g.nr, kc, init, c, p.ldc, m, n);
          if (last && epilogue) g.epilogue(c, p.ldc, m, n, p.bias ? p.bias + j : nullptr, p.epilogue);
        }
      }
    }
  }
}

// K = 0: C is the bias, the residual and the activation alone.
void empty_product(const GemmKernels& g, const GemmArgs& p) {
  for (int64_t i = 0; i < p.m; ++i) {
    float* row = p.c + i * p.ldc;
    if (!p.residual) std::memset(row, 0, static_cast<size_t>(p.n) * sizeof(float));
    else if (p.residual != p.c) std::memcpy(row, p.residual + i * p.ldc, static_cast<size_t>(p.n) * sizeof(float));
  }
  g.epilogue(p.c, p.ldc, p.m, p.n, p.bias, p.epilogue);
}

}  // namespace

std::optional<GemmActivation> gemm_activation(const std::string& name) {
  using A = GemmActivation;
  static const std::pair<const char*, A> kNames[] = {
      {"", A::kNone},          {"Relu", A::kRelu},       {"LeakyRelu", A::kLeakyRelu},     {"Clip", A::kClip},
      {"Sigmoid", A::kSigmoid}, {"Swish", A::kSwish},    {"HardSigmoid", A::kHardSigmoid}, {"HardSwish", A::kHardSwish},
      {"Gelu", A::kGelu},      {"GeluTanh", A::kGeluTanh}};
  for (const auto& [n, a] : kNames)
    if (name == n) return a;
  return std::nullopt;
}

Tensor pack_gemm_b(const GemmKernels& g, const float* b, int64_t k, int64_t n, int64_t stride_k, int64_t stride_n,
                   float scale) {
  const int64_t n_padded = ceil_div(n, g.nr) * g.nr;
  Tensor packed = Tensor::uninitialized(DType::kFloat32, {checked_mul(k, n_padded, "packed GEMM weights")});
  float* out = packed.data<float>();
  for_each_packed(g, k, n, [&](int64_t i, int64_t j, int64_t at) {
    out[at] = j < n ? b[i * stride_k + j * stride_n] * scale : 0.f;
  });
  return packed;
}

void unpack_gemm_b(const GemmKernels& g, const float* packed, int64_t k, int64_t n, float* b, int64_t stride_k,
                   int64_t stride_n) {
  for_each_packed(g, k, n, [&](int64_t i, int64_t j, int64_t at) {
    if (j < n) b[i * stride_k + j * stride_n] = packed[at];
  });
}

std::string gemm_layout_key(const GemmKernels& g, int64_t k, int64_t n, int64_t stride_k, int64_t stride_n) {
  return "anvil-gemm nr=" + std::to_string(g.nr) + " kc=" + std::to_string(g.kc) + " b=" + std::to_string(k) + "x" +
         std::to_string(n) + " strides=" + std::to_string(stride_k) + "," + std::to_string(stride_n);
}

void packed_gemm(const GemmKernels& g, const GemmArgs& p) {
  if (p.m == 0 || p.n == 0) return;
  if (p.k == 0) return empty_product(g, p);
  const int64_t panels = ceil_div(p.n, g.nr), row_tiles = ceil_div(p.m, g.mr);
  const bool parallel = p.m * p.n * p.k >= kMinParallelFlops && panels * row_tiles > 1;
#pragma omp parallel if (parallel)
  {
    const int t = omp_get_thread_num(), threads = omp_get_num_threads();
    // Split the panels while every thread gets a few: each then reads only its
    // part of B, and A (small next to B in inference) is shared in L3.
    if (panels >= 4 * threads || panels >= row_tiles) {
      const auto [p0, p1] = share(panels, t, threads);
      gemm_part(g, p, 0, p.m, p0, p1);
    } else {
      const auto [t0, t1] = share(row_tiles, t, threads);
      gemm_part(g, p, t0 * g.mr, std::min(p.m, t1 * g.mr), 0, panels);
    }
  }
}

}  // namespace anvil::kernels::vec
