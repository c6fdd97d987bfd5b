// BroadcastPlan: iterates a numpy-broadcast output with two operands, for the
// elementwise, comparison and logic kernels.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "anvil/tensor.h"
#include "kernels/ref/common.h"

namespace anvil::kernels {

// Iterates an output shape with two broadcast operands, after collapsing
// adjacent dimensions that are contiguous (or broadcast) in both.
class BroadcastPlan {
 public:
  BroadcastPlan() = default;
  BroadcastPlan(const Shape& out, const Shape& a, const Shape& b) {
    numel_ = shape_numel(out);
    if (numel_ == 0) return;
    std::vector<int64_t> sa = broadcast_strides(a, out), sb = broadcast_strides(b, out);
    for (size_t d = 0; d < out.size(); ++d) {
      if (out[d] == 1) continue;  // size-1 dims contribute nothing
      if (!dims_.empty() && sa_.back() == sa[d] * out[d] && sb_.back() == sb[d] * out[d]) {
        dims_.back() *= out[d];
        sa_.back() = sa[d];
        sb_.back() = sb[d];
      } else {
        dims_.push_back(out[d]);
        sa_.push_back(sa[d]);
        sb_.push_back(sb[d]);
      }
    }
    if (dims_.empty()) {  // a single element
      dims_ = {1};
      sa_ = {0};
      sb_ = {0};
    }
  }

  // o[i] = f(a[..], b[..]) for every output element i. o may alias a or b when
  // that operand is not broadcast: each element is read before it is written.
  template <typename TA, typename TB, typename TO, typename F>
  void apply(const TA* a, const TB* b, TO* o, F f) const {
    if (numel_ == 0) return;
    const int64_t inner = dims_.back(), rows = numel_ / inner;
    const int64_t ia = sa_.back(), ib = sb_.back();
    if (rows == 1) {  // one flat run (same shapes, or a scalar operand): split it into chunks
      constexpr int64_t kChunk = 16384;
      const int64_t chunks = (inner + kChunk - 1) / kChunk;
#pragma omp parallel for if (inner > 32768)
      for (int64_t c = 0; c < chunks; ++c) {
        int64_t begin = c * kChunk;
        row(a + begin * ia, b + begin * ib, o + begin, std::min(kChunk, inner - begin), ia, ib, f);
      }
      return;
    }
    const int rank = static_cast<int>(dims_.size());
#pragma omp parallel for if (numel_ > 32768)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t rem = r, oa = 0, ob = 0;
      for (int d = rank - 2; d >= 0; --d) {
        int64_t c = rem % dims_[d];
        rem /= dims_[d];
        oa += c * sa_[d];
        ob += c * sb_[d];
      }
      row(a + oa, b + ob, o + r * inner, inner, ia, ib, f);
    }
  }

 private:
  // One contiguous output row; the stride patterns get their own loops so the
  // compiler vectorises the common ones (same shape, scalar operand).
  template <typename TA, typename TB, typename TO, typename F>
  static void row(const TA* a, const TB* b, TO* o, int64_t n, int64_t ia, int64_t ib, F f) {
    if (ia == 1 && ib == 1) {
      for (int64_t j = 0; j < n; ++j) o[j] = f(a[j], b[j]);
    } else if (ia == 1 && ib == 0) {
      const TB vb = *b;
      for (int64_t j = 0; j < n; ++j) o[j] = f(a[j], vb);
    } else if (ia == 0 && ib == 1) {
      const TA va = *a;
      for (int64_t j = 0; j < n; ++j) o[j] = f(va, b[j]);
    } else {
      for (int64_t j = 0; j < n; ++j) o[j] = f(a[j * ia], b[j * ib]);
    }
  }

  int64_t numel_ = 0;
  std::vector<int64_t> dims_, sa_, sb_;
};

}  // namespace anvil::kernels
