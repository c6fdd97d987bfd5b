// Index tuples into tensors: GatherND, ScatterND, ScatterElements and the
// deprecated Scatter (ScatterElements without a reduction).
//
// Indices may be negative (counted from the end). They are checked at run
// time, before any element is written, and an index out of range is one
// clear error, never a write out of bounds. The scatters copy the data, then
// apply each update in order (so with reduction "none" the last duplicate
// index wins, as in ONNX's reference).
#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

int64_t index_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kInt64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i];
}

// An index into an axis of `dim`, made non-negative; throws when out of range.
int64_t checked_index(int64_t v, int64_t dim, const char* op) {
  ANVIL_CHECK(v >= -dim && v < dim, ErrorKind::kInvalidArgument, "{}: index {} is out of range for an axis of size {}",
              op, v, dim);
  return v < 0 ? v + dim : v;
}

enum class ScatterReduce { kNone, kAdd, kMul, kMax, kMin };

ScatterReduce reduction_of(const ir::Node& node) {
  const std::string r = node.attrs.get_string("reduction", "none");
  return r == "add" ? ScatterReduce::kAdd : r == "mul" ? ScatterReduce::kMul : r == "max" ? ScatterReduce::kMax
         : r == "min" ? ScatterReduce::kMin : ScatterReduce::kNone;
}

template <typename T>
T combine(ScatterReduce r, T old, T update) {
  if (r == ScatterReduce::kNone) return update;
  if constexpr (std::is_same_v<T, bool>) {
    return r == ScatterReduce::kAdd || r == ScatterReduce::kMax ? (old || update) : (old && update);
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    const float a = static_cast<float>(old), b = static_cast<float>(update);
    return r == ScatterReduce::kAdd ? T(a + b) : r == ScatterReduce::kMul ? T(a * b)
           : r == ScatterReduce::kMax ? (a >= b ? old : update) : (a <= b ? old : update);
  } else {
    return r == ScatterReduce::kAdd ? static_cast<T>(old + update) : r == ScatterReduce::kMul ? static_cast<T>(old * update)
           : r == ScatterReduce::kMax ? std::max(old, update) : std::min(old, update);
  }
}

// Element offsets in `data` of each index tuple (the last axis of `indices`),
// in units of the slice they address; batch_dims leading axes are shared.
std::vector<int64_t> tuple_offsets(const Shape& data, const Tensor& indices, int64_t batch_dims, const char* op) {
  const Shape& is = indices.shape();
  const int64_t k = is.back();
  const int64_t tuples = shape_numel(Shape(is.begin(), is.end() - 1));
  const int64_t batches = shape_numel(Shape(data.begin(), data.begin() + batch_dims));
  const int64_t per_batch = batches ? tuples / batches : 0;
  // Strides over the indexed axes, in slices; a batch spans all of them.
  std::vector<int64_t> strides(static_cast<size_t>(k));
  int64_t span = 1;
  for (int64_t j = k; j-- > 0;) {
    strides[static_cast<size_t>(j)] = span;
    span *= data[static_cast<size_t>(batch_dims + j)];
  }
  std::vector<int64_t> offsets(static_cast<size_t>(tuples));
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = per_batch ? (t / per_batch) * span : 0;
    for (int64_t j = 0; j < k; ++j)
      off += checked_index(index_at(indices, t * k + j), data[static_cast<size_t>(batch_dims + j)], op) *
             strides[static_cast<size_t>(j)];
    offsets[static_cast<size_t>(t)] = off;
  }
  return offsets;
}

class GatherNDKernel : public Kernel {
 public:
  explicit GatherNDKernel(const ir::Node& node) : batch_dims_(node.attrs.get_int("batch_dims", 0)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& data = ctx.input_shape(0);
    const int64_t k = ctx.input_shape(1).back();  // the schema checked batch_dims + k <= rank
    slice_ = shape_numel(Shape(data.begin() + batch_dims_ + k, data.end()));
    elem_ = dtype_size(ctx.input_dtype(0));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const Tensor& data = ctx.in(0);
    const std::vector<int64_t> offsets = tuple_offsets(data.shape(), ctx.in(1), batch_dims_, "GatherND");
    const size_t bytes = static_cast<size_t>(slice_) * elem_;
    const auto* src = static_cast<const unsigned char*>(data.raw());
    auto* dst = static_cast<unsigned char*>(ctx.out(0).raw());
    for (size_t t = 0; t < offsets.size(); ++t)
      if (bytes) std::memcpy(dst + t * bytes, src + static_cast<size_t>(offsets[t]) * bytes, bytes);
  }

 private:
  int64_t batch_dims_;
  int64_t slice_ = 1;
  size_t elem_ = 0;
};

class ScatterNDKernel : public Kernel {
 public:
  explicit ScatterNDKernel(const ir::Node& node) : reduce_(reduction_of(node)) {}
  int inplace_input() const override { return 0; }  // run() copies the data first unless they share memory

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& data = ctx.input_shape(0);
    ANVIL_PREPARE_CHECK(ctx, !ctx.input_shape(1).empty(), ErrorKind::kInvalidArgument, "indices must have rank >= 1");
    const int64_t k = ctx.input_shape(1).back();  // the schema checked k <= rank and the updates' shape
    slice_ = shape_numel(Shape(data.begin() + k, data.end()));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const Tensor& data = ctx.in(0);
    const std::vector<int64_t> offsets = tuple_offsets(data.shape(), ctx.in(1), 0, "ScatterND");
    copy_if_distinct(ctx, 0);
    dispatch_dtype(data.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* out = ctx.out(0).data<T>();
      const T* updates = ctx.in(2).data<T>();
      for (size_t t = 0; t < offsets.size(); ++t)
        for (int64_t e = 0; e < slice_; ++e) {
          T& o = out[offsets[t] * slice_ + e];
          o = combine(reduce_, o, updates[static_cast<int64_t>(t) * slice_ + e]);
        }
    });
  }

 private:
  ScatterReduce reduce_;
  int64_t slice_ = 1;
};

class ScatterElementsKernel : public Kernel {
 public:
  explicit ScatterElementsKernel(const ir::Node& node) : reduce_(reduction_of(node)) {}
  int inplace_input() const override { return 0; }  // run() copies the data first unless they share memory

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& data = ctx.input_shape(0);
    axis_ = static_cast<size_t>(normalize_axis(ctx, ctx.attrs().get_int("axis", 0), static_cast<int64_t>(data.size())));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const Tensor& data = ctx.in(0);
    const Tensor& indices = ctx.in(1);
    const Shape& ds = data.shape();
    const Shape& is = indices.shape();
    const int64_t n = indices.numel();
    // Offsets of every update in the output, checked before anything is written.
    const std::vector<int64_t> strides = contiguous_strides(ds);
    std::vector<int64_t> offsets(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      int64_t rem = i, off = 0;
      for (size_t d = is.size(); d-- > 0;) {
        int64_t c = rem % is[d];
        rem /= is[d];
        if (d == axis_) c = checked_index(index_at(indices, i), ds[d], "ScatterElements");
        off += c * strides[d];
      }
      offsets[static_cast<size_t>(i)] = off;
    }
    copy_if_distinct(ctx, 0);
    dispatch_dtype(data.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* out = ctx.out(0).data<T>();
      const T* updates = ctx.in(2).data<T>();
      for (int64_t i = 0; i < n; ++i) {
        T& o = out[offsets[static_cast<size_t>(i)]];
        o = combine(reduce_, o, updates[i]);
      }
    });
  }

 private:
  ScatterReduce reduce_;
  size_t axis_ = 0;
};

}  // namespace

ANVIL_REGISTER_OP_VERSIONS("GatherND", 11, 13);
ANVIL_REGISTER_OP_VERSIONS("ScatterND", 11, 18);
ANVIL_REGISTER_OP_VERSIONS("ScatterElements", 11, 18);
ANVIL_REGISTER_OP_VERSIONS("Scatter", 9, 10);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("GatherND", kRef, GatherNDKernel, {kAll, dtype_bit(DType::kInt64)});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("ScatterND", kRef, ScatterNDKernel, {kAll, dtype_bit(DType::kInt64), kAll});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("ScatterElements", kRef, ScatterElementsKernel, {kAll, kInt32And64, kAll});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("Scatter", kRef, ScatterElementsKernel, {kAll, kInt32And64, kAll});

}  // namespace anvil::kernels
