// A 2-D ConvTranspose whose stride equals its kernel (b x b, no padding, no
// dilation, one group: U-Nets' and FPN decoders' 2x upsampling) writes each
// input pixel's b x b output patch from that pixel alone, so it is a 1x1
// convolution to b * b * C_out channels followed by DepthToSpace:
//
//   y[n, o, h b + i, w b + j] = B[o] + sum_c x[n, c, h, w] W[c, o, i, j]
//   =>  Conv(x, W', B') with W'[(i b + j) C_out + o, c] = W[c, o, i, j] and
//       B'[(i b + j) C_out + o] = B[o];  DepthToSpace(blocksize b, DCR)
//
// oneDNN ran the ConvTranspose on its gemm-based kernel over plain data (its
// jit deconvolution in channel blocks was slower still), with reorders to and
// from the convolutions' layouts around it; the 1x1 convolution runs on its
// fast kernels and DepthToSpace keeps their layout (in DCR order each tap's
// channels are one run in a pixel). Weights and bias must be constants.
#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

// The common kernel side and stride b when `n` is a ConvTranspose this pass
// rewrites; 0 otherwise.
int64_t patch_side(const ir::Node& n) {
  // DepthToSpace takes its mode from opset 11.
  if (!is_op(&n, "ConvTranspose") || n.opset < 11 || n.outputs.size() != 1 || !n.output(0)) return 0;
  const ir::Value *x = n.input(0), *w = n.input(1), *b = n.inputs.size() > 2 ? n.input(2) : nullptr;
  if (!x || !is_float_constant(w) || (n.inputs.size() > 2 && b && !is_float_constant(b))) return 0;
  if (x->dtype() != DType::kFloat32 || !x->type.has_shape() || x->type.rank() != 4) return 0;
  const Shape& ws = w->constant->shape();
  if (ws.size() != 4 || ws[2] != ws[3] || ws[2] < 1 || ws[0] < 1 || ws[1] < 1) return 0;
  if (b && b->constant->shape() != Shape{ws[1]}) return 0;
  const int64_t side = ws[2];
  const ir::Attributes& a = n.attrs;
  const std::string auto_pad = a.get_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID") return 0;
  if (a.get_int("group", 1) != 1 || !all_equal_to(a.get_ints("strides"), side)) return 0;
  if (a.has("kernel_shape") && !all_equal_to(a.get_ints("kernel_shape"), side)) return 0;
  if (a.has("dilations") && !all_equal_to(a.get_ints("dilations"), 1)) return 0;
  if (a.has("pads") && !all_equal_to(a.get_ints("pads"), 0)) return 0;
  if (a.has("output_padding") && !all_equal_to(a.get_ints("output_padding"), 0)) return 0;
  if (a.has("output_shape")) return 0;  // its own rule for the padding: left to the kernel
  if (a.get_ints("strides").size() != 2) return 0;
  return side;
}

class ConvTransposeAsDepthToSpace : public Pass {
 public:
  std::string name() const override { return "conv_transpose_as_depth_to_space"; }
  bool run(ir::Graph& graph) override {
    return rewrite_each_node(graph, [&](ir::Node& n) {
      const int64_t side = patch_side(n);
      if (side == 0) return false;
      rewrite(graph, n, side);
      return true;
    });
  }

 private:
  static void rewrite(ir::Graph& graph, ir::Node& n, int64_t b) {
    const Tensor& w = *n.input(1)->constant;
    const ir::Value* bias_in = n.inputs.size() > 2 ? n.input(2) : nullptr;
    const int64_t cin = w.shape()[0], cout = w.shape()[1], taps = b * b;
    Tensor w2(DType::kFloat32, {taps * cout, cin, 1, 1}), b2(DType::kFloat32, {taps * cout});
    const float* src = w.data<float>();
    float* dst = w2.data<float>();
    for (int64_t c = 0; c < cin; ++c)
      for (int64_t o = 0; o < cout; ++o)
        for (int64_t t = 0; t < taps; ++t) dst[(t * cout + o) * cin + c] = src[(c * cout + o) * taps + t];
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t o = 0; o < cout; ++o)
        b2.data<float>()[t * cout + o] = bias_in ? bias_in->constant->data<float>()[o] : 0.f;
    ir::Value* y = n.output(0);
    ir::Node* conv = graph.add_node(
        "Conv",
        {n.input(0), graph.add_constant(graph.unique_name(n.name + "/patch_w"), std::move(w2)),
         graph.add_constant(graph.unique_name(n.name + "/patch_b"), std::move(b2))},
        1, graph.unique_name(n.name + "/patches"));
    conv->opset = n.opset;
    conv->attrs.set("kernel_shape", std::vector<int64_t>{1, 1});
    const ir::SymShape& xd = n.input(0)->type.dims();
    conv->output(0)->type = ir::Type::tensor(DType::kFloat32, {xd[0], ir::Dim::known(taps * cout), xd[2], xd[3]});
    n.dead = true;
    ir::Node* d2s = graph.add_node_with_outputs("DepthToSpace", {conv->output(0)}, {y}, n.name);
    d2s->opset = n.opset;
    d2s->attrs.set("blocksize", b);
    d2s->attrs.set("mode", std::string("DCR"));
  }
};

}  // namespace

std::unique_ptr<Pass> make_conv_transpose_as_depth_to_space() {
  return std::make_unique<ConvTransposeAsDepthToSpace>();
}

}  // namespace anvil::passes
