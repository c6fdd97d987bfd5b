// Add, Sub, Mul, Div, Max, Min (two inputs) on oneDNN's binary primitive
// (float32). oneDNN broadcasts only its second operand, so the kernel declines
// (to the reference kernel) when the first input is the broadcast one and the
// op does not commute.
#include "kernels/dnnl/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

using dnnl::algorithm;
using dnnl::memory;
namespace du = dnnl_util;

Shape left_pad(const Shape& s, size_t rank) {
  Shape r(rank - s.size(), 1);
  r.insert(r.end(), s.begin(), s.end());
  return r;
}

class DnnlBinary : public du::PrimitiveKernel {
 public:
  explicit DnnlBinary(const ir::Node& node) : op_(node.op_type) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.num_inputs() == 2, ErrorKind::kUnsupported, "oneDNN binary takes two inputs");
    const Shape &a = ctx.input_shape(0), &b = ctx.input_shape(1);
    const Shape& out = ctx.output_shape(0);
    size_t rank = std::max<size_t>(out.size(), 1);
    Shape out_r = left_pad(out, rank);
    swapped_ = left_pad(a, rank) != out_r;
    bool commutes = op_ == "Add" || op_ == "Mul" || op_ == "Max" || op_ == "Min";
    ANVIL_PREPARE_CHECK(ctx, !swapped_ || (commutes && left_pad(b, rank) == out_r), ErrorKind::kUnsupported,
                        "both operands broadcast");
    src0_ = du::plain_desc(out_r, DType::kFloat32);
    src1_ = du::plain_desc(left_pad(swapped_ ? a : b, rank), DType::kFloat32);
    algorithm alg = op_ == "Add" ? algorithm::binary_add
                    : op_ == "Sub" ? algorithm::binary_sub
                    : op_ == "Mul" ? algorithm::binary_mul
                    : op_ == "Div" ? algorithm::binary_div
                    : op_ == "Max" ? algorithm::binary_max
                                   : algorithm::binary_min;
    create<dnnl::binary, dnnl::binary::primitive_desc>(ctx, [&] {
      dnnl::binary::desc d(alg, src0_, src1_, src0_);
      return dnnl::binary::primitive_desc(d, du::user_scratchpad_attr(), du::engine());
    });
    return ctx.output_types();
  }

  int inplace_input() const override { return swapped_ ? 1 : 0; }

  void run(const RunContext& ctx) const override {
    if (ctx.out(0).numel() == 0) return;
    const Tensor& full = ctx.in(swapped_ ? 1 : 0);
    const Tensor& other = ctx.in(swapped_ ? 0 : 1);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC_0, du::wrap(src0_, full.raw())},
                                         {DNNL_ARG_SRC_1, du::wrap(src1_, other.raw())},
                                         {DNNL_ARG_DST, du::wrap(src0_, ctx.out(0).raw())}};
    execute(args, ctx.scratch);
  }

 private:
  std::string op_;
  bool swapped_ = false;
  memory::desc src0_, src1_;
};

// Sum/Max/Min with more than two inputs stay on the reference kernel.
std::unique_ptr<Kernel> make_binary(const ir::Node& node) {
  if (node.inputs.size() != 2) return nullptr;
  if (node.opset < 7) return nullptr;  // legacy axis-aligned broadcasting: the reference kernel
  return std::make_unique<DnnlBinary>(node);
}

}  // namespace

ANVIL_REGISTER_KERNEL_TYPED("Add", kDnnl, make_binary, {kFloat32Only});
ANVIL_REGISTER_KERNEL_TYPED("Sub", kDnnl, make_binary, {kFloat32Only});
ANVIL_REGISTER_KERNEL_TYPED("Mul", kDnnl, make_binary, {kFloat32Only});
ANVIL_REGISTER_KERNEL_TYPED("Div", kDnnl, make_binary, {kFloat32Only});
ANVIL_REGISTER_KERNEL_TYPED("Max", kDnnl, make_binary, {kFloat32Only});
ANVIL_REGISTER_KERNEL_TYPED("Min", kDnnl, make_binary, {kFloat32Only});

}  // namespace anvil::kernels
