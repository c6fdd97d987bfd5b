// Ops of the ai.onnx.ml domain (classic machine learning pipelines):
// LabelEncoder (a lookup table from keys to values, any of strings, integers
// and floats), ArrayFeatureExtractor (columns of the last axis) and Binarizer.
#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include <fmt/format.h>

#include "kernels/ref/arith.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

constexpr const char* kMl = "ai.onnx.ml";

// A key as text: strings as they are, numbers printed (-0 as 0, NaNs alike).
std::string key_of(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::kString) return t.data<std::string>()[i];
  double v = element_as_double(t, i);
  if (v == 0) v = 0;  // -0 matches 0
  return std::isnan(v) ? "nan" : fmt::format("{}", v);
}

// A 1-D tensor from an attribute list.
template <typename T>
Tensor list_tensor(DType dtype, const std::vector<T>& v) {
  Tensor t(dtype, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<T>()[i] = v[i];
  return t;
}

class LabelEncoderKernel : public Kernel {
 public:
  explicit LabelEncoderKernel(const ir::Node& node) : attrs_(node.attrs) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Tensor keys = pick(ctx, "keys"), values = pick(ctx, "values");
    ANVIL_PREPARE_CHECK(ctx, keys.numel() == values.numel(), ErrorKind::kInvalidModel, "{} keys for {} values",
                        keys.numel(), values.numel());
    values_ = values;
    table_.clear();
    for (int64_t i = 0; i < keys.numel(); ++i) table_.emplace(key_of(keys, i), i);
    default_ = default_value(ctx, values.dtype());
    ANVIL_PREPARE_CHECK(ctx, ctx.output_type(0).dtype == values.dtype(), ErrorKind::kInternal, "output type mismatch");
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.out(0);
    const size_t elem = dtype_size(y.dtype());
    for (int64_t i = 0; i < x.numel(); ++i) {
      const auto it = table_.find(key_of(x, i));
      const Tensor& from = it == table_.end() ? default_ : values_;
      const int64_t at = it == table_.end() ? 0 : it->second;
      if (y.dtype() == DType::kString) y.data<std::string>()[i] = from.data<std::string>()[at];
      else std::memcpy(static_cast<char*>(y.raw()) + static_cast<size_t>(i) * elem,
                       static_cast<const char*>(from.raw()) + static_cast<size_t>(at) * elem, elem);
    }
  }

 private:
  // keys_* / values_*: the one list (or tensor) the node has.
  Tensor pick(const PrepareContext& ctx, const std::string& what) const {
    std::vector<Tensor> found;
    if (attrs_.has(what + "_strings")) found.push_back(list_tensor(DType::kString, attrs_.get_strings(what + "_strings")));
    if (attrs_.has(what + "_int64s")) found.push_back(list_tensor(DType::kInt64, attrs_.get_ints(what + "_int64s")));
    if (attrs_.has(what + "_floats")) found.push_back(list_tensor(DType::kFloat32, attrs_.get_floats(what + "_floats")));
    if (const Tensor* t = attrs_.get_tensor(what + "_tensor")) found.push_back(*t);
    ANVIL_PREPARE_CHECK(ctx, found.size() == 1, ErrorKind::kInvalidModel,
                        "needs exactly one of {0}_strings, {0}_int64s, {0}_floats and {0}_tensor", what);
    return found[0];
  }

  Tensor default_value(const PrepareContext& ctx, DType dtype) const {
    if (const Tensor* t = attrs_.get_tensor("default_tensor")) {
      ANVIL_PREPARE_CHECK(ctx, t->dtype() == dtype && t->numel() == 1, ErrorKind::kInvalidModel,
                          "default_tensor must be one {} value", dtype_name(dtype));
      return *t;
    }
    switch (dtype) {
      case DType::kString: return list_tensor(DType::kString, std::vector<std::string>{attrs_.get_string("default_string", "_Unused")});
      case DType::kInt64: return list_tensor(DType::kInt64, std::vector<int64_t>{attrs_.get_int("default_int64", -1)});
      case DType::kFloat32: return list_tensor(DType::kFloat32, std::vector<float>{attrs_.get_float("default_float", -0.f)});
      default: break;
    }
    ANVIL_PREPARE_CHECK(ctx, false, ErrorKind::kInvalidModel, "values of type {} need a default_tensor", dtype_name(dtype));
    return {};
  }

  ir::Attributes attrs_;
  Tensor values_, default_;
  std::map<std::string, int64_t> table_;
};

// ArrayFeatureExtractor: data[..., indices] with the indices flattened; a 1-D input gives one row.
class ArrayFeatureExtractorKernel : public Kernel {
 public:
  explicit ArrayFeatureExtractorKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);
    ANVIL_PREPARE_CHECK(ctx, !x.empty(), ErrorKind::kInvalidArgument, "the input must have rank >= 1");
    const int64_t picks = shape_numel(ctx.input_shape(1));
    Shape y = x.size() == 1 ? Shape{1, picks} : x;
    y.back() = picks;
    return {{ctx.input_dtype(0), y}};
  }
  void run(const RunContext& ctx) const override {
    const Tensor &x = ctx.in(0), &idx = ctx.in(1);
    const int64_t width = x.shape().back(), rows = width ? x.numel() / width : 0, picks = idx.numel();
    const size_t elem = dtype_size(x.dtype());
    const auto* src = static_cast<const char*>(x.raw());
    auto* dst = static_cast<char*>(ctx.out(0).raw());
    for (int64_t k = 0; k < picks; ++k) {
      const int64_t c = idx.data<int64_t>()[k];
      ANVIL_CHECK(c >= 0 && c < width, ErrorKind::kInvalidArgument,
                  "ArrayFeatureExtractor: index {} is outside the last axis of {}", c, width);
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(dst + static_cast<size_t>(r * picks + k) * elem, src + static_cast<size_t>(r * width + c) * elem, elem);
    }
  }
};

class BinarizerKernel : public Kernel {
 public:
  explicit BinarizerKernel(const ir::Node& node) : threshold_(node.attrs.get_float("threshold", 0.f)) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override { return ctx.output_types(); }
  void run(const RunContext& ctx) const override {
    dispatch_dtype(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (kPlainNumber<T>) {
        const T* x = ctx.in(0).data<T>();
        T* y = ctx.out(0).data<T>();
        for (int64_t i = 0; i < ctx.in(0).numel(); ++i) y[i] = static_cast<double>(x[i]) > threshold_ ? T(1) : T(0);
      }
    });
  }

 private:
  double threshold_;
};

const Registrar label_encoder("LabelEncoder", Backend::kRef, factory_of<LabelEncoderKernel>(), kMl,
                               InputTypes{{kStringType | kNumeric}});
const Registrar array_feature_extractor("ArrayFeatureExtractor", Backend::kRef,
                                         factory_of<ArrayFeatureExtractorKernel>(), kMl,
                                         InputTypes{{kNumeric | kStringType, dtype_bit(DType::kInt64)}});
const Registrar binarizer("Binarizer", Backend::kRef, factory_of<BinarizerKernel>(), kMl,
                           InputTypes{{kFloats | kSignedInts}});

}  // namespace
}  // namespace anvil::kernels
