// A transformer's tokens turned into an image and back, as PyTorch exports
// x.transpose(1, 2).reshape(N, C, H, W), x.reshape(N, H, W, C).permute(0, 3,
// 1, 2) and y.flatten(2).transpose(1, 2) (SegFormer, PVT: convolutions
// between attention and MLP layers, a decode head over the stages' tokens):
//
//   Reshape(Transpose(x [N, P, C], [0, 2, 1]), [N, C, S...])  =>  anvil.TokensToImage(x, spatial = S)
//   Transpose(x [N, S..., C], [0, r - 1, 1, ..., r - 2])        =>  anvil.TokensToImage(x, spatial = S)
//   Transpose(Reshape(y [N, C, S...], [N, C, P]), [0, 2, 1])    =>  anvil.ImageToTokens(y)
//
// with P = S1 x S2 x .... Apart, the Transpose copies and the convolution
// after it reorders plain NCHW to NHWC; where the image keeps the
// channels-last layout, either node is a view of its input
// (kernels/dnnl/tokens.cc). So it runs at level 3, where activations keep
// the kernels' layouts, on float32 with every spatial dim known. Shapes come
// from inference from the graph's inputs (ir::infer_run_time_facts), not
// from types a file declares.
#include "core/checked.h"
#include "ir/schema.h"
#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

// A graph output stays plain, so the rewrite would only move its transpose
// to the reference kernel: those are left alone.
bool internal(const ir::Value* v) { return v && !v->is_graph_output; }

// v's inferred type when it is a float32 tensor of rank lo to hi; null otherwise.
const ir::Type* float32_of_rank(const ir::InferredFacts& facts, const ir::Value* v, int lo, int hi) {
  if (!v) return nullptr;
  const ir::Type& t = facts.type_of(v);
  const bool fits = t.is_tensor() && t.dtype() == DType::kFloat32 && t.has_shape() && t.rank() >= lo && t.rank() <= hi;
  return fits ? &t : nullptr;
}

// The known dims [from, to) of `dims` and their product; nullopt where one is
// not known or the product overflows.
std::optional<std::pair<std::vector<int64_t>, int64_t>> known_dims(const ir::SymShape& dims, size_t from, size_t to) {
  std::vector<int64_t> values;
  int64_t product = 1;
  for (size_t a = from; a < to; ++a) {
    const std::optional<int64_t> p = dims[a].is_known() ? mul_overflow_free(product, dims[a].value) : std::nullopt;
    if (!p || dims[a].value < 1) return std::nullopt;
    product = *p;
    values.push_back(dims[a].value);
  }
  return std::make_pair(values, product);
}

void become_tokens_to_image(ir::Node& n, ir::Value* x, std::vector<int64_t> spatial) {
  n.op_type = "TokensToImage";
  n.domain = "anvil";
  n.attrs = {};
  n.attrs.set("spatial", std::move(spatial));
  n.inputs = {x};
}

// Reshape(Transpose(x [N, P, C], [0, 2, 1]), [N, C, S...]).
bool tokens_reshaped_to_image(ir::Graph& graph, const ir::InferredFacts& facts, ir::Node& reshape) {
  const ir::Type* out = is_op(&reshape, "Reshape") ? float32_of_rank(facts, reshape.output(0), 4, 5) : nullptr;
  if (!out || !internal(reshape.output(0))) return false;
  ir::Node* t = producer_op(reshape.input(0), "Transpose");
  const ir::Type* in = t && used_once(graph, t->output(0)) ? float32_of_rank(facts, t->input(0), 3, 3) : nullptr;
  if (!in || transpose_permutation(*t, 3) != std::vector<int64_t>{0, 2, 1}) return false;
  const ir::SymShape &x = in->dims(), &image = out->dims();
  const auto spatial = known_dims(image, 2, image.size());
  if (!spatial || !surely_same_dim(image[0], x[0]) || !surely_same_dim(image[1], x[2]) || !x[1].is_known() ||
      x[1].value != spatial->second)
    return false;
  become_tokens_to_image(reshape, t->input(0), spatial->first);
  t->dead = true;
  return true;
}

// Transpose(x [N, S..., C], [0, r - 1, 1, ..., r - 2]): channels moved first.
bool channels_moved_first(const ir::InferredFacts& facts, ir::Node& t) {
  const ir::Type* in = is_op(&t, "Transpose") ? float32_of_rank(facts, t.input(0), 4, 5) : nullptr;
  if (!in || !internal(t.output(0))) return false;
  const ir::SymShape& x = in->dims();
  std::vector<int64_t> perm{0, static_cast<int64_t>(x.size()) - 1};
  for (size_t a = 1; a + 1 < x.size(); ++a) perm.push_back(static_cast<int64_t>(a));
  const auto spatial = known_dims(x, 1, x.size() - 1);
  if (!spatial || transpose_permutation(t, x.size()) != perm) return false;
  become_tokens_to_image(t, t.input(0), spatial->first);
  return true;
}

// Transpose(Reshape(y [N, C, S...], [N, C, P]), [0, 2, 1]).
bool image_flattened_to_tokens(ir::Graph& graph, const ir::InferredFacts& facts, ir::Node& t) {
  const ir::Type* flat_type = is_op(&t, "Transpose") ? float32_of_rank(facts, t.input(0), 3, 3) : nullptr;
  if (!flat_type || !internal(t.output(0)) || transpose_permutation(t, 3) != std::vector<int64_t>{0, 2, 1}) return false;
  ir::Node* reshape = producer_op(t.input(0), "Reshape");
  const ir::Type* image =
      reshape && used_once(graph, reshape->output(0)) ? float32_of_rank(facts, reshape->input(0), 4, 5) : nullptr;
  if (!image) return false;
  const ir::SymShape &y = image->dims(), &flat = flat_type->dims();
  const auto spatial = known_dims(y, 2, y.size());
  if (!spatial || !surely_same_dim(flat[0], y[0]) || !surely_same_dim(flat[1], y[1]) || !flat[2].is_known() ||
      flat[2].value != spatial->second)
    return false;
  t.op_type = "ImageToTokens";
  t.domain = "anvil";
  t.attrs = {};
  t.inputs = {reshape->input(0)};
  reshape->dead = true;
  return true;
}

class TokensAsImage : public Pass {
 public:
  std::string name() const override { return "tokens_as_image"; }
  bool run(ir::Graph& graph) override {
    const ir::InferredFacts facts = ir::infer_run_time_facts(graph);  // the rewrites keep every value's meaning
    return rewrite_each_node(graph, [&](ir::Node& n) {
      if (n.dead) return false;
      return tokens_reshaped_to_image(graph, facts, n) || image_flattened_to_tokens(graph, facts, n) ||
             channels_moved_first(facts, n);
    });
  }
};

}  // namespace

std::unique_ptr<Pass> make_tokens_as_image() { return std::make_unique<TokensAsImage>(); }

}  // namespace anvil::passes
