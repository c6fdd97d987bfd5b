#include "passes/match.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace anvil::passes {

bool is_op(const ir::Node* n, const char* op) { return n && !n->dead && n->domain.empty() && n->op_type == op; }

bool is_anvil_op(const ir::Node* n, const char* op) { return n && !n->dead && n->domain == "anvil" && n->op_type == op; }

bool is_convolution(const ir::Node* n) { return is_op(n, "Conv") || is_anvil_op(n, "FusedConv"); }

std::vector<int64_t> transpose_permutation(const ir::Node& t, size_t rank) {
  std::vector<int64_t> perm = t.attrs.get_ints("perm");
  if (perm.empty()) {
    perm.resize(rank);
    std::iota(perm.rbegin(), perm.rend(), int64_t{0});
  }
  if (perm.size() != rank) return {};
  std::vector<bool> seen(rank, false);
  for (int64_t axis : perm) {
    if (axis < 0 || axis >= static_cast<int64_t>(rank) || seen[static_cast<size_t>(axis)]) return {};  // the schema reports it
    seen[static_cast<size_t>(axis)] = true;
  }
  return perm;
}

ir::Node* producer_op(const ir::Value* v, const char* op) {
  return v && is_op(v->producer, op) ? v->producer : nullptr;
}

std::optional<double> scalar_value(const ir::Value* v) {
  // Rank <= 1: a one-element tensor of higher rank would raise its operand's rank by broadcasting.
  if (!v || !v->is_constant() || v->constant->numel() != 1 || v->constant->rank() > 1) return std::nullopt;
  if (v->constant->dtype() == DType::kFloat32) return *v->constant->data<float>();
  if (v->constant->dtype() == DType::kFloat64) return *v->constant->data<double>();
  return std::nullopt;
}

bool is_scalar(const ir::Value* v, double expected, double rel_tol) {
  std::optional<double> x = scalar_value(v);
  return x && std::fabs(*x - expected) <= rel_tol * std::fabs(expected);
}

ir::Value* other_operand(const ir::Node& n, const ir::Value* v) {
  if (n.num_inputs() != 2) return nullptr;
  if (n.input(0) == v) return n.input(1);
  if (n.input(1) == v) return n.input(0);
  return nullptr;
}

bool is_float_constant(const ir::Value* v) { return v && v->is_constant() && v->constant->dtype() == DType::kFloat32; }

bool is_float32_matrix(const ir::Value* v) {
  return v && v->dtype() == DType::kFloat32 && v->type.has_shape() && v->type.rank() == 2;
}

bool is_float_vector(const ir::Value* v, int64_t n) {
  return is_float_constant(v) && v->constant->rank() == 1 && v->constant->numel() == n;
}

namespace {

// A Clip bound (opset 11+: an optional constant input); false when not constant.
bool clip_bound(const ir::Value* v, float fallback, float* out) {
  if (!v) {
    *out = fallback;
    return true;
  }
  std::optional<double> x = scalar_value(v);
  if (!x || v->constant->dtype() != DType::kFloat32) return false;
  *out = static_cast<float>(*x);
  return true;
}

}  // namespace

std::optional<FusedActivation> fusable_activation(const ir::Node& act) {
  if (act.dead || !act.domain.empty()) return std::nullopt;
  const std::string& op = act.op_type;
  FusedActivation f{op};
  if (op == "Relu" || op == "Sigmoid" || op == "Tanh" || op == "HardSwish") return f;
  if (op == "LeakyRelu") f.alpha = act.attrs.get_float("alpha", 0.01f);
  else if (op == "Elu") f.alpha = act.attrs.get_float("alpha", 1.0f);
  else if (op == "HardSigmoid") {
    f.alpha = act.attrs.get_float("alpha", 0.2f);
    f.beta = act.attrs.get_float("beta", 0.5f);
  } else if (op == "Swish") {
    f.alpha = act.attrs.get_float("alpha", 1.f);
  } else if (op == "Gelu") {
    const std::string approximate = act.attrs.get_string("approximate", "none");
    if (approximate != "none" && approximate != "tanh") return std::nullopt;
    if (approximate == "tanh") f.name = "GeluTanh";
  } else if (op == "Clip") {
    constexpr float lowest = std::numeric_limits<float>::lowest(), highest = std::numeric_limits<float>::max();
    if (act.opset < 11) {
      f.alpha = act.attrs.get_float("min", lowest);
      f.beta = act.attrs.get_float("max", highest);
    } else if (!clip_bound(act.input(1), lowest, &f.alpha) || !clip_bound(act.input(2), highest, &f.beta)) {
      return std::nullopt;
    }
    if (!(f.alpha <= f.beta)) return std::nullopt;  // min > max or NaN: Clip's own kernel gives ONNX's answer
  } else {
    return std::nullopt;
  }
  return f;
}

void set_activation(ir::Node& fused, const FusedActivation& act) {
  fused.attrs.set("activation", act.name);
  fused.attrs.set("activation_alpha", act.alpha);
  fused.attrs.set("activation_beta", act.beta);
}

bool all_equal_to(const std::vector<int64_t>& values, int64_t v) {
  return std::all_of(values.begin(), values.end(), [v](int64_t x) { return x == v; });
}

bool is_plain_2d_conv(const ir::Node& conv, int64_t kernel) {
  if (!is_convolution(&conv)) return false;
  const ir::Value* w = conv.input(1);
  if (!is_float_constant(w) || w->constant->shape().size() != 4) return false;
  const Shape& ws = w->constant->shape();
  if (ws[2] != kernel || ws[3] != kernel || conv.input(3)) return false;
  if (conv.input(2) && !is_float_constant(conv.input(2))) return false;
  const std::string auto_pad = conv.attrs.get_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && !(auto_pad == "VALID" && kernel == 1)) return false;
  const std::vector<int64_t> kernel_shape = conv.attrs.get_ints("kernel_shape");
  return (kernel_shape.empty() || kernel_shape == std::vector<int64_t>{kernel, kernel}) &&
         all_equal_to(conv.attrs.get_ints("dilations"), 1);
}

bool is_unit_conv(const ir::Node& conv) {
  return is_plain_2d_conv(conv, 1) && conv.attrs.get_int("group", 1) == 1 &&
         all_equal_to(conv.attrs.get_ints("strides"), 1) && all_equal_to(conv.attrs.get_ints("pads"), 0);
}

FusedActivation activation_of(const ir::Node& fused) {
  return {fused.attrs.get_string("activation", ""), fused.attrs.get_float("activation_alpha", 0.f),
          fused.attrs.get_float("activation_beta", 0.f)};
}

ir::Value* int64_constant(ir::Graph& graph, const std::string& name, const std::vector<int64_t>& values) {
  Tensor t(DType::kInt64, {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return graph.add_constant(graph.unique_name(name), std::move(t));
}

ir::Value* float_constant(ir::Graph& graph, const std::string& name, const std::vector<float>& values) {
  Tensor t(DType::kFloat32, {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data<float>());
  return graph.add_constant(graph.unique_name(name), std::move(t));
}

ir::Node* add_attention(ir::Graph& graph, std::vector<ir::Value*> inputs, ir::Value* y, const std::string& name,
                        int64_t heads, double scale) {
  ir::Node* att = graph.add_node_with_outputs("Attention", std::move(inputs), {y}, name);
  att->opset = 23;
  att->attrs.set("q_num_heads", heads);
  att->attrs.set("kv_num_heads", heads);
  att->attrs.set("scale", static_cast<float>(scale));
  return att;
}

void absorb(ir::Node& fused, ir::Node& next, size_t index) {
  ir::Value* y = next.output(0);
  if (fused.outputs.size() <= index) fused.outputs.resize(index + 1, nullptr);
  fused.outputs[index] = y;
  y->producer = &fused;
  next.dead = true;
}

std::optional<std::vector<int64_t>> reduce_axes(const ir::Node& n) {
  if (n.opset < 18) return n.attrs.get_ints("axes");
  const ir::Value* axes = n.input(1);
  if (!axes) return std::vector<int64_t>{};
  if (!axes->is_constant()) return std::nullopt;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < axes->constant->numel(); ++i)
    out.push_back(static_cast<int64_t>(element_as_double(*axes->constant, i)));
  return out;
}

std::optional<int64_t> trailing_axis(const ir::Node& mean, int rank) {
  if (mean.attrs.get_int("keepdims", 1) != 1) return std::nullopt;
  std::optional<std::vector<int64_t>> axes = reduce_axes(mean);
  if (!axes || axes->empty()) return std::nullopt;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t a : *axes) {
    const int64_t p = a < 0 ? a + rank : a;
    if (p < 0 || p >= rank || seen[static_cast<size_t>(p)]) return std::nullopt;
    seen[static_cast<size_t>(p)] = true;
  }
  const int64_t first = rank - static_cast<int64_t>(axes->size());
  for (int64_t i = first; i < rank; ++i)
    if (!seen[static_cast<size_t>(i)]) return std::nullopt;
  return first;
}

bool per_element(const ir::Value* v, const ir::SymShape& x, int64_t axis, int64_t size) {
  if (!is_float_constant(v) || v->constant->numel() != size) return false;
  const Shape& s = v->constant->shape();
  const size_t normalized = x.size() - static_cast<size_t>(axis);
  if (s.size() > x.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const size_t from_end = s.size() - i;  // 1 for the last dim
    const int64_t want = from_end <= normalized ? x[x.size() - from_end].value : 1;
    if (s[i] != want) return false;
  }
  return true;
}

ir::Value* ones_constant(ir::Graph& graph, int64_t size, const std::string& base) {
  Tensor ones(DType::kFloat32, {size});
  for (int64_t i = 0; i < size; ++i) ones.data<float>()[i] = 1.f;
  return graph.add_constant(graph.unique_name(base), std::move(ones));
}

std::optional<std::vector<int64_t>> constant_pads(const ir::Node& pad) {
  const ir::Value* x = pad.input(0);
  const std::string mode = pad.attrs.get_string("mode", "constant");
  if (!x || !x->type.has_shape() || pad.input(3) ||
      (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap"))
    return std::nullopt;
  std::vector<int64_t> pads;
  if (pad.opset < 11) {
    pads = pad.attrs.get_ints("pads");
  } else {
    const ir::Value* p = pad.input(1);
    if (!p || !p->is_constant() || p->constant->dtype() != DType::kInt64) return std::nullopt;
    pads.assign(p->constant->data<int64_t>(), p->constant->data<int64_t>() + p->constant->numel());
  }
  if (pads.size() != 2 * static_cast<size_t>(x->type.rank())) return std::nullopt;
  return pads;
}

bool surely_same_dim(const ir::Dim& a, const ir::Dim& b) { return (a.is_known() || a.is_symbol()) && a == b; }

bool surely_has_dims(const ir::Type& t, const ir::SymShape& dims) {
  if (!t.has_shape() || t.rank() != static_cast<int>(dims.size())) return false;
  for (size_t i = 0; i < dims.size(); ++i)
    if (!surely_same_dim(t.dims()[i], dims[i])) return false;
  return true;
}

bool fits_attention_mask(const ir::Type& mask, const ir::Type& scores) {
  if (!mask.has_shape() || !scores.has_shape() || scores.rank() != 4 || mask.rank() < 1 || mask.rank() > 4) return false;
  if (!surely_same_dim(mask.dims().back(), scores.dims()[3])) return false;
  const size_t skip = static_cast<size_t>(4 - mask.rank());
  for (size_t i = 0; i + 1 < mask.dims().size(); ++i) {
    const ir::Dim &m = mask.dims()[i], &s = scores.dims()[skip + i];
    // A scores dim known above 1 leaves the mask's 1 or the same (else the
    // Add would not broadcast); one that may be 1 could take the mask's size.
    const bool fits = m == ir::Dim::known(1) || surely_same_dim(m, s) || (s.is_known() && s.value > 1);
    if (!fits) return false;
  }
  return true;
}

bool surely_same_shape(const ir::Type& a, const ir::Type& b) {
  if (!a.is_tensor() || !b.is_tensor() || !a.has_shape() || !b.has_shape() || a.dtype() != b.dtype()) return false;
  const ir::SymShape &x = a.dims(), &y = b.dims();
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (!surely_same_dim(x[i], y[i])) return false;
  return true;
}

}  // namespace anvil::passes
