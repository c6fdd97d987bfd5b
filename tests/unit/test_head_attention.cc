// fuse_head_attention: softmax(Qh Kt * c + bias) Vh over 4-D heads (LeViT's
// and Swin's attention, whose head splits the other attention passes do
// not match) becomes one Attention node. Outputs against the formula in
// double; lookalikes keep their nodes.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "anvil/session.h"
#include "ir/schema.h"
#include "kernel_tester.h"
#include "passes/pipeline.h"
#include "runtime/constant_evaluator.h"

namespace anvil {
namespace {

size_t count_ops(const ir::Graph& g, const std::string& op) { return testing::count_live_ops(g, op); }

Tensor wave(Shape shape, float phase, float amplitude = 1.f) {
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = amplitude * std::sin(0.37f * static_cast<float>(i) + phase);
  return t;
}

Tensor scalar(float v) {
  Tensor t(DType::kFloat32, {});
  *t.data<float>() = v;
  return t;
}

constexpr int64_t kBatch = 2, kHeads = 3, kQueries = 5, kKeys = 7, kSize = 4, kValueSize = 6;

struct Case {
  const char* scaling = "mul";  // "mul", "div", "none"
  bool bias = true;
  Shape bias_shape = {kHeads, kQueries, kKeys};
  bool keys_transposed_in_graph = true;  // Kt = Transpose(Kh, 0132); else Kt is an input
  bool keys_sequence_first = false;      // Kt = Transpose(K [b, skv, h, d], 0231), as BERT-style exports
  int64_t softmax_axis = -1;
  bool probabilities_are_an_output = false;
  bool scale_is_a_vector = false;
  int64_t key_batch = kBatch;
  int64_t qkv_heads = kHeads;  // 1 with a bias of kHeads: the Add broadcasts the scores past the product
};

// Y = softmax(Qh Kt * 0.5 (or / 2) + bias) Vh, 4-D heads.
std::unique_ptr<ir::Graph> attention_graph(const Case& c, const Tensor& bias) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  const int64_t heads = c.qkv_heads;
  ir::Value* q = g->add_input("q", DType::kFloat32, {kBatch, heads, kQueries, kSize});
  ir::Value* k_t = nullptr;
  if (c.keys_transposed_in_graph) {
    ir::Value* k = c.keys_sequence_first ? g->add_input("k", DType::kFloat32, {c.key_batch, kKeys, heads, kSize})
                                         : g->add_input("k", DType::kFloat32, {c.key_batch, heads, kKeys, kSize});
    ir::Node* t = g->add_node("Transpose", {k}, 1, "k_t");
    t->attrs.set("perm", c.keys_sequence_first ? std::vector<int64_t>{0, 2, 3, 1} : std::vector<int64_t>{0, 1, 3, 2});
    k_t = t->output(0);
  } else {
    k_t = g->add_input("k_t", DType::kFloat32, {c.key_batch, heads, kSize, kKeys});
  }
  ir::Value* v = g->add_input("v", DType::kFloat32, {kBatch, heads, kKeys, kValueSize});
  ir::Value* s = g->add_node("MatMul", {q, k_t}, 1, "qk")->output(0);
  const std::string scaling = c.scaling;
  if (scaling == "mul") {
    ir::Value* factor = g->add_constant("half", c.scale_is_a_vector ? wave({kKeys}, 0.f) : scalar(0.5f));
    s = g->add_node("Mul", {s, factor}, 1, "scale")->output(0);
  } else if (scaling == "div") {
    s = g->add_node("Div", {s, g->add_constant("two", scalar(2.f))}, 1, "scale")->output(0);
  }
  if (c.bias) s = g->add_node("Add", {s, g->add_constant("bias", bias)}, 1, "bias_add")->output(0);
  ir::Node* softmax = g->add_node("Softmax", {s}, 1, "softmax");
  softmax->attrs.set("axis", c.softmax_axis);
  if (c.probabilities_are_an_output) g->add_output(softmax->output(0));
  g->add_output(g->add_node("MatMul", {softmax->output(0), v}, 1, "pv")->output(0));
  return g;
}

TEST(HeadAttention, ScoresScaledAndBiasedBecomeOneAttention) {
  const Tensor q = wave({kBatch, kHeads, kQueries, kSize}, 0.1f, 2.f), v = wave({kBatch, kHeads, kKeys, kValueSize}, 1.3f);
  const Tensor k = wave({kBatch, kHeads, kKeys, kSize}, 0.7f, 2.f);
  Tensor k_t(DType::kFloat32, {kBatch, kHeads, kSize, kKeys});
  for (int64_t bh = 0; bh < kBatch * kHeads; ++bh)
    for (int64_t j = 0; j < kKeys; ++j)
      for (int64_t e = 0; e < kSize; ++e)
        k_t.data<float>()[(bh * kSize + e) * kKeys + j] = k.data<float>()[(bh * kKeys + j) * kSize + e];
  Tensor k_bshd(DType::kFloat32, {kBatch, kKeys, kHeads, kSize});
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t j = 0; j < kKeys; ++j)
        for (int64_t e = 0; e < kSize; ++e)
          k_bshd.data<float>()[((b * kKeys + j) * kHeads + h) * kSize + e] =
              k.data<float>()[((b * kHeads + h) * kKeys + j) * kSize + e];
  std::vector<Case> cases(7);
  cases[1].scaling = "div";
  cases[2].scaling = "none";
  cases[2].bias = false;
  cases[3].keys_transposed_in_graph = false;
  cases[4].bias_shape = {kKeys};
  cases[5].bias_shape = {kBatch, 1, kQueries, kKeys};
  cases[6].keys_sequence_first = true;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.scaling) + (c.bias ? " bias rank " + std::to_string(c.bias_shape.size()) : "") +
                 (c.keys_transposed_in_graph ? "" : ", K^T an input") + (c.keys_sequence_first ? ", K [b, s, h, d]" : ""));
    const Tensor bias = wave(c.bias_shape, 2.1f, 3.f);
    auto g = attention_graph(c, bias);
    ir::infer_types(*g);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "Attention"), 1u);
    EXPECT_EQ(count_ops(*g, "Softmax") + count_ops(*g, "MaskedSoftmax") + count_ops(*g, "MatMul"), 0u);
    EXPECT_EQ(count_ops(*g, "Transpose"), c.keys_transposed_in_graph && !c.keys_sequence_first ? 0u : 1u);

    // softmax over keys of (q . k) * scale + bias, then the weighted sum of values, in double.
    const double scale = std::string(c.scaling) == "none" ? 1.0 : 0.5;
    std::vector<double> want(static_cast<size_t>(kBatch * kHeads * kQueries * kValueSize));
    for (int64_t b = 0; b < kBatch; ++b)
      for (int64_t h = 0; h < kHeads; ++h)
        for (int64_t i = 0; i < kQueries; ++i) {
          std::vector<double> w(kKeys);
          double top = -1e300, sum = 0;
          for (int64_t j = 0; j < kKeys; ++j) {
            double dot = 0;
            for (int64_t e = 0; e < kSize; ++e)
              dot += static_cast<double>(q.data<float>()[((b * kHeads + h) * kQueries + i) * kSize + e]) *
                     k.data<float>()[((b * kHeads + h) * kKeys + j) * kSize + e];
            double add = 0;
            if (c.bias) {  // the bias broadcast from the right over [b, h, i, j]
              const Shape& bs = c.bias_shape;
              const int64_t idx[4] = {b, h, i, j};
              int64_t at = 0;
              for (size_t d = 0; d < bs.size(); ++d)
                at = at * bs[d] + (bs[d] == 1 ? 0 : idx[4 - bs.size() + d]);
              add = bias.data<float>()[at];
            }
            w[static_cast<size_t>(j)] = dot * scale + add;
            top = std::max(top, w[static_cast<size_t>(j)]);
          }
          for (double& x : w) sum += x = std::exp(x - top);
          for (int64_t e = 0; e < kValueSize; ++e) {
            double y = 0;
            for (int64_t j = 0; j < kKeys; ++j)
              y += w[static_cast<size_t>(j)] / sum * v.data<float>()[((b * kHeads + h) * kKeys + j) * kValueSize + e];
            want[static_cast<size_t>(((b * kHeads + h) * kQueries + i) * kValueSize + e)] = y;
          }
        }
    for (int level : {0, 2, 3}) {
      SessionOptions options;
      options.optimization_level = level;
      Session s = Session::from_graph(attention_graph(c, bias), options);
      std::map<std::string, Tensor> feeds = {{"q", q}, {"v", v}};
      feeds[c.keys_transposed_in_graph ? "k" : "k_t"] = !c.keys_transposed_in_graph ? k_t : c.keys_sequence_first ? k_bshd : k;
      const Tensor y = s.run(feeds)[0];
      ASSERT_EQ(y.shape(), (Shape{kBatch, kHeads, kQueries, kValueSize}));
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(y.data<float>()[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << "level " << level << " at " << i;
    }
  }
}

// The softmax over another axis, the probabilities also an output, a bias
// that broadcasts along the keys, a scale per key, keys of another batch
// (MatMul broadcasts it, Attention would not), and one head against a bias
// of three (the Add makes three heads of scores): no Attention.
TEST(HeadAttention, LookalikesKeepTheirNodes) {
  std::vector<Case> cases(6);
  cases[5].qkv_heads = 1;
  cases[0].softmax_axis = 2;
  cases[1].probabilities_are_an_output = true;
  cases[2].bias_shape = {kHeads, kQueries, 1};
  cases[3].scale_is_a_vector = true;
  cases[4].key_batch = 1;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    auto g = attention_graph(cases[i], wave(cases[i].bias_shape, 0.f));
    ir::infer_types(*g);
    passes::optimize(*g, 2, runtime::reference_evaluator());
    EXPECT_EQ(count_ops(*g, "Attention"), 0u);
  }
}

}  // namespace
}  // namespace anvil
