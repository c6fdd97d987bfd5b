// Schemas of the ai.onnx.preview.training optimizers (Adagrad, Momentum,
// Adam): after R and T come n tensors, their gradients and their states; the
// outputs are the n updated tensors, then the updated states, in the types of
// the inputs they replace.
#include "ir/schemas/common.h"

namespace anvil::ir::schemas {

namespace {

constexpr const char* kTraining = "ai.onnx.preview.training";

InferFn optimizer_outputs(size_t states) {
  return [states](InferContext& ctx) {
    const size_t per = 2 + states, inputs = ctx.node().inputs.size();
    if (inputs < 2 + per || (inputs - 2) % per != 0)
      ctx.fail("expects R, T and {} inputs per optimized tensor, got {} inputs", per, inputs);
    const size_t n = (inputs - 2) / per;
    for (size_t o = 0; o < ctx.num_outputs(); ++o) {
      const size_t group = o / n, i = o % n;  // 0: the tensors, then each state
      copy_type(ctx, 2 + (group == 0 ? i : (group + 1) * n + i), o);
    }
  };
}

struct Registrations {
  Registrations() {
    auto& r = SchemaRegistry::global();
    r.add(OpSchema("Adagrad", kTraining).infer(optimizer_outputs(1)));
    r.add(OpSchema("Momentum", kTraining).required_attr("alpha").required_attr("beta").required_attr("mode")
              .required_attr("norm_coefficient").infer(optimizer_outputs(1)));
    r.add(OpSchema("Adam", kTraining).infer(optimizer_outputs(2)));
  }
};
const Registrations registrations;

}  // namespace

}  // namespace anvil::ir::schemas
