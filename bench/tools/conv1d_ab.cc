// One float32 1-D convolution (batch 1, one group, dilation 1, with a bias)
// on oneDNN's convolution (activations and weights in the layouts it picks,
// the input and weights reordered once, outside the timing) and on Anvil's
// conv1d_gemm over channels-last (NWC) activations (the input
// read in place as a product's overlapping rows, kernels/vec/gemm.h),
// alternating in one process, so that a shared machine's slow phases hit both
// alike. The rule in kernels/dnnl/conv.cc (conv1d_gemm_pays) was set with it.
//
//   build/bin/anvil_conv1d_ab C_IN C_OUT LENGTH TAPS STRIDE PAD ROUNDS
//   e.g. build/bin/anvil_conv1d_ab 512 512 3199 3 2 0 10   (wav2vec2's second layer)
//
// Prints each one's median and fastest time, the median's GFLOP/s and the
// largest difference between the two outputs, on the OpenMP team
// OMP_NUM_THREADS sets. A bench tool, not a test.
#include <dnnl.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/vec/gemm.h"
#include "tool_common.h"

namespace {

using anvil::bench_tools::parse;
using anvil::bench_tools::seconds_now;
using dnnl::memory;

void report(const char* name, std::vector<double> t, double flops) {
  std::sort(t.begin(), t.end());
  std::printf("%-8s median %9.3f ms  min %9.3f ms  %6.1f GFLOP/s\n", name, t[t.size() / 2] * 1e3, t[0] * 1e3,
              flops / t[t.size() / 2] / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  long cin, cout, length, taps, stride, pad, rounds;
  if (argc != 8 || !parse(argv[1], 1, 1 << 16, cin) || !parse(argv[2], 1, 1 << 16, cout) ||
      !parse(argv[3], 1, 1 << 24, length) || !parse(argv[4], 1, 4096, taps) || !parse(argv[5], 1, 4096, stride) ||
      !parse(argv[6], 0, 4096, pad) || !parse(argv[7], 1, 100000, rounds) || length + 2 * pad < taps ||
      static_cast<double>(cin) * length + static_cast<double>(cin) * cout * taps > 1e9) {
    std::fprintf(stderr, "usage: %s C_IN C_OUT LENGTH TAPS STRIDE PAD ROUNDS (LENGTH + 2 PAD >= TAPS)\n", argv[0]);
    return 1;
  }
  const long out_length = (length + 2 * pad - taps) / stride + 1;
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  auto random_floats = [&](size_t n) {
    std::vector<float> v(n);
    for (float& f : v) f = dist(rng);
    return v;
  };
  std::vector<float> x = random_floats(static_cast<size_t>(cin * length));         // NWC
  std::vector<float> w = random_floats(static_cast<size_t>(cout * cin * taps));    // [C_out, C_in, taps]
  std::vector<float> bias = random_floats(static_cast<size_t>(cout));
  std::vector<float> y_dnnl(static_cast<size_t>(cout * out_length)), y_anvil(y_dnnl.size());

  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  using tag = memory::format_tag;
  const memory::desc src_md({1, cin, length}, memory::data_type::f32, tag::nwc);
  const memory::desc dst_md({1, cout, out_length}, memory::data_type::f32, tag::nwc);
  const memory::desc src_any({1, cin, length}, memory::data_type::f32, tag::any);
  const memory::desc dst_any({1, cout, out_length}, memory::data_type::f32, tag::any);
  const memory::desc w_plain({cout, cin, taps}, memory::data_type::f32, tag::oiw);
  const memory::desc w_any({cout, cin, taps}, memory::data_type::f32, tag::any);
  const memory::desc bias_md({cout}, memory::data_type::f32, tag::a);
  dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                       src_any, w_any, bias_md, dst_any, {stride}, {0}, {pad}, {pad});
  dnnl::convolution_forward::primitive_desc pd(desc, engine);
  memory w_packed(pd.weights_desc(), engine);
  memory w_source(w_plain, engine, w.data());
  dnnl::reorder(w_source, w_packed).execute(stream, w_source, w_packed);
  stream.wait();
  dnnl::convolution_forward conv(pd);
  memory x_nwc(src_md, engine, x.data()), y_nwc(dst_md, engine, y_dnnl.data()), b(bias_md, engine, bias.data());
  memory src(pd.src_desc(), engine), dst(pd.dst_desc(), engine);
  dnnl::reorder(x_nwc, src).execute(stream, x_nwc, src);
  stream.wait();
  memory scratch(pd.scratchpad_desc(), engine);

  const anvil::kernels::vec::GemmKernels& g = anvil::kernels::vec::vec_kernels().gemm;
  const long k = taps * cin;
  std::vector<float> b_rows(static_cast<size_t>(k * cout));  // [taps * C_in, C_out], as conv.cc packs it
  for (long o = 0; o < cout; ++o)
    for (long c = 0; c < cin; ++c)
      for (long t = 0; t < taps; ++t) b_rows[static_cast<size_t>((t * cin + c) * cout + o)] = w[static_cast<size_t>((o * cin + c) * taps + t)];
  const anvil::Tensor packed = anvil::kernels::vec::pack_gemm_b(g, b_rows.data(), k, cout, cout, 1);
  anvil::kernels::vec::Conv1dGemmArgs args;
  args.x = x.data();
  args.length = length;
  args.channels = cin;
  args.out_length = out_length;
  args.taps = taps;
  args.stride = stride;
  args.pad_begin = pad;
  args.n = cout;
  args.b_packed = packed.data<float>();
  args.bias = bias.data();
  args.y = y_anvil.data();
  args.prefetch_b = false;  // one convolution's weights, hot in the caches
  std::vector<float> edge_rows(static_cast<size_t>(std::max<int64_t>(1, anvil::kernels::vec::conv1d_gemm_edge_floats(args))));

  std::printf("%ld -> %ld channels, length %ld -> %ld, %ld taps, stride %ld, padding %ld; oneDNN's %s, Anvil's %s\n", cin,
              cout, length, out_length, taps, stride, pad, pd.impl_info_str(), anvil::kernels::vec::vec_impl_name());
  std::vector<double> t_dnnl, t_anvil;
  for (long r = 0; r < rounds + 1; ++r) {  // round 0 warms up
    double t0 = seconds_now();
    conv.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w_packed}, {DNNL_ARG_BIAS, b},
                          {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scratch}});
    stream.wait();
    double t1 = seconds_now();
    anvil::kernels::vec::conv1d_gemm(g, args, edge_rows.data());
    double t2 = seconds_now();
    if (r > 0) {
      t_dnnl.push_back(t1 - t0);
      t_anvil.push_back(t2 - t1);
    }
  }
  dnnl::reorder(dst, y_nwc).execute(stream, dst, y_nwc);
  stream.wait();
  const double flops = 2.0 * static_cast<double>(out_length) * static_cast<double>(k) * static_cast<double>(cout);
  report("oneDNN", t_dnnl, flops);
  report("Anvil", t_anvil, flops);
  double diff = 0, largest = 0;
  for (size_t i = 0; i < y_dnnl.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(y_dnnl[i] - y_anvil[i])));
    largest = std::max(largest, static_cast<double>(std::fabs(y_dnnl[i])));
  }
  std::printf("max |difference| %.3g (max |output| %.3g)\n", diff, largest);
  return 0;
}
