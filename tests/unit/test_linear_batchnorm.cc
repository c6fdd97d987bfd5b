// fold_linear_batchnorm: a MatMul or Gemm followed by a BatchNormalization
// of its features (PyTorch's Linear + BatchNorm1d, LeViT's 58 pairs) folds
// into the product's weights and bias. Outputs against the layers computed
// in double by hand; the lookalikes that normalize another axis keep their
// BatchNormalization.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "anvil/session.h"
#include "kernel_tester.h"
#include "ir/schema.h"
#include "passes/pipeline.h"
#include "runtime/constant_evaluator.h"

namespace anvil {
namespace {

size_t count_ops(const ir::Graph& g, const std::string& op) { return testing::count_live_ops(g, op); }

Tensor wave(Shape shape, float phase) {
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::sin(0.7f * static_cast<float>(i) + phase);
  return t;
}

Tensor ints(std::vector<int64_t> v) {
  Tensor t(DType::kInt64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

// A BatchNormalization's parameters for n features: gamma, beta, mean and a
// positive variance, all different per feature.
struct Norm {
  Tensor gamma, beta, mean, var;
  float eps = 1e-3f;
  explicit Norm(int64_t n) : gamma(wave({n}, 0.3f)), beta(wave({n}, 1.1f)), mean(wave({n}, 2.f)), var(DType::kFloat32, {n}) {
    for (int64_t j = 0; j < n; ++j) var.data<float>()[j] = 0.5f + 0.25f * static_cast<float>(j);
  }
  ir::Node* add(ir::Graph& g, ir::Value* x, const std::string& name) const {
    ir::Node* bn = g.add_node("BatchNormalization",
                              {x, g.add_constant(name + "_gamma", gamma), g.add_constant(name + "_beta", beta),
                               g.add_constant(name + "_mean", mean), g.add_constant(name + "_var", var)},
                              1, name);
    bn->attrs.set("epsilon", eps);
    return bn;
  }
  double apply(double v, int64_t j) const {
    return (v - mean.data<float>()[j]) / std::sqrt(static_cast<double>(var.data<float>()[j]) + eps) *
               gamma.data<float>()[j] +
           beta.data<float>()[j];
  }
};

// rows x [K] times W ([K, N], or [N, K] when transposed) in double.
std::vector<double> product(const Tensor& x, const Tensor& w, int64_t rows, int64_t k, int64_t n, bool transposed) {
  std::vector<double> y(static_cast<size_t>(rows * n), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t q = 0; q < k; ++q)
        y[static_cast<size_t>(r * n + j)] += static_cast<double>(x.data<float>()[r * k + q]) *
                                             w.data<float>()[transposed ? j * k + q : q * n + j];
  return y;
}

void expect_near(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << what << " at " << i;
}

// LeViT's layer: MatMul(x [1, 6, 4], W [4, 5]) -> Flatten(axis 2) -> BN(5)
// -> Reshape [1, 6, 5] -> Add(residual). Folded, the BN and both reshapes
// go and one FusedMatMul with a bias and the residual sum remains. Without
// the Reshape back (`flat_output`), the [6, 5] normalized rows are the output.
std::unique_ptr<ir::Graph> levit_layer(const Tensor& w, const Norm& norm, bool flat_output = false) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  ir::Value* x = g->add_input("x", DType::kFloat32, {1, 6, 4});
  ir::Node* mm = g->add_node("MatMul", {x, g->add_constant("w", w)}, 1, "mm");
  ir::Node* flat = g->add_node("Flatten", {mm->output(0)}, 1, "flat");
  flat->attrs.set("axis", int64_t{2});
  ir::Node* bn = norm.add(*g, flat->output(0), "bn");
  if (flat_output) {
    g->add_output(bn->output(0));
    return g;
  }
  ir::Value* residual = g->add_input("residual", DType::kFloat32, {1, 6, 5});
  ir::Node* back = g->add_node("Reshape", {bn->output(0), g->add_constant("shape", ints({1, 6, 5}))}, 1, "back");
  g->add_output(g->add_node("Add", {back->output(0), residual}, 1, "residual_add")->output(0));
  return g;
}

TEST(LinearBatchNorm, LeViTsLayerFoldsIntoOneProduct) {
  const Norm norm(5);
  const Tensor w = wave({4, 5}, 0.f), x = wave({1, 6, 4}, 0.5f), residual = wave({1, 6, 5}, 2.5f);
  std::vector<double> want = product(x, w, 6, 4, 5, false);
  for (size_t i = 0; i < want.size(); ++i)
    want[i] = norm.apply(want[i], static_cast<int64_t>(i % 5)) + residual.data<float>()[i];

  auto g = levit_layer(w, norm);
  ir::infer_types(*g);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "BatchNormalization"), 0u);
  EXPECT_EQ(count_ops(*g, "Flatten") + count_ops(*g, "Reshape"), 0u);
  EXPECT_EQ(count_ops(*g, "Add"), 0u);
  EXPECT_EQ(count_ops(*g, "FusedMatMul"), 1u);

  for (int level : {0, 2, 3}) {
    SessionOptions options;
    options.optimization_level = level;
    Session s = Session::from_graph(levit_layer(w, norm), options);
    expect_near(s.run({{"x", x}, {"residual", residual}})[0], want, "level " + std::to_string(level));
  }

  // A Shape reading the product (exporters size the Reshape back from it) does not stop the fold.
  g = levit_layer(w, norm);
  g->inputs()[0]->type = ir::Type::tensor(DType::kFloat32, ir::SymShape{ir::Dim::named("batch"), ir::Dim::known(6),
                                                                        ir::Dim::known(4)});
  g->add_output(g->add_node("Shape", {g->nodes()[0]->output(0)}, 1, "product_shape")->output(0));
  ir::infer_types(*g);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "BatchNormalization"), 0u);

  // The normalized rows as the graph's output: the shift is added before the Flatten.
  g = levit_layer(w, norm, /*flat_output=*/true);
  ir::infer_types(*g);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "BatchNormalization"), 0u);
  EXPECT_EQ(count_ops(*g, "FusedMatMul"), 1u);
  for (size_t i = 0; i < want.size(); ++i) want[i] -= residual.data<float>()[i];
  Session s = Session::from_graph(levit_layer(w, norm, true));
  const Tensor rows = s.run({{"x", x}})[0];
  EXPECT_EQ(rows.shape(), (Shape{6, 5}));
  expect_near(rows, want, "flat output");
}

// The product of rank 2 feeds the BN straight; a Gemm, its B transposed or
// not, with a bias per feature, one in all, or none. W is read by a second
// MatMul too: it keeps the weights as they were.
TEST(LinearBatchNorm, RankTwoProductsAndGemmsFold) {
  const Norm norm(3);
  const Tensor x = wave({4, 2}, 0.2f);
  for (const char* layer : {"MatMul", "Gemm", "Gemm transB", "Gemm bias", "Gemm scalar bias"}) {
    SCOPED_TRACE(layer);
    const std::string kind = layer;
    const bool gemm = kind.rfind("Gemm", 0) == 0, trans_b = kind == "Gemm transB";
    const Tensor w = wave(trans_b ? Shape{3, 2} : Shape{2, 3}, 1.f);
    const Tensor bias = wave(kind == "Gemm scalar bias" ? Shape{1} : Shape{3}, 0.9f);
    const bool has_bias = kind.find("bias") != std::string::npos;
    auto make = [&] {
      auto g = std::make_unique<ir::Graph>();
      g->opsets[""] = 17;
      ir::Value* in = g->add_input("x", DType::kFloat32, {4, 2});
      ir::Value* weights = g->add_constant("w", w.clone());  // the graph's alone: rewritable in place
      std::vector<ir::Value*> inputs = {in, weights};
      if (has_bias) inputs.push_back(g->add_constant("c", bias));
      ir::Node* linear = g->add_node(gemm ? "Gemm" : "MatMul", inputs, 1, "linear");
      if (trans_b) linear->attrs.set("transB", int64_t{1});
      g->add_output(norm.add(*g, linear->output(0), "bn")->output(0));
      if (!trans_b) g->add_output(g->add_node("MatMul", {in, weights}, 1, "other_reader")->output(0));
      return g;
    };
    auto g = make();
    ir::infer_types(*g);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "BatchNormalization"), 0u);

    const std::vector<double> plain = product(x, w, 4, 2, 3, trans_b);
    std::vector<double> want = plain;
    for (size_t i = 0; i < want.size(); ++i) {
      const int64_t j = static_cast<int64_t>(i % 3);
      const double c = has_bias ? bias.data<float>()[bias.numel() == 1 ? 0 : j] : 0.0;
      want[i] = norm.apply(want[i] + c, j);
    }
    Session s = Session::from_graph(make());
    const std::vector<Tensor> out = s.run({{"x", x}});
    expect_near(out[0], want, "folded");
    if (!trans_b) expect_near(out[1], plain, "the weights' other reader");
  }
}

// Lookalikes keep their BatchNormalization: a BN of [N, C, L] (axis 1 is
// not the product's last), a reshape that regroups the last axis, a product
// read twice (before a Flatten or not), a BN in training mode or asked for
// its running statistics, a Gemm with alpha, a Gemm whose bias is per row;
// and weights the caller still holds are not rewritten.
TEST(LinearBatchNorm, LookalikesAndCallersWeightsAreLeftAlone) {
  enum Case {
    kChannelsFirst, kRegroupedLastAxis, kProductReadTwice, kFlattenedProductReadTwice, kTrainingMode,
    kTrainingOutputs, kGemmAlpha, kBiasPerRow
  };
  for (Case c : {kChannelsFirst, kRegroupedLastAxis, kProductReadTwice, kFlattenedProductReadTwice, kTrainingMode,
                 kTrainingOutputs, kGemmAlpha, kBiasPerRow}) {
    SCOPED_TRACE(static_cast<int>(c));
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 17;
    ir::Value* in = g->add_input("x", DType::kFloat32, c == kChannelsFirst ? Shape{2, 4, 4} : Shape{4, 4});
    ir::Value* w = g->add_constant("w", wave({4, 4}, 0.f));
    ir::Value* y = nullptr;
    int64_t features = 4;
    if (c == kGemmAlpha || c == kBiasPerRow) {
      ir::Node* gemm = g->add_node("Gemm", {in, w, g->add_constant("c", wave(c == kBiasPerRow ? Shape{4, 1} : Shape{4}, 1.f))}, 1);
      if (c == kGemmAlpha) gemm->attrs.set("alpha", 2.f);
      y = gemm->output(0);
    } else {
      y = g->add_node("MatMul", {in, w}, 1)->output(0);
    }
    if (c == kRegroupedLastAxis) {
      y = g->add_node("Reshape", {y, g->add_constant("shape", ints({8, 2}))}, 1)->output(0);
      features = 2;
    }
    if (c == kProductReadTwice || c == kFlattenedProductReadTwice) g->add_output(g->add_node("Relu", {y}, 1)->output(0));
    if (c == kFlattenedProductReadTwice) y = g->add_node("Flatten", {y}, 1)->output(0);
    const Norm norm(features);
    ir::Node* bn = norm.add(*g, y, "bn");
    if (c == kTrainingMode) bn->attrs.set("training_mode", int64_t{1});  // the batch's statistics
    if (c == kTrainingOutputs) {
      bn->attrs.set("training_mode", int64_t{1});
      bn->outputs.push_back(g->add_value("running_mean"));
      bn->outputs.back()->producer = bn;
      g->add_output(bn->outputs.back());
    }
    g->add_output(bn->output(0));
    ir::infer_types(*g);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "BatchNormalization"), 1u);
  }

  // Opset 6: is_test = 0, the default, meant training; left to the kernel.
  {
    const Norm norm(4);
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 6;
    ir::Value* in = g->add_input("x", DType::kFloat32, {4, 4});
    g->add_output(norm.add(*g, g->add_node("MatMul", {in, g->add_constant("w", wave({4, 4}, 0.f))}, 1)->output(0), "bn")
                      ->output(0));
    ir::infer_types(*g);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "BatchNormalization"), 1u);
  }

  // The caller holds the weights' tensor: the fold scales a copy.
  const Norm norm(3);
  Tensor held = wave({2, 3}, 0.f);
  const Tensor before = held.clone();
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  ir::Value* in = g->add_input("x", DType::kFloat32, {4, 2});
  g->add_output(norm.add(*g, g->add_node("MatMul", {in, g->add_constant("w", held)}, 1)->output(0), "bn")->output(0));
  ir::infer_types(*g);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "BatchNormalization"), 0u);
  for (int64_t i = 0; i < held.numel(); ++i) EXPECT_EQ(held.data<float>()[i], before.data<float>()[i]) << i;
}

}  // namespace
}  // namespace anvil

namespace anvil {
namespace {

// Shapes of a symbolic batch read the product's values (exporters size
// their Reshape back so): a Gemm's output read by a Shape keeps its BN (the
// Gemm would take the BN's output value); a Flatten's read by one folds, the
// Flatten staying for the Shape. Both graphs run and match the layers in
// double.
TEST(LinearBatchNorm, ShapesOfASymbolicBatchReadTheProduct) {
  const Norm norm(3);
  const Tensor w = wave({2, 3}, 1.f), x = wave({4, 2}, 0.2f);
  std::vector<double> want = product(x, w, 4, 2, 3, false);
  for (size_t i = 0; i < want.size(); ++i) want[i] = norm.apply(want[i], static_cast<int64_t>(i % 3));
  for (const bool gemm : {true, false}) {
    SCOPED_TRACE(gemm ? "Gemm" : "MatMul, Flatten");
    auto make = [&] {
      auto g = std::make_unique<ir::Graph>();
      g->opsets[""] = 17;
      ir::Value* in = g->add_input("x", DType::kFloat32, {});
      in->type = ir::Type::tensor(DType::kFloat32, ir::SymShape{ir::Dim::named("batch"), ir::Dim::known(2)});
      ir::Value* y = g->add_node(gemm ? "Gemm" : "MatMul", {in, g->add_constant("w", w.clone())}, 1)->output(0);
      if (!gemm) y = g->add_node("Flatten", {y}, 1, "flat")->output(0);
      g->add_output(g->add_node("Shape", {y}, 1, "rows")->output(0));
      g->add_output(norm.add(*g, y, "bn")->output(0));
      return g;
    };
    auto g = make();
    ir::infer_types(*g);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "BatchNormalization"), gemm ? 1u : 0u);
    Session s = Session::from_graph(make());
    const std::vector<Tensor> out = s.run({{"x", x}});
    ASSERT_EQ(out[0].numel(), 2);
    EXPECT_EQ(out[0].data<int64_t>()[0], 4);
    EXPECT_EQ(out[0].data<int64_t>()[1], 3);
    expect_near(out[1], want, "normalized");
  }

  // LeViT's layer at a symbolic batch: [batch, 2, 2] -> MatMul -> Flatten ->
  // BN -> Reshape back to Shape(product), a Shape reading the Flatten too.
  auto levit = [&] {
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 17;
    ir::Value* in = g->add_input("x", DType::kFloat32, {});
    in->type = ir::Type::tensor(DType::kFloat32, ir::SymShape{ir::Dim::named("batch"), ir::Dim::known(2), ir::Dim::known(2)});
    ir::Value* y = g->add_node("MatMul", {in, g->add_constant("w", w.clone())}, 1, "mm")->output(0);
    ir::Node* flat = g->add_node("Flatten", {y}, 1, "flat");
    flat->attrs.set("axis", int64_t{2});
    g->add_output(g->add_node("Shape", {flat->output(0)}, 1, "rows")->output(0));
    ir::Value* n = norm.add(*g, flat->output(0), "bn")->output(0);
    ir::Value* back = g->add_node("Shape", {y}, 1, "product_shape")->output(0);
    g->add_output(g->add_node("Reshape", {n, back}, 1, "back")->output(0));
    return g;
  };
  auto g = levit();
  ir::infer_types(*g);
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "BatchNormalization"), 0u);
  Session s = Session::from_graph(levit());
  const Tensor x3 = x.reshaped({2, 2, 2});
  const std::vector<Tensor> out = s.run({{"x", x3}});
  EXPECT_EQ(out[0].data<int64_t>()[0], 4);
  EXPECT_EQ(out[1].shape(), (Shape{2, 2, 3}));
  expect_near(out[1], want, "LeViT's layer");
}

}  // namespace
}  // namespace anvil
