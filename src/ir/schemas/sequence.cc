// Schemas of the sequence and optional ops: their outputs are sequences of
// tensors, optionals, or tensors whose shapes are known only at run time.
#include "ir/schemas/common.h"

namespace anvil::ir::schemas {

namespace {

// The element dtype of a sequence input, or of a tensor input.
DType element_dtype(const InferContext& ctx, size_t i) {
  const Type& t = ctx.input(i);
  if (t.kind() == TypeKind::kSequence || t.kind() == TypeKind::kOptional) return t.element().dtype();
  return t.dtype();
}

void sequence_of_input(InferContext& ctx, size_t i) {
  ctx.set_output(0, Type::sequence(Type::tensor(element_dtype(ctx, i))));
}

struct Registrations {
  Registrations() {
    auto& r = SchemaRegistry::global();
    r.add(OpSchema("SequenceEmpty").attr("dtype", int64_t{1}).infer([](InferContext& ctx) {
      ctx.set_output(0, Type::sequence(Type::tensor(dtype_from_onnx_code(ctx.attr_int("dtype")))));
    }));
    for (const char* op : {"SequenceConstruct", "SequenceInsert", "SequenceErase", "SplitToSequence"})
      r.add(OpSchema(op).infer([](InferContext& ctx) { sequence_of_input(ctx, 0); }));
    r.add(OpSchema("SequenceAt").infer([](InferContext& ctx) { ctx.set_output(0, Type::tensor(element_dtype(ctx, 0))); }));
    r.add(OpSchema("SequenceLength").infer([](InferContext& ctx) {
      ctx.set_output(0, Type::tensor(DType::kInt64, SymShape{}));
    }));
    r.add(OpSchema("ConcatFromSequence").required_attr("axis").attr("new_axis", int64_t{0}).infer([](InferContext& ctx) {
      ctx.set_output(0, Type::tensor(element_dtype(ctx, 0)));
    }));
    r.add(OpSchema("OptionalHasElement").infer([](InferContext& ctx) {
      ctx.set_output(0, Type::tensor(DType::kBool, SymShape{}));
    }));
    r.add(OpSchema("OptionalGetElement").infer([](InferContext& ctx) {
      if (!ctx.has_input(0)) return;
      const Type& t = ctx.input(0);
      ctx.set_output(0, t.kind() == TypeKind::kOptional ? t.element() : t);
    }));
    // SequenceMap: a sequence of each body output's type.
    r.add(OpSchema("SequenceMap").infer([](InferContext& ctx) {
      const Graph* body = ctx.node().attrs.get_graph("body");
      if (!body) ctx.fail("SequenceMap needs a body");
      if (body->outputs().size() != ctx.num_outputs())
        ctx.fail("the body has {} outputs for the node's {}", body->outputs().size(), ctx.num_outputs());
      for (size_t o = 0; o < ctx.num_outputs(); ++o) {
        const Type& t = body->outputs()[o]->type;
        ctx.set_output(o, Type::sequence(t.is_tensor() ? Type::tensor(t.dtype()) : Type()));
      }
    }));
    r.add(OpSchema("Optional").infer([](InferContext& ctx) {
      if (ctx.has_input(0)) return ctx.set_output(0, Type::optional(ctx.input(0)));
      const Type* type = ctx.node().attrs.get_type("type");
      if (!type) ctx.fail("Optional needs an input or a 'type' attribute");
      ctx.set_output(0, Type::optional(*type));
    }));
  }
};
const Registrations registrations;

}  // namespace

}  // namespace anvil::ir::schemas
