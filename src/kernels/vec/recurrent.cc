// RNN, GRU and LSTM with their default activations, float32, on Anvil's
// packed GEMM and vectorized cells (VecKernels::recurrent). Every other ONNX
// option runs here too: both layouts, reverse and bidirectional directions,
// per-batch sequence_lens, initial states, peepholes, input_forget, GRU with
// and without linear_before_reset, clip. Declines (the reference kernel runs
// them, ref/recurrent.cc): other activations, weights or biases known only
// at run time, empty inputs.
//
// The hidden units are cut into groups, one per thread (a direction's own
// thread where a bidirectional node has two): a group's columns of W^T and
// R^T (each gate's columns of its units, side by side) are packed once, so
// each step a thread multiplies H_{t-1} by its own part of R^T, which stays
// in its L2 where it fits (and mostly where it is a little larger: the
// steps read it back and forth, multiply_state), and updates its units'
// states; one barrier per step (two for GRU without linear_before_reset,
// whose R_h multiplies r * H_{t-1} across every unit) makes the new state
// visible to all. Where a direction is one group (one thread, or a thread
// per direction) it runs start to end without barriers. The input's
// projection X W^T + biases is one product per group for all steps, before
// the first. One parallel region runs the whole node.
//
// Why: the reference kernel's scalar products ran LSTM and GRU layers
// 8-30x slower than ONNX Runtime (docs/benchmarks.md, "Recurrent layers").
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/checked.h"
#include "kernels/recurrent_spec.h"
#include "kernels/registry.h"
#include "kernels/thread_share.h"
#include "kernels/vec/gemm.h"
#include "kernels/weight_cache.h"

namespace anvil::kernels {
namespace {

using Cell = RecurrentCell;

constexpr int64_t kAlignFloats = 16;  // 64 bytes
int64_t aligned(int64_t floats) { return ceil_div(floats, kAlignFloats) * kAlignFloats; }

// One thread's share of a direction's hidden units, and what it reads and writes.
struct Group {
  int64_t dir = 0, first = 0, units = 0;  // units [first, first + units) of direction dir
  // W^T and R^T's columns of the units, gate by gate ([input or hidden, gates
  // * units]); for GRU without linear_before_reset, r_packed holds z and r
  // only and rh_packed R_h's.
  Tensor w_packed, r_packed, rh_packed;
  std::vector<float> bias;  // [gates * units]: W's and R's biases, but R's h-gate bias for GRU
  std::vector<float> rb_h;  // GRU: R's h-gate bias of the units (empty: none)
  // Scratch offsets (floats): the projection [seq * batch, gates * units],
  // q = H R^T [batch, gates * units], GRU's z and r [batch, units] each.
  int64_t xw = 0, q = 0, z = 0, r = 0;
};

class VecRecurrent : public Kernel {
 public:
  explicit VecRecurrent(Cell cell) : cell_(cell) {}

  size_t scratch_bytes() const override { return static_cast<size_t>(scratch_floats_) * sizeof(float); }
  std::string impl_name() const override { return std::string(vec::vec_impl_name()) + ":recurrent"; }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    s_ = recurrent_spec(ctx, cell_);
    ANVIL_PREPARE_CHECK(ctx, s_.default_activations(), ErrorKind::kUnsupported,
                        "activations other than the defaults: the reference kernel");
    ANVIL_PREPARE_CHECK(ctx, ctx.constant(1) && ctx.constant(2) && (!ctx.has_input(3) || ctx.constant(3)),
                        ErrorKind::kUnsupported, "weights known only at run time: the reference kernel");
    ANVIL_PREPARE_CHECK(ctx, s_.seq > 0 && s_.batch > 0 && s_.input > 0, ErrorKind::kUnsupported,
                        "an empty input: the reference kernel");
    make_groups(ctx);
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    float* scratch = static_cast<float*>(ctx.scratch);
#pragma omp parallel
    {
      const int t = omp_get_thread_num(), team = omp_get_num_threads();
      auto each_group = [&](auto f) {
        for (size_t g = static_cast<size_t>(t); g < groups_.size(); g += static_cast<size_t>(team)) f(groups_[g]);
      };
      if (whole_directions_) {
        // A group per direction: each runs alone, start to end, with no
        // barrier, and a thread with two runs them one after the other (its
        // R stays in L2 for a direction's every step, where taking them by
        // turns made both come from L3).
        each_group([&](const Group& g) {
          init_states(ctx, g, scratch);
          project_input(ctx, g, scratch);
          for (int64_t step = 0; step < s_.seq; ++step) {
            first_phase(ctx, g, scratch, step);
            if (two_phases()) second_phase(ctx, g, scratch, step);
          }
          write_final_states(ctx, g, scratch);
        });
      } else {
        each_group([&](const Group& g) {
          init_states(ctx, g, scratch);
          project_input(ctx, g, scratch);
        });
#pragma omp barrier
        for (int64_t step = 0; step < s_.seq; ++step) {
          each_group([&](const Group& g) { first_phase(ctx, g, scratch, step); });
          if (two_phases()) {
#pragma omp barrier
            each_group([&](const Group& g) { second_phase(ctx, g, scratch, step); });
          }
#pragma omp barrier
        }
        each_group([&](const Group& g) { write_final_states(ctx, g, scratch); });
      }
    }
  }

 private:
  bool two_phases() const { return cell_ == Cell::kGru && !s_.linear_before_reset; }

  // ------------------------------------------------------------ prepare

  // Groups: each direction's units split between the threads it gets (all
  // of them, or half each for two directions), vector-aligned.
  void make_groups(const PrepareContext& ctx) {
    const vec::GemmKernels& gk = vec::vec_kernels().gemm;
    const int64_t H = s_.hidden, parts = std::max<int64_t>(1, ctx.num_threads() / s_.dirs);
    const int64_t width = gk.width, vectors = ceil_div(H, width);
    groups_.clear();
    whole_directions_ = std::min(parts, vectors) == 1;
    for (int64_t d = 0; d < s_.dirs; ++d)
      for (int64_t p = 0; p < std::min(parts, vectors); ++p) {
        const auto [v0, v1] = share(vectors, static_cast<int>(p), static_cast<int>(std::min(parts, vectors)));
        Group g;
        g.dir = d;
        g.first = v0 * width;
        g.units = std::min(H, v1 * width) - g.first;
        pack_group(ctx, g);
        groups_.push_back(std::move(g));
      }
    plan_scratch();
  }

  // [k, gates * units] of the units' rows of direction g.dir's block of
  // `source` ([dirs, gates * H, k]), gates [g0, g1), packed for the GEMM;
  // shared through the session's weight cache, so that the plans of other
  // sequence lengths take the same copy (the cache keeps the original too:
  // no unpack).
  Tensor pack_columns(const PrepareContext& ctx, const Tensor& source, int64_t k, const Group& g, int64_t g0,
                      int64_t g1) const {
    const vec::GemmKernels& gk = vec::vec_kernels().gemm;
    const int64_t H = s_.hidden, n = (g1 - g0) * g.units;
    auto pack = [&] {
      const float* m = source.data<float>() + g.dir * s_.gates() * H * k;
      std::vector<float> b(static_cast<size_t>(k * n));
      for (int64_t gate = g0; gate < g1; ++gate)
        for (int64_t u = 0; u < g.units; ++u) {
          const float* row = m + (gate * H + g.first + u) * k;
          const int64_t col = (gate - g0) * g.units + u;
          for (int64_t i = 0; i < k; ++i) b[static_cast<size_t>(i * n + col)] = row[i];
        }
      return vec::pack_gemm_b(gk, b.data(), k, n, n, 1);
    };
    WeightCache* cache = ctx.weight_cache();
    if (!cache) return pack();
    const std::string key = fmt::format("anvil-recurrent dir {} units {}+{} gates {}-{} {}", g.dir, g.first, g.units,
                                        g0, g1, vec::gemm_layout_key(gk, k, n, n, 1));
    return cache->get(source, key, pack);
  }

  void pack_group(const PrepareContext& ctx, Group& g) const {
    const int64_t H = s_.hidden, gates = s_.gates(), gh = gates * H;
    const Tensor& w = *ctx.constant(1);
    const Tensor& r = *ctx.constant(2);
    g.w_packed = pack_columns(ctx, w, s_.input, g, 0, gates);
    if (two_phases()) {
      g.r_packed = pack_columns(ctx, r, H, g, 0, 2);
      g.rh_packed = pack_columns(ctx, r, H, g, 2, 3);
    } else {
      g.r_packed = pack_columns(ctx, r, H, g, 0, gates);
    }
    g.bias.assign(static_cast<size_t>(gates * g.units), 0.f);
    const Tensor* b = ctx.has_input(3) ? ctx.constant(3) : nullptr;
    if (!b) return;
    const float* wb = b->data<float>() + g.dir * 2 * gh;
    const float* rb = wb + gh;
    for (int64_t gate = 0; gate < gates; ++gate)
      for (int64_t u = 0; u < g.units; ++u) {
        const int64_t j = gate * H + g.first + u;
        const bool rb_in_cell = cell_ == Cell::kGru && gate == 2;  // R's h-gate bias goes inside the cell
        g.bias[static_cast<size_t>(gate * g.units + u)] = wb[j] + (rb_in_cell ? 0.f : rb[j]);
      }
    if (cell_ == Cell::kGru) g.rb_h.assign(rb + 2 * H + g.first, rb + 2 * H + g.first + g.units);
  }

  // Per group its projection, q, and GRU's z and r; per direction two
  // state buffers (this step's and the next's), the cell state and GRU's r * h.
  // The sizes come from the model's shapes: checked, as a file's counts are.
  void plan_scratch() {
    constexpr const char* kWhat = "recurrent scratch";
    const int64_t rows = checked_mul(s_.seq, s_.batch, kWhat), H = s_.hidden;
    int64_t at = 0;
    auto take = [&](int64_t floats) {
      const int64_t here = at;
      at = checked_add(at, aligned(floats), kWhat);
      return here;
    };
    for (Group& g : groups_) {
      const int64_t n = s_.gates() * g.units;
      g.xw = take(checked_mul(rows, n, kWhat));
      g.q = take(checked_mul(s_.batch, n, kWhat));
      if (cell_ == Cell::kGru) {
        g.z = take(checked_mul(s_.batch, g.units, kWhat));
        g.r = take(checked_mul(s_.batch, g.units, kWhat));
      }
    }
    states_ = at;
    state_floats_ = aligned(checked_mul(s_.batch, H, kWhat));
    // h (two), c, r * h per direction
    scratch_floats_ = checked_add(at, checked_mul(s_.dirs * 4, state_floats_, kWhat), kWhat);
    checked_mul(scratch_floats_, static_cast<int64_t>(sizeof(float)), kWhat);  // scratch_bytes
  }

  // ------------------------------------------------------------ run

  // Direction d's state buffers: h for step `step` (its input) and the next's.
  float* h_at(float* scratch, int64_t d, int64_t step) const {
    return scratch + states_ + (d * 4 + step % 2) * state_floats_;
  }
  float* c_of(float* scratch, int64_t d) const { return scratch + states_ + (d * 4 + 2) * state_floats_; }
  float* rh_of(float* scratch, int64_t d) const { return scratch + states_ + (d * 4 + 3) * state_floats_; }

  // Row of batch item b, direction d in a state tensor (initial_h, Y_h, ...).
  int64_t state_row(int64_t d, int64_t b) const { return s_.layout ? b * s_.dirs + d : d * s_.batch + b; }
  // Time step `step` of direction d.
  int64_t time_of(int64_t d, int64_t step) const { return s_.reversed(d) ? s_.seq - 1 - step : step; }

  const float* input_or_null(const RunContext& ctx, size_t i) const {
    return ctx.inputs.size() > i && ctx.inputs[i] ? ctx.in(i).data<float>() : nullptr;
  }
  float* output_or_null(const RunContext& ctx, size_t i) const {
    return ctx.outputs.size() > i && ctx.outputs[i] ? ctx.out(i).data<float>() : nullptr;
  }

  void init_states(const RunContext& ctx, const Group& g, float* scratch) const {
    const float* h0 = input_or_null(ctx, 5);
    const float* c0 = cell_ == Cell::kLstm ? input_or_null(ctx, 6) : nullptr;
    float* h = h_at(scratch, g.dir, 0);
    float* c = c_of(scratch, g.dir);
    const size_t bytes = static_cast<size_t>(g.units) * sizeof(float);
    for (int64_t b = 0; b < s_.batch; ++b) {
      float* hb = h + b * s_.hidden + g.first;
      float* cb = c + b * s_.hidden + g.first;
      if (h0) std::memcpy(hb, h0 + state_row(g.dir, b) * s_.hidden + g.first, bytes);
      else std::memset(hb, 0, bytes);
      if (c0) std::memcpy(cb, c0 + state_row(g.dir, b) * s_.hidden + g.first, bytes);
      else std::memset(cb, 0, bytes);
    }
  }

  // xw[(t * batch + b), :] = X[t, b] W^T + biases, whatever X's layout.
  void project_input(const RunContext& ctx, const Group& g, float* scratch) const {
    const vec::GemmKernels& gk = vec::vec_kernels().gemm;
    const int64_t n = s_.gates() * g.units;
    vec::GemmArgs a;
    a.k = s_.input;
    a.n = n;
    a.b_packed = g.w_packed.data<float>();
    a.bias = g.bias.data();
    a.lda = s_.input;
    a.prefetch_b = false;
    const float* x = ctx.in(0).data<float>();
    float* xw = scratch + g.xw;
    if (s_.layout == 0) {  // rows already in (t, b) order
      a.a = x;
      a.m = s_.seq * s_.batch;
      a.c = xw;
      a.ldc = n;
      vec::packed_gemm_on_this_thread(gk, a);
      return;
    }
    for (int64_t b = 0; b < s_.batch; ++b) {  // [batch, seq, input]: batch item b's steps, rows batch apart
      a.a = x + b * s_.seq * s_.input;
      a.m = s_.seq;
      a.c = xw + b * n;
      a.ldc = s_.batch * n;
      vec::packed_gemm_on_this_thread(gk, a);
    }
  }

  // q = A B for the batch's rows of A (rows `hidden` apart), a panel of B
  // (R^T's columns) at a time, first to last on even steps and last to
  // first on odd ones. A group's R^T is read whole every step; where it is
  // a little larger than the L2, reading it in the same order every step
  // missed the L2 for nearly all of it (each line is evicted just before
  // its turn comes again), while back and forth each step starts with the
  // lines the last one read last, still there: LSTM 512 at batch 1 (4 MiB
  // of R^T on one thread, 2 MiB on each of two) ran 0.78-0.80 of its time,
  // GRU 512 0.75 at one thread, with or without ANVIL_MAX_ISA=avx2, on a 2
  // MiB L2. A panel at a time, the recency order is the panels' on every
  // ISA, whatever its k-blocks; and prefetching the next panel (which
  // these products did where R^T outgrew the L2) is left to that order.
  void multiply_state(const float* a, const Tensor& b_packed, int64_t n, float* q, int64_t step) const {
    const vec::GemmKernels& gk = vec::vec_kernels().gemm;
    vec::GemmArgs m;
    m.a = a;
    m.lda = s_.hidden;
    m.m = s_.batch;
    m.k = s_.hidden;
    m.n = n;
    m.b_packed = b_packed.data<float>();
    m.c = q;
    m.ldc = n;
    m.prefetch_b = false;
    const int64_t panels = ceil_div(n, int64_t{gk.nr});
    for (int64_t i = 0; i < panels; ++i) {
      const int64_t panel = step % 2 == 0 ? i : panels - 1 - i;
      vec::packed_gemm_panels_on_this_thread(gk, m, panel, panel + 1);
    }
  }

  bool past_end(const int32_t* lens, int64_t b, int64_t t) const { return lens && t >= lens[b]; }

  // Y[t, d, b] for the group's units (layout 1: Y[b, t, d]).
  float* y_row(const RunContext& ctx, const Group& g, int64_t t, int64_t b) const {
    float* y = output_or_null(ctx, 0);
    if (!y) return nullptr;
    const int64_t row = s_.layout ? (b * s_.seq + t) * s_.dirs + g.dir : (t * s_.dirs + g.dir) * s_.batch + b;
    return y + row * s_.hidden + g.first;
  }

  // The step's products and cells; for GRU without linear_before_reset, its
  // gates and r * h (second_phase finishes it).
  void first_phase(const RunContext& ctx, const Group& g, float* scratch, int64_t step) const {
    const vec::RecurrentKernels& k = vec::vec_kernels().recurrent;
    const int64_t H = s_.hidden, U = g.units, t = time_of(g.dir, step);
    const int64_t n = (two_phases() ? 2 : s_.gates()) * U, xw_ld = s_.gates() * U;
    const float* h = h_at(scratch, g.dir, step);
    float* h_next = h_at(scratch, g.dir, step + 1);
    float* q = scratch + g.q;
    multiply_state(h, g.r_packed, n, q, step);
    const int32_t* lens = ctx.inputs.size() > 4 && ctx.inputs[4] ? ctx.in(4).data<int32_t>() : nullptr;
    const float* p = cell_ == Cell::kLstm ? input_or_null(ctx, 7) : nullptr;
    for (int64_t b = 0; b < s_.batch; ++b) {
      const float* hb = h + b * H + g.first;
      float* hn = h_next + b * H + g.first;
      if (past_end(lens, b, t)) {  // this sequence has ended: zeros out, state held
        std::memcpy(hn, hb, static_cast<size_t>(U) * sizeof(float));
        if (float* y = y_row(ctx, g, t, b)) std::memset(y, 0, static_cast<size_t>(U) * sizeof(float));
        continue;
      }
      const float* xw = scratch + g.xw + (t * s_.batch + b) * xw_ld;
      const float* qb = q + b * n;
      switch (cell_) {
        case Cell::kRnn: k.rnn_cell(xw, qb, U, s_.clip, hn); break;
        case Cell::kLstm:
          k.lstm_cell(xw, qb, U, s_.clip, s_.input_forget, p ? p + g.dir * 3 * H + g.first : nullptr, H,
                      c_of(scratch, g.dir) + b * H + g.first, hn);
          break;
        case Cell::kGru: {
          float* z = scratch + g.z + b * U;
          float* r = two_phases() ? rh_of(scratch, g.dir) + b * H + g.first : scratch + g.r + b * U;
          k.gru_gates(xw, qb, U, s_.clip, two_phases() ? hb : nullptr, z, r);
          if (two_phases()) continue;  // second_phase
          k.gru_output(xw + 2 * U, qb + 2 * U, g.rb_h.empty() ? nullptr : g.rb_h.data(), r, z, hb, U, s_.clip, hn);
          break;
        }
      }
      if (float* y = y_row(ctx, g, t, b)) std::memcpy(y, hn, static_cast<size_t>(U) * sizeof(float));
    }
  }

  // GRU without linear_before_reset: (r * h) R_h^T, once every unit's r * h is written.
  void second_phase(const RunContext& ctx, const Group& g, float* scratch, int64_t step) const {
    const vec::RecurrentKernels& k = vec::vec_kernels().recurrent;
    const int64_t H = s_.hidden, U = g.units, t = time_of(g.dir, step);
    float* q = scratch + g.q;
    multiply_state(rh_of(scratch, g.dir), g.rh_packed, U, q, step);
    const int32_t* lens = ctx.inputs.size() > 4 && ctx.inputs[4] ? ctx.in(4).data<int32_t>() : nullptr;
    const float* h = h_at(scratch, g.dir, step);
    float* h_next = h_at(scratch, g.dir, step + 1);
    for (int64_t b = 0; b < s_.batch; ++b) {
      if (past_end(lens, b, t)) continue;  // first_phase held the state
      const float* xw = scratch + g.xw + (t * s_.batch + b) * 3 * U;
      float* hn = h_next + b * H + g.first;
      k.gru_output(xw + 2 * U, q + b * U, g.rb_h.empty() ? nullptr : g.rb_h.data(), nullptr, scratch + g.z + b * U,
                   h + b * H + g.first, U, s_.clip, hn);
      if (float* y = y_row(ctx, g, t, b)) std::memcpy(y, hn, static_cast<size_t>(U) * sizeof(float));
    }
  }

  void write_final_states(const RunContext& ctx, const Group& g, float* scratch) const {
    float* y_h = output_or_null(ctx, 1);
    float* y_c = cell_ == Cell::kLstm ? output_or_null(ctx, 2) : nullptr;
    const float* h = h_at(scratch, g.dir, s_.seq);
    const float* c = c_of(scratch, g.dir);
    const size_t bytes = static_cast<size_t>(g.units) * sizeof(float);
    for (int64_t b = 0; b < s_.batch; ++b) {
      const int64_t row = state_row(g.dir, b) * s_.hidden + g.first;
      if (y_h) std::memcpy(y_h + row, h + b * s_.hidden + g.first, bytes);
      if (y_c) std::memcpy(y_c + row, c + b * s_.hidden + g.first, bytes);
    }
  }

  Cell cell_;
  RecurrentSpec s_;
  std::vector<Group> groups_;
  bool whole_directions_ = false;  // one group per direction: no barriers (run)
  int64_t states_ = 0, state_floats_ = 0, scratch_floats_ = 0;
};

ANVIL_REGISTER_KERNEL("RNN", kVec, [](const ir::Node&) -> std::unique_ptr<Kernel> {
  return std::make_unique<VecRecurrent>(Cell::kRnn);
});
ANVIL_REGISTER_KERNEL("GRU", kVec, [](const ir::Node&) -> std::unique_ptr<Kernel> {
  return std::make_unique<VecRecurrent>(Cell::kGru);
});
ANVIL_REGISTER_KERNEL("LSTM", kVec, [](const ir::Node&) -> std::unique_ptr<Kernel> {
  return std::make_unique<VecRecurrent>(Cell::kLstm);
});

}  // namespace
}  // namespace anvil::kernels
