#include "ir/elementwise_chain.h"

namespace anvil::ir {

bool is_unary(ChainOp op) { return op <= ChainOp::kSigmoid; }

}  // namespace anvil::ir
