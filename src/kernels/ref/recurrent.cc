// Recurrent layers: RNN, GRU and LSTM (float32), every ONNX option: forward,
// reverse and bidirectional directions, per-batch sequence_lens, initial
// states, LSTM peepholes and input_forget, GRU linear_before_reset, clip,
// custom activations with their alphas and betas, and both layouts.
//
// Per direction, the input projection X * W^T (+ biases) is computed for all
// steps at once; each step then adds H * R^T and applies the cell. The node's
// checks and options are recurrent_spec's; vec/recurrent.cc runs the nodes
// with the default activations faster.
#include <cmath>
#include <strings.h>

#include <algorithm>
#include <cstring>

#include "core/checked.h"
#include "kernels/recurrent_spec.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {
namespace {

using Cell = RecurrentCell;

// One activation function of the `activations` attribute, with its alpha and beta.
struct Activation {
  enum Kind { kSigmoid, kTanh, kRelu, kAffine, kLeakyRelu, kThresholdedRelu, kScaledTanh, kHardSigmoid, kElu,
              kSoftsign, kSoftplus } kind = kSigmoid;
  float alpha = 0, beta = 0;

  float operator()(float x) const {
    switch (kind) {
      case kSigmoid: return 1.f / (1.f + std::exp(-x));
      case kTanh: return std::tanh(x);
      case kRelu: return x > 0 ? x : 0;
      case kAffine: return alpha * x + beta;
      case kLeakyRelu: return x >= 0 ? x : alpha * x;
      case kThresholdedRelu: return x > alpha ? x : 0;
      case kScaledTanh: return alpha * std::tanh(beta * x);
      case kHardSigmoid: return std::max(0.f, std::min(1.f, alpha * x + beta));
      case kElu: return x >= 0 ? x : alpha * (std::exp(x) - 1);
      case kSoftsign: return x / (1 + std::fabs(x));
      case kSoftplus: return std::log1p(std::exp(x));
    }
    return x;
  }
};

// Parses `activations` (names are case-insensitive in practice; ONNX spells them as below),
// consuming activation_alpha / activation_beta in order for the functions that take them.
std::vector<Activation> parse_activations(const PrepareContext& ctx, const std::vector<std::string>& names) {
  struct Spec {
    const char* name;
    Activation::Kind kind;
    bool has_alpha, has_beta;
    float alpha, beta;
  };
  static const Spec kSpecs[] = {
      {"Sigmoid", Activation::kSigmoid, false, false, 0, 0},   {"Tanh", Activation::kTanh, false, false, 0, 0},
      {"Relu", Activation::kRelu, false, false, 0, 0},         {"Affine", Activation::kAffine, true, true, 1, 0},
      {"LeakyRelu", Activation::kLeakyRelu, true, false, 0.01f, 0},
      {"ThresholdedRelu", Activation::kThresholdedRelu, true, false, 1, 0},
      {"ScaledTanh", Activation::kScaledTanh, true, true, 1, 1},
      {"HardSigmoid", Activation::kHardSigmoid, true, true, 0.2f, 0.5f},
      {"Elu", Activation::kElu, true, false, 1, 0},             {"Softsign", Activation::kSoftsign, false, false, 0, 0},
      {"Softplus", Activation::kSoftplus, false, false, 0, 0}};
  std::vector<float> alphas = ctx.attrs().get_floats("activation_alpha");
  std::vector<float> betas = ctx.attrs().get_floats("activation_beta");
  size_t next_alpha = 0, next_beta = 0;
  std::vector<Activation> out;
  for (const std::string& name : names) {
    const Spec* spec = nullptr;
    for (const Spec& s : kSpecs)
      if (strcasecmp(s.name, name.c_str()) == 0) spec = &s;
    ANVIL_PREPARE_CHECK(ctx, spec != nullptr, ErrorKind::kUnsupported, "activation '{}' is not supported", name);
    Activation a;
    a.kind = spec->kind;
    a.alpha = spec->has_alpha && next_alpha < alphas.size() ? alphas[next_alpha++] : spec->alpha;
    a.beta = spec->has_beta && next_beta < betas.size() ? betas[next_beta++] : spec->beta;
    out.push_back(a);
  }
  return out;
}

// out[m, n] (+)= sum_k a[m, k] * w[n, k]: both operands row-major, rows contiguous in k.
void matmul_nt(const float* a, const float* w, float* out, int64_t m, int64_t n, int64_t k, bool accumulate) {
#pragma omp parallel for collapse(2) if (m * n * k > 65536)
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float* ar = a + i * k;
      const float* wr = w + j * k;
      float acc = 0;
      for (int64_t kk = 0; kk < k; ++kk) acc += ar[kk] * wr[kk];
      out[i * n + j] = accumulate ? out[i * n + j] + acc : acc;
    }
}

class RecurrentKernel : public Kernel {
 public:
  explicit RecurrentKernel(Cell cell) : cell_(cell) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const RecurrentSpec spec = recurrent_spec(ctx, cell_);
    reverse_only_ = spec.reverse_only;
    dirs_ = spec.dirs;
    layout_ = spec.layout;
    seq_ = spec.seq;
    batch_ = spec.batch;
    input_ = spec.input;
    hidden_ = spec.hidden;
    input_forget_ = spec.input_forget;
    linear_before_reset_ = spec.linear_before_reset;
    clip_ = spec.clip;
    acts_ = parse_activations(ctx, spec.activations);
    per_dir_ = spec.activations_per_direction();
    gates_ = spec.gates();
    return ctx.output_types();  // Y, Y_h (and Y_c)
  }

  void run(const RunContext& ctx) const override {
    for (int64_t d = 0; d < dirs_; ++d) run_direction(ctx, d);
  }

 private:
  // Index of element (t, b) in X, Y and the states, by layout.
  int64_t x_row(int64_t t, int64_t b) const { return layout_ ? b * seq_ + t : t * batch_ + b; }
  // nullptr when the model does not ask for Y.
  float* y_row(const RunContext& ctx, int64_t t, int64_t d, int64_t b) const {
    if (ctx.outputs.empty() || !ctx.outputs[0]) return nullptr;
    float* y = ctx.out(0).data<float>();
    int64_t row = layout_ ? (b * seq_ + t) * dirs_ + d : (t * dirs_ + d) * batch_ + b;
    return y + row * hidden_;
  }
  int64_t state_row(int64_t d, int64_t b) const { return layout_ ? b * dirs_ + d : d * batch_ + b; }

  float clipped(float v) const { return clip_ >= 0 ? std::max(-clip_, std::min(clip_, v)) : v; }

  void run_direction(const RunContext& ctx, int64_t d) const {
    const bool reverse = reverse_only_ || d == 1;
    const int64_t gh = gates_ * hidden_, H = hidden_;
    const float* x = ctx.in(0).data<float>();
    const float* w = ctx.in(1).data<float>() + d * gh * input_;
    const float* r = ctx.in(2).data<float>() + d * gh * H;
    const float* bias = ctx.inputs.size() > 3 && ctx.inputs[3] ? ctx.in(3).data<float>() + d * 2 * gh : nullptr;
    const int32_t* lens = ctx.inputs.size() > 4 && ctx.inputs[4] ? ctx.in(4).data<int32_t>() : nullptr;
    const float* h0 = ctx.inputs.size() > 5 && ctx.inputs[5] ? ctx.in(5).data<float>() : nullptr;
    const float* c0 = cell_ == Cell::kLstm && ctx.inputs.size() > 6 && ctx.inputs[6] ? ctx.in(6).data<float>() : nullptr;
    const float* peep = cell_ == Cell::kLstm && ctx.inputs.size() > 7 && ctx.inputs[7] ? ctx.in(7).data<float>() + d * 3 * H
                                                                                       : nullptr;
    const Activation* act = &acts_[static_cast<size_t>(d) * per_dir_];

    // X rows in memory order, projected: xw[row, :] = X[row] * W^T + Wb (+ Rb, except GRU's h gate).
    std::vector<float> xw(static_cast<size_t>(checked_mul(seq_ * batch_, gh, "recurrent projection")));
    matmul_nt(x, w, xw.data(), seq_ * batch_, gh, input_, false);
    if (bias) {
      for (int64_t row = 0; row < seq_ * batch_; ++row)
        for (int64_t j = 0; j < gh; ++j) {
          float add = bias[j];
          bool recurrent_bias_in_cell = cell_ == Cell::kGru && j >= 2 * H;  // Rbh goes inside the h gate
          if (!recurrent_bias_in_cell) add += bias[gh + j];
          xw[static_cast<size_t>(row * gh + j)] += add;
        }
    }
    std::vector<float> h(static_cast<size_t>(batch_ * H), 0.f), c(h.size(), 0.f), hr(static_cast<size_t>(batch_ * gh));
    std::vector<float> scratch(static_cast<size_t>(batch_ * 3 * H));
    for (int64_t b = 0; b < batch_; ++b) {
      if (h0) std::memcpy(&h[static_cast<size_t>(b * H)], h0 + state_row(d, b) * H, sizeof(float) * H);
      if (c0) std::memcpy(&c[static_cast<size_t>(b * H)], c0 + state_row(d, b) * H, sizeof(float) * H);
    }
    for (int64_t s = 0; s < seq_; ++s) {
      const int64_t t = reverse ? seq_ - 1 - s : s;
      matmul_nt(h.data(), r, hr.data(), batch_, gh, H, false);
#pragma omp parallel for if (batch_ * gh > 16384)
      for (int64_t b = 0; b < batch_; ++b) {
        float* hb = &h[static_cast<size_t>(b * H)];
        float* cb = &c[static_cast<size_t>(b * H)];
        float* yb = y_row(ctx, t, d, b);
        if (lens && t >= lens[b]) {  // past this sequence's end: zeros out, state held
          if (yb) std::memset(yb, 0, sizeof(float) * H);
          continue;
        }
        const float* g = &xw[static_cast<size_t>(x_row(t, b) * gh)];
        const float* q = &hr[static_cast<size_t>(b * gh)];
        step(g, q, hb, cb, act, bias ? bias + gh : nullptr, peep, r, &scratch[static_cast<size_t>(b * 3 * H)]);
        if (yb) std::memcpy(yb, hb, sizeof(float) * H);
      }
    }
    for (int64_t b = 0; b < batch_; ++b) {
      if (ctx.outputs.size() > 1 && ctx.outputs[1])
        std::memcpy(ctx.out(1).data<float>() + state_row(d, b) * H, &h[static_cast<size_t>(b * H)], sizeof(float) * H);
      if (cell_ == Cell::kLstm && ctx.outputs.size() > 2 && ctx.outputs[2])
        std::memcpy(ctx.out(2).data<float>() + state_row(d, b) * H, &c[static_cast<size_t>(b * H)], sizeof(float) * H);
    }
  }

  // One cell update of one batch row. g: input projection with biases; q: H * R^T;
  // rb: the recurrent biases (GRU's h gate uses them inside the cell).
  void step(const float* g, const float* q, float* h, float* c, const Activation* act, const float* rb,
            const float* peep, const float* r_weights, float* scratch) const {
    const int64_t H = hidden_;
    switch (cell_) {
      case Cell::kRnn:
        for (int64_t j = 0; j < H; ++j) h[j] = act[0](clipped(g[j] + q[j]));
        return;
      case Cell::kGru: {
        // scratch: z, r, then r (.) H_{t-1} — per batch row, so rows run in parallel.
        float* z = scratch;
        float* rr = scratch + H;
        float* rh = scratch + 2 * H;
        for (int64_t j = 0; j < H; ++j) {
          z[j] = act[0](clipped(g[j] + q[j]));
          rr[j] = act[0](clipped(g[H + j] + q[H + j]));
          rh[j] = rr[j] * h[j];
        }
        const float* r_h = r_weights + 2 * H * H;  // R's h-gate rows
        for (int64_t j = 0; j < H; ++j) {
          const float rbh = rb ? rb[2 * H + j] : 0.f;
          float pre;
          if (linear_before_reset_) {
            pre = g[2 * H + j] + rr[j] * (q[2 * H + j] + rbh);
          } else {
            float dot = 0;
            for (int64_t k = 0; k < H; ++k) dot += rh[k] * r_h[j * H + k];
            pre = g[2 * H + j] + rbh + dot;
          }
          z[j] = (1 - z[j]) * act[1](clipped(pre)) + z[j] * h[j];  // z now holds the new state
        }
        std::memcpy(h, z, sizeof(float) * H);
        return;
      }
      case Cell::kLstm:
        for (int64_t j = 0; j < H; ++j) {
          float i_pre = g[j] + q[j], f_pre = g[2 * H + j] + q[2 * H + j];
          if (peep) {
            i_pre += peep[j] * c[j];
            f_pre += peep[2 * H + j] * c[j];
          }
          const float i = act[0](clipped(i_pre));
          const float f = input_forget_ ? 1 - i : act[0](clipped(f_pre));
          const float cand = act[1](clipped(g[3 * H + j] + q[3 * H + j]));
          c[j] = f * c[j] + i * cand;
          float o_pre = g[H + j] + q[H + j];
          if (peep) o_pre += peep[H + j] * c[j];
          const float o = act[0](clipped(o_pre));
          h[j] = o * act[2](c[j]);
        }
        return;
    }
  }

  Cell cell_;
  bool reverse_only_ = false, input_forget_ = false, linear_before_reset_ = false;
  int64_t dirs_ = 1, layout_ = 0, seq_ = 0, batch_ = 0, input_ = 0, hidden_ = 0, gates_ = 1;
  size_t per_dir_ = 1;
  float clip_ = -1;
  std::vector<Activation> acts_;
};

ANVIL_REGISTER_KERNEL("RNN", kRef, [](const ir::Node&) -> std::unique_ptr<Kernel> {
  return std::make_unique<RecurrentKernel>(Cell::kRnn);
});
ANVIL_REGISTER_KERNEL("GRU", kRef, [](const ir::Node&) -> std::unique_ptr<Kernel> {
  return std::make_unique<RecurrentKernel>(Cell::kGru);
});
ANVIL_REGISTER_KERNEL("LSTM", kRef, [](const ir::Node&) -> std::unique_ptr<Kernel> {
  return std::make_unique<RecurrentKernel>(Cell::kLstm);
});

}  // namespace
}  // namespace anvil::kernels
