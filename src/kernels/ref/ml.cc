// Ops of the ai.onnx.ml domain (classic machine learning pipelines):
// LabelEncoder (a lookup table from keys to values, any of strings, integers
// and floats), ArrayFeatureExtractor (columns of the last axis), Binarizer,
// and TreeEnsemble (ml opset 5: decision trees whose leaves add weights to
// targets, aggregated by sum, average, min or max).
#include <algorithm>
#include <cmath>
#include <limits>
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
      for (int64_t r = 0; r < rows; ++r) {
        if (x.dtype() == DType::kString)  // objects, not bytes
          ctx.out(0).data<std::string>()[r * picks + k] = x.data<std::string>()[r * width + c];
        else
          std::memcpy(dst + static_cast<size_t>(r * picks + k) * elem, src + static_cast<size_t>(r * width + c) * elem, elem);
      }
    }
  }
};

class TreeEnsembleKernel : public Kernel {
 public:
  explicit TreeEnsembleKernel(const ir::Node& node) : attrs_(node.attrs) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);
    ANVIL_PREPARE_CHECK(ctx, x.size() == 2, ErrorKind::kInvalidArgument, "X {} must be [N, features]", shape_str(x));
    features_ = x[1];
    targets_ = attrs_.get_int("n_targets", 0);
    aggregate_ = attrs_.get_int("aggregate_function", 1);
    transform_ = attrs_.get_int("post_transform", 0);
    ANVIL_PREPARE_CHECK(ctx, targets_ > 0 && targets_ < (int64_t{1} << 24), ErrorKind::kInvalidModel,
                        "n_targets {} must be positive", targets_);
    ANVIL_PREPARE_CHECK(ctx, aggregate_ >= 0 && aggregate_ <= 3, ErrorKind::kInvalidModel,
                        "aggregate_function {} is not 0 to 3", aggregate_);
    ANVIL_PREPARE_CHECK(ctx, transform_ >= 0 && transform_ <= 4, ErrorKind::kInvalidModel,
                        "post_transform {} is not 0 to 4", transform_);
    ANVIL_PREPARE_CHECK(ctx, transform_ != 4, ErrorKind::kUnsupported, "post_transform PROBIT is not supported");
    load_nodes(ctx);
    return {{ctx.input_dtype(0), {x[0], targets_}}};
  }

  void run(const RunContext& ctx) const override {
    const std::vector<float> x = tensor_to_floats(ctx.in(0));
    const int64_t rows = ctx.in(0).shape()[0];
    std::vector<float> y(static_cast<size_t>(rows * targets_));
    const float start = aggregate_ == 2 ? std::numeric_limits<float>::max()
                        : aggregate_ == 3 ? std::numeric_limits<float>::lowest() : 0.f;
    for (int64_t r = 0; r < rows; ++r) {
      float* out = y.data() + r * targets_;
      std::fill(out, out + targets_, start);
      for (const Branch& root : roots_) {
        const int64_t leaf = find_leaf(root, x.data() + r * features_);
        const auto t = static_cast<size_t>(leaf_targets_[static_cast<size_t>(leaf)]);
        const float w = leaf_weights_[static_cast<size_t>(leaf)];
        switch (aggregate_) {
          case 0: out[t] += w / static_cast<float>(roots_.size()); break;
          case 2: out[t] = std::min(out[t], w); break;
          case 3: out[t] = std::max(out[t], w); break;
          default: out[t] += w; break;
        }
      }
      post_transform(out);
    }
    floats_to_tensor(y, ctx.out(0));
  }

 private:
  struct Branch {
    int64_t index;  // a node, or a leaf when `leaf`
    bool leaf;
  };

  std::vector<float> floats(const char* name) const {
    const Tensor* t = attrs_.get_tensor(name);
    return t ? tensor_to_floats(*t) : std::vector<float>{};
  }

  void load_nodes(const PrepareContext& ctx) {
    splits_ = floats("nodes_splits");
    leaf_weights_ = floats("leaf_weights");
    const Tensor* modes = attrs_.get_tensor("nodes_modes");
    ANVIL_PREPARE_CHECK(ctx, modes && modes->dtype() == DType::kUInt8, ErrorKind::kInvalidModel,
                        "nodes_modes must be a uint8 tensor");
    modes_.assign(static_cast<const uint8_t*>(modes->raw()), static_cast<const uint8_t*>(modes->raw()) + modes->numel());
    features_of_ = attrs_.get_ints("nodes_featureids");
    true_ = attrs_.get_ints("nodes_truenodeids");
    false_ = attrs_.get_ints("nodes_falsenodeids");
    true_leaf_ = attrs_.get_ints("nodes_trueleafs");
    false_leaf_ = attrs_.get_ints("nodes_falseleafs");
    missing_true_ = attrs_.get_ints("nodes_missing_value_tracks_true", std::vector<int64_t>(modes_.size(), 0));
    leaf_targets_ = attrs_.get_ints("leaf_targetids");
    const size_t nodes = modes_.size(), leaves = leaf_weights_.size();
    for (const auto* v : {&features_of_, &true_, &false_, &true_leaf_, &false_leaf_, &missing_true_})
      ANVIL_PREPARE_CHECK(ctx, v->size() == nodes, ErrorKind::kInvalidModel, "the node attributes differ in length");
    ANVIL_PREPARE_CHECK(ctx, splits_.size() == nodes && leaf_targets_.size() == leaves, ErrorKind::kInvalidModel,
                        "nodes_splits or leaf_targetids do not match the nodes and leaves");
    for (size_t i = 0; i < nodes; ++i) {
      ANVIL_PREPARE_CHECK(ctx, modes_[i] <= 6 && features_of_[i] >= 0 && features_of_[i] < features_,
                          ErrorKind::kInvalidModel, "node {} has mode {} and feature {} of {}", i, modes_[i],
                          features_of_[i], features_);
      for (const auto& [id, leaf] : {std::pair{true_[i], true_leaf_[i]}, std::pair{false_[i], false_leaf_[i]}})
        ANVIL_PREPARE_CHECK(ctx, id >= 0 && id < static_cast<int64_t>(leaf ? leaves : nodes), ErrorKind::kInvalidModel,
                            "node {} points at {} {}, which does not exist", i, leaf ? "leaf" : "node", id);
    }
    for (size_t l = 0; l < leaves; ++l)
      ANVIL_PREPARE_CHECK(ctx, leaf_targets_[l] >= 0 && leaf_targets_[l] < targets_, ErrorKind::kInvalidModel,
                          "leaf {} targets {} of {}", l, leaf_targets_[l], targets_);
    // MEMBER nodes take their sets from membership_values in node order, each ended by a NaN.
    members_.assign(nodes, {});
    const std::vector<float> values = floats("membership_values");
    size_t at = 0;
    for (size_t i = 0; i < nodes; ++i) {
      if (modes_[i] != 6) continue;
      while (at < values.size() && !std::isnan(values[at])) members_[i].push_back(values[at++]);
      ANVIL_PREPARE_CHECK(ctx, at < values.size(), ErrorKind::kInvalidModel, "membership_values ends before node {}'s set", i);
      ++at;
    }
    roots_.clear();
    for (int64_t r : attrs_.get_ints("tree_roots")) {
      ANVIL_PREPARE_CHECK(ctx, r >= 0 && r < static_cast<int64_t>(nodes), ErrorKind::kInvalidModel,
                          "tree root {} does not exist", r);
      const auto i = static_cast<size_t>(r);
      const bool leaf = true_leaf_[i] && false_leaf_[i] && true_[i] == false_[i];
      roots_.push_back({leaf ? true_[i] : r, leaf});
    }
    ANVIL_PREPARE_CHECK(ctx, !roots_.empty(), ErrorKind::kInvalidModel, "the ensemble has no trees");
  }

  bool goes_true(size_t node, float v) const {
    if (std::isnan(v) && missing_true_[node]) return true;
    const float s = splits_[node];
    switch (modes_[node]) {
      case 0: return v <= s;
      case 1: return v < s;
      case 2: return v >= s;
      case 3: return v > s;
      case 4: return v == s;
      case 5: return v != s;
      default: return std::find(members_[node].begin(), members_[node].end(), v) != members_[node].end();
    }
  }

  // The leaf a row reaches; a walk longer than the node count is a cycle (an invalid model).
  int64_t find_leaf(Branch b, const float* row) const {
    for (size_t steps = 0; !b.leaf; ++steps) {
      ANVIL_CHECK(steps <= modes_.size(), ErrorKind::kInvalidModel, "TreeEnsemble: the trees have a cycle");
      const auto n = static_cast<size_t>(b.index);
      const bool t = goes_true(n, row[features_of_[n]]);
      b = {t ? true_[n] : false_[n], (t ? true_leaf_[n] : false_leaf_[n]) != 0};
    }
    return b.index;
  }

  void post_transform(float* out) const {
    if (transform_ == 2) {
      for (int64_t t = 0; t < targets_; ++t) out[t] = 1.f / (1.f + std::exp(-out[t]));
    } else if (transform_ == 1 || transform_ == 3) {  // SOFTMAX; SOFTMAX_ZERO keeps zeros at zero
      const float top = *std::max_element(out, out + targets_);
      float sum = 0;
      for (int64_t t = 0; t < targets_; ++t) {
        out[t] = transform_ == 3 && out[t] == 0.f ? 0.f : std::exp(out[t] - top);
        sum += out[t];
      }
      for (int64_t t = 0; t < targets_ && sum > 0; ++t) out[t] /= sum;
    }
  }

  ir::Attributes attrs_;
  int64_t features_ = 0, targets_ = 0, aggregate_ = 1, transform_ = 0;
  std::vector<float> splits_, leaf_weights_;
  std::vector<uint8_t> modes_;
  std::vector<int64_t> features_of_, true_, false_, true_leaf_, false_leaf_, missing_true_, leaf_targets_;
  std::vector<std::vector<float>> members_;
  std::vector<Branch> roots_;
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
const Registrar tree_ensemble("TreeEnsemble", Backend::kRef, factory_of<TreeEnsembleKernel>(), kMl,
                              InputTypes{{kFloats | kHalfs}});
const Registrar binarizer("Binarizer", Backend::kRef, factory_of<BinarizerKernel>(), kMl,
                           InputTypes{{kFloats | kSignedInts}});

}  // namespace
}  // namespace anvil::kernels
