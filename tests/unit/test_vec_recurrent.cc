// RNN, GRU and LSTM on Anvil's vectorized kernel (vec/recurrent.cc: constant
// weights, the default activations) against the ONNX equations written out
// here in double precision, over every option the kernel takes: directions,
// both layouts, sequence_lens, initial states, peepholes, input_forget, GRU
// with and without linear_before_reset, clip; hidden sizes that are and are
// not whole vectors, split between one, two and three threads. Also run with
// ANVIL_MAX_ISA capped (tests/CMakeLists.txt), so each ISA's cells are covered.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "anvil/session.h"
#include "ir/graph.h"

namespace anvil {
namespace {

enum class Cell { kRnn, kGru, kLstm };

struct Case {
  Cell cell = Cell::kLstm;
  int64_t hidden = 37, input = 11, seq = 5, batch = 3;
  std::string direction = "forward";
  int64_t layout = 0;
  bool lens = false, initial = false, peepholes = false, input_forget = false, bias = true;
  bool linear_before_reset = true;
  float clip = -1;  // < 0: none
  int threads = 2;
  bool zero_length = false;  // with lens: batch item 0's sequence is empty
  bool no_y = false;         // Y not asked for (only the final states)
  const char* what = "";
};

int64_t gates_of(Cell c) { return c == Cell::kRnn ? 1 : c == Cell::kGru ? 3 : 4; }
const char* op_of(Cell c) { return c == Cell::kRnn ? "RNN" : c == Cell::kGru ? "GRU" : "LSTM"; }

// Values in [-scale, scale), the same for the same seed.
std::vector<float> values(int64_t n, uint32_t seed, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t s = seed * 2654435761u + 1;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = scale * (static_cast<float>(s >> 8) / 8388608.f - 1.f);
  }
  return v;
}

Tensor tensor_of(Shape shape, const std::vector<float>& v) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

struct Inputs {
  std::vector<float> x, w, r, b, p, h0, c0;
  std::vector<int32_t> lens;
};

Inputs make_inputs(const Case& c) {
  const int64_t dirs = c.direction == "bidirectional" ? 2 : 1, gh = gates_of(c.cell) * c.hidden;
  Inputs in;
  in.x = values(c.seq * c.batch * c.input, 1, 1.5f);
  in.w = values(dirs * gh * c.input, 2, 0.4f);
  in.r = values(dirs * gh * c.hidden, 3, 0.3f);
  in.b = values(dirs * 2 * gh, 4, 0.5f);
  in.p = values(dirs * 3 * c.hidden, 5, 0.5f);
  in.h0 = values(dirs * c.batch * c.hidden, 6, 0.8f);
  in.c0 = values(dirs * c.batch * c.hidden, 7, 0.8f);
  for (int64_t b = 0; b < c.batch; ++b) in.lens.push_back(static_cast<int32_t>(c.seq - b % c.seq));
  if (c.zero_length) in.lens[0] = 0;
  return in;
}

std::unique_ptr<ir::Graph> recurrent_graph(const Case& c, const Inputs& in) {
  const int64_t dirs = c.direction == "bidirectional" ? 2 : 1, gh = gates_of(c.cell) * c.hidden;
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 14;
  const Shape xs = c.layout ? Shape{c.batch, c.seq, c.input} : Shape{c.seq, c.batch, c.input};
  const Shape state = c.layout ? Shape{c.batch, dirs, c.hidden} : Shape{dirs, c.batch, c.hidden};
  std::vector<ir::Value*> inputs = {g->add_input("x", DType::kFloat32, xs),
                                    g->add_constant("w", tensor_of({dirs, gh, c.input}, in.w)),
                                    g->add_constant("r", tensor_of({dirs, gh, c.hidden}, in.r)),
                                    c.bias ? g->add_constant("b", tensor_of({dirs, 2 * gh}, in.b)) : nullptr,
                                    c.lens ? g->add_input("lens", DType::kInt32, {c.batch}) : nullptr,
                                    c.initial ? g->add_input("h0", DType::kFloat32, state) : nullptr};
  if (c.cell == Cell::kLstm) {
    inputs.push_back(c.initial ? g->add_input("c0", DType::kFloat32, state) : nullptr);
    inputs.push_back(c.peepholes ? g->add_constant("p", tensor_of({dirs, 3 * c.hidden}, in.p)) : nullptr);
  }
  while (!inputs.empty() && !inputs.back()) inputs.pop_back();
  ir::Node* n = g->add_node(op_of(c.cell), inputs, c.cell == Cell::kLstm ? 3 : 2, "rnn");
  n->attrs.set("hidden_size", c.hidden);
  n->attrs.set("direction", c.direction);
  if (c.layout) n->attrs.set("layout", c.layout);
  if (c.input_forget) n->attrs.set("input_forget", int64_t{1});
  if (c.cell == Cell::kGru) n->attrs.set("linear_before_reset", int64_t{c.linear_before_reset});
  if (c.clip >= 0) n->attrs.set("clip", c.clip);
  if (c.no_y) n->outputs[0] = nullptr;
  for (ir::Value* out : n->outputs)
    if (out) g->add_output(out);
  return g;
}

double sigmoid(double v) { return 1 / (1 + std::exp(-v)); }

// The ONNX equations in double: Y [seq, dirs, batch, hidden] (layout 0's),
// Y_h and Y_c [dirs, batch, hidden].
struct Expected {
  std::vector<double> y, y_h, y_c;
};

Expected expected(const Case& c, const Inputs& in) {
  const int64_t dirs = c.direction == "bidirectional" ? 2 : 1, H = c.hidden, gh = gates_of(c.cell) * H;
  Expected e;
  e.y.assign(static_cast<size_t>(c.seq * dirs * c.batch * H), 0.0);
  e.y_h.assign(static_cast<size_t>(dirs * c.batch * H), 0.0);
  e.y_c = e.y_h;
  auto clip = [&](double v) { return c.clip >= 0 ? std::max<double>(-c.clip, std::min<double>(c.clip, v)) : v; };
  auto x_at = [&](int64_t t, int64_t b, int64_t i) {
    return double(in.x[static_cast<size_t>((c.layout ? b * c.seq + t : t * c.batch + b) * c.input + i)]);
  };
  auto state_at = [&](const std::vector<float>& s, int64_t d, int64_t b, int64_t j) {
    return double(s[static_cast<size_t>((c.layout ? b * dirs + d : d * c.batch + b) * H + j)]);
  };
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = c.direction == "reverse" || d == 1;
    const float* w = in.w.data() + d * gh * c.input;
    const float* r = in.r.data() + d * gh * H;
    const float* wb = in.b.data() + d * 2 * gh;
    const float* rb = wb + gh;
    const float* p = in.p.data() + d * 3 * H;
    for (int64_t b = 0; b < c.batch; ++b) {
      std::vector<double> h(static_cast<size_t>(H)), cs(h.size());
      for (int64_t j = 0; j < H; ++j) {
        h[static_cast<size_t>(j)] = c.initial ? state_at(in.h0, d, b, j) : 0;
        cs[static_cast<size_t>(j)] = c.initial && c.cell == Cell::kLstm ? state_at(in.c0, d, b, j) : 0;
      }
      const int64_t len = c.lens ? in.lens[static_cast<size_t>(b)] : c.seq;
      for (int64_t s = 0; s < len; ++s) {
        const int64_t t = reverse ? len - 1 - s : s;
        auto xw = [&](int64_t row) {  // W's row times x_t, plus W's bias
          double v = c.bias ? wb[row] : 0;
          for (int64_t i = 0; i < c.input; ++i) v += double(w[row * c.input + i]) * x_at(t, b, i);
          return v;
        };
        auto hr = [&](int64_t row, const std::vector<double>& hv) {  // R's row times hv, plus R's bias
          double v = c.bias ? rb[row] : 0;
          for (int64_t k = 0; k < H; ++k) v += double(r[row * H + k]) * hv[static_cast<size_t>(k)];
          return v;
        };
        std::vector<double> next(static_cast<size_t>(H));
        for (int64_t j = 0; j < H; ++j) {
          const size_t u = static_cast<size_t>(j);
          if (c.cell == Cell::kRnn) {
            next[u] = std::tanh(clip(xw(j) + hr(j, h)));
          } else if (c.cell == Cell::kLstm) {
            const double i = sigmoid(clip(xw(j) + hr(j, h) + (c.peepholes ? p[j] * cs[u] : 0)));
            const double f = c.input_forget ? 1 - i : sigmoid(clip(xw(2 * H + j) + hr(2 * H + j, h) +
                                                                   (c.peepholes ? p[2 * H + j] * cs[u] : 0)));
            const double cand = std::tanh(clip(xw(3 * H + j) + hr(3 * H + j, h)));
            cs[u] = f * cs[u] + i * cand;
            const double o = sigmoid(clip(xw(H + j) + hr(H + j, h) + (c.peepholes ? p[H + j] * cs[u] : 0)));
            next[u] = o * std::tanh(cs[u]);
          } else {
            const double z = sigmoid(clip(xw(j) + hr(j, h)));
            double pre;
            if (c.linear_before_reset) {
              pre = xw(2 * H + j) + sigmoid(clip(xw(H + j) + hr(H + j, h))) * hr(2 * H + j, h);
            } else {
              std::vector<double> rh(static_cast<size_t>(H));
              for (int64_t k = 0; k < H; ++k)
                rh[static_cast<size_t>(k)] = sigmoid(clip(xw(H + k) + hr(H + k, h))) * h[static_cast<size_t>(k)];
              pre = xw(2 * H + j) + hr(2 * H + j, rh);
            }
            next[u] = (1 - z) * std::tanh(clip(pre)) + z * h[u];
          }
        }
        h = next;
        for (int64_t j = 0; j < H; ++j) e.y[static_cast<size_t>(((t * dirs + d) * c.batch + b) * H + j)] = h[static_cast<size_t>(j)];
      }
      for (int64_t j = 0; j < H; ++j) {
        e.y_h[static_cast<size_t>((d * c.batch + b) * H + j)] = h[static_cast<size_t>(j)];
        e.y_c[static_cast<size_t>((d * c.batch + b) * H + j)] = cs[static_cast<size_t>(j)];
      }
    }
  }
  return e;
}

void check(const Case& c) {
  SCOPED_TRACE(c.what);
  const Inputs in = make_inputs(c);
  SessionOptions options;
  options.num_threads = c.threads;
  Session session = Session::from_graph(recurrent_graph(c, in), options);
  const int64_t dirs = c.direction == "bidirectional" ? 2 : 1;
  std::map<std::string, Tensor> feeds = {
      {"x", tensor_of(c.layout ? Shape{c.batch, c.seq, c.input} : Shape{c.seq, c.batch, c.input}, in.x)}};
  const Shape state = c.layout ? Shape{c.batch, dirs, c.hidden} : Shape{dirs, c.batch, c.hidden};
  if (c.lens) {
    Tensor lens(DType::kInt32, {c.batch});
    std::copy(in.lens.begin(), in.lens.end(), lens.data<int32_t>());
    feeds["lens"] = lens;
  }
  if (c.initial) {
    feeds["h0"] = tensor_of(state, in.h0);
    if (c.cell == Cell::kLstm) feeds["c0"] = tensor_of(state, in.c0);
  }
  bool vectorized = false;
  for (const std::string& line : session.describe_plan(feeds)) vectorized |= line.find(":recurrent") != std::string::npos;
  ASSERT_TRUE(vectorized) << "the node did not run on the vectorized kernel";
  std::vector<Tensor> out = session.run(feeds);
  if (c.no_y) out.insert(out.begin(), Tensor());
  const Expected e = expected(c, in);
  const int64_t H = c.hidden;
  // Y and the states in layout 0's order from either layout.
  auto y_at = [&](int64_t t, int64_t d, int64_t b, int64_t j) {
    const int64_t row = c.layout ? (b * c.seq + t) * dirs + d : (t * dirs + d) * c.batch + b;
    return out[0].data<float>()[row * H + j];
  };
  auto state_out = [&](const Tensor& s, int64_t d, int64_t b, int64_t j) {
    return s.data<float>()[(c.layout ? b * dirs + d : d * c.batch + b) * H + j];
  };
  constexpr double kTolerance = 2e-5;
  for (int64_t t = 0; t < (c.no_y ? 0 : c.seq); ++t)
    for (int64_t d = 0; d < dirs; ++d)
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t j = 0; j < H; ++j)
          ASSERT_NEAR(y_at(t, d, b, j), e.y[static_cast<size_t>(((t * dirs + d) * c.batch + b) * H + j)], kTolerance)
              << "Y at t " << t << " dir " << d << " batch " << b << " unit " << j;
  for (int64_t d = 0; d < dirs; ++d)
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t j = 0; j < H; ++j) {
        const size_t i = static_cast<size_t>((d * c.batch + b) * H + j);
        ASSERT_NEAR(state_out(out[1], d, b, j), e.y_h[i], kTolerance) << "Y_h " << i;
        if (c.cell == Cell::kLstm) ASSERT_NEAR(state_out(out[2], d, b, j), e.y_c[i], kTolerance) << "Y_c " << i;
      }
}

TEST(VecRecurrent, LstmMatchesTheEquations) {
  for (const Case& c : {Case{.what = "forward, 37 units (a partial vector), two threads"},
                        Case{.hidden = 64, .direction = "reverse", .threads = 1, .what = "reverse, one thread"},
                        Case{.direction = "bidirectional", .lens = true, .initial = true,
                             .what = "bidirectional, sequence_lens, initial states"},
                        Case{.layout = 1, .peepholes = true, .threads = 3, .what = "layout 1, peepholes, three threads"},
                        Case{.input_forget = true, .clip = 0.7f, .what = "input_forget, clip"},
                        Case{.hidden = 5, .batch = 1, .bias = false, .what = "5 units, batch 1, no bias"},
                        Case{.hidden = 21, .direction = "bidirectional", .lens = true, .initial = true,
                             .peepholes = true, .threads = 4, .zero_length = true,
                             .what = "bidirectional on four threads: two groups a direction and barriers; "
                                     "each direction's peepholes; an empty sequence"},
                        Case{.hidden = 300, .input = 800, .seq = 3, .batch = 13, .lens = true,
                             .what = "K past a k-block, 13 rows (two row tiles), 300 units in uneven groups"},
                        Case{.initial = true, .no_y = true, .what = "Y not asked for"}})
    check(c);
}

TEST(VecRecurrent, GruMatchesTheEquations) {
  for (const Case& c :
       {Case{.cell = Cell::kGru, .what = "linear_before_reset (PyTorch's)"},
        Case{.cell = Cell::kGru, .linear_before_reset = false, .what = "without linear_before_reset: two phases a step"},
        Case{.cell = Cell::kGru, .direction = "bidirectional", .lens = true, .initial = true, .linear_before_reset = false,
             .threads = 3, .what = "bidirectional, sequence_lens, initial state, two phases, three threads"},
        Case{.cell = Cell::kGru, .layout = 1, .clip = 0.5f, .threads = 1, .what = "layout 1, clip, one thread"},
        Case{.cell = Cell::kGru, .hidden = 21, .direction = "bidirectional", .lens = true, .linear_before_reset = false,
             .clip = 0.6f, .threads = 4, .zero_length = true,
             .what = "two phases, clip, bidirectional on four threads, an empty sequence"}})
    check(c);
}

TEST(VecRecurrent, RnnMatchesTheEquations) {
  for (const Case& c : {Case{.cell = Cell::kRnn, .what = "forward"},
                        Case{.cell = Cell::kRnn, .hidden = 48, .direction = "bidirectional", .layout = 1, .lens = true,
                             .initial = true, .what = "bidirectional, layout 1, sequence_lens"},
                        Case{.cell = Cell::kRnn, .clip = 0.4f, .threads = 3, .what = "clip, three threads"}})
    check(c);
}

// Activations other than the defaults, and weights known only at run time,
// are the reference kernel's.
TEST(VecRecurrent, OtherActivationsAndRunTimeWeightsStayOnTheReference) {
  Case c;
  const Inputs in = make_inputs(c);
  for (bool run_time_weights : {false, true}) {
    SCOPED_TRACE(run_time_weights ? "W a graph input" : "HardSigmoid gates");
    auto g = recurrent_graph(c, in);
    ir::Node& n = *g->nodes()[0];
    std::map<std::string, Tensor> feeds = {{"x", tensor_of({c.seq, c.batch, c.input}, in.x)}};
    if (run_time_weights) {
      n.inputs[1] = g->add_input("w_in", DType::kFloat32, n.inputs[1]->constant->shape());
      feeds["w_in"] = tensor_of(n.inputs[1]->type.shape_or_minus_one(), in.w);
    } else {
      n.attrs.set("activations", std::vector<std::string>{"HardSigmoid", "Tanh", "Tanh"});
    }
    Session session = Session::from_graph(std::move(g));
    const std::vector<std::string> plan = session.describe_plan(feeds);
    bool on_reference = false;
    for (const std::string& line : plan) {
      EXPECT_EQ(line.find(":recurrent"), std::string::npos) << line;
      on_reference |= line.find("LSTM") != std::string::npos && line.find(" ref ") != std::string::npos;
    }
    EXPECT_TRUE(on_reference) << fmt::format("{}", fmt::join(plan, "\n"));
  }
}

}  // namespace
}  // namespace anvil
