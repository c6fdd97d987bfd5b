// Shape-growing and index ops of sequence models: Expand, Tile, Range,
// GatherElements, Trilu and CumSum.
//
// Expand and Tile move elements by size; every output size is computed with
// checked arithmetic and checked against the allocation cap before any work,
// since repeats and shapes come from the model or from run-time values.
#include <cmath>
#include <cstring>

#include "core/checked.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {
namespace {

// Copies a broadcast view (strides of 0 on repeated axes) into a dense output.
void copy_broadcast(const unsigned char* src, unsigned char* dst, const Shape& out,
                    const std::vector<int64_t>& strides, size_t elem) {
  const int64_t n = shape_numel(out);
  if (n == 0) return;
  const size_t rank = out.size();
  const int64_t inner = rank ? out.back() : 1, rows = n / inner;
  const int64_t inner_stride = rank ? strides.back() : 0;
#pragma omp parallel for if (n > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t off = 0, rem = r;
    for (size_t d = rank >= 1 ? rank - 1 : 0; d-- > 0;) {
      off += (rem % out[d]) * strides[d];
      rem /= out[d];
    }
    unsigned char* o = dst + static_cast<size_t>(r * inner) * elem;
    if (inner_stride == 1) {
      std::memcpy(o, src + static_cast<size_t>(off) * elem, static_cast<size_t>(inner) * elem);
    } else {
      for (int64_t j = 0; j < inner; ++j)
        std::memcpy(o + static_cast<size_t>(j) * elem, src + static_cast<size_t>(off + j * inner_stride) * elem, elem);
    }
  }
}

class ExpandKernel : public Kernel {
 public:
  explicit ExpandKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const TensorType& x = ctx.input_type(0);
    out_ = ctx.output_shape(0);
    check_allocation(shape_nbytes(out_, x.dtype), ctx.node().describe() + ": the expanded output " + shape_str(out_));
    strides_ = broadcast_strides(x.shape, out_);
    elem_ = dtype_size(x.dtype);
    return ctx.output_types();
  }
  void run(const RunContext& ctx) const override {
    copy_broadcast(static_cast<const unsigned char*>(ctx.in(0).raw()), static_cast<unsigned char*>(ctx.out(0).raw()),
                   out_, strides_, elem_);
  }

 private:
  Shape out_;
  std::vector<int64_t> strides_;
  size_t elem_ = 0;
};

// Tile is a broadcast of the input viewed as [r0, d0, r1, d1, ...] with stride 0 on each r.
class TileKernel : public Kernel {
 public:
  explicit TileKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const TensorType& x = ctx.input_type(0);
    const Shape& out = ctx.output_shape(0);  // the schema checked the repeats
    std::vector<int64_t> repeats = tensor_to_ints(ctx.require_constant(1, "repeats"));
    std::vector<int64_t> in_strides = contiguous_strides(x.shape);
    view_.clear();
    strides_.clear();
    for (size_t d = 0; d < repeats.size(); ++d) {
      view_.push_back(repeats[d]);
      strides_.push_back(0);
      view_.push_back(x.shape[d]);
      strides_.push_back(in_strides[d]);
    }
    check_allocation(shape_nbytes(out, x.dtype), ctx.node().describe() + ": the tiled output " + shape_str(out));
    elem_ = dtype_size(x.dtype);
    return ctx.output_types();
  }
  void run(const RunContext& ctx) const override {
    copy_broadcast(static_cast<const unsigned char*>(ctx.in(0).raw()), static_cast<unsigned char*>(ctx.out(0).raw()),
                   view_, strides_, elem_);
  }

 private:
  Shape view_;
  std::vector<int64_t> strides_;
  size_t elem_ = 0;
};

// Range(start, limit, delta): the output length depends on the values.
class RangeKernel : public Kernel {
 public:
  explicit RangeKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    dtype_ = ctx.input_dtype(0);
    ANVIL_PREPARE_CHECK(ctx, dtype_in(dtype_, kFloats | kHalfs | kSignedInts), ErrorKind::kUnsupported,
                        "dtype {} is not supported", dtype_name(dtype_));
    for (size_t i = 0; i < 3; ++i) {
      ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(i) == dtype_, ErrorKind::kInvalidModel,
                          "start, limit and delta must share one dtype");
      ANVIL_PREPARE_CHECK(ctx, shape_numel(ctx.input_shape(i)) == 1, ErrorKind::kInvalidArgument,
                          "input {} must be a scalar, got shape {}", i, shape_str(ctx.input_shape(i)));
    }
    start_ = scalar(ctx.require_constant(0, "start"));
    double limit = scalar(ctx.require_constant(1, "limit"));
    delta_ = scalar(ctx.require_constant(2, "delta"));
    ANVIL_PREPARE_CHECK(ctx, delta_ != 0, ErrorKind::kInvalidArgument, "delta must not be 0");
    if (ctx.output_known(0)) {
      count_ = ctx.output_shape(0)[0];  // integer ranges: the schema's exact length
    } else {  // floating-point ranges are sized here, from the values
      double count = std::ceil((limit - start_) / delta_);
      ANVIL_PREPARE_CHECK(ctx, std::isfinite(count) && count < 9.0e18, ErrorKind::kInvalidArgument,
                          "range({}, {}, {}) has no finite length", start_, limit, delta_);
      count_ = count > 0 ? static_cast<int64_t>(count) : 0;
    }
    check_allocation(shape_nbytes({count_}, dtype_), ctx.node().describe() + ": the range output");
    return {{dtype_, {count_}}};
  }
  void run(const RunContext& ctx) const override {
    dispatch_dtype(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* out = ctx.out(0).data<T>();
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        // Integer ranges add delta repeatedly, as the ONNX reference does.
        T v = static_cast<T>(start_), d = static_cast<T>(delta_);
        for (int64_t i = 0; i < count_; ++i, v = static_cast<T>(v + d)) out[i] = v;
      } else if constexpr (std::is_same_v<T, double>) {
        for (int64_t i = 0; i < count_; ++i) out[i] = start_ + static_cast<double>(i) * delta_;
      } else if constexpr (!std::is_same_v<T, bool>) {
        // numpy's arange: start + i * delta in double, then rounded (16-bit
        // floats through float32, which is opset 27's default stash_type).
        for (int64_t i = 0; i < count_; ++i) out[i] = T(static_cast<float>(start_ + static_cast<double>(i) * delta_));
      }
    });
  }

 private:
  static double scalar(const Tensor& t) {
    return dispatch_dtype(t.dtype(), [&](auto tag) -> double {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_class_v<T>) return static_cast<double>(static_cast<float>(t.data<T>()[0]));
      else return static_cast<double>(t.data<T>()[0]);
    });
  }
  DType dtype_ = DType::kUndefined;
  double start_ = 0, delta_ = 1;
  int64_t count_ = 0;
};

class GatherElementsKernel : public Kernel {
 public:
  explicit GatherElementsKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const TensorType& data = ctx.input_type(0);
    const TensorType& idx = ctx.input_type(1);
    ANVIL_PREPARE_CHECK(ctx, idx.dtype == DType::kInt64 || idx.dtype == DType::kInt32, ErrorKind::kInvalidModel,
                        "indices must be int32 or int64, got {}", dtype_name(idx.dtype));
    // The schema checked the indices' shape against the data's.
    const int64_t rank = static_cast<int64_t>(data.shape.size());
    axis_ = static_cast<size_t>(normalize_axis(ctx, ctx.attrs().get_int("axis", 0), rank));
    data_shape_ = data.shape;
    out_ = ctx.output_shape(0);
    elem_ = dtype_size(data.dtype);
    idx64_ = idx.dtype == DType::kInt64;
    return ctx.output_types();
  }
  void run(const RunContext& ctx) const override {
    const int64_t n = shape_numel(out_);
    const int64_t dim = data_shape_[axis_];
    auto index = [&](int64_t i) {
      return idx64_ ? ctx.in(1).data<int64_t>()[i] : static_cast<int64_t>(ctx.in(1).data<int32_t>()[i]);
    };
    for (int64_t i = 0; i < n; ++i) {  // validated before the parallel copy: nothing may throw inside it
      int64_t v = index(i);
      ANVIL_CHECK(v >= -dim && v < dim, ErrorKind::kInvalidArgument, "GatherElements: index {} is out of range for "
                  "axis {} of size {}", v, axis_, dim);
    }
    std::vector<int64_t> data_strides = contiguous_strides(data_shape_);
    const auto* src = static_cast<const unsigned char*>(ctx.in(0).raw());
    auto* dst = static_cast<unsigned char*>(ctx.out(0).raw());
    const size_t rank = out_.size();
#pragma omp parallel for if (n > 32768)
    for (int64_t i = 0; i < n; ++i) {
      int64_t rem = i, off = 0;
      for (size_t d = rank; d-- > 0;) {
        int64_t c = rem % out_[d];
        rem /= out_[d];
        if (d == axis_) {
          c = index(i);
          if (c < 0) c += dim;
        }
        off += c * data_strides[d];
      }
      std::memcpy(dst + static_cast<size_t>(i) * elem_, src + static_cast<size_t>(off) * elem_, elem_);
    }
  }

 private:
  size_t axis_ = 0;
  Shape data_shape_, out_;
  size_t elem_ = 0;
  bool idx64_ = true;
};

// Trilu: keeps the upper (upper=1) or lower triangle of the last two axes,
// shifted by k; the rest becomes 0.
class TriluKernel : public Kernel {
 public:
  explicit TriluKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const TensorType& x = ctx.input_type(0);  // rank >= 2: checked by the schema
    upper_ = ctx.attrs().get_int("upper", 1) != 0;
    k_ = 0;
    if (ctx.has_input(1)) {
      const Tensor& k = ctx.require_constant(1, "k");
      ANVIL_PREPARE_CHECK(ctx, k.numel() == 1, ErrorKind::kInvalidArgument, "k must be a scalar");
      k_ = tensor_to_ints(k)[0];
    }
    shape_ = x.shape;
    elem_ = dtype_size(x.dtype);
    return ctx.output_types();
  }
  int inplace_input() const override { return 0; }
  void run(const RunContext& ctx) const override {
    const int64_t rows = shape_[shape_.size() - 2], cols = shape_.back();
    const int64_t mats = rows != 0 && cols != 0 ? shape_numel(shape_) / (rows * cols) : 0;
    const auto* src = static_cast<const unsigned char*>(ctx.in(0).raw());
    auto* dst = static_cast<unsigned char*>(ctx.out(0).raw());
#pragma omp parallel for collapse(2) if (mats * rows * cols > 32768)
    for (int64_t m = 0; m < mats; ++m)
      for (int64_t r = 0; r < rows; ++r) {
        const size_t row = static_cast<size_t>((m * rows + r) * cols) * elem_;
        for (int64_t c = 0; c < cols; ++c) {
          bool keep = upper_ ? c - r >= k_ : c - r <= k_;
          unsigned char* o = dst + row + static_cast<size_t>(c) * elem_;
          if (keep) std::memmove(o, src + row + static_cast<size_t>(c) * elem_, elem_);
          else std::memset(o, 0, elem_);
        }
      }
  }

 private:
  bool upper_ = true;
  int64_t k_ = 0;
  Shape shape_;
  size_t elem_ = 0;
};

// CumSum and CumProd along an axis (exclusive: without the element itself;
// reverse: from the end).
class CumSumKernel : public Kernel {
 public:
  CumSumKernel(const ir::Node&, bool product) : product_(product) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const TensorType& x = ctx.input_type(0);
    ANVIL_PREPARE_CHECK(ctx, dtype_in(x.dtype, kFloats | kSignedInts | kUnsignedInts), ErrorKind::kUnsupported,
                        "dtype {} is not supported", dtype_name(x.dtype));
    const Tensor& axis = ctx.require_constant(1, "axis");
    ANVIL_PREPARE_CHECK(ctx, axis.numel() == 1, ErrorKind::kInvalidArgument, "axis must be a scalar");
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    ANVIL_PREPARE_CHECK(ctx, rank >= 1, ErrorKind::kInvalidArgument, "input must have rank >= 1");
    const size_t a = static_cast<size_t>(normalize_axis(ctx, tensor_to_ints(axis)[0], rank));
    exclusive_ = ctx.attrs().get_int("exclusive", 0) != 0;
    reverse_ = ctx.attrs().get_int("reverse", 0) != 0;
    len_ = x.shape[a];
    outer_ = inner_ = 1;
    for (size_t d = 0; d < a; ++d) outer_ *= x.shape[d];
    for (size_t d = a + 1; d < x.shape.size(); ++d) inner_ *= x.shape[d];
    dtype_ = x.dtype;
    return ctx.output_types();
  }
  void run(const RunContext& ctx) const override {
    dispatch_dtype(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
        const T* x = ctx.in(0).data<T>();
        T* y = ctx.out(0).data<T>();
#pragma omp parallel for collapse(2) if (outer_ * inner_ * len_ > 32768)
        for (int64_t o = 0; o < outer_; ++o)
          for (int64_t i = 0; i < inner_; ++i) {
            T acc = product_ ? T(1) : T(0);
            for (int64_t s = 0; s < len_; ++s) {
              const int64_t j = reverse_ ? len_ - 1 - s : s;
              const int64_t at = (o * len_ + j) * inner_ + i;
              const T v = x[at];
              if (exclusive_) {
                y[at] = acc;
                acc = step(acc, v);
              } else {
                acc = step(acc, v);
                y[at] = acc;
              }
            }
          }
      }
    });
  }

 private:
  bool exclusive_ = false, reverse_ = false;
  int64_t len_ = 0, outer_ = 1, inner_ = 1;
  DType dtype_ = DType::kUndefined;
  // The next running sum or product; integers wrap instead of overflowing (undefined).
  template <typename T>
  T step(T acc, T v) const {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<decltype(T() + 0)>;
      return static_cast<T>(product_ ? static_cast<U>(acc) * static_cast<U>(v) : static_cast<U>(acc) + static_cast<U>(v));
    } else {
      return product_ ? acc * v : acc + v;
    }
  }

  bool product_ = false;
};

// ReverseSequence: for each batch entry b, the first sequence_lens[b] steps
// along time_axis reversed, the rest copied.
class ReverseSequenceKernel : public Kernel {
 public:
  explicit ReverseSequenceKernel(const ir::Node& node)
      : batch_axis_(node.attrs.get_int("batch_axis", 1)), time_axis_(node.attrs.get_int("time_axis", 0)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    shape_ = ctx.input_shape(0);  // the schema checked the axes and sequence_lens [batch]
    elem_ = dtype_size(ctx.input_dtype(0));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const Tensor& lens = ctx.in(1);
    const auto b_axis = static_cast<size_t>(batch_axis_), t_axis = static_cast<size_t>(time_axis_);
    const int64_t steps = shape_[t_axis];
    for (int64_t b = 0; b < lens.numel(); ++b) {
      const int64_t n = lens.data<int64_t>()[b];
      ANVIL_CHECK(n >= 0 && n <= steps, ErrorKind::kInvalidArgument,
                  "ReverseSequence: sequence length {} is out of range [0, {}]", n, steps);
    }
    const std::vector<int64_t> strides = contiguous_strides(shape_);
    const int64_t total = shape_numel(shape_);
    const auto* src = static_cast<const unsigned char*>(ctx.in(0).raw());
    auto* dst = static_cast<unsigned char*>(ctx.out(0).raw());
    for (int64_t i = 0; i < total; ++i) {
      const int64_t b = (i / strides[b_axis]) % shape_[b_axis], t = (i / strides[t_axis]) % shape_[t_axis];
      const int64_t n = lens.data<int64_t>()[b];
      const int64_t from = t < n ? i + (n - 1 - 2 * t) * strides[t_axis] : i;
      std::memcpy(dst + static_cast<size_t>(i) * elem_, src + static_cast<size_t>(from) * elem_, elem_);
    }
  }

 private:
  int64_t batch_axis_, time_axis_;
  Shape shape_;
  size_t elem_ = 0;
};

ANVIL_REGISTER_KERNEL_CLASS("Expand", kRef, ExpandKernel);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("ReverseSequence", kRef, ReverseSequenceKernel, {kAll, dtype_bit(DType::kInt64)});
ANVIL_REGISTER_KERNEL_CLASS("Tile", kRef, TileKernel);
ANVIL_REGISTER_OP_VERSIONS("Range", 11, 27);  // 27: 16-bit floats, stash_type (float32 here)
ANVIL_REGISTER_KERNEL_CLASS_TYPED("Range", kRef, RangeKernel, {kFloats | kHalfs | kSignedInts});
ANVIL_REGISTER_KERNEL_CLASS("GatherElements", kRef, GatherElementsKernel);
ANVIL_REGISTER_KERNEL_CLASS("Trilu", kRef, TriluKernel);
ANVIL_REGISTER_KERNEL("CumSum", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<CumSumKernel>(n, false);
});
ANVIL_REGISTER_OP_VERSIONS("CumProd", 26, 28);
ANVIL_REGISTER_KERNEL("CumProd", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<CumSumKernel>(n, true);
});

}  // namespace
}  // namespace anvil::kernels
