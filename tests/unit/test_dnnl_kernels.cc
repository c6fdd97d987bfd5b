// The oneDNN kernels against the reference kernels on the same random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/vector_isa.h"
#include "kernel_tester.h"
#include "kernels/dnnl/common.h"
#include "relaid.h"

namespace anvil::testing {
namespace {

using kernels::Backend;

// The oneDNN backend's kernels run on oneDNN, or on Anvil's GEMM: MatMul and
// Gemm with a constant B where oneDNN's choice is gemm:jit (packed_gemm),
// convolutions on small planes where it is jit:avx2 (conv_gemm); or on
// Anvil's loop: inference BatchNormalization (batchnorm).
bool runs_on_backend_kernel(const std::string& impl) {
  const bool on_own = impl.find(":packed_gemm") != std::string::npos || impl.find(":conv_gemm") != std::string::npos ||
                      impl.find(":batchnorm") != std::string::npos || impl.find(":sigmoid") != std::string::npos ||
                      impl.find(":swish") != std::string::npos;
  return impl.rfind("dnnl:", 0) == 0 || (impl.rfind("vec:", 0) == 0 && on_own);
}

// Runs op on both backends with the given constant mask and checks they agree.
void expect_backends_agree(const std::string& op, const std::vector<Tensor>& inputs, const ir::Attributes& attrs,
                           std::vector<bool> constant, float tol = 1e-4f, bool expect_dnnl = true) {
  KernelOptions ref_opts, dnnl_opts;
  ref_opts.constant_inputs = constant;
  dnnl_opts.constant_inputs = constant;
  dnnl_opts.backend = Backend::kDnnl;
  KernelResult ref = run_kernel_full(op, inputs, attrs, ref_opts);
  KernelResult dnnl = run_kernel_full(op, inputs, attrs, dnnl_opts);
  if (expect_dnnl) {
    EXPECT_TRUE(runs_on_backend_kernel(dnnl.impl)) << dnnl.impl;
  }
  ASSERT_EQ(ref.outputs[0].shape(), dnnl.outputs[0].shape());
  EXPECT_LE(max_abs_diff(ref.outputs[0], dnnl.outputs[0]), tol) << op;
}

ir::Attributes conv_attrs(std::vector<int64_t> strides, std::vector<int64_t> pads, std::vector<int64_t> dilations,
                          int64_t group) {
  ir::Attributes a;
  a.set("strides", strides);
  a.set("pads", pads);
  a.set("dilations", dilations);
  a.set("group", group);
  return a;
}

TEST(DnnlConv, Plain3x3WithBiasConstantWeights) {
  // 15x15: over conv_gemm's plane sizes, so oneDNN's own kernel runs (test_conv_gemm.cc has the smaller ones).
  expect_backends_agree("Conv", {random_f32({1, 8, 15, 15}, 1), random_f32({16, 8, 3, 3}, 2), random_f32({16}, 3)},
                        conv_attrs({1, 1}, {1, 1, 1, 1}, {1, 1}, 1), {false, true, true});
}

TEST(DnnlConv, StridedDilatedAsymmetricPads) {
  expect_backends_agree("Conv", {random_f32({2, 4, 13, 11}, 4), random_f32({6, 4, 3, 3}, 5)},
                        conv_attrs({2, 1}, {0, 1, 2, 0}, {2, 1}, 1), {false, true});
}

TEST(DnnlConv, GroupedAndDepthwise) {
  expect_backends_agree("Conv", {random_f32({1, 8, 9, 9}, 6), random_f32({8, 2, 3, 3}, 7)},
                        conv_attrs({1, 1}, {1, 1, 1, 1}, {1, 1}, 4), {false, true});
  expect_backends_agree("Conv", {random_f32({1, 8, 9, 9}, 8), random_f32({8, 1, 3, 3}, 9)},
                        conv_attrs({2, 2}, {1, 1, 1, 1}, {1, 1}, 8), {false, true});
}

TEST(DnnlConv, WeightsNotConstant) {
  expect_backends_agree("Conv", {random_f32({1, 3, 7, 7}, 10), random_f32({5, 3, 2, 2}, 11)},
                        conv_attrs({1, 1}, {0, 0, 0, 0}, {1, 1}, 1), {false, false});
}

TEST(DnnlConv, OneDAndThreeD) {
  ir::Attributes a1;
  a1.set("pads", std::vector<int64_t>{1, 1});
  expect_backends_agree("Conv", {random_f32({1, 3, 20}, 12), random_f32({4, 3, 3}, 13)}, a1, {false, true});
  ir::Attributes a3;
  a3.set("strides", std::vector<int64_t>{1, 2, 2});
  expect_backends_agree("Conv", {random_f32({1, 2, 5, 6, 6}, 14), random_f32({3, 2, 3, 3, 3}, 15)}, a3, {false, true});
}

TEST(DnnlConv, AutoPadSameUpper) {
  ir::Attributes a;
  a.set("auto_pad", std::string("SAME_UPPER"));
  a.set("strides", std::vector<int64_t>{2, 2});
  expect_backends_agree("Conv", {random_f32({1, 3, 8, 7}, 16), random_f32({4, 3, 3, 3}, 17)}, a, {false, true});
}

TEST(DnnlConvTranspose, StridedWithOutputPadding) {
  ir::Attributes a;
  a.set("strides", std::vector<int64_t>{2, 2});
  a.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  a.set("output_padding", std::vector<int64_t>{1, 1});
  expect_backends_agree("ConvTranspose", {random_f32({1, 4, 5, 5}, 18), random_f32({4, 3, 3, 3}, 19), random_f32({3}, 20)},
                        a, {false, true, true});
}

TEST(DnnlConvTranspose, Grouped) {
  ir::Attributes a;
  a.set("group", int64_t{2});
  expect_backends_agree("ConvTranspose", {random_f32({1, 4, 4, 4}, 21), random_f32({4, 3, 3, 3}, 22)}, a, {false, true});
}

TEST(DnnlFusedConv, ResidualAndRelu) {
  ir::Attributes a = conv_attrs({1, 1}, {1, 1, 1, 1}, {1, 1}, 1);
  a.set("activation", std::string("Relu"));
  a.set("activation_alpha", 0.f);
  a.set("activation_beta", 0.f);
  std::vector<Tensor> in = {random_f32({1, 4, 6, 6}, 23), random_f32({4, 4, 3, 3}, 24), random_f32({4}, 25),
                            random_f32({1, 4, 6, 6}, 26)};
  // Expected: the reference Conv, plus the residual, then ReLU — computed here.
  KernelOptions conv_opts;
  conv_opts.constant_inputs = {false, true, true};
  Tensor expected = run_kernel("Conv", {in[0], in[1], in[2]}, conv_attrs({1, 1}, {1, 1, 1, 1}, {1, 1}, 1), conv_opts)[0];
  for (int64_t i = 0; i < expected.numel(); ++i) {
    float v = expected.data<float>()[i] + in[3].data<float>()[i];
    expected.data<float>()[i] = v > 0 ? v : 0;
  }
  for (Backend backend : {Backend::kDnnl, Backend::kRef}) {
    KernelOptions o;
    o.domain = "anvil";
    o.backend = backend;
    o.constant_inputs = {false, true, true, false};
    Tensor got = run_kernel("FusedConv", in, a, o)[0];
    EXPECT_LE(max_abs_diff(got, expected), 1e-4f) << (backend == Backend::kDnnl ? "dnnl" : "ref");
  }
}

// FusedConv with a Swish runs the convolution, then the Swish over its output
// (the whole output in the layout the kernel picked), whatever
// implementation the rules pick: a 3x3 at stride 1 on a plane of 56 x 56 (a
// Winograd convolution where the input arrives in channel blocks, on AVX2 and
// AVX-512; its Swish split between threads), a 1x1, a strided 3x3, a
// depthwise 3x3, 20 output channels (padded blocks with AVX2, whose padding
// must stay 0); the input plain (the kernel stages its layouts) or arriving
// in the ISA's channel blocks with the output left in the kernel's layout; with and
// without a residual (plain only: it arrives in the output's layout); one
// thread and two. Against the reference Conv, plus the residual, then x *
// sigmoid(alpha x), computed here (within 1e-5 of the largest output).
TEST(DnnlFusedConv, SwishAfterEveryImplementation) {
  namespace du = kernels::dnnl_util;
  struct Case {
    Shape x, w;
    int64_t stride, pad, group;
  };
  const Case cases[] = {{{1, 16, 56, 56}, {16, 16, 3, 3}, 1, 1, 1}, {{1, 32, 20, 20}, {16, 32, 1, 1}, 1, 0, 1},
                        {{1, 16, 15, 15}, {32, 16, 3, 3}, 2, 1, 1}, {{1, 16, 14, 14}, {16, 1, 3, 3}, 1, 1, 16},
                        {{1, 16, 9, 9}, {20, 16, 3, 3}, 1, 1, 1}};
  unsigned seed = 30;
  int blocks_run = 0, padded_run = 0;
  for (const Case& c : cases)
    for (bool blocks : {false, true})
      for (bool residual : {false, true})
        for (int threads : {1, 2}) {
          if (blocks && residual) continue;
          SCOPED_TRACE(::testing::Message() << shape_str(c.x) << " * " << shape_str(c.w) << " stride " << c.stride
                                            << (blocks ? " in blocks" : " plain") << " residual " << residual
                                            << " threads " << threads);
          const ir::Attributes conv = conv_attrs({c.stride, c.stride}, {c.pad, c.pad, c.pad, c.pad}, {1, 1}, c.group);
          std::vector<Tensor> in = {random_f32(c.x, seed), random_f32(c.w, seed + 1), random_f32({c.w[0]}, seed + 2)};
          seed += 3;
          for (int64_t i = 0; i < in[0].numel(); ++i) in[0].data<float>()[i] *= 4.f;  // both tails of the sigmoid
          KernelOptions conv_opts;
          conv_opts.constant_inputs = {false, true, true};
          Tensor expected = run_kernel("Conv", in, conv, conv_opts)[0];
          if (residual) in.push_back(random_f32(expected.shape(), seed++));
          const float alpha = 0.75f;
          for (int64_t i = 0; i < expected.numel(); ++i) {
            const double v = double(expected.data<float>()[i]) + (residual ? in[3].data<float>()[i] : 0.f);
            expected.data<float>()[i] = static_cast<float>(v / (1 + std::exp(-alpha * v)));
          }
          ir::Attributes a = conv;
          a.set("activation", std::string("Swish"));
          a.set("activation_alpha", alpha);
          a.set("activation_beta", 0.f);
          KernelOptions o;
          o.domain = "anvil";
          o.backend = Backend::kDnnl;
          o.num_threads = threads;
          o.constant_inputs = {false, true, true, false};
          const dnnl::memory::desc plain_x = du::plain_desc(c.x, DType::kFloat32), blocked_x = du::blocked_desc(c.x);
          if (blocks) {
            o.incoming_layouts = {du::layout_of(blocked_x, c.x, DType::kFloat32), nullptr, nullptr};
            in[0] = relaid(in[0], plain_x, blocked_x);
          }
          const KernelResult got = run_kernel_full("FusedConv", in, a, o);
          // A kernel reading another layout than the blocks that arrive gets a
          // reorder in a plan; the harness has none: skipped (brgconv's NHWC for
          // the strided and 20-channel cases on AVX-512, SSE4.1's gemm:jit).
          if (blocks && !kernels::same_layout(got.input_layouts[0], o.incoming_layouts[0])) continue;
          if (blocks) ++blocks_run;
          const dnnl::memory::desc y_md = du::desc_of(got.types[0]);
          if (y_md.get_size() > expected.nbytes()) {  // padded channel blocks: the padding must stay 0
            ++padded_run;
            const int64_t block = y_md.data.format_desc.blocking.inner_blks[0], channels = expected.shape()[1];
            const int64_t plane = expected.shape()[2] * expected.shape()[3];
            const float* last = got.outputs[0].data<float>() + channels / block * plane * block;
            for (int64_t p = 0; p < plane; ++p)
              for (int64_t k = channels % block; k < block; ++k) ASSERT_EQ(last[p * block + k], 0.f) << p << " " << k;
          }
          if (blocks && c.x[2] == 56 && vector_isa() >= VectorIsa::kAvx2)
            EXPECT_NE(got.impl.find("winograd"), std::string::npos) << got.impl;
          const Tensor y = relaid(got.outputs[0], y_md, du::plain_desc(expected.shape(), DType::kFloat32));
          float largest = 0;  // Winograd's transforms round at the output's scale
          for (int64_t i = 0; i < expected.numel(); ++i) largest = std::max(largest, std::fabs(expected.data<float>()[i]));
          EXPECT_LE(max_abs_diff(y, expected), 1e-5f * (1 + largest)) << got.impl;
        }
  if (du::blocked_layouts_allowed()) EXPECT_GT(blocks_run, 0);
  if (du::blocked_layouts_allowed() && vector_isa() == VectorIsa::kAvx2) EXPECT_GT(padded_run, 0);  // 20 in nChw8c
}

// FusedMatMul = MatMul + bias along the last dim + residual, then the activation,
// on both backends against that sum computed here from the reference MatMul.
void expect_fused_matmul(const std::string& activation, float (*act)(float), Shape a_shape, bool with_sum,
                         float alpha = 0.f) {
  const int64_t n = 6;
  Shape y_shape = a_shape;
  y_shape.back() = n;
  std::vector<Tensor> in = {random_f32(a_shape, 70), random_f32({a_shape.back(), n}, 71), random_f32({n}, 72),
                            with_sum ? random_f32(y_shape, 73) : Tensor()};
  Tensor expected = run_kernel("MatMul", {in[0], in[1]})[0];
  for (int64_t i = 0; i < expected.numel(); ++i) {
    float v = expected.data<float>()[i] + in[2].data<float>()[i % n] + (with_sum ? in[3].data<float>()[i] : 0.f);
    expected.data<float>()[i] = act(v);
  }
  ir::Attributes a;
  a.set("activation", activation);
  a.set("activation_alpha", alpha);
  a.set("activation_beta", 0.f);
  for (Backend backend : {Backend::kDnnl, Backend::kRef}) {
    KernelOptions o;
    o.domain = "anvil";
    o.backend = backend;
    o.constant_inputs = {false, true, true, false};
    KernelResult got = run_kernel_full("FusedMatMul", in, a, o);
    if (backend == Backend::kDnnl) {
      EXPECT_TRUE(runs_on_backend_kernel(got.impl)) << got.impl;
    }
    EXPECT_LE(max_abs_diff(got.outputs[0], expected), 1e-5f) << activation << (backend == Backend::kDnnl ? " dnnl" : " ref");
  }
}

TEST(DnnlFusedMatMul, BiasResidualAndActivations) {
  expect_fused_matmul("", [](float x) { return x; }, {2, 3, 5}, false);
  expect_fused_matmul("Relu", [](float x) { return x > 0 ? x : 0; }, {2, 3, 5}, true);
  expect_fused_matmul("Gelu", [](float x) { return 0.5f * x * (1 + std::erf(x / std::sqrt(2.f))); }, {7, 5}, false);
  expect_fused_matmul("GeluTanh", [](float x) {
    return 0.5f * x * (1 + std::tanh(std::sqrt(2.f / static_cast<float>(M_PI)) * (x + 0.044715f * x * x * x)));
  }, {1, 4, 5}, true);
  expect_fused_matmul("Swish", [](float x) { return x / (1 + std::exp(-0.75f * x)); }, {3, 5}, true, 0.75f);
}

// A broadcast oneDNN has only its reference binary for (Swin's attention
// mask over a middle axis of a rank-5 tensor) is declined, so Anvil's own
// kernel runs it; a plain one stays on oneDNN.
TEST(DnnlBinary, BroadcastsWithoutAJitKernelAreDeclined) {
  KernelOptions dnnl_opts;
  dnnl_opts.backend = Backend::kDnnl;
  const std::vector<Tensor> masked = {random_f32({1, 4, 3, 5, 5}, 1), random_f32({1, 4, 1, 5, 5}, 2)};
  std::string impl;
  const ErrorKind declined = error_kind_of([&] { impl = run_kernel_full("Add", masked, {}, dnnl_opts).impl; });
  // Declined, or (a later oneDNN, another CPU) run on a kernel that is not its reference.
  if (declined != ErrorKind::kUnsupported) EXPECT_EQ(impl.find("ref"), std::string::npos) << impl;
  expect_backends_agree("Add", {random_f32({2, 3, 8}, 3), random_f32({8}, 4)}, {}, {false, false});
}

TEST(DnnlEltwise, SwishMatchesItsFormula) {
  for (const Shape& shape : {Shape{2, 3, 17}, Shape{2, 64, 300}}) {  // the second runs on the team, in chunks
    for (float alpha : {1.f, 1.702f}) {
      Tensor x = random_f32(shape, 77);
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] *= 8.f;  // both tails of the sigmoid
      ir::Attributes a;
      a.set("alpha", alpha);
      for (Backend backend : {Backend::kDnnl, Backend::kRef}) {
        KernelOptions o;
        o.backend = backend;
        o.opset = 24;
        KernelResult got = run_kernel_full("Swish", {x}, a, o);
        if (backend == Backend::kDnnl) {  // the eltwise kernel runs Swish on Anvil's loop
          EXPECT_NE(got.impl.find(":swish"), std::string::npos) << got.impl;
        }
        for (int64_t i = 0; i < x.numel(); ++i) {
          const double v = x.data<float>()[i], want = v / (1 + std::exp(-alpha * v));
          ASSERT_NEAR(got.outputs[0].data<float>()[i], want, 1e-5 * std::max(1.0, std::abs(want))) << i;
        }
      }
    }
  }
}

TEST(DnnlFusedMatMul, ResidualOfAnotherShapeIsRefused) {
  std::vector<Tensor> in = {random_f32({2, 5}, 74), random_f32({5, 6}, 75), Tensor(), random_f32({1, 6}, 76)};
  for (Backend backend : {Backend::kDnnl, Backend::kRef}) {
    KernelOptions o;
    o.domain = "anvil";
    o.backend = backend;
    o.constant_inputs = {false, true, false, false};
    EXPECT_EQ(error_kind_of([&] { run_kernel("FusedMatMul", in, {}, o); }), ErrorKind::kInvalidArgument);
  }
}

TEST(DnnlLayerNorm, MatchesReferenceOverTrailingAxes) {
  ir::Attributes last;
  last.set("epsilon", 1e-3f);
  expect_backends_agree("LayerNormalization", {random_f32({2, 3, 16}, 80), random_f32({16}, 81), random_f32({16}, 82)},
                        last, {false, true, true}, 1e-5f);
  ir::Attributes from1;
  from1.set("axis", int64_t{1});
  expect_backends_agree("LayerNormalization", {random_f32({4, 3, 5}, 83), random_f32({3, 5}, 84)}, from1,
                        {false, false}, 1e-5f);  // no bias, scale not constant
}

TEST(DnnlPool, MaxAndAverage) {
  ir::Attributes m;
  m.set("kernel_shape", std::vector<int64_t>{3, 3});
  m.set("strides", std::vector<int64_t>{2, 2});
  m.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  expect_backends_agree("MaxPool", {random_f32({1, 3, 11, 11}, 27)}, m, {false});
  ir::Attributes avg = m;
  expect_backends_agree("AveragePool", {random_f32({1, 3, 11, 11}, 28)}, avg, {false});
  avg.set("count_include_pad", int64_t{1});
  expect_backends_agree("AveragePool", {random_f32({1, 3, 11, 11}, 29)}, avg, {false});
  ir::Attributes ceil = m;
  ceil.set("ceil_mode", int64_t{1});
  ceil.set("pads", std::vector<int64_t>{0, 0, 0, 0});
  expect_backends_agree("MaxPool", {random_f32({1, 2, 10, 10}, 30)}, ceil, {false});
  expect_backends_agree("AveragePool", {random_f32({1, 2, 10, 10}, 31)}, ceil, {false});
}

TEST(DnnlPool, Global) {
  expect_backends_agree("GlobalAveragePool", {random_f32({2, 5, 7, 3}, 32)}, {}, {false});
  expect_backends_agree("GlobalMaxPool", {random_f32({2, 5, 7, 3}, 33)}, {}, {false});
}

TEST(DnnlMatMul, BatchedBroadcastAndVectors) {
  expect_backends_agree("MatMul", {random_f32({2, 3, 4, 5}, 34), random_f32({5, 6}, 35)}, {}, {false, true});
  expect_backends_agree("MatMul", {random_f32({2, 1, 4, 5}, 36), random_f32({3, 5, 2}, 37)}, {}, {false, false});
  expect_backends_agree("MatMul", {random_f32({5}, 38), random_f32({2, 5, 3}, 39)}, {}, {false, false});
  expect_backends_agree("MatMul", {random_f32({4, 5}, 40), random_f32({5}, 41)}, {}, {false, true});
  expect_backends_agree("MatMul", {random_f32({5}, 42), random_f32({5}, 43)}, {}, {false, false});
}

TEST(DnnlGemm, TransposesAlphaBetaBias) {
  ir::Attributes a;
  a.set("transA", int64_t{1});
  a.set("transB", int64_t{1});
  a.set("alpha", 0.5f);
  a.set("beta", 2.f);
  expect_backends_agree("Gemm", {random_f32({4, 3}, 44), random_f32({5, 4}, 45), random_f32({5}, 46)}, a,
                        {false, true, true});
  expect_backends_agree("Gemm", {random_f32({3, 4}, 47), random_f32({4, 5}, 48), random_f32({3, 1}, 49)}, {},
                        {false, false, false});
}


TEST(DnnlEltwise, MatchesReference) {
  Tensor x = random_f32({2, 3, 5, 7}, 60);
  for (const char* op : {"Relu", "LeakyRelu", "Elu", "Sigmoid", "Tanh", "HardSwish", "Exp", "Abs", "Neg"})
    expect_backends_agree(op, {x}, {}, {false}, 1e-5f);
  Tensor positive = random_f32({4, 9}, 61);
  for (int64_t i = 0; i < positive.numel(); ++i) positive.data<float>()[i] = std::fabs(positive.data<float>()[i]) + 0.1f;
  expect_backends_agree("Sqrt", {positive}, {}, {false}, 1e-5f);
  ir::Attributes alpha;
  alpha.set("alpha", 0.3f);
  expect_backends_agree("LeakyRelu", {x}, alpha, {false}, 1e-6f);
  for (const char* approximate : {"none", "tanh"}) {
    ir::Attributes gelu;
    gelu.set("approximate", std::string(approximate));
    KernelOptions ref_opts = opset(20), dnnl_opts = opset(20);
    dnnl_opts.backend = Backend::kDnnl;
    KernelResult ref = run_kernel_full("Gelu", {x}, gelu, ref_opts), dnnl = run_kernel_full("Gelu", {x}, gelu, dnnl_opts);
    EXPECT_TRUE(runs_on_backend_kernel(dnnl.impl)) << dnnl.impl;
    EXPECT_LE(max_abs_diff(ref.outputs[0], dnnl.outputs[0]), 1e-6f) << approximate;
  }
}

TEST(DnnlEltwise, ClipWithConstantBounds) {
  Tensor lo(DType::kFloat32, {}), hi(DType::kFloat32, {});
  *lo.data<float>() = -0.2f;
  *hi.data<float>() = 0.4f;
  expect_backends_agree("Clip", {random_f32({3, 8}, 62), lo, hi}, {}, {false, true, true}, 0.f);
  KernelOptions o;
  o.backend = Backend::kDnnl;
  o.constant_inputs = {false, false, false};  // bounds known only at run time: the reference kernel's job
  EXPECT_THROW(run_kernel("Clip", {random_f32({3, 8}, 63), lo, hi}, {}, o), Error);
}

// Pow by a constant float32 2 is a square, exactly the reference's (x * x
// in double is exact for a float x, then rounded); any other Pow is left to
// the reference kernel.
TEST(DnnlEltwise, PowByAConstantTwoIsASquare) {
  const auto scalar = [](Shape shape, float v) {
    Tensor t(DType::kFloat32, std::move(shape));
    *t.data<float>() = v;
    return t;
  };
  expect_backends_agree("Pow", {random_f32({2, 6, 5, 5}, 64), scalar({}, 2.f)}, {}, {false, true}, 0.f);
  expect_backends_agree("Pow", {random_f32({3, 8}, 65), scalar({1}, 2.f)}, {}, {false, true}, 0.f);
  KernelOptions o;
  o.backend = Backend::kDnnl;
  o.constant_inputs = {false, true};
  EXPECT_THROW(run_kernel("Pow", {random_f32({3, 8}, 66), scalar({}, 3.f)}, {}, o), Error);  // not a square
  EXPECT_THROW(run_kernel("Pow", {random_f32({8}, 67), scalar({1, 1}, 2.f)}, {}, o), Error);  // widens the rank
  Tensor int_two(DType::kInt64, {});
  *int_two.data<int64_t>() = 2;
  EXPECT_ANY_THROW(run_kernel("Pow", {random_f32({3, 8}, 68), int_two}, {}, o));  // float32 inputs only: not registered
  o.constant_inputs = {false, false};  // an exponent known only at run time
  EXPECT_THROW(run_kernel("Pow", {random_f32({3, 8}, 69), scalar({}, 2.f)}, {}, o), Error);
}

TEST(DnnlBinary, BroadcastBothWays) {
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min"}) {
    expect_backends_agree(op, {random_f32({2, 3, 4}, 64), random_f32({2, 3, 4}, 65)}, {}, {false, false}, 1e-5f);
    expect_backends_agree(op, {random_f32({2, 3, 4}, 66), random_f32({3, 1}, 67)}, {}, {false, false}, 1e-5f);
  }
  // The first operand broadcast: commuting ops swap, Sub and Div decline.
  expect_backends_agree("Add", {random_f32({4}, 68), random_f32({2, 3, 4}, 69)}, {}, {false, false}, 1e-6f);
  KernelOptions o;
  o.backend = Backend::kDnnl;
  o.constant_inputs = {false, false};
  try {
    run_kernel("Sub", {random_f32({4}, 70), random_f32({2, 3, 4}, 71)}, {}, o);
    FAIL() << "expected oneDNN to decline";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  }
}

TEST(DnnlSoftmax, LegacyAndAxisSemantics) {
  Tensor x = random_f32({2, 3, 4}, 72);
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    for (int64_t axis : {0, 1, 2, -1}) {
      ir::Attributes a;
      a.set("axis", axis);
      for (int opset : {11, 13}) {
        KernelOptions ref, dnnl;
        ref.opset = dnnl.opset = opset;
        ref.constant_inputs = dnnl.constant_inputs = {false};
        dnnl.backend = Backend::kDnnl;
        EXPECT_LE(max_abs_diff(run_kernel(op, {x}, a, ref)[0], run_kernel(op, {x}, a, dnnl)[0]), 1e-5f)
            << op << " axis " << axis << " opset " << opset;
      }
    }
  }
}

TEST(DnnlBatchNorm, MatchesReference) {
  Tensor var = random_f32({3}, 73);
  for (int64_t i = 0; i < 3; ++i) var.data<float>()[i] = std::fabs(var.data<float>()[i]) + 0.5f;
  expect_backends_agree("BatchNormalization",
                        {random_f32({2, 3, 5, 5}, 74), random_f32({3}, 75), random_f32({3}, 76), random_f32({3}, 77), var},
                        {}, {false, true, true, true, true}, 1e-5f);
}

TEST(DnnlConcat, AlongEachAxis) {
  for (int64_t axis : {0, 1, -1}) {
    ir::Attributes a;
    a.set("axis", axis);
    Shape s1 = {2, 3, 4}, s2 = {2, 3, 4};
    int64_t ax = axis < 0 ? 2 : axis;
    s2[ax] = 5;
    // Plain dense inputs are copied as rows of bytes ("rows"), not by oneDNN's concat.
    std::vector<Tensor> in = {random_f32(s1, 78), random_f32(s2, 79), random_f32(s1, 80)};
    expect_backends_agree("Concat", in, a, {false, false, false}, 0.f, /*expect_dnnl=*/false);
    KernelOptions o;
    o.backend = Backend::kDnnl;
    EXPECT_EQ(run_kernel_full("Concat", in, a, o).impl, "rows");
  }
  // Long rows split into blocks between threads: [1, 2, 100000] + [1, 3, 100000] along axis 1.
  ir::Attributes a;
  a.set("axis", int64_t{1});
  expect_backends_agree("Concat", {random_f32({1, 2, 100000}, 81), random_f32({1, 3, 100000}, 82)}, a, {false, false},
                        0.f, /*expect_dnnl=*/false);
}

TEST(DnnlConv, ChannelMismatchIsInvalidArgument) {
  KernelOptions o;
  o.backend = Backend::kDnnl;
  o.constant_inputs = {false, true};
  try {
    run_kernel("Conv", {random_f32({1, 3, 5, 5}, 50), random_f32({4, 2, 3, 3}, 51)}, {}, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("Conv"), std::string::npos);
  }
}

}  // namespace
}  // namespace anvil::testing
