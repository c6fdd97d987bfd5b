// A Pad of zeros around the spatial axes, read only by a Conv or an
// AveragePool, becomes that node's own padding:
//   Pad(x, zeros) -> Conv          =>  Conv(x) with pads += the Pad's
//   Pad(x, zeros) -> AveragePool   =>  AveragePool(x) with pads += the Pad's
//                                      and count_include_pad = 1
// PyTorch exports avg_pool2d(padding=1, count_include_pad=True) so
// (Inception-v3's nine), and TensorFlow converters their SAME convolutions.
// Alone, the Pad runs the reference kernel on plain data, between reorders
// out of and back into the convolutions' layout.
#include <algorithm>

#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

// The Pad's begin and end pads of each spatial axis (rank - 2 of each, as
// ONNX's Conv and pooling write them) when it pads only those axes, by
// zeros, with a constant value of 0; nullopt otherwise.
std::optional<std::vector<int64_t>> spatial_zero_pads(const ir::Node& pad) {
  const std::optional<std::vector<int64_t>> all = constant_pads(pad);
  const ir::Value* x = pad.input(0);
  if (!all || x->type.rank() < 3 || pad.attrs.get_string("mode", "constant") != "constant") return std::nullopt;
  const bool zero_value = pad.opset < 11 ? pad.attrs.get_float("value", 0.f) == 0.f
                                         : !pad.input(2) || scalar_value(pad.input(2)) == std::optional<double>(0.0);
  if (!zero_value) return std::nullopt;
  const std::vector<int64_t>& pads = *all;
  const size_t rank = static_cast<size_t>(x->type.rank());
  if (pads[0] || pads[1] || pads[rank] || pads[rank + 1]) return std::nullopt;
  if (std::any_of(pads.begin(), pads.end(), [](int64_t v) { return v < 0; })) return std::nullopt;
  std::vector<int64_t> spatial(pads.begin() + 2, pads.begin() + static_cast<std::ptrdiff_t>(rank));
  spatial.insert(spatial.end(), pads.begin() + static_cast<std::ptrdiff_t>(rank) + 2, pads.end());
  return spatial;
}

// Whether `reader` can take the pads: a Conv, or an AveragePool that counts
// padding in its divisor (or has none of its own), with explicit padding
// and floor rounding.
bool takes_pads(const ir::Node& reader, size_t spatial_axes) {
  const bool conv = is_op(&reader, "Conv"), pool = is_op(&reader, "AveragePool");
  if (!conv && !pool) return false;
  if (reader.attrs.get_string("auto_pad", "NOTSET") != "NOTSET") return false;
  const std::vector<int64_t> own = reader.attrs.get_ints("pads", std::vector<int64_t>(2 * spatial_axes, 0));
  if (own.size() != 2 * spatial_axes) return false;
  if (!pool) return true;
  if (reader.opset < 7) return false;  // count_include_pad is from opset 7 on
  const bool own_pads = std::any_of(own.begin(), own.end(), [](int64_t v) { return v != 0; });
  return reader.attrs.get_int("ceil_mode", 0) == 0 && (reader.attrs.get_int("count_include_pad", 0) == 1 || !own_pads);
}

class FoldPad : public Pass {
 public:
  std::string name() const override { return "fold_pad"; }
  bool run(ir::Graph& graph) override {
    bool changed = false;
    for (const auto& ptr : graph.nodes()) {
      ir::Node& pad = *ptr;
      if (!is_op(&pad, "Pad")) continue;
      const std::optional<std::vector<int64_t>> pads = spatial_zero_pads(pad);
      if (!pads) continue;
      ir::Node* reader = single_consumer(graph, pad.output(0));
      if (!reader || reader->input(0) != pad.output(0) || !takes_pads(*reader, pads->size() / 2)) continue;
      std::vector<int64_t> own = reader->attrs.get_ints("pads", std::vector<int64_t>(pads->size(), 0));
      for (size_t i = 0; i < own.size(); ++i) own[i] += (*pads)[i];
      reader->attrs.set("pads", own);
      if (reader->op_type == "AveragePool") reader->attrs.set("count_include_pad", int64_t{1});
      reader->inputs[0] = pad.input(0);
      pad.dead = true;
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fold_pad() { return std::make_unique<FoldPad>(); }

}  // namespace anvil::passes
