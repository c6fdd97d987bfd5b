// One float32 product, C[M, N] = A[M, K] B[K, N] (A or B stored transposed),
// on oneDNN's matmul and on Anvil's GEMM with both operands packed per run
// (kernels/vec/gemm.h: what training's products run on), alternating in one
// process, so that a shared machine's slow phases hit both alike.
//
//   build/bin/anvil_gemm_ab M K N TRANS_A TRANS_B ROUNDS
//   e.g. build/bin/anvil_gemm_ab 1024 25000 1024 1 0 6   (a weight gradient at batch 25,000)
//
// Prints each one's median and fastest time and the median's GFLOP/s, on the
// OpenMP team OMP_NUM_THREADS sets. A bench tool, not a test: nothing is checked.
#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/vec/gemm.h"
#include "tool_common.h"

namespace {

using anvil::kernels::vec::GemmProduct;

using anvil::bench_tools::parse;
using anvil::bench_tools::seconds_now;

void report(const char* name, std::vector<double> t, double flops) {
  std::sort(t.begin(), t.end());
  const double median = t[t.size() / 2];
  std::printf("%-8s median %9.3f ms  min %9.3f ms  %6.1f GFLOP/s\n", name, median * 1e3, t[0] * 1e3,
              flops / median / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  long m, k, n, ta, tb, rounds;
  if (argc != 7 || !parse(argv[1], 1, 1 << 20, m) || !parse(argv[2], 1, 1 << 20, k) || !parse(argv[3], 1, 1 << 20, n) ||
      !parse(argv[4], 0, 1, ta) || !parse(argv[5], 0, 1, tb) || !parse(argv[6], 1, 100000, rounds) ||
      static_cast<double>(m) * k + static_cast<double>(k) * n + static_cast<double>(m) * n > 1e9) {
    std::fprintf(stderr, "usage: %s M K N TRANS_A(0|1) TRANS_B(0|1) ROUNDS (operands up to 1e9 floats in all)\n",
                 argv[0]);
    return 2;
  }
  std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n)), c(static_cast<size_t>(m * n));
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  for (float& x : a) x = uniform(gen);
  for (float& x : b) x = uniform(gen);

  using dims = dnnl::memory::dims;
  const auto f32 = dnnl::memory::data_type::f32;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::desc a_md({m, k}, f32, ta ? dims{1, m} : dims{k, 1});
  const dnnl::memory::desc b_md({k, n}, f32, tb ? dims{1, k} : dims{n, 1});
  const dnnl::memory::desc c_md({m, n}, f32, dims{n, 1});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
  const dnnl::matmul onednn(pd);
  std::printf("%ld x %ld x %ld%s%s, oneDNN's %s\n", m, k, n, ta ? ", A transposed" : "", tb ? ", B transposed" : "",
              pd.impl_info_str());

  GemmProduct product;
  product.a = {a.data(), ta ? 1 : k, ta ? m : 1};
  product.b = {b.data(), tb ? 1 : n, tb ? k : 1};
  product.m = m;
  product.k = k;
  product.n = n;
  product.c = c.data();
  product.ldc = n;
  const auto& kernels = anvil::kernels::vec::vec_kernels().gemm;

  std::vector<double> onednn_times, anvil_times;
  for (long r = 0; r <= rounds; ++r) {  // round 0 warms both up
    double t0 = seconds_now();
    onednn.execute(stream, {{DNNL_ARG_SRC, dnnl::memory(a_md, engine, a.data())},
                            {DNNL_ARG_WEIGHTS, dnnl::memory(b_md, engine, b.data())},
                            {DNNL_ARG_DST, dnnl::memory(c_md, engine, c.data())}});
    stream.wait();
    double t1 = seconds_now();
    anvil::kernels::vec::gemm(kernels, product);
    double t2 = seconds_now();
    if (r > 0) {
      onednn_times.push_back(t1 - t0);
      anvil_times.push_back(t2 - t1);
    }
  }
  const double flops = 2.0 * m * k * n;
  report("oneDNN", onednn_times, flops);
  report("Anvil", anvil_times, flops);
  return 0;
}
