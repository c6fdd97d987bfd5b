// The encoding of anvil.ElementwiseChain's steps, shared by the pass that
// writes them (passes/fuse_elementwise_chain.cc) and the kernels that run
// them (kernels/vec/elementwise_chain.cc). The values are stored in model
// files (`anvil optimize`): append, never renumber.
#pragma once

#include <cstdint>

namespace anvil::ir {

// The running value v becomes op(v), or op(v, operand) (op(operand, v) when swapped).
enum class ChainOp : uint8_t { kRelu, kNeg, kAbs, kSqrt, kExp, kSigmoid, kAdd, kSub, kMul, kDiv, kCount };
// kRow: one value per position of the last axis.
enum class ChainOperand : uint8_t { kNone, kScalar, kRow, kFull };
// Added to an operand kind in the `operands` attribute when the operand comes first.
constexpr int64_t kChainOperandFirst = 4;

struct ChainStep {
  ChainOp op;
  ChainOperand operand;
  bool swapped;
  float scalar;  // kScalar's value
};

// Out of line: this header reaches the per-ISA units (kernels/vec/), where an
// inline function's copies could be merged across ISAs.
bool is_unary(ChainOp op);

}  // namespace anvil::ir
