// The per-ISA cells of the recurrent ops (VecKernels::recurrent). Included
// after vec_kernels_impl.h (sigmoid_fast_vec, exp_of_minus_abs,
// reciprocal_1_to_2, for_row_vectors, load_n, store_n) and gemm_impl.h
// (clamp_vec), inside the same anonymous namespace.

// tanh(v) as sign(v) (1 - e) / (1 + e), e = exp(-2 |v|): within a few ulp
// of 1 for large |v|, and within about 1e-7 absolutely near 0, where 1 - e
// cancels; NaN stays NaN.
inline VF tanh_vec(VF v) {
  const VF e = exp_of_minus_abs(v + v);
  const VF t = (1.f - e) * reciprocal_1_to_2(1.f + e);
  const VF signed_t = v < 0.f ? -t : t;
  return v == v ? signed_t : v;
}

// The activations' input: clipped to [-clip, clip] where clip >= 0.
inline VF rnn_clip(VF v, float clip) { return clip >= 0 ? clamp_vec(v, -clip, clip) : v; }

inline void rnn_cell_impl(const float* xw, const float* q, int64_t units, float clip, float* h) {
  for_row_vectors(units, [&](int64_t j, int64_t n) {
    store_n(h + j, tanh_vec(rnn_clip(load_n(xw + j, n) + load_n(q + j, n), clip)), n);
  });
}

inline void lstm_cell_impl(const float* xw, const float* q, int64_t units, float clip, bool input_forget,
                           const float* p, int64_t p_ld, float* c, float* h) {
  for_row_vectors(units, [&](int64_t j, int64_t n) {
    auto gate = [&](int g) { return load_n(xw + g * units + j, n) + load_n(q + g * units + j, n); };
    const VF c_prev = load_n(c + j, n);
    VF i_pre = gate(0), f_pre = gate(2);
    if (p) {
      i_pre += load_n(p + j, n) * c_prev;
      f_pre += load_n(p + 2 * p_ld + j, n) * c_prev;
    }
    const VF i = sigmoid_fast_vec(rnn_clip(i_pre, clip));
    const VF f = input_forget ? 1.f - i : sigmoid_fast_vec(rnn_clip(f_pre, clip));
    const VF c_new = f * c_prev + i * tanh_vec(rnn_clip(gate(3), clip));
    VF o_pre = gate(1);
    if (p) o_pre += load_n(p + p_ld + j, n) * c_new;
    const VF o = sigmoid_fast_vec(rnn_clip(o_pre, clip));
    store_n(c + j, c_new, n);
    store_n(h + j, o * tanh_vec(c_new), n);
  });
}

inline void gru_gates_impl(const float* xw, const float* q, int64_t units, float clip, const float* h_prev, float* z,
                           float* r) {
  for_row_vectors(units, [&](int64_t j, int64_t n) {
    auto gate = [&](int g) { return load_n(xw + g * units + j, n) + load_n(q + g * units + j, n); };
    store_n(z + j, sigmoid_fast_vec(rnn_clip(gate(0), clip)), n);
    const VF rv = sigmoid_fast_vec(rnn_clip(gate(1), clip));
    store_n(r + j, h_prev ? rv * load_n(h_prev + j, n) : rv, n);
  });
}

inline void gru_output_impl(const float* xw_h, const float* q_h, const float* rb_h, const float* r, const float* z,
                            const float* h_prev, int64_t units, float clip, float* h) {
  for_row_vectors(units, [&](int64_t j, int64_t n) {
    VF a = load_n(q_h + j, n);
    if (rb_h) a += load_n(rb_h + j, n);
    if (r) a *= load_n(r + j, n);
    const VF candidate = tanh_vec(rnn_clip(load_n(xw_h + j, n) + a, clip));
    const VF zv = load_n(z + j, n);
    store_n(h + j, (1.f - zv) * candidate + zv * load_n(h_prev + j, n), n);
  });
}
