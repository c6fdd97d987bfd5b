// Reference Gemm and MatMul (float32, float64, int32, int64, uint32, uint64;
// float16 and bfloat16 computed in float32 and rounded once).
//
// Both reduce to one routine that adds A' * B' into rows [i0, i1) of a
// row-major output, where A' and B' are strided views (so transposes cost
// nothing). With B' row-major it runs i-k-j in cache blocks of K and N, the
// innermost loop streaming one row of B' into one row of the output; with B'
// transposed the rows of B are contiguous in k, so it takes dot products.
// Work is split over (matrix, block of output rows).
#include <algorithm>
#include <initializer_list>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {
namespace {

constexpr int64_t kParallelThreshold = 32768;
constexpr int64_t kRowBlock = 16;
constexpr int64_t kKBlock = 128;
constexpr int64_t kNBlock = 512;

// A strided matrix view: element (r, c) is at data[r * rs + c * cs].
template <typename T>
struct View {
  const T* data;
  int64_t rs, cs;
  T at(int64_t r, int64_t c) const { return data[r * rs + c * cs]; }
};

// y[i, :] += sum_k a(i, k) * b(k, :) for i in [i0, i1); y is row-major with N columns.
template <typename T>
void gemm_rows(int64_t i0, int64_t i1, int64_t n, int64_t k, View<T> a, View<T> b, T* y) {
  if (b.cs == 1) {
    for (int64_t k0 = 0; k0 < k; k0 += kKBlock) {
      const int64_t k1 = std::min(k, k0 + kKBlock);
      for (int64_t j0 = 0; j0 < n; j0 += kNBlock) {
        const int64_t j1 = std::min(n, j0 + kNBlock);
        for (int64_t i = i0; i < i1; ++i) {
          T* yr = y + i * n;
          for (int64_t kk = k0; kk < k1; ++kk) {
            const T av = a.at(i, kk);
            const T* br = b.data + kk * b.rs;
            for (int64_t j = j0; j < j1; ++j) yr[j] += av * br[j];
          }
        }
      }
    }
    return;
  }
  for (int64_t i = i0; i < i1; ++i) {
    T* yr = y + i * n;
    for (int64_t j = 0; j < n; ++j) {
      T acc = 0;
      for (int64_t kk = 0; kk < k; ++kk) acc += a.at(i, kk) * b.at(kk, j);
      yr[j] += acc;
    }
  }
}

void check_dtypes(const PrepareContext& ctx, std::initializer_list<size_t> inputs) {
  DType dt = ctx.input_dtype(0);
  const DType allowed[] = {DType::kFloat32, DType::kFloat64, DType::kInt32,   DType::kInt64,
                           DType::kUInt32,  DType::kUInt64,  DType::kFloat16, DType::kBFloat16};
  ANVIL_PREPARE_CHECK(ctx, std::find(std::begin(allowed), std::end(allowed), dt) != std::end(allowed),
                      ErrorKind::kUnsupported,
                      "input A has dtype {}; the reference kernel supports float32, float64, float16, bfloat16, "
                      "int32, int64, uint32 and uint64",
                      dtype_name(dt));
  for (size_t i : inputs)
    if (ctx.has_input(i))
      ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(i) == dt, ErrorKind::kInvalidModel, "input {} has dtype {} but A has {}",
                          i, dtype_name(ctx.input_dtype(i)), dtype_name(dt));
}

template <typename Fn>
void dispatch_gemm_dtype(DType dt, Fn&& fn) {
  dispatch_dtype(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                  std::is_same_v<T, int64_t> || std::is_same_v<T, uint32_t> || std::is_same_v<T, uint64_t>) {
      fn(tag);
    }
  });
}

class GemmKernel : public Kernel {
 public:
  explicit GemmKernel(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    check_dtypes(ctx, {1, 2});
    const Shape& a = ctx.input_shape(0);
    trans_a_ = ctx.attrs().get_int("transA", 0) != 0;
    trans_b_ = ctx.attrs().get_int("transB", 0) != 0;
    alpha_ = ctx.attrs().get_float("alpha", 1.f);
    beta_ = ctx.attrs().get_float("beta", 1.f);
    const Shape& y = ctx.output_shape(0);
    m_ = y[0];
    n_ = y[1];
    k_ = trans_a_ ? a[0] : a[1];
    has_c_ = ctx.has_input(2);
    if (has_c_) c_strides_ = broadcast_strides(ctx.input_shape(2), y);
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const Tensor* c = has_c_ ? ctx.inputs[2] : nullptr;
    if (dtype_in(ctx.in(0).dtype(), kHalfs))
      return via_float32({&ctx.in(0), &ctx.in(1), c}, ctx.out(0), [&](const auto& w, float* y) {
        compute<float>(w[0].data(), w[1].data(), c ? w[2].data() : nullptr, y);
      });
    dispatch_gemm_dtype(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      compute<T>(ctx.in(0).data<T>(), ctx.in(1).data<T>(), c ? c->data<T>() : nullptr, ctx.out(0).data<T>());
    });
  }

 private:
  // alpha * acc + beta * c; integers stay exact when both factors are 1.
  template <typename T>
  T combine(T acc, const T* c) const {
    if constexpr (std::is_floating_point_v<T>) {
      T v = static_cast<T>(alpha_) * acc;
      return c ? v + static_cast<T>(beta_) * *c : v;
    } else {
      if (alpha_ == 1.f && (beta_ == 1.f || !c)) return c ? static_cast<T>(acc + *c) : acc;
      double v = static_cast<double>(alpha_) * static_cast<double>(acc);
      if (c) v += static_cast<double>(beta_) * static_cast<double>(*c);
      return static_cast<T>(v);
    }
  }

  template <typename T>
  void compute(const T* a, const T* b, const T* c, T* y) const {
    const View<T> av = trans_a_ ? View<T>{a, 1, m_} : View<T>{a, k_, 1};
    const View<T> bv = trans_b_ ? View<T>{b, 1, k_} : View<T>{b, n_, 1};
    const T* cp = beta_ != 0.f ? c : nullptr;  // beta = 0 ignores C, NaNs included
    const int64_t blocks = (m_ + kRowBlock - 1) / kRowBlock;
#pragma omp parallel for if (m_ * n_ * k_ > kParallelThreshold)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t i0 = blk * kRowBlock, i1 = std::min(m_, i0 + kRowBlock);
      std::fill(y + i0 * n_, y + i1 * n_, T(0));
      gemm_rows(i0, i1, n_, k_, av, bv, y);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = 0; j < n_; ++j)
          y[i * n_ + j] = combine(y[i * n_ + j], cp ? cp + i * c_strides_[0] + j * c_strides_[1] : nullptr);
    }
  }

  bool trans_a_ = false, trans_b_ = false, has_c_ = false;
  float alpha_ = 1.f, beta_ = 1.f;
  int64_t m_ = 0, n_ = 0, k_ = 0;
  std::vector<int64_t> c_strides_;
};

class MatMulKernel : public Kernel {
 public:
  explicit MatMulKernel(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    check_dtypes(ctx, {1});
    Shape a = ctx.input_shape(0), b = ctx.input_shape(1);
    // numpy: a 1-D A is a row vector, a 1-D B a column vector; the added dimension is dropped afterwards.
    if (a.size() == 1) a.insert(a.begin(), 1);
    if (b.size() == 1) b.push_back(1);
    m_ = a[a.size() - 2];
    k_ = a.back();
    n_ = b.back();
    const Shape a_batch(a.begin(), a.end() - 2), b_batch(b.begin(), b.end() - 2);
    const Shape& out = ctx.output_shape(0);
    const size_t batch_rank = std::max(a_batch.size(), b_batch.size());
    plan_batches(a_batch, b_batch, Shape(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(batch_rank)));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    if (dtype_in(ctx.in(0).dtype(), kHalfs))
      return via_float32({&ctx.in(0), &ctx.in(1)}, ctx.out(0),
                         [&](const auto& w, float* y) { compute<float>(w[0].data(), w[1].data(), y); });
    dispatch_gemm_dtype(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      compute<T>(ctx.in(0).data<T>(), ctx.in(1).data<T>(), ctx.out(0).data<T>());
    });
  }

 private:
  // Element offsets of A's and B's matrix for every output matrix.
  void plan_batches(const Shape& a_batch, const Shape& b_batch, const Shape& batch) {
    const int64_t count = shape_numel(batch);
    std::vector<int64_t> as = broadcast_strides(a_batch, batch), bs = broadcast_strides(b_batch, batch);
    a_offsets_.assign(static_cast<size_t>(count), 0);
    b_offsets_.assign(static_cast<size_t>(count), 0);
    for (int64_t idx = 0; idx < count; ++idx) {
      int64_t rem = idx, ao = 0, bo = 0;
      for (size_t d = batch.size(); d-- > 0;) {
        const int64_t i = rem % batch[d];
        rem /= batch[d];
        ao += i * as[d];
        bo += i * bs[d];
      }
      a_offsets_[static_cast<size_t>(idx)] = ao * m_ * k_;
      b_offsets_[static_cast<size_t>(idx)] = bo * k_ * n_;
    }
  }

  template <typename T>
  void compute(const T* a, const T* b, T* y) const {
    const int64_t count = static_cast<int64_t>(a_offsets_.size());
    const int64_t blocks = (m_ + kRowBlock - 1) / kRowBlock;
#pragma omp parallel for collapse(2) if (count * m_ * n_ * k_ > kParallelThreshold)
    for (int64_t mat = 0; mat < count; ++mat) {
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t i0 = blk * kRowBlock, i1 = std::min(m_, i0 + kRowBlock);
        T* ym = y + mat * m_ * n_;
        std::fill(ym + i0 * n_, ym + i1 * n_, T(0));
        const View<T> av{a + a_offsets_[static_cast<size_t>(mat)], k_, 1};
        const View<T> bv{b + b_offsets_[static_cast<size_t>(mat)], n_, 1};
        gemm_rows(i0, i1, n_, k_, av, bv, ym);
      }
    }
  }

  int64_t m_ = 0, n_ = 0, k_ = 0;
  std::vector<int64_t> a_offsets_, b_offsets_;
};

ANVIL_REGISTER_OP_VERSIONS("Gemm", 1, 13);  // 1-6: C required, `broadcast` (numpy's unidirectional rule covers it)
ANVIL_REGISTER_KERNEL_CLASS("Gemm", kRef, GemmKernel);
ANVIL_REGISTER_KERNEL_CLASS("MatMul", kRef, MatMulKernel);

}  // namespace
}  // namespace anvil::kernels
