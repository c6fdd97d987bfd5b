// ShuffleNet's channel shuffle, as PyTorch exports it:
//   Reshape(x [N, C, S...] -> [N, g, C/g, S...]) -> Transpose(0, 2, 1, 3, ...) -> Reshape(-> x's shape)
// becomes one anvil.ChannelShuffle(x, group = g): y[:, j * g + i] = x[:, i * C/g + j].
// Apart, the three ops need plain data, so a network that runs its
// convolutions in NHWC reorders to plain and back around every shuffle; the
// one node keeps NHWC (kernels/dnnl/channels.cc).
#include "core/checked.h"
#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

// The group g when `split` (the first Reshape's output) is x split as
// [N, g, C/g, S...]; 0 otherwise.
int64_t split_groups(const ir::Type& x, const ir::Type& split) {
  if (!x.has_shape() || !split.has_shape() || x.rank() < 3 || split.rank() != x.rank() + 1) return 0;
  const ir::SymShape &xd = x.dims(), &sd = split.dims();
  if (!surely_same_dim(xd[0], sd[0]) || !xd[1].is_known() || !sd[1].is_known() || !sd[2].is_known()) return 0;
  const std::optional<int64_t> channels = mul_overflow_free(sd[1].value, sd[2].value);
  if (sd[1].value < 1 || !channels || *channels != xd[1].value) return 0;
  for (size_t a = 2; a < xd.size(); ++a)
    if (!surely_same_dim(xd[a], sd[a + 1])) return 0;
  return sd[1].value;
}

// The permutation that swaps axes 1 and 2 and keeps the others.
bool swaps_group_axes(const std::vector<int64_t>& perm) {
  if (perm.size() < 4 || perm[0] != 0 || perm[1] != 2 || perm[2] != 1) return false;
  for (size_t a = 3; a < perm.size(); ++a)
    if (perm[a] != static_cast<int64_t>(a)) return false;
  return true;
}

class FuseChannelShuffle : public Pass {
 public:
  std::string name() const override { return "fuse_channel_shuffle"; }
  bool run(ir::Graph& graph) override {
    bool changed = false;
    for (const auto& ptr : graph.nodes()) {
      ir::Node& merge = *ptr;
      if (!is_op(&merge, "Reshape")) continue;
      ir::Node* transpose = producer_op(merge.input(0), "Transpose");
      if (!transpose || !used_once(graph, transpose->output(0))) continue;
      ir::Node* split = producer_op(transpose->input(0), "Reshape");
      if (!split || !used_once(graph, split->output(0))) continue;
      ir::Value* x = split->input(0);
      const int64_t groups = x ? split_groups(x->type, split->output(0)->type) : 0;
      if (!groups || !swaps_group_axes(transpose_permutation(*transpose, static_cast<size_t>(x->type.rank()) + 1)) ||
          !surely_same_shape(merge.output(0)->type, x->type))
        continue;
      merge.op_type = "ChannelShuffle";
      merge.domain = "anvil";
      merge.attrs = {};
      merge.attrs.set("group", groups);
      merge.inputs = {x};
      transpose->dead = true;
      split->dead = true;
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_channel_shuffle() { return std::make_unique<FuseChannelShuffle>(); }

}  // namespace anvil::passes
