// Graph passes: each test builds a small graph, optimizes it, and checks both
// the rewritten graph and the values it computes (hand-computed).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>

#include "anvil/session.h"
#include "ir/builder.h"
#include "kernel_tester.h"
#include "ir/schema.h"
#include "passes/pipeline.h"
#include "runtime/constant_evaluator.h"

namespace anvil {
namespace {

// Live nodes only: a pass marks what it replaces dead (a fused node left dead
// must not count as fused).
size_t count_ops(const ir::Graph& g, const std::string& op) { return testing::count_live_ops(g, op); }

Tensor ints(Shape shape, std::vector<int64_t> v) {
  Tensor t(DType::kInt64, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

// x -> Shape -> Gather(0) -> Unsqueeze -> Concat([-1]) -> Reshape(x): the
// batch-preserving flatten PyTorch exports.
std::unique_ptr<ir::Graph> dynamic_flatten() {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 3, 4});
  ir::Value* shape = g->add_node("Shape", {x}, 1)->output(0);
  ir::Node* gather = g->add_node("Gather", {shape, g->add_constant("zero", ints({}, {0}))}, 1);
  ir::Value* batch = g->add_node("Unsqueeze", {gather->output(0), g->add_constant("axes", ints({1}, {0}))}, 1)->output(0);
  ir::Node* concat = g->add_node("Concat", {batch, g->add_constant("minus1", ints({1}, {-1}))}, 1);
  concat->attrs.set("axis", int64_t{0});
  ir::Node* reshape = g->add_node("Reshape", {x, concat->output(0)}, 1);
  g->add_output(reshape->output(0));
  return g;
}

TEST(Passes, ShapeArithmeticIsFoldedAtPlanTime) {
  Session s = Session::from_graph(dynamic_flatten());
  Tensor x(DType::kFloat32, {2, 3, 4});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i);
  std::map<std::string, Tensor> in = {{"x", x}};
  std::vector<Tensor> out = s.run(in);
  ASSERT_EQ(out[0].shape(), (Shape{2, 12}));
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(out[0].data<float>()[i], static_cast<float>(i));
  EXPECT_EQ(s.plan_stats(in).num_steps, 1u);  // only the Reshape runs
}

TEST(Passes, ConstantSubgraphsFoldIntoOneValue) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kInt64, {2});
  ir::Value* a = g->add_constant("a", ints({2}, {3, 4}));
  ir::Value* b = g->add_constant("b", ints({2}, {10, 20}));
  ir::Value* ab = g->add_node("Mul", {a, b}, 1)->output(0);           // [30, 80], constant
  g->add_output(g->add_node("Add", {x, ab}, 1)->output(0));
  passes::optimize(*g, 1, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "Mul"), 0u);
  EXPECT_EQ(count_ops(*g, "Add"), 1u);
  const ir::Value* folded = g->nodes()[0]->input(1);
  ASSERT_TRUE(folded->is_constant());
  EXPECT_EQ(folded->constant->data<int64_t>()[0], 30);
  EXPECT_EQ(folded->constant->data<int64_t>()[1], 80);
}

TEST(Passes, IdentityAndDeadNodesAreRemoved) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {4});
  ir::Value* id = g->add_node("Identity", {x}, 1)->output(0);
  g->add_node("Exp", {x}, 1);  // nobody reads it
  ir::Node* relu = g->add_node("Relu", {id}, 1, "relu");
  g->add_output(relu->output(0));
  passes::optimize(*g, 1, runtime::reference_evaluator());
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0]->op_type, "Relu");
  EXPECT_EQ(g->nodes()[0]->input(0), x);
}

// A Cast to the type its input has is an identity (Hugging Face's GPT-2
// casts its float32 scores to float32); a Cast that converts stays.
TEST(Passes, CastsToTheSameTypeAreRemoved) {
  for (DType to : {DType::kFloat32, DType::kFloat64}) {
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 13;
    ir::Node* cast = g->add_node("Cast", {g->add_input("x", DType::kFloat32, {4})}, 1);
    cast->attrs.set("to", int64_t{to == DType::kFloat32 ? 1 : 11});
    g->add_output(g->add_node("Relu", {cast->output(0)}, 1)->output(0));
    ir::infer_types(*g);
    passes::optimize(*g, 1, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "Cast"), to == DType::kFloat32 ? 0u : 1u) << dtype_name(to);
  }
}

// Shapes read before the shuffles that only move data: Shape(Transpose(x,
// perm)) as Shape(x) gathered at perm, where only Shapes read the Transpose,
// and Shape(Reshape(x, target)) as the target, where the target neither
// copies (0) nor infers (-1) a dim. The shuffles then die; the lengths are
// the same (by hand, at batch 2).
TEST(Passes, ShapesAreReadBeforeShuffles) {
  auto make = [](bool transpose_read_by_relu, int64_t second_dim) {
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 13;
    ir::Value* x = g->add_input("x", DType::kFloat32, {});
    x->type = ir::Type::tensor(DType::kFloat32, ir::SymShape{ir::Dim::named("batch"), ir::Dim::known(3), ir::Dim::known(4)});
    ir::Node* t = g->add_node("Transpose", {x}, 1);
    t->attrs.set("perm", std::vector<int64_t>{2, 0, 1});
    g->add_output(g->add_node("Shape", {t->output(0)}, 1, "transposed")->output(0));
    if (transpose_read_by_relu) g->add_output(g->add_node("Relu", {t->output(0)}, 1)->output(0));
    ir::Value* batch = g->add_node("Gather", {g->add_node("Shape", {x}, 1)->output(0), g->add_constant("zero", ints({1}, {0}))}, 1)->output(0);
    ir::Node* target = g->add_node("Concat", {batch, g->add_constant("rest", ints({1}, {second_dim}))}, 1);
    target->attrs.set("axis", int64_t{0});
    ir::Value* r = g->add_node("Reshape", {x, target->output(0)}, 1)->output(0);
    ir::Node* dims = g->add_node("Concat", {g->add_node("Shape", {r}, 1, "reshaped")->output(0), g->add_constant("seven", ints({1}, {7}))}, 1);
    dims->attrs.set("axis", int64_t{0});
    g->add_output(dims->output(0));
    ir::infer_types(*g);
    return g;
  };
  // Reshape(x [3, n], [n, n]) at n = 0: the 0s copy x's dims, [3, 0], not [0, 0].
  {
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 13;
    ir::Value* x = g->add_input("x", DType::kFloat32, {});
    x->type = ir::Type::tensor(DType::kFloat32, ir::SymShape{ir::Dim::known(3), ir::Dim::named("n")});
    ir::Value* n = g->add_node("Gather", {g->add_node("Shape", {x}, 1)->output(0), g->add_constant("at1", ints({1}, {1}))}, 1)->output(0);
    ir::Node* target = g->add_node("Concat", {n, n}, 1);
    target->attrs.set("axis", int64_t{0});
    ir::Value* r = g->add_node("Reshape", {x, target->output(0)}, 1)->output(0);
    ir::Node* dims = g->add_node("Concat", {g->add_node("Shape", {r}, 1)->output(0), g->add_constant("nine", ints({1}, {9}))}, 1);
    dims->attrs.set("axis", int64_t{0});
    g->add_output(dims->output(0));
    ir::infer_types(*g);
    Session s = Session::from_graph(std::move(g));
    EXPECT_EQ(testing::values<int64_t>(s.run({{"x", Tensor(DType::kFloat32, {3, 0})}})[0]), (std::vector<int64_t>{3, 0, 9}));
  }
  for (auto [relu, second] : {std::pair{false, int64_t{12}}, std::pair{true, int64_t{-1}}}) {
    SCOPED_TRACE(relu ? "the Transpose read by a Relu, the Reshape inferring a dim" : "only Shapes read the shuffles");
    auto g = make(relu, second);
    passes::optimize(*g, 1, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "Transpose"), relu ? 1u : 0u);
    EXPECT_EQ(count_ops(*g, "Reshape"), relu ? 1u : 0u);
    Session s = Session::from_graph(make(relu, second));
    const std::vector<Tensor> out = s.run({{"x", Tensor(DType::kFloat32, {2, 3, 4})}});
    EXPECT_EQ(testing::values<int64_t>(out[0]), (std::vector<int64_t>{4, 2, 3}));
    EXPECT_EQ(testing::values<int64_t>(out.back()), (std::vector<int64_t>{2, 12, 7}));
  }
}

// Dropout is an identity in inference mode and, with a ratio of 0, in
// training mode too (torchvision's Swin exports it so); with a ratio above
// 0 in training mode it stays.
TEST(Passes, DropoutsThatKeepEveryElementAreRemoved) {
  for (float ratio : {0.f, 0.1f}) {
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 13;
    ir::Value* x = g->add_input("x", DType::kFloat32, {4});
    Tensor training(DType::kBool, {});
    *training.data<bool>() = true;
    ir::Node* dropout =
        g->add_node("Dropout", {x, g->add_constant("ratio", testing::scalar_f32(ratio)), g->add_constant("training", training)}, 2);
    g->add_output(g->add_node("Relu", {dropout->output(0)}, 1)->output(0));
    passes::optimize(*g, 1, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "Dropout"), ratio == 0.f ? 0u : 1u) << ratio;
  }
  // Its mask read: it stays.
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Node* dropout = g->add_node("Dropout", {g->add_input("x", DType::kFloat32, {4}),
                                              g->add_constant("ratio", testing::scalar_f32(0.f))}, 2);
  g->add_output(dropout->output(0));
  g->add_output(dropout->output(1));
  passes::optimize(*g, 1, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "Dropout"), 1u);
}

TEST(Passes, ConvBatchNormFoldsIntoWeights) {
  // 1x1 conv, one channel, weight 2, bias 1; BN gamma 3, beta 0.5, mean 1, var 3 (eps 1):
  // y = 3 * ((2x + 1) - 1) / sqrt(3 + 1) + 0.5 = 3x + 0.5.
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  auto scalar = [&](const char* name, float v, Shape shape) {
    Tensor t(DType::kFloat32, std::move(shape));
    t.data<float>()[0] = v;
    return g->add_constant(name, t);
  };
  ir::Value* x = g->add_input("x", DType::kFloat32, {1, 1, 2, 2});
  ir::Node* conv = g->add_node("Conv", {x, scalar("w", 2.f, {1, 1, 1, 1}), scalar("b", 1.f, {1})}, 1);
  ir::Node* bn = g->add_node("BatchNormalization", {conv->output(0), scalar("gamma", 3.f, {1}), scalar("beta", 0.5f, {1}),
                                                    scalar("mean", 1.f, {1}), scalar("var", 3.f, {1})}, 1);
  bn->attrs.set("epsilon", 1.f);
  g->add_output(bn->output(0));
  Session s = Session::from_graph(std::move(g));
  Tensor in(DType::kFloat32, {1, 1, 2, 2});
  const float xs[4] = {0.f, 1.f, -2.f, 4.f};
  for (int i = 0; i < 4; ++i) in.data<float>()[i] = xs[i];
  Tensor y = s.run({{"x", in}})[0];
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y.data<float>()[i], 3.f * xs[i] + 0.5f, 1e-5f);
  PlanStats stats = s.plan_stats({{"x", in}});
  EXPECT_EQ(stats.num_steps - stats.reorders, 1u);  // one conv (and the layout reorders it asks for)
}

ir::Value* scalar_f32(ir::Graph& g, const std::string& name, float v) {
  Tensor t(DType::kFloat32, {});
  *t.data<float>() = v;
  return g.add_constant(name, t);
}

Tensor ramp(Shape shape, float start, float step) {
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + step * static_cast<float>(i);
  return t;
}

// Pads of zero (torchvision's DenseNet exports one before each transition's
// AveragePool) leave the data as it is: removed, at opset 11+ (pads an input)
// and before (an attribute). Pads that add anything stay.
TEST(Passes, PadsOfZeroAreRemoved) {
  for (int opset : {13, 2})
    for (int64_t pad : {0, 1}) {
      auto g = std::make_unique<ir::Graph>();
      g->opsets[""] = opset;
      ir::Value* x = g->add_input("x", DType::kFloat32, {1, 2, 3, 3});
      const std::vector<int64_t> pads = {0, 0, pad, 0, 0, 0, 0, pad};
      ir::Node* p = opset >= 11 ? g->add_node("Pad", {x, g->add_constant("pads", ints({8}, pads))}, 1)
                                : g->add_node("Pad", {x}, 1);
      if (opset < 11) p->attrs.set("pads", pads);
      g->add_output(g->add_node("Relu", {p->output(0)}, 1)->output(0));
      passes::optimize(*g, 1, runtime::reference_evaluator());
      EXPECT_EQ(count_ops(*g, "Pad"), pad ? 1u : 0u) << "opset " << opset << ", pad " << pad;
    }
  // Zeros, but not two per axis: an invalid Pad stays, for its kernel to reject.
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {1, 2, 3, 3});
  g->add_output(g->add_node("Pad", {x, g->add_constant("pads", ints({6}, {0, 0, 0, 0, 0, 0}))}, 1)->output(0));
  passes::optimize(*g, 1, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "Pad"), 1u);
}

// [1, 4, 2, 2] by channel: 16 values around 0 so that the ReLU clips some.
struct BatchNormGraph {
  Tensor gamma = testing::f32({4}, {1.f, -2.f, 0.5f, 3.f}), beta = testing::f32({4}, {0.5f, 0.f, -1.f, 0.25f});
  Tensor mean = testing::f32({4}, {0.f, 1.f, -1.f, 2.f}), var = testing::f32({4}, {1.f, 4.f, 0.25f, 9.f});
  std::unique_ptr<ir::Graph> make(const char* activation, bool bn_is_output, int64_t training_mode = 0) const {
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 15;
    ir::Value* a = g->add_input("a", DType::kFloat32, {1, 2, 2, 2});
    ir::Value* b = g->add_input("b", DType::kFloat32, {1, 2, 2, 2});
    ir::Node* cat = g->add_node("Concat", {a, b}, 1, "cat");  // a BN no convolution can take
    cat->attrs.set("axis", int64_t{1});
    ir::Node* bn = g->add_node("BatchNormalization",
                               {cat->output(0), g->add_constant("gamma", gamma), g->add_constant("beta", beta),
                                g->add_constant("mean", mean), g->add_constant("var", var)},
                               1, "bn");
    bn->attrs.set("epsilon", 0.f);
    if (training_mode) bn->attrs.set("training_mode", training_mode);
    ir::Node* act = g->add_node(activation, {bn->output(0)}, 1, "act");
    g->add_output(act->output(0));
    if (bn_is_output) g->add_output(bn->output(0));
    return g;
  }
  // The normalized value of channel c, rectified.
  float expected(float x, int64_t c) const {
    const double y = (x - mean.data<float>()[c]) / std::sqrt(double(var.data<float>()[c])) * gamma.data<float>()[c] +
                     beta.data<float>()[c];
    return static_cast<float>(std::max(y, 0.0));
  }
};

// BatchNormalization -> Relu where no convolution takes the BN (after a
// Concat, as in DenseNet) becomes one anvil.FusedBatchNorm; values by hand.
TEST(Passes, BatchNormThenReluBecomesOneFusedBatchNorm) {
  const BatchNormGraph bg;
  auto g = bg.make("Relu", false);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "BatchNormalization"), 0u);
  EXPECT_EQ(count_ops(*g, "Relu"), 0u);
  EXPECT_EQ(count_ops(*g, "FusedBatchNorm"), 1u);
  Session s = Session::from_graph(bg.make("Relu", false));
  const Tensor a = ramp({1, 2, 2, 2}, -2.f, 0.5f), b = ramp({1, 2, 2, 2}, 3.f, -0.75f);
  const Tensor y = s.run({{"a", a}, {"b", b}})[0];
  ASSERT_EQ(y.shape(), (Shape{1, 4, 2, 2}));
  for (int64_t i = 0; i < 16; ++i) {
    const float x = i < 8 ? a.data<float>()[i] : b.data<float>()[i - 8];
    EXPECT_NEAR(y.data<float>()[i], bg.expected(x, i / 4), 1e-5f) << i;
  }
}

// Left alone: a BN whose output is read elsewhere too (a graph output), one
// followed by another activation, and one in training mode.
TEST(Passes, BatchNormLookalikesKeepTheirRelu) {
  const BatchNormGraph bg;
  for (const auto& [activation, bn_is_output, training_mode] :
       {std::tuple{"Relu", true, int64_t{0}}, std::tuple{"LeakyRelu", false, int64_t{0}},
        std::tuple{"Relu", false, int64_t{1}}}) {
    auto g = bg.make(activation, bn_is_output, training_mode);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "FusedBatchNorm"), 0u) << activation << " " << bn_is_output << " " << training_mode;
    EXPECT_EQ(count_ops(*g, "BatchNormalization"), 1u);
  }
}

// ShuffleNet's channel shuffle as PyTorch exports it: x [2, 6, 2, 3] ->
// Reshape [2, g, 6/g, 2, 3] -> Transpose(0, 2, 1, 3, 4) -> Reshape [2, 6, 2, 3].
std::unique_ptr<ir::Graph> channel_shuffle_graph(int64_t groups, std::vector<int64_t> perm = {0, 2, 1, 3, 4},
                                                 std::vector<int64_t> merged = {2, 6, 2, 3}, bool split_is_output = false) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 6, 2, 3});
  ir::Node* split = g->add_node("Reshape", {x, g->add_constant("split", ints({5}, {2, groups, 6 / groups, 2, 3}))}, 1);
  ir::Node* t = g->add_node("Transpose", {split->output(0)}, 1);
  t->attrs.set("perm", perm);
  ir::Node* merge = g->add_node("Reshape", {t->output(0), g->add_constant("merged", ints({4}, merged))}, 1);
  g->add_output(merge->output(0));
  if (split_is_output) g->add_output(split->output(0));
  return g;
}

TEST(Passes, ReshapeTransposeReshapeBecomesOneChannelShuffle) {
  for (int64_t groups : {2, 3}) {
    auto g = channel_shuffle_graph(groups);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "ChannelShuffle"), 1u) << groups;
    EXPECT_EQ(count_ops(*g, "Transpose") + count_ops(*g, "Reshape"), 0u) << groups;
    Session s = Session::from_graph(channel_shuffle_graph(groups));
    const Tensor x = ramp({2, 6, 2, 3}, 0.f, 1.f);
    const Tensor y = s.run({{"x", x}})[0];
    ASSERT_EQ(y.shape(), (Shape{2, 6, 2, 3}));
    const int64_t per_group = 6 / groups;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 6; ++c)  // output channel c = j * groups + i reads input channel i * per_group + j
        for (int64_t p = 0; p < 6; ++p) {
          const int64_t from = c % groups * per_group + c / groups;
          EXPECT_EQ(y.data<float>()[(n * 6 + c) * 6 + p], x.data<float>()[(n * 6 + from) * 6 + p]) << groups << " " << c;
        }
  }
}

// Left alone: another permutation, a merge into another shape, a split read elsewhere too.
TEST(Passes, ChannelShuffleLookalikesStay) {
  std::vector<std::unique_ptr<ir::Graph>> graphs;
  graphs.push_back(channel_shuffle_graph(2, {0, 2, 1, 4, 3}));
  graphs.push_back(channel_shuffle_graph(2, {0, 2, 1, 3, 4}, {2, 6, 3, 2}));
  graphs.push_back(channel_shuffle_graph(2, {0, 2, 1, 3, 4}, {2, 6, 2, 3}, true));
  for (auto& g : graphs) {
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "ChannelShuffle"), 0u);
  }
}

// A split whose declared dims multiply past int64 (a hostile file's value_info:
// (2^62 + 1) x 4 wraps around to x's 4 channels) is no channel shuffle.
TEST(Passes, ChannelShuffleOfDimsPastInt64Stays) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 4, 2, 3});
  ir::Node* split = g->add_node("Reshape", {x, g->add_input("split_shape", DType::kInt64, {5})}, 1);
  split->output(0)->type = ir::Type::tensor(
      DType::kFloat32, ir::SymShape{ir::Dim::known(2), ir::Dim::known((int64_t{1} << 62) + 1), ir::Dim::known(4),
                                    ir::Dim::known(2), ir::Dim::known(3)});
  ir::Node* t = g->add_node("Transpose", {split->output(0)}, 1);
  t->attrs.set("perm", std::vector<int64_t>{0, 2, 1, 3, 4});
  g->add_output(g->add_node("Reshape", {t->output(0), g->add_constant("merged", ints({4}, {2, 4, 2, 3}))}, 1)->output(0));
  ir::infer_types(*g);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "ChannelShuffle"), 0u);
}

// x [1, 2, 4, 5] -> Pad (opset 13: pads an input) -> `reader` (a 3x3 Conv of
// 2 into 3 channels, or a 3x3 AveragePool), each with its `own` pads.
struct PadGraph {
  const char* reader = "Conv";
  std::vector<int64_t> pads = {0, 0, 1, 2, 0, 0, 1, 0};
  std::vector<int64_t> own = {0, 0, 0, 0};
  std::string mode = "constant";
  float value = 0.f;
  int64_t count_include_pad = 0, ceil_mode = 0;
  bool pad_is_output = false;
  Tensor w = testing::random_f32({3, 2, 3, 3}, 41);

  std::unique_ptr<ir::Graph> make() const {
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 13;
    ir::Value* x = g->add_input("x", DType::kFloat32, {1, 2, 4, 5});
    ir::Node* pad = g->add_node("Pad", {x, g->add_constant("pads", ints({8}, pads)),
                                        g->add_constant("value", testing::scalar_f32(value))}, 1, "pad");
    pad->attrs.set("mode", mode);
    ir::Node* r = std::string(reader) == "Conv" ? g->add_node("Conv", {pad->output(0), g->add_constant("w", w)}, 1, "r")
                                                : g->add_node(reader, {pad->output(0)}, 1, "r");
    r->attrs.set("kernel_shape", std::vector<int64_t>{3, 3});
    r->attrs.set("pads", own);
    if (std::string(reader) == "AveragePool") {
      r->attrs.set("count_include_pad", count_include_pad);
      r->attrs.set("ceil_mode", ceil_mode);
    }
    g->add_output(r->output(0));
    if (pad_is_output) g->add_output(pad->output(0));
    return g;
  }
};

// The zero-padded x of the graph, by hand.
Tensor zero_padded(const Tensor& x, const std::vector<int64_t>& pads) {
  const int64_t h = 4 + pads[2] + pads[6], w = 5 + pads[3] + pads[7];
  Tensor y(DType::kFloat32, {1, 2, h, w});
  std::fill_n(y.data<float>(), y.numel(), 0.f);
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 5; ++j)
        y.data<float>()[(c * h + i + pads[2]) * w + j + pads[3]] = x.data<float>()[(c * 4 + i) * 5 + j];
  return y;
}

// A Pad of zeros on the spatial axes becomes the Conv's or the AveragePool's
// own padding (the pool then counts the padding in its divisor, as after the
// Pad): values by hand.
TEST(Passes, PadsOfZerosFoldIntoConvAndAveragePool) {
  const Tensor x = ramp({1, 2, 4, 5}, -1.f, 0.1f);
  for (const char* reader : {"Conv", "AveragePool"}) {
    PadGraph pg;
    pg.reader = reader;
    auto g = pg.make();
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "Pad"), 0u) << reader;
    Session s = Session::from_graph(pg.make());
    const Tensor y = s.run({{"x", x}})[0];
    const Tensor padded = zero_padded(x, pg.pads);
    if (std::string(reader) == "Conv") {
      const Tensor want = testing::conv2d_by_hand(padded, pg.w, nullptr, {});
      ASSERT_EQ(y.shape(), want.shape());
      for (int64_t i = 0; i < y.numel(); ++i) EXPECT_NEAR(y.data<float>()[i], want.data<float>()[i], 1e-4f) << i;
      continue;
    }
    const int64_t h = padded.shape()[2], w = padded.shape()[3];
    ASSERT_EQ(y.shape(), (Shape{1, 2, h - 2, w - 2}));
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t i = 0; i + 2 < h; ++i)
        for (int64_t j = 0; j + 2 < w; ++j) {
          double sum = 0;
          for (int64_t di = 0; di < 3; ++di)
            for (int64_t dj = 0; dj < 3; ++dj) sum += padded.data<float>()[(c * h + i + di) * w + j + dj];
          EXPECT_NEAR(y.data<float>()[(c * (h - 2) + i) * (w - 2) + j], sum / 9, 1e-5) << c << " " << i << " " << j;
        }
  }
}

// Left alone: a Pad of the channels, of another mode or value, read
// elsewhere too; a pool that would count only some padding, or rounds up.
TEST(Passes, PadLookalikesStay) {
  std::vector<PadGraph> cases(6);
  cases[0].pads = {0, 1, 1, 1, 0, 0, 1, 1};
  cases[1].mode = "reflect";
  cases[2].value = 1.f;
  cases[3].pad_is_output = true;
  cases[4].reader = cases[5].reader = "AveragePool";
  cases[4].own = {1, 1, 1, 1};  // its own padding left out of the divisor
  cases[5].ceil_mode = 1;
  for (size_t i = 0; i < cases.size(); ++i) {
    auto g = cases[i].make();
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "Pad"), 1u) << "case " << i;
  }
}

ir::Value* mul(ir::Graph& g, ir::Value* a, ir::Value* b) { return g.add_node("Mul", {a, b}, 1)->output(0); }

// torch.nn.MultiheadAttention's export (sequence first, heads in the batch):
// Q, K, V [5, batch, 8] -> Reshape [5, batch * 2, 4] -> Transpose (K: 1, 2, 0;
// Q and V: 1, 0, 2), Q scaled by `scale_op` (Div by 2, Mul by 0.5, none),
// Softmax(Q K^T) V -> Transpose(1, 0, 2) -> Reshape [5 * batch, 8].
// With `packed`, Q, K and V are the Slices [0, 8), [8, 16), [16, 24) of
// one input "qkv" [5, batch, 24] (in_proj's export; `slice_starts` moves
// them); batch 0 is a symbol, "batch".
struct SequenceFirstAttention {
  int64_t batch = 1;
  const char* scale_op = "Div";
  bool scale_per_dim = false;  // Q divided by a [4] tensor, not a scalar
  float divisor = 2.f;
  bool softmax_is_output = false;
  std::vector<int64_t> merged = {5, 8};  // the final Reshape's target ({0, -1}: S copied from its input)
  bool packed = false;
  std::vector<int64_t> slice_starts = {0, 8, 16};
  int64_t slice_step = 1;

  std::unique_ptr<ir::Graph> make() const {
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 13;
    auto input = [&](const char* name, int64_t width) {
      ir::Value* x = g->add_input(name, DType::kFloat32, {5, std::max<int64_t>(batch, 1), width});
      if (batch == 0) x->type = ir::Type::tensor(DType::kFloat32, {ir::Dim::known(5), ir::Dim::named("batch"), ir::Dim::known(width)});
      return x;
    };
    ir::Value* qkv = packed ? input("qkv", 24) : nullptr;
    int part = 0;
    auto heads = [&](const char* name, std::vector<int64_t> perm) {
      ir::Value* x;
      if (packed) {
        const int64_t start = slice_starts[part++];
        x = g->add_node("Slice", {qkv, g->add_constant(std::string(name) + "_start", ints({1}, {start})),
                                  g->add_constant(std::string(name) + "_end", ints({1}, {start + 8})),
                                  g->add_constant(std::string(name) + "_axis", ints({1}, {2})),
                                  g->add_constant(std::string(name) + "_step", ints({1}, {slice_step}))}, 1)->output(0);
      } else {
        x = input(name, 8);
      }
      const int64_t folded = batch == 0 ? -1 : batch * 2;
      ir::Node* r = g->add_node("Reshape", {x, g->add_constant(std::string(name) + "_split", ints({3}, {5, folded, 4}))}, 1);
      ir::Node* t = g->add_node("Transpose", {r->output(0)}, 1);
      t->attrs.set("perm", perm);
      return t->output(0);
    };
    ir::Value* q = heads("q", {1, 0, 2});
    if (std::string(scale_op) == "Div")
      q = g->add_node("Div", {q, scale_per_dim ? g->add_constant("twos", testing::f32({4}, {2, 2, 2, 2}))
                                               : scalar_f32(*g, "two", divisor)}, 1)->output(0);
    if (std::string(scale_op) == "Mul") q = mul(*g, q, scalar_f32(*g, "half", 0.5f));
    ir::Value* scores = g->add_node("MatMul", {q, heads("k", {1, 2, 0})}, 1)->output(0);
    ir::Node* softmax = g->add_node("Softmax", {scores}, 1, "softmax");
    softmax->attrs.set("axis", int64_t{-1});
    ir::Value* pv = g->add_node("MatMul", {softmax->output(0), heads("v", {1, 0, 2})}, 1)->output(0);
    ir::Node* t = g->add_node("Transpose", {pv}, 1);
    t->attrs.set("perm", std::vector<int64_t>{1, 0, 2});
    std::vector<int64_t> target = merged;
    if (target[0] == 5) target[0] = batch == 0 ? -1 : 5 * batch;
    g->add_output(g->add_node("Reshape", {t->output(0), g->add_constant("merged", ints({2}, target))}, 1)->output(0));
    if (softmax_is_output) g->add_output(softmax->output(0));
    return g;
  }
};

// It becomes one Attention: values by hand, each head's softmax(q k^T * s) v
// in double (s = 1/2 for the Div and the Mul, 1 without a scale).
TEST(Passes, SequenceFirstAttentionBecomesOneAttention) {
  const Tensor q = ramp({5, 1, 8}, -1.f, 0.05f), k = ramp({5, 1, 8}, 0.7f, -0.04f), v = ramp({5, 1, 8}, -0.3f, 0.03f);
  for (const char* scale_op : {"Div", "Mul", "None", "Div, target [0, -1]"}) {
    SequenceFirstAttention a;
    a.scale_op = std::string(scale_op).rfind("Div", 0) == 0 ? "Div" : scale_op;
    if (std::string(scale_op) != a.scale_op) a.merged = {0, -1};  // 0 copies S from the Reshape's input
    auto g = a.make();
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "Attention"), 1u) << scale_op;
    EXPECT_EQ(count_ops(*g, "Softmax") + count_ops(*g, "MatMul") + count_ops(*g, "Transpose"), 0u) << scale_op;
    Session s = Session::from_graph(a.make());
    const Tensor y = s.run({{"q", q}, {"k", k}, {"v", v}})[0];
    ASSERT_EQ(y.shape(), (Shape{5, 8}));
    const double scale = std::string(scale_op) == "None" ? 1.0 : 0.5;
    const auto at = [](const Tensor& t, int64_t s, int64_t h, int64_t d) { return double(t.data<float>()[s * 8 + h * 4 + d]); };
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 5; ++i) {
        double w[5], sum = 0;
        for (int64_t j = 0; j < 5; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < 4; ++d) dot += at(q, i, h, d) * at(k, j, h, d);
          w[j] = std::exp(dot * scale);
          sum += w[j];
        }
        for (int64_t d = 0; d < 4; ++d) {
          double want = 0;
          for (int64_t j = 0; j < 5; ++j) want += w[j] / sum * at(v, j, h, d);
          EXPECT_NEAR(y.data<float>()[i * 8 + h * 4 + d], want, 1e-5) << scale_op << " head " << h << " row " << i;
        }
      }
  }
}

// One head, Q of a batch of 1 and K, V of 2: MatMul broadcasts Q over K's
// batch, which Attention over [1, S, E] would not; left alone, and the
// values are the broadcast's (by hand).
TEST(Passes, SequenceFirstAttentionWithQBroadcastStays) {
  auto make = [] {
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 13;
    auto heads = [&](const char* name, int64_t batch, std::vector<int64_t> perm) {
      ir::Value* x = g->add_input(name, DType::kFloat32, {5, batch, 8});
      ir::Node* r = g->add_node("Reshape", {x, g->add_constant(std::string(name) + "_split", ints({3}, {5, batch, 8}))}, 1);
      ir::Node* t = g->add_node("Transpose", {r->output(0)}, 1);
      t->attrs.set("perm", perm);
      return t->output(0);
    };
    ir::Value* q = heads("q", 1, {1, 0, 2});
    ir::Node* softmax = g->add_node("Softmax", {g->add_node("MatMul", {q, heads("k", 2, {1, 2, 0})}, 1)->output(0)}, 1);
    softmax->attrs.set("axis", int64_t{-1});
    ir::Value* pv = g->add_node("MatMul", {softmax->output(0), heads("v", 2, {1, 0, 2})}, 1)->output(0);
    ir::Node* t = g->add_node("Transpose", {pv}, 1);
    t->attrs.set("perm", std::vector<int64_t>{1, 0, 2});
    g->add_output(g->add_node("Reshape", {t->output(0), g->add_constant("merged", ints({2}, {10, 8}))}, 1)->output(0));
    return g;
  };
  auto g = make();
  passes::optimize(*g, 3, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "Attention") + count_ops(*g, "QkvAttention"), 0u);
  const Tensor q = ramp({5, 1, 8}, -1.f, 0.05f), k = ramp({5, 2, 8}, 0.7f, -0.02f), v = ramp({5, 2, 8}, -0.3f, 0.01f);
  Session s = Session::from_graph(make());
  const Tensor y = s.run({{"q", q}, {"k", k}, {"v", v}})[0];
  ASSERT_EQ(y.shape(), (Shape{10, 8}));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 5; ++i) {
      double w[5], sum = 0;
      for (int64_t j = 0; j < 5; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < 8; ++d) dot += double(q.data<float>()[i * 8 + d]) * k.data<float>()[(j * 2 + b) * 8 + d];
        sum += w[j] = std::exp(dot);
      }
      for (int64_t d = 0; d < 8; ++d) {
        double want = 0;
        for (int64_t j = 0; j < 5; ++j) want += w[j] / sum * v.data<float>()[(j * 2 + b) * 8 + d];
        EXPECT_NEAR(y.data<float>()[(i * 2 + b) * 8 + d], want, 1e-5) << "item " << b << " row " << i;
      }
    }
}

// Q, K and V sliced from one projection become one QkvAttention reading it
// sequence first, at any batch (3, 1, and a symbol run at 3): values by
// hand, as above, for item b of the batch. The merge's 0 copies S.
TEST(Passes, PackedSequenceFirstAttentionBecomesOneQkvAttention) {
  for (int64_t batch : {3, 1, 0}) {
    SequenceFirstAttention a;
    a.packed = true;
    a.batch = batch;
    if (batch == 1) a.merged = {0, -1};
    auto g = a.make();
    passes::optimize(*g, 3, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "QkvAttention"), 1u) << "batch " << batch;
    EXPECT_EQ(count_ops(*g, "Slice") + count_ops(*g, "Softmax") + count_ops(*g, "MatMul") + count_ops(*g, "Transpose"), 0u);
    const int64_t n = batch == 0 ? 3 : batch;
    const Tensor qkv = ramp({5, n, 24}, -1.f, 0.013f);
    Session s = Session::from_graph(a.make());
    const Tensor y = s.run({{"qkv", qkv}})[0];
    ASSERT_EQ(y.shape(), (Shape{batch == 1 ? 5 : 5 * n, 8})) << "batch " << batch;
    // Q's, K's or V's element (s, b, h, d): columns 0, 8 and 16 on.
    const auto at = [&](int part, int64_t t, int64_t b, int64_t h, int64_t d) {
      return double(qkv.data<float>()[(t * n + b) * 24 + part * 8 + h * 4 + d]);
    };
    for (int64_t b = 0; b < n; ++b)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t i = 0; i < 5; ++i) {
          double w[5], sum = 0;
          for (int64_t j = 0; j < 5; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < 4; ++d) dot += at(0, i, b, h, d) * at(1, j, b, h, d);
            w[j] = std::exp(dot * 0.5);
            sum += w[j];
          }
          for (int64_t d = 0; d < 4; ++d) {
            double want = 0;
            for (int64_t j = 0; j < 5; ++j) want += w[j] / sum * at(2, j, b, h, d);
            EXPECT_NEAR(y.data<float>()[(i * n + b) * 8 + h * 4 + d], want, 1e-5)
                << "batch " << batch << " item " << b << " head " << h << " row " << i;
          }
        }
  }
}

// Left alone: a batch of two with Q, K and V separate inputs (its heads
// interleave with the batch, and no one input holds them), Q scaled by a
// tensor rather than a scalar, the attention weights read elsewhere too, a
// negative scale; packed parts out of Q, K, V order, overlapping, or
// strided.
TEST(Passes, SequenceFirstAttentionLookalikesStay) {
  std::vector<SequenceFirstAttention> cases(7);
  cases[0].batch = 2;
  cases[1].scale_per_dim = true;
  cases[3].divisor = -2.f;  // Attention's reference takes the scale's square root
  cases[2].softmax_is_output = true;
  for (size_t i = 4; i < 7; ++i) {
    cases[i].packed = true;
    cases[i].batch = 2;
  }
  cases[4].slice_starts = {8, 0, 16};
  cases[5].slice_starts = {0, 8, 8};
  cases[6].slice_step = 2;
  for (size_t i = 0; i < cases.size(); ++i) {
    auto g = cases[i].make();
    passes::optimize(*g, 3, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "Attention") + count_ops(*g, "QkvAttention"), 0u) << "case " << i;
  }
}


// GELU as PyTorch exports it: x * (1 + erf(x / sqrt(2))) * 0.5, with `one` in place of the 1.
std::unique_ptr<ir::Graph> gelu_erf_graph(float one = 1.f, bool erf_is_output = false) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 5});
  ir::Value* scaled = g->add_node("Div", {x, scalar_f32(*g, "sqrt2", 1.4142135f)}, 1)->output(0);
  ir::Value* erf = g->add_node("Erf", {scaled}, 1)->output(0);
  ir::Value* sum = g->add_node("Add", {erf, scalar_f32(*g, "one", one)}, 1)->output(0);
  g->add_output(mul(*g, mul(*g, x, sum), scalar_f32(*g, "half", 0.5f)));
  if (erf_is_output) g->add_output(erf);
  return g;
}

// The tanh form: (0.5 * x) * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x * (x * x)))).
std::unique_ptr<ir::Graph> gelu_tanh_graph() {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 5});
  ir::Value* cube = mul(*g, x, mul(*g, x, x));
  ir::Value* inner = g->add_node("Add", {x, mul(*g, scalar_f32(*g, "c", 0.044715f), cube)}, 1)->output(0);
  ir::Value* t = g->add_node("Tanh", {mul(*g, inner, scalar_f32(*g, "k", 0.7978845608f))}, 1)->output(0);
  ir::Value* sum = g->add_node("Add", {t, scalar_f32(*g, "one", 1.f)}, 1)->output(0);
  g->add_output(mul(*g, mul(*g, x, scalar_f32(*g, "half", 0.5f)), sum));
  return g;
}

// BLOOM's tanh form, its argument factored: x * 0.5 * (1 + tanh(0.79788456 * x
// * (1 + 0.044715 * x * x))), in PyTorch's order of operations, or with the
// square first ((x * x) * 0.044715). The square's coefficient is `c`
// (0.044715 is GELU's; another is a lookalike); `square_is_output` makes
// the scaled square a graph output too (read twice: a lookalike).
std::unique_ptr<ir::Graph> gelu_tanh_factored_graph(float c = 0.044715f, bool square_first = false,
                                                    bool square_is_output = false) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 5});
  ir::Value* half_x = mul(*g, x, scalar_f32(*g, "half", 0.5f));
  ir::Value* scaled_x = mul(*g, scalar_f32(*g, "k", 0.79788456f), x);
  ir::Value* square = square_first ? mul(*g, mul(*g, x, x), scalar_f32(*g, "c", c))
                                   : mul(*g, mul(*g, scalar_f32(*g, "c", c), x), x);
  if (square_is_output) g->add_output(square);
  ir::Value* poly = g->add_node("Add", {scalar_f32(*g, "one", 1.f), square}, 1)->output(0);
  ir::Value* t = g->add_node("Tanh", {mul(*g, scaled_x, poly)}, 1)->output(0);
  ir::Value* sum = g->add_node("Add", {scalar_f32(*g, "one_", 1.f), t}, 1)->output(0);
  g->add_output(mul(*g, half_x, sum));
  return g;
}

void expect_gelu_values(std::unique_ptr<ir::Graph> g, bool tanh) {
  Session s = Session::from_graph(std::move(g));
  Tensor x = ramp({2, 5}, -3.f, 0.6f);
  Tensor y = s.run({{"x", x}})[0];
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.data<float>()[i];
    const double expected = tanh ? 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))
                                 : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    EXPECT_NEAR(y.data<float>()[i], expected, 1e-5) << "x = " << v;
  }
}

TEST(Passes, GeluErfFormBecomesOneGelu) {
  auto g = gelu_erf_graph();
  passes::optimize(*g, 2, runtime::reference_evaluator());
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0]->op_type, "Gelu");
  EXPECT_EQ(g->nodes()[0]->attrs.get_string("approximate", ""), "none");
  expect_gelu_values(gelu_erf_graph(), false);
}

TEST(Passes, GeluTanhFormBecomesOneGelu) {
  auto g = gelu_tanh_graph();
  passes::optimize(*g, 2, runtime::reference_evaluator());
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0]->op_type, "Gelu");
  EXPECT_EQ(g->nodes()[0]->attrs.get_string("approximate", ""), "tanh");
  expect_gelu_values(gelu_tanh_graph(), true);
}

TEST(Passes, GeluTanhFactoredFormBecomesOneGelu) {
  for (bool square_first : {false, true}) {
    auto g = gelu_tanh_factored_graph(0.044715f, square_first);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    ASSERT_EQ(g->nodes().size(), 1u) << square_first;
    EXPECT_EQ(g->nodes()[0]->op_type, "Gelu");
    EXPECT_EQ(g->nodes()[0]->attrs.get_string("approximate", ""), "tanh");
    expect_gelu_values(gelu_tanh_factored_graph(0.044715f, square_first), true);
  }
}

// torchvision ViT's class token: Expand(token, shape), the shape computed
// from constants as PyTorch exports expand(n, -1, -1) (Where(Equal(c, -1),
// ones, c)), then Concat with the patches, then GELU's Erf form. Import's
// inference cannot see the shape's value, so nothing after the Expand has a
// rank until folding settles it.
std::unique_ptr<ir::Graph> class_token_gelu_graph() {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* patches = g->add_input("patches", DType::kFloat32, {1, 2, 4});
  ir::Value* c = g->add_constant("c", ints({3}, {1, -1, -1}));
  ir::Node* ones = g->add_node("ConstantOfShape", {g->add_constant("three", ints({1}, {3}))}, 1);
  ones->attrs.set("value", ints({1}, {1}));
  ir::Value* minus = mul(*g, ones->output(0), g->add_constant("minus1", ints({}, {-1})));
  ir::Value* is_free = g->add_node("Equal", {c, minus}, 1)->output(0);
  ir::Value* shape = g->add_node("Where", {is_free, ones->output(0), c}, 1)->output(0);
  ir::Value* token = g->add_node("Expand", {g->add_constant("token", ramp({1, 1, 4}, -1.f, 0.5f)), shape}, 1)->output(0);
  ir::Node* concat = g->add_node("Concat", {token, patches}, 1);
  concat->attrs.set("axis", int64_t{1});
  ir::Value* x = concat->output(0);
  ir::Value* erf = g->add_node("Erf", {g->add_node("Div", {x, scalar_f32(*g, "sqrt2", 1.4142135f)}, 1)->output(0)}, 1)->output(0);
  ir::Value* sum = g->add_node("Add", {erf, scalar_f32(*g, "one", 1.f)}, 1)->output(0);
  g->add_output(mul(*g, mul(*g, x, sum), scalar_f32(*g, "half", 0.5f)));
  return g;
}

TEST(Passes, FusionsSeeTypesThatFoldingSettles) {
  auto g = class_token_gelu_graph();
  ir::infer_types(*g);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "Gelu"), 1u);
  EXPECT_EQ(count_ops(*g, "Erf"), 0u);
  Session s = Session::from_graph(class_token_gelu_graph());
  Tensor patches = ramp({1, 2, 4}, 0.25f, -0.3f);
  const Tensor y = s.run({{"patches", patches}})[0];
  ASSERT_EQ(y.shape(), (Shape{1, 3, 4}));
  for (int64_t i = 0; i < y.numel(); ++i) {
    const double v = i < 4 ? -1.0 + 0.5 * i : 0.25 - 0.3 * (i - 4);
    EXPECT_NEAR(y.data<float>()[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-5) << i;
  }
}

TEST(Passes, GeluLookalikesAreLeftAlone) {
  auto other_constant = gelu_erf_graph(2.f);  // 1 + erf replaced by 2 + erf
  passes::optimize(*other_constant, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*other_constant, "Gelu"), 0u);
  EXPECT_EQ(count_ops(*other_constant, "Erf"), 1u);
  auto shared = gelu_erf_graph(1.f, true);  // erf(...) is also a graph output
  passes::optimize(*shared, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*shared, "Gelu"), 0u);
  for (bool square_first : {false, true}) {
    auto other_square = gelu_tanh_factored_graph(0.05f, square_first);  // not GELU's cubic term
    passes::optimize(*other_square, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*other_square, "Gelu"), 0u) << square_first;
    EXPECT_EQ(count_ops(*other_square, "Tanh"), 1u) << square_first;
  }
  auto square_read_twice = gelu_tanh_factored_graph(0.044715f, false, true);
  passes::optimize(*square_read_twice, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*square_read_twice, "Gelu"), 0u);
}

// y = [relu](x W + b [+ r]): x [2, 4] ramp, W [4, 3] ramp, b [3]; r is an input of shape r_shape.
std::unique_ptr<ir::Graph> linear_graph(bool relu, Shape r_shape) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 4});
  ir::Value* y = g->add_node("MatMul", {x, g->add_constant("w", ramp({4, 3}, -1.f, 0.25f))}, 1)->output(0);
  y = g->add_node("Add", {g->add_constant("b", ramp({3}, 0.5f, -1.f)), y}, 1)->output(0);
  if (!r_shape.empty()) y = g->add_node("Add", {y, g->add_input("r", DType::kFloat32, r_shape)}, 1)->output(0);
  if (relu) y = g->add_node("Relu", {y}, 1)->output(0);
  g->add_output(y);
  return g;
}

std::vector<float> linear_expected(bool relu, const Tensor* r) {
  Tensor x = ramp({2, 4}, 0.f, 0.5f), w = ramp({4, 3}, -1.f, 0.25f), b = ramp({3}, 0.5f, -1.f);
  std::vector<float> out;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      float v = b.data<float>()[j];
      for (int k = 0; k < 4; ++k) v += x.data<float>()[i * 4 + k] * w.data<float>()[k * 3 + j];
      if (r) v += r->data<float>()[r->numel() == 6 ? i * 3 + j : j];
      out.push_back(relu && v < 0 ? 0.f : v);
    }
  return out;
}

void expect_linear_values(std::unique_ptr<ir::Graph> g, bool relu, const Tensor* r) {
  Session s = Session::from_graph(std::move(g));
  std::map<std::string, Tensor> in = {{"x", ramp({2, 4}, 0.f, 0.5f)}};
  if (r) in["r"] = *r;
  Tensor y = s.run(in)[0];
  std::vector<float> expected = linear_expected(relu, r);
  ASSERT_EQ(y.numel(), 6);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(y.data<float>()[i], expected[i], 1e-5f) << i;
}

TEST(Passes, MatMulBiasResidualReluBecomeOneFusedMatMul) {
  auto g = linear_graph(true, {2, 3});
  ir::infer_types(*g);  // as the session does before optimizing
  passes::optimize(*g, 2, runtime::reference_evaluator());
  ASSERT_EQ(g->nodes().size(), 1u);
  const ir::Node& fused = *g->nodes()[0];
  EXPECT_EQ(fused.op_type, "FusedMatMul");
  EXPECT_TRUE(fused.input(2) && fused.input(2)->is_constant());  // the bias
  EXPECT_EQ(fused.input(3), g->find_value("r"));                 // the residual
  EXPECT_EQ(fused.attrs.get_string("activation", ""), "Relu");
  Tensor r = ramp({2, 3}, 1.f, -0.75f);
  expect_linear_values(linear_graph(true, {2, 3}), true, &r);
}

TEST(Passes, BroadcastingAddIsNotFusedAsResidual) {
  auto g = linear_graph(false, {1, 3});  // r broadcasts over the rows: not a residual
  ir::infer_types(*g);  // as the session does before optimizing
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "FusedMatMul"), 1u);
  EXPECT_EQ(count_ops(*g, "Add"), 1u);
  EXPECT_EQ(g->nodes()[0]->input(3), nullptr);
  Tensor r = ramp({1, 3}, 2.f, 1.f);
  expect_linear_values(linear_graph(false, {1, 3}), false, &r);
}

TEST(Passes, MatMulWithNonConstantAddendKeepsItsAdd) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 4});
  ir::Value* y = g->add_node("MatMul", {x, g->add_constant("w", ramp({4, 3}, -1.f, 0.25f))}, 1)->output(0);
  g->add_output(g->add_node("Add", {y, g->add_input("b", DType::kFloat32, {3})}, 1)->output(0));
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "MatMul"), 1u);
  EXPECT_EQ(count_ops(*g, "FusedMatMul"), 0u);
}

// Multi-head attention as PyTorch exports it: Q, K, V [2, 5, 8] (2 heads of 4),
// scores / 2 + mask (float [2, 1, 1, 5]) or, GPT-style, Where(buffer[:5, :5],
// scores / 2, fill) with `buffer` a registered [8, 8] lower-triangular bool.
struct AttentionGraphOptions {
  bool causal_where = false;
  bool upper_triangular = false;  // the buffer is not causal
  float fill = -1e4f;
  int64_t softmax_axis = -1;
  bool scores_are_output = false;
  float divisor = 2.f;  // the scores divided by it
  Shape mask_shape = {2, 1, 1, 5};
  // Q, K and V as parts of one input x [2, S, 24] (S named when
  // sequence_symbol), split along the last axis, part qkv_order[i] feeding
  // Q, K, V in turn.
  bool packed_qkv = false;
  bool sequence_symbol = false;
  std::vector<size_t> qkv_order = {0, 1, 2};
  bool q_is_output = false;  // packed_qkv: the Q part is also a graph output
  // packed_qkv: Slice(Shape(Q part), begin, end) is a graph output "q_dims" (none when empty).
  std::vector<int64_t> q_dims_slice;
  bool split_sizes_input = false;  // packed_qkv: the Split's sizes a graph input, the parts declared [2, 5, 8]
  // packed_qkv: Gather(Shape(Q part), q_dims_gather) is a graph output "q_dims" (none when empty).
  std::vector<int64_t> q_dims_gather;
  // Hugging Face's BERT: the merge Reshape's target is Concat(Shape(merged
  // Transpose)[0:2], [8]), read after the Transpose.
  bool merge_shape_after_transpose = false;
  // Hugging Face's GPT-2: Gather(Shape(Transpose(K's Reshape, 0213)), 2),
  // the key length, is a graph output "k_len".
  bool k_length_read = false;
  // The heads' Reshape targets Concat(Shape(part)[0:2], [2, 4]), as
  // x.size()[:-1] + (heads, size) exports.
  bool computed_head_shape = false;
  // DistilBERT: Q divided before the product (not the scores), and the mask
  // masked_fill(Expand(pad, Shape(S)), fill) with pad a bool input of pad_shape.
  bool scale_query = false;
  bool padding_where = false;
  bool mask_is_scores = false;  // Softmax(S + S): the "mask" is the scores themselves
  Shape pad_shape = {2, 1, 1, 5};
  ir::SymShape mask_dims;  // the float mask's dims, symbols allowed (mask_shape's when empty)
};

std::unique_ptr<ir::Graph> attention_graph(const AttentionGraphOptions& o = {}) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  std::vector<ir::Value*> parts;
  if (o.packed_qkv) {
    ir::Value* x = g->add_input("x", DType::kFloat32, {2, 5, 24});
    if (o.sequence_symbol)
      x->type = ir::Type::tensor(DType::kFloat32, ir::SymShape{ir::Dim::known(2), ir::Dim::named("S"), ir::Dim::known(24)});
    ir::Value* sizes = o.split_sizes_input ? g->add_input("sizes", DType::kInt64, {3})
                                           : g->add_constant("qkv_sizes", ints({3}, {8, 8, 8}));
    ir::Node* split = g->add_node("Split", {x, sizes}, 3);
    split->attrs.set("axis", int64_t{2});
    if (o.split_sizes_input)  // as a file's value_info may declare them: the run need not follow
      for (size_t i = 0; i < 3; ++i) split->output(i)->type = ir::Type::tensor(DType::kFloat32, Shape{2, 5, 8});
    for (size_t i : o.qkv_order) parts.push_back(split->output(i));
    if (o.q_is_output) g->add_output(parts[0]);
    if (!o.q_dims_slice.empty()) {
      ir::Value* dims = g->add_node("Shape", {parts[0]}, 1)->output(0);
      ir::Value* q_dims = g->add_node("Slice", {dims, g->add_constant("q_dims_begin", ints({1}, {o.q_dims_slice[0]})),
                                                g->add_constant("q_dims_end", ints({1}, {o.q_dims_slice[1]}))}, 1)->output(0);
      q_dims->name = "q_dims";
      g->add_output(q_dims);
    }
    if (!o.q_dims_gather.empty()) {
      ir::Value* dims = g->add_node("Shape", {parts[0]}, 1)->output(0);
      const Tensor at = ints({static_cast<int64_t>(o.q_dims_gather.size())}, o.q_dims_gather);
      ir::Value* q_dims = g->add_node("Gather", {dims, g->add_constant("q_dims_at", at)}, 1)->output(0);
      q_dims->name = "q_dims";
      g->add_output(q_dims);
    }
  }
  auto heads = [&](const char* name, std::vector<int64_t> perm) {
    ir::Value* x = !o.packed_qkv ? g->add_input(name, DType::kFloat32, {2, 5, 8})
                                 : parts[static_cast<size_t>(std::string("qkv").find(name[0]))];
    const std::vector<int64_t> dims = o.sequence_symbol ? std::vector<int64_t>{0, 0, 2, 4} : std::vector<int64_t>{2, 5, 2, 4};
    ir::Value* target = g->add_constant(std::string(name) + "_shape", ints({4}, dims));
    if (o.computed_head_shape) {
      ir::Value* lead = g->add_node("Slice", {g->add_node("Shape", {x}, 1)->output(0),
                                              g->add_constant(std::string(name) + "_lead_begin", ints({1}, {0})),
                                              g->add_constant(std::string(name) + "_lead_end", ints({1}, {2}))}, 1)->output(0);
      ir::Node* cat = g->add_node("Concat", {lead, g->add_constant(std::string(name) + "_heads", ints({2}, {2, 4}))}, 1);
      cat->attrs.set("axis", int64_t{0});
      target = cat->output(0);
    }
    ir::Value* r = g->add_node("Reshape", {x, target}, 1)->output(0);
    ir::Node* t = g->add_node("Transpose", {r}, 1);
    t->attrs.set("perm", perm);
    if (o.k_length_read && name[0] == 'k') {
      ir::Node* again = g->add_node("Transpose", {r}, 1);
      again->attrs.set("perm", std::vector<int64_t>{0, 2, 1, 3});
      ir::Value* dims = g->add_node("Shape", {again->output(0)}, 1)->output(0);
      ir::Value* len = g->add_node("Gather", {dims, g->add_constant("k_len_at", ints({1}, {2}))}, 1)->output(0);
      len->name = "k_len";
      g->add_output(len);
    }
    return t->output(0);
  };
  ir::Value* q = heads("q", {0, 2, 1, 3});
  ir::Value* k = heads("k", {0, 2, 3, 1});
  ir::Value* v = heads("v", {0, 2, 1, 3});
  if (o.scale_query) q = g->add_node("Div", {q, scalar_f32(*g, "two", o.divisor)}, 1)->output(0);
  ir::Value* s = g->add_node("MatMul", {q, k}, 1)->output(0);
  ir::Value* scaled = o.scale_query ? s : g->add_node("Div", {s, scalar_f32(*g, "two", o.divisor)}, 1)->output(0);
  ir::Value* masked;
  if (o.padding_where) {
    ir::Value* pad = g->add_input("pad", DType::kBool, o.pad_shape);
    ir::Value* dims = g->add_node("Shape", {scaled}, 1)->output(0);
    ir::Value* wide = g->add_node("Expand", {pad, dims}, 1)->output(0);
    masked = g->add_node("Where", {wide, scalar_f32(*g, "fill", o.fill), scaled}, 1)->output(0);
  } else if (o.causal_where) {
    Tensor buffer(DType::kBool, {8, 8});
    for (int64_t i = 0; i < 8; ++i)
      for (int64_t j = 0; j < 8; ++j) buffer.data<bool>()[i * 8 + j] = o.upper_triangular ? j >= i : j <= i;
    ir::Value* cond = g->add_node("Slice", {g->add_constant("causal", buffer), g->add_constant("starts", ints({2}, {0, 0})),
                                            g->add_constant("ends", ints({2}, {5, 5})), g->add_constant("axes", ints({2}, {0, 1}))}, 1)->output(0);
    masked = g->add_node("Where", {cond, scaled, scalar_f32(*g, "fill", o.fill)}, 1)->output(0);
  } else if (o.mask_is_scores) {
    masked = g->add_node("Add", {scaled, scaled}, 1)->output(0);
  } else {
    ir::Value* mask = g->add_input("mask", DType::kFloat32, o.mask_shape);
    if (!o.mask_dims.empty()) mask->type = ir::Type::tensor(DType::kFloat32, o.mask_dims);
    masked = g->add_node("Add", {scaled, mask}, 1)->output(0);
  }
  ir::Node* sm = g->add_node("Softmax", {masked}, 1);
  sm->attrs.set("axis", o.softmax_axis);
  ir::Value* o4 = g->add_node("MatMul", {sm->output(0), v}, 1)->output(0);
  ir::Node* t = g->add_node("Transpose", {o4}, 1);
  t->attrs.set("perm", std::vector<int64_t>{0, 2, 1, 3});
  const std::vector<int64_t> y_dims = o.sequence_symbol ? std::vector<int64_t>{0, 0, 8} : std::vector<int64_t>{2, 5, 8};
  ir::Value* y_shape = g->add_constant("y_shape", ints({3}, y_dims));
  if (o.merge_shape_after_transpose) {
    ir::Value* dims = g->add_node("Shape", {t->output(0)}, 1)->output(0);
    ir::Value* lead = g->add_node("Slice", {dims, g->add_constant("lead_begin", ints({1}, {0})),
                                            g->add_constant("lead_end", ints({1}, {2}))}, 1)->output(0);
    ir::Node* cat = g->add_node("Concat", {lead, g->add_constant("width", ints({1}, {8}))}, 1);
    cat->attrs.set("axis", int64_t{0});
    y_shape = cat->output(0);
  }
  g->add_output(g->add_node("Reshape", {t->output(0), y_shape}, 1)->output(0));
  if (o.scores_are_output) g->add_output(s);
  ir::infer_types(*g);
  return g;
}

// softmax(Q_h K_h^T / 2 + mask) V_h per batch and head, computed here in double.
std::vector<float> attention_expected(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const std::function<double(int64_t b, int64_t i, int64_t j)>& mask) {
  std::vector<float> y(2 * 5 * 8);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 5; ++i) {
        double s[5], mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < 5; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < 4; ++d)
            dot += double(q.data<float>()[(b * 5 + i) * 8 + h * 4 + d]) * k.data<float>()[(b * 5 + j) * 8 + h * 4 + d];
          s[j] = dot / 2 + mask(b, i, j);
          mx = std::max(mx, s[j]);
        }
        for (double& x : s) sum += x = std::exp(x - mx);
        for (int64_t d = 0; d < 4; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < 5; ++j) acc += s[j] / sum * v.data<float>()[(b * 5 + j) * 8 + h * 4 + d];
          y[static_cast<size_t>((b * 5 + i) * 8 + h * 4 + d)] = static_cast<float>(acc);
        }
      }
  return y;
}

TEST(Passes, AttentionWithFloatMaskBecomesOneAttention) {
  auto g = attention_graph();
  passes::optimize(*g, 2, runtime::reference_evaluator());
  ASSERT_EQ(count_ops(*g, "Attention"), 1u);
  EXPECT_EQ(g->nodes().size(), 1u);
  const ir::Node& att = *g->nodes()[0];
  EXPECT_EQ(att.attrs.get_int("q_num_heads", 0), 2);
  EXPECT_FLOAT_EQ(att.attrs.get_float("scale", 0.f), 0.5f);
  EXPECT_EQ(att.input(3), g->find_value("mask"));
  // A mask's batch of its own still fits scores whose batch is known above 1.
  auto own_batch =
      attention_graph({.mask_dims = {ir::Dim::named("B"), ir::Dim::known(1), ir::Dim::known(1), ir::Dim::known(5)}});
  passes::optimize(*own_batch, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*own_batch, "Attention"), 1u);

  Tensor q = ramp({2, 5, 8}, -1.f, 0.03f), k = ramp({2, 5, 8}, 0.7f, -0.02f), v = ramp({2, 5, 8}, -2.f, 0.05f);
  Tensor mask(DType::kFloat32, {2, 1, 1, 5});
  for (int64_t i = 0; i < 10; ++i) mask.data<float>()[i] = i % 5 == 3 ? -10000.f : 0.1f * float(i);
  Session s = Session::from_graph(attention_graph());
  Tensor y = s.run({{"q", q}, {"k", k}, {"v", v}, {"mask", mask}})[0];
  std::vector<float> want = attention_expected(q, k, v, [&](int64_t b, int64_t, int64_t j) {
    return double(mask.data<float>()[b * 5 + j]);
  });
  ASSERT_EQ(y.numel(), 80);
  for (int64_t i = 0; i < 80; ++i) EXPECT_NEAR(y.data<float>()[i], want[static_cast<size_t>(i)], 1e-5f) << i;
}

TEST(Passes, CausalWhereBecomesAnExpandedBooleanMask) {
  auto g = attention_graph({.causal_where = true});
  passes::optimize(*g, 2, runtime::reference_evaluator());
  ASSERT_EQ(count_ops(*g, "Attention"), 1u);
  EXPECT_EQ(count_ops(*g, "Softmax") + count_ops(*g, "Where") + count_ops(*g, "Transpose"), 0u);
  const ir::Node* att = nullptr;
  for (const auto& n : g->nodes())
    if (n->op_type == "Attention") att = n.get();
  // The sliced triangle broadcast as Where did: an Expand to [Sq, Skv], which
  // here, with every length known, folds to a constant at load time.
  ASSERT_TRUE(att->input(3) && att->input(3)->is_constant());
  EXPECT_EQ(att->input(3)->constant->shape(), Shape({5, 5}));
  EXPECT_EQ(att->attrs.get_int("is_causal", 0), 0);

  Tensor q = ramp({2, 5, 8}, 0.5f, -0.04f), k = ramp({2, 5, 8}, -0.3f, 0.02f), v = ramp({2, 5, 8}, 1.f, -0.03f);
  Session s = Session::from_graph(attention_graph({.causal_where = true}));
  Tensor y = s.run({{"q", q}, {"k", k}, {"v", v}})[0];
  std::vector<float> want = attention_expected(q, k, v, [](int64_t, int64_t i, int64_t j) { return j <= i ? 0.0 : -INFINITY; });
  for (int64_t i = 0; i < 80; ++i) EXPECT_NEAR(y.data<float>()[i], want[static_cast<size_t>(i)], 1e-5f) << i;
}

// Columns [first, first + 8) of x [2, 5, 24].
Tensor columns(const Tensor& x, int64_t first) {
  Tensor part(DType::kFloat32, {2, 5, 8});
  for (int64_t r = 0; r < 10; ++r)
    for (int64_t e = 0; e < 8; ++e) part.data<float>()[r * 8 + e] = x.data<float>()[r * 24 + first + e];
  return part;
}

TEST(Passes, AttentionOnASplitReadsItsPartsInPlace) {
  for (bool read_q_dims : {false, true}) {
    SCOPED_TRACE(read_q_dims ? "Q's batch and sequence lengths read too" : "Q, K and V read by the attention alone");
    AttentionGraphOptions o{.packed_qkv = true, .sequence_symbol = true};
    if (read_q_dims) o.q_dims_slice = {0, 2};
    auto g = attention_graph(o);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    ASSERT_EQ(count_ops(*g, "QkvAttention"), 1u);
    EXPECT_EQ(count_ops(*g, "Split") + count_ops(*g, "Attention"), 0u);
    for (const auto& n : g->nodes()) {
      if (n->dead) continue;
      if (n->op_type == "QkvAttention") {
        EXPECT_EQ(n->input(0), g->find_value("x"));
        EXPECT_EQ(n->attrs.get_ints("qkv_sizes"), (std::vector<int64_t>{8, 8, 8}));
      }
      // Q's lengths, read from Q's shape before, now from x's.
      if (n->op_type == "Shape") {
        EXPECT_EQ(n->input(0), g->find_value("x"));
      }
    }
    EXPECT_EQ(count_ops(*g, "Shape"), read_q_dims ? 1u : 0u);

    const Tensor x = ramp({2, 5, 24}, -0.8f, 0.013f);
    Tensor mask(DType::kFloat32, {2, 1, 1, 5});
    for (int64_t i = 0; i < 10; ++i) mask.data<float>()[i] = i % 5 == 2 ? -10000.f : 0.2f * float(i);
    Session s = Session::from_graph(attention_graph(o));
    const std::vector<Tensor> out = s.run({{"x", x}, {"mask", mask}});
    if (read_q_dims) {
      ASSERT_EQ(out.size(), 2u);
      EXPECT_EQ(testing::values<int64_t>(out[0]), (std::vector<int64_t>{2, 5}));
    }
    const Tensor& y = out.back();
    const std::vector<float> want = attention_expected(columns(x, 0), columns(x, 8), columns(x, 16),
                                                       [&](int64_t b, int64_t, int64_t j) {
                                                         return double(mask.data<float>()[b * 5 + j]);
                                                       });
    ASSERT_EQ(y.numel(), 80);
    for (int64_t i = 0; i < 80; ++i) EXPECT_NEAR(y.data<float>()[i], want[static_cast<size_t>(i)], 1e-5f) << i;
  }
}

// Hugging Face's exports read shapes around the pattern: BERT sizes the
// merge Reshape from the merged Transpose's Shape, GPT-2 transposes K's
// heads a second time for its length, and reads Q's leading dims with a
// Gather or x.size()[:-1]. Each still fuses, the key length's Transpose
// goes, and the values are the definition's (by hand) and the lengths'.
TEST(Passes, AttentionWithHuggingFacesShapeReadsFuses) {
  struct Case {
    const char* name;
    AttentionGraphOptions o;
    const char* fused;
  };
  const Case cases[] = {
      {"BERT's merge shape", {.packed_qkv = true, .sequence_symbol = true, .merge_shape_after_transpose = true},
       "QkvAttention"},
      {"GPT-2's key length",
       {.packed_qkv = true, .sequence_symbol = true, .k_length_read = true, .computed_head_shape = true},
       "QkvAttention"},
      {"Q's batch by Gather", {.packed_qkv = true, .sequence_symbol = true, .q_dims_gather = {0, -2}}, "QkvAttention"},
      {"x.size()[:-1] of Q", {.packed_qkv = true, .sequence_symbol = true, .q_dims_slice = {0, -1}}, "QkvAttention"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto g = attention_graph(c.o);
    passes::optimize(*g, 3, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, c.fused), 1u);
    EXPECT_EQ(count_ops(*g, "Softmax") + count_ops(*g, "Transpose") + count_ops(*g, "Split"), 0u);
    Session s = Session::from_graph(attention_graph(c.o));
    const Tensor x = ramp({2, 5, 24}, -0.8f, 0.013f);
    Tensor mask(DType::kFloat32, {2, 1, 1, 5});
    for (int64_t i = 0; i < 10; ++i) mask.data<float>()[i] = i % 5 == 2 ? -10000.f : 0.2f * float(i);
    const Tensor q = columns(x, 0), k = columns(x, 8), v = columns(x, 16);
    const std::vector<Tensor> out = s.run({{"x", x}, {"mask", mask}});
    if (c.o.k_length_read) {
      EXPECT_EQ(testing::values<int64_t>(out[0]), (std::vector<int64_t>{5}));
    }
    if (!c.o.q_dims_gather.empty() || !c.o.q_dims_slice.empty()) {
      EXPECT_EQ(testing::values<int64_t>(out[0]), (std::vector<int64_t>{2, 5}));
    }
    const Tensor& y = out.back();
    const std::vector<float> want = attention_expected(q, k, v, [&](int64_t b, int64_t, int64_t j) {
      return double(mask.data<float>()[b * 5 + j]);
    });
    ASSERT_EQ(y.numel(), 80);
    for (int64_t i = 0; i < 80; ++i) EXPECT_NEAR(y.data<float>()[i], want[static_cast<size_t>(i)], 1e-5f) << i;
  }
}

// DistilBERT's attention: Q scaled before the product, keys masked by
// masked_fill(Expand(pad, Shape(S)), finfo.min). It fuses, the fill an
// additive float mask; values by hand, with batch item 1's keys all masked
// (masked_fill then weighs them all alike: V's mean).
TEST(Passes, MaskedFillAttentionBecomesOneAttention) {
  const AttentionGraphOptions o{.fill = -3.4028235e38f, .scale_query = true, .padding_where = true};
  auto g = attention_graph(o);
  passes::optimize(*g, 3, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "Attention"), 1u);
  for (const char* op : {"Softmax", "Expand", "Transpose", "Div"}) EXPECT_EQ(count_ops(*g, op), 0u) << op;
  const Tensor q = ramp({2, 5, 8}, -1.f, 0.03f), k = ramp({2, 5, 8}, 0.7f, -0.02f), v = ramp({2, 5, 8}, -2.f, 0.05f);
  Tensor pad(DType::kBool, {2, 1, 1, 5});
  for (int64_t i = 0; i < 10; ++i) pad.data<bool>()[i] = i == 1 || i == 3 || i >= 5;
  Session s = Session::from_graph(attention_graph(o));
  const Tensor y = s.run({{"q", q}, {"k", k}, {"v", v}, {"pad", pad}})[0];
  std::vector<float> want = attention_expected(q, k, v, [&](int64_t b, int64_t, int64_t j) {
    return pad.data<bool>()[b * 5 + j] ? -INFINITY : 0.0;
  });
  for (int64_t i = 0; i < 5; ++i)  // item 1: every key alike, V's mean per head
    for (int64_t e = 0; e < 8; ++e) {
      double mean = 0;
      for (int64_t j = 0; j < 5; ++j) mean += v.data<float>()[(5 + j) * 8 + e] / 5.0;
      want[static_cast<size_t>((5 + i) * 8 + e)] = static_cast<float>(mean);
    }
  ASSERT_EQ(y.numel(), 80);
  for (int64_t i = 0; i < 80; ++i) EXPECT_NEAR(y.data<float>()[i], want[static_cast<size_t>(i)], 1e-5f) << i;
  // A mask per query does not fit Attention's per-key broadcast: its
  // expanded [2, 2, 5, 5] is the mask then (query rows 1 and 3 of item 0
  // and every row of item 1 masked in full: V's mean).
  const AttentionGraphOptions per_query{.fill = -3.4028235e38f, .scale_query = true, .padding_where = true,
                                        .pad_shape = {2, 1, 5, 1}};
  auto pq = attention_graph(per_query);
  passes::optimize(*pq, 3, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*pq, "Attention"), 1u);
  Session spq = Session::from_graph(attention_graph(per_query));
  Tensor pad_rows(DType::kBool, {2, 1, 5, 1});
  std::copy_n(pad.data<bool>(), 10, pad_rows.data<bool>());
  const Tensor ypq = spq.run({{"q", q}, {"k", k}, {"v", v}, {"pad", pad_rows}})[0];
  std::vector<float> want_pq = attention_expected(q, k, v, [](int64_t, int64_t, int64_t) { return 0.0; });
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 5; ++i) {
      if (!pad.data<bool>()[b * 5 + i]) continue;
      for (int64_t e = 0; e < 8; ++e) {
        double mean = 0;
        for (int64_t j = 0; j < 5; ++j) mean += v.data<float>()[(b * 5 + j) * 8 + e] / 5.0;
        want_pq[static_cast<size_t>((b * 5 + i) * 8 + e)] = static_cast<float>(mean);
      }
    }
  for (int64_t i = 0; i < 80; ++i) EXPECT_NEAR(ypq.data<float>()[i], want_pq[static_cast<size_t>(i)], 1e-5f) << i;
  // Left alone: a fill that S + fill does not round to (rows masked in full
  // would differ).
  auto mild = attention_graph({.fill = -1e4f, .scale_query = true, .padding_where = true});
  passes::optimize(*mild, 3, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*mild, "Attention") + count_ops(*mild, "QkvAttention"), 0u);
}

// Hugging Face's BART-family attention, heads folded into the batch:
// X [2, 5, 8] -> Reshape [2, 5, 2, 4] -> Transpose 0213 -> Reshape [4, 5, 4]
// for Q (scaled by Mul 0.5), K and V; MatMul(Qf, Transpose(Kf, 021)) viewed
// [2, 2, 5, 5] + mask, viewed back (twice with `second_mask`, as CLIP adds
// its causal mask and its padding mask); Softmax; MatMul with Vf; viewed
// [2, 2, 5, 4], Transpose 0213, Reshape [2, 5, 8]. K's folded length read
// by a Shape that sizes the first view, as BART reads src_len.
struct FoldedHeadsAttention {
  int64_t batch = 2;  // the lookalikes only: the values by hand take 2
  Shape mask_shape = {2, 1, 1, 5};
  bool second_mask = false;
  bool k_fold_is_output = false;
  bool k_reads_scaled_q = false;   // K folded from Q's scaled value
  bool heads_first_merge = false;  // the product viewed [h, b, s, d]
  int shape_fanout = 0;            // Shape(Kf) read N times by each of 8 chained Concats, unused

  std::unique_ptr<ir::Graph> make() const {
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 17;
    const int64_t b = batch;
    ir::Value* kf = nullptr;
    ir::Value* scaled_q = nullptr;
    auto fold = [&](const char* name, bool scale) {
      ir::Value* x = k_reads_scaled_q && name[0] == 'k' ? scaled_q : g->add_input(name, DType::kFloat32, {b, 5, 8});
      if (scale) x = scaled_q = mul(*g, x, scalar_f32(*g, "half", 0.5f));
      ir::Value* r = g->add_node("Reshape", {x, g->add_constant(g->unique_name(std::string(name) + "_split"), ints({4}, {b, 5, 2, 4}))}, 1)->output(0);
      ir::Node* t = g->add_node("Transpose", {r}, 1);
      t->attrs.set("perm", std::vector<int64_t>{0, 2, 1, 3});
      return g->add_node("Reshape", {t->output(0), g->add_constant(g->unique_name(std::string(name) + "_fold"), ints({3}, {b * 2, 5, 4}))}, 1)->output(0);
    };
    ir::Value* q = fold("q", true);
    kf = fold("k", false);
    ir::Value* v = fold("v", false);
    if (shape_fanout > 0) {
      ir::Value* x = g->add_node("Shape", {kf}, 1)->output(0);
      for (int i = 0; i < 8; ++i) {
        ir::Node* cat = g->add_node("Concat", std::vector<ir::Value*>(static_cast<size_t>(shape_fanout), x), 1);
        cat->attrs.set("axis", int64_t{0});
        x = cat->output(0);
      }
    }
    ir::Node* kt = g->add_node("Transpose", {kf}, 1);
    kt->attrs.set("perm", std::vector<int64_t>{0, 2, 1});
    ir::Value* s = g->add_node("MatMul", {q, kt->output(0)}, 1)->output(0);
    // The view's target [2, 2, 5, src_len], src_len = Shape(Kf)[1].
    ir::Value* src = g->add_node("Gather", {g->add_node("Shape", {kf}, 1)->output(0), g->add_constant("at1", ints({1}, {1}))}, 1)->output(0);
    ir::Node* view_dims = g->add_node("Concat", {g->add_constant("lead", ints({3}, {b, 2, 5})), src}, 1);
    view_dims->attrs.set("axis", int64_t{0});
    for (int i = 0; i < (second_mask ? 2 : 1); ++i) {
      ir::Value* view = g->add_node("Reshape", {s, view_dims->output(0)}, 1)->output(0);
      const std::string mask = i == 0 ? "mask" : "causal";
      ir::Value* m = g->add_input(mask, DType::kFloat32, i == 0 ? mask_shape : Shape{1, 1, 5, 5});
      ir::Value* sum = g->add_node("Add", {view, m}, 1)->output(0);
      s = g->add_node("Reshape", {sum, g->add_constant(mask + "_back", ints({3}, {b * 2, 5, 5}))}, 1)->output(0);
    }
    ir::Node* sm = g->add_node("Softmax", {s}, 1);
    sm->attrs.set("axis", int64_t{-1});
    ir::Value* o = g->add_node("MatMul", {sm->output(0), v}, 1)->output(0);
    const std::vector<int64_t> o_view = heads_first_merge ? std::vector<int64_t>{2, b, 5, 4} : std::vector<int64_t>{b, 2, 5, 4};
    ir::Value* o4 = g->add_node("Reshape", {o, g->add_constant("o_view", ints({4}, o_view))}, 1)->output(0);
    ir::Node* t = g->add_node("Transpose", {o4}, 1);
    t->attrs.set("perm", std::vector<int64_t>{0, 2, 1, 3});
    g->add_output(g->add_node("Reshape", {t->output(0), g->add_constant("merged", ints({3}, {b, 5, 8}))}, 1)->output(0));
    if (k_fold_is_output) g->add_output(kf);
    ir::infer_types(*g);
    return g;
  }
};

// It becomes one Attention (values by hand: softmax(q k^T / 2 + masks) v),
// one mask or two summed; the lookalikes stay.
TEST(Passes, FoldedHeadsAttentionBecomesOneAttention) {
  const Tensor q = ramp({2, 5, 8}, -1.f, 0.03f), k = ramp({2, 5, 8}, 0.7f, -0.02f), v = ramp({2, 5, 8}, -2.f, 0.05f);
  Tensor mask(DType::kFloat32, {2, 1, 1, 5}), causal(DType::kFloat32, {1, 1, 5, 5});
  for (int64_t i = 0; i < 10; ++i) mask.data<float>()[i] = i % 5 == 3 ? -3.4e38f : 0.1f * float(i);
  for (int64_t i = 0; i < 25; ++i) causal.data<float>()[i] = i % 5 > i / 5 ? -3.4e38f : 0.f;
  for (bool second : {false, true}) {
    SCOPED_TRACE(second ? "two masks (CLIP)" : "one mask (BART)");
    FoldedHeadsAttention a{.second_mask = second};
    auto g = a.make();
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "Attention"), 1u);
    for (const char* op : {"Softmax", "MatMul", "Transpose", "Reshape", "Shape"}) EXPECT_EQ(count_ops(*g, op), 0u) << op;
    Session s = Session::from_graph(a.make());
    std::map<std::string, Tensor> in = {{"q", q}, {"k", k}, {"v", v}, {"mask", mask}};
    if (second) in["causal"] = causal;
    const Tensor y = s.run(in)[0];
    const std::vector<float> want = attention_expected(q, k, v, [&](int64_t b, int64_t i, int64_t j) {
      const double pad = mask.data<float>()[b * 5 + j] < -1e30f ? -INFINITY : mask.data<float>()[b * 5 + j];
      return pad + (second && j > i ? -INFINITY : 0.0);
    });
    ASSERT_EQ(y.numel(), 80);
    for (int64_t i = 0; i < 80; ++i) EXPECT_NEAR(y.data<float>()[i], want[static_cast<size_t>(i)], 1e-5f) << i;
  }
  // Left alone: a mask per query, K's folded value read elsewhere, K
  // folded from Q's scaled value (the scale's Mul would die under it), the
  // product viewed heads first (b = 1, h = 2).
  int i = 0;
  for (const FoldedHeadsAttention& other :
       {FoldedHeadsAttention{.mask_shape = {2, 1, 5, 1}}, FoldedHeadsAttention{.k_fold_is_output = true},
        FoldedHeadsAttention{.k_reads_scaled_q = true},
        FoldedHeadsAttention{.batch = 1, .mask_shape = {1, 1, 1, 5}, .heads_first_merge = true}}) {
    auto g = other.make();
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "Attention"), 0u) << "lookalike " << i++;
  }
  // Shape(Kf) read 16 times by each of 8 chained Concats whose result is
  // unused: inference tracks the values of small tensors only (it built all
  // 3 * 16^8 of them before), and the attention still fuses.
  auto fanout = FoldedHeadsAttention{.shape_fanout = 16}.make();
  passes::optimize(*fanout, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*fanout, "Attention"), 1u);
}

TEST(Passes, SplitsAttentionCannotReadInPlaceStay) {
  auto swapped = attention_graph({.packed_qkv = true, .qkv_order = {1, 0, 2}});  // the first part is K
  passes::optimize(*swapped, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*swapped, "QkvAttention"), 0u);
  EXPECT_EQ(count_ops(*swapped, "Attention"), 1u);
  EXPECT_EQ(count_ops(*swapped, "Split"), 1u);
  auto q_read_elsewhere = attention_graph({.packed_qkv = true, .q_is_output = true});
  passes::optimize(*q_read_elsewhere, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*q_read_elsewhere, "QkvAttention"), 0u);
  EXPECT_EQ(count_ops(*q_read_elsewhere, "Attention"), 1u);
  // Widths only the parts' declared types give.
  auto sizes_at_run_time = attention_graph({.packed_qkv = true, .split_sizes_input = true});
  passes::optimize(*sizes_at_run_time, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*sizes_at_run_time, "QkvAttention"), 0u);
  EXPECT_EQ(count_ops(*sizes_at_run_time, "Attention"), 1u);
  // Q's last length is not x's, sliced or gathered.
  for (auto o : {AttentionGraphOptions{.packed_qkv = true, .sequence_symbol = true, .q_dims_slice = {1, 3}},
                 AttentionGraphOptions{.packed_qkv = true, .sequence_symbol = true, .q_dims_gather = {1, 2}},
                 AttentionGraphOptions{.packed_qkv = true, .sequence_symbol = true, .q_dims_gather = {-2, -1}}}) {
    auto q_width_read = attention_graph(o);
    passes::optimize(*q_width_read, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*q_width_read, "QkvAttention"), 0u);
    EXPECT_EQ(count_ops(*q_width_read, "Attention"), 1u);
  }
}

TEST(Passes, AttentionLookalikesAreLeftAlone) {
  auto over_queries = attention_graph({.softmax_axis = 2});  // normalized over the queries, not the keys
  passes::optimize(*over_queries, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*over_queries, "Attention"), 0u);
  auto not_causal = attention_graph({.causal_where = true, .upper_triangular = true});
  passes::optimize(*not_causal, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*not_causal, "Attention"), 0u);
  auto mild_fill = attention_graph({.causal_where = true, .fill = -10.f});  // masked keys would still weigh
  passes::optimize(*mild_fill, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*mild_fill, "Attention"), 0u);
  auto per_query = attention_graph({.mask_shape = {2, 1, 5, 1}});  // one value per query, broadcast over the keys
  passes::optimize(*per_query, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*per_query, "Attention"), 0u);
  // A mask with a query length of its own: where the scores' S is 1 the Add
  // broadcasts the one query over T rows, which one Attention could not
  // (the Softmax's type, past the broadcast, then has rows of unknown length).
  const auto own_rows = [] {
    return attention_graph({.packed_qkv = true, .sequence_symbol = true,
                            .mask_dims = {ir::Dim::known(2), ir::Dim::known(1), ir::Dim::named("T"), ir::Dim::named("S")}});
  };
  auto rows = own_rows();
  passes::optimize(*rows, 3, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*rows, "Attention") + count_ops(*rows, "QkvAttention"), 0u);
  Session broadcast = Session::from_graph(own_rows());
  const Tensor y = broadcast.run({{"x", ramp({2, 1, 24}, -0.5f, 0.02f)}, {"mask", ramp({2, 1, 3, 1}, 0.f, 0.1f)}})[0];
  EXPECT_EQ(y.shape(), Shape({2, 3, 8}));
  auto negative = attention_graph({.divisor = -2.f});  // Attention's reference takes the scale's square root
  passes::optimize(*negative, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*negative, "Attention"), 0u);
  auto doubled = attention_graph({.mask_is_scores = true});  // the mask would lose its producer
  passes::optimize(*doubled, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*doubled, "Attention"), 0u);
  auto shared = attention_graph({.scores_are_output = true});  // the raw scores are a graph output
  passes::optimize(*shared, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*shared, "Attention"), 0u);
  EXPECT_EQ(count_ops(*shared, "MaskedSoftmax"), 1u);  // only the mask's Add joins the Softmax
}

// A squeeze-and-excitation block as torchvision exports MobileNetV3's:
// x [2, 8, 3, 4] -> GlobalAveragePool -> Conv 8 -> 3 (+ bias) -> Relu ->
// Conv 3 -> 8 (+ bias) -> HardSigmoid(1/6, 1/2) -> Mul(x, gates).
struct SqueezeExciteOptions {
  int64_t reduce_kernel = 1;       // the reduction's window (3: a lookalike, padded to keep the 1x1 plane)
  int64_t reduce_group = 1;
  bool gate_tanh = false;          // a gate the fast kernel's epilogue lacks
  bool pooled_is_output = false;   // the pooled means are also a graph output
  bool weights_are_inputs = false;  // W1 a graph input (known only at run time)
  int rank = 4;                    // 3: a 1-D block (Conv1d), not taken
  int64_t reduced = 3;             // the reduction's channels
  bool x_shape_unknown = false;    // x's type without a shape (a dynamic producer's)
  bool pool_by_mean = false;       // ReduceMean over the plane, keepdims (timm's x.mean((2, 3), keepdim=True))
};

std::unique_ptr<ir::Graph> squeeze_excite_graph(const SqueezeExciteOptions& o = {}) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  const Shape xs = o.rank == 4 ? Shape{2, 8, 3, 4} : Shape{2, 8, 12};
  const Shape unit = o.rank == 4 ? Shape{1, 1} : Shape{1};
  ir::Value* x = g->add_input("x", DType::kFloat32, xs);
  if (o.x_shape_unknown) x->type = ir::Type::tensor(DType::kFloat32);
  ir::Node* pool = g->add_node(o.pool_by_mean ? "ReduceMean" : "GlobalAveragePool", {x}, 1, "pool");
  if (o.pool_by_mean) pool->attrs.set("axes", std::vector<int64_t>{2, 3});
  ir::Value* pooled = pool->output(0);
  if (o.pooled_is_output) g->add_output(pooled);
  Shape w1s = {o.reduced, 8 / o.reduce_group, o.reduce_kernel, o.reduce_kernel}, w2s = {8, o.reduced};
  if (o.rank == 3) w1s = {o.reduced, 8, 1};
  w2s.insert(w2s.end(), unit.begin(), unit.end());
  ir::Value* w1 = o.weights_are_inputs ? g->add_input("w1", DType::kFloat32, w1s) : g->add_constant("w1", ramp(w1s, -0.4f, 0.037f));
  ir::Node* reduce = g->add_node("Conv", {pooled, w1, g->add_constant("b1", ramp({o.reduced}, 0.1f, -0.2f))}, 1, "reduce");
  if (o.reduce_kernel == 3) reduce->attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  if (o.reduce_group != 1) reduce->attrs.set("group", o.reduce_group);
  ir::Value* h = g->add_node("Relu", {reduce->output(0)}, 1)->output(0);
  ir::Value* e = g->add_node("Conv", {h, g->add_constant("w2", ramp(w2s, 0.6f, -0.05f)), g->add_constant("b2", ramp({8}, -0.3f, 0.1f))},
                             1, "expand")->output(0);
  ir::Node* gate = g->add_node(o.gate_tanh ? "Tanh" : "HardSigmoid", {e}, 1, "gate");
  if (!o.gate_tanh) {
    gate->attrs.set("alpha", 1.f / 6);
    gate->attrs.set("beta", 0.5f);
  }
  g->add_output(g->add_node("Mul", {x, gate->output(0)}, 1, "scale")->output(0));
  ir::infer_types(*g);
  return g;
}

TEST(Passes, SqueezeExciteBecomesOneNode) {
  for (bool by_mean : {false, true}) {
    SCOPED_TRACE(by_mean ? "pooled by ReduceMean" : "pooled by GlobalAveragePool");
    auto g = squeeze_excite_graph({.pool_by_mean = by_mean});
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "SqueezeExcite"), 1u);
    EXPECT_EQ(count_ops(*g, "GlobalAveragePool") + count_ops(*g, "ReduceMean") + count_ops(*g, "Conv") +
                  count_ops(*g, "FusedConv") + count_ops(*g, "Relu") + count_ops(*g, "HardSigmoid"),
              0u);
    EXPECT_EQ(count_ops(*g, "Mul"), 1u);  // the gates' Mul stays
  }

  // The block by hand: each channel's mean, the reduction, the gates.
  const Tensor x = ramp({2, 8, 3, 4}, -1.f, 0.013f);
  const Tensor w1 = ramp({3, 8, 1, 1}, -0.4f, 0.037f), b1 = ramp({3}, 0.1f, -0.2f);
  const Tensor w2 = ramp({8, 3, 1, 1}, 0.6f, -0.05f), b2 = ramp({8}, -0.3f, 0.1f);
  Session s = Session::from_graph(squeeze_excite_graph());
  const Tensor y = s.run({{"x", x}})[0];
  for (int64_t n = 0; n < 2; ++n) {
    double mean[8] = {}, h[3];
    for (int64_t c = 0; c < 8; ++c)
      for (int64_t p = 0; p < 12; ++p) mean[c] += x.data<float>()[(n * 8 + c) * 12 + p] / 12.0;
    for (int64_t r = 0; r < 3; ++r) {
      h[r] = b1.data<float>()[r];
      for (int64_t c = 0; c < 8; ++c) h[r] += double(w1.data<float>()[r * 8 + c]) * mean[c];
      h[r] = std::max(h[r], 0.0);
    }
    for (int64_t c = 0; c < 8; ++c) {
      double e = b2.data<float>()[c];
      for (int64_t r = 0; r < 3; ++r) e += double(w2.data<float>()[c * 3 + r]) * h[r];
      const double gate = std::min(1.0, std::max(0.0, e / 6 + 0.5));
      for (int64_t p = 0; p < 12; ++p) {
        const int64_t i = (n * 8 + c) * 12 + p;
        ASSERT_NEAR(y.data<float>()[i], x.data<float>()[i] * gate, 1e-5) << i;
      }
    }
  }
}

TEST(Passes, SqueezeExciteLookalikesStay) {
  const std::pair<const char*, SqueezeExciteOptions> cases[] = {
      {"a 3x3 reduction", {.reduce_kernel = 3}},
      {"a grouped reduction", {.reduce_group = 2, .reduced = 4}},
      {"a Tanh gate", {.gate_tanh = true}},
      {"the means also an output", {.pooled_is_output = true}},
      {"run-time weights", {.weights_are_inputs = true}},
      {"a 1-D block", {.rank = 3}},
      {"x of no known shape", {.x_shape_unknown = true}},
  };
  for (const auto& [what, o] : cases) {
    SCOPED_TRACE(what);
    auto g = squeeze_excite_graph(o);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "SqueezeExcite"), 0u);
    EXPECT_EQ(count_ops(*g, "GlobalAveragePool"), 1u);
  }
}

// x [2, 3, 4, 5] -> ReduceMean(axes, keepdims) -> y, at `opset` (axes an
// input from 18 on: a constant, or a graph input when axes_are_input).
struct SpatialMeanOptions {
  std::vector<int64_t> axes = {2, 3};
  int64_t keepdims = 0;
  int opset = 13;
  bool axes_are_input = false;
  bool width_symbolic = false;  // x's last dim a symbol
  bool rank3 = false;           // x [2, 3, 20]: a sequence's hidden axis, say
};

std::unique_ptr<ir::Graph> spatial_mean_graph(const SpatialMeanOptions& o) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = o.opset;
  ir::Value* x = g->add_input("x", DType::kFloat32, o.rank3 ? Shape{2, 3, 20} : Shape{2, 3, 4, 5});
  if (o.width_symbolic)
    x->type = ir::Type::tensor(DType::kFloat32, {ir::Dim::known(2), ir::Dim::known(3), ir::Dim::known(4),
                                                 ir::Dim::named("w")});
  std::vector<ir::Value*> inputs = {x};
  if (o.opset >= 18) {
    const int64_t n = static_cast<int64_t>(o.axes.size());
    inputs.push_back(o.axes_are_input ? g->add_input("axes", DType::kInt64, {n}) : g->add_constant("axes", ints({n}, o.axes)));
  }
  ir::Node* mean = g->add_node("ReduceMean", inputs, 1, "mean");
  if (o.opset < 18) mean->attrs.set("axes", o.axes);
  mean->attrs.set("keepdims", o.keepdims);
  g->add_output(mean->output(0));
  ir::infer_types(*g);
  return g;
}

TEST(Passes, SpatialReduceMeanBecomesGlobalAveragePool) {
  const std::pair<const char*, SpatialMeanOptions> cases[] = {
      {"keepdims 0", {}},
      {"keepdims 1", {.keepdims = 1}},
      {"negative axes, out of order", {.axes = {-1, -2}}},
      {"axes as a constant input (opset 18)", {.opset = 18}},
      {"keepdims 1, axes as an input", {.keepdims = 1, .opset = 18}},
  };
  const Tensor x = ramp({2, 3, 4, 5}, -1.f, 0.029f);
  for (const auto& [what, o] : cases) {
    SCOPED_TRACE(what);
    auto g = spatial_mean_graph(o);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "ReduceMean"), 0u);
    EXPECT_EQ(count_ops(*g, "GlobalAveragePool"), 1u);
    EXPECT_EQ(count_ops(*g, "Flatten"), o.keepdims ? 0u : 1u);
    Session s = Session::from_graph(spatial_mean_graph(o));
    const Tensor y = s.run({{"x", x}})[0];
    EXPECT_EQ(y.shape(), o.keepdims ? Shape({2, 3, 1, 1}) : Shape({2, 3}));
    for (int64_t plane = 0; plane < 6; ++plane) {
      double sum = 0;
      for (int64_t p = 0; p < 20; ++p) sum += x.data<float>()[plane * 20 + p];
      EXPECT_NEAR(y.data<float>()[plane], sum / 20, 1e-6) << plane;
    }
  }
}

TEST(Passes, ReduceMeanLookalikesStay) {
  const std::pair<const char*, SpatialMeanOptions> cases[] = {
      {"the channels too", {.axes = {1, 2, 3}}},
      {"one spatial axis", {.axes = {3}}},
      {"the batch and the plane", {.axes = {0, 2, 3}}},
      {"axes a graph input", {.opset = 18, .axes_are_input = true}},
      {"a plane of a symbolic width", {.width_symbolic = true}},
      {"rank 3", {.axes = {2}, .rank3 = true}},
  };
  for (const auto& [what, o] : cases) {
    SCOPED_TRACE(what);
    auto g = spatial_mean_graph(o);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "ReduceMean"), 1u);
    EXPECT_EQ(count_ops(*g, "GlobalAveragePool"), 0u);
  }
}

// LayerNorm as exporters wrote it before opset 17, over the trailing `axes` of x [2, 3, 4].
std::unique_ptr<ir::Graph> layer_norm_graph(std::vector<int64_t> axes, bool affine, bool square_by_mul,
                                            Shape gamma_shape = {4}) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 3, 4});
  auto mean_of = [&](ir::Value* v) {
    ir::Node* n = g->add_node("ReduceMean", {v}, 1);
    n->attrs.set("axes", axes);
    return n->output(0);
  };
  ir::Value* d = g->add_node("Sub", {x, mean_of(x)}, 1)->output(0);
  ir::Value* sq = square_by_mul ? mul(*g, d, d) : g->add_node("Pow", {d, scalar_f32(*g, "two", 2.f)}, 1)->output(0);
  ir::Value* var = g->add_node("Add", {mean_of(sq), scalar_f32(*g, "eps", 1e-3f)}, 1)->output(0);
  ir::Value* y = g->add_node("Div", {d, g->add_node("Sqrt", {var}, 1)->output(0)}, 1)->output(0);
  if (affine) {
    y = mul(*g, y, g->add_constant("gamma", ramp(gamma_shape, 0.5f, 0.25f)));
    y = g->add_node("Add", {y, g->add_constant("beta", ramp({4}, -1.f, 0.5f))}, 1)->output(0);
  }
  g->add_output(y);
  ir::infer_types(*g);
  return g;
}

void expect_layer_norm_values(std::unique_ptr<ir::Graph> g, int64_t row, bool affine) {
  Session s = Session::from_graph(std::move(g));
  Tensor x = ramp({2, 3, 4}, -2.f, 0.37f);
  for (int64_t i = 0; i < 24; i += 5) x.data<float>()[i] *= 3.f;  // uneven rows
  Tensor y = s.run({{"x", x}})[0];
  for (int64_t r = 0; r < 24 / row; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < row; ++i) mean += x.data<float>()[r * row + i] / double(row);
    for (int64_t i = 0; i < row; ++i) var += std::pow(x.data<float>()[r * row + i] - mean, 2) / double(row);
    for (int64_t i = 0; i < row; ++i) {
      double want = (x.data<float>()[r * row + i] - mean) / std::sqrt(var + 1e-3);
      if (affine) want = want * (0.5 + 0.25 * double(i % 4)) + (-1.0 + 0.5 * double(i % 4));
      EXPECT_NEAR(y.data<float>()[r * row + i], want, 1e-5) << r << "," << i;
    }
  }
}

TEST(Passes, DecomposedLayerNormBecomesOneNode) {
  auto g = layer_norm_graph({-1}, true, false);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  ASSERT_EQ(g->nodes().size(), 1u);
  const ir::Node& ln = *g->nodes()[0];
  EXPECT_EQ(ln.op_type, "LayerNormalization");
  EXPECT_EQ(ln.attrs.get_int("axis", 0), 2);
  EXPECT_FLOAT_EQ(ln.attrs.get_float("epsilon", 0.f), 1e-3f);
  expect_layer_norm_values(layer_norm_graph({-1}, true, false), 4, true);
  // Over the last two axes, squared by Mul, without gamma and beta (a scale of ones is made).
  auto plain = layer_norm_graph({1, 2}, false, true);
  passes::optimize(*plain, 2, runtime::reference_evaluator());
  ASSERT_EQ(count_ops(*plain, "LayerNormalization"), 1u);
  EXPECT_EQ(plain->nodes()[0]->attrs.get_int("axis", 0), 1);
  expect_layer_norm_values(layer_norm_graph({1, 2}, false, true), 12, false);
}

TEST(Passes, LayerNormLookalikesAreLeftAlone) {
  auto leading = layer_norm_graph({0}, true, false);  // statistics over the batch, not a row
  passes::optimize(*leading, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*leading, "LayerNormalization"), 0u);
  EXPECT_EQ(count_ops(*leading, "ReduceMean"), 2u);
  // gamma of 2 values for rows of 4: not one per normalized element, so it stays a Mul.
  auto halves = layer_norm_graph({-1}, true, false, {2, 1, 1});
  passes::optimize(*halves, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*halves, "LayerNormalization"), 1u);
  EXPECT_EQ(count_ops(*halves, "Mul"), 1u);
  // Leading 1s are fine: [1, 4] is one value per element.
  auto leading_ones = layer_norm_graph({-1}, true, false, {1, 4});
  passes::optimize(*leading_ones, 2, runtime::reference_evaluator());
  EXPECT_EQ(leading_ones->nodes().size(), 1u);
}

// RMSNorm as PyTorch exports LLaMA's and T5's, over the trailing `axes` of
// x [2, 3, 8]: the square (Pow or Mul), its mean, + eps, Sqrt, then x times
// 1 / r (Div), x times Reciprocal(r), or x / r; gamma on either side.
enum class RmsInverse { kDivOne, kReciprocal, kDivide };
std::unique_ptr<ir::Graph> rms_norm_graph(std::vector<int64_t> axes, RmsInverse inverse, bool square_by_mul,
                                          bool gamma_first, Shape gamma_shape = {8}, bool square_read_twice = false) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 3, 8});
  ir::Value* sq = square_by_mul ? mul(*g, x, x) : g->add_node("Pow", {x, scalar_f32(*g, "two", 2.f)}, 1)->output(0);
  ir::Node* mean = g->add_node("ReduceMean", {sq}, 1);
  mean->attrs.set("axes", axes);
  ir::Value* r = g->add_node("Sqrt", {g->add_node("Add", {mean->output(0), scalar_f32(*g, "eps", 1e-3f)}, 1)->output(0)}, 1)
                     ->output(0);
  ir::Value* y = nullptr;
  if (inverse == RmsInverse::kDivide) y = g->add_node("Div", {x, r}, 1)->output(0);
  else if (inverse == RmsInverse::kReciprocal) y = mul(*g, x, g->add_node("Reciprocal", {r}, 1)->output(0));
  else y = mul(*g, g->add_node("Div", {scalar_f32(*g, "one", 1.f), r}, 1)->output(0), x);
  if (!gamma_shape.empty()) {
    ir::Value* gamma = g->add_constant("gamma", ramp(gamma_shape, 0.5f, 0.25f));
    y = gamma_first ? mul(*g, gamma, y) : mul(*g, y, gamma);
  }
  g->add_output(y);
  if (square_read_twice) g->add_output(g->add_node("Neg", {sq}, 1)->output(0));
  ir::infer_types(*g);
  return g;
}

// y against x / sqrt(mean(x^2) + 1e-3) [* gamma] in double, rows of `row`
// (gamma: 0.5 + 0.25 i per element i of a row, or with per_item per batch
// item of 24 values).
void expect_rms_norm_values(std::unique_ptr<ir::Graph> g, int64_t row, bool affine, bool per_item = false) {
  Session s = Session::from_graph(std::move(g));
  Tensor x = ramp({2, 3, 8}, -2.f, 0.37f);
  for (int64_t i = 0; i < 48; i += 5) x.data<float>()[i] *= 3.f;  // uneven rows
  Tensor y = s.run({{"x", x}})[0];
  for (int64_t r = 0; r < 48 / row; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < row; ++i) ms += std::pow(x.data<float>()[r * row + i], 2) / double(row);
    for (int64_t i = 0; i < row; ++i) {
      double want = x.data<float>()[r * row + i] / std::sqrt(ms + 1e-3);
      if (affine) want *= 0.5 + 0.25 * double(per_item ? (r * row + i) / 24 : i % 8);
      EXPECT_NEAR(y.data<float>()[r * row + i], want, 1e-5 * (1 + std::fabs(want))) << r << "," << i;
    }
  }
}

TEST(Passes, DecomposedRmsNormBecomesOneNode) {
  for (RmsInverse inverse : {RmsInverse::kDivOne, RmsInverse::kReciprocal, RmsInverse::kDivide})
    for (bool by_mul : {false, true})
      for (bool gamma_first : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "inverse " << static_cast<int>(inverse) << " square by Mul " << by_mul
                                          << " gamma first " << gamma_first);
        auto g = rms_norm_graph({-1}, inverse, by_mul, gamma_first);
        passes::optimize(*g, 2, runtime::reference_evaluator());
        ASSERT_EQ(g->nodes().size(), 1u);
        const ir::Node& n = *g->nodes()[0];
        EXPECT_EQ(n.op_type, "RMSNormalization");
        EXPECT_EQ(n.attrs.get_int("axis", 0), 2);
        EXPECT_FLOAT_EQ(n.attrs.get_float("epsilon", 0.f), 1e-3f);
        expect_rms_norm_values(rms_norm_graph({-1}, inverse, by_mul, gamma_first), 8, true);
      }
  // Over the last two axes, without gamma (a scale of ones is made).
  auto plain = rms_norm_graph({1, 2}, RmsInverse::kDivOne, false, false, {});
  passes::optimize(*plain, 2, runtime::reference_evaluator());
  ASSERT_EQ(count_ops(*plain, "RMSNormalization"), 1u);
  EXPECT_EQ(plain->nodes()[0]->attrs.get_int("axis", 0), 1);
  expect_rms_norm_values(rms_norm_graph({1, 2}, RmsInverse::kDivOne, false, false, {}), 24, false);
}

TEST(Passes, RmsNormLookalikesAreLeftAlone) {
  auto leading = rms_norm_graph({0}, RmsInverse::kDivOne, false, false);  // over the batch, not a row
  passes::optimize(*leading, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*leading, "RMSNormalization"), 0u);
  EXPECT_EQ(count_ops(*leading, "ReduceMean"), 1u);
  // The square read elsewhere too: it must stay.
  auto shared = rms_norm_graph({-1}, RmsInverse::kDivOne, false, false, {8}, true);
  passes::optimize(*shared, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*shared, "RMSNormalization"), 0u);
  // gamma of 2 values for rows of 8: not one per normalized element, so it stays a Mul.
  auto halves = rms_norm_graph({-1}, RmsInverse::kDivOne, false, false, {2, 1, 1});
  passes::optimize(*halves, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*halves, "RMSNormalization"), 1u);
  EXPECT_EQ(count_ops(*halves, "Mul"), 1u);
  expect_rms_norm_values(rms_norm_graph({-1}, RmsInverse::kDivOne, false, false, {2, 1, 1}), 8, true, true);
  // A square by a power near 2 or a numerator near 1 is not the RMSNorm's.
  for (const char* near : {"pow", "one"}) {
    auto g = rms_norm_graph({-1}, RmsInverse::kDivOne, false, false);
    for (const auto& v : g->values())
      if (v->is_constant() && v->name == (std::string(near) == "pow" ? "two" : "one"))
        v->constant->data<float>()[0] += 1e-5f;
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "RMSNormalization"), 0u) << near;
  }
}

// GroupNorm(groups, 4) as PyTorch exports it, over x [2, 4, length]: Reshape to
// [2, groups, -1], InstanceNormalization (scale ones, bias zeros, eps 1e-3),
// Reshape back to Shape(x), then Mul by gamma (0.5 + 0.25 c, of
// `gamma_shape`) and Add of beta (0.1 c - 0.2, [4, 1]) where asked. With
// `read_twice`, the normalization's output is also the graph's.
struct GroupNormGraph {
  int64_t groups = 4, length = 6;
  Shape gamma_shape{4, 1};
  bool mul = true, add = true, read_twice = false, gamma_input = false, add_first = false;
};
std::unique_ptr<ir::Graph> group_norm_graph(const GroupNormGraph& o) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 4, o.length});
  ir::Value* grouped = g->add_node("Reshape", {x, g->add_constant("target", ints({3}, {2, o.groups, -1}))}, 1)->output(0);
  Tensor ones(DType::kFloat32, {o.groups}), zeros(DType::kFloat32, {o.groups});
  std::fill(ones.data<float>(), ones.data<float>() + o.groups, 1.f);
  std::fill(zeros.data<float>(), zeros.data<float>() + o.groups, 0.f);
  ir::Node* norm = g->add_node("InstanceNormalization", {grouped, g->add_constant("ones", ones), g->add_constant("zeros", zeros)}, 1);
  norm->attrs.set("epsilon", 1e-3f);
  ir::Value* y = g->add_node("Reshape", {norm->output(0), g->add_node("Shape", {x}, 1)->output(0)}, 1)->output(0);
  const auto add_beta = [&] { y = g->add_node("Add", {y, g->add_constant("beta", ramp({4, 1}, -0.2f, 0.1f))}, 1)->output(0); };
  if (o.add && o.add_first) add_beta();
  if (o.mul)
    y = mul(*g, y, o.gamma_input ? g->add_input("gamma", DType::kFloat32, o.gamma_shape)
                                 : g->add_constant("gamma", ramp(o.gamma_shape, 0.5f, 0.25f)));
  if (o.add && !o.add_first) add_beta();
  g->add_output(y);
  if (o.read_twice) g->add_output(norm->output(0));
  ir::infer_types(*g);
  return g;
}

// The first output of `g` against GroupNorm(groups, 4) with the affine by
// hand, in double (gamma 0.5 + 0.25 c, or 0.5 for all with one_gamma).
void expect_group_norm_values(std::unique_ptr<ir::Graph> g, bool mul, bool add, bool one_gamma = false,
                              int64_t groups = 4) {
  Session s = Session::from_graph(std::move(g));
  Tensor x = ramp({2, 4, 6}, -2.f, 0.37f);
  for (int64_t i = 0; i < 48; i += 5) x.data<float>()[i] *= 3.f;  // uneven planes
  const Tensor y = s.run({{"x", x}})[0];
  const int64_t count = 4 / groups * 6;  // a group's values
  for (int64_t ng = 0; ng < 2 * groups; ++ng) {
    const float* xg = x.data<float>() + ng * count;
    double mean = 0, variance = 0;
    for (int64_t i = 0; i < count; ++i) mean += xg[i] / static_cast<double>(count);
    for (int64_t i = 0; i < count; ++i) variance += (xg[i] - mean) * (xg[i] - mean) / static_cast<double>(count);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t c = (ng * count + i) / 6 % 4;
      double want = (xg[i] - mean) / std::sqrt(variance + 1e-3);
      if (mul) want *= one_gamma ? 0.5 : 0.5 + 0.25 * static_cast<double>(c);
      if (add) want += 0.1 * static_cast<double>(c) - 0.2;
      EXPECT_NEAR(y.data<float>()[ng * count + i], want, 1e-5 * (1 + std::fabs(want))) << ng << "," << i;
    }
  }
}

TEST(Passes, InstanceNormTakesItsPerChannelAffine) {
  const std::pair<bool, bool> affines[] = {{true, true}, {true, false}, {false, true}};
  for (const auto& [with_mul, with_add] : affines)
    for (const Shape& gamma_shape : {Shape{4, 1}, Shape{1, 4, 1}, Shape{1}}) {
      SCOPED_TRACE(::testing::Message() << "Mul " << with_mul << " Add " << with_add << " gamma rank " << gamma_shape.size());
      GroupNormGraph o;
      o.mul = with_mul;
      o.add = with_add;
      o.gamma_shape = gamma_shape;
      auto g = group_norm_graph(o);
      passes::optimize(*g, 2, runtime::reference_evaluator());
      ASSERT_EQ(g->nodes().size(), 1u);
      EXPECT_EQ(g->nodes()[0]->op_type, "InstanceNormalization");
      expect_group_norm_values(group_norm_graph(o), with_mul, with_add, gamma_shape == Shape{1});
    }
  // The Add before the Mul: both fold, over two rounds, into (x_n + beta) * gamma.
  GroupNormGraph add_first;
  add_first.add_first = true;
  auto g = group_norm_graph(add_first);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  ASSERT_EQ(g->nodes().size(), 1u);
  Session s = Session::from_graph(group_norm_graph(add_first));
  const Tensor x = ramp({2, 4, 6}, -2.f, 0.37f);
  const Tensor y = s.run({{"x", x}})[0];
  for (int64_t p = 0; p < 8; ++p) {
    const float* xp = x.data<float>() + p * 6;
    double mean = 0, variance = 0;
    for (int64_t i = 0; i < 6; ++i) mean += xp[i] / 6.0;
    for (int64_t i = 0; i < 6; ++i) variance += (xp[i] - mean) * (xp[i] - mean) / 6.0;
    const double c = static_cast<double>(p % 4);
    for (int64_t i = 0; i < 6; ++i) {
      const double want = ((xp[i] - mean) / std::sqrt(variance + 1e-3) + 0.1 * c - 0.2) * (0.5 + 0.25 * c);
      EXPECT_NEAR(y.data<float>()[p * 6 + i], want, 1e-5 * (1 + std::fabs(want))) << p << "," << i;
    }
  }
}

// With fewer groups than channels, the export (fold, InstanceNormalization,
// unfold) becomes one GroupNormalization (fuse_group_norm.cc), which takes
// the Mul and the Add as InstanceNormalization does; at level 1 all stay.
TEST(Passes, GroupNormOfSeveralChannelsBecomesOneNode) {
  for (int64_t groups : {2, 1}) {
    SCOPED_TRACE(::testing::Message() << groups << " groups");
    GroupNormGraph grouped;
    grouped.groups = groups;
    auto g = group_norm_graph(grouped);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    ASSERT_EQ(g->nodes().size(), 1u);
    const ir::Node& norm = *g->nodes()[0];
    EXPECT_EQ(norm.op_type, "GroupNormalization");
    EXPECT_EQ(norm.opset, 21);
    EXPECT_EQ(norm.attrs.get_int("num_groups", 0), groups);
    EXPECT_FLOAT_EQ(norm.attrs.get_float("epsilon", 0.f), 1e-3f);
    expect_group_norm_values(group_norm_graph(grouped), true, true, false, groups);
    auto level1 = group_norm_graph(grouped);
    passes::optimize(*level1, 1, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*level1, "GroupNormalization"), 0u);
  }
  // The InstanceNormalization's own scale and bias per group, spread over its channels.
  GroupNormGraph scaled;
  scaled.groups = 2;
  scaled.mul = scaled.add = false;
  auto g = group_norm_graph(scaled);
  for (const auto& v : g->values())
    if (v->is_constant() && (v->name == "ones" || v->name == "zeros")) {
      v->constant->data<float>()[0] = v->name == "ones" ? 2.f : 0.5f;  // group 0: x_n * 2 + 0.5
    }
  Session s = Session::from_graph(std::move(g));
  const Tensor x = ramp({2, 4, 6}, -2.f, 0.37f);
  const Tensor y = s.run({{"x", x}})[0];
  for (int64_t ng = 0; ng < 4; ++ng) {
    const float* xg = x.data<float>() + ng * 12;
    double mean = 0, variance = 0;
    for (int64_t i = 0; i < 12; ++i) mean += xg[i] / 12.0;
    for (int64_t i = 0; i < 12; ++i) variance += (xg[i] - mean) * (xg[i] - mean) / 12.0;
    for (int64_t i = 0; i < 12; ++i) {
      double want = (xg[i] - mean) / std::sqrt(variance + 1e-3);
      if (ng % 2 == 0) want = want * 2 + 0.5;
      EXPECT_NEAR(y.data<float>()[ng * 12 + i], want, 1e-5 * (1 + std::fabs(want))) << ng << "," << i;
    }
  }
}

TEST(Passes, InstanceNormAffineLookalikesStay) {
  // Three groups of four channels' values (a Reshape the channels do not
  // split along): not a GroupNorm, so the Reshapes, the Mul and the Add stay.
  GroupNormGraph misfit;
  misfit.groups = 3;
  auto g = group_norm_graph(misfit);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "GroupNormalization"), 0u);
  EXPECT_EQ(count_ops(*g, "Mul"), 1u);
  EXPECT_EQ(count_ops(*g, "Add"), 1u);
  // gamma along the last axis ([6], [1, 6], and [4] over 4 positions, as
  // many as the channels): one per position, not per channel.
  for (const Shape& per_position : {Shape{6}, Shape{1, 6}, Shape{4}}) {
    GroupNormGraph o;
    o.gamma_shape = per_position;
    o.length = per_position.back();
    o.add = false;
    auto h = group_norm_graph(o);
    passes::optimize(*h, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*h, "Mul"), 1u) << "gamma rank " << per_position.size();
  }
  // gamma of one value per batch item ([2, 1, 1]): the Mul stays.
  GroupNormGraph per_item;
  per_item.gamma_shape = {2, 1, 1};
  per_item.add = false;
  auto items = group_norm_graph(per_item);
  passes::optimize(*items, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*items, "Mul"), 1u);
  // gamma from the graph's inputs, not a constant: the Mul stays, the Add after it too.
  GroupNormGraph input;
  input.gamma_input = true;
  auto k = group_norm_graph(input);
  passes::optimize(*k, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*k, "Mul"), 1u);
  EXPECT_EQ(count_ops(*k, "Add"), 1u);
  // The normalization's output read elsewhere too (a graph output): both stay.
  GroupNormGraph twice;
  twice.read_twice = true;
  auto t = group_norm_graph(twice);
  passes::optimize(*t, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*t, "Mul"), 1u);
  EXPECT_EQ(count_ops(*t, "Add"), 1u);
  expect_group_norm_values(group_norm_graph(twice), true, true);
}

// A ConvTranspose over x [2, 3, 4, 5] (C_out 4, kernel and stride `side`,
// `attrs` besides), with or without bias, then a Neg (its output is not the graph's).
std::unique_ptr<ir::Graph> conv_transpose_graph(int64_t side, bool bias,
                                                std::vector<std::pair<const char*, ir::AttrValue>> attrs = {},
                                                int64_t kernel = 0) {
  if (kernel == 0) kernel = side;
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 3, 4, 5});
  std::vector<ir::Value*> in{x, g->add_constant("w", ramp({3, 4, kernel, kernel}, -1.f, 0.037f))};
  if (bias) in.push_back(g->add_constant("b", ramp({4}, 0.5f, -0.3f)));
  ir::Node* ct = g->add_node("ConvTranspose", in, 1, "up");
  ct->attrs.set("strides", std::vector<int64_t>{side, side});
  for (const auto& [name, v] : attrs) ct->attrs.set(name, v);
  g->add_output(g->add_node("Neg", {ct->output(0)}, 1)->output(0));
  ir::infer_types(*g);
  return g;
}

TEST(Passes, ConvTransposeOfNonOverlappingPatchesBecomesAConvAndDepthToSpace) {
  for (int64_t side : {2, 3})
    for (bool bias : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "side " << side << " bias " << bias);
      auto g = conv_transpose_graph(side, bias);
      passes::optimize(*g, 2, runtime::reference_evaluator());
      EXPECT_EQ(count_ops(*g, "ConvTranspose"), 0u);
      EXPECT_EQ(count_ops(*g, "Conv"), 1u);
      EXPECT_EQ(count_ops(*g, "DepthToSpace"), 1u);
      // Values against the transposed convolution by hand: each input pixel's patch.
      Session s = Session::from_graph(conv_transpose_graph(side, bias));
      const Tensor x = ramp({2, 3, 4, 5}, -2.f, 0.11f), w = ramp({3, 4, side, side}, -1.f, 0.037f);
      const Tensor y = s.run({{"x", x}})[0];
      ASSERT_EQ(y.shape(), (Shape{2, 4, 4 * side, 5 * side}));
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t o = 0; o < 4; ++o)
          for (int64_t h = 0; h < 4 * side; ++h)
            for (int64_t wi = 0; wi < 5 * side; ++wi) {
              double want = bias ? 0.5 - 0.3 * double(o) : 0.0;
              for (int64_t c = 0; c < 3; ++c)
                want += double(x.data<float>()[((n * 3 + c) * 4 + h / side) * 5 + wi / side]) *
                        double(w.data<float>()[((c * 4 + o) * side + h % side) * side + wi % side]);
              ASSERT_NEAR(y.data<float>()[((n * 4 + o) * 4 * side + h) * 5 * side + wi], -want, 1e-5) << n << o << h << wi;
            }
    }
}

TEST(Passes, ConvTransposeLookalikesAreLeftAlone) {
  using Attrs = std::vector<std::pair<const char*, ir::AttrValue>>;
  const std::pair<const char*, Attrs> cases[] = {
      {"overlapping patches", {}},  // kernel 4, stride 2 (below)
      {"padding", {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}},
      {"output padding", {{"output_padding", std::vector<int64_t>{1, 1}}}},
      {"dilation", {{"dilations", std::vector<int64_t>{2, 2}}}},
      {"output shape", {{"output_shape", std::vector<int64_t>{8, 10}}}},
      {"auto_pad SAME_UPPER", {{"auto_pad", std::string("SAME_UPPER")}}},
  };
  for (const auto& [what, attrs] : cases) {
    SCOPED_TRACE(what);
    auto g = std::string(what) == "overlapping patches" ? conv_transpose_graph(2, true, attrs, 4)
                                                         : conv_transpose_graph(2, true, attrs);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "ConvTranspose"), 1u);
    EXPECT_EQ(count_ops(*g, "DepthToSpace"), 0u);
  }
}

// x [2, A * B, 4, 6] (a 1x1 convolution's output in YOLO's heads) viewed
// as [2, A, B, 4, 6] and permuted by `perm` (YOLO: B last), then a Neg; or
// with the split read twice, by the Transpose and by a second output.
std::unique_ptr<ir::Graph> channel_split_graph(std::vector<int64_t> split, std::vector<int64_t> perm = {0, 1, 3, 4, 2},
                                               bool split_read_twice = false, bool unknown_hw = false) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 15, 4, 6});
  if (unknown_hw)
    x->type = ir::Type::tensor(DType::kFloat32, {ir::Dim::known(2), ir::Dim::known(15), ir::Dim::unknown(), ir::Dim::unknown()});
  ir::Value* target = g->add_constant("target", testing::i64({static_cast<int64_t>(split.size())}, split));
  ir::Node* reshape = g->add_node("Reshape", {x, target}, 1, "view");
  ir::Node* t = g->add_node("Transpose", {reshape->output(0)}, 1, "permute");
  t->attrs.set("perm", perm);
  g->add_output(g->add_node("Neg", {t->output(0)}, 1)->output(0));
  if (split_read_twice) g->add_output(reshape->output(0));
  ir::infer_types(*g);
  return g;
}

// The advisor of the session, as the pass asks it: yes (or `pays`) to the
// channels-last probe, no to anything else.
passes::FusionAdvisor channels_last_advisor(bool pays = true) {
  return [pays](const ir::Node& probe) { return probe.domain == "anvil" && probe.op_type == "ChannelsLastTranspose" && pays; };
}

TEST(Passes, ChannelSplitMovedLastBecomesChannelsLastFirst) {
  for (const std::vector<int64_t>& split : {std::vector<int64_t>{2, 3, 5, 4, 6}, std::vector<int64_t>{0, 5, 3, 4, 6},
                                            std::vector<int64_t>{-1, 3, 5, 4, 6}}) {
    SCOPED_TRACE(::testing::Message() << split[0] << "," << split[1] << "," << split[2]);
    auto g = channel_split_graph(split);
    passes::optimize(*g, 3, runtime::reference_evaluator(), channels_last_advisor());
    EXPECT_EQ(count_ops(*g, "Transpose"), 2u);
    EXPECT_EQ(count_ops(*g, "Reshape"), 1u);
    for (const auto& n : g->nodes())
      if (!n->dead && n->op_type == "Transpose") {
        const std::vector<int64_t> p = n->attrs.get_ints("perm");
        EXPECT_TRUE(p == (std::vector<int64_t>{0, 2, 3, 1}) || p == (std::vector<int64_t>{0, 3, 1, 2, 4}));
      }
    auto unchanged = channel_split_graph(split);
    passes::optimize(*unchanged, 2, runtime::reference_evaluator(), channels_last_advisor());  // level 3 only
    EXPECT_EQ(count_ops(*unchanged, "Transpose"), 1u);
    auto declined = channel_split_graph(split);
    passes::optimize(*declined, 3, runtime::reference_evaluator(), channels_last_advisor(false));  // the image arrives plain
    EXPECT_EQ(count_ops(*declined, "Transpose"), 1u);
    // Values by hand: y[n, a, h, w, b] = -x[n, a * B + b, h, w].
    const int64_t a_count = split[1] == 5 ? 5 : 3, b_count = 15 / a_count;
    Session s = Session::from_graph(channel_split_graph(split));
    const Tensor x = ramp({2, 15, 4, 6}, -3.f, 0.0137f);
    const Tensor y = s.run({{"x", x}})[0];
    ASSERT_EQ(y.shape(), (Shape{2, a_count, 4, 6, b_count}));
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t a = 0; a < a_count; ++a)
        for (int64_t h = 0; h < 4; ++h)
          for (int64_t w = 0; w < 6; ++w)
            for (int64_t b = 0; b < b_count; ++b)
              ASSERT_EQ(y.data<float>()[(((n * a_count + a) * 4 + h) * 6 + w) * b_count + b],
                        -x.data<float>()[((n * 15 + a * b_count + b) * 4 + h) * 6 + w])
                  << n << a << h << w << b;
  }
}

TEST(Passes, ChannelSplitLookalikesAreLeftAlone) {
  const std::tuple<const char*, std::vector<int64_t>, std::vector<int64_t>, bool, bool> cases[] = {
      {"another permutation", {2, 3, 5, 4, 6}, {0, 1, 3, 2, 4}, false, false},
      {"the split's outer part last", {2, 3, 5, 4, 6}, {0, 2, 3, 4, 1}, false, false},
      {"a split of the height", {2, 15, 2, 2, 6}, {0, 1, 3, 4, 2}, false, false},
      {"the batch folded into the split", {1, 6, 5, 4, 6}, {0, 1, 3, 4, 2}, false, false},
      {"the split read twice", {2, 3, 5, 4, 6}, {0, 1, 3, 4, 2}, true, false},
      // [2, 3, 5, ?, ?] from [2, 15, ?, ?]: the view's last two dims are the
      // input's width, then its height, unknown both, so not surely H, W
      {"unknown height and width swapped", {0, 3, 5, 0, -1}, {0, 1, 3, 4, 2}, false, true},
  };
  for (const auto& [what, split, perm, twice, unknown_hw] : cases) {
    SCOPED_TRACE(what);
    auto g = channel_split_graph(split, perm, twice, unknown_hw);
    passes::optimize(*g, 3, runtime::reference_evaluator(), channels_last_advisor());
    EXPECT_EQ(count_ops(*g, "Transpose"), 1u);
    EXPECT_EQ(count_ops(*g, "Reshape"), 1u);
  }
}

TEST(Passes, ResidualJoinsAFusedMatMulReadFromAFile) {
  // anvil optimize writes FusedMatMul with three inputs; a later residual Add must not write past them.
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 4});
  ir::Node* fm = g->add_node("FusedMatMul", {x, g->add_constant("w", ramp({4, 3}, -1.f, 0.25f)),
                                             g->add_constant("b", ramp({3}, 0.5f, -1.f))}, 1);
  fm->domain = "anvil";
  g->add_output(g->add_node("Add", {fm->output(0), g->add_input("r", DType::kFloat32, {2, 3})}, 1)->output(0));
  ir::infer_types(*g);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0]->input(3), g->find_value("r"));
}

}  // namespace
}  // namespace anvil

namespace anvil {
namespace {

// softmax(x + mask, axis) with x [2, 3, 4] and a padding mask [2, 1, 4].
std::unique_ptr<ir::Graph> masked_softmax_graph(int64_t axis, bool sum_is_output) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 3, 4});
  ir::Value* mask = g->add_input("mask", DType::kFloat32, {2, 1, 4});
  ir::Value* sum = g->add_node("Add", {x, mask}, 1)->output(0);
  ir::Node* softmax = g->add_node("Softmax", {sum}, 1, "softmax");
  softmax->attrs.set("axis", axis);
  g->add_output(softmax->output(0));
  if (sum_is_output) g->add_output(sum);
  return g;
}

TEST(Passes, MaskedSumBeforeSoftmaxBecomesOneNode) {
  auto g = masked_softmax_graph(-1, false);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0]->op_type, "MaskedSoftmax");
  EXPECT_EQ(g->nodes()[0]->domain, "anvil");

  Session s = Session::from_graph(masked_softmax_graph(-1, false));
  Tensor x(DType::kFloat32, {2, 3, 4}), mask(DType::kFloat32, {2, 1, 4});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  const float mask_values[] = {0, 0, -1e4f, -1e4f, 0, -1e4f, 0, 0};
  for (int i = 0; i < 8; ++i) mask.data<float>()[i] = mask_values[i];
  std::vector<Tensor> out = s.run({{"x", x}, {"mask", mask}});
  for (int64_t row = 0; row < 6; ++row) {
    const int64_t b = row / 3;
    double e[4], sum = 0;
    for (int j = 0; j < 4; ++j) sum += e[j] = std::exp(double(x.data<float>()[row * 4 + j]) + mask_values[b * 4 + j]);
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(out[0].data<float>()[row * 4 + j], e[j] / sum, 1e-6) << row << "," << j;
  }
}

TEST(Passes, MaskedSoftmaxLookalikesAreLeftAlone) {
  auto middle_axis = masked_softmax_graph(1, false);  // not over the last axis
  passes::optimize(*middle_axis, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*middle_axis, "MaskedSoftmax"), 0u);
  EXPECT_EQ(count_ops(*middle_axis, "Add"), 1u);
  auto sum_read_twice = masked_softmax_graph(-1, true);  // the sum is also a graph output
  passes::optimize(*sum_read_twice, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*sum_read_twice, "MaskedSoftmax"), 0u);
  auto level_one = masked_softmax_graph(-1, false);  // a fusion: level 2 and up
  passes::optimize(*level_one, 1, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*level_one, "Softmax"), 1u);
}

}  // namespace
}  // namespace anvil

namespace anvil {
namespace {

// x * sigmoid(x) on x [2, 5] (the product's operands in either order), or
// after a 1x1 convolution of x [1, 2, 2, 2] (weights 2 and -1 per channel, biases 0.5 and 1).
std::unique_ptr<ir::Graph> silu_graph(bool sigmoid_first, bool after_conv, bool sigmoid_is_output = false) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = after_conv ? g->add_input("x", DType::kFloat32, {1, 2, 2, 2}) : g->add_input("x", DType::kFloat32, {2, 5});
  if (after_conv) {
    Tensor w(DType::kFloat32, {2, 2, 1, 1}), b(DType::kFloat32, {2});
    const float wv[] = {2, 0, 0, -1};
    for (int i = 0; i < 4; ++i) w.data<float>()[i] = wv[i];
    b.data<float>()[0] = 0.5f;
    b.data<float>()[1] = 1.f;
    x = g->add_node("Conv", {x, g->add_constant("w", w), g->add_constant("b", b)}, 1)->output(0);
  }
  ir::Value* s = g->add_node("Sigmoid", {x}, 1)->output(0);
  g->add_output(g->add_node("Mul", sigmoid_first ? std::vector<ir::Value*>{s, x} : std::vector<ir::Value*>{x, s}, 1)->output(0));
  if (sigmoid_is_output) g->add_output(s);
  ir::infer_types(*g);
  return g;
}

double silu(double v) { return v / (1 + std::exp(-v)); }

TEST(Passes, SiluBecomesOneSwish) {
  for (bool sigmoid_first : {false, true}) {
    auto g = silu_graph(sigmoid_first, false);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    ASSERT_EQ(g->nodes().size(), 1u);
    EXPECT_EQ(g->nodes()[0]->op_type, "Swish");
    EXPECT_FLOAT_EQ(g->nodes()[0]->attrs.get_float("alpha", 0.f), 1.f);
    Session s = Session::from_graph(silu_graph(sigmoid_first, false));
    Tensor x(DType::kFloat32, {2, 5});
    for (int64_t i = 0; i < 10; ++i) x.data<float>()[i] = 1.5f * static_cast<float>(i) - 7.f;
    Tensor y = s.run({{"x", x}})[0];
    for (int64_t i = 0; i < 10; ++i) EXPECT_NEAR(y.data<float>()[i], silu(x.data<float>()[i]), 1e-5) << i;
  }
}

TEST(Passes, ConvThenSiluBecomesOneFusedConv) {
  auto g = silu_graph(true, true);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0]->op_type, "FusedConv");
  EXPECT_EQ(g->nodes()[0]->attrs.get_string("activation", ""), "Swish");
  Session s = Session::from_graph(silu_graph(true, true));
  Tensor x(DType::kFloat32, {1, 2, 2, 2});
  for (int64_t i = 0; i < 8; ++i) x.data<float>()[i] = 0.75f * static_cast<float>(i) - 3.f;
  Tensor y = s.run({{"x", x}})[0];
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(y.data<float>()[i], silu(2.0 * x.data<float>()[i] + 0.5), 1e-5) << i;
    EXPECT_NEAR(y.data<float>()[4 + i], silu(-1.0 * x.data<float>()[4 + i] + 1.0), 1e-5) << i;
  }
}

// Conv -> Relu with weights known only at run time (graph inputs, as
// training feeds them): fused where both sides are whole channel blocks (16
// into 16), left apart for a first convolution's 3 input channels or 2
// output channels (oneDNN's im2col GEMM ran the fused ReLU 2x slower). The
// graph computes relu(conv) with the weights given at run time, against
// values computed here.
TEST(Passes, ConvWithRunTimeWeightsFusesItsReluOverWholeChannelBlocks) {
  for (const auto& [in, out] : {std::pair<int64_t, int64_t>{3, 16}, {16, 2}, {16, 16}}) {
    const bool fuses = in == 16 && out == 16;
    auto make = [in = in, out = out] {
      auto g = std::make_unique<ir::Graph>();
      g->opsets[""] = 13;
      ir::Value* x = g->add_input("x", DType::kFloat32, {1, in, 2, 2});
      ir::Value* w = g->add_input("w", DType::kFloat32, {out, in, 1, 1});
      g->add_output(g->add_node("Relu", {g->add_node("Conv", {x, w}, 1)->output(0)}, 1)->output(0));
      ir::infer_types(*g);
      return g;
    };
    SCOPED_TRACE(std::to_string(in) + " -> " + std::to_string(out));
    auto g = make();
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "FusedConv"), fuses ? 1u : 0u);
    EXPECT_EQ(count_ops(*g, "Relu"), fuses ? 0u : 1u);
    Tensor x(DType::kFloat32, {1, in, 2, 2}), w(DType::kFloat32, {out, in, 1, 1});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.5f * static_cast<float>(i % 7) - 1.f;
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = i % 3 ? 0.25f : -0.5f;
    Tensor y = Session::from_graph(make()).run({{"x", x}, {"w", w}})[0];
    for (int64_t o = 0; o < out; ++o)
      for (int64_t p = 0; p < 4; ++p) {
        double sum = 0;
        for (int64_t c = 0; c < in; ++c)
          sum += static_cast<double>(x.data<float>()[c * 4 + p]) * w.data<float>()[o * in + c];
        EXPECT_NEAR(y.data<float>()[o * 4 + p], std::max(0.0, sum), 1e-5) << o << "," << p;
      }
  }
}

TEST(Passes, SiluLookalikesAreLeftAlone) {
  auto shared = silu_graph(true, false, true);  // the sigmoid is also an output
  passes::optimize(*shared, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*shared, "Swish"), 0u);
  // y * sigmoid(x): not the same tensor on both sides.
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {4});
  ir::Value* y = g->add_input("y", DType::kFloat32, {4});
  g->add_output(g->add_node("Mul", {y, g->add_node("Sigmoid", {x}, 1)->output(0)}, 1)->output(0));
  ir::infer_types(*g);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "Swish"), 0u);
  EXPECT_EQ(count_ops(*g, "ElementwiseChain"), 1u);  // sigmoid, then the product with y: a chain
}

// x * HardSigmoid(x) as PyTorch exports nn.Hardswish below opset 14 (alpha
// 1/6, beta 1/2), on x [2, 5] or after the 1x1 convolution of silu_graph.
std::unique_ptr<ir::Graph> hardswish_graph(float alpha, bool after_conv) {
  auto g = silu_graph(true, after_conv);
  for (const auto& n : g->nodes())
    if (n->op_type == "Sigmoid") {
      n->op_type = "HardSigmoid";
      n->attrs.set("alpha", alpha);
      n->attrs.set("beta", 0.5f);
    }
  ir::infer_types(*g);
  return g;
}

double hardswish(double v) { return v * std::min(1.0, std::max(0.0, v / 6 + 0.5)); }

TEST(Passes, HardSigmoidTimesItsInputBecomesOneHardSwish) {
  auto g = hardswish_graph(1.f / 6, false);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0]->op_type, "HardSwish");
  Session s = Session::from_graph(hardswish_graph(1.f / 6, false));
  Tensor x(DType::kFloat32, {2, 5});
  for (int64_t i = 0; i < 10; ++i) x.data<float>()[i] = 1.5f * static_cast<float>(i) - 7.f;  // -7 .. 6.5: both clamps
  Tensor y = s.run({{"x", x}})[0];
  for (int64_t i = 0; i < 10; ++i) EXPECT_NEAR(y.data<float>()[i], hardswish(x.data<float>()[i]), 1e-5) << i;

  auto conv = hardswish_graph(1.f / 6, true);
  passes::optimize(*conv, 2, runtime::reference_evaluator());
  ASSERT_EQ(conv->nodes().size(), 1u);
  EXPECT_EQ(conv->nodes()[0]->op_type, "FusedConv");
  EXPECT_EQ(conv->nodes()[0]->attrs.get_string("activation", ""), "HardSwish");
  Session sc = Session::from_graph(hardswish_graph(1.f / 6, true));
  Tensor xc(DType::kFloat32, {1, 2, 2, 2});
  for (int64_t i = 0; i < 8; ++i) xc.data<float>()[i] = 1.5f * static_cast<float>(i) - 5.f;
  Tensor yc = sc.run({{"x", xc}})[0];
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(yc.data<float>()[i], hardswish(2.0 * xc.data<float>()[i] + 0.5), 1e-5) << i;
    EXPECT_NEAR(yc.data<float>()[4 + i], hardswish(-1.0 * xc.data<float>()[4 + i] + 1.0), 1e-5) << i;
  }
}

TEST(Passes, HardSigmoidOfAnotherSlopeStaysApart) {
  auto g = hardswish_graph(0.2f, false);  // ONNX's default alpha: x * HardSigmoid(x) is not HardSwish
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "HardSwish"), 0u);
  Session s = Session::from_graph(hardswish_graph(0.2f, false));
  Tensor x(DType::kFloat32, {2, 5});
  for (int64_t i = 0; i < 10; ++i) x.data<float>()[i] = 1.5f * static_cast<float>(i) - 7.f;
  Tensor y = s.run({{"x", x}})[0];
  for (int64_t i = 0; i < 10; ++i) {
    const double v = x.data<float>()[i];
    EXPECT_NEAR(y.data<float>()[i], v * std::min(1.0, std::max(0.0, 0.2 * v + 0.5)), 1e-5) << i;
  }
}

}  // namespace
}  // namespace anvil

namespace anvil {
namespace {

TEST(Passes, MaskedSoftmaxNeedsAnAddOfModernBroadcastReadOnce) {
  // The sum also read by another node.
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 4});
  ir::Value* mask = g->add_input("mask", DType::kFloat32, {4});
  ir::Value* sum = g->add_node("Add", {x, mask}, 1)->output(0);
  g->add_output(g->add_node("Softmax", {sum}, 1)->output(0));
  g->add_output(g->add_node("Relu", {sum}, 1)->output(0));
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "MaskedSoftmax"), 0u);
  // An opset-6 Add broadcasts by its own rules (the broadcast attribute), not numpy's.
  auto old = masked_softmax_graph(-1, false);
  for (const auto& n : old->nodes()) n->opset = 6;
  passes::optimize(*old, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*old, "MaskedSoftmax"), 0u);
}

}  // namespace
}  // namespace anvil

namespace anvil {
namespace {

// ((x * a + b) - 0.5) / 1.5 on x of `x_shape`, a [last dim] and b of x's shape.
std::unique_ptr<ir::Graph> chain_graph(Shape x_shape, bool product_read_twice = false) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, x_shape);
  ir::Value* b = g->add_input("b", DType::kFloat32, x_shape);
  Tensor a(DType::kFloat32, {x_shape.back()});
  for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = 0.5f + 0.25f * static_cast<float>(i);
  ir::Value* v = g->add_node("Mul", {x, g->add_constant("a", a)}, 1)->output(0);
  if (product_read_twice) g->add_output(v);
  v = g->add_node("Add", {v, b}, 1)->output(0);
  v = g->add_node("Sub", {v, scalar_f32(*g, "half", 0.5f)}, 1)->output(0);
  v = g->add_node("Div", {v, scalar_f32(*g, "scale", 1.5f)}, 1)->output(0);
  g->add_output(v);
  ir::infer_types(*g);
  return g;
}

TEST(Passes, ElementwiseChainsBecomeOneNode) {
  auto g = chain_graph({2, 3, 4});
  passes::optimize(*g, 2, runtime::reference_evaluator());
  ASSERT_EQ(g->nodes().size(), 1u);
  const ir::Node& chain = *g->nodes()[0];
  EXPECT_EQ(chain.op_type, "ElementwiseChain");
  EXPECT_EQ(chain.inputs.size(), 3u);  // x, a, b
  EXPECT_EQ(chain.attrs.get_ints("ops").size(), 4u);

  Session s = Session::from_graph(chain_graph({2, 3, 4}));
  Tensor x = ramp({2, 3, 4}, -3.f, 0.25f), b = ramp({2, 3, 4}, 1.f, -0.125f);
  Tensor y = s.run({{"x", x}, {"b", b}})[0];
  for (int64_t i = 0; i < 24; ++i) {
    const double a = 0.5 + 0.25 * double(i % 4);
    const double want = ((x.data<float>()[i] * a + b.data<float>()[i]) - 0.5) / 1.5;
    EXPECT_NEAR(y.data<float>()[i], want, 1e-6) << i;
  }
}

TEST(Passes, AChainReadingItsInputAgainIsNotRunInPlace) {
  // QuickGELU on a transposed tensor: t * sigmoid(1.702 t). t is a working
  // buffer nothing else reads, which the chain could otherwise overwrite.
  auto graph = [] {
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 13;
    ir::Value* x = g->add_input("x", DType::kFloat32, {2, 3, 4});
    ir::Node* transpose = g->add_node("Transpose", {x}, 1);
    transpose->attrs.set("perm", std::vector<int64_t>{0, 2, 1});
    ir::Value* t = transpose->output(0);
    ir::Value* v = g->add_node("Mul", {t, scalar_f32(*g, "k", 1.702f)}, 1)->output(0);
    v = g->add_node("Sigmoid", {v}, 1)->output(0);
    v = g->add_node("Mul", {t, v}, 1)->output(0);
    ir::Node* back = g->add_node("Transpose", {v}, 1);  // so the chain's output is a working buffer too
    back->attrs.set("perm", std::vector<int64_t>{0, 2, 1});
    g->add_output(back->output(0));
    ir::infer_types(*g);
    return g;
  };
  auto g = graph();
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "ElementwiseChain"), 1u);
  Session s = Session::from_graph(graph());
  Tensor x = ramp({2, 3, 4}, -3.f, 0.25f);
  Tensor y = s.run({{"x", x}})[0];
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4}));
  for (int64_t i = 0; i < 24; ++i) {
    const double t = x.data<float>()[i];
    EXPECT_NEAR(y.data<float>()[i], t / (1 + std::exp(-1.702 * t)), 1e-6) << i;
  }
}

TEST(Passes, ElementwiseChainLookalikesAreLeftAlone) {
  auto cnn = chain_graph({1, 2, 3, 4});  // rank 4: oneDNN's blocked layouts, not a plain chain
  passes::optimize(*cnn, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*cnn, "ElementwiseChain"), 0u);
  auto split = chain_graph({2, 3, 4}, true);  // the product is an output: the chain starts after it
  passes::optimize(*split, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*split, "ElementwiseChain"), 1u);
  EXPECT_EQ(count_ops(*split, "Mul"), 1u);
  // An operand that broadcasts x up ([4] + [3, 4]) is not a chain step.
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {4});
  ir::Value* wide = g->add_input("wide", DType::kFloat32, {3, 4});
  ir::Value* v = g->add_node("Relu", {x}, 1)->output(0);
  g->add_output(g->add_node("Add", {v, wide}, 1)->output(0));
  ir::infer_types(*g);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "ElementwiseChain"), 0u);
}

}  // namespace
}  // namespace anvil

namespace anvil {
namespace {

// anvil.ReluGrad(Gemm(a, b), y) as the autodiff emits it: a [7, 5] (or
// stored [5, 7] with transA), b [5, 20] (or [20, 5] with transB), y [7, 20]
// with positive, negative and zero entries. `op` "MatMul" for a plain
// product; `extra` adds C, alpha 2 or the product as a graph output.
enum class GradExtra { kNone, kBias, kAlpha, kProductIsOutput };
std::unique_ptr<ir::Graph> relu_grad_graph(const std::string& op, bool ta, bool tb, GradExtra extra = GradExtra::kNone) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  g->opsets["anvil"] = 1;
  ir::Value* a = g->add_input("a", DType::kFloat32, ta ? Shape{5, 7} : Shape{7, 5});
  ir::Value* b = g->add_input("b", DType::kFloat32, tb ? Shape{20, 5} : Shape{5, 20});
  ir::Value* y = g->add_input("y", DType::kFloat32, {7, 20});
  std::vector<ir::Value*> inputs = {a, b};
  if (extra == GradExtra::kBias) inputs.push_back(g->add_constant("c", ramp({20}, -1.f, 0.1f)));
  ir::Node* product = g->add_node(op, inputs, 1);
  if (op == "Gemm") {
    product->attrs.set("transA", int64_t{ta});
    product->attrs.set("transB", int64_t{tb});
    if (extra == GradExtra::kAlpha) product->attrs.set("alpha", 2.f);
  }
  ir::Node* grad = g->add_node("ReluGrad", {product->output(0), y}, 1);
  grad->domain = "anvil";
  g->add_output(grad->output(0));
  if (extra == GradExtra::kProductIsOutput) g->add_output(product->output(0));
  ir::infer_types(*g);
  return g;
}

TEST(Passes, ReluGradOfAProductBecomesOneGemmReluGrad) {
  const Tensor a_plain = ramp({7, 5}, -1.f, 0.13f), b_plain = ramp({5, 20}, 0.9f, -0.021f);
  Tensor y = ramp({7, 20}, -0.7f, 0.01f);
  y.data<float>()[70] = 0.f;  // zero is not positive: masked
  auto transposed = [](const Tensor& t) {
    Tensor out(DType::kFloat32, {t.shape()[1], t.shape()[0]});
    for (int64_t i = 0; i < t.shape()[0]; ++i)
      for (int64_t j = 0; j < t.shape()[1]; ++j) out.data<float>()[j * t.shape()[0] + i] = t.data<float>()[i * t.shape()[1] + j];
    return out;
  };
  const std::pair<std::string, std::pair<bool, bool>> cases[] = {
      {"Gemm", {false, false}}, {"Gemm", {true, false}}, {"Gemm", {false, true}}, {"Gemm", {true, true}},
      {"MatMul", {false, false}}};
  for (const auto& [op, t] : cases) {
    const auto [ta, tb] = t;
    SCOPED_TRACE(op + (ta ? " A^T" : "") + (tb ? " B^T" : ""));
    auto g = relu_grad_graph(op, ta, tb);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    ASSERT_EQ(g->nodes().size(), 1u);
    EXPECT_EQ(g->nodes()[0]->op_type, "GemmReluGrad");
    EXPECT_EQ(g->nodes()[0]->attrs.get_int("transA", -1), int64_t{ta});
    EXPECT_EQ(g->nodes()[0]->attrs.get_int("transB", -1), int64_t{tb});
    for (int level : {0, 3}) {  // as two nodes, and fused (on oneDNN's backend: Anvil's GEMM below AVX-512)
      SessionOptions options;
      options.optimization_level = level;
      Session s = Session::from_graph(relu_grad_graph(op, ta, tb), options);
      const Tensor got = s.run({{"a", ta ? transposed(a_plain) : a_plain}, {"b", tb ? transposed(b_plain) : b_plain},
                                {"y", y}})[0];
      ASSERT_EQ(got.shape(), Shape({7, 20}));
      for (int64_t i = 0; i < 7; ++i)
        for (int64_t j = 0; j < 20; ++j) {
          double sum = 0;
          for (int64_t q = 0; q < 5; ++q)
            sum += static_cast<double>(a_plain.data<float>()[i * 5 + q]) * b_plain.data<float>()[q * 20 + j];
          const double want = y.data<float>()[i * 20 + j] > 0 ? sum : 0;
          EXPECT_NEAR(got.data<float>()[i * 20 + j], want, 1e-5) << "level " << level << " at " << i << ", " << j;
        }
    }
  }
}

// anvil.ReluGrad(MaxPoolGrad(dy, y), gate) as the autodiff emits it for a
// ReLU whose output y is max-pooled (gate == y), or a lookalike whose mask
// is another tensor (gate a second input).
std::unique_ptr<ir::Graph> pooled_relu_grad_graph(bool same_y) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  g->opsets["anvil"] = 1;
  ir::Value* dy = g->add_input("dy", DType::kFloat32, {1, 1, 2, 2});
  ir::Value* y = g->add_input("y", DType::kFloat32, {1, 1, 3, 3});
  ir::Value* gate = same_y ? y : g->add_input("gate", DType::kFloat32, {1, 1, 3, 3});
  ir::Node* pool = g->add_node("MaxPoolGrad", {dy, y}, 1);
  pool->domain = "anvil";
  pool->attrs.set("kernel_shape", std::vector<int64_t>{2, 2});
  ir::Node* grad = g->add_node("ReluGrad", {pool->output(0), gate}, 1);
  grad->domain = "anvil";
  g->add_output(grad->output(0));
  ir::infer_types(*g);
  return g;
}

TEST(Passes, ReluGradOfAMaxPoolGradGatesItsWindows) {
  auto g = pooled_relu_grad_graph(true);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0]->op_type, "MaxPoolGrad");
  EXPECT_EQ(g->nodes()[0]->attrs.get_int("relu_gate", 0), 1);
  // Windows (2x2, stride 1) of [[0 0 2] [0 -1 3] [1 .5 -2]]: the first's maximum is 0 (gated out), the second's
  // and the last's the 3 at (1, 2), the third's the 1 at (2, 0).
  const Tensor y = testing::f32({1, 1, 3, 3}, {0, 0, 2, 0, -1, 3, 1, 0.5f, -2});
  for (int level : {0, 3}) {
    SessionOptions options;
    options.optimization_level = level;
    Session s = Session::from_graph(pooled_relu_grad_graph(true), options);
    const Tensor got = s.run({{"dy", testing::f32({1, 1, 2, 2}, {1, 10, 100, 1000})}, {"y", y}})[0];
    EXPECT_EQ(testing::values<float>(got), (std::vector<float>{0, 0, 0, 0, 0, 1010, 100, 0, 0})) << "level " << level;
  }
}

TEST(Passes, ReluGradOfAMaxPoolGradWithAnotherMaskStays) {
  auto g = pooled_relu_grad_graph(false);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "ReluGrad"), 1u);
  EXPECT_EQ(count_ops(*g, "MaxPoolGrad"), 1u);
}

TEST(Passes, ReluGradLookalikesKeepTheirProduct) {
  for (GradExtra extra : {GradExtra::kBias, GradExtra::kAlpha, GradExtra::kProductIsOutput}) {
    auto g = relu_grad_graph("Gemm", false, false, extra);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "GemmReluGrad"), 0u) << static_cast<int>(extra);
    EXPECT_EQ(count_ops(*g, "ReluGrad"), 1u) << static_cast<int>(extra);
  }
}

// relu_grad_graph's gradient [7, 20] summed by `count` ReduceSums over
// `axes` (an input, as opset 13 has it) with `keepdims`: a bias's gradient
// as the autodiff emits it for axes {0} and keepdims 1.
std::unique_ptr<ir::Graph> bias_grad_graph(std::vector<int64_t> axes, int64_t keepdims, int count = 1) {
  auto g = relu_grad_graph("Gemm", false, false);
  ir::Value* grad = g->outputs()[0];
  Tensor axes_tensor(DType::kInt64, {static_cast<int64_t>(axes.size())});
  std::copy(axes.begin(), axes.end(), axes_tensor.data<int64_t>());
  ir::Value* axes_value = g->add_constant("axes", axes_tensor);
  for (int i = 0; i < count; ++i) {
    ir::Node* sum = g->add_node("ReduceSum", {grad, axes_value}, 1);
    sum->attrs.set("keepdims", keepdims);
    g->add_output(sum->output(0));
  }
  ir::infer_types(*g);
  return g;
}

// The bias's gradient becomes the GemmReluGrad's second output, summed in
// the GEMM; both outputs against values computed here, unfused (level 0)
// and fused (level 3), and on the reference kernel.
TEST(Passes, BiasGradientBecomesTheGemmReluGradsSecondOutput) {
  for (const std::vector<int64_t>& axes : {std::vector<int64_t>{0}, std::vector<int64_t>{-2}}) {
    auto g = bias_grad_graph(axes, 1);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    ASSERT_EQ(g->nodes().size(), 1u) << axes[0];
    EXPECT_EQ(g->nodes()[0]->op_type, "GemmReluGrad");
    EXPECT_EQ(g->nodes()[0]->outputs.size(), 2u);
  }
  const Tensor a = ramp({7, 5}, -1.f, 0.13f), b = ramp({5, 20}, 0.9f, -0.021f);
  Tensor y = ramp({7, 20}, 0.69f, -0.01f);  // the first rows kept, the last masked
  y.data<float>()[70] = 0.f;
  double want[7][20], want_sums[20] = {};
  for (int64_t i = 0; i < 7; ++i)
    for (int64_t j = 0; j < 20; ++j) {
      double sum = 0;
      for (int64_t q = 0; q < 5; ++q) sum += static_cast<double>(a.data<float>()[i * 5 + q]) * b.data<float>()[q * 20 + j];
      want[i][j] = y.data<float>()[i * 20 + j] > 0 ? sum : 0;
      want_sums[j] += want[i][j];
    }
  auto expect_outputs = [&](const Tensor& got, const Tensor& sums, const std::string& where) {
    ASSERT_EQ(sums.shape(), Shape({1, 20})) << where;
    for (int64_t j = 0; j < 20; ++j) {
      EXPECT_NEAR(sums.data<float>()[j], want_sums[j], 1e-5) << where << " column " << j;
      for (int64_t i = 0; i < 7; ++i) EXPECT_NEAR(got.data<float>()[i * 20 + j], want[i][j], 1e-5) << where;
    }
  };
  for (int level : {0, 3}) {
    SessionOptions options;
    options.optimization_level = level;
    const std::vector<Tensor> out = Session::from_graph(bias_grad_graph({0}, 1), options).run({{"a", a}, {"b", b}, {"y", y}});
    expect_outputs(out[0], out[1], "level " + std::to_string(level));
  }
  testing::KernelOptions ref;
  ref.domain = "anvil";
  ref.num_outputs = 2;
  const auto out = testing::run_kernel("GemmReluGrad", {a, b, y}, {}, ref);
  expect_outputs(out[0], out[1], "reference kernel");
  testing::KernelOptions constant_b = ref;  // B known at plan time: the sums in a pass after the product
  constant_b.backend = kernels::Backend::kDnnl;
  constant_b.constant_inputs = {false, true, false};
  const auto packed = testing::run_kernel("GemmReluGrad", {a, b, y}, {}, constant_b);
  expect_outputs(packed[0], packed[1], "constant B");
  {  // six columns, narrower than a vector: the sums' pass takes them a row at a time
    const Tensor b6 = ramp({5, 6}, 0.4f, -0.05f), y6 = ramp({7, 6}, 0.3f, -0.01f);
    const auto narrow = testing::run_kernel("GemmReluGrad", {a, b6, y6}, {}, constant_b);
    for (int64_t j = 0; j < 6; ++j) {
      double sum = 0;
      for (int64_t i = 0; i < 7; ++i) {
        double v = 0;
        for (int64_t q = 0; q < 5; ++q) v += static_cast<double>(a.data<float>()[i * 5 + q]) * b6.data<float>()[q * 6 + j];
        sum += y6.data<float>()[i * 6 + j] > 0 ? v : 0;
      }
      EXPECT_NEAR(narrow[1].data<float>()[j], sum, 1e-5) << "narrow, column " << j;
    }
  }

  // 300 rows: Anvil's GEMM on every ISA (from 256 rows), the sums from its registers, per thread.
  const Tensor tall_a = ramp({300, 5}, -1.f, 0.007f);
  Tensor tall_y = ramp({300, 20}, 1.f, -0.0003f);
  for (int64_t i = 0; i < tall_y.numel(); i += 3) tall_y.data<float>()[i] = -1.f;
  testing::KernelOptions dnnl = ref;
  dnnl.backend = kernels::Backend::kDnnl;
  dnnl.num_threads = 2;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  const auto tall = testing::run_kernel_full("GemmReluGrad", {tall_a, b, tall_y}, {}, dnnl);
  omp_set_num_threads(saved);
  EXPECT_NE(tall.impl.find("gemm"), std::string::npos) << tall.impl;
  for (int64_t j = 0; j < 20; ++j) {
    double sum = 0;
    for (int64_t i = 0; i < 300; ++i) {
      if (!(tall_y.data<float>()[i * 20 + j] > 0)) continue;
      for (int64_t q = 0; q < 5; ++q)
        sum += static_cast<double>(tall_a.data<float>()[i * 5 + q]) * b.data<float>()[q * 20 + j];
    }
    EXPECT_NEAR(tall.outputs[1].data<float>()[j], sum, 1e-4) << "300 rows, column " << j;
  }
}

// What head_grad_graph's dw is instead of a fusable a^T y.
enum class HeadLookalike { kNone, kNotTransposed, kAlpha, kWithC, kOtherGate };

// dx = ReluGrad(a b, y) beside dw = Gemm(a, y, transA = 1) (a classifier
// head's input and weight gradients), a [m, k], b [k, n], y [m, n]; with
// `bias`, dx's column sums too. `lookalike` changes dw: transA 0 (a y, with
// m = k), alpha 2, a C input, or a second input read instead of y.
std::unique_ptr<ir::Graph> head_grad_graph(int64_t m, int64_t k, int64_t n, bool bias,
                                           HeadLookalike lookalike = HeadLookalike::kNone) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  g->opsets["anvil"] = 1;
  ir::Value* a = g->add_input("a", DType::kFloat32, {m, k});
  ir::Value* b = g->add_input("b", DType::kFloat32, {k, n});
  ir::Value* y = g->add_input("y", DType::kFloat32, {m, n});
  ir::Value* h = lookalike == HeadLookalike::kOtherGate ? g->add_input("h", DType::kFloat32, {m, n}) : y;
  ir::Node* grad = g->add_node("ReluGrad", {g->add_node("MatMul", {a, b}, 1)->output(0), y}, 1);
  grad->domain = "anvil";
  g->add_output(grad->output(0));
  if (bias) {
    Tensor axes(DType::kInt64, {1});
    axes.data<int64_t>()[0] = 0;
    ir::Node* sum = g->add_node("ReduceSum", {grad->output(0), g->add_constant("axes", axes)}, 1);
    g->add_output(sum->output(0));
  }
  std::vector<ir::Value*> dw_inputs{a, h};
  if (lookalike == HeadLookalike::kWithC) dw_inputs.push_back(g->add_constant("c", ramp({n}, 0.1f, 0.01f)));
  ir::Node* dw = g->add_node("Gemm", dw_inputs, 1);
  dw->attrs.set("transA", int64_t{lookalike != HeadLookalike::kNotTransposed});
  if (lookalike == HeadLookalike::kAlpha) dw->attrs.set("alpha", 2.f);
  g->add_output(dw->output(0));
  ir::infer_types(*g);
  return g;
}

// dw = a^T y in double, [k, n].
std::vector<double> a_transposed_y(const Tensor& a, const Tensor& y) {
  const int64_t m = a.shape()[0], k = a.shape()[1], n = y.shape()[1];
  std::vector<double> want(static_cast<size_t>(k * n), 0.0);
  for (int64_t q = 0; q < k; ++q)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        want[static_cast<size_t>(q * n + j)] += static_cast<double>(a.data<float>()[i * k + q]) * y.data<float>()[i * n + j];
  return want;
}

// The head's weight gradient becomes the GemmReluGrad's third output, added
// up from the gate each tile reads; against values computed here, unfused
// (level 0) and fused (level 3), with and without the bias's sums: 4,000
// rows on Anvil's GEMM (each of two threads a row sweep of 2,000 rows; 44
// columns: full panels' tiles finish in registers, the last columns, part
// of a vector on every ISA, in a pass), and 3 rows, fewer than a row tile
// on every ISA: oneDNN, and a pass after the product.
TEST(Passes, HeadGradientBecomesTheGemmReluGradsThirdOutput) {
  for (bool bias : {true, false}) {
    auto g = head_grad_graph(300, 3, 44, bias);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    ASSERT_EQ(g->nodes().size(), 1u) << bias;
    EXPECT_EQ(g->nodes()[0]->op_type, "GemmReluGrad");
    ASSERT_EQ(g->nodes()[0]->outputs.size(), 3u);
    EXPECT_EQ(g->nodes()[0]->output(1) != nullptr, bias);
  }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  for (const int64_t m : {4000, 3})
    for (bool bias : {true, false}) {
      const Tensor a = ramp({m, 3}, -1.f, 0.00051f), b = ramp({3, 44}, 0.9f, -0.021f);
      Tensor y = ramp({m, 44}, 1.f, -0.0000113f);
      for (int64_t i = 0; i < y.numel(); i += 3) y.data<float>()[i] = -0.5f;  // masked, and weighed as -0.5
      const std::vector<double> want = a_transposed_y(a, y);
      for (int level : {0, 3}) {
        SessionOptions options;
        options.optimization_level = level;
        options.num_threads = 2;
        const std::vector<Tensor> out =
            Session::from_graph(head_grad_graph(m, 3, 44, bias), options).run({{"a", a}, {"b", b}, {"y", y}});
        const Tensor& dw = out.back();
        ASSERT_EQ(dw.shape(), Shape({3, 44}));
        for (int64_t q = 0; q < 3 * 44; ++q)
          EXPECT_NEAR(dw.data<float>()[q], want[static_cast<size_t>(q)], 1e-5 * (1 + std::abs(want[static_cast<size_t>(q)])))
              << m << " rows, level " << level << ", element " << q;
      }
    }
  omp_set_num_threads(saved);
}

// The third output on each path of the kernels: the reference (A read
// transposed too), and Anvil's GEMM with threads splitting K (summed C, then
// a pass), each against a^T y computed here.
TEST(Passes, HeadGradientOnEveryPath) {
  testing::KernelOptions ref;
  ref.domain = "anvil";
  ref.num_outputs = 3;
  const Tensor a = ramp({9, 2}, -1.f, 0.13f), b = ramp({2, 5}, 0.9f, -0.3f), y = ramp({9, 5}, 0.7f, -0.02f);
  const std::vector<double> want = a_transposed_y(a, y);
  Tensor at(DType::kFloat32, {2, 9});
  for (int64_t i = 0; i < 9; ++i)
    for (int64_t q = 0; q < 2; ++q) at.data<float>()[q * 9 + i] = a.data<float>()[i * 2 + q];
  for (const bool transposed : {false, true}) {
    ir::Attributes attrs;
    attrs.set("transA", int64_t{transposed});
    const auto out = testing::run_kernel("GemmReluGrad", {transposed ? at : a, b, y}, attrs, ref);
    for (int64_t q = 0; q < 10; ++q)
      EXPECT_NEAR(out[2].data<float>()[q], want[static_cast<size_t>(q)], 1e-5) << "reference, transA " << transposed;
  }
  // 256 rows, K = 1100: threads split K; the summed C's rows give A^T x y.
  const Tensor long_a = ramp({256, 1100}, -1.f, 0.0000071f), long_b = ramp({1100, 16}, 0.01f, -0.0000013f);
  const Tensor long_y = ramp({256, 16}, 1.f, -0.0005f);
  const std::vector<double> long_want = a_transposed_y(long_a, long_y);
  testing::KernelOptions dnnl = ref;
  dnnl.backend = kernels::Backend::kDnnl;
  dnnl.num_threads = 2;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  const auto split = testing::run_kernel_full("GemmReluGrad", {long_a, long_b, long_y}, {}, dnnl);
  omp_set_num_threads(saved);
  EXPECT_NE(split.impl.find("gemm"), std::string::npos) << split.impl;
  ASSERT_EQ(split.outputs[2].shape(), Shape({1100, 16}));
  for (int64_t q = 0; q < 1100 * 16; ++q)
    ASSERT_NEAR(split.outputs[2].data<float>()[q], long_want[static_cast<size_t>(q)], 1e-3) << q;
}

TEST(Passes, HeadGradientLookalikesStay) {
  struct Case {
    const char* what;
    int64_t m, k;
    HeadLookalike lookalike;
  };
  for (const Case& c : {Case{"17 head outputs", 20, 17, HeadLookalike::kNone},
                        Case{"A not transposed", 8, 8, HeadLookalike::kNotTransposed},
                        Case{"alpha 2", 20, 3, HeadLookalike::kAlpha}, Case{"a C", 20, 3, HeadLookalike::kWithC},
                        Case{"another gate", 20, 3, HeadLookalike::kOtherGate}}) {
    auto g = head_grad_graph(c.m, c.k, 8, false, c.lookalike);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "Gemm"), 1u) << c.what;
  }
  auto fused = head_grad_graph(8, 8, 8, false);  // the same shapes, fusable: taken
  passes::optimize(*fused, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*fused, "Gemm"), 0u);
}

TEST(Passes, BiasGradientLookalikesStay) {
  for (const auto& [axes, keepdims] : {std::pair<std::vector<int64_t>, int64_t>{{1}, 1}, {{0}, 0}, {{0, 1}, 1}}) {
    auto g = bias_grad_graph(axes, keepdims);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "ReduceSum"), 1u) << axes.size() << " axes, keepdims " << keepdims;
  }
  auto twice = bias_grad_graph({0}, 1, 2);  // the second sum finds the output taken
  passes::optimize(*twice, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*twice, "ReduceSum"), 1u);
}

}  // namespace
}  // namespace anvil

namespace anvil {
namespace {

// relu(x W^T + b) as PyTorch exports a Linear and its ReLU: x [3, 4], W [5, 4], b [5].
std::unique_ptr<ir::Graph> linear_relu_graph(bool gemm_is_output) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {3, 4});
  ir::Node* gemm = g->add_node("Gemm", {x, g->add_constant("w", ramp({5, 4}, -1.f, 0.1f)),
                                        g->add_constant("b", ramp({5}, 0.3f, -0.2f))}, 1);
  gemm->attrs.set("transB", int64_t{1});
  g->add_output(g->add_node("Relu", {gemm->output(0)}, 1)->output(0));
  if (gemm_is_output) g->add_output(gemm->output(0));
  ir::infer_types(*g);
  return g;
}

TEST(Passes, GemmThenActivationBecomesOneFusedGemm) {
  auto g = linear_relu_graph(false);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0]->op_type, "FusedGemm");
  EXPECT_EQ(g->nodes()[0]->attrs.get_string("activation", ""), "Relu");
  EXPECT_EQ(g->nodes()[0]->attrs.get_int("transB", 0), 1);
  const Tensor x = ramp({3, 4}, -2.f, 0.37f), w = ramp({5, 4}, -1.f, 0.1f), b = ramp({5}, 0.3f, -0.2f);
  Session s = Session::from_graph(linear_relu_graph(false));
  const Tensor y = s.run({{"x", x}})[0];
  ASSERT_EQ(y.shape(), Shape({3, 5}));
  int negatives = 0;
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      double sum = b.data<float>()[j];
      for (int64_t q = 0; q < 4; ++q) sum += static_cast<double>(x.data<float>()[i * 4 + q]) * w.data<float>()[j * 4 + q];
      negatives += sum < 0;
      EXPECT_NEAR(y.data<float>()[i * 5 + j], std::max(sum, 0.0), 1e-5) << i << ", " << j;
    }
  EXPECT_GT(negatives, 0);  // the ReLU had something to do
}

TEST(Passes, GemmReadTwiceKeepsItsActivation) {
  auto g = linear_relu_graph(true);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "FusedGemm"), 0u);
  EXPECT_EQ(count_ops(*g, "Relu"), 1u);
}

}  // namespace
}  // namespace anvil

namespace anvil {
namespace {

// x [2, 5, 8] times three weights [8, Ni] (Ni = 4, 6, 4), each plus its bias
// (or, `mixed_bias`, the second without one), each a graph output.
std::unique_ptr<ir::Graph> shared_input_products(bool mixed_bias = false) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 5, 8});
  const int64_t widths[] = {4, 6, 4};
  for (int i = 0; i < 3; ++i) {
    const std::string n = std::to_string(i);
    ir::Value* w = g->add_constant("w" + n, ramp({8, widths[i]}, -1.f + 0.3f * float(i), 0.05f));
    ir::Value* y = g->add_node("MatMul", {x, w}, 1)->output(0);
    if (!(mixed_bias && i == 1)) y = g->add_node("Add", {y, g->add_constant("b" + n, ramp({widths[i]}, float(i), 0.5f))}, 1)->output(0);
    y->name = "y" + n;
    g->add_output(y);
  }
  ir::infer_types(*g);
  return g;
}

TEST(Passes, ProductsOfOneInputBecomeOneProductAndASplit) {
  auto g = shared_input_products();
  passes::optimize(*g, 2, runtime::reference_evaluator());
  size_t live = 0;
  for (const auto& n : g->nodes()) live += !n->dead;
  EXPECT_EQ(live, 2u);
  ASSERT_EQ(count_ops(*g, "FusedMatMul"), 1u);
  ASSERT_EQ(count_ops(*g, "Split"), 1u);
  for (const auto& n : g->nodes()) {
    if (n->op_type == "FusedMatMul") {
      EXPECT_EQ(n->input(1)->constant->shape(), Shape({8, 14}));
    }
  }

  Session s = Session::from_graph(shared_input_products());
  Tensor x = ramp({2, 5, 8}, 0.5f, -0.02f);
  std::vector<Tensor> y = s.run({{"x", x}});
  const int64_t widths[] = {4, 6, 4};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(y[static_cast<size_t>(i)].shape(), Shape({2, 5, widths[i]}));
    for (int64_t r = 0; r < 10; ++r)
      for (int64_t j = 0; j < widths[i]; ++j) {
        double want = double(i) + 0.5 * double(j);  // the bias
        for (int64_t k = 0; k < 8; ++k)
          want += double(x.data<float>()[r * 8 + k]) * (-1.0 + 0.3 * i + 0.05 * double(k * widths[i] + j));
        EXPECT_NEAR(y[static_cast<size_t>(i)].data<float>()[r * widths[i] + j], want, 1e-4) << i << " " << r << " " << j;
      }
  }
  ASSERT_EQ(s.outputs().size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(s.outputs()[i].name, "y" + std::to_string(i));
}

TEST(Passes, LayersThatShareWeightsShareTheMergedOnes) {
  // Two inputs (two layers, as in ALBERT) times the same two weights: one merged weight tensor, read twice.
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* w0 = g->add_constant("w0", ramp({8, 4}, -1.f, 0.05f));
  ir::Value* w1 = g->add_constant("w1", ramp({8, 4}, 0.5f, -0.03f));
  ir::Value* b = g->add_constant("b", ramp({4}, 0.f, 1.f));
  for (const char* name : {"x1", "x2"}) {
    ir::Value* x = g->add_input(name, DType::kFloat32, {3, 8});
    for (ir::Value* w : {w0, w1})
      g->add_output(g->add_node("Add", {g->add_node("MatMul", {x, w}, 1)->output(0), b}, 1)->output(0));
  }
  ir::infer_types(*g);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  std::vector<const ir::Value*> weights;
  for (const auto& n : g->nodes())
    if (!n->dead && n->op_type == "FusedMatMul") weights.push_back(n->input(1));
  ASSERT_EQ(weights.size(), 2u);
  EXPECT_EQ(weights[0], weights[1]);
  EXPECT_EQ(weights[0]->constant->shape(), Shape({8, 8}));
}

// The merge drops the originals' pages once nothing reads them; one that
// another node still reads at run time (here z + w1) keeps its bytes. The
// weights span pages (32 KiB each), so a drop would show.
TEST(Passes, MergedProductsKeepAWeightAnotherNodeReads) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 64});
  for (int i = 0; i < 3; ++i) {
    ir::Value* w = g->add_constant("w" + std::to_string(i), ramp({64, 128}, float(i), 0.001f));
    ir::Value* b = g->add_constant("b" + std::to_string(i), ramp({128}, 0.f, 0.01f));
    g->add_output(g->add_node("Add", {g->add_node("MatMul", {x, w}, 1)->output(0), b}, 1)->output(0));
  }
  ir::Value* z = g->add_input("z", DType::kFloat32, {64, 128});
  g->add_output(g->add_node("Add", {z, g->find_value("w1")}, 1)->output(0));
  ir::infer_types(*g);
  Session s = Session::from_graph(std::move(g));
  const std::vector<std::string> plan = s.describe_plan({{"x", Tensor(DType::kFloat32, {2, 64})},
                                                         {"z", Tensor(DType::kFloat32, {64, 128})}});
  EXPECT_NE(fmt::format("{}", fmt::join(plan, "\n")).find("Split"), std::string::npos) << "the products did not merge";
  const Tensor zv = ramp({64, 128}, 0.25f, 0.125f);
  const std::vector<Tensor> y = s.run({{"x", ramp({2, 64}, 0.5f, -0.02f)}, {"z", zv}});
  ASSERT_EQ(y.size(), 4u);
  for (int64_t i = 0; i < 64 * 128; ++i)
    ASSERT_NEAR(y[3].data<float>()[i], zv.data<float>()[i] + (1.0 + 0.001 * double(i)), 1e-3) << i;
}

TEST(Passes, ProductsThatDisagreeKeepTheirOwnProduct) {
  // The second has no bias: it stays apart, and the two with one merge.
  auto g = shared_input_products(/*mixed_bias=*/true);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "FusedMatMul") + count_ops(*g, "MatMul"), 2u);
  EXPECT_EQ(count_ops(*g, "Split"), 1u);
  // Level 1 merges nothing.
  auto basic = shared_input_products();
  passes::optimize(*basic, 1, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*basic, "Split"), 0u);
}


Tensor bool_scalar(bool v) {
  Tensor t(DType::kBool, {});
  *t.data<bool>() = v;
  return t;
}

// PyTorch's export of x.squeeze(1) where it cannot see the dim: If(Shape(x)[1]
// == 1) then { Squeeze(x, [1]) } else { Identity(x) }, x [2, 1, 3]. With
// `cond_input` the condition is a graph input instead; with `nested`, the
// then-branch's Squeeze sits inside an If of its own.
std::unique_ptr<ir::Graph> squeeze_if_graph(bool cond_input = false, bool nested = false) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 1, 3});
  ir::Value* cond = nullptr;
  if (cond_input) {
    cond = g->add_input("cond", DType::kBool, {});
  } else {
    ir::Value* shape = g->add_node("Shape", {x}, 1)->output(0);
    ir::Value* dim = g->add_node("Gather", {shape, g->add_constant("one_index", ints({}, {1}))}, 1)->output(0);
    cond = g->add_node("Equal", {dim, g->add_constant("one", ints({}, {1}))}, 1)->output(0);
  }
  ir::Node* node = g->add_node("If", {cond}, 1, "squeeze_if");
  const auto branch = [&](ir::Graph* parent, ir::Node* owner, bool squeeze, ir::Value* outer_x) {
    auto sub = std::make_shared<ir::Graph>();
    sub->parent = parent;
    sub->owner = owner;
    ir::Value* inner = sub->add_capture("x", outer_x);
    ir::Node* op = squeeze ? sub->add_node("Squeeze", {inner, sub->add_constant("axes", ints({1}, {1}))}, 1)
                           : sub->add_node("Identity", {inner}, 1);
    sub->add_output(op->output(0));
    return sub;
  };
  node->attrs.set("else_branch", branch(g.get(), node, false, x));
  if (!nested) {
    node->attrs.set("then_branch", branch(g.get(), node, true, x));
  } else {
    auto then = std::make_shared<ir::Graph>();
    then->parent = g.get();
    then->owner = node;
    ir::Value* inner_x = then->add_capture("x", x);
    ir::Node* inner_if = then->add_node("If", {then->add_constant("yes", bool_scalar(true))}, 1, "inner_if");
    inner_if->attrs.set("then_branch", branch(then.get(), inner_if, true, inner_x));
    inner_if->attrs.set("else_branch", branch(then.get(), inner_if, false, inner_x));
    then->add_output(inner_if->output(0));
    node->attrs.set("then_branch", then);
  }
  ir::Node* relu = g->add_node("Relu", {node->output(0)}, 1, "relu");
  g->add_output(relu->output(0));
  ir::infer_types(*g);
  return g;
}

// y = If(cond) then { Transpose(x, perm [1, 0, 2]) } else { the branch's own
// constant, read as its output }, x [2, 3, 2], y the graph's output. (The
// perm is not Transpose's default, which reverses the axes.)
std::unique_ptr<ir::Graph> constant_if_graph(Tensor cond) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 3, 2});
  ir::Node* node = g->add_node("If", {g->add_constant("cond", std::move(cond))}, 1, "if");
  auto then = std::make_shared<ir::Graph>();
  then->parent = g.get();
  then->owner = node;
  ir::Node* transpose = then->add_node("Transpose", {then->add_capture("x", x)}, 1);
  transpose->attrs.set("perm", std::vector<int64_t>{1, 0, 2});
  then->add_output(transpose->output(0));
  node->attrs.set("then_branch", then);
  auto otherwise = std::make_shared<ir::Graph>();
  otherwise->parent = g.get();
  otherwise->owner = node;
  otherwise->add_output(otherwise->add_constant("fixed", ramp({2, 3, 2}, 10.f, 1.f)));
  node->attrs.set("else_branch", otherwise);
  g->add_output(node->output(0));
  return g;
}

TEST(Passes, IfOfAConstantConditionBecomesItsBranch) {
  auto g = squeeze_if_graph();
  EXPECT_FALSE(g->nodes().back()->output(0)->type.has_shape());  // the If hides its branch's rank
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "If"), 0u);
  EXPECT_EQ(count_ops(*g, "Squeeze"), 1u);
  EXPECT_EQ(count_ops(*g, "Identity"), 0u);
  ASSERT_TRUE(g->outputs()[0]->is_static());  // typed end to end once inlined
  EXPECT_EQ(g->outputs()[0]->type.shape_or_minus_one(), (Shape{2, 3}));
  Session s = Session::from_graph(squeeze_if_graph());
  std::vector<Tensor> out = s.run({{"x", ramp({2, 1, 3}, -2.5f, 1.f)}});
  ASSERT_EQ(out[0].shape(), (Shape{2, 3}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(out[0].data<float>()[i], std::max(0.f, static_cast<float>(i) - 2.5f)) << i;
}

TEST(Passes, IfLookalikesStay) {
  // A condition known only at run time: both branches stay possible.
  auto input_cond = squeeze_if_graph(true);
  passes::optimize(*input_cond, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*input_cond, "If"), 1u);
  Session s = Session::from_graph(squeeze_if_graph(true));
  for (bool cond : {true, false}) {
    std::vector<Tensor> out = s.run({{"x", ramp({2, 1, 3}, -2.5f, 1.f)}, {"cond", bool_scalar(cond)}});
    EXPECT_EQ(out[0].shape(), cond ? (Shape{2, 3}) : (Shape{2, 1, 3}));
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(out[0].data<float>()[i], std::max(0.f, static_cast<float>(i) - 2.5f));
  }
  // A branch holding an If of its own stays whole.
  auto nested = squeeze_if_graph(false, true);
  passes::optimize(*nested, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*nested, "If"), 1u);
  Session n = Session::from_graph(squeeze_if_graph(false, true));
  EXPECT_EQ(n.run({{"x", ramp({2, 1, 3}, -2.5f, 1.f)}})[0].shape(), (Shape{2, 3}));
  // Conditions that are not one bool: an int64, two bools.
  for (Tensor cond : {ints({}, {1}), Tensor(DType::kBool, {2})}) {
    auto g = constant_if_graph(cond);
    passes::optimize(*g, 1, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "If"), 1u) << dtype_name(cond.dtype()) << " of " << cond.numel();
  }
  // A branch whose output's element type is not the one the If declares:
  // left for the If kernel to refuse when it runs.
  auto mistyped = constant_if_graph(bool_scalar(true));
  ir::infer_types(*mistyped);  // types the branches' values too
  mistyped->outputs()[0]->type = ir::Type::tensor(DType::kInt64, Shape{3, 2, 2});
  passes::optimize(*mistyped, 1, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*mistyped, "If"), 1u);
}

TEST(Passes, IfInlinesEitherBranchAtLevelOne) {
  for (bool cond : {true, false}) {
    auto g = constant_if_graph(bool_scalar(cond));
    const std::string name = g->outputs()[0]->name;
    passes::optimize(*g, 1, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "If"), 0u) << cond;
    EXPECT_EQ(count_ops(*g, "Transpose"), cond ? 1u : 0u) << cond;
    ASSERT_EQ(g->outputs().size(), 1u);
    EXPECT_EQ(g->outputs()[0]->name, name) << "the If's output keeps its name";
    Session s = Session::from_graph(constant_if_graph(bool_scalar(cond)));
    Tensor x = ramp({2, 3, 2}, -1.f, 0.5f);
    Tensor y = s.run({{"x", x}})[0];
    ASSERT_EQ(y.shape(), cond ? (Shape{3, 2, 2}) : (Shape{2, 3, 2})) << cond;
    for (int64_t i = 0; i < 12; ++i) {
      const int64_t a = i / 4, b = i / 2 % 2, k = i % 2;  // y[a][b][k] when transposed, [3, 2, 2]
      const float want = cond ? x.data<float>()[(b * 3 + a) * 2 + k] : 10.f + static_cast<float>(i);
      EXPECT_EQ(y.data<float>()[i], want) << cond << " at " << i;
    }
  }
}

}  // namespace
}  // namespace anvil
