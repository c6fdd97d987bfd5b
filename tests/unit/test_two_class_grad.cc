// A two-class head's gradient kept as its factors (passes/fuse_two_class_gate_grad.cc,
// kernels/vec/bit_gemm.cc): the pass's matches, and the gradients it gives
// against the unfused formulas computed here in double, at every ISA
// (tests/CMakeLists.txt runs TwoClassGrad.* again under ANVIL_MAX_ISA).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "anvil/session.h"
#include "kernel_tester.h"
#include "kernels/vec/vec_kernels.h"
#include "ir/schema.h"
#include "passes/pipeline.h"
#include "runtime/constant_evaluator.h"

namespace anvil {
namespace {

using Matrix = std::vector<double>;

Tensor random_tensor(Shape shape, std::mt19937& rng, float lo, float hi) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

double at(const Tensor& t, int64_t i) { return t.data<float>()[i]; }

// What makes the graph no longer the pattern, or which form of it.
enum class Variant {
  kPattern,
  kPerRowScale,  // reduction "none": a scale [N, 1], first operand of the Mul
  kThreeClasses,
  kOneHotOfTwos,
  kScalePerColumn,
  kGradientReadElsewhere,
  kNoLoss,  // no SoftmaxCrossEntropyLoss checks the labels
};

struct Dims {
  int64_t n, width, below;  // batch, the head's inputs, the layer below's inputs
  bool trans_head = false, trans_below = false;
  bool trans_dw = false;  // the weight gradient reads h1 transposed (transB 1)
};

// The loss's scale of row r: 1 / n (the mean), or (1 + r % 3) / n per row.
double row_scale(const Dims& d, Variant v, int64_t r) {
  return (v == Variant::kPerRowScale ? 1.0 + static_cast<double>(r % 3) : 1.0) / static_cast<double>(d.n);
}

// The backward graph the autodiff writes for ... -> Linear(below, width) ->
// ReLU (h1 before it, h2 after) -> Linear(width, classes) -> softmax
// cross-entropy: outputs dz1 (into the layer below's ReLU), db1, dw2, db2,
// dw3, the loss [, a second reader's value].
std::unique_ptr<ir::Graph> head_graph(const Dims& d, Variant v = Variant::kPattern) {
  const int64_t classes = v == Variant::kThreeClasses ? 3 : 2;
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  g->opsets["anvil"] = 1;
  ir::Value* s = g->add_input("s", DType::kFloat32, {d.n, classes});
  ir::Value* labels = g->add_input("labels", DType::kInt64, {d.n});
  ir::Value* w3 = g->add_input("w3", DType::kFloat32, d.trans_head ? Shape{d.width, classes} : Shape{classes, d.width});
  ir::Value* h2 = g->add_input("h2", DType::kFloat32, {d.n, d.width});
  ir::Value* w2 = g->add_input("w2", DType::kFloat32, d.trans_below ? Shape{d.below, d.width} : Shape{d.width, d.below});
  ir::Value* h1 = g->add_input("h1", DType::kFloat32, {d.n, d.below});
  ir::Value* h1t = d.trans_dw ? g->add_input("h1t", DType::kFloat32, {d.below, d.n}) : nullptr;
  auto node = [&](const char* op, std::vector<ir::Value*> in, ir::Attributes a = {}) {
    ir::Node* n = g->add_node(op, std::move(in), 1);
    n->attrs = std::move(a);
    return n->output(0);
  };
  auto relu_grad = [&](ir::Value* dy, ir::Value* y) {
    ir::Node* n = g->add_node("ReluGrad", {dy, y}, 1);
    n->domain = "anvil";
    return n->output(0);
  };
  auto product = [&](ir::Value* a, ir::Value* b, bool trans_b) {
    return trans_b ? node("Gemm", {a, b}, testing::attrs({{"transB", int64_t{1}}})) : node("MatMul", {a, b});
  };
  auto column_sums = [&](ir::Value* x) {
    return node("ReduceSum", {x, g->add_constant(g->unique_name("axes"), testing::i64({1}, {0}))},
                testing::attrs({{"keepdims", int64_t{1}}}));
  };
  ir::Value* probs = node("Softmax", {s}, testing::attrs({{"axis", int64_t{-1}}}));
  const float on = v == Variant::kOneHotOfTwos ? 2.f : 1.f;
  ir::Value* hot = node("OneHot", {labels, g->add_constant("depth", testing::i64({1}, {classes})),
                                   g->add_constant("values", testing::f32({2}, {0.f, on}))},
                        testing::attrs({{"axis", int64_t{-1}}}));
  const float mean = 1.f / static_cast<float>(d.n);
  Tensor scale = testing::f32({}, {mean});
  if (v == Variant::kScalePerColumn) scale = testing::f32({1, 2}, {mean, 2 * mean});
  if (v == Variant::kPerRowScale) {
    scale = Tensor(DType::kFloat32, {d.n, 1});
    for (int64_t r = 0; r < d.n; ++r) scale.data<float>()[r] = static_cast<float>(row_scale(d, v, r));
  }
  ir::Value* diff = node("Sub", {probs, hot});
  ir::Value* scale_value = g->add_constant("scale", scale);
  ir::Value* dz = v == Variant::kPerRowScale ? node("Mul", {scale_value, diff}) : node("Mul", {diff, scale_value});
  ir::Value* dz2 = relu_grad(product(dz, w3, d.trans_head), h2);
  ir::Value* dz1 = relu_grad(product(dz2, w2, d.trans_below), h1);
  ir::Value* dw2 = d.trans_dw ? node("Gemm", {dz2, h1t}, testing::attrs({{"transA", int64_t{1}}, {"transB", int64_t{1}}}))
                              : node("Gemm", {dz2, h1}, testing::attrs({{"transA", int64_t{1}}}));
  for (ir::Value* out :
       {dz1, column_sums(dz1), dw2, column_sums(dz2), node("Gemm", {dz, h2}, testing::attrs({{"transA", int64_t{1}}}))})
    g->add_output(out);
  if (v != Variant::kNoLoss) g->add_output(node("SoftmaxCrossEntropyLoss", {s, labels}));
  if (v == Variant::kGradientReadElsewhere) g->add_output(node("ReduceMax", {dz2}));
  ir::infer_types(*g);
  return g;
}

struct Inputs {
  Tensor s, labels, w3, h2, w2, h1;
  std::map<std::string, Tensor> feeds(const Dims& d) const {
    std::map<std::string, Tensor> f{{"s", s}, {"labels", labels}, {"w3", w3}, {"h2", h2}, {"w2", w2}, {"h1", h1}};
    if (d.trans_dw) {
      Tensor t(DType::kFloat32, {d.below, d.n});
      for (int64_t r = 0; r < d.n; ++r)
        for (int64_t k = 0; k < d.below; ++k) t.data<float>()[k * d.n + r] = h1.data<float>()[r * d.below + k];
      f.emplace("h1t", t);
    }
    return f;
  }
};

Inputs make_inputs(const Dims& d, uint32_t seed) {
  std::mt19937 rng(seed);
  Inputs in{random_tensor({d.n, 2}, rng, -3.f, 3.f),
            Tensor(DType::kInt64, {d.n}),
            random_tensor(d.trans_head ? Shape{d.width, 2} : Shape{2, d.width}, rng, -1.f, 1.f),
            random_tensor({d.n, d.width}, rng, -1.f, 1.f),
            random_tensor(d.trans_below ? Shape{d.below, d.width} : Shape{d.width, d.below}, rng, -1.f, 1.f),
            random_tensor({d.n, d.below}, rng, -1.f, 1.f)};
  for (int64_t r = 0; r < d.n; ++r) in.labels.data<int64_t>()[r] = static_cast<int64_t>(rng() % 2);
  return in;
}

// The five gradients by their unfused formulas, in double.
std::vector<Matrix> expected_gradients(const Dims& d, const Inputs& in, Variant v = Variant::kPattern) {
  const int64_t n = d.n, width = d.width, below = d.below;
  Matrix dz(static_cast<size_t>(n * 2));
  for (int64_t r = 0; r < n; ++r) {
    const double a = at(in.s, 2 * r), b = at(in.s, 2 * r + 1), m = std::max(a, b);
    const double ea = std::exp(a - m), eb = std::exp(b - m);
    const int64_t label = in.labels.data<int64_t>()[r];
    dz[static_cast<size_t>(2 * r)] = (ea / (ea + eb) - (label == 0)) * row_scale(d, v, r);
    dz[static_cast<size_t>(2 * r + 1)] = (eb / (ea + eb) - (label == 1)) * row_scale(d, v, r);
  }
  auto w3 = [&](int64_t c, int64_t j) { return at(in.w3, d.trans_head ? j * 2 + c : c * width + j); };
  auto w2 = [&](int64_t j, int64_t k) { return at(in.w2, d.trans_below ? k * width + j : j * below + k); };
  Matrix dz2(static_cast<size_t>(n * width)), dz1(static_cast<size_t>(n * below)), db1(static_cast<size_t>(below)),
      dw2(static_cast<size_t>(width * below)), db2(static_cast<size_t>(width)), dw3(static_cast<size_t>(2 * width));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < width; ++j) {
      const double h = at(in.h2, r * width + j);
      dz2[static_cast<size_t>(r * width + j)] = h > 0 ? dz[2 * r] * w3(0, j) + dz[2 * r + 1] * w3(1, j) : 0.0;
      db2[static_cast<size_t>(j)] += dz2[static_cast<size_t>(r * width + j)];
      for (int64_t c = 0; c < 2; ++c) dw3[static_cast<size_t>(c * width + j)] += dz[2 * r + c] * h;
    }
  for (int64_t r = 0; r < n; ++r)
    for (int64_t k = 0; k < below; ++k) {
      double sum = 0;
      for (int64_t j = 0; j < width; ++j) sum += dz2[static_cast<size_t>(r * width + j)] * w2(j, k);
      const double v = at(in.h1, r * below + k) > 0 ? sum : 0.0;
      dz1[static_cast<size_t>(r * below + k)] = v;
      db1[static_cast<size_t>(k)] += v;
    }
  for (int64_t j = 0; j < width; ++j)
    for (int64_t k = 0; k < below; ++k) {
      double sum = 0;
      for (int64_t r = 0; r < n; ++r) sum += dz2[static_cast<size_t>(r * width + j)] * at(in.h1, r * below + k);
      dw2[static_cast<size_t>(j * below + k)] = sum;
    }
  return {dz1, db1, dw2, db2, dw3};
}

// Each output within 1e-4 of the largest |value| of what is expected of it.
void expect_close(const std::vector<Tensor>& got, const std::vector<Matrix>& want, const std::string& what) {
  const char* names[] = {"dz1", "db1", "dw2", "db2", "dw3"};
  for (size_t o = 0; o < want.size(); ++o) {
    ASSERT_EQ(got[o].numel(), static_cast<int64_t>(want[o].size())) << what << " " << names[o];
    double top = 0;
    for (double x : want[o]) top = std::max(top, std::abs(x));
    for (size_t i = 0; i < want[o].size(); ++i)
      ASSERT_NEAR(at(got[o], static_cast<int64_t>(i)), want[o][i], 1e-4 * top) << what << " " << names[o] << "[" << i << "]";
  }
}

const passes::FusionAdvisor kAlways = [](const ir::Node&) { return true; };

// Sets an environment variable for a scope.
struct ScopedEnv {
  std::string name;
  std::string saved;
  bool had;
  ScopedEnv(const char* n, const char* value) : name(n), had(std::getenv(n) != nullptr) {
    if (had) saved = std::getenv(n);
    setenv(n, value, 1);
  }
  ~ScopedEnv() {
    if (had) setenv(name.c_str(), saved.c_str(), 1);
    else unsetenv(name.c_str());
  }
};

TEST(TwoClassGrad, PassKeepsTheGradientAsItsFactors) {
  for (const Dims& d : {Dims{70, 45, 37}, Dims{70, 45, 37, true, true}}) {
    auto g = head_graph(d);
    passes::optimize(*g, 3, runtime::reference_evaluator(), kAlways);
    EXPECT_EQ(testing::count_live_ops(*g, "TwoClassReluGrad"), 1u);
    EXPECT_EQ(testing::count_live_ops(*g, "BitGemm"), 2u);
    EXPECT_EQ(testing::count_live_ops(*g, "GemmReluGrad"), 0u);
    EXPECT_EQ(testing::count_live_ops(*g, "Gemm"), 0u);  // the head's weight gradient is the fused node's too
  }
  auto declined = head_graph({70, 45, 37});  // the advisor says no (AVX2): the GEMMs stay
  passes::optimize(*declined, 3, runtime::reference_evaluator(), [](const ir::Node&) { return false; });
  EXPECT_EQ(testing::count_live_ops(*declined, "TwoClassReluGrad"), 0u);
  EXPECT_EQ(testing::count_live_ops(*declined, "GemmReluGrad"), 2u);
}

TEST(TwoClassGrad, LookalikesStay) {
  for (const auto& [v, what] : {std::pair{Variant::kThreeClasses, "three classes"},
                                {Variant::kOneHotOfTwos, "a one-hot of 0 and 2: rows do not sum to zero"},
                                {Variant::kScalePerColumn, "a scale per column"},
                                {Variant::kGradientReadElsewhere, "the gradient read by another node"},
                                {Variant::kNoLoss, "no loss node to check the labels"}}) {
    auto g = head_graph({70, 45, 37}, v);
    passes::optimize(*g, 3, runtime::reference_evaluator(), kAlways);
    EXPECT_EQ(testing::count_live_ops(*g, "TwoClassReluGrad"), 0u) << what;
    EXPECT_EQ(testing::count_live_ops(*g, "BitGemm"), 0u) << what;
  }
}

// The plan of `session` for `feeds` names `op`.
bool plan_has(const Session& session, const std::map<std::string, Tensor>& feeds, const std::string& op) {
  for (const std::string& line : session.describe_plan(feeds))
    if (line.find(op) != std::string::npos) return true;
  return false;
}

// Fused (the pass forced on at whatever ISA runs) and unfused against the
// formulas: ragged shapes (70 rows: not whole bytes of a column's bits nor
// blocks of 64; 45 columns: a partial vector block; 5 rows and 6 columns:
// less than a byte), both weight layouts of each product, a scale per row
// (reduction "none"), 128 rows (whole blocks), and 4,100 rows: two row
// blocks of the input gradient, and nine table groups of the weight
// gradient's 4,100-long sums (the last of 2 chunks, one byte).
TEST(TwoClassGrad, GradientsMatchTheUnfusedFormulas) {
  const ScopedEnv force("ANVIL_FUSE_TWO_CLASS_GATE", "1");
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  const std::pair<Dims, Variant> cases[] = {
      {Dims{70, 45, 37}, Variant::kPattern},
      {Dims{70, 45, 37, true, true, true}, Variant::kPattern},
      {Dims{70, 45, 37, true, false}, Variant::kPerRowScale},
      {Dims{5, 6, 7, false, true, true}, Variant::kPerRowScale},
      {Dims{128, 24, 9}, Variant::kPattern},  // (at 16 columns or fewer the weight gradient joins the GemmReluGrad: passes/fuse_head_grad.cc)
      {Dims{4100, 40, 33, false, true}, Variant::kPattern},
  };
  for (const auto& [d, v] : cases) {
    const Inputs in = make_inputs(d, static_cast<uint32_t>(d.n + d.trans_head));
    const std::vector<Matrix> want = expected_gradients(d, in, v);
    for (int level : {0, 3}) {
      SessionOptions options;
      options.optimization_level = level;
      options.num_threads = 2;
      Session session = Session::from_graph(head_graph(d, v), options);
      const std::string what = std::to_string(d.n) + " rows, " + std::to_string(d.width) + " columns, transB " +
                               std::to_string(d.trans_head) + std::to_string(d.trans_below) +
                               std::to_string(d.trans_dw) + ", level " + std::to_string(level);
      EXPECT_EQ(plan_has(session, in.feeds(d), "BitGemm"), level == 3) << what;
      expect_close(session.run(in.feeds(d)), want, what);
    }
  }
  omp_set_num_threads(saved);
}

// Forty shapes drawn at random (a fixed seed): 1 to 150 rows, 1 to 70
// columns of the head's input, 1 to 40 below, either layout of each
// product, either scale; fused against the formulas. Where the head's
// input has 16 columns or fewer the weight gradient joins the GemmReluGrad
// (passes/fuse_head_grad.cc) and the gate is not taken: checked all the same.
TEST(TwoClassGrad, RandomShapes) {
  const ScopedEnv force("ANVIL_FUSE_TWO_CLASS_GATE", "1");
  std::mt19937 rng(2026);
  int fused = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const Dims d{1 + static_cast<int64_t>(rng() % 150), 1 + static_cast<int64_t>(rng() % 70),
                 1 + static_cast<int64_t>(rng() % 40), rng() % 2 == 0, rng() % 2 == 0, rng() % 2 == 0};
    const Variant v = rng() % 2 ? Variant::kPattern : Variant::kPerRowScale;
    const Inputs in = make_inputs(d, static_cast<uint32_t>(trial));
    SessionOptions options;
    options.num_threads = 2;
    Session session = Session::from_graph(head_graph(d, v), options);
    fused += plan_has(session, in.feeds(d), "BitGemm");
    expect_close(session.run(in.feeds(d)), expected_gradients(d, in, v),
                 "trial " + std::to_string(trial) + ": " + std::to_string(d.n) + " x " + std::to_string(d.width) +
                     " x " + std::to_string(d.below));
  }
  EXPECT_GE(fused, 20) << "the gate taken in too few of the shapes";
}

// ANVIL_FUSE_TWO_CLASS_GATE=0 keeps the GEMMs; a label the loss refuses
// (OneHot would give its row zeros, which do not sum to zero) stops the
// fused step with the loss's message.
TEST(TwoClassGrad, SwitchedOffAndLabelsOutOfRange) {
  const Dims d{70, 45, 37};
  Inputs in = make_inputs(d, 3);
  {
    const ScopedEnv off("ANVIL_FUSE_TWO_CLASS_GATE", "0");
    const Session session = Session::from_graph(head_graph(d), {});
    EXPECT_FALSE(plan_has(session, in.feeds(d), "TwoClassReluGrad"));
    EXPECT_TRUE(plan_has(session, in.feeds(d), "GemmReluGrad"));
  }
  const ScopedEnv on("ANVIL_FUSE_TWO_CLASS_GATE", "1");
  const Session session = Session::from_graph(head_graph(d), {});
  ASSERT_TRUE(plan_has(session, in.feeds(d), "TwoClassReluGrad"));
  in.labels.data<int64_t>()[3] = 2;
  try {
    session.run(in.feeds(d));
    ADD_FAILURE() << "label 2 of two classes taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a class index"), std::string::npos) << e.what();
  }
}

// The ISA routines on their own, each ISA the CPU has: a block of the table
// product (columns past a vector block, K past a whole chunk and past one
// table group, T read transposed, a gate with NaN) and the gate's row pass.
TEST(TwoClassGrad, VectorRoutinesAtEveryIsa) {
  std::mt19937 rng(5);
  const int64_t m = 9, k = 1045, cols = 45, row_bytes = (k + 7) / 8;  // 131 bytes: the last group's bytes odd
  std::vector<uint8_t> bits(static_cast<size_t>(m * row_bytes));
  for (auto& b : bits) b = static_cast<uint8_t>(rng());
  for (int64_t r = 0; r < m; ++r) bits[static_cast<size_t>(r * row_bytes + row_bytes - 1)] &= 0x1f;  // k = 1045: 5 bits
  const Tensor t = random_tensor({cols, k}, rng, -1.f, 1.f);  // read transposed: T[q, j] = t[j, q]
  const Tensor row_scale = random_tensor({m}, rng, -2.f, 2.f), k_scale = random_tensor({k}, rng, -2.f, 2.f);
  Tensor gate = random_tensor({m, cols}, rng, -1.f, 1.f);
  gate.data<float>()[3] = NAN;
  for (VectorIsa isa : supported_vector_isas()) {
    const auto& kernels = kernels::vec::vec_kernels_for(isa).bit_gemm;
    std::vector<float> y(static_cast<size_t>(m * cols), NAN), sums(static_cast<size_t>(cols), NAN);
    std::vector<float> tables(kernels::vec::kBitTableFloats + 16);
    float* aligned = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(tables.data()) + 63) & ~uintptr_t{63});
    for (int64_t j0 = 0; j0 < cols; j0 += kernels::vec::kBitColumns) {
      kernels::vec::BitGemmBlock b;
      b.bits = bits.data();
      b.row_bytes = row_bytes;
      b.t = t.data<float>();
      b.t_k_stride = 1;
      b.t_j_stride = k;
      b.k_size = k;
      b.k_scale = k_scale.data<float>();
      b.row_scale = row_scale.data<float>();
      b.gate = gate.data<float>();
      b.gate_ld = cols;
      b.y = y.data();
      b.ldy = cols;
      b.r0 = 0;
      b.rows = m;
      b.j0 = j0;
      b.cols = std::min<int64_t>(kernels::vec::kBitColumns, cols - j0);
      b.column_sums = sums.data() + j0;
      b.tables = aligned;
      b.group_chunks = j0 == 0 ? kernels::vec::kBitGroupChunks : 128;  // 262 chunks: two groups, or three
      kernels.block(b);
    }
    for (int64_t j = 0; j < cols; ++j) {
      double column = 0;
      for (int64_t r = 0; r < m; ++r) {
        double sum = 0;
        for (int64_t q = 0; q < k; ++q)
          if (bits[static_cast<size_t>(r * row_bytes + q / 8)] >> (q % 8) & 1) sum += at(k_scale, q) * at(t, j * k + q);
        const double want = at(gate, r * cols + j) > 0 ? sum * at(row_scale, r) : 0.0;
        column += want;
        ASSERT_NEAR(y[static_cast<size_t>(r * cols + j)], want, 1e-3) << vector_isa_name(isa) << " " << r << "," << j;
      }
      ASSERT_NEAR(sums[static_cast<size_t>(j)], column, 2e-3) << vector_isa_name(isa) << " column " << j;
    }
    // The row pass over 45 values (a partial byte), with a NaN and a zero (closed gates).
    Tensor h = random_tensor({cols}, rng, -1.f, 1.f);
    h.data<float>()[7] = NAN;
    h.data<float>()[8] = 0.f;
    std::vector<uint8_t> row(6, 0xff);
    std::vector<float> gate_sums(cols, 1.f), head(2 * cols, 1.f);
    kernels.gate_row(h.data<float>(), cols, 0.5f, 2.f, -3.f, row.data(), gate_sums.data(), head.data());
    for (int64_t j = 0; j < cols; ++j) {
      const bool open = at(h, j) > 0;
      EXPECT_EQ(row[static_cast<size_t>(j / 8)] >> (j % 8) & 1, open ? 1 : 0) << vector_isa_name(isa) << " " << j;
      EXPECT_EQ(gate_sums[static_cast<size_t>(j)], open ? 1.5f : 1.f) << vector_isa_name(isa) << " " << j;
      if (j == 7) continue;  // NaN's products are NaN
      EXPECT_FLOAT_EQ(head[static_cast<size_t>(j)], 1.f + 2.f * h.data<float>()[j]);
      EXPECT_FLOAT_EQ(head[static_cast<size_t>(cols + j)], 1.f - 3.f * h.data<float>()[j]);
    }
    EXPECT_EQ(row[5] >> 5, 0) << vector_isa_name(isa) << ": the last byte's unused bits";
  }
}

// Both kernels of each op against each other's definition, on a shape that
// is not a whole number of bytes either way; and the shapes they refuse.
TEST(TwoClassGrad, KernelsWriteTheFactors) {
  std::mt19937 rng(11);
  const int64_t n = 70, width = 13;
  const Tensor dz = random_tensor({n, 2}, rng, -1.f, 1.f), w = random_tensor({2, width}, rng, -1.f, 1.f);
  const Tensor h = random_tensor({n, width}, rng, -1.f, 1.f);
  for (const auto backend : {kernels::Backend::kRef, kernels::Backend::kVec}) {
    testing::KernelOptions options;
    options.backend = backend;
    options.domain = "anvil";
    options.num_outputs = 6;
    options.num_threads = 2;
    const auto out = testing::run_kernel("TwoClassReluGrad", {dz, w, h}, {}, options);
    const char* name = backend == kernels::Backend::kRef ? "ref" : "vec";
    ASSERT_EQ(out[2].shape(), Shape({n, 2}));
    ASSERT_EQ(out[3].shape(), Shape({width, 9}));
    for (int64_t r = 0; r < n; ++r) {
      EXPECT_FLOAT_EQ(out[0].data<float>()[r], 0.5f * (dz.data<float>()[2 * r] - dz.data<float>()[2 * r + 1]));
      for (int64_t j = 0; j < width; ++j) {
        const int open = at(h, r * width + j) > 0;
        EXPECT_EQ(out[2].data<uint8_t>()[r * 2 + j / 8] >> (j % 8) & 1, open) << name << " by rows " << r << "," << j;
        EXPECT_EQ(out[3].data<uint8_t>()[j * 9 + r / 8] >> (r % 8) & 1, open) << name << " by columns " << r << "," << j;
      }
    }
    EXPECT_EQ(out[3].data<uint8_t>()[8] >> 6, 0) << name << ": rows past 70 are zero";
    for (int64_t j = 0; j < width; ++j) {
      const double wj = at(w, j) - at(w, width + j);
      EXPECT_FLOAT_EQ(out[1].data<float>()[j], static_cast<float>(wj));
      double sum = 0, head0 = 0, head1 = 0;
      for (int64_t r = 0; r < n; ++r) {
        if (at(h, r * width + j) > 0) sum += 0.5 * (at(dz, 2 * r) - at(dz, 2 * r + 1)) * wj;
        head0 += at(dz, 2 * r) * at(h, r * width + j);
        head1 += at(dz, 2 * r + 1) * at(h, r * width + j);
      }
      EXPECT_NEAR(out[4].data<float>()[j], sum, 1e-5) << name;
      EXPECT_NEAR(out[5].data<float>()[j], head0, 1e-5) << name;
      EXPECT_NEAR(out[5].data<float>()[width + j], head1, 1e-5) << name;
    }
    // Shapes and outputs that do not fit: one clear error, not a read past the tensors.
    testing::KernelOptions bit = options;
    bit.num_outputs = 1;
    const Tensor bits(DType::kUInt8, {4, 2}), t(DType::kFloat32, {13, 5}), rs(DType::kFloat32, {4});
    EXPECT_NO_THROW(testing::run_kernel("BitGemm", {bits, t, rs, Tensor(DType::kFloat32, {13})}, {}, bit));
    for (const Tensor& k_scale : {Tensor(DType::kFloat32, {17}), Tensor(DType::kFloat32, {12})}) {
      try {
        testing::run_kernel("BitGemm", {bits, t, rs, k_scale}, {}, bit);
        ADD_FAILURE() << name << ": k_scale of " << k_scale.numel() << " taken";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("do not match"), std::string::npos) << e.what();
      }
    }
    bit.num_outputs = 3;  // the schema gives no third output; the kernel's own check says so
    try {
      testing::run_kernel("BitGemm", {bits, t, rs, Tensor(DType::kFloat32, {13})}, {}, bit);
      ADD_FAILURE() << name << ": three outputs taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("got 3 outputs"), std::string::npos) << e.what();
    }
    testing::KernelOptions two = options;
    two.num_outputs = 2;
    try {
      testing::run_kernel("TwoClassReluGrad", {dz, w, h}, {}, two);
      ADD_FAILURE() << name << ": two outputs taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("got 2 outputs"), std::string::npos) << e.what();
    }
    EXPECT_THROW(testing::run_kernel("TwoClassReluGrad", {random_tensor({n, 3}, rng, 0, 1), w, h}, {}, options), Error)
        << name;
  }
}

}  // namespace
}  // namespace anvil
