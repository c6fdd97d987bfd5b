// anvil.SqueezeExcite (ir/schemas/nn.cc): both kernels against the formula
// computed here in double, the fast kernel's hand-offs to the reference one,
// and the schema's shape rules.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kernel_tester.h"

namespace anvil {
namespace {

using testing::attrs;
using testing::run_kernel;

double activate(const std::string& name, double x, double alpha, double beta) {
  if (name == "Relu") return x > 0 ? x : 0;
  if (name == "Sigmoid") return 1 / (1 + std::exp(-x));
  if (name == "Swish") return x / (1 + std::exp(-alpha * x));
  if (name == "HardSigmoid") return std::min(1.0, std::max(0.0, alpha * x + beta));
  if (name == "Tanh") return std::tanh(x);
  return x;
}

struct Case {
  std::string act, gate;
  float act_alpha = 0.f, gate_alpha = 0.f, gate_beta = 0.f;
  bool biases = true;
};

// gate(W2 act(W1 mean(X) + B1) + B2), [N, C, 1, 1].
Tensor by_hand(const std::vector<Tensor>& in, const Case& c) {
  const Tensor &x = in[0], &w1 = in[1], &w2 = in[3];
  const int64_t n = x.dim(0), ch = x.dim(1), plane = x.dim(2) * x.dim(3), r = w1.dim(0);
  Tensor s(DType::kFloat32, {n, ch, 1, 1});
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> mean(static_cast<size_t>(ch)), h(static_cast<size_t>(r));
    for (int64_t k = 0; k < ch; ++k) {
      for (int64_t p = 0; p < plane; ++p) mean[static_cast<size_t>(k)] += x.data<float>()[(i * ch + k) * plane + p];
      mean[static_cast<size_t>(k)] /= static_cast<double>(plane);
    }
    for (int64_t j = 0; j < r; ++j) {
      double acc = c.biases ? in[2].data<float>()[j] : 0.0;
      for (int64_t k = 0; k < ch; ++k) acc += double(w1.data<float>()[j * ch + k]) * mean[static_cast<size_t>(k)];
      h[static_cast<size_t>(j)] = activate(c.act, acc, c.act_alpha, 0);
    }
    for (int64_t k = 0; k < ch; ++k) {
      double acc = c.biases ? in[4].data<float>()[k] : 0.0;
      for (int64_t j = 0; j < r; ++j) acc += double(w2.data<float>()[k * r + j]) * h[static_cast<size_t>(j)];
      s.data<float>()[i * ch + k] = static_cast<float>(activate(c.gate, acc, c.gate_alpha, c.gate_beta));
    }
  }
  return s;
}

ir::Attributes attributes_of(const Case& c) {
  return attrs({{"activation", c.act},
                {"activation_alpha", c.act_alpha},
                {"activation_beta", 0.f},
                {"gate", c.gate},
                {"gate_alpha", c.gate_alpha},
                {"gate_beta", c.gate_beta}});
}

testing::KernelOptions options(kernels::Backend backend, bool constant_weights = true) {
  testing::KernelOptions o;
  o.backend = backend;
  o.domain = "anvil";
  o.constant_inputs = {false, constant_weights, constant_weights, constant_weights, constant_weights};
  return o;
}

// X [2, 40, 5, 6] through a reduction to 10 and back: the channels make two
// and a half vectors on AVX-512 (and five on AVX2), so the loops' tails run.
std::vector<Tensor> inputs(bool biases) {
  std::vector<Tensor> in = {testing::random_f32({2, 40, 5, 6}, 1), testing::random_f32({10, 40, 1, 1}, 2), Tensor(),
                            testing::random_f32({40, 10, 1, 1}, 3), Tensor()};
  if (biases) {
    in[2] = testing::random_f32({10}, 4);
    in[4] = testing::random_f32({40}, 5);
  }
  return in;
}

TEST(SqueezeExcite, BothKernelsMatchTheFormula) {
  const Case cases[] = {{"Relu", "Sigmoid"},
                        {"Swish", "HardSigmoid", 1.f, 1.f / 6, 0.5f},
                        {"", "", 0.f, 0.f, 0.f, false}};
  for (const Case& c : cases)
    for (kernels::Backend backend : {kernels::Backend::kDnnl, kernels::Backend::kRef}) {
      SCOPED_TRACE(c.act + " / " + c.gate + (backend == kernels::Backend::kRef ? ", reference" : ", vectorized"));
      const std::vector<Tensor> in = inputs(c.biases);
      const testing::KernelResult r = testing::run_kernel_full("SqueezeExcite", in, attributes_of(c), options(backend));
      if (backend == kernels::Backend::kDnnl) {
        EXPECT_NE(r.impl.find(":squeeze_excite"), std::string::npos) << r.impl;
      }
      const Tensor want = by_hand(in, c);
      ASSERT_EQ(r.outputs[0].shape(), want.shape());
      for (int64_t i = 0; i < want.numel(); ++i)
        ASSERT_NEAR(r.outputs[0].data<float>()[i], want.data<float>()[i], 2e-5f) << i;
    }
}

// Weights known only at run time, or a gate the GEMM's epilogue lacks: the
// vectorized kernel declines, and the reference kernel takes the node.
TEST(SqueezeExcite, ReferenceKernelTakesWhatTheFastOneDeclines) {
  const Case tanh{"Relu", "Tanh"};
  for (const auto& [c, constant] : {std::pair{Case{"Relu", "Sigmoid"}, false}, std::pair{tanh, true}}) {
    SCOPED_TRACE(c.gate + (constant ? "" : ", run-time weights"));
    const std::vector<Tensor> in = inputs(true);
    try {
      run_kernel("SqueezeExcite", in, attributes_of(c), options(kernels::Backend::kDnnl, constant));
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
    }
    const Tensor y = run_kernel("SqueezeExcite", in, attributes_of(c), options(kernels::Backend::kRef, constant))[0];
    const Tensor want = by_hand(in, c);
    for (int64_t i = 0; i < want.numel(); ++i) ASSERT_NEAR(y.data<float>()[i], want.data<float>()[i], 2e-5f) << i;
  }
}

// Shapes that do not fit each other fail in one message naming the node;
// an activation no kernel knows is the model's fault.
TEST(SqueezeExcite, ShapesThatDoNotFitAreRefused) {
  auto error_of = [](std::vector<Tensor> in, const Case& c) -> std::string {
    try {
      run_kernel("SqueezeExcite", in, attributes_of(c), options(kernels::Backend::kRef));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const Case plain{"Relu", "Sigmoid"};
  std::vector<Tensor> in = inputs(true);
  in[3] = testing::random_f32({40, 9, 1, 1}, 6);  // W2 reads 9 reduced channels, W1 makes 10
  EXPECT_NE(error_of(in, plain).find("W2"), std::string::npos);
  in = inputs(true);
  in[1] = testing::random_f32({10, 40, 3, 3}, 7);  // not a 1x1 window
  EXPECT_NE(error_of(in, plain).find("1x1"), std::string::npos);
  in = inputs(true);
  in[2] = testing::random_f32({11}, 8);
  EXPECT_NE(error_of(in, plain).find("bias"), std::string::npos);
  in = inputs(true);
  in[0] = testing::random_f32({2, 40, 0, 6}, 9);
  EXPECT_NE(error_of(in, plain).find("empty plane"), std::string::npos);
  EXPECT_NE(error_of(inputs(true), Case{"Softplus", "Sigmoid"}).find("unknown activation 'Softplus'"),
            std::string::npos);
}

}  // namespace
}  // namespace anvil
