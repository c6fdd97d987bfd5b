// anvil.ElementwiseChain: a chain of float32 element-wise ops fused by
// fuse_elementwise_chain.cc, run as one pass over the data in blocks that
// stay in L1, instead of one pass (and one stored intermediate) per op.
//
// Inputs: X, then the tensor operands (each X's shape, or one value per
// position of X's last axis); X itself may be an operand (x * x). Attributes, one entry per step:
//   ops       ChainOp values (Relu, Neg, Abs, Sqrt, Exp, Sigmoid, Add, Sub, Mul, Div)
//   operands  ChainOperand values (none, scalar, row, full), plus 4 when the
//             operand comes first (Sub and Div: operand - v, operand / v)
//   args      the input index of a row or full operand; the index into
//             `scalars` of a scalar one; 0 for unary steps
//   scalars   the scalar operands' values
// The vectorized kernel computes exp and sigmoid to about 1 ulp; the
// reference one (constant folding) with std::exp.
#include <algorithm>
#include <array>
#include <cmath>

#include "kernels/ref/common.h"
#include "kernels/registry.h"
#include "kernels/vec/vec_kernels.h"

namespace anvil::kernels {
namespace {

using vec::ChainOp;
using vec::ChainOperand;
using vec::ChainStep;

constexpr int64_t kBlock = 2048;  // floats per block: the running value stays in L1 between steps

class ElementwiseChainKernel : public Kernel {
 public:
  ElementwiseChainKernel(const ir::Node&, bool exact) : exact_(exact) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);
    for (size_t i = 0; i < ctx.num_inputs(); ++i)
      ANVIL_PREPARE_CHECK(ctx, ctx.has_input(i) && ctx.input_dtype(i) == DType::kFloat32, ErrorKind::kInvalidModel,
                          "input {} must be float32", i);
    read_program(ctx);
    row_ = x.empty() ? 1 : x.back();
    has_row_ = reads_x_again_ = false;
    for (const Step& s : steps_) {
      if (s.step.operand != ChainOperand::kRow && s.step.operand != ChainOperand::kFull) continue;
      const Shape& operand = ctx.input_shape(static_cast<size_t>(s.input));
      if (s.step.operand == ChainOperand::kFull)
        ANVIL_PREPARE_CHECK(ctx, operand == x, ErrorKind::kInvalidModel, "operand {} has shape {}, not X's {}", s.input,
                            shape_str(operand), shape_str(x));
      else
        ANVIL_PREPARE_CHECK(ctx, !x.empty() && shape_numel(operand) == row_, ErrorKind::kInvalidModel,
                            "operand {} of shape {} is not one value per position of X's last axis ({})", s.input,
                            shape_str(operand), row_);
      has_row_ |= s.step.operand == ChainOperand::kRow;
      reads_x_again_ |= s.input == 0;
    }
    numel_ = shape_numel(x);
    // Rows no longer than a block go whole rows to a block, with each row
    // operand repeated across one block's length in the scratch memory.
    tiled_rows_ = has_row_ && row_ > 0 && row_ <= kBlock;
    block_ = tiled_rows_ ? kBlock / row_ * row_ : kBlock;
    row_steps_ = 0;
    for (const Step& s : steps_) row_steps_ += s.step.operand == ChainOperand::kRow;
    return {TensorType(DType::kFloat32, x)};
  }

  size_t scratch_bytes() const override {
    return tiled_rows_ ? static_cast<size_t>(row_steps_ * block_) * sizeof(float) : 0;
  }

  void run(const RunContext& ctx) const override {
    if (numel_ == 0) return;
    const float* x = ctx.in(0).data<float>();
    float* y = ctx.out(0).data<float>();
    std::array<const float*, kMaxSteps> tiles{};  // run() allocates nothing
    if (tiled_rows_) tile_rows(ctx, tiles);
    // Blocks are whole rows when tiled; otherwise rows longer than a block are
    // split, each block within one row, so a row operand is one slice.
    const int64_t span = has_row_ && !tiled_rows_ ? row_ : numel_;
    const int64_t per_span = (span + block_ - 1) / block_, items = numel_ / span * per_span;
#pragma omp parallel for if (numel_ > 32768)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t begin = item / per_span * span + item % per_span * block_;
      const int64_t n = std::min(block_, span - item % per_span * block_);
      run_block(ctx, tiles, x + begin, y + begin, begin, n);
    }
  }

  // In place only when no step reads X again: it would see values already computed.
  int inplace_input() const override { return reads_x_again_ ? -1 : 0; }
  std::string impl_name() const override { return exact_ ? "ref" : vec::vec_impl_name(); }

 private:
  struct Step {
    ChainStep step;
    int64_t input = 0;  // the node input of a row or full operand
  };
  static constexpr int kMaxSteps = 64;

  void read_program(const PrepareContext& ctx) {
    const std::vector<int64_t> ops = ctx.attrs().get_ints("ops"), operands = ctx.attrs().get_ints("operands"),
                               args = ctx.attrs().get_ints("args");
    const std::vector<float> scalars = ctx.attrs().get_floats("scalars");
    ANVIL_PREPARE_CHECK(ctx, !ops.empty() && ops.size() <= kMaxSteps && operands.size() == ops.size() &&
                                 args.size() == ops.size(),
                        ErrorKind::kInvalidModel, "ops, operands and args must list the same 1 to {} steps", kMaxSteps);
    steps_.clear();
    for (size_t s = 0; s < ops.size(); ++s) {
      ANVIL_PREPARE_CHECK(ctx, ops[s] >= 0 && ops[s] < static_cast<int64_t>(ChainOp::kCount) && operands[s] >= 0 &&
                                   operands[s] < 2 * ir::kChainOperandFirst &&
                                   operands[s] % ir::kChainOperandFirst <= static_cast<int64_t>(ChainOperand::kFull),
                          ErrorKind::kInvalidModel, "step {}: op {} with operand kind {} is not a chain step", s, ops[s],
                          operands[s]);
      Step step{{static_cast<ChainOp>(ops[s]), static_cast<ChainOperand>(operands[s] % ir::kChainOperandFirst),
                 operands[s] >= ir::kChainOperandFirst, 0.f},
                0};
      const bool unary = ir::is_unary(step.step.op);
      ANVIL_PREPARE_CHECK(ctx, unary == (step.step.operand == ChainOperand::kNone), ErrorKind::kInvalidModel,
                          "step {}: a unary op takes no operand, a binary one needs one", s);
      if (step.step.operand == ChainOperand::kScalar) {
        ANVIL_PREPARE_CHECK(ctx, args[s] >= 0 && args[s] < static_cast<int64_t>(scalars.size()),
                            ErrorKind::kInvalidModel, "step {}: scalar {} of {}", s, args[s], scalars.size());
        step.step.scalar = scalars[static_cast<size_t>(args[s])];
      } else if (!unary) {
        ANVIL_PREPARE_CHECK(ctx, args[s] >= 0 && args[s] < static_cast<int64_t>(ctx.num_inputs()),
                            ErrorKind::kInvalidModel, "step {}: input {} of {}", s, args[s], ctx.num_inputs());
        step.input = args[s];
      }
      steps_.push_back(step);
    }
    plain_steps_.clear();
    for (const Step& s : steps_) plain_steps_.push_back(s.step);
  }

  // Each row operand repeated block_ / row_ times, in the scratch memory.
  void tile_rows(const RunContext& ctx, std::array<const float*, kMaxSteps>& tiles) const {
    float* next = static_cast<float*>(ctx.scratch);
    for (size_t s = 0; s < steps_.size(); ++s) {
      if (steps_[s].step.operand != ChainOperand::kRow) continue;
      const float* row = ctx.in(static_cast<size_t>(steps_[s].input)).data<float>();
      for (int64_t r = 0; r < block_; r += row_) std::copy(row, row + row_, next + r);
      tiles[s] = next;
      next += block_;
    }
  }

  void run_block(const RunContext& ctx, const std::array<const float*, kMaxSteps>& tiles, const float* x, float* y,
                 int64_t begin, int64_t n) const {
    const float* operands[kMaxSteps];
    for (size_t s = 0; s < steps_.size(); ++s) {
      const Step& step = steps_[s];
      operands[s] = nullptr;
      if (step.step.operand == ChainOperand::kFull) operands[s] = ctx.in(static_cast<size_t>(step.input)).data<float>() + begin;
      if (step.step.operand == ChainOperand::kRow)
        operands[s] = tiles[s] ? tiles[s] : ctx.in(static_cast<size_t>(step.input)).data<float>() + begin % row_;
    }
    if (!exact_) return vec::vec_kernels().chain_block(plain_steps_.data(), static_cast<int>(plain_steps_.size()), x,
                                                       operands, y, n);
    for (int64_t j = 0; j < n; ++j) {
      float v = x[j];
      for (size_t s = 0; s < steps_.size(); ++s) {
        const ChainStep& st = steps_[s].step;
        const float o = st.operand == ChainOperand::kScalar ? st.scalar : operands[s] ? operands[s][j] : 0.f;
        v = exact_step(st, st.swapped ? o : v, st.swapped ? v : o, v);
      }
      y[j] = v;
    }
  }

  // The reference formulas (those of the ref kernels the ops replace).
  static float exact_step(const ChainStep& st, float a, float b, float v) {
    switch (st.op) {
      case ChainOp::kRelu: return v > 0.f ? v : 0.f;
      case ChainOp::kNeg: return -v;
      case ChainOp::kAbs: return std::fabs(v);
      case ChainOp::kSqrt: return std::sqrt(v);
      case ChainOp::kExp: return std::exp(v);
      case ChainOp::kSigmoid: {
        const float e = std::exp(-std::fabs(v));
        return v > 0.f ? 1.f / (1.f + e) : e / (1.f + e);
      }
      case ChainOp::kAdd: return a + b;
      case ChainOp::kSub: return a - b;
      case ChainOp::kMul: return a * b;
      case ChainOp::kDiv: return a / b;
      case ChainOp::kCount: break;
    }
    return v;
  }

  bool exact_;
  std::vector<Step> steps_;
  std::vector<ChainStep> plain_steps_;
  int64_t row_ = 1, numel_ = 0, block_ = kBlock, row_steps_ = 0;
  bool has_row_ = false, tiled_rows_ = false, reads_x_again_ = false;
};

static Registrar chain_vec("ElementwiseChain", Backend::kVec,
                           [](const ir::Node& n) { return std::make_unique<ElementwiseChainKernel>(n, false); },
                           "anvil", {});
static Registrar chain_ref("ElementwiseChain", Backend::kRef,
                           [](const ir::Node& n) { return std::make_unique<ElementwiseChainKernel>(n, true); },
                           "anvil", {});

}  // namespace
}  // namespace anvil::kernels
