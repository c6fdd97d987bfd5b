// The passes that remove data shuffles: shape folding under symbolic dims
// (fold_shapes.cc), Transpose/Reshape elimination (simplify_reshapes.cc) and
// transposes folded into the matmuls that read them
// (fold_matmul_transpose.cc), with FusedMatMul's transA / transB on both
// backends. Each checks the rewritten graph, the cases left alone, and the
// values computed against hand-computed ones.
#include <gtest/gtest.h>

#include "anvil/session.h"
#include "core/vector_isa.h"
#include "ir/schema.h"
#include "kernel_tester.h"
#include "passes/pipeline.h"
#include "runtime/constant_evaluator.h"

namespace anvil {
namespace {

using testing::i64;

using testing::count_live_ops;

const ir::Node* find_op(const ir::Graph& g, const std::string& op) {
  for (const auto& node : g.nodes())
    if (!node->dead && node->op_type == op) return node.get();
  return nullptr;
}

Tensor ramp(Shape shape, float start = 0.f, float step = 1.f) {
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + step * static_cast<float>(i);
  return t;
}

std::unique_ptr<ir::Graph> new_graph() {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  return g;
}

ir::Value* transpose(ir::Graph& g, ir::Value* x, std::vector<int64_t> perm) {
  ir::Node* t = g.add_node("Transpose", {x}, 1);
  t->attrs.set("perm", std::move(perm));
  return t->output(0);
}

ir::Value* reshape(ir::Graph& g, ir::Value* x, std::vector<int64_t> target) {
  const auto n = static_cast<int64_t>(target.size());
  return g.add_node("Reshape", {x, g.add_constant(g.unique_name("target"), i64({n}, target))}, 1)->output(0);
}

// x [batch, 3, 4] -> Reshape(x, Concat(Unsqueeze(Shape(x)[gathered]), [-1])).
std::unique_ptr<ir::Graph> reshape_by_own_dim(int64_t gathered) {
  auto g = new_graph();
  ir::Value* x = g->add_input("x", DType::kFloat32, {-1, 3, 4});
  x->type = ir::Type::tensor(DType::kFloat32, ir::SymShape{ir::Dim::named("batch"), ir::Dim::known(3), ir::Dim::known(4)});
  ir::Value* shape = g->add_node("Shape", {x}, 1)->output(0);
  ir::Value* dim = g->add_node("Gather", {shape, g->add_constant("index", i64({}, {gathered}))}, 1)->output(0);
  ir::Value* dims = g->add_node("Unsqueeze", {dim, g->add_constant("axes", i64({1}, {0}))}, 1)->output(0);
  ir::Node* concat = g->add_node("Concat", {g->add_constant("minus1", i64({1}, {-1})), dims}, 1);
  concat->attrs.set("axis", int64_t{0});
  g->add_output(g->add_node("Reshape", {x, concat->output(0)}, 1)->output(0));
  ir::infer_types(*g);
  return g;
}

TEST(FoldShapes, KnownDimsOfASymbolicShapeBecomeConstants) {
  auto g = reshape_by_own_dim(2);  // Shape(x)[2] is 4 whatever the batch
  passes::optimize(*g, 1, runtime::reference_evaluator());
  EXPECT_EQ(count_live_ops(*g, "Shape") + count_live_ops(*g, "Gather") + count_live_ops(*g, "Concat"), 0u);
  const ir::Node* r = find_op(*g, "Reshape");
  ASSERT_TRUE(r && r->input(1)->is_constant());
  EXPECT_EQ(testing::values<int64_t>(*r->input(1)->constant), (std::vector<int64_t>{-1, 4}));
  ASSERT_TRUE(r->output(0)->type.has_shape());

  Session s = Session::from_graph(reshape_by_own_dim(2));
  Tensor x = ramp({5, 3, 4});
  Tensor y = s.run({{"x", x}})[0];
  EXPECT_EQ(y.shape(), Shape({15, 4}));
  EXPECT_EQ(testing::values<float>(y), testing::values<float>(x));
}

// x [batch, 4] -> r = Relu(x), which the model declares [1, 4] (stale
// value_info, as when a batch dim is made symbolic on the inputs only); then
// Reshape(x, [Shape(r)[0], 2, -1]) and Transpose(r).
std::unique_ptr<ir::Graph> stale_declared_type() {
  auto g = new_graph();
  ir::Value* x = g->add_input("x", DType::kFloat32, {-1, 4});
  x->type = ir::Type::tensor(DType::kFloat32, ir::SymShape{ir::Dim::named("batch"), ir::Dim::known(4)});
  ir::Value* r = g->add_node("Relu", {x}, 1)->output(0);
  r->type = ir::Type::tensor(DType::kFloat32, Shape{1, 4});
  ir::Value* shape = g->add_node("Shape", {r}, 1)->output(0);
  ir::Value* dim = g->add_node("Gather", {shape, g->add_constant("index", i64({}, {0}))}, 1)->output(0);
  ir::Value* dims = g->add_node("Unsqueeze", {dim, g->add_constant("axes", i64({1}, {0}))}, 1)->output(0);
  ir::Node* concat = g->add_node("Concat", {dims, g->add_constant("rest", i64({2}, {2, -1}))}, 1);
  concat->attrs.set("axis", int64_t{0});
  g->add_output(g->add_node("Reshape", {x, concat->output(0)}, 1)->output(0));
  g->add_output(transpose(*g, r, {1, 0}));  // not a unit-axis move: r's first dim is the batch
  ir::infer_types(*g);
  return g;
}

TEST(FoldShapes, DeclaredTypesOfInnerValuesAreNotTrusted) {
  auto g = stale_declared_type();
  passes::optimize(*g, 3, runtime::reference_evaluator());
  EXPECT_EQ(count_live_ops(*g, "Shape"), 1u);  // Shape(r)[0] is the batch, whatever r's value_info says
  EXPECT_EQ(count_live_ops(*g, "Transpose"), 1u);

  Session s = Session::from_graph(stale_declared_type());
  Tensor x = ramp({3, 4}, -5.f);
  std::vector<Tensor> y = s.run({{"x", x}});
  EXPECT_EQ(y[0].shape(), Shape({3, 2, 2}));
  ASSERT_EQ(y[1].shape(), Shape({4, 3}));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(y[1].data<float>()[j * 3 + i], std::max(0.f, x.data<float>()[i * 4 + j]));
}

TEST(FoldShapes, SymbolicDimsStayComputed) {
  auto g = reshape_by_own_dim(0);  // Shape(x)[0] is the batch
  passes::optimize(*g, 1, runtime::reference_evaluator());
  EXPECT_EQ(count_live_ops(*g, "Shape"), 1u);
  EXPECT_EQ(count_live_ops(*g, "Concat"), 1u);

  Session s = Session::from_graph(reshape_by_own_dim(0));
  Tensor y = s.run({{"x", ramp({2, 3, 4})}})[0];
  EXPECT_EQ(y.shape(), Shape({12, 2}));  // [-1, batch]
}

// x [2, 3, 4] -> Transpose(p1) -> Transpose(p2) -> Relu.
std::unique_ptr<ir::Graph> two_transposes(std::vector<int64_t> p1, std::vector<int64_t> p2) {
  auto g = new_graph();
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 3, 4});
  ir::Value* t = transpose(*g, transpose(*g, x, std::move(p1)), std::move(p2));
  g->add_output(g->add_node("Relu", {t}, 1)->output(0));
  ir::infer_types(*g);
  return g;
}

TEST(SimplifyReshapes, TransposeAndItsInverseVanish) {
  auto g = two_transposes({0, 2, 1}, {0, 2, 1});
  passes::optimize(*g, 1, runtime::reference_evaluator());
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0]->op_type, "Relu");
  EXPECT_EQ(g->nodes()[0]->input(0), g->inputs()[0]);
}

TEST(SimplifyReshapes, TwoTransposesComposeIntoOne) {
  auto g = two_transposes({1, 0, 2}, {0, 2, 1});  // [3, 2, 4] then [3, 4, 2]
  passes::optimize(*g, 1, runtime::reference_evaluator());
  ASSERT_EQ(count_live_ops(*g, "Transpose"), 1u);
  EXPECT_EQ(find_op(*g, "Transpose")->attrs.get_ints("perm"), (std::vector<int64_t>{1, 2, 0}));

  Session s = Session::from_graph(two_transposes({1, 0, 2}, {0, 2, 1}));
  Tensor x = ramp({2, 3, 4}, -5.f);
  Tensor y = s.run({{"x", x}})[0];
  ASSERT_EQ(y.shape(), Shape({3, 4, 2}));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t k = 0; k < 2; ++k)
        EXPECT_EQ(y.data<float>()[(i * 4 + j) * 2 + k], std::max(0.f, x.data<float>()[(k * 3 + i) * 4 + j]));
}

// x [4, 1, 3] -> Transpose(perm) -> Relu.
std::unique_ptr<ir::Graph> one_transpose(Shape x_shape, std::vector<int64_t> perm) {
  auto g = new_graph();
  ir::Value* x = g->add_input("x", DType::kFloat32, std::move(x_shape));
  g->add_output(g->add_node("Relu", {transpose(*g, x, std::move(perm))}, 1)->output(0));
  ir::infer_types(*g);
  return g;
}

TEST(SimplifyReshapes, TransposeOfUnitAxesBecomesAReshape) {
  auto g = one_transpose({4, 1, 3}, {1, 0, 2});  // [1, 4, 3]: no element moves
  passes::optimize(*g, 1, runtime::reference_evaluator());
  EXPECT_EQ(count_live_ops(*g, "Transpose"), 0u);
  ASSERT_EQ(count_live_ops(*g, "Reshape"), 1u);
  EXPECT_EQ(testing::values<int64_t>(*find_op(*g, "Reshape")->input(1)->constant), (std::vector<int64_t>{1, 4, 3}));

  Session s = Session::from_graph(one_transpose({4, 1, 3}, {1, 0, 2}));
  Tensor x = ramp({4, 1, 3});
  Tensor y = s.run({{"x", x}})[0];
  EXPECT_EQ(y.shape(), Shape({1, 4, 3}));
  EXPECT_EQ(testing::values<float>(y), testing::values<float>(x));
}

TEST(SimplifyReshapes, EmptyTensorsKeepTheirTranspose) {
  // [1, 0] -> [0, 1] moves only a unit axis, but a Reshape target of 0 would copy a dim.
  auto g = one_transpose({1, 0}, {1, 0});
  passes::optimize(*g, 3, runtime::reference_evaluator());
  EXPECT_EQ(count_live_ops(*g, "Reshape"), 0u);
  Session s = Session::from_graph(one_transpose({1, 0}, {1, 0}));
  EXPECT_EQ(s.run({{"x", Tensor(DType::kFloat32, {1, 0})}})[0].shape(), Shape({0, 1}));
}

TEST(SimplifyReshapes, TransposesThatMoveDataStay) {
  for (Shape shape : {Shape{4, 2, 3}, Shape{4, 1, 3}}) {
    std::vector<int64_t> perm = shape[1] == 1 ? std::vector<int64_t>{2, 1, 0} : std::vector<int64_t>{1, 0, 2};
    auto g = one_transpose(shape, perm);
    passes::optimize(*g, 3, runtime::reference_evaluator());
    EXPECT_EQ(count_live_ops(*g, "Transpose"), 1u) << shape_str(shape);
    EXPECT_EQ(count_live_ops(*g, "Reshape"), 0u) << shape_str(shape);
  }
}

TEST(SimplifyReshapes, ReshapeChainsBecomeOneReshape) {
  auto build = [] {
    auto g = new_graph();
    ir::Value* x = g->add_input("x", DType::kFloat32, {2, 3, 4});
    ir::Value* flat = g->add_node("Flatten", {reshape(*g, x, {6, 4})}, 1)->output(0);  // [6, 4]
    g->add_output(g->add_node("Relu", {reshape(*g, flat, {4, -1})}, 1)->output(0));
    ir::infer_types(*g);
    return g;
  };
  auto g = build();
  passes::optimize(*g, 1, runtime::reference_evaluator());
  EXPECT_EQ(count_live_ops(*g, "Flatten"), 0u);
  ASSERT_EQ(count_live_ops(*g, "Reshape"), 1u);
  const ir::Node* r = find_op(*g, "Reshape");
  EXPECT_EQ(r->input(0), g->inputs()[0]);
  EXPECT_EQ(testing::values<int64_t>(*r->input(1)->constant), (std::vector<int64_t>{4, -1}));

  Session s = Session::from_graph(build());
  Tensor x = ramp({2, 3, 4}, -3.f);
  Tensor y = s.run({{"x", x}})[0];
  ASSERT_EQ(y.shape(), Shape({4, 6}));
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(y.data<float>()[i], std::max(0.f, x.data<float>()[i]));
}

// x [batch, 3, 4] -> Reshape(first) -> Reshape(second) -> Relu.
std::unique_ptr<ir::Graph> symbolic_reshapes(std::vector<int64_t> first, std::vector<int64_t> second) {
  auto g = new_graph();
  ir::Value* x = g->add_input("x", DType::kFloat32, {-1, 3, 4});
  x->type = ir::Type::tensor(DType::kFloat32, ir::SymShape{ir::Dim::named("batch"), ir::Dim::known(3), ir::Dim::known(4)});
  ir::Value* r = reshape(*g, reshape(*g, x, std::move(first)), std::move(second));
  g->add_output(g->add_node("Relu", {r}, 1)->output(0));
  ir::infer_types(*g);
  return g;
}

TEST(SimplifyReshapes, ReshapesUnderASymbolicDim) {
  // The second target copies no dim (no 0): it alone sets the shape.
  auto merged = symbolic_reshapes({0, 12}, {-1, 2, 6});
  passes::optimize(*merged, 1, runtime::reference_evaluator());
  EXPECT_EQ(count_live_ops(*merged, "Reshape"), 1u);
  // The second target's 0 copies the first one's output dim: left alone.
  auto kept = symbolic_reshapes({0, 12}, {0, 2, 6});
  passes::optimize(*kept, 1, runtime::reference_evaluator());
  EXPECT_EQ(count_live_ops(*kept, "Reshape"), 2u);
  // A Reshape of [batch, 3, 4] to [0, 3, 4] is surely its input: it goes.
  auto same = symbolic_reshapes({0, 3, 4}, {0, 12});
  passes::optimize(*same, 1, runtime::reference_evaluator());
  EXPECT_EQ(count_live_ops(*same, "Reshape"), 1u);

  Session s = Session::from_graph(symbolic_reshapes({0, 12}, {-1, 2, 6}));
  Tensor x = ramp({3, 3, 4}, -10.f);
  Tensor y = s.run({{"x", x}})[0];
  ASSERT_EQ(y.shape(), Shape({3, 2, 6}));
  for (int64_t i = 0; i < 36; ++i) EXPECT_EQ(y.data<float>()[i], std::max(0.f, x.data<float>()[i]));
}

TEST(SimplifyReshapes, LevelZeroKeepsEveryShuffle) {
  auto g = two_transposes({0, 2, 1}, {0, 2, 1});
  passes::optimize(*g, 0, runtime::reference_evaluator());
  EXPECT_EQ(count_live_ops(*g, "Transpose"), 2u);
}

// C[b, i, j] = sum_k A[b, i, k] B[b, k, j] over explicit strides (A[b] of
// a_rows x a_cols read transposed when trans_a, likewise B), in double.
std::vector<float> batched_product(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, int64_t batch,
                                   int64_t m, int64_t k, int64_t n, bool broadcast_a = false) {
  std::vector<float> c(static_cast<size_t>(batch * m * n));
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t q = 0; q < k; ++q) {
          const int64_t ab = broadcast_a ? 0 : p;
          const float av = trans_a ? a.data<float>()[(ab * k + q) * m + i] : a.data<float>()[(ab * m + i) * k + q];
          const float bv = trans_b ? b.data<float>()[(p * n + j) * k + q] : b.data<float>()[(p * k + q) * n + j];
          acc += double(av) * bv;
        }
        c[static_cast<size_t>((p * m + i) * n + j)] = static_cast<float>(acc);
      }
  return c;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-4f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol * (1.f + std::fabs(want[i]))) << i;
}

// MatMul(Transpose(a [2, 5, 3]), b [2, 5, 4]) and MatMul(c [2, 3, 5], Transpose(d [2, 4, 5])).
std::unique_ptr<ir::Graph> transposed_operands() {
  auto g = new_graph();
  ir::Value* a = g->add_input("a", DType::kFloat32, {2, 5, 3});
  ir::Value* b = g->add_input("b", DType::kFloat32, {2, 5, 4});
  ir::Value* c = g->add_input("c", DType::kFloat32, {2, 3, 5});
  ir::Value* d = g->add_input("d", DType::kFloat32, {2, 4, 5});
  g->add_output(g->add_node("MatMul", {transpose(*g, a, {0, 2, 1}), b}, 1)->output(0));
  g->add_output(g->add_node("MatMul", {c, transpose(*g, d, {0, 2, 1})}, 1)->output(0));
  ir::infer_types(*g);
  return g;
}

TEST(FoldMatMulTranspose, SwapsOfTheLastTwoAxesBecomeFlags) {
  auto g = transposed_operands();
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_live_ops(*g, "Transpose") + count_live_ops(*g, "MatMul"), 0u);
  ASSERT_EQ(count_live_ops(*g, "FusedMatMul"), 2u);
  int trans_a = 0, trans_b = 0;
  for (const auto& n : g->nodes()) {
    trans_a += static_cast<int>(n->attrs.get_int("transA", 0));
    trans_b += static_cast<int>(n->attrs.get_int("transB", 0));
  }
  EXPECT_EQ(trans_a, 1);
  EXPECT_EQ(trans_b, 1);

  Session s = Session::from_graph(transposed_operands());
  Tensor a = ramp({2, 5, 3}, -1.f, 0.1f), b = ramp({2, 5, 4}, 0.5f, -0.05f);
  Tensor c = ramp({2, 3, 5}, 0.3f, 0.07f), d = ramp({2, 4, 5}, -0.8f, 0.04f);
  std::vector<Tensor> y = s.run({{"a", a}, {"b", b}, {"c", c}, {"d", d}});
  expect_near(testing::values<float>(y[0]), batched_product(a, true, b, false, 2, 3, 5, 4));
  expect_near(testing::values<float>(y[1]), batched_product(c, false, d, true, 2, 3, 5, 4));
}

TEST(FoldMatMulTranspose, OtherPermutationsAndLevelOneAreLeftAlone) {
  auto g = new_graph();
  ir::Value* a = g->add_input("a", DType::kFloat32, {5, 2, 3});
  ir::Value* b = g->add_input("b", DType::kFloat32, {2, 3, 4});
  g->add_output(g->add_node("MatMul", {transpose(*g, a, {1, 0, 2}), b}, 1)->output(0));  // swaps the batch
  ir::infer_types(*g);
  passes::optimize(*g, 3, runtime::reference_evaluator());
  EXPECT_EQ(count_live_ops(*g, "FusedMatMul"), 0u);
  EXPECT_EQ(count_live_ops(*g, "Transpose"), 1u);

  auto basic = transposed_operands();
  passes::optimize(*basic, 1, runtime::reference_evaluator());
  EXPECT_EQ(count_live_ops(*basic, "Transpose"), 2u);
}

TEST(FoldMatMulTranspose, GemmFlagsFlip) {
  auto build = [] {
    auto g = new_graph();
    ir::Value* a = g->add_input("a", DType::kFloat32, {5, 3});
    ir::Value* b = g->add_input("b", DType::kFloat32, {4, 5});
    ir::Node* gemm = g->add_node("Gemm", {transpose(*g, a, {1, 0}), b}, 1);
    gemm->attrs.set("transB", int64_t{1});  // Gemm(A^T, B^T) with A^T [3, 5] and B [4, 5]
    g->add_output(gemm->output(0));
    ir::infer_types(*g);
    return g;
  };
  auto g = build();
  passes::optimize(*g, 2, runtime::reference_evaluator());
  EXPECT_EQ(count_live_ops(*g, "Transpose"), 0u);
  const ir::Node* gemm = find_op(*g, "Gemm");
  ASSERT_TRUE(gemm);
  EXPECT_EQ(gemm->attrs.get_int("transA", 0), 1);
  EXPECT_EQ(gemm->attrs.get_int("transB", 0), 1);

  Session s = Session::from_graph(build());
  Tensor a = ramp({5, 3}, 0.2f, 0.1f), b = ramp({4, 5}, -1.f, 0.09f);
  expect_near(testing::values<float>(s.run({{"a", a}, {"b", b}})[0]), batched_product(a, true, b, true, 1, 3, 5, 4));
}

// FusedMatMul's transA / transB on each backend, with a bias and the operands
// broadcast (a 2-D A against a batched B), and a product large enough for
// Anvil's GEMM (where oneDNN has no brgemm: AVX2 and below, and capped there
// with ANVIL_MAX_ISA, which ctest does for VecKernels.*).
TEST(VecKernels, FusedMatMulReadsTransposedOperands) {
  for (kernels::Backend backend : {kernels::Backend::kRef, kernels::Backend::kDnnl}) {
    testing::KernelOptions o;
    o.backend = backend;
    o.domain = "anvil";
    o.opset = 1;
    SCOPED_TRACE(backend == kernels::Backend::kRef ? "ref" : "dnnl");
    // A [5, 3] read as [3, 5], against B [2, 5, 4]: C [2, 3, 4], plus a bias along N.
    Tensor a = ramp({5, 3}, -0.4f, 0.06f), b = ramp({2, 5, 4}, 0.9f, -0.03f), bias = ramp({4}, 1.f, 0.5f);
    auto c = testing::run_kernel("FusedMatMul", {a, b, bias}, testing::attrs({{"transA", int64_t{1}}}), o)[0];
    ASSERT_EQ(c.shape(), Shape({2, 3, 4}));
    std::vector<float> want = batched_product(a, true, b, false, 2, 3, 5, 4, /*broadcast_a=*/true);
    for (size_t i = 0; i < want.size(); ++i) want[i] += bias.data<float>()[i % 4];
    expect_near(testing::values<float>(c), want);
    // A [300, 64] against B [48, 64] read as [64, 48].
    Tensor big_a = ramp({300, 64}, -1.f, 1e-4f), big_b = ramp({48, 64}, 0.5f, -3e-4f);
    testing::KernelResult big =
        testing::run_kernel_full("FusedMatMul", {big_a, big_b}, testing::attrs({{"transB", int64_t{1}}}), o);
    if (backend == kernels::Backend::kDnnl && vector_isa() != VectorIsa::kAvx512) {
      EXPECT_NE(big.impl.find(":gemm"), std::string::npos) << big.impl;  // Anvil's GEMM, B read through strides
    }
    ASSERT_EQ(big.outputs[0].shape(), Shape({300, 48}));
    expect_near(testing::values<float>(big.outputs[0]), batched_product(big_a, false, big_b, true, 1, 300, 64, 48),
                1e-3f);
  }
}

TEST(FusedMatMulTranspose, ONNXMatMulIgnoresStrayTransposeAttributes) {
  // ONNX's MatMul has no transA: a file that sets one still multiplies A by B, on either backend.
  Tensor a = ramp({2, 2}, 1.f), b = ramp({2, 2}, -1.f, 0.5f);  // square, so a transposed read would also fit
  const std::vector<float> want = batched_product(a, false, b, false, 1, 2, 2, 2);
  for (kernels::Backend backend : {kernels::Backend::kRef, kernels::Backend::kDnnl}) {
    testing::KernelOptions o;
    o.backend = backend;
    expect_near(testing::values<float>(testing::run_kernel("MatMul", {a, b}, testing::attrs({{"transA", int64_t{1}}}), o)[0]),
                want);
  }
}

TEST(FusedMatMulTranspose, AVectorCannotBeTransposed) {
  testing::KernelOptions o;
  o.domain = "anvil";
  o.opset = 1;
  std::string message;
  EXPECT_EQ(testing::error_kind_of(
                [&] {
                  testing::run_kernel("FusedMatMul", {ramp({5}), ramp({5, 4})}, testing::attrs({{"transA", int64_t{1}}}),
                                      o);
                },
                &message),
            ErrorKind::kInvalidArgument);
  EXPECT_NE(message.find("transA"), std::string::npos) << message;
}

}  // namespace
}  // namespace anvil
