// Inference products whose weights do not fit the caches, as a transformer
// at short sequences runs them: LAYERS products C[M, N] = A[M, K] W_l[K, N],
// each with its own constant W_l (LAYERS * K * N floats in all, larger than
// the L3 when LAYERS is), on oneDNN's matmul (weights in the layout it
// prefers, reordered once), on Anvil's packed GEMM (kernels/vec/gemm.h, B
// packed once) and on the same without its prefetching of B
// (GemmArgs::prefetch_b), alternating per round in one process. Both
// libraries honour ANVIL_MAX_ISA.
//
//   build/bin/anvil_stream_gemm_ab M K N LAYERS ROUNDS
//   e.g. build/bin/anvil_stream_gemm_ab 32 768 3072 36 20   (BERT-base's FFN input products at sequence 32)
//
// Prints each one's median time per product, its GFLOP/s and weight-read GB/s.
// A bench tool, not a test: nothing is checked.
#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "anvil/cpu.h"
#include "kernels/vec/gemm.h"
#include "tool_common.h"

namespace {

using anvil::bench_tools::parse;
using anvil::bench_tools::seconds_now;

void report(const char* name, std::vector<double> t, double flops, double bytes) {
  std::sort(t.begin(), t.end());
  const double median = t[t.size() / 2];
  std::printf("%-18s median %8.4f ms  min %8.4f ms per product  %6.1f GFLOP/s  %5.1f GB/s of weights\n", name,
              median * 1e3, t[0] * 1e3, flops / median / 1e9, bytes / median / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  long m, k, n, layers, rounds;
  if (argc != 6 || !parse(argv[1], 1, 1 << 16, m) || !parse(argv[2], 1, 1 << 16, k) || !parse(argv[3], 1, 1 << 16, n) ||
      !parse(argv[4], 1, 1000, layers) || !parse(argv[5], 1, 100000, rounds) ||
      static_cast<double>(layers) * k * n > 4e8) {
    std::fprintf(stderr, "usage: %s M K N LAYERS ROUNDS (weights up to 4e8 floats in all)\n", argv[0]);
    return 2;
  }
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  std::vector<float> a(static_cast<size_t>(m * k)), c(static_cast<size_t>(m * n)), w(static_cast<size_t>(k * n));
  for (float& x : a) x = uniform(gen);

  const std::string isa = anvil::dnnl_isa_name();  // applies ANVIL_MAX_ISA to oneDNN before its first primitive
  using dims = dnnl::memory::dims;
  const auto f32 = dnnl::memory::data_type::f32;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::desc a_md({m, k}, f32, dims{k, 1});
  const dnnl::memory::desc w_plain({k, n}, f32, dims{n, 1});
  const dnnl::memory::desc w_any({k, n}, f32, dnnl::memory::format_tag::any);
  const dnnl::memory::desc c_md({m, n}, f32, dims{n, 1});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, w_any, c_md), engine);
  const dnnl::matmul onednn(pd);
  std::printf("%ld x %ld x %ld, %ld weights of %.1f MB, oneDNN's %s (%s), Anvil's %s\n", m, k, n, layers,
              k * n * 4 / 1e6, pd.impl_info_str(), isa.c_str(), anvil::kernels::vec::vec_impl_name());

  const auto& kernels = anvil::kernels::vec::vec_kernels().gemm;
  std::vector<dnnl::memory> onednn_weights;
  std::vector<anvil::Tensor> packed;
  for (long l = 0; l < layers; ++l) {
    for (float& x : w) x = uniform(gen);
    dnnl::memory plain(w_plain, engine, w.data()), reordered(pd.weights_desc(), engine);
    dnnl::reorder(plain, reordered).execute(stream, plain, reordered);
    stream.wait();
    onednn_weights.push_back(reordered);
    packed.push_back(anvil::kernels::vec::pack_gemm_b(kernels, w.data(), k, n, n, 1));
  }
  dnnl::memory a_mem(a_md, engine, a.data()), c_mem(c_md, engine, c.data());

  const auto run_anvil = [&](bool prefetch) {
    const double t0 = seconds_now();
    for (long l = 0; l < layers; ++l) {
      anvil::kernels::vec::GemmArgs args;
      args.a = a.data();
      args.lda = k;
      args.m = m;
      args.k = k;
      args.n = n;
      args.b_packed = packed[l].data<float>();
      args.c = c.data();
      args.ldc = n;
      args.prefetch_b = prefetch;
      anvil::kernels::vec::packed_gemm(kernels, args);
    }
    return (seconds_now() - t0) / layers;
  };
  std::vector<double> onednn_times, anvil_times, unprefetched_times;
  for (long r = 0; r <= rounds; ++r) {  // round 0 warms them up
    double t0 = seconds_now();
    for (long l = 0; l < layers; ++l)
      onednn.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, onednn_weights[l]}, {DNNL_ARG_DST, c_mem}});
    stream.wait();
    const double onednn_time = (seconds_now() - t0) / layers;
    const double anvil_time = run_anvil(true), unprefetched_time = run_anvil(false);
    if (r > 0) {
      onednn_times.push_back(onednn_time);
      anvil_times.push_back(anvil_time);
      unprefetched_times.push_back(unprefetched_time);
    }
  }
  report("oneDNN", onednn_times, 2.0 * m * k * n, 4.0 * k * n);
  report("Anvil", anvil_times, 2.0 * m * k * n, 4.0 * k * n);
  report("Anvil, no prefetch", unprefetched_times, 2.0 * m * k * n, 4.0 * k * n);
  return 0;
}
