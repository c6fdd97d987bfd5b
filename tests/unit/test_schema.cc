// Op schemas and symbolic shape inference (src/ir/schema.cc, src/ir/schemas/):
// symbolic dims reach the outputs, shape chains become symbolic values,
// contradictions with the declared types are invalid models. Expected types
// are written by hand.
#include <gtest/gtest.h>

#include "anvil/error.h"
#include "ir/dim_math.h"
#include "ir/graph.h"
#include "ir/schema.h"
#include "kernels/kernel.h"

namespace anvil {
namespace {

using ir::Dim;

Tensor ints(std::vector<int64_t> v) {
  Tensor t(DType::kInt64, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

std::unique_ptr<ir::Graph> graph17() {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  return g;
}

ir::Value* sym_input(ir::Graph& g, const std::string& name, ir::SymShape dims, DType dtype = DType::kFloat32) {
  ir::Value* v = g.add_input(name, dtype, {});
  v->type = ir::Type::tensor(dtype, std::move(dims));
  return v;
}

ir::Node* add(ir::Graph& g, const std::string& op, std::vector<ir::Value*> in, int outputs = 1) {
  ir::Node* n = g.add_node(op, std::move(in), outputs);
  n->opset = 17;
  return n;
}

TEST(DimMath, MonomialsMultiplyAndDivideExactly) {
  Dim bs = ir::dim_mul(Dim::named("batch"), Dim::named("seq"));
  EXPECT_EQ(bs.str(), "batch*seq");
  EXPECT_EQ(ir::dim_mul(Dim::named("seq"), Dim::named("batch")).str(), "batch*seq");  // canonical order
  EXPECT_EQ(ir::dim_mul(Dim::known(64), Dim::named("seq")).str(), "64*seq");
  EXPECT_EQ(ir::dim_div(bs, Dim::named("seq"))->str(), "batch");
  EXPECT_EQ(ir::dim_div(ir::dim_mul(Dim::known(768), bs), Dim::known(12))->str(), "64*batch*seq");
  EXPECT_FALSE(ir::dim_div(Dim::named("batch"), Dim::known(2)).has_value());
  EXPECT_FALSE(ir::dim_div(Dim::named("batch"), Dim::named("seq")).has_value());
  EXPECT_EQ(ir::dim_mul(Dim::named("batch"), Dim::unknown()).str(), "?");
  EXPECT_EQ(ir::dim_add(Dim::known(3), Dim::known(4)).value, 7);
  EXPECT_EQ(ir::dim_add(Dim::named("a"), Dim::named("b")).str(), "?");
}

// x: [batch, seq, 768] -> Reshape(x, Concat(Shape(x)[0], Shape(x)[1], 12, 64)) -> Transpose(0,2,1,3)
TEST(Schema, ShapeGatherConcatReshapeChainGivesSymbolicDims) {
  auto g = graph17();
  ir::Value* x = sym_input(*g, "x", {Dim::named("batch"), Dim::named("seq"), Dim::known(768)});
  ir::Value* shape = add(*g, "Shape", {x})->output(0);
  std::vector<ir::Value*> parts;
  for (int64_t i : {0, 1}) {
    ir::Node* gather = add(*g, "Gather", {shape, g->add_constant("i" + std::to_string(i), ints({i}))});
    parts.push_back(gather->output(0));
  }
  parts.push_back(g->add_constant("heads", ints({12})));
  parts.push_back(g->add_constant("head_size", ints({64})));
  ir::Node* concat = add(*g, "Concat", parts);
  concat->attrs.set("axis", int64_t{0});
  ir::Node* reshape = add(*g, "Reshape", {x, concat->output(0)});
  ir::Node* transpose = add(*g, "Transpose", {reshape->output(0)});
  transpose->attrs.set("perm", std::vector<int64_t>{0, 2, 1, 3});
  g->add_output(transpose->output(0));
  ir::infer_types(*g);
  EXPECT_EQ(reshape->output(0)->type.str(), "float32[batch,seq,12,64]");
  EXPECT_EQ(transpose->output(0)->type.str(), "float32[batch,12,seq,64]");
}

// PyTorch's token.expand(n, -1, -1) (ViT's class token): the shape [n, -1,
// -1] becomes Where(Equal(shape, ConstantOfShape(Shape(shape), 1) * -1),
// ones, shape) = [n, 1, 1] before the Expand. The Equal and Where of shape
// values keep the symbol; a Less of them is not computed (nor needed).
TEST(Schema, TorchExpandOfASymbolicBatchKeepsTheSymbol) {
  auto g = graph17();
  ir::Value* x = sym_input(*g, "x", {Dim::named("n"), Dim::known(3)});
  ir::Value* token = sym_input(*g, "token", {Dim::known(1), Dim::known(1), Dim::known(4)});
  ir::Node* n = add(*g, "Gather", {add(*g, "Shape", {x})->output(0), g->add_constant("i0", ints({0}))});
  ir::Node* target = add(*g, "Concat", {n->output(0), g->add_constant("rest", ints({-1, -1}))});
  target->attrs.set("axis", int64_t{0});
  ir::Node* flat = add(*g, "Reshape", {target->output(0), g->add_constant("flat", ints({-1}))});
  ir::Node* ones = add(*g, "ConstantOfShape", {add(*g, "Shape", {flat->output(0)})->output(0)});
  ones->attrs.set("value", ints({1}));
  ir::Node* minus = add(*g, "Mul", {ones->output(0), g->add_constant("minus_one", ints({-1}))});
  ir::Node* eq = add(*g, "Equal", {flat->output(0), minus->output(0)});
  ir::Node* shape = add(*g, "Where", {eq->output(0), ones->output(0), flat->output(0)});
  ir::Node* expand = add(*g, "Expand", {token, shape->output(0)});
  ir::Node* less = add(*g, "Less", {flat->output(0), minus->output(0)});
  ir::Node* unsure = add(*g, "Where", {less->output(0), ones->output(0), flat->output(0)});
  ir::Node* expand_unsure = add(*g, "Expand", {token, unsure->output(0)});
  g->add_output(expand->output(0));
  g->add_output(expand_unsure->output(0));
  ir::infer_types(*g);
  EXPECT_EQ(expand->output(0)->type.str(), "float32[n,1,4]");
  EXPECT_EQ(expand_unsure->output(0)->type.str(), "float32[...]");
  // Equal of one symbol with itself is 1; of a symbol with another, unknown.
  auto g2 = graph17();
  ir::Value* ab = sym_input(*g2, "ab", {Dim::named("a"), Dim::named("b")});
  ir::Value* dims = add(*g2, "Shape", {ab})->output(0);
  auto dim = [&](int64_t i) {
    return add(*g2, "Gather", {dims, g2->add_constant("i" + std::to_string(i), ints({i}))})->output(0);
  };
  auto expand_if = [&](ir::Value* a, ir::Value* b) {
    ir::Node* same = add(*g2, "Equal", {a, b});
    ir::Node* pick = add(*g2, "Where", {same->output(0), g2->add_constant(g2->unique_name("y"), ints({7, 7})),
                                        g2->add_constant(g2->unique_name("n"), ints({5, 5}))});
    ir::Node* e = add(*g2, "Expand", {sym_input(*g2, g2->unique_name("one"), {Dim::known(1)}), pick->output(0)});
    g2->add_output(e->output(0));
    return e->output(0);
  };
  ir::Value* a_a = expand_if(dim(0), dim(0));
  ir::Value* a_b = expand_if(dim(0), dim(1));
  ir::infer_types(*g2);
  EXPECT_EQ(a_a->type.str(), "float32[7,7]");
  EXPECT_EQ(a_b->type.str(), "float32[...]");
}

// Hugging Face's BERT slices position_ids[:, :seq] from a [1, 512] buffer:
// min(seq, 512) long, which broadcasts against seq as seq. GPT-2 slices its
// causal buffer from key_length - query_length = seq - seq = 0.
TEST(Schema, SlicesToASymbolicLengthBroadcastAsTheSymbol) {
  auto g = graph17();
  ir::Value* ids = sym_input(*g, "ids", {Dim::named("batch"), Dim::named("seq")}, DType::kInt64);
  ir::Node* seq = add(*g, "Gather", {add(*g, "Shape", {ids})->output(0), g->add_constant("i1", ints({1}))});
  Tensor buffer(DType::kInt64, {1, 512});
  ir::Node* positions = add(*g, "Slice", {g->add_constant("buffer", buffer), g->add_constant("zero", ints({0})),
                                          seq->output(0), g->add_constant("axis1", ints({1}))});
  ir::Value* table = sym_input(*g, "table", {Dim::known(512), Dim::known(8)});
  ir::Node* embedded = add(*g, "Gather", {table, positions->output(0)});
  ir::Node* words = add(*g, "Gather", {table, ids});
  ir::Node* sum = add(*g, "Add", {words->output(0), embedded->output(0)});
  // The same slice of an axis that is seq long already: seq.
  ir::Node* whole = add(*g, "Slice", {words->output(0), g->add_constant("zero1", ints({0})), seq->output(0),
                                      g->add_constant("axis1b", ints({1}))});
  // buffer[:, seq - seq : seq]
  ir::Node* start = add(*g, "Sub", {seq->output(0), seq->output(0)});
  ir::Node* causal = add(*g, "Slice", {g->add_constant("buffer2", buffer), start->output(0), seq->output(0),
                                       g->add_constant("axis1c", ints({1}))});
  ir::Node* sum_reversed = add(*g, "Add", {embedded->output(0), words->output(0)});
  // buffer[:, 1:seq] is min(seq, 512) - 1 long: unknown.
  ir::Node* from_one = add(*g, "Slice", {g->add_constant("buffer3", buffer), g->add_constant("one", ints({1})),
                                         seq->output(0), g->add_constant("axis1d", ints({1}))});
  for (ir::Node* n : {sum, whole, causal, sum_reversed, from_one}) g->add_output(n->output(0));
  ir::infer_types(*g);
  EXPECT_EQ(sum_reversed->output(0)->type.str(), "float32[batch,seq,8]");
  EXPECT_EQ(from_one->output(0)->type.str(), "int64[1,?]");
  EXPECT_EQ(positions->output(0)->type.str(), "int64[1,min(seq,512)]");
  EXPECT_EQ(sum->output(0)->type.str(), "float32[batch,seq,8]");
  EXPECT_EQ(whole->output(0)->type.str(), "float32[batch,seq,8]");
  EXPECT_EQ(causal->output(0)->type.str(), "int64[1,min(seq,512)]");
  // Another symbol does not broadcast so: either may be 1.
  EXPECT_EQ(ir::dim_min(Dim::named("seq"), 512).str(), "min(seq,512)");
  EXPECT_TRUE(ir::is_min_of(Dim::named("min(seq,512)"), Dim::named("seq")));
  EXPECT_FALSE(ir::is_min_of(Dim::named("min(seq,512)"), Dim::named("se")));
  EXPECT_FALSE(ir::is_min_of(Dim::named("min(seq,x)"), Dim::named("seq")));
  EXPECT_EQ(ir::dim_min(Dim::named("batch*seq"), 512).str(), "?");  // products are not single names
  EXPECT_EQ(ir::dim_min(Dim::known(600), 512).value, 512);
  EXPECT_EQ(ir::dim_min(Dim::named("seq"), 0).value, 0);  // x[:seq] of nothing is empty, whatever seq is
  EXPECT_EQ(ir::dim_sub(Dim::named("seq"), Dim::named("seq")).value, 0);
  EXPECT_EQ(ir::dim_sub(Dim::named("seq"), Dim::named("batch")).str(), "?");
}

TEST(Schema, ReshapeMinusOneBecomesAProductOfSymbols) {
  auto g = graph17();
  ir::Value* x = sym_input(*g, "x", {Dim::named("batch"), Dim::named("seq"), Dim::known(768)});
  ir::Node* flat = add(*g, "Reshape", {x, g->add_constant("s", ints({-1, 768}))});
  ir::Node* back = add(*g, "Reshape", {flat->output(0), g->add_constant("t", ints({0, 12, 64}))});
  g->add_output(back->output(0));
  ir::infer_types(*g);
  EXPECT_EQ(flat->output(0)->type.str(), "float32[batch*seq,768]");
  EXPECT_EQ(back->output(0)->type.str(), "float32[batch*seq,12,64]");
}

// A target whose count wraps past int64 (a fuzzed file's: 7308894955982815234
// x 29281 x 9 elements for 54) is refused, not taken for the input's count;
// one that holds a 0 is empty, whatever its other dims.
TEST(Schema, ReshapeTargetsPastInt64AreRefused) {
  for (bool with_zero : {false, true}) {
    SCOPED_TRACE(with_zero ? "with a 0" : "wrapping");
    auto g = graph17();
    ir::Value* x = sym_input(*g, "x", {Dim::known(1), Dim::known(with_zero ? 0 : 6), Dim::known(3), Dim::known(3)});
    const std::vector<int64_t> target = {1, 7308894955982815234, 29281, with_zero ? 0 : 3, 3};
    ir::Node* reshape = add(*g, "Reshape", {x, g->add_constant("s", ints(target))});
    reshape->attrs.set("allowzero", int64_t{1});  // a 0 in the target is 0, not the input's dim
    g->add_output(reshape->output(0));
    if (with_zero) {
      ir::infer_types(*g);
      EXPECT_EQ(g->outputs()[0]->type.str(), "float32[1,7308894955982815234,29281,0,3]");
      continue;
    }
    try {
      ir::infer_types(*g);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidModel);
      EXPECT_NE(std::string(e.what()).find("cannot reshape"), std::string::npos) << e.what();
    }
  }
  // (2^62 + 1) x 4 wraps around to exactly the input's 4 elements.
  auto g = graph17();
  ir::Value* x = sym_input(*g, "x", {Dim::known(4)});
  g->add_output(add(*g, "Reshape", {x, g->add_constant("s", ints({(int64_t{1} << 62) + 1, 4}))})->output(0));
  EXPECT_THROW(ir::infer_types(*g), Error);
}

TEST(Schema, MatMulBroadcastAndSoftmaxKeepSymbols) {
  auto g = graph17();
  ir::Value* q = sym_input(*g, "q", {Dim::named("b"), Dim::known(12), Dim::named("s"), Dim::known(64)});
  ir::Value* k = sym_input(*g, "k", {Dim::named("b"), Dim::known(12), Dim::known(64), Dim::named("s")});
  ir::Value* mask = sym_input(*g, "mask", {Dim::named("b"), Dim::known(1), Dim::known(1), Dim::named("s")});
  ir::Node* mm = add(*g, "MatMul", {q, k});
  ir::Node* masked = add(*g, "Add", {mm->output(0), mask});
  ir::Node* sm = add(*g, "Softmax", {masked->output(0)});
  g->add_output(sm->output(0));
  ir::infer_types(*g);
  EXPECT_EQ(sm->output(0)->type.str(), "float32[b,12,s,s]");
}

TEST(Schema, RangeOfASymbolicLengthAndCausalWhere) {
  auto g = graph17();
  ir::Value* ids = sym_input(*g, "ids", {Dim::named("batch"), Dim::named("seq")}, DType::kInt64);
  ir::Value* shape = add(*g, "Shape", {ids})->output(0);
  ir::Node* seq = add(*g, "Gather", {shape, g->add_constant("one", Tensor(DType::kInt64, Shape{}))});
  seq->inputs[1]->constant->data<int64_t>()[0] = 1;
  Tensor zero(DType::kInt64, Shape{}), step(DType::kInt64, Shape{});
  zero.data<int64_t>()[0] = 0;
  step.data<int64_t>()[0] = 1;
  ir::Node* range = add(*g, "Range", {g->add_constant("zero", zero), seq->output(0), g->add_constant("step", step)});
  ir::Node* less = add(*g, "Less", {range->output(0), g->add_constant("limit", ints({3}))});
  g->add_output(range->output(0));
  g->add_output(less->output(0));
  ir::infer_types(*g);
  EXPECT_EQ(range->output(0)->type.str(), "int64[seq]");
  EXPECT_EQ(less->output(0)->type.str(), "bool[seq]");
}

TEST(Schema, ConvAndPoolComputeKnownSpatialDims) {
  auto g = graph17();
  ir::Value* x = sym_input(*g, "x", {Dim::named("n"), Dim::known(3), Dim::known(224), Dim::known(224)});
  Tensor w(DType::kFloat32, {64, 3, 7, 7});
  ir::Node* conv = add(*g, "Conv", {x, g->add_constant("w", w)});
  conv->attrs.set("strides", std::vector<int64_t>{2, 2});
  conv->attrs.set("pads", std::vector<int64_t>{3, 3, 3, 3});
  ir::Node* pool = add(*g, "MaxPool", {conv->output(0)});
  pool->attrs.set("kernel_shape", std::vector<int64_t>{3, 3});
  pool->attrs.set("strides", std::vector<int64_t>{2, 2});
  pool->attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  ir::Node* gap = add(*g, "GlobalAveragePool", {pool->output(0)});
  ir::Node* flat = add(*g, "Flatten", {gap->output(0)});
  g->add_output(flat->output(0));
  ir::infer_types(*g);
  EXPECT_EQ(conv->output(0)->type.str(), "float32[n,64,112,112]");
  EXPECT_EQ(pool->output(0)->type.str(), "float32[n,64,56,56]");
  EXPECT_EQ(flat->output(0)->type.str(), "float32[n,64]");
}

// Resize with constant float scales: floor(x * scale) per axis, a scale of 1
// keeping a symbolic dim (YOLO's and FPNs' nearest x2 upsamplers; without
// this nothing after them had a rank). Left unknown: scales that are not
// constants, tf_crop_and_resize, a scaled symbolic dim, and scales giving
// no valid length.
TEST(Schema, ResizeWithConstantScalesGivesItsShape) {
  auto f32 = [](std::vector<float> v) {
    Tensor t(DType::kFloat32, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), t.data<float>());
    return t;
  };
  struct Case {
    std::vector<float> scales;
    const char* mode;
    bool constant;
    const char* want;
  };
  const Case cases[] = {
      {{1, 1, 2, 2}, "half_pixel", true, "float32[n,16,10,14]"},
      {{1, 1, 0.5f, 1.5f}, "asymmetric", true, "float32[n,16,2,10]"},  // 2.5 -> 2, 10.5 -> 10
      {{1, 1, 1.f / 3, 1}, "half_pixel", true, "float32[n,16,1,7]"},
      {{1, 1, 2, 2}, "half_pixel", false, "float32[...]"},
      {{1, 1, 2, 2}, "tf_crop_and_resize", true, "float32[...]"},
      {{2, 1, 2, 2}, "half_pixel", true, "float32[...]"},  // the symbolic batch scaled
      {{1, 1, 0.1f, 1}, "half_pixel", true, "float32[...]"},  // 0.5 -> no valid length
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.scales[0] << " " << c.scales[2] << " " << c.scales[3] << " " << c.mode);
    auto g = graph17();
    ir::Value* x = sym_input(*g, "x", {Dim::named("n"), Dim::known(16), Dim::known(5), Dim::known(7)});
    ir::Value* scales = c.constant ? g->add_constant("scales", f32(c.scales)) : sym_input(*g, "scales", {Dim::known(4)});
    ir::Node* r = add(*g, "Resize", {x, nullptr, scales});
    r->attrs.set("coordinate_transformation_mode", std::string(c.mode));
    g->add_output(r->output(0));
    ir::infer_types(*g);
    EXPECT_EQ(r->output(0)->type.str(), c.want);
  }
}

// Fuzzer finding: a Conv whose kernel_shape attribute is longer than the input's spatial dims.
TEST(Schema, KernelShapeOfTheWrongRankIsAnInvalidModel) {
  auto g = graph17();
  ir::Value* x = sym_input(*g, "x", {Dim::known(1), Dim::known(3), Dim::known(8)});
  Tensor w(DType::kFloat32, {4, 3, 3});
  ir::Node* conv = add(*g, "Conv", {x, g->add_constant("w", w)});
  conv->attrs.set("kernel_shape", std::vector<int64_t>{3, 3, 3});
  try {
    ir::infer_types(*g);
    FAIL() << "inferred";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidModel);
    EXPECT_NE(std::string(e.what()).find("kernel_shape has 3 entries for an input of rank 3"), std::string::npos)
        << e.what();
  }
}

TEST(Schema, DataDependentShapesStayUnknown) {
  auto g = graph17();
  ir::Value* x = sym_input(*g, "x", {Dim::known(2), Dim::known(6)});
  ir::Value* s = sym_input(*g, "s", {Dim::known(2)}, DType::kInt64);
  ir::Node* reshape = add(*g, "Reshape", {x, s});
  ir::Node* nz = add(*g, "NonZero", {x});
  g->add_output(reshape->output(0));
  g->add_output(nz->output(0));
  ir::infer_types(*g);
  EXPECT_EQ(reshape->output(0)->type.str(), "float32[?,?]");  // rank from the shape's length
  EXPECT_EQ(nz->output(0)->type.str(), "int64[2,?]");
}

TEST(Schema, ContradictingTheDeclaredTypeIsAnInvalidModel) {
  auto g = graph17();
  ir::Value* a = sym_input(*g, "a", {Dim::known(2), Dim::known(3)});
  ir::Node* relu = add(*g, "Relu", {a});
  relu->output(0)->type = ir::Type::tensor(DType::kFloat32, ir::SymShape{Dim::known(3), Dim::known(2)});
  g->add_output(relu->output(0));
  try {
    ir::infer_types(*g);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidModel);
    EXPECT_NE(std::string(e.what()).find("declared float32[3,2] but the op computes float32[2,3]"), std::string::npos)
        << e.what();
  }
}

TEST(Schema, DeclaredSymbolsAreRefinedByKnownDims) {
  auto g = graph17();
  ir::Value* a = sym_input(*g, "a", {Dim::known(2), Dim::known(3)});
  ir::Node* relu = add(*g, "Relu", {a});
  relu->output(0)->type = ir::Type::tensor(DType::kFloat32, ir::SymShape{Dim::named("n"), Dim::unknown()});
  g->add_output(relu->output(0));
  ir::infer_types(*g);
  EXPECT_EQ(relu->output(0)->type.str(), "float32[2,3]");
}

TEST(Schema, WrongInputDTypeAndMissingAttributeAreInvalidModels) {
  auto g = graph17();
  ir::Value* i = sym_input(*g, "i", {Dim::known(2)}, DType::kInt32);
  add(*g, "Sqrt", {i});
  EXPECT_THROW(ir::infer_types(*g), Error);
  auto h = graph17();
  ir::Value* x = sym_input(*h, "x", {Dim::known(2)});
  add(*h, "Concat", {x, x});  // no axis
  try {
    ir::infer_types(*h);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidModel);
    EXPECT_NE(std::string(e.what()).find("required attribute 'axis'"), std::string::npos) << e.what();
  }
}

// Fuzzer finding: a Concat (or ArgMax, TopK, Split) of scalars indexed an empty shape.
TEST(Schema, AxesOfScalarsAreInvalidModels) {
  for (const char* op : {"Concat", "ArgMax", "TopK", "Split", "Softmax"}) {
    auto g = graph17();
    ir::Value* x = sym_input(*g, "x", {});
    ir::Node* n = add(*g, op, {x, x}, std::string(op) == "TopK" ? 2 : 1);
    n->attrs.set("axis", int64_t{0});
    if (std::string(op) == "Softmax") n->inputs.pop_back();
    try {
      ir::infer_types(*g);
      if (std::string(op) != "Softmax") ADD_FAILURE() << op << " of a scalar inferred";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidModel) << op;
      EXPECT_NE(std::string(e.what()).find("out of range for rank 0"), std::string::npos) << e.what();
    }
  }
}

// Fuzzer finding: a TopK naming only one of its two required outputs let the
// kernel write an Indices output the step did not have (heap overflow).
TEST(Schema, TopKNeedsBothOutputs) {
  for (bool omitted : {false, true}) {
    auto g = graph17();
    ir::Value* x = sym_input(*g, "x", {Dim::known(2), Dim::known(5)});
    ir::Node* n = add(*g, "TopK", {x, g->add_constant("k", ints({1}))}, omitted ? 2 : 1);
    if (omitted) n->outputs[1] = nullptr;  // named "" in the file
    try {
      ir::infer_types(*g);
      ADD_FAILURE() << "inferred";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidModel);
      EXPECT_NE(std::string(e.what()).find("Values and Indices, both required"), std::string::npos) << e.what();
    }
  }
}

// With output_shape given, MaxUnpool's X must still be [N, C, D...] with one
// kernel entry per spatial axis (a fuzzed scalar X reached the kernel, whose
// spatial count wrapped around).
TEST(Schema, MaxUnpoolChecksXWithOutputShape) {
  for (bool scalar : {true, false}) {
    auto g = graph17();
    ir::Value* x = sym_input(*g, "x", scalar ? ir::SymShape{} : ir::SymShape{Dim::known(1), Dim::known(1)});
    ir::Value* idx = sym_input(*g, "i", {Dim::known(1), Dim::known(1), Dim::known(2), Dim::known(2)}, DType::kInt64);
    ir::Node* n = add(*g, "MaxUnpool", {x, idx, g->add_constant("shape", ints({1, 1, 5, 5}))});
    n->attrs.set("kernel_shape", std::vector<int64_t>{2, 2});
    try {
      ir::infer_types(*g);
      ADD_FAILURE() << "inferred";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidModel);
      EXPECT_NE(std::string(e.what()).find("must be [N, C, D1, ...]"), std::string::npos) << e.what();
    }
  }
  auto g = graph17();  // a proper X: output_shape gives the output
  ir::Value* x = sym_input(*g, "x", {Dim::known(1), Dim::known(1), Dim::known(2), Dim::known(2)});
  ir::Value* idx = sym_input(*g, "i", {Dim::known(1), Dim::known(1), Dim::known(2), Dim::known(2)}, DType::kInt64);
  ir::Node* n = add(*g, "MaxUnpool", {x, idx, g->add_constant("shape", ints({1, 1, 5, 5}))});
  n->attrs.set("kernel_shape", std::vector<int64_t>{2, 2});
  ir::infer_types(*g);
  EXPECT_EQ(n->output(0)->type.str(), "float32[1,1,5,5]");
}

// Scan over xs [seq, 2] with a running sum: the state keeps [2], the scan output gains the iteration axis.
TEST(Schema, ScanStatesAndScanOutputs) {
  auto g = graph17();
  ir::Value* init = sym_input(*g, "init", {Dim::known(2)});
  ir::Value* xs = sym_input(*g, "xs", {Dim::named("seq"), Dim::known(2)});
  ir::Node* scan = g->add_node("Scan", {init, xs}, 2, "scan");
  scan->opset = 17;
  scan->attrs.set("num_scan_inputs", int64_t{1});
  auto body = std::make_shared<ir::Graph>();
  body->parent = g.get();
  body->owner = scan;
  body->opsets[""] = 17;
  ir::Value* state = sym_input(*body, "state", {Dim::known(2)});
  ir::Value* x = sym_input(*body, "x", {Dim::known(2)});
  ir::Node* sum = add(*body, "Add", {state, x});
  ir::Node* twice = add(*body, "Add", {x, x});
  body->add_output(sum->output(0));
  body->add_output(twice->output(0));
  scan->attrs.set("body", body);
  g->add_output(scan->output(0));
  g->add_output(scan->output(1));
  ir::infer_types(*g);
  EXPECT_EQ(scan->output(0)->type.str(), "float32[2]");
  EXPECT_EQ(scan->output(1)->type.str(), "float32[?,2]");
}

// Review finding: Shape of a scalar tracks no values; arithmetic with a one-element constant read past them.
TEST(Schema, ArithmeticOnTheEmptyShapeOfAScalar) {
  auto g = graph17();
  ir::Value* x = sym_input(*g, "x", {});
  ir::Node* shape = add(*g, "Shape", {x});
  ir::Node* mul = add(*g, "Mul", {shape->output(0), g->add_constant("two", ints({2}))});
  g->add_output(mul->output(0));
  ir::infer_types(*g);
  EXPECT_EQ(mul->output(0)->type.str(), "int64[0]");  // [0] broadcast with [1]
}

TEST(Schema, BroadcastingKnownDimsThatDisagreeIsInvalid) {
  auto g = graph17();
  ir::Value* a = sym_input(*g, "a", {Dim::known(2), Dim::known(3)});
  ir::Value* b = sym_input(*g, "b", {Dim::known(4)});
  add(*g, "Add", {a, b});
  try {
    ir::infer_types(*g);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidModel);  // the declared types are the model's
    EXPECT_NE(std::string(e.what()).find("[2,3] and [4] cannot be broadcast"), std::string::npos) << e.what();
  }
}

// Found by the model-loader fuzzer: PRelu's check read its output's type on a node with no outputs.
TEST(Schema, NodesWithoutOutputsAreInferredSafely) {
  auto g = graph17();
  ir::Value* a = sym_input(*g, "a", {Dim::known(2), Dim::known(3)});
  ir::Value* b = sym_input(*g, "b", {Dim::known(3)});
  add(*g, "PRelu", {a, b}, 0);
  EXPECT_NO_THROW(ir::infer_types(*g));
  add(*g, "PRelu", {a, sym_input(*g, "c", {Dim::known(2)})}, 0);
  EXPECT_THROW(ir::infer_types(*g), Error);  // [2] does not broadcast to [2, 3]
}

// --- the schema as the source of the kernels' output types (kernels::PrepareContext) -----------------------------

TEST(SchemaPrepare, KernelsReadTheOutputTypeTheSchemaComputes) {
  auto g = graph17();
  ir::Value* x = sym_input(*g, "x", {Dim::named("n"), Dim::known(3), Dim::known(4)});
  ir::Value* target = g->add_input("target", DType::kInt64, {2});
  ir::Node* reshape = add(*g, "Reshape", {x, target});
  Tensor spec = ints({4, -1});
  kernels::PrepareContext ctx(*reshape, {{DType::kFloat32, {2, 3, 4}}, {DType::kInt64, {2}}}, {nullptr, &spec}, 1);
  EXPECT_EQ(ctx.output_type(0), (kernels::TensorType{DType::kFloat32, {4, 6}}));
  EXPECT_TRUE(ctx.values_read()[1]);   // a kernel prepared at run time is keyed by the target's value
  EXPECT_FALSE(ctx.values_read()[0]);
  // The target not known when planning: the node waits for run time.
  kernels::PrepareContext later(*reshape, {{DType::kFloat32, {2, 3, 4}}, {DType::kInt64, {2}}}, {nullptr, nullptr}, 1);
  EXPECT_THROW(later.output_type(0), kernels::ValueNeeded);
}

TEST(SchemaPrepare, InputsThatDoNotFitAreTheCallersError) {
  auto g = graph17();
  ir::Value* a = sym_input(*g, "a", {Dim::named("n"), Dim::known(3)});
  ir::Value* b = sym_input(*g, "b", {Dim::named("m")});
  ir::Node* node = add(*g, "Add", {a, b});
  EXPECT_NO_THROW(ir::infer_types(*g));  // n x 3 and m may broadcast
  try {
    kernels::PrepareContext ctx(*node, {{DType::kFloat32, {2, 3}}, {DType::kFloat32, {4}}}, {nullptr, nullptr}, 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("Add"), std::string::npos) << e.what();
  }
}

TEST(SchemaPrepare, DataDependentOutputsAreLeftToTheKernel) {
  auto g = graph17();
  ir::Node* node = add(*g, "NonZero", {sym_input(*g, "x", {Dim::known(5)})});
  kernels::PrepareContext ctx(*node, {{DType::kFloat32, {5}}}, {nullptr}, 1);
  EXPECT_FALSE(ctx.output_known(0));
  EXPECT_THROW(ctx.output_type(0), Error);
}

TEST(SchemaPrepare, ConvTransposeOutputShapeOfTheWrongLengthIsAnInvalidModel) {
  auto g = graph17();
  ir::Value* x = sym_input(*g, "x", {Dim::known(1), Dim::known(1), Dim::known(3), Dim::known(3)});
  ir::Value* w = sym_input(*g, "w", {Dim::known(1), Dim::known(1), Dim::known(3), Dim::known(3)});
  ir::Node* node = add(*g, "ConvTranspose", {x, w});
  node->attrs.set("output_shape", std::vector<int64_t>{5});  // one entry for two spatial dims
  try {
    ir::infer_types(*g);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidModel);
  }
}

}  // namespace
}  // namespace anvil
