// The constant evaluator handed to the folding pass: runs the reference kernels.
#pragma once

#include "passes/pass.h"

namespace anvil::runtime {

passes::ConstantEvaluator reference_evaluator();

}  // namespace anvil::runtime
