// A Reshape that splits an image's channels into [A, B] followed by a
// Transpose that moves B last (YOLO's detection heads: a 1x1 convolution to
// anchors x outputs channels, viewed as [N, anchors, outputs, H, W] and
// permuted to [N, anchors, H, W, outputs]) becomes the channels moved last
// first, then the split, then a shuffle of whole runs of B:
//
//   Transpose(Reshape(x [N, A B, H, W], [N, A, B, H, W]), [0, 1, 3, 4, 2])
//   =>  Transpose(Reshape(Transpose(x, [0, 2, 3, 1]), [N, H, W, A, B]), [0, 3, 1, 2, 4])
//
// The first Transpose reads a convolution's NHWC or channel-block output as
// it is (dnnl/transpose.cc) where the Reshape needed plain NCHW, a reorder
// of the whole map; the last moves runs of B contiguous floats. Where the
// image arrives plain (padded channel blocks, no layouts), the rewrite only
// adds that last shuffle, so it runs where the advisor says the image
// arrives in a layout the first Transpose reads (a probe node
// anvil.ChannelsLastTranspose over x: kernels/fusion_advice.h), at level 3,
// where activations keep the convolutions' layouts.
#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

// The Reshape feeding Transpose `t` when the pair is the pattern above.
// Dims are compared as surely equal (unknown ones are not), and A and B must
// be positive (a zero-sized split made by allowzero has no [0, 0, 0, A, B]).
ir::Node* channel_split(const ir::Graph& graph, const ir::Node& t) {
  if (!is_op(&t, "Transpose") || !t.output(0) || transpose_permutation(t, 5) != std::vector<int64_t>{0, 1, 3, 4, 2})
    return nullptr;
  ir::Node* reshape = producer_op(t.input(0), "Reshape");
  if (!reshape || !used_once(graph, reshape->output(0)) || !reshape->input(0)) return nullptr;
  const ir::Type &in = reshape->input(0)->type, &split = reshape->output(0)->type;
  if (!in.has_shape() || in.rank() != 4 || !split.has_shape() || split.rank() != 5) return nullptr;
  const ir::SymShape &x = in.dims(), &s = split.dims();
  if (!surely_same_dim(s[0], x[0]) || !surely_same_dim(s[3], x[2]) || !surely_same_dim(s[4], x[3])) return nullptr;
  if (!s[1].is_known() || !s[2].is_known() || !x[1].is_known() || s[1].value < 1 || s[2].value < 1) return nullptr;
  if (x[1].value % s[2].value != 0 || x[1].value / s[2].value != s[1].value) return nullptr;
  return reshape;
}

// The advisor's probe: anvil.ChannelsLastTranspose over x (not in the graph).
ir::Node channels_last_probe(ir::Value* x) {
  ir::Node probe;
  probe.op_type = "ChannelsLastTranspose";
  probe.domain = "anvil";
  probe.inputs = {x};
  return probe;
}

class ChannelsLastBeforeSplit : public Pass {
 public:
  explicit ChannelsLastBeforeSplit(FusionAdvisor advisor) : advisor_(std::move(advisor)) {}
  std::string name() const override { return "channels_last_before_split"; }
  bool run(ir::Graph& graph) override {
    return rewrite_each_node(graph, [&](ir::Node& t) {
      ir::Node* reshape = channel_split(graph, t);
      if (!reshape || !advisor_(channels_last_probe(reshape->input(0)))) return false;
      rewrite(graph, t, *reshape);
      return true;
    });
  }

 private:
  static void rewrite(ir::Graph& graph, ir::Node& t, ir::Node& reshape) {
    ir::Value* x = reshape.input(0);
    const ir::SymShape &xd = x->type.dims(), &sd = reshape.output(0)->type.dims();
    const DType dtype = x->dtype();
    ir::Node* last = graph.add_node("Transpose", {x}, 1, graph.unique_name(t.name + "/channels_last"));
    last->opset = t.opset;
    last->attrs.set("perm", std::vector<int64_t>{0, 2, 3, 1});
    last->output(0)->type = ir::Type::tensor(dtype, {xd[0], xd[2], xd[3], xd[1]});
    // 0 copies N, H and W from the input (allowzero is 0 by default).
    ir::Value* target = int64_constant(graph, t.name + "/split_shape", {0, 0, 0, sd[1].value, sd[2].value});
    ir::Node* split = graph.add_node("Reshape", {last->output(0), target}, 1, graph.unique_name(t.name + "/split"));
    split->opset = reshape.opset;
    split->output(0)->type = ir::Type::tensor(dtype, {xd[0], xd[2], xd[3], sd[1], sd[2]});
    ir::Value* y = t.output(0);
    t.dead = true;
    reshape.dead = true;
    ir::Node* runs = graph.add_node_with_outputs("Transpose", {split->output(0)}, {y}, t.name);
    runs->opset = t.opset;
    runs->attrs.set("perm", std::vector<int64_t>{0, 3, 1, 2, 4});
  }

  FusionAdvisor advisor_;
};

}  // namespace

std::unique_ptr<Pass> make_channels_last_before_split(FusionAdvisor advisor) {
  return std::make_unique<ChannelsLastBeforeSplit>(std::move(advisor));
}

}  // namespace anvil::passes
