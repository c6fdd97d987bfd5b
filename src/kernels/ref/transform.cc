// Reference kernels for ops that move data around: Transpose, Concat, Split,
// Slice, Pad, CenterCropPad, DepthToSpace, SpaceToDepth and Gather.
//
// None of them looks at values, so they move elements by size
// (1, 2, 4 or 8 bytes) instead of being instantiated per dtype. Transpose,
// Slice, DepthToSpace and SpaceToDepth are all one strided copy: the output is
// walked in order and each output axis has a (possibly negative) input stride.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <omp.h>

#include "core/checked.h"
#include "ir/dim_math.h"
#include "kernels/concat_ranges.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"
#include "kernels/thread_share.h"

namespace anvil::kernels {
namespace {

constexpr int64_t kParallelThreshold = 32768;
constexpr int64_t kShortRow = 8;  // elements: a last axis shorter is walked as a block's outer loop

// Calls fn(TypeTag<U>{}) with the unsigned integer type as wide as one element.
template <typename Fn>
void dispatch_size(size_t elem, Fn&& fn) {
  switch (elem) {
    case 1: return fn(TypeTag<uint8_t>{});
    case 2: return fn(TypeTag<uint16_t>{});
    case 4: return fn(TypeTag<uint32_t>{});
    case 8: return fn(TypeTag<uint64_t>{});
    default: fail(ErrorKind::kInternal, "no element type of {} bytes", elem);
  }
}

// out[i] = in[offset + sum_a index_a(i) * strides[a]] over the output in row-major order.
class StridedCopy {
 public:
  void init(const Shape& out_shape, const std::vector<int64_t>& in_strides, int64_t offset, size_t elem) {
    elem_ = elem;
    offset_ = offset;
    numel_ = shape_numel(out_shape);
    shape_.clear();
    strides_.clear();
    // Drop unit axes and merge an axis into its outer neighbour when they step
    // through the input contiguously, so the inner loop is as long as possible.
    for (size_t a = 0; a < out_shape.size(); ++a) {
      if (out_shape[a] == 1) continue;
      if (!shape_.empty() && strides_.back() == in_strides[a] * out_shape[a]) {
        shape_.back() *= out_shape[a];
        strides_.back() = in_strides[a];
        continue;
      }
      shape_.push_back(out_shape[a]);
      strides_.push_back(in_strides[a]);
    }
    if (shape_.empty()) {
      shape_ = {1};
      strides_ = {0};
    }
  }

  // The output as rows, each a 2-D block of its last two axes ([mid, inner],
  // mid = 1 where the last axis is long). Each thread takes a run of rows and
  // steps an odometer over the outer axes: index arithmetic per row would
  // cost more than the copy where rows are short. A short last axis
  // (DepthToSpace's, the blocksize long) is walked as the block's outer loop,
  // so the inner loop runs along the longer axis before it.
  void run(const void* in, void* out) const {
    if (numel_ == 0) return;
    // Only where the block's inner loop then reads closer (DepthToSpace's
    // planes are far apart, its pixels adjacent) and the blocks still give
    // every thread work: one block per image would run on one thread.
    const int64_t mid_len = shape_.size() >= 2 ? shape_[shape_.size() - 2] : 1;
    const bool two_d = shape_.size() >= 2 && shape_.back() < kShortRow &&
                       std::abs(strides_[shape_.size() - 2]) < std::abs(strides_.back()) &&
                       numel_ / (mid_len * shape_.back()) >= 4 * static_cast<int64_t>(omp_get_max_threads());
    const int outer_rank = static_cast<int>(shape_.size()) - (two_d ? 2 : 1);
    const int64_t inner = shape_.back(), step = strides_.back();
    const int64_t mid = two_d ? shape_[shape_.size() - 2] : 1, mid_step = two_d ? strides_[shape_.size() - 2] : 0;
    const int64_t block = mid * inner, rows = numel_ / block;
    dispatch_size(elem_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = static_cast<const T*>(in) + offset_;
      T* dst = static_cast<T*>(out);
#pragma omp parallel if (numel_ > kParallelThreshold)
      {
        const auto [r0, r1] = share(rows, omp_get_thread_num(), omp_get_num_threads());
        std::vector<int64_t> index(static_cast<size_t>(std::max(outer_rank, 1)));
        int64_t rem = r0, base = 0;
        for (int a = outer_rank - 1; a >= 0; --a) {
          index[static_cast<size_t>(a)] = rem % shape_[static_cast<size_t>(a)];
          base += index[static_cast<size_t>(a)] * strides_[static_cast<size_t>(a)];
          rem /= shape_[static_cast<size_t>(a)];
        }
        for (int64_t r = r0; r < r1; ++r) {
          const T* s = src + base;
          T* d = dst + r * block;
          if (two_d) {
            for (int64_t j = 0; j < inner; ++j)
              for (int64_t m = 0; m < mid; ++m) d[m * inner + j] = s[m * mid_step + j * step];
          } else if (step == 1) {
            std::memcpy(d, s, static_cast<size_t>(inner) * sizeof(T));
          } else {
            for (int64_t i = 0; i < inner; ++i) d[i] = s[i * step];
          }
          for (int a = outer_rank - 1; a >= 0; --a) {  // the next row's index
            const size_t u = static_cast<size_t>(a);
            base += strides_[u];
            if (++index[u] < shape_[u]) break;
            base -= index[u] * strides_[u];
            index[u] = 0;
          }
        }
      }
    });
  }

 private:
  Shape shape_;
  std::vector<int64_t> strides_;
  int64_t offset_ = 0, numel_ = 0;
  size_t elem_ = 0;
};

// Base of the kernels that are one StridedCopy of input 0.
class StridedKernel : public Kernel {
 public:
  void run(const RunContext& ctx) const override { copy_.run(ctx.in(0).raw(), ctx.out(0).raw()); }

 protected:
  StridedCopy copy_;
};

class TransposeKernel : public StridedKernel {
 public:
  explicit TransposeKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& in = ctx.input_shape(0);
    const size_t rank = in.size();
    std::vector<int64_t> perm = ctx.attrs().get_ints("perm");
    if (!ctx.attrs().has("perm"))
      for (size_t i = 0; i < rank; ++i) perm.push_back(static_cast<int64_t>(rank - 1 - i));
    // The schema checked that perm is a permutation.
    std::vector<int64_t> in_strides = contiguous_strides(in), strides(rank);
    for (size_t i = 0; i < rank; ++i) strides[i] = in_strides[static_cast<size_t>(perm[i])];
    copy_.init(ctx.output_shape(0), strides, 0, dtype_size(ctx.input_dtype(0)));
    return ctx.output_types();
  }
};

class ConcatKernel : public Kernel {
 public:
  explicit ConcatKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    // The schema checked the inputs' dtypes, ranks and the dims off the axis.
    const Shape& out = ctx.output_shape(0);
    const size_t axis = static_cast<size_t>(normalize_axis(ctx, ctx.attrs().get_int("axis", 0),
                                                           static_cast<int64_t>(out.size())));
    const size_t elem = dtype_size(ctx.input_dtype(0));
    int64_t inner = 1;
    for (size_t i = axis + 1; i < out.size(); ++i) inner *= out[i];
    chunk_bytes_.clear();
    for (size_t i = 0; i < ctx.num_inputs(); ++i)
      chunk_bytes_.push_back(static_cast<size_t>(ctx.input_shape(i)[axis] * inner) * elem);
    outer_ = 1;
    for (size_t i = 0; i < axis; ++i) outer_ *= out[i];
    row_bytes_ = static_cast<size_t>(out[axis] * inner) * elem;
    return ctx.output_types();
  }

  std::vector<size_t> input_offsets_in_output() const override {
    return outer_ != 1 ? std::vector<size_t>{} : offsets_end_to_end(chunk_bytes_);
  }

  void run(const RunContext& ctx) const override {
    auto* dst = static_cast<unsigned char*>(ctx.out(0).raw());
    const size_t n = chunk_bytes_.size();
#pragma omp parallel for if (static_cast<int64_t>(row_bytes_) * outer_ > kParallelThreshold * 4)
    for (int64_t o = 0; o < outer_; ++o) {
      unsigned char* d = dst + static_cast<size_t>(o) * row_bytes_;
      for (size_t i = 0; i < n; ++i) {
        const size_t c = chunk_bytes_[i];
        const auto* s = static_cast<const unsigned char*>(ctx.in(i).raw()) + static_cast<size_t>(o) * c;
        if (c && s != d) std::memcpy(d, s, c);  // equal: written in place by its producer
        d += c;
      }
    }
  }

 private:
  std::vector<size_t> chunk_bytes_;  // bytes of input i per outer index
  size_t row_bytes_ = 0;
  int64_t outer_ = 0;
};

class SplitKernel : public Kernel {
 public:
  explicit SplitKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const TensorType& x = ctx.input_type(0);
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    const size_t axis = static_cast<size_t>(normalize_axis(ctx, ctx.attrs().get_int("axis", 0), rank));
    // The schema gives each part's size (and checked they sum to the axis).
    const std::vector<TensorType> outs = ctx.output_types();
    const int64_t dim = x.shape[axis];
    const size_t elem = dtype_size(x.dtype);
    int64_t inner = 1;
    for (size_t i = axis + 1; i < x.shape.size(); ++i) inner *= x.shape[i];
    outer_ = 1;
    for (size_t i = 0; i < axis; ++i) outer_ *= x.shape[i];
    row_bytes_ = static_cast<size_t>(dim * inner) * elem;
    chunk_bytes_.clear();
    for (size_t o = 0; o < outs.size(); ++o)
      chunk_bytes_.push_back(static_cast<size_t>(ctx.output_shape(o)[axis] * inner) * elem);
    return outs;
  }

  void run(const RunContext& ctx) const override {
    const auto* src = static_cast<const unsigned char*>(ctx.in(0).raw());
    const size_t n = chunk_bytes_.size();
#pragma omp parallel for if (static_cast<int64_t>(row_bytes_) * outer_ > kParallelThreshold * 4)
    for (int64_t o = 0; o < outer_; ++o) {
      const unsigned char* s = src + static_cast<size_t>(o) * row_bytes_;
      for (size_t i = 0; i < n; ++i) {
        const size_t c = chunk_bytes_[i];
        if (c) std::memcpy(static_cast<unsigned char*>(ctx.out(i).raw()) + static_cast<size_t>(o) * c, s, c);
        s += c;
      }
    }
  }

 private:
  std::vector<size_t> chunk_bytes_;  // bytes of output i per outer index
  size_t row_bytes_ = 0;
  int64_t outer_ = 0;
};

class SliceKernel : public StridedKernel {
 public:
  explicit SliceKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& in = ctx.input_shape(0);
    const int64_t rank = static_cast<int64_t>(in.size());
    std::vector<int64_t> starts, ends, axes, steps;
    if (ctx.opset() < 10) {
      ANVIL_PREPARE_CHECK(ctx, ctx.attrs().has("starts") && ctx.attrs().has("ends"), ErrorKind::kInvalidModel,
                          "attributes 'starts' and 'ends' are required");
      starts = ctx.attrs().get_ints("starts");
      ends = ctx.attrs().get_ints("ends");
      axes = ctx.attrs().get_ints("axes");
    } else {
      starts = tensor_to_ints(ctx.require_constant(1, "starts"));
      ends = tensor_to_ints(ctx.require_constant(2, "ends"));
      if (ctx.has_input(3)) axes = tensor_to_ints(ctx.require_constant(3, "axes"));
      if (ctx.has_input(4)) steps = tensor_to_ints(ctx.require_constant(4, "steps"));
    }
    const size_t n = starts.size();
    // Empty axes and steps take their defaults, as in the schema.
    if (axes.empty())
      for (size_t i = 0; i < n; ++i) axes.push_back(static_cast<int64_t>(i));
    if (steps.empty()) steps.assign(n, 1);
    // The schema checked the lengths, axes and steps, and gives the output's extents.
    const Shape& out = ctx.output_shape(0);
    std::vector<int64_t> in_strides = contiguous_strides(in), strides = in_strides;
    int64_t offset = 0;
    for (size_t i = 0; i < n; ++i) {
      const size_t a = static_cast<size_t>(normalize_axis(ctx, axes[i], rank));
      const ir::SliceRange r = ir::slice_range(in[a], starts[i], ends[i], steps[i]);
      ANVIL_INTERNAL_CHECK(r.length == out[a]);
      offset += r.first * in_strides[a];
      // A huge step only ever takes one element; keep the stride from overflowing.
      strides[a] = r.length > 1 ? steps[i] * in_strides[a] : 0;
    }
    if (shape_numel(out) == 0) offset = 0;
    copy_.init(out, strides, offset, dtype_size(ctx.input_dtype(0)));
    return ctx.output_types();
  }
};

class PadKernel : public Kernel {
 public:
  explicit PadKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const TensorType& x = ctx.input_type(0);
    const size_t rank = x.shape.size();
    const std::string mode = ctx.attrs().get_string("mode", "constant");
    ANVIL_PREPARE_CHECK(ctx, mode == "constant" || mode == "reflect" || mode == "edge" || mode == "wrap",
                        ErrorKind::kInvalidModel, "mode '{}' is not constant, reflect, edge or wrap", mode);
    elem_ = dtype_size(x.dtype);
    std::vector<int64_t> pads = read_pads(ctx, rank);
    for (size_t a = 0; a < rank && mode != "constant"; ++a)
      ANVIL_PREPARE_CHECK(ctx, x.shape[a] > 0 || (pads[a] <= 0 && pads[a + rank] <= 0), ErrorKind::kInvalidArgument,
                          "mode '{}' cannot pad axis {}, which is empty", mode, a);
    fill_ = 0;
    if (ctx.opset() < 11) {
      fill_ = value_bytes(x.dtype, ctx.attrs().get_float("value", 0.f));
    } else if (ctx.has_input(2)) {
      const TensorType& v = ctx.input_type(2);
      ANVIL_PREPARE_CHECK(ctx, v.dtype == x.dtype, ErrorKind::kInvalidModel,
                          "constant_value is {} but the data is {}", dtype_name(v.dtype), dtype_name(x.dtype));
      ANVIL_PREPARE_CHECK(ctx, shape_numel(v.shape) <= 1, ErrorKind::kInvalidModel,
                          "constant_value must be a scalar, got shape {}", shape_str(v.shape));
    }

    // The schema checked the pads against the input's dims.
    const Shape& out = ctx.output_shape(0);
    // Scalars are padded like a [1] tensor with no padding, which keeps run() uniform.
    out_shape_ = rank ? out : Shape{1};
    in_strides_ = rank ? contiguous_strides(x.shape) : std::vector<int64_t>{1};
    maps_.assign(out_shape_.size(), {});
    if (!rank) maps_[0] = {0};
    // The index maps below are as long as the output's axes: refuse an output
    // that cannot exist before building them. An empty output needs none, and
    // its other axes may be of any length (a file's pads of 2^60: the fuzzer).
    check_allocation(shape_nbytes(out, x.dtype), ctx.node().describe() + ": the padded output " + shape_str(out));
    if (shape_numel(out) == 0) return ctx.output_types();
    int64_t map_entries = 0;
    for (size_t a = 0; a < rank; ++a) map_entries += out[a];  // each at most the output's size: no overflow
    check_allocation(static_cast<size_t>(map_entries) * sizeof(int64_t), ctx.node().describe() + ": the index maps");
    for (size_t a = 0; a < rank; ++a)
      for (int64_t o = 0; o < out[a]; ++o) maps_[a].push_back(source_index(mode, o - pads[a], x.shape[a]));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const int64_t numel = shape_numel(out_shape_);
    if (numel == 0) return;
    uint64_t fill = fill_;
    if (ctx.inputs.size() > 2 && ctx.inputs[2] && ctx.inputs[2]->numel() > 0)
      std::memcpy(&fill, ctx.inputs[2]->raw(), elem_);
    const int64_t inner = out_shape_.back(), rows = numel / inner;
    const int outer_rank = static_cast<int>(out_shape_.size()) - 1;
    const std::vector<int64_t>& last = maps_.back();
    dispatch_size(elem_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T value;
      std::memcpy(&value, &fill, sizeof(T));
      const T* src = static_cast<const T*>(ctx.in(0).raw());
      T* dst = static_cast<T*>(ctx.out(0).raw());
#pragma omp parallel for if (numel > kParallelThreshold)
      for (int64_t r = 0; r < rows; ++r) {
        int64_t rem = r, base = 0;
        bool padding = false;
        for (int a = outer_rank - 1; a >= 0; --a) {
          const size_t ua = static_cast<size_t>(a);
          const int64_t m = maps_[ua][static_cast<size_t>(rem % out_shape_[ua])];
          rem /= out_shape_[ua];
          padding |= m < 0;
          base += m * in_strides_[ua];
        }
        T* d = dst + r * inner;
        if (padding) {
          std::fill(d, d + inner, value);
          continue;
        }
        const T* s = src + base;
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t m = last[static_cast<size_t>(i)];
          d[i] = m < 0 ? value : s[m];
        }
      }
    });
  }

 private:
  // Pads as [begin_0, ..., begin_{r-1}, end_0, ..., end_{r-1}] over all axes.
  static std::vector<int64_t> read_pads(const PrepareContext& ctx, size_t rank) {
    std::vector<int64_t> given;
    if (ctx.opset() < 11) {
      ANVIL_PREPARE_CHECK(ctx, ctx.attrs().has("pads"), ErrorKind::kInvalidModel, "attribute 'pads' is required");
      given = ctx.attrs().get_ints("pads");
    } else {
      given = tensor_to_ints(ctx.require_constant(1, "pads"));
    }
    std::vector<int64_t> axes;
    if (ctx.opset() >= 11 && ctx.has_input(3)) {  // opset 18 axes, accepted when present
      for (int64_t a : tensor_to_ints(ctx.require_constant(3, "axes")))
        axes.push_back(normalize_axis(ctx, a, static_cast<int64_t>(rank)));
    } else {
      for (size_t a = 0; a < rank; ++a) axes.push_back(static_cast<int64_t>(a));
    }
    ANVIL_PREPARE_CHECK(ctx, given.size() == 2 * axes.size(), ErrorKind::kInvalidModel,
                        "pads {} must have {} entries (2 per axis)", shape_str(given), 2 * axes.size());
    std::vector<int64_t> pads(2 * rank, 0);
    for (size_t i = 0; i < axes.size(); ++i) {
      pads[static_cast<size_t>(axes[i])] = given[i];
      pads[static_cast<size_t>(axes[i]) + rank] = given[i + axes.size()];
    }
    return pads;
  }

  // Input index feeding position i (relative to the data's start) of an axis of size d; -1 for the pad value.
  static int64_t source_index(const std::string& mode, int64_t i, int64_t d) {
    if (i >= 0 && i < d) return i;
    if (mode == "constant") return -1;
    if (mode == "edge") return i < 0 ? 0 : d - 1;
    if (mode == "wrap") return ((i % d) + d) % d;  // numpy "wrap": the axis repeats
    if (d == 1) return 0;
    // reflect (numpy "reflect"): the sequence 0..d-1..1 repeats with period 2(d-1).
    const int64_t period = 2 * (d - 1);
    int64_t m = i % period;
    if (m < 0) m += period;
    return m < d ? m : period - m;
  }

  // The bytes of `v` converted to `dtype`.
  static uint64_t value_bytes(DType dtype, float v) {
    uint64_t bits = 0;
    dispatch_dtype(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T t;
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        t = T(v);
      } else if constexpr (std::is_same_v<T, bool>) {
        t = v != 0.f;
      } else {
        t = static_cast<T>(v);
      }
      std::memcpy(&bits, &t, sizeof(T));
    });
    return bits;
  }

  size_t elem_ = 0;
  uint64_t fill_ = 0;  // pad value bytes when not given by an input at run time
  Shape out_shape_;
  std::vector<int64_t> in_strides_;
  std::vector<std::vector<int64_t>> maps_;  // per axis: output index -> input index or -1
};

// CenterCropPad (opset 18): each axis cropped or zero-padded to its new size,
// centred (an odd difference leaves the extra element at the end).
class CenterCropPadKernel : public Kernel {
 public:
  explicit CenterCropPadKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    if (!ctx.output_known(0)) ctx.require_constant(1, "shape");  // the schema reads the sizes from it
    const Shape& in = ctx.input_shape(0);
    const Shape& out = ctx.output_shape(0);
    check_allocation(shape_nbytes(out, ctx.input_dtype(0)), ctx.node().describe() + ": the output");
    box_.assign(in.size(), 0);
    src_start_.assign(in.size(), 0);
    dst_start_.assign(in.size(), 0);
    for (size_t a = 0; a < in.size(); ++a) {
      box_[a] = std::min(in[a], out[a]);
      src_start_[a] = std::max<int64_t>(0, (in[a] - out[a]) / 2);
      dst_start_[a] = std::max<int64_t>(0, (out[a] - in[a]) / 2);
    }
    in_strides_ = contiguous_strides(in);
    out_strides_ = contiguous_strides(out);
    elem_ = dtype_size(ctx.input_dtype(0));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    Tensor& y = ctx.out(0);
    if (y.nbytes()) std::memset(y.raw(), 0, y.nbytes());
    const int64_t count = shape_numel(box_);
    if (count == 0) return;
    const auto* src = static_cast<const char*>(ctx.in(0).raw());
    auto* dst = static_cast<char*>(y.raw());
    if (box_.empty()) {
      std::memcpy(dst, src, elem_);
      return;
    }
    const size_t rank = box_.size();
    const int64_t inner = box_.back(), rows = count / inner;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t rem = r, s = src_start_.back(), d = dst_start_.back();
      for (size_t a = rank - 1; a-- > 0;) {
        const int64_t i = rem % box_[a];
        rem /= box_[a];
        s += (src_start_[a] + i) * in_strides_[a];
        d += (dst_start_[a] + i) * out_strides_[a];
      }
      std::memcpy(dst + static_cast<size_t>(d) * elem_, src + static_cast<size_t>(s) * elem_,
                  static_cast<size_t>(inner) * elem_);
    }
  }

 private:
  Shape box_;
  std::vector<int64_t> src_start_, dst_start_, in_strides_, out_strides_;
  size_t elem_ = 1;
};

// DepthToSpace / SpaceToDepth on [N, C, H, W] as a 6-D strided copy.
class DepthSpaceKernel : public StridedKernel {
 public:
  DepthSpaceKernel(const ir::Node&, bool to_space) : to_space_(to_space) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);  // the schema checked it is 4-D and divides by the blocksize
    const int64_t b = ctx.attrs().get_int("blocksize", 0);
    const int64_t n = x[0], c = x[1], h = x[2], w = x[3];
    const int64_t sc = h * w, sh = w, sw = 1;
    const size_t elem = dtype_size(ctx.input_dtype(0));
    // SpaceToDepth has a mode since opset 28 (DCR, the earlier behaviour, by default).
    const std::string mode = ctx.attrs().get_string("mode", "DCR");
    ANVIL_PREPARE_CHECK(ctx, mode == "DCR" || mode == "CRD", ErrorKind::kInvalidModel,
                        "mode '{}' is not DCR or CRD", mode);
    const bool dcr = mode == "DCR";
    if (to_space_) {
      const int64_t co = c / (b * b);
      // Output walked as [n, co, h, i, w, j]: row h*b+i, column w*b+j. The input
      // channel is (i*b + j)*co + co_index in DCR and co_index*b*b + i*b + j in CRD.
      std::vector<int64_t> strides = {c * sc, (dcr ? 1 : b * b) * sc, sh, (dcr ? b * co : b) * sc, sw,
                                      (dcr ? co : 1) * sc};
      copy_.init({n, co, h, b, w, b}, strides, 0, elem);
      return ctx.output_types();
    }
    // DCR: output channel (i*b + j)*c + ci at (h', w') reads input (ci, h'*b + i, w'*b + j);
    // CRD: output channel ci*b*b + i*b + j.
    if (dcr) copy_.init({n, b, b, c, h / b, w / b}, {c * sc, sh, sw, sc, b * sh, b * sw}, 0, elem);
    else copy_.init({n, c, b, b, h / b, w / b}, {c * sc, sc, sh, sw, b * sh, b * sw}, 0, elem);
    return ctx.output_types();
  }

 private:
  bool to_space_;
};

// Index j of a run's indices as a position in [0, dim): negatives count from
// the end; the rest are clamped (prepare() checked the constant ones).
template <typename I>
inline int64_t gather_position(const I* indices, int64_t j, int64_t dim) {
  int64_t i = indices[j];
  i += i < 0 ? dim : 0;
  return std::clamp<int64_t>(i, 0, dim - 1);
}

// Every slice of `outer` rows: row o's j-th slice is row o's slice at
// indices[j]. Runs of indices moving about 4 KiB (one slice at least, 1024
// at most) are the parallel unit, so one row of many indices, or of a few
// large slices (an embedding lookup), spreads over the team too.
// `copy(to, from)` moves one slice: a typed assignment for slices of one
// element (a call to memcpy and a division per element made an inner-axis
// gather 4.6x ONNX Runtime's time), memcpy otherwise.
template <typename I, typename Copy>
void gather_slices(int64_t outer, int64_t dim, int64_t count, const I* indices, size_t slice_bytes, Copy copy) {
  const int64_t run = std::clamp<int64_t>(4096 / std::max<int64_t>(static_cast<int64_t>(slice_bytes), 1), 1, 1024);
  const int64_t runs = (count + run - 1) / run;
  const bool parallel = outer * count * static_cast<int64_t>(slice_bytes) > kParallelThreshold * 4;
#pragma omp parallel for collapse(2) if (parallel)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < runs; ++r) {
      const int64_t end = std::min(count, (r + 1) * run);
      for (int64_t j = r * run; j < end; ++j) copy(o * count + j, o * dim + gather_position(indices, j, dim));
    }
}

class GatherKernel : public Kernel {
 public:
  explicit GatherKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const TensorType& data = ctx.input_type(0);
    const TensorType& idx = ctx.input_type(1);
    ANVIL_PREPARE_CHECK(ctx, idx.dtype == DType::kInt64 || idx.dtype == DType::kInt32, ErrorKind::kInvalidModel,
                        "indices must be int32 or int64, got {}", dtype_name(idx.dtype));
    const int64_t rank = static_cast<int64_t>(data.shape.size());
    ANVIL_PREPARE_CHECK(ctx, rank >= 1, ErrorKind::kInvalidArgument, "data must have rank >= 1");
    const size_t axis = static_cast<size_t>(normalize_axis(ctx, ctx.attrs().get_int("axis", 0), rank));
    dim_ = data.shape[axis];
    count_ = shape_numel(idx.shape);
    idx64_ = idx.dtype == DType::kInt64;
    ANVIL_PREPARE_CHECK(ctx, dim_ > 0 || count_ == 0, ErrorKind::kInvalidArgument,
                        "cannot gather from axis {} of size 0", axis);
    // Indices known now are checked now; run() clamps the others instead of checking.
    if (const Tensor* t = ctx.constant(1)) {
      for (int64_t v : tensor_to_ints(*t))
        ANVIL_PREPARE_CHECK(ctx, v >= -dim_ && v < dim_, ErrorKind::kInvalidArgument,
                            "index {} is out of range for axis {} of size {}", v, axis, dim_);
    }
    outer_ = 1;
    for (size_t i = 0; i < axis; ++i) outer_ *= data.shape[i];
    int64_t inner = 1;
    for (size_t i = axis + 1; i < data.shape.size(); ++i) inner *= data.shape[i];
    slice_bytes_ = static_cast<size_t>(inner) * dtype_size(data.dtype);
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    // An empty output moves nothing, however many (empty) slices a file's dims count.
    if (slice_bytes_ == 0 || outer_ == 0 || count_ == 0) return;
    const void* src = ctx.in(0).raw();
    void* dst = ctx.out(0).raw();
    const void* indices = ctx.in(1).raw();
    if (idx64_)
      gather(src, dst, static_cast<const int64_t*>(indices));
    else
      gather(src, dst, static_cast<const int32_t*>(indices));
  }

  // Slices of one element move as that element's integer type.
  template <typename I>
  void gather(const void* src, void* dst, const I* indices) const {
    if (slice_bytes_ == 1 || slice_bytes_ == 2 || slice_bytes_ == 4 || slice_bytes_ == 8)
      return dispatch_size(slice_bytes_, [&](auto tag) {
        using U = typename decltype(tag)::type;
        const U* from = static_cast<const U*>(src);
        U* to = static_cast<U*>(dst);
        gather_slices(outer_, dim_, count_, indices, slice_bytes_,  // memcpy: a slice of two floats as one uint64_t
                      [&](int64_t t, int64_t f) { __builtin_memcpy(to + t, from + f, sizeof(U)); });
      });
    const auto* from = static_cast<const unsigned char*>(src);
    auto* to = static_cast<unsigned char*>(dst);
    gather_slices(outer_, dim_, count_, indices, slice_bytes_, [&](int64_t t, int64_t f) {
      std::memcpy(to + static_cast<size_t>(t) * slice_bytes_, from + static_cast<size_t>(f) * slice_bytes_,
                  slice_bytes_);
    });
  }

 private:
  int64_t outer_ = 0, dim_ = 0, count_ = 0;
  size_t slice_bytes_ = 0;
  bool idx64_ = true;
};

// anvil.ChannelShuffle (passes/fuse_channel_shuffle.cc), any element type:
// y[n, j * group + i] = x[n, i * C / group + j], each a plane of D... values.
class ChannelShuffleKernel : public Kernel {
 public:
  explicit ChannelShuffleKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);  // the schema checked rank >= 3 and C % group == 0
    group_ = ctx.attrs().get_int("group", 1);
    batch_ = x[0];
    channels_ = x[1];
    plane_bytes_ = shape_nbytes(Shape(x.begin() + 2, x.end()), ctx.input_dtype(0));
    return ctx.output_types();
  }
  void run(const RunContext& ctx) const override {
    if (plane_bytes_ == 0 || channels_ == 0) return;  // nothing to move (and no pointers to move it through)
    const auto* x = static_cast<const char*>(ctx.in(0).raw());
    auto* y = static_cast<char*>(ctx.out(0).raw());
    const int64_t per_group = channels_ / group_;
    for (int64_t n = 0; n < batch_; ++n)
      for (int64_t i = 0; i < group_; ++i)
        for (int64_t j = 0; j < per_group; ++j) {
          const size_t from = static_cast<size_t>(n * channels_ + i * per_group + j);
          const size_t to = static_cast<size_t>(n * channels_ + j * group_ + i);
          std::memcpy(y + to * plane_bytes_, x + from * plane_bytes_, plane_bytes_);
        }
  }

 private:
  int64_t group_ = 1, batch_ = 0, channels_ = 0;
  size_t plane_bytes_ = 0;
};

// anvil.TokensToImage and anvil.ImageToTokens (passes/tokens_as_image.cc)
// on plain data, any element type but strings: per batch item, a transpose
// of [positions, C] into [C, positions] (TokensToImage) or back, as
// Transpose's strided copy.
class TokensImageKernel : public Kernel {
 public:
  explicit TokensImageKernel(const ir::Node& node) : to_image_(node.op_type == "TokensToImage") {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    element_ = ctx.input_dtype(0) == DType::kString ? 0 : dtype_size(ctx.input_dtype(0));
    ANVIL_PREPARE_CHECK(ctx, element_ == 1 || element_ == 2 || element_ == 4 || element_ == 8, ErrorKind::kUnsupported,
                        "{} elements", dtype_name(ctx.input_dtype(0)));
    const Shape& x = ctx.input_shape(0);  // the schema checked rank >= 3
    // Each batch item's input as [rows, cols], read column by column.
    const int64_t cols = to_image_ ? x.back() : shape_numel(Shape(x.begin() + 2, x.end()));
    const int64_t rows = to_image_ ? shape_numel(Shape(x.begin() + 1, x.end() - 1)) : x[1];
    copy_.init({x[0], cols, rows}, {rows * cols, 1, cols}, 0, element_);
    return ctx.output_types();
  }
  void run(const RunContext& ctx) const override { copy_.run(ctx.in(0).raw(), ctx.out(0).raw()); }

 private:
  bool to_image_;
  size_t element_ = 0;
  StridedCopy copy_;
};

}  // namespace

// Versions after opset 17 that only add element types (float8, int4) Anvil does not have.
ANVIL_REGISTER_OP_VERSIONS("Transpose", 1, 21);
ANVIL_REGISTER_OP_VERSIONS("Pad", 2, 25);  // 18: axes; 19: wrap mode; later: types
ANVIL_REGISTER_OP_VERSIONS("Split", 2, 18);  // 18: num_outputs, a smaller last part
ANVIL_REGISTER_KERNEL_CLASS("Transpose", kRef, TransposeKernel);
ANVIL_REGISTER_KERNEL_CLASS("Concat", kRef, ConcatKernel);
ANVIL_REGISTER_KERNEL_CLASS("Split", kRef, SplitKernel);
ANVIL_REGISTER_KERNEL_CLASS("Slice", kRef, SliceKernel);
static Registrar channel_shuffle_ref("ChannelShuffle", Backend::kRef, factory_of<ChannelShuffleKernel>(), "anvil");
static Registrar tokens_to_image_ref("TokensToImage", Backend::kRef, factory_of<TokensImageKernel>(), "anvil");
static Registrar image_to_tokens_ref("ImageToTokens", Backend::kRef, factory_of<TokensImageKernel>(), "anvil");
ANVIL_REGISTER_KERNEL_CLASS("Pad", kRef, PadKernel);
ANVIL_REGISTER_KERNEL_CLASS("Gather", kRef, GatherKernel);
ANVIL_REGISTER_OP_VERSIONS("CenterCropPad", 18, 18);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("CenterCropPad", kRef, CenterCropPadKernel, {kAnyDType, kInt32And64});
// 28: SpaceToDepth gains DCR/CRD modes; both ops take every element type.
ANVIL_REGISTER_OP_VERSIONS("DepthToSpace", 1, 28);
ANVIL_REGISTER_OP_VERSIONS("SpaceToDepth", 1, 28);
ANVIL_REGISTER_KERNEL_TYPED("DepthToSpace", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<DepthSpaceKernel>(n, true);
}, {kAnyDType});
ANVIL_REGISTER_KERNEL_TYPED("SpaceToDepth", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<DepthSpaceKernel>(n, false);
}, {kAnyDType});

}  // namespace anvil::kernels
