// Would float32 products run faster as several bfloat16 products on a CPU
// with AMX? Each float32 operand is split into bfloat16 pieces
// (a = a0 + a1 + a2, each the rounding of what the earlier ones left), and
// the product is the sum of the pieces' products, on oneDNN's AMX matmul
// (bfloat16 in, float32 accumulated): bf16x3 keeps a0b0 + a0b1 + a1b0
// (about 16 bits), bf16x6 adds a1b1 + a0b2 + a2b0 (float32's accuracy).
// The pieces are laid side by side along K, so each emulation is one matmul
// of K x 3 or K x 6. Issue 9's question: can training's large products beat
// the float32 FMA rate this way without losing float32's accuracy?
//
//   build/bin/anvil_onednn_split_bf16 [M K N]   (default 12288 1024 1024)
//
// Prints, for the shape: oneDNN's float32 matmul and its bfloat16 matmul at
// K, 3K and 6K (GFLOP/s of the work each does, and of the float32 product
// each emulation stands for), then the largest error of each against a
// double-precision product on a 256 x K x 256 corner, relative to the
// largest |value|. The split and the side-by-side layout are not timed
// (they would be, in an engine).
#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

namespace {

using dnnl::memory;
using Clock = std::chrono::steady_clock;

uint16_t to_bf16(float f) {  // round to nearest even (no NaN here)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The three pieces of each value: piece p of element i at pieces[p][i].
std::vector<std::vector<uint16_t>> split3(const std::vector<float>& v) {
  std::vector<std::vector<uint16_t>> pieces(3, std::vector<uint16_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) {
    float rest = v[i];
    for (int p = 0; p < 3; ++p) {
      pieces[p][i] = to_bf16(rest);
      rest -= from_bf16(pieces[p][i]);
    }
  }
  return pieces;
}

// A [M x K] row-major and B [K x N] row-major as the side-by-side operands of
// the emulation whose terms pair A's piece ia[t] with B's piece ib[t]:
// A' [M x T*K] (term t in columns t*K...) and B' [T*K x N].
void side_by_side(const std::vector<std::vector<uint16_t>>& a, const std::vector<std::vector<uint16_t>>& b,
                  const std::vector<int>& ia, const std::vector<int>& ib, int64_t m, int64_t k, int64_t n,
                  uint16_t* a_out, uint16_t* b_out) {
  const int64_t terms = static_cast<int64_t>(ia.size());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t t = 0; t < terms; ++t)
      std::memcpy(a_out + r * terms * k + t * k, a[ia[t]].data() + r * k, k * 2);
  for (int64_t t = 0; t < terms; ++t) std::memcpy(b_out + t * k * n, b[ib[t]].data(), k * n * 2);
}

struct Product {
  dnnl::matmul prim;
  memory a, b, c;
};

// A matmul of [m x k] by [k x n] in `type` (float32 out), B reordered to the
// layout oneDNN prefers; a and b filled by `fill(a_ptr, b_ptr)` in plain layouts.
template <typename Fill>
Product make_product(dnnl::engine& eng, dnnl::stream& s, memory::data_type type, int64_t m, int64_t k, int64_t n,
                     Fill fill, bool verbose) {
  memory::desc a_md({m, k}, type, memory::format_tag::ab), b_plain({k, n}, type, memory::format_tag::ab);
  memory::desc b_any({k, n}, type, memory::format_tag::any), c_md({m, n}, memory::data_type::f32,
                                                                  memory::format_tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, c_md), eng);
  if (verbose) std::printf("  (%s, %s)\n", pd.impl_info_str(), type == memory::data_type::f32 ? "f32" : "bf16");
  Product p{dnnl::matmul(pd), memory(a_md, eng), memory(pd.weights_desc(), eng), memory(c_md, eng)};
  memory b_src(b_plain, eng);
  fill(p.a.get_data_handle(), b_src.get_data_handle());
  dnnl::reorder(b_src, p.b).execute(s, b_src, p.b);
  s.wait();
  return p;
}

double best_seconds(Product& p, dnnl::stream& s, int iterations) {
  double best = 1e30;
  for (int i = 0; i <= iterations; ++i) {  // the first is a warm-up
    const auto t0 = Clock::now();
    p.prim.execute(s, {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}});
    s.wait();
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    if (i > 0) best = std::min(best, t);
  }
  return best;
}

// The pieces each term of an emulation with `terms` products pairs: A's, B's.
std::pair<std::vector<int>, std::vector<int>> pieces_of(int terms) {
  if (terms == 6) return {{0, 0, 1, 1, 0, 2}, {0, 1, 0, 1, 2, 0}};
  if (terms == 3) return {{0, 0, 1}, {0, 1, 0}};
  return {{0}, {0}};
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t m = argc > 3 ? std::atoll(argv[1]) : 12288, k = argc > 3 ? std::atoll(argv[2]) : 1024,
                n = argc > 3 ? std::atoll(argv[3]) : 1024;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
  for (float& v : a) v = normal(rng);
  for (float& v : b) v = normal(rng) / std::sqrt(static_cast<float>(k));

  std::printf("%lld x %lld x %lld, best of 5 runs:\n", static_cast<long long>(m), static_cast<long long>(k),
              static_cast<long long>(n));
  const double flop = 2.0 * m * k * n;
  {
    Product f32 = make_product(eng, s, memory::data_type::f32, m, k, n, [&](void* pa, void* pb) {
      std::memcpy(pa, a.data(), a.size() * 4);
      std::memcpy(pb, b.data(), b.size() * 4);
    }, true);
    std::printf("float32 matmul:        %7.0f GFLOP/s\n", flop / best_seconds(f32, s, 5) / 1e9);
  }
  const auto pa = split3(a), pb = split3(b);
  for (int terms : {1, 3, 6}) {
    const auto [ia, ib] = pieces_of(terms);
    Product p = make_product(eng, s, memory::data_type::bf16, m, k * terms, n, [&](void* a_out, void* b_out) {
      side_by_side(pa, pb, ia, ib, m, k, n, static_cast<uint16_t*>(a_out), static_cast<uint16_t*>(b_out));
    }, terms == 1);
    const double seconds = best_seconds(p, s, 5);
    std::printf("bfloat16 matmul, K x %d: %7.0f GFLOP/s done, %7.0f GFLOP/s of float32 product%s\n", terms,
                flop * terms / seconds / 1e9, flop / seconds / 1e9,
                terms == 1 ? "" : (terms == 3 ? " (bf16x3)" : " (bf16x6)"));
  }

  // Accuracy on a corner: rows [0, 256) of A, columns [0, 256) of B.
  const int64_t cm = std::min<int64_t>(m, 256), cn = std::min<int64_t>(n, 256);
  std::vector<float> ca(static_cast<size_t>(cm * k)), cb(static_cast<size_t>(k * cn));
  for (int64_t r = 0; r < cm; ++r) std::memcpy(&ca[r * k], &a[r * k], k * 4);
  for (int64_t r = 0; r < k; ++r) std::memcpy(&cb[r * cn], &b[r * n], cn * 4);
  std::vector<double> exact(static_cast<size_t>(cm * cn), 0.0);
  double largest = 0;
  for (int64_t r = 0; r < cm; ++r)
    for (int64_t c = 0; c < cn; ++c) {
      double sum = 0;
      for (int64_t i = 0; i < k; ++i) sum += static_cast<double>(ca[r * k + i]) * cb[i * cn + c];
      exact[r * cn + c] = sum;
      largest = std::max(largest, std::fabs(sum));
    }
  auto report = [&](const char* name, Product& p) {
    p.prim.execute(s, {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}});
    s.wait();
    const float* out = static_cast<const float*>(p.c.get_data_handle());
    double worst = 0;
    for (size_t i = 0; i < exact.size(); ++i) worst = std::max(worst, std::fabs(out[i] - exact[i]));
    std::printf("%-22s largest error %.2e of max |value| %.2f\n", name, worst / largest, largest);
  };
  Product f32 = make_product(eng, s, memory::data_type::f32, cm, k, cn, [&](void* x, void* y) {
    std::memcpy(x, ca.data(), ca.size() * 4);
    std::memcpy(y, cb.data(), cb.size() * 4);
  }, false);
  report("float32:", f32);
  const auto qa = split3(ca), qb = split3(cb);
  for (int terms : {1, 3, 6}) {
    const auto [ia, ib] = pieces_of(terms);
    Product p = make_product(eng, s, memory::data_type::bf16, cm, k * terms, cn, [&](void* x, void* y) {
      side_by_side(qa, qb, ia, ib, cm, k, cn, static_cast<uint16_t*>(x), static_cast<uint16_t*>(y));
    }, false);
    report(terms == 1 ? "bfloat16:" : terms == 3 ? "bf16x3:" : "bf16x6:", p);
  }
  return 0;
}
