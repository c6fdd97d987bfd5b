// Add, Sub, Mul, Div, Max, Min (two inputs) on oneDNN's binary primitive
// (float32). oneDNN broadcasts only its second operand, so the kernel declines
// (to the reference kernel) when the first input is the broadcast one and the
// op does not commute. Tensors between convolutions stay in the layout they
// arrive in where oneDNN can (du::elementwise_layout).
#include <algorithm>
#include <optional>
#include <vector>

#include "kernels/dnnl/common.h"
#include "kernels/registry.h"
#include "kernels/vec/vec_kernels.h"

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

// y = x op s (s op x when swapped) with s one value per channel, over a
// layout that keeps each pixel's channels together (`px`: a channel block
// per plane, or all of them, NHWC) and C channels in all: runs of whole
// pixels against the plane's channel values repeated over the run, one
// vectorized pass (vec chain_block) per run. oneDNN's binary took twice as
// long at 2 threads as at 1 on NHWC (EfficientNet's excitation scales).
void per_channel_binary(const du::PixelLayout& px, int64_t c, vec::ChainOp op, bool swapped, const float* x,
                        const float* s, float* y) {
  const int64_t pixels = px.plane / px.pixel, run = std::max<int64_t>(1, 512 / px.channels);
  const int64_t runs = (pixels + run - 1) / run, blocks = c / px.channels;
  const vec::ChainStep step{op, vec::ChainOperand::kFull, swapped, 0.f};
  const auto& kernels = vec::vec_kernels();
#pragma omp parallel if (px.planes * px.plane >= (int64_t{1} << 16))
  {
    std::vector<float> repeated(static_cast<size_t>(run * px.channels));
    int64_t filled_for = -1;  // the channel block `repeated` holds
#pragma omp for schedule(static)
    for (int64_t item = 0; item < px.planes * runs; ++item) {
      const int64_t plane = item / runs, first = item % runs * run, block = plane % blocks;
      if (block != filled_for) {
        for (int64_t r = 0; r < run; ++r)
          std::copy_n(s + block * px.channels, px.channels, repeated.data() + r * px.channels);
        filled_for = block;
      }
      const int64_t at = plane * px.plane + first * px.pixel, n = std::min(run, pixels - first) * px.channels;
      const float* operand = repeated.data();
      kernels.chain_block(&step, 1, x + at, &operand, y + at, n);
    }
  }
}

// An op's oneDNN algorithm and, where the vectorized chain step has it, its step.
struct BinaryOp {
  const char* name;
  algorithm dnnl_alg;
  std::optional<vec::ChainOp> chain;
};
const BinaryOp& binary_op(const std::string& name) {
  static const BinaryOp kOps[] = {{"Add", algorithm::binary_add, vec::ChainOp::kAdd},
                                  {"Sub", algorithm::binary_sub, vec::ChainOp::kSub},
                                  {"Mul", algorithm::binary_mul, vec::ChainOp::kMul},
                                  {"Div", algorithm::binary_div, vec::ChainOp::kDiv},
                                  {"Max", algorithm::binary_max, std::nullopt},
                                  {"Min", algorithm::binary_min, std::nullopt}};
  for (const BinaryOp& op : kOps)
    if (name == op.name) return op;
  ANVIL_CHECK(false, ErrorKind::kInternal, "the binary kernel is registered for {}", name);
  return kOps[0];
}

// [1, C, 1, ...] against `full` [N, C, ...]: one value per channel (axis 1)
// of the full operand, rank 3 or more (a scalar, [1, 1, 1, 1], is not).
bool is_per_channel(const Shape& s, const Shape& full) {
  if (s.size() < 3 || s.size() != full.size() || s[1] != full[1]) return false;
  for (size_t i = 0; i < s.size(); ++i)
    if (i != 1 && s[i] != 1) return false;
  return true;
}

// The activation format of `md` whose channels are blocked (nCw8c ...
// nCdhw16c) or last (NWC, NHWC, NDHWC), if it is one.
std::optional<memory::format_tag> channel_block_tag(const memory::desc& md) {
  using tag = memory::format_tag;
  static const std::pair<const char*, tag> kTags[] = {
      {"aBc8b", tag::aBc8b},     {"aBc16b", tag::aBc16b},     {"aBcd8b", tag::aBcd8b}, {"aBcd16b", tag::aBcd16b},
      {"aBcde8b", tag::aBcde8b}, {"aBcde16b", tag::aBcde16b}, {"acb", tag::acb},       {"acdb", tag::acdb},
      {"acdeb", tag::acdeb}};
  const std::string name = du::layout_name(md);
  for (const auto& [n, t] : kTags)
    if (name == n) return t;
  return std::nullopt;
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
    const Shape other_r = left_pad(swapped_ ? a : b, rank);
    const BinaryOp& spec = binary_op(op_);
    const algorithm alg = spec.dnnl_alg;
    const auto make_pd = [&] {
      dnnl::binary::desc d(alg, src0_, src1_, src0_);
      return dnnl::binary::primitive_desc(d, du::user_scratchpad_attr(), du::engine());
    };
    // The full operand's layout kept (a squeeze-and-excitation scale, a
    // residual sum between convolutions); the other operand in it too when
    // it has the same shape, else plain (a broadcast along whole axes). Only
    // where oneDNN has a JIT kernel for the pair: its reference binary is
    // slower than the reorders it saves.
    const size_t full = swapped_ ? 1 : 0;
    if (ctx.input_shape(full).size() == rank) layout_ = du::elementwise_layout(ctx, full, out_r);
    if (layout_) {
      src0_ = du::desc_of({DType::kFloat32, out_r, layout_});
      // The same shape, read in the same layout; with a lower rank it has no
      // such layout (its leading axes are implicit), so it stays plain.
      const bool same_shape = other_r == out_r && ctx.input_shape(swapped_ ? 0 : 1).size() == rank;
      other_layout_ = same_shape ? layout_ : nullptr;
      const bool per_channel = !same_shape && is_per_channel(other_r, out_r);
      // A per-channel operand ([1, C, 1, 1], src0's C) is the same bytes in
      // src0's channel-blocked or channels-last format as in plain (C fills
      // whole blocks: src0 has no padding), and oneDNN's JIT kernels want it
      // in that format: in NHWC against a plain one, its binary ran twice
      // as long at 2 threads as at 1 (EfficientNet's excitation scales).
      const std::optional<memory::format_tag> blocks = channel_block_tag(src0_);
      src1_ = per_channel && blocks ? memory::desc(du::dims(other_r), memory::data_type::f32, *blocks)
                                    : du::desc_of({DType::kFloat32, other_r, other_layout_});
      const std::optional<du::PixelLayout> pixels = du::pixel_layout(src0_);
      if (per_channel && pixels && pixels->pixel == pixels->channels && spec.chain) {
        per_channel_ = *pixels;
        chain_op_ = *spec.chain;
        threads_ = ctx.num_threads();
        impl_ = std::string(vec::vec_impl_name()) + ":per_channel";
        return output_types(ctx);
      }
      try {
        if (du::impl_name(make_pd()).find("ref") != std::string::npos) layout_ = other_layout_ = nullptr;
      } catch (const dnnl::error&) {
        layout_ = other_layout_ = nullptr;
      }
    }
    if (!layout_) {
      src0_ = du::plain_desc(out_r, DType::kFloat32);
      src1_ = du::plain_desc(other_r, DType::kFloat32);
    }
    create<dnnl::binary, dnnl::binary::primitive_desc>(ctx, make_pd);
    // Where oneDNN has only its reference binary for plain data too (a
    // broadcast over a middle axis, as Swin-T's rank-5 attention masks:
    // 15.1 ms a node where Anvil's reference loops take 0.07), Anvil's
    // kernels run it.
    ANVIL_PREPARE_CHECK(ctx, layout_ || impl_.find("ref") == std::string::npos, ErrorKind::kUnsupported,
                        "oneDNN has only its reference binary for this {}", op_);
    return output_types(ctx);
  }

  // In place, except for a per-channel scale on several threads: there it
  // follows a pooling that read the tensor on both cores (squeeze and
  // excitation), and writing over lines both cores' caches share cost more
  // than a fresh buffer (EfficientNet-B0's 16 scales at 2 threads: 0.75 ->
  // 0.3 ms; at 1 thread in place is the faster).
  int inplace_input() const override {
    if (per_channel_ && threads_ > 1) return -1;
    return swapped_ ? 1 : 0;
  }
  Layout input_layout(size_t i) const override { return i == (swapped_ ? 1u : 0u) ? layout_ : other_layout_; }
  std::string layout_name() const override { return kernels::layout_name(layout_); }

  void run(const RunContext& ctx) const override {
    if (ctx.out(0).numel() == 0) return;
    const Tensor& full = ctx.in(swapped_ ? 1 : 0);
    const Tensor& other = ctx.in(swapped_ ? 0 : 1);
    if (per_channel_)
      return per_channel_binary(*per_channel_, other.numel(), chain_op_, swapped_, full.data<float>(),
                                other.data<float>(), ctx.out(0).data<float>());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC_0, du::wrap(src0_, full.raw())},
                                         {DNNL_ARG_SRC_1, du::wrap(src1_, other.raw())},
                                         {DNNL_ARG_DST, du::wrap(src0_, ctx.out(0).raw())}};
    execute(args, ctx.scratch);
  }

 private:
  std::vector<TensorType> output_types(const PrepareContext& ctx) const {
    std::vector<TensorType> types = ctx.output_types();
    types[0].layout = layout_;
    return types;
  }

  std::string op_;
  bool swapped_ = false;
  std::optional<du::PixelLayout> per_channel_;  // set: per_channel_binary runs the op
  vec::ChainOp chain_op_ = vec::ChainOp::kAdd;  // the op as its chain step
  int threads_ = 1;                             // the plan's, for inplace_input
  Layout layout_, other_layout_;  // of the full operand (and the output), of the other; null: plain
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
