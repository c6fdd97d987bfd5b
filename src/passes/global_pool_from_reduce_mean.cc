// A ReduceMean over every spatial axis of a float32 [N, C, H, W] (or [N, C,
// D, H, W]) tensor is a GlobalAveragePool:
//   ReduceMean(x, axes = [2, ..., rank - 1], keepdims = 1)  =>  GlobalAveragePool(x)
//   ReduceMean(x, axes = [2, ..., rank - 1], keepdims = 0)  =>  Flatten(GlobalAveragePool(x), axis = 1)
// torchvision's MNASNet ends on x.mean([2, 3]), and timm's
// squeeze-and-excitation blocks pool with x.mean((2, 3), keepdim=True). A
// ReduceMean reads plain data, so where the convolutions before it keep NHWC
// or channel blocks their last output is reordered first (MNASNet: 1280 x 7
// x 7, 0.036 ms of 3.2 at two threads); oneDNN's pooling reads those layouts,
// and fuse_squeeze_excite takes a pool that gates a block.
#include <algorithm>

#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

// Whether `mean` averages a float32 image (rank 4 or 5) over exactly its
// spatial axes (2 on), each of a known size of at least 1 (an empty plane's
// mean is left to ReduceMean's own rule). Rank 3 is left alone: there the
// last axis is as often a transformer's hidden size ([batch, sequence,
// hidden]), whose means are a normalization's.
bool averages_spatial_axes(const ir::Node& mean) {
  const ir::Value* x = mean.input(0);
  if (!x || x->dtype() != DType::kFloat32 || !x->type.has_shape() || x->type.rank() < 4 || x->type.rank() > 5)
    return false;
  const int rank = x->type.rank();
  const ir::SymShape& dims = x->type.dims();
  for (size_t i = 2; i < dims.size(); ++i)
    if (dims[i].value < 1) return false;
  std::optional<std::vector<int64_t>> axes = reduce_axes(mean);
  if (!axes) return false;
  for (int64_t& a : *axes) a = a < 0 ? a + rank : a;
  std::sort(axes->begin(), axes->end());
  std::vector<int64_t> spatial(static_cast<size_t>(rank - 2));
  for (size_t i = 0; i < spatial.size(); ++i) spatial[i] = static_cast<int64_t>(i) + 2;
  return *axes == spatial;
}

class GlobalPoolFromReduceMean : public Pass {
 public:
  std::string name() const override { return "global_pool_from_reduce_mean"; }
  bool run(ir::Graph& graph) override {
    return rewrite_each_node(graph, [&](ir::Node& mean) {
      if (!is_op(&mean, "ReduceMean") || !averages_spatial_axes(mean)) return false;
      ir::Value* x = mean.input(0);
      if (mean.attrs.get_int("keepdims", 1) != 0) {
        mean.op_type = "GlobalAveragePool";
        mean.attrs = {};
        mean.inputs = {x};
        return true;
      }
      // keepdims = 0: the pool, then its trailing 1s dropped.
      ir::SymShape pooled = x->type.dims();
      std::fill(pooled.begin() + 2, pooled.end(), ir::Dim::known(1));
      ir::Node* pool = graph.add_node("GlobalAveragePool", {x}, 1, graph.unique_name(mean.name + "/pool"));
      pool->opset = mean.opset;
      pool->output(0)->type = ir::Type::tensor(DType::kFloat32, pooled);
      mean.op_type = "Flatten";
      mean.attrs = {};
      mean.attrs.set("axis", int64_t{1});
      mean.inputs = {pool->output(0)};
      return true;
    });
  }
};

}  // namespace

std::unique_ptr<Pass> make_global_pool_from_reduce_mean() { return std::make_unique<GlobalPoolFromReduceMean>(); }

}  // namespace anvil::passes
