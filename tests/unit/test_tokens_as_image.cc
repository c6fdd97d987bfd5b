// passes/tokens_as_image.cc and its kernels: a transformer's tokens turned
// into an image for a convolution and back (SegFormer's blocks) become
// anvil.TokensToImage / anvil.ImageToTokens, views of their inputs in the
// channels-last layout within a plan (kernels/dnnl/tokens.cc) and
// transposes on plain data (ref/transform.cc). The graphs' values are
// checked against convolutions computed by hand, the kernels against
// transposes written out here, and the lookalikes are left alone.
#include <gtest/gtest.h>

#include <fmt/ranges.h>

#include "anvil/session.h"
#include "ir/schema.h"
#include "kernel_tester.h"
#include "passes/pipeline.h"
#include "runtime/constant_evaluator.h"

namespace anvil {
namespace {

using testing::count_live_ops;
using testing::i64;

constexpr int64_t kH = 3, kW = 4, kC = 16;  // the image; tokens are [N, kH * kW, kC]

ir::Value* transpose(ir::Graph& g, ir::Value* x, std::vector<int64_t> perm, const std::string& name = "") {
  ir::Node* t = g.add_node("Transpose", {x}, 1);
  t->attrs.set("perm", std::move(perm));
  if (!name.empty()) t->name = name;
  return t->output(0);
}

ir::Value* reshape(ir::Graph& g, ir::Value* x, std::vector<int64_t> target) {
  const auto n = static_cast<int64_t>(target.size());
  return g.add_node("Reshape", {x, g.add_constant(g.unique_name("target"), i64({n}, target))}, 1)->output(0);
}

ir::Value* conv(ir::Graph& g, ir::Value* x, const Tensor& w, int64_t group, int64_t pad, const std::string& name) {
  ir::Node* c = g.add_node("Conv", {x, g.add_constant(g.unique_name("w"), w.clone())}, 1);
  c->attrs.set("group", group);
  c->attrs.set("pads", std::vector<int64_t>{pad, pad, pad, pad});
  c->name = name;
  return c->output(0);
}

// Two of SegFormer's round trips from tokens x [N, 12, 16]: a depthwise 3x3
// reached through Transpose + Reshape (the Mix-FFN), and a 1x1 reached
// through Reshape + Transpose (a stage's output); each image back to
// tokens through Reshape + Transpose, and the two added.
struct RoundTrips {
  Tensor depthwise = testing::random_f32({kC, 1, 3, 3}, 11);
  Tensor pointwise = testing::random_f32({kC, kC, 1, 1}, 12);

  std::unique_ptr<ir::Graph> graph(int64_t batch) const {
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 17;
    ir::Value* x = g->add_input("x", DType::kFloat32, {batch, kH * kW, kC});
    ir::Value* a = reshape(*g, transpose(*g, x, {0, 2, 1}), {batch, kC, kH, kW});
    ir::Value* b = transpose(*g, reshape(*g, x, {batch, kH, kW, kC}), {0, 3, 1, 2});
    ir::Value* ta = transpose(*g, reshape(*g, conv(*g, a, depthwise, kC, 1, "dw"), {batch, kC, kH * kW}), {0, 2, 1});
    ir::Value* tb = transpose(*g, reshape(*g, conv(*g, b, pointwise, 1, 0, "pw"), {batch, kC, kH * kW}), {0, 2, 1});
    g->add_output(g->add_node("Add", {ta, tb}, 1)->output(0));
    ir::infer_types(*g);
    return g;
  }

  // The same values by hand: the tokens as an NCHW image, both convolutions, back to tokens.
  Tensor expected(const Tensor& x) const {
    const int64_t batch = x.shape()[0];
    Tensor image(DType::kFloat32, {batch, kC, kH, kW});
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t p = 0; p < kH * kW; ++p)
        for (int64_t c = 0; c < kC; ++c)
          image.data<float>()[(n * kC + c) * kH * kW + p] = x.data<float>()[(n * kH * kW + p) * kC + c];
    testing::ConvByHand dw = testing::ConvByHand::padded(1);
    dw.group = kC;
    const Tensor y1 = testing::conv2d_by_hand(image, depthwise, nullptr, dw);
    const Tensor y2 = testing::conv2d_by_hand(image, pointwise, nullptr, testing::ConvByHand::padded(0));
    Tensor out(DType::kFloat32, {batch, kH * kW, kC});
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t p = 0; p < kH * kW; ++p)
        for (int64_t c = 0; c < kC; ++c) {
          const int64_t at = (n * kC + c) * kH * kW + p;
          out.data<float>()[(n * kH * kW + p) * kC + c] = y1.data<float>()[at] + y2.data<float>()[at];
        }
    return out;
  }
};

TEST(TokensAsImage, RoundTripsBecomeViewsAtLevelThree) {
  RoundTrips model;
  auto g = model.graph(2);
  passes::optimize(*g, 3, runtime::reference_evaluator());
  EXPECT_EQ(count_live_ops(*g, "TokensToImage"), 2u);
  EXPECT_EQ(count_live_ops(*g, "ImageToTokens"), 2u);
  EXPECT_EQ(count_live_ops(*g, "Transpose"), 0u);

  auto level2 = model.graph(2);
  passes::optimize(*level2, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_live_ops(*level2, "TokensToImage") + count_live_ops(*level2, "ImageToTokens"), 0u);
  EXPECT_EQ(count_live_ops(*level2, "Transpose"), 4u);

  for (int level : {3, 2}) {
    SessionOptions options;
    options.optimization_level = level;
    Session s = Session::from_graph(model.graph(2), options);
    const Tensor x = testing::random_f32({2, kH * kW, kC}, 13);
    const Tensor y = s.run({{"x", x}})[0];
    EXPECT_LE(testing::max_abs_diff(y, model.expected(x)), 1e-4f) << "level " << level;
    if (level != 3) continue;
    // Within the plan the views take the channels-last layout and copy nothing.
    const std::vector<std::string> plan = s.describe_plan({{"x", x}});
    size_t views = 0;
    for (const std::string& line : plan)
      if (line.find("TokensToImage") != std::string::npos || line.find("ImageToTokens") != std::string::npos) {
        EXPECT_NE(line.find(" view "), std::string::npos) << line;
        EXPECT_NE(line.find("acdb"), std::string::npos) << line;  // NHWC
        ++views;
      }
    EXPECT_EQ(views, 4u) << fmt::format("{}", fmt::join(plan, "\n"));
  }
}

// Transposes and reshapes that are not tokens turned into an image of the
// same channels and positions, a Transpose another node reads too, a graph
// output, unknown positions and integer tensors all stay as they are.
TEST(TokensAsImage, LookalikesStay) {
  struct Case {
    const char* what;
    std::function<void(ir::Graph&, ir::Value*)> build;  // from x [2, 12, 16], float32
  };
  const Case cases[] = {
      {"other channels", [](ir::Graph& g, ir::Value* x) {
         g.add_output(g.add_node("Relu", {reshape(g, transpose(g, x, {0, 2, 1}), {2, 8, 6, 4})}, 1)->output(0));
       }},
      {"another permutation", [](ir::Graph& g, ir::Value* x) {
         g.add_output(g.add_node("Relu", {reshape(g, transpose(g, x, {1, 0, 2}), {12, 2, 4, 4})}, 1)->output(0));
       }},
      {"the transpose read twice", [](ir::Graph& g, ir::Value* x) {
         ir::Value* t = transpose(g, x, {0, 2, 1});
         g.add_output(g.add_node("Relu", {reshape(g, t, {2, 16, 3, 4})}, 1)->output(0));
         g.add_output(g.add_node("Relu", {t}, 1)->output(0));
       }},
      {"a graph output", [](ir::Graph& g, ir::Value* x) {
         g.add_output(reshape(g, transpose(g, x, {0, 2, 1}), {2, 16, 3, 4}));
         g.add_output(transpose(g, reshape(g, x, {2, 3, 4, 16}), {0, 3, 1, 2}));
       }},
      {"image to tokens of other positions", [](ir::Graph& g, ir::Value* x) {
         ir::Value* image = g.add_node("Relu", {reshape(g, x, {2, 16, 3, 4})}, 1)->output(0);
         g.add_output(g.add_node("Relu", {transpose(g, reshape(g, image, {2, 32, 6}), {0, 2, 1})}, 1)->output(0));
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 17;
    c.build(*g, g->add_input("x", DType::kFloat32, {2, kH * kW, kC}));
    ir::infer_types(*g);
    passes::optimize(*g, 3, runtime::reference_evaluator());
    EXPECT_EQ(count_live_ops(*g, "TokensToImage") + count_live_ops(*g, "ImageToTokens"), 0u);
  }

  // Positions of unknown count, and int64 tokens.
  for (bool symbolic : {true, false}) {
    SCOPED_TRACE(symbolic ? "symbolic positions" : "int64 tokens");
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 17;
    ir::Value* x = g->add_input("x", symbolic ? DType::kFloat32 : DType::kInt64, {2, kH * kW, kC});
    if (symbolic)
      x->type = ir::Type::tensor(DType::kFloat32, ir::SymShape{ir::Dim::known(2), ir::Dim::named("P"), ir::Dim::known(kC)});
    ir::Value* image = reshape(*g, transpose(*g, x, {0, 2, 1}), {2, kC, kH, kW});
    g->add_output(g->add_node("Neg", {image}, 1)->output(0));
    ir::infer_types(*g);
    passes::optimize(*g, 3, runtime::reference_evaluator());
    EXPECT_EQ(count_live_ops(*g, "TokensToImage"), 0u);
  }
}

// The kernels on plain data (outside a plan, or an image that must be
// plain): transposes of each batch item, any element type.
TEST(TokensAsImage, KernelsTransposePlainData) {
  using testing::attrs;
  testing::KernelOptions options;
  options.domain = "anvil";
  // Tokens [2, 6, 3] (positions 0..5, channels 0..2) as images [2, 3, 2, 3].
  std::vector<int64_t> tokens(36), image(36);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t p = 0; p < 6; ++p)
      for (int64_t c = 0; c < 3; ++c) {
        tokens[(n * 6 + p) * 3 + c] = 100 * n + 10 * p + c;
        image[(n * 3 + c) * 6 + p] = 100 * n + 10 * p + c;
      }
  const std::vector<Tensor> to_image =
      testing::run_kernel("TokensToImage", {i64({2, 6, 3}, tokens)}, attrs({{"spatial", std::vector<int64_t>{2, 3}}}),
                          options);
  EXPECT_EQ(to_image[0].shape(), Shape({2, 3, 2, 3}));
  EXPECT_EQ(testing::values<int64_t>(to_image[0]), image);
  const std::vector<Tensor> to_tokens = testing::run_kernel("ImageToTokens", {i64({2, 3, 2, 3}, image)}, {}, options);
  EXPECT_EQ(to_tokens[0].shape(), Shape({2, 6, 3}));
  EXPECT_EQ(testing::values<int64_t>(to_tokens[0]), tokens);
  // float32, a 3-D image of one spatial dim [2, 3, 6], on the reference
  // kernel and on the vectorized one (4-byte elements only).
  const std::vector<float> ft(tokens.begin(), tokens.end()), fi(image.begin(), image.end());
  for (kernels::Backend backend : {kernels::Backend::kRef, kernels::Backend::kVec}) {
    options.backend = backend;
    const std::vector<Tensor> f_image = testing::run_kernel(
        "TokensToImage", {testing::f32({2, 6, 3}, ft)}, attrs({{"spatial", std::vector<int64_t>{6}}}), options);
    EXPECT_EQ(testing::values<float>(f_image[0]), fi);
    const std::vector<Tensor> f_tokens = testing::run_kernel("ImageToTokens", {testing::f32({2, 3, 6}, fi)}, {}, options);
    EXPECT_EQ(testing::values<float>(f_tokens[0]), ft);
  }
  // The vectorized one over several of its 64 x 64 blocks: [2, 70 x 3, 65].
  options.backend = kernels::Backend::kVec;
  const Tensor big = testing::random_f32({2, 210, 65}, 5);
  const Tensor big_image =
      testing::run_kernel("TokensToImage", {big}, attrs({{"spatial", std::vector<int64_t>{70, 3}}}), options)[0];
  ASSERT_EQ(big_image.shape(), Shape({2, 65, 70, 3}));
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t p = 0; p < 210; ++p)
      for (int64_t c = 0; c < 65; ++c)
        ASSERT_EQ(big_image.data<float>()[(n * 65 + c) * 210 + p], big.data<float>()[(n * 210 + p) * 65 + c]);
  const Tensor big_tokens = testing::run_kernel("ImageToTokens", {big_image}, {}, options)[0];
  EXPECT_EQ(testing::values<float>(big_tokens), testing::values<float>(big));

  // Where layouts are allowed, oneDNN's backend takes the views: the image
  // is the tokens' bytes in NHWC, and the tokens the image's.
  options.backend = kernels::Backend::kDnnl;
  options.incoming_layouts = {nullptr};
  const testing::KernelResult view = testing::run_kernel_full(
      "TokensToImage", {testing::f32({2, 6, 3}, ft)}, attrs({{"spatial", std::vector<int64_t>{2, 3}}}), options);
  EXPECT_EQ(view.impl, "view");
  EXPECT_EQ(kernels::layout_name(view.types[0].layout), "acdb");
  EXPECT_EQ(testing::values<float>(view.outputs[0]), ft);
  const testing::KernelResult back = testing::run_kernel_full("ImageToTokens", {testing::f32({2, 3, 2, 3}, ft)}, {}, options);
  EXPECT_EQ(back.impl, "view");
  EXPECT_EQ(kernels::layout_name(back.input_layouts[0]), "acdb");
  EXPECT_EQ(testing::values<float>(back.outputs[0]), ft);
  // A graph output stays plain: oneDNN's backend declines.
  options.blocked_outputs = false;
  EXPECT_THROW(testing::run_kernel("TokensToImage", {testing::f32({2, 6, 3}, ft)},
                                   attrs({{"spatial", std::vector<int64_t>{2, 3}}}), options),
               Error);
}

// A model that carries the nodes itself (anvil optimize writes them) with
// shapes that do not fit: one clear error, not a crash.
TEST(TokensAsImage, MismatchedShapesAreRejected) {
  using testing::attrs;
  testing::KernelOptions options;
  options.domain = "anvil";
  const Tensor x = testing::random_f32({1, 6, 4}, 1);
  for (const std::vector<int64_t>& spatial : {std::vector<int64_t>{2, 2}, std::vector<int64_t>{0, 6},
                                              std::vector<int64_t>{1, 1, 1, 6}, std::vector<int64_t>{}}) {
    SCOPED_TRACE(fmt::format("spatial {}", fmt::join(spatial, "x")));
    try {
      testing::run_kernel("TokensToImage", {x}, attrs({{"spatial", spatial}}), options);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(testing::run_kernel("ImageToTokens", {testing::random_f32({2, 6}, 2)}, {}, options), Error);
}

}  // namespace
}  // namespace anvil
