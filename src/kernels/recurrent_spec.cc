#include "kernels/recurrent_spec.h"

#include <strings.h>

#include <variant>

namespace anvil::kernels {

namespace {

const char* default_activation(RecurrentCell cell, size_t i) {
  static const char* kDefaults[] = {"Sigmoid", "Tanh", "Tanh"};
  return cell == RecurrentCell::kRnn ? "Tanh" : kDefaults[i];
}

void check_optional(const PrepareContext& ctx, size_t i, const Shape& want, const char* what) {
  if (!ctx.has_input(i)) return;
  ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(i) == DType::kFloat32 && ctx.input_shape(i) == want,
                      ErrorKind::kInvalidArgument, "{} is {} {}, expected float32 {}", what,
                      dtype_name(ctx.input_dtype(i)), shape_str(ctx.input_shape(i)), shape_str(want));
}

std::vector<std::string> activation_names(const PrepareContext& ctx, const RecurrentSpec& s) {
  const size_t per_dir = s.activations_per_direction();
  std::vector<std::string> names;
  if (ctx.attrs().has("activations")) {
    const auto& all = ctx.attrs().all().at("activations");
    if (const auto* list = std::get_if<std::vector<std::string>>(&all)) names = *list;
  }
  if (names.empty())
    for (int64_t d = 0; d < s.dirs; ++d)
      for (size_t i = 0; i < per_dir; ++i) names.push_back(default_activation(s.cell, i));
  if (names.size() == per_dir && s.dirs == 2) names.insert(names.end(), names.begin(), names.end());
  ANVIL_PREPARE_CHECK(ctx, names.size() == per_dir * static_cast<size_t>(s.dirs), ErrorKind::kInvalidModel,
                      "activations lists {} functions; {} directions need {}", names.size(), s.dirs,
                      per_dir * static_cast<size_t>(s.dirs));
  return names;
}

}  // namespace

bool RecurrentSpec::default_activations() const {
  const size_t per_dir = activations_per_direction();
  for (size_t i = 0; i < activations.size(); ++i)
    if (strcasecmp(activations[i].c_str(), default_activation(cell, i % per_dir)) != 0) return false;
  return true;
}

RecurrentSpec recurrent_spec(const PrepareContext& ctx, RecurrentCell cell) {
  RecurrentSpec s;
  s.cell = cell;
  for (size_t i : {0u, 1u, 2u})
    ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(i) == DType::kFloat32, ErrorKind::kUnsupported,
                        "input {} is {}; recurrent layers run in float32", i, dtype_name(ctx.input_dtype(i)));
  const std::string direction = ctx.attrs().get_string("direction", "forward");
  ANVIL_PREPARE_CHECK(ctx, direction == "forward" || direction == "reverse" || direction == "bidirectional",
                      ErrorKind::kInvalidModel, "direction '{}' is not forward, reverse or bidirectional", direction);
  s.reverse_only = direction == "reverse";
  s.dirs = direction == "bidirectional" ? 2 : 1;
  s.layout = ctx.attrs().get_int("layout", 0);
  ANVIL_PREPARE_CHECK(ctx, s.layout == 0 || s.layout == 1, ErrorKind::kInvalidModel, "layout must be 0 or 1");
  const Shape& x = ctx.input_shape(0);
  ANVIL_PREPARE_CHECK(ctx, x.size() == 3, ErrorKind::kInvalidArgument, "X must have rank 3, got {}", shape_str(x));
  s.seq = s.layout ? x[1] : x[0];
  s.batch = s.layout ? x[0] : x[1];
  s.input = x[2];
  const int64_t gates = s.gates();
  const Shape& w = ctx.input_shape(1);
  const Shape& r = ctx.input_shape(2);
  s.hidden = ctx.attrs().get_int("hidden_size", w.size() == 3 ? w[1] / gates : 0);
  ANVIL_PREPARE_CHECK(ctx, s.hidden > 0, ErrorKind::kInvalidModel, "hidden_size must be > 0");
  ANVIL_PREPARE_CHECK(ctx, w == (Shape{s.dirs, gates * s.hidden, s.input}), ErrorKind::kInvalidArgument,
                      "W is {}, expected [{},{},{}]", shape_str(w), s.dirs, gates * s.hidden, s.input);
  ANVIL_PREPARE_CHECK(ctx, r == (Shape{s.dirs, gates * s.hidden, s.hidden}), ErrorKind::kInvalidArgument,
                      "R is {}, expected [{},{},{}]", shape_str(r), s.dirs, gates * s.hidden, s.hidden);
  check_optional(ctx, 3, {s.dirs, 2 * gates * s.hidden}, "B");
  if (ctx.has_input(4)) {
    ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(4) == DType::kInt32 && ctx.input_shape(4) == Shape{s.batch},
                        ErrorKind::kInvalidArgument, "sequence_lens must be int32 [{}]", s.batch);
  }
  const Shape state = s.layout ? Shape{s.batch, s.dirs, s.hidden} : Shape{s.dirs, s.batch, s.hidden};
  check_optional(ctx, 5, state, "initial_h");
  if (cell == RecurrentCell::kLstm) {
    check_optional(ctx, 6, state, "initial_c");
    check_optional(ctx, 7, {s.dirs, 3 * s.hidden}, "P");
    s.input_forget = ctx.attrs().get_int("input_forget", 0) != 0;
  }
  if (cell == RecurrentCell::kGru) s.linear_before_reset = ctx.attrs().get_int("linear_before_reset", 0) != 0;
  s.clip = ctx.attrs().has("clip") ? ctx.attrs().get_float("clip", 0) : -1;
  s.activations = activation_names(ctx, s);
  return s;
}

}  // namespace anvil::kernels
