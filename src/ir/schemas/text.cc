// Schemas of the text ops: StringNormalizer, StringSplit, StringConcat,
// RegexFullMatch and TfIdfVectorizer.
#include "ir/dim_math.h"
#include "ir/schemas/common.h"

namespace anvil::ir::schemas {

namespace {

// StringConcat: numpy broadcasting of two string tensors.
void infer_string_concat(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(DType::kString));
  const Type &a = ctx.input(0), &b = ctx.input(1);
  if (!a.has_shape() || !b.has_shape()) return;
  const SymShape &x = a.dims(), &y = b.dims();
  SymShape out(std::max(x.size(), y.size()), Dim::known(1));
  for (size_t i = 0; i < out.size(); ++i) {
    const Dim dx = i < out.size() - x.size() ? Dim::known(1) : x[i - (out.size() - x.size())];
    const Dim dy = i < out.size() - y.size() ? Dim::known(1) : y[i - (out.size() - y.size())];
    if (dx.is_known() && dy.is_known() && dx != dy && dx.value != 1 && dy.value != 1)
      ctx.fail_input("{} and {} do not broadcast", dims_str(x), dims_str(y));
    out[i] = dx.is_known() && dx.value == 1 ? dy : dx;
  }
  ctx.set_output(0, Type::tensor(DType::kString, out));
}

// TfIdfVectorizer: float32 [output size] or [B, output size].
void infer_tfidf(InferContext& ctx) {
  int64_t size = 0;
  for (int64_t v : ctx.attr_ints("ngram_indexes")) size = std::max(size, v + 1);
  const Type& x = ctx.input(0);
  if (!x.has_shape()) return ctx.set_output(0, Type::tensor(DType::kFloat32));
  const SymShape& d = x.dims();
  if (d.size() > 2) ctx.fail_input("the input {} must be [C] or [B, C]", dims_str(d));
  ctx.set_output(0, Type::tensor(DType::kFloat32, d.size() == 2 ? SymShape{d[0], Dim::known(size)}
                                                                : SymShape{Dim::known(size)}));
}

struct Registrations {
  Registrations() {
    auto& r = SchemaRegistry::global();
    // StringNormalizer drops stopwords: the kept count is known at run time.
    r.add(OpSchema("StringNormalizer").inputs({kStringType}).infer([](InferContext& ctx) {
      const Type& x = ctx.input(0);
      if (!x.has_shape()) return ctx.set_output(0, Type::tensor(DType::kString));
      SymShape d = x.dims();
      if (d.size() != 1 && d.size() != 2) ctx.fail_input("the input {} must be [C] or [1, C]", dims_str(d));
      d.back() = Dim::unknown();
      ctx.set_output(0, Type::tensor(DType::kString, d));
    }));
    // StringSplit: Y [X..., the most parts], Z [X...] (int64 part counts).
    r.add(OpSchema("StringSplit").inputs({kStringType}).infer([](InferContext& ctx) {
      const Type& x = ctx.input(0);
      if (!x.has_shape()) {
        ctx.set_output(0, Type::tensor(DType::kString));
        return ctx.set_output(1, Type::tensor(DType::kInt64));
      }
      SymShape y = x.dims();
      y.push_back(Dim::unknown());
      ctx.set_output(0, Type::tensor(DType::kString, y));
      ctx.set_output(1, Type::tensor(DType::kInt64, x.dims()));
    }));
    r.add(OpSchema("StringConcat").inputs({kStringType, kStringType}).infer(infer_string_concat));
    r.add(OpSchema("RegexFullMatch").inputs({kStringType}).required_attr("pattern").infer([](InferContext& ctx) {
      const Type& x = ctx.input(0);
      ctx.set_output(0, x.has_shape() ? Type::tensor(DType::kBool, x.dims()) : Type::tensor(DType::kBool));
    }));
    r.add(OpSchema("TfIdfVectorizer")
              .inputs({kStringType | dtype_bit(DType::kInt32) | dtype_bit(DType::kInt64)})
              .required_attr("mode")
              .required_attr("ngram_counts")
              .required_attr("ngram_indexes")
              .infer(infer_tfidf));
  }
};
const Registrations registrations;

}  // namespace

}  // namespace anvil::ir::schemas
