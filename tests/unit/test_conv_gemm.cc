// Anvil's convolutions over blocked activations (vec::conv_gemm, and the
// Winograd convolution vec::conv_winograd for 3x3 windows at stride 1) and
// its 1-D convolution over channels-last ones (vec::conv1d_gemm): every ISA
// path the CPU has against a convolution computed here in double, over
// strides, padding, dilation, window sizes, batches, a bias, a residual and
// activations. Named VecKernels.* so that ctest also runs it capped at sse41
// and avx2 (ANVIL_MAX_ISA).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>

#include "anvil/session.h"
#include "core/vector_isa.h"
#include "ir/graph.h"
#include "kernel_tester.h"
#include "kernels/vec/gemm.h"
#include "kernels/vec/winograd.h"

namespace anvil {
namespace {

using kernels::vec::ConvGemmArgs;
using kernels::vec::GemmKernels;
using kernels::vec::VecKernels;

struct ConvCase {
  int64_t batch, cin, ih, iw, cout, kh, kw, stride, pad, dilation;
  bool bias = false, residual = false, relu = false;
  bool residual_apart = false;  // the residual in its own buffer, not y's
  int64_t pad_end = -1;         // bottom and right; -1: as pad
  int64_t winograd_block_tiles = 0;  // conv_winograd's tiles per block (0: its own choice)
};

std::vector<float> uniform_values(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// Element (n, c, h, w) of an [N, C, H, W] tensor in blocked layout of `width` channels.
int64_t blocked_at(int64_t width, int64_t c_total, int64_t h_total, int64_t w_total, int64_t n, int64_t c, int64_t h,
                   int64_t w) {
  return ((n * (c_total / width) + c / width) * h_total * w_total + h * w_total + w) * width + c % width;
}

// The convolution on conv_gemm, or with `winograd` on conv_winograd, whose
// products of transformed values round more: its results may stray from the
// exact sum by `tolerance` x (the sum of the terms' magnitudes + 4).
void check_conv(const VecKernels& kernels, const ConvCase& t, uint32_t seed, bool winograd = false,
                double tolerance = 2e-6, bool prefetch_b = false) {
  SCOPED_TRACE(::testing::Message() << "batch " << t.batch << " cin " << t.cin << " " << t.ih << "x" << t.iw
                                    << " cout " << t.cout << " k " << t.kh << "x" << t.kw << " stride " << t.stride
                                    << " pad " << t.pad << " dilation " << t.dilation);
  const GemmKernels& g = kernels.gemm;
  const int64_t w = g.width, pad_end = t.pad_end < 0 ? t.pad : t.pad_end;
  const int64_t oh = (t.ih + t.pad + pad_end - t.dilation * (t.kh - 1) - 1) / t.stride + 1;
  const int64_t ow = (t.iw + t.pad + pad_end - t.dilation * (t.kw - 1) - 1) / t.stride + 1;
  const std::vector<float> x = uniform_values(static_cast<size_t>(t.batch * t.cin * t.ih * t.iw), seed);
  const std::vector<float> weights = uniform_values(static_cast<size_t>(t.cout * t.cin * t.kh * t.kw), seed + 1);
  const std::vector<float> bias = uniform_values(static_cast<size_t>(t.cout), seed + 2);
  const std::vector<float> residual = uniform_values(static_cast<size_t>(t.batch * t.cout * oh * ow), seed + 3);

  // B as [KH * KW * C_in, C_out] from ONNX's [C_out, C_in, KH, KW].
  const int64_t taps = t.kh * t.kw, k = taps * t.cin;
  std::vector<float> b(static_cast<size_t>(k * t.cout));
  for (int64_t o = 0; o < t.cout; ++o)
    for (int64_t c = 0; c < t.cin; ++c)
      for (int64_t tap = 0; tap < taps; ++tap) b[(tap * t.cin + c) * t.cout + o] = weights[(o * t.cin + c) * taps + tap];
  const Tensor packed = kernels::vec::pack_gemm_b(g, b.data(), k, t.cout, t.cout, 1);

  std::vector<float> xb(x.size()), yb(residual.size(), std::nanf("")), rb(residual.size());
  for (int64_t n = 0; n < t.batch; ++n)
    for (int64_t c = 0; c < t.cin; ++c)
      for (int64_t h = 0; h < t.ih; ++h)
        for (int64_t i = 0; i < t.iw; ++i)
          xb[blocked_at(w, t.cin, t.ih, t.iw, n, c, h, i)] = x[((n * t.cin + c) * t.ih + h) * t.iw + i];
  if (t.residual)
    for (int64_t n = 0; n < t.batch; ++n)
      for (int64_t o = 0; o < t.cout; ++o)
        for (int64_t p = 0; p < oh * ow; ++p)
          (t.residual_apart ? rb : yb)[blocked_at(w, t.cout, oh, ow, n, o, p / ow, p % ow)] =
              residual[(n * t.cout + o) * oh * ow + p];

  const float* residual_at = !t.residual ? nullptr : t.residual_apart ? rb.data() : yb.data();  // y: in place, as FusedConv's sum
  if (winograd) {
    const Tensor u = kernels::vec::pack_winograd_weights(g, weights.data(), t.cout, t.cin);
    kernels::vec::WinogradConvArgs args;
    args.x = xb.data();
    args.batch = t.batch;
    args.x_item = t.cin * t.ih * t.iw;
    args.y_item = t.cout * oh * ow;
    args.cin = t.cin;
    args.ih = t.ih;
    args.iw = t.iw;
    args.cout = t.cout;
    args.oh = oh;
    args.ow = ow;
    args.pad_top = args.pad_left = t.pad;
    args.u_packed = u.data<float>();
    args.bias = t.bias ? bias.data() : nullptr;
    args.residual = residual_at;
    args.y = yb.data();
    args.relu = t.relu;
    args.block_tiles = t.winograd_block_tiles;
    args.prefetch_b = prefetch_b;
    kernels::vec::conv_winograd(kernels, args);
  } else {
    ConvGemmArgs args;
    args.input = {xb.data(), t.cin, t.ih, t.iw, ow, t.kh, t.kw, t.stride, t.stride, t.pad, t.pad, t.dilation, t.dilation};
    args.batch = t.batch;
    args.x_item = t.cin * t.ih * t.iw;
    args.y_item = t.cout * oh * ow;
    args.pixels = oh * ow;
    args.k = k;
    args.n = t.cout;
    args.b_packed = packed.data<float>();
    args.bias = t.bias ? bias.data() : nullptr;
    args.residual = residual_at;
    args.y = yb.data();
    args.relu = t.relu;
    kernels::vec::conv_gemm(g, args);
  }

  int failures = 0;
  for (int64_t n = 0; n < t.batch && failures < 5; ++n)
    for (int64_t o = 0; o < t.cout && failures < 5; ++o)
      for (int64_t y = 0; y < oh && failures < 5; ++y)
        for (int64_t i = 0; i < ow && failures < 5; ++i) {
          double sum = t.bias ? bias[o] : 0, magnitude = 0;
          for (int64_t c = 0; c < t.cin; ++c)
            for (int64_t a = 0; a < t.kh; ++a)
              for (int64_t e = 0; e < t.kw; ++e) {
                const int64_t h = y * t.stride - t.pad + a * t.dilation, v = i * t.stride - t.pad + e * t.dilation;
                if (h < 0 || h >= t.ih || v < 0 || v >= t.iw) continue;
                const double term = double{x[((n * t.cin + c) * t.ih + h) * t.iw + v]} *
                                    weights[((o * t.cin + c) * t.kh + a) * t.kw + e];
                sum += term;
                magnitude += std::abs(term);
              }
          if (t.residual) sum += residual[(n * t.cout + o) * oh * ow + y * ow + i];
          const double want = t.relu && sum < 0 ? 0.0 : sum;
          const float got = yb[blocked_at(w, t.cout, oh, ow, n, o, y, i)];
          if (!(std::abs(got - want) <= tolerance * (magnitude + 4))) {
            ADD_FAILURE() << "y[" << n << "][" << o << "][" << y << "][" << i << "] = " << got << ", want " << want;
            ++failures;
          }
        }
}

TEST(VecKernels, ConvGemmMatchesADirectConvolution) {
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const VecKernels& kernels = kernels::vec::vec_kernels_for(isa);
    const int64_t w = kernels.gemm.width;
    // batch, cin, ih, iw, cout, kh, kw, stride, pad, dilation, bias, residual, relu
    const ConvCase cases[] = {
        {1, 2 * w, 7, 7, 4 * w, 3, 3, 1, 1, 1, true, false, true},   // ResNet's 3x3 at 7x7: 49 pixels, a partial tile
        {2, w, 9, 6, 3 * w, 3, 3, 2, 1, 1, false, true, true},       // stride 2, a batch, a residual
        {1, 3 * w, 5, 5, w, 1, 1, 1, 0, 1, true, true, false},       // 1x1, C_out one vector
        {1, w, 8, 8, 2 * w, 1, 1, 2, 0, 1, false, false, false},     // strided 1x1 (a downsample)
        {1, w, 6, 7, 5 * w, 3, 2, 1, 2, 2, true, false, true},       // dilation, an uneven window, wide padding
        {1, 40 * w, 3, 3, 2 * w, 3, 3, 1, 1, 1, true, true, true},   // K over several k-blocks
        {1, w, 30, 30, 2 * w, 3, 3, 1, 1, 1, false, false, true},    // pixels over several row blocks
        {1, w, 1, 1, 9 * w, 3, 3, 1, 1, 1, true, false, false},      // one pixel, mostly padding, many panels
        {2, w, 5, 5, 2 * w, 3, 3, 1, 1, 1, true, true, true, true},  // the residual apart from y
    };
    uint32_t seed = 1;
    for (const ConvCase& t : cases) check_conv(kernels, t, seed += 10);
  }
}

struct Conv1dCase {
  int64_t batch, cin, length, cout, taps, stride, pad_begin, pad_end;
  bool bias = false;
  enum { kNone, kInPlace, kApart } residual = kNone;  // FusedConv's sum: in y's buffer, or its own
  kernels::vec::GemmActivation activation = kernels::vec::GemmActivation::kNone;  // kNone, kRelu or kGelu here
};

// A 1-D convolution on conv1d_gemm (input, output and residual NWC) against
// one computed here in double from NCW data.
void check_conv1d(const VecKernels& kernels, const Conv1dCase& t, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "batch " << t.batch << " cin " << t.cin << " length " << t.length << " cout "
                                    << t.cout << " taps " << t.taps << " stride " << t.stride << " pads "
                                    << t.pad_begin << "," << t.pad_end);
  using kernels::vec::GemmActivation;
  const GemmKernels& g = kernels.gemm;
  const int64_t out_length = (t.length + t.pad_begin + t.pad_end - t.taps) / t.stride + 1;
  const std::vector<float> x = uniform_values(static_cast<size_t>(t.batch * t.cin * t.length), seed);
  const std::vector<float> weights = uniform_values(static_cast<size_t>(t.cout * t.cin * t.taps), seed + 1);
  const std::vector<float> bias = uniform_values(static_cast<size_t>(t.cout), seed + 2);
  const std::vector<float> residual = uniform_values(static_cast<size_t>(t.batch * t.cout * out_length), seed + 3);
  const int64_t k = t.taps * t.cin;
  std::vector<float> b(static_cast<size_t>(k * t.cout));
  for (int64_t o = 0; o < t.cout; ++o)
    for (int64_t c = 0; c < t.cin; ++c)
      for (int64_t tap = 0; tap < t.taps; ++tap)
        b[(tap * t.cin + c) * t.cout + o] = weights[(o * t.cin + c) * t.taps + tap];
  const Tensor packed = kernels::vec::pack_gemm_b(g, b.data(), k, t.cout, t.cout, 1);

  // NWC copies: element (n, c, l) at (n * L + l) * C + c.
  std::vector<float> x_nwc(x.size()), y(residual.size(), std::nanf("")), r_nwc(residual.size());
  for (int64_t n = 0; n < t.batch; ++n)
    for (int64_t c = 0; c < t.cin; ++c)
      for (int64_t l = 0; l < t.length; ++l) x_nwc[(n * t.length + l) * t.cin + c] = x[(n * t.cin + c) * t.length + l];
  if (t.residual != Conv1dCase::kNone)
    for (int64_t n = 0; n < t.batch; ++n)
      for (int64_t o = 0; o < t.cout; ++o)
        for (int64_t l = 0; l < out_length; ++l)
          (t.residual == Conv1dCase::kApart ? r_nwc : y)[(n * out_length + l) * t.cout + o] =
              residual[(n * t.cout + o) * out_length + l];

  kernels::vec::Conv1dGemmArgs args;
  args.x = x_nwc.data();
  args.batch = t.batch;
  args.x_item = t.cin * t.length;
  args.y_item = t.cout * out_length;
  args.length = t.length;
  args.channels = t.cin;
  args.out_length = out_length;
  args.taps = t.taps;
  args.stride = t.stride;
  args.pad_begin = t.pad_begin;
  args.n = t.cout;
  args.b_packed = packed.data<float>();
  args.bias = t.bias ? bias.data() : nullptr;
  args.residual = t.residual == Conv1dCase::kNone ? nullptr : t.residual == Conv1dCase::kApart ? r_nwc.data() : y.data();
  args.y = y.data();
  args.epilogue.activation = t.activation;
  // Guards past the edge rows' scratch catch a gather that writes beyond it.
  const size_t edge_floats = static_cast<size_t>(kernels::vec::conv1d_gemm_edge_floats(args));
  std::vector<float> scratch(edge_floats + 16, -7.f);
  kernels::vec::conv1d_gemm(g, args, scratch.data());
  for (size_t i = edge_floats; i < scratch.size(); ++i) ASSERT_EQ(scratch[i], -7.f) << "past the edge rows at " << i;

  int failures = 0;
  for (int64_t n = 0; n < t.batch && failures < 5; ++n)
    for (int64_t o = 0; o < t.cout && failures < 5; ++o)
      for (int64_t l = 0; l < out_length && failures < 5; ++l) {
        double sum = t.bias ? bias[o] : 0, magnitude = 0;
        for (int64_t c = 0; c < t.cin; ++c)
          for (int64_t tap = 0; tap < t.taps; ++tap) {
            const int64_t at = l * t.stride - t.pad_begin + tap;
            if (at < 0 || at >= t.length) continue;
            const double term = double{x[(n * t.cin + c) * t.length + at]} * weights[(o * t.cin + c) * t.taps + tap];
            sum += term;
            magnitude += std::abs(term);
          }
        if (t.residual != Conv1dCase::kNone) sum += residual[(n * t.cout + o) * out_length + l];
        double want = sum;
        if (t.activation == GemmActivation::kRelu) want = std::max(sum, 0.0);
        if (t.activation == GemmActivation::kGelu) want = 0.5 * sum * std::erfc(-sum / std::sqrt(2.0));
        const float got = y[(n * out_length + l) * t.cout + o];
        if (!(std::abs(got - want) <= 2e-6 * (magnitude + 4))) {
          ADD_FAILURE() << "y[" << n << "][" << o << "][" << l << "] = " << got << ", want " << want;
          ++failures;
        }
      }
}

TEST(VecKernels, Conv1dGemmMatchesADirectConvolution) {
  using kernels::vec::GemmActivation;
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const VecKernels& kernels = kernels::vec::vec_kernels_for(isa);
    const int64_t w = kernels.gemm.width;
    // batch, cin, length, cout, taps, stride, pad_begin, pad_end, bias, residual, activation
    const Conv1dCase cases[] = {
        {1, 2 * w, 41, 2 * w, 3, 2, 0, 0, true, Conv1dCase::kNone, GemmActivation::kGelu},  // wav2vec2's: rows overlap
        {1, w, 40, 3 * w, 2, 2, 0, 0, false},                                             // windows that touch
        {2, 3, 30, 5, 3, 1, 1, 1, true, Conv1dCase::kInPlace, GemmActivation::kRelu},      // channels short of a vector
        {1, 7, 23, 2 * w + 3, 3, 2, 1, 1, true},                                           // Whisper's second layer
        {2, w, 17, w, 5, 3, 4, 2, false, Conv1dCase::kApart},  // several edge rows at each end, uneven pads
        {1, w, 2, 2 * w, 5, 1, 3, 3, true},                    // shorter than the window: every row an edge row
        {1, w, 9, w, 2, 4, 0, 0, false},                       // windows with gaps between them
        {1, 300, 12, 40, 3, 1, 1, 1, true, Conv1dCase::kInPlace},  // K over several k-blocks
        {1, w, 300, 2 * w, 3, 1, 1, 1, false},                     // rows over several row blocks
        {3, 5, 8, 9, 1, 2, 0, 1, true},                            // one tap, a pad past the end only
    };
    uint32_t seed = 101;
    for (const Conv1dCase& t : cases) check_conv1d(kernels, t, seed += 10);
  }
}

// F(4x4, 3x3)'s transforms scale values by up to 10 (A^T's 8, B^T's 5):
// its float error against the exact sum, here at most about 1e-6 of the
// terms' magnitudes, is several times the direct convolution's.
constexpr double kWinogradTolerance = 1e-5;

TEST(VecKernels, WinogradConvolutionMatchesADirectConvolution) {
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const VecKernels& kernels = kernels::vec::vec_kernels_for(isa);
    const int64_t w = kernels.gemm.width;
    // batch, cin, ih, iw, cout, kh, kw, stride, pad, dilation, bias, residual, relu, apart, pad_end
    const ConvCase cases[] = {
        {1, w, 8, 8, 2 * w, 3, 3, 1, 1, 1, true, false, true},            // whole 4x4 tiles
        {1, 2 * w, 7, 9, 3 * w, 3, 3, 1, 1, 1, false, true, false},       // partial tiles at both edges, a residual
        {2, w, 6, 6, w, 3, 3, 1, 0, 1, true, true, true, true},           // no padding, a batch, the residual apart
        {1, w, 5, 6, 5 * w, 3, 3, 1, 2, 1, true, false, false, false, 0},  // padding at the top and left only
        {1, 72 * w, 4, 4, 2 * w, 3, 3, 1, 1, 1, true, true, true},        // C_in over several k-blocks
        {1, 16 * w, 30, 30, 2 * w, 3, 3, 1, 1, 1, false, false, true},    // tiles over several blocks (a large L2: one)
        // Blocks of 3 tiles (not whole row tiles) across two batch items, whichever the L2.
        {2, w, 10, 9, 3 * w, 3, 3, 1, 1, 1, true, true, true, false, -1, 3},
        // Blocks of 5 tiles with several panels of outputs and several k-blocks (the weights' prefetch
        // crosses each).
        {2, 72 * w, 6, 10, 5 * w, 3, 3, 1, 1, 1, true, false, true, false, -1, 5},
        {1, w, 1, 1, 4 * w, 3, 3, 1, 1, 1, true, false, false},           // one pixel, mostly padding
    };
    uint32_t seed = 7;
    for (bool prefetch_b : {false, true}) {  // the micro-kernel asking for the weights' next panel, or not
      SCOPED_TRACE(prefetch_b ? "prefetching" : "not prefetching");
      for (const ConvCase& t : cases) check_conv(kernels, t, seed += 10, true, kWinogradTolerance, prefetch_b);
    }
  }
}

Tensor random_tensor(Shape shape, uint32_t seed) {
  Tensor t(DType::kFloat32, shape);
  const std::vector<float> v = uniform_values(static_cast<size_t>(t.numel()), seed);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

// Conv or FusedConv on oneDNN's backend at `threads` threads against the
// reference kernels; returns the implementation it ran on.
std::string conv_against_reference(const std::string& op, const std::vector<Tensor>& inputs, const ir::Attributes& a,
                                   int threads) {
  testing::KernelOptions fast, ref;
  fast.backend = kernels::Backend::kDnnl;
  ref.backend = kernels::Backend::kRef;
  fast.domain = ref.domain = op == "FusedConv" ? "anvil" : "";
  fast.constant_inputs = ref.constant_inputs = {false, true, true, false};
  fast.num_threads = threads;
  const testing::KernelResult got = testing::run_kernel_full(op, inputs, a, fast);
  const std::vector<float> want = testing::values<float>(testing::run_kernel(op, inputs, a, ref)[0]);
  const std::vector<float> have = testing::values<float>(got.outputs[0]);
  EXPECT_EQ(have.size(), want.size());
  for (size_t i = 0; i < want.size() && i < have.size(); ++i)
    if (std::abs(have[i] - want[i]) > 1e-4 * (1 + std::abs(want[i]))) {
      ADD_FAILURE() << op << " [" << got.impl << "] at " << i << ": " << have[i] << ", want " << want[i];
      break;
    }
  return got.impl;
}

// The same; `gemm`: the rule puts the node on conv_gemm, which it does where
// oneDNN's choice is jit:avx2 (AVX2, or capped there).
void expect_conv_matches_reference(const std::string& op, const std::vector<Tensor>& inputs, const ir::Attributes& a,
                                   bool gemm, int threads = 2) {
  const std::string impl = conv_against_reference(op, inputs, a, threads);
  EXPECT_EQ(impl.find(":conv_gemm") != std::string::npos, gemm && vector_isa() == VectorIsa::kAvx2) << op << ": " << impl;
}

// 1-D convolutions take conv1d_gemm where oneDNN's pick is brgconv (AVX-512)
// and consecutive windows start a multiple of 4 KiB apart: stride x C_in a
// multiple of 1024 floats. The others keep oneDNN's pick.
TEST(VecKernels, Conv1dTakesTheGemmWhereWindowsStartPagesApart) {
  using testing::attrs;
  const bool avx512 = vector_isa() == VectorIsa::kAvx512;
  struct Case {
    const char* what;
    std::string op;
    std::vector<Tensor> inputs;
    ir::Attributes attrs;
    bool conv1d_gemm;
  };
  const Case cases[] = {
      {"256 channels at stride 4, padded", "Conv",
       {random_tensor({1, 256, 41}, 40), random_tensor({48, 256, 3}, 41), random_tensor({48}, 42)},
       attrs({{"strides", std::vector<int64_t>{4}}, {"pads", std::vector<int64_t>{2, 1}}}), true},
      {"wav2vec2's layer: 512 channels at stride 2, GELU, a residual, a batch", "FusedConv",
       {random_tensor({2, 512, 19}, 43), random_tensor({64, 512, 3}, 44), random_tensor({64}, 45),
        random_tensor({2, 64, 9}, 46)},
       attrs({{"strides", std::vector<int64_t>{2}}, {"activation", std::string("Gelu")}}), true},
      {"1024 channels at stride 1", "Conv",
       {random_tensor({1, 1024, 12}, 47), random_tensor({16, 1024, 2}, 48), Tensor()}, {}, true},
      {"384 channels at stride 2 (Whisper's)", "Conv",
       {random_tensor({1, 384, 30}, 49), random_tensor({32, 384, 3}, 50), random_tensor({32}, 51)},
       attrs({{"strides", std::vector<int64_t>{2}}, {"pads", std::vector<int64_t>{1, 1}}}), false},
      {"512 channels at stride 1", "Conv",
       {random_tensor({1, 512, 10}, 52), random_tensor({16, 512, 3}, 53), Tensor()}, {}, false},
      {"a dilated window", "Conv",
       {random_tensor({1, 512, 20}, 54), random_tensor({16, 512, 3}, 55), Tensor()},
       attrs({{"strides", std::vector<int64_t>{2}}, {"dilations", std::vector<int64_t>{2}}}), false},
      {"two groups", "Conv",
       {random_tensor({1, 512, 20}, 56), random_tensor({16, 256, 3}, 57), Tensor()},
       attrs({{"strides", std::vector<int64_t>{2}}, {"group", int64_t{2}}}), false},
  };
  for (const Case& c : cases)
    for (int threads : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << c.what << ", " << threads << " threads");
      const std::string impl = conv_against_reference(c.op, c.inputs, c.attrs, threads);
      EXPECT_EQ(impl.find(":conv1d_gemm") != std::string::npos, c.conv1d_gemm && avx512) << impl;
    }
}

// conv1d_gemm asked for by choice (as the tuner does), so that every ISA
// runs its wiring in the convolution kernel: NWC staging, padded edge rows
// in the scratch, the residual in place, and activations with parameters.
TEST(VecKernels, Conv1dGemmChosenMatchesTheReference) {
  using testing::attrs;
  struct Case {
    const char* what;
    std::string op;
    std::vector<Tensor> inputs;
    ir::Attributes attrs;
  };
  const Case cases[] = {
      {"padded, strided, a bias", "Conv",
       {random_tensor({1, 24, 33}, 60), random_tensor({40, 24, 5}, 61), random_tensor({40}, 62)},
       attrs({{"strides", std::vector<int64_t>{2}}, {"pads", std::vector<int64_t>{3, 1}}})},
      {"LeakyRelu's slope and a residual, a batch", "FusedConv",
       {random_tensor({2, 16, 20}, 63), random_tensor({8, 16, 3}, 64), random_tensor({8}, 65),
        random_tensor({2, 8, 20}, 66)},
       attrs({{"pads", std::vector<int64_t>{1, 1}},
              {"activation", std::string("LeakyRelu")},
              {"activation_alpha", 0.3f}})},
      {"Clip's bounds", "FusedConv",
       {random_tensor({1, 8, 12}, 67), random_tensor({16, 8, 2}, 68), Tensor()},
       attrs({{"activation", std::string("Clip")}, {"activation_alpha", -0.5f}, {"activation_beta", 0.25f}})},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    testing::KernelOptions fast, ref;
    fast.backend = kernels::Backend::kDnnl;
    fast.domain = ref.domain = c.op == "FusedConv" ? "anvil" : "";
    fast.constant_inputs = ref.constant_inputs = {false, true, true, false};
    fast.choice = 1;  // alternatives: oneDNN's pick, then conv1d_gemm
    const testing::KernelResult got = testing::run_kernel_full(c.op, c.inputs, c.attrs, fast);
    EXPECT_NE(got.impl.find(":conv1d_gemm"), std::string::npos) << got.impl;
    const std::vector<float> want = testing::values<float>(testing::run_kernel(c.op, c.inputs, c.attrs, ref)[0]);
    const std::vector<float> have = testing::values<float>(got.outputs[0]);
    ASSERT_EQ(have.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(have[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << i;
  }
}

TEST(VecKernels, ConvOnTheGemmMatchesTheReference) {
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(2);
  using testing::attrs;
  const ir::Attributes pad1 = attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  expect_conv_matches_reference("Conv", {random_tensor({1, 16, 7, 7}, 1), random_tensor({24, 16, 3, 3}, 2),
                                         random_tensor({24}, 3)},
                                pad1, true);
  // A residual and ReLU, stride 2 from 14x14 to 7x7, no bias.
  expect_conv_matches_reference(
      "FusedConv",
      {random_tensor({2, 8, 14, 14}, 4), random_tensor({16, 8, 3, 3}, 5), Tensor(), random_tensor({2, 16, 7, 7}, 6)},
      attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}},
             {"strides", std::vector<int64_t>{2, 2}},
             {"activation", std::string("Relu")}}),
      true);
  // A 3x3 window on a 13x13 plane (taken up to 196 pixels when wider than 1x1;
  // at stride 1 from 196 on, Anvil's Winograd convolution takes it).
  expect_conv_matches_reference("Conv", {random_tensor({1, 16, 13, 13}, 23), random_tensor({16, 16, 3, 3}, 24), Tensor()},
                                pad1, true);
  // Asymmetric padding (ONNX's begin and end pads), and a 1x1 window.
  expect_conv_matches_reference(
      "Conv", {random_tensor({1, 8, 6, 7}, 16), random_tensor({16, 8, 3, 3}, 17), random_tensor({16}, 18)},
      attrs({{"pads", std::vector<int64_t>{0, 2, 1, 0}}}), true);
  expect_conv_matches_reference(
      "Conv", {random_tensor({1, 24, 7, 7}, 19), random_tensor({512, 24, 1, 1}, 20), Tensor()}, {}, true);
  // At one thread: a 3x3 window taken, a 1x1 one with 512 outputs left to oneDNN.
  expect_conv_matches_reference("Conv", {random_tensor({1, 16, 7, 7}, 30), random_tensor({24, 16, 3, 3}, 31),
                                         random_tensor({24}, 32)},
                                pad1, true, 1);
  expect_conv_matches_reference(
      "Conv", {random_tensor({1, 24, 7, 7}, 33), random_tensor({512, 24, 1, 1}, 34), Tensor()}, {}, false, 1);
  // Left to oneDNN: a 1x1 window with fewer than 512 outputs.
  expect_conv_matches_reference("Conv",
                                {random_tensor({1, 24, 7, 7}, 25), random_tensor({64, 24, 1, 1}, 26), Tensor()}, {}, false);
  // Not on conv_gemm: output planes over the rule's sizes (3x3 and 1x1; the
  // 3x3 at stride 1 on Anvil's Winograd convolution with AVX2), channels short
  // of a vector, two groups, an activation the GEMM does not apply in registers.
  expect_conv_matches_reference("Conv", {random_tensor({1, 8, 15, 15}, 7), random_tensor({8, 8, 3, 3}, 8), Tensor()},
                                pad1, false);
  expect_conv_matches_reference("Conv", {random_tensor({1, 8, 9, 9}, 21), random_tensor({512, 8, 1, 1}, 22), Tensor()},
                                {}, false);
  expect_conv_matches_reference("Conv", {random_tensor({1, 12, 7, 7}, 9), random_tensor({8, 12, 3, 3}, 10), Tensor()},
                                pad1, false);
  expect_conv_matches_reference(
      "Conv", {random_tensor({1, 16, 7, 7}, 11), random_tensor({16, 8, 3, 3}, 12), Tensor()},
      attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"group", int64_t{2}}}), false);
  expect_conv_matches_reference("FusedConv",
                                {random_tensor({1, 8, 7, 7}, 13), random_tensor({8, 8, 1, 1}, 14), random_tensor({8}, 15)},
                                attrs({{"activation", std::string("Sigmoid")}}), false);
  omp_set_num_threads(saved_threads);
}

// A direct convolution (pads 1, stride 1) of x [1, C, H, W] by w [O, C, 3, 3], in double.
std::vector<float> direct_conv3x3(const Tensor& x, const Tensor& w) {
  return testing::values<float>(testing::conv2d_by_hand(x, w, nullptr, testing::ConvByHand::padded(1)));
}

// The weights packed for conv_gemm are the only copy the session keeps; a
// later plan that leaves the node to oneDNN (a plane over the rule's size)
// rebuilds the original from them: its outputs show the unpacking is exact.
TEST(VecKernels, ConvGemmWeightsRestoreForAnotherPlan) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  ir::Value* x = g->add_input("x", DType::kFloat32, {1, 64, -1, -1});
  const Tensor w = random_tensor({128, 64, 3, 3}, 30);  // 288 KiB: worth releasing
  // A copy the session alone holds: a caller's tensor is never released.
  ir::Node* conv = g->add_node("Conv", {x, g->add_constant("w", w.clone())}, 1);
  conv->attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  g->add_output(conv->output(0));
  SessionOptions options;
  options.num_threads = 2;
  Session s = Session::from_graph(std::move(g), options);
  for (int64_t side : {7, 12, 7}) {  // conv_gemm (on AVX2), oneDNN, conv_gemm's plan again
    SCOPED_TRACE(::testing::Message() << side << "x" << side);
    const Tensor in = random_tensor({1, 64, side, side}, static_cast<uint32_t>(side));
    const Tensor y = s.run({{"x", in}})[0];
    const std::vector<float> want = direct_conv3x3(in, w);
    ASSERT_EQ(static_cast<size_t>(y.numel()), want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(y.data<float>()[i], want[i], 1e-4f * (1 + std::abs(want[i]))) << i;
  }
}

}  // namespace
}  // namespace anvil
