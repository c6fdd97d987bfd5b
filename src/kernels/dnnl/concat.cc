// Concat on oneDNN (the dtypes oneDNN has: float32, bfloat16, int8, uint8, int32).
// When every tensor is dense in one dimension order (plain NCHW, NHWC between
// convolutions, or nChw8c / nChw16c with whole channel blocks), the copy is
// done here, as rows of bytes per input: oneDNN's simple_concat splits NHWC
// rows of a few hundred bytes between threads and took 4x longer with 2
// threads than with 1 (SqueezeNet), and ran nChw8c at 2 GB/s (SqueezeNet on
// AVX2: 23% of the run).
#include <algorithm>
#include <cstring>

#include <omp.h>

#include "kernels/concat_ranges.h"
#include "kernels/dnnl/common.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

using dnnl::memory;
namespace du = dnnl_util;

class DnnlConcat : public du::PrimitiveKernel {
 public:
  explicit DnnlConcat(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    DType d = ctx.input_dtype(0);
    // The schema checked ranks, dtypes and the dims off the axis.
    const Shape& out = ctx.output_shape(0);
    const int64_t axis = normalize_axis(ctx, ctx.attrs().get_int("axis", 0), static_cast<int64_t>(out.size()));
    srcs_.clear();
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      const Shape& s = ctx.input_shape(i);
      ANVIL_PREPARE_CHECK(ctx, shape_numel(s) > 0, ErrorKind::kUnsupported, "empty input");
      srcs_.push_back(du::plain_desc(s, d));
    }
    dst_ = du::plain_desc(out, d);
    in_layouts_.clear();
    if (keeps_incoming_layout(ctx)) {
      // Every input arrives in one blocked format: concatenate in it, without reorders.
      for (size_t i = 0; i < srcs_.size(); ++i) in_layouts_.push_back(ctx.incoming_layout(i));
    } else if (const du::Format format = d == DType::kFloat32 ? pixel_format(ctx) : nullptr) {
      for (size_t i = 0; i < srcs_.size(); ++i)
        in_layouts_.push_back(du::layout_of(format(ctx.input_shape(i)), ctx.input_shape(i), d));
    }
    if (!in_layouts_.empty()) {
      for (size_t i = 0; i < srcs_.size(); ++i) srcs_[i] = du::desc_of({d, ctx.input_shape(i), in_layouts_[i]});
      if (ctx.blocked_outputs_allowed()) dst_ = memory::desc(du::dims(out), du::data_type(d), memory::format_tag::any);
    }
    dnnl::concat::primitive_desc pd = [&] {
      try {
        return dnnl::concat::primitive_desc(dst_, static_cast<int>(axis), srcs_, du::engine(), du::user_scratchpad_attr());
      } catch (const dnnl::error& e) {
        ctx.fail(ErrorKind::kUnsupported, "oneDNN cannot run this case ({})", e.what());
      }
    }();
    create<dnnl::concat, dnnl::concat::primitive_desc>(ctx, [&] { return pd; });
    dst_ = pd.dst_desc();
    plan_row_copy(static_cast<int>(axis));
    std::vector<TensorType> types = ctx.output_types();
    types[0].layout = du::layout_of(dst_, out, d);
    return types;
  }

  Layout input_layout(size_t i) const override { return i < in_layouts_.size() ? in_layouts_[i] : nullptr; }
  std::vector<size_t> input_offsets_in_output() const override {
    return rows_ != 1 ? std::vector<size_t>{} : offsets_end_to_end(row_bytes_);
  }
  std::string layout_name() const override {
    return in_layouts_.empty() ? "plain" : kernels::layout_name(in_layouts_[0]);
  }

  void run(const RunContext& ctx) const override {
    if (rows_ > 0) return copy_rows(ctx);
    std::unordered_map<int, memory> args{{DNNL_ARG_DST, du::wrap(dst_, ctx.out(0).raw())}};
    for (size_t i = 0; i < srcs_.size(); ++i) args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)] = du::wrap(srcs_[i], ctx.in(i).raw());
    execute(args, ctx.scratch);
  }

 private:
  // The dims of `md` from outermost to innermost, when it is dense: no padding,
  // each stride the product of the extents inside it (a blocked dim's extent
  // is its number of blocks; the blocks themselves are innermost). Empty otherwise.
  struct DenseOrder {
    std::vector<int> order;
    std::vector<std::pair<int, int64_t>> blocks;  // (dim, block) innermost, as the format nests them
    std::vector<int64_t> extents;                 // per dim: dims / its blocks
    bool operator==(const DenseOrder& o) const { return order == o.order && blocks == o.blocks; }
  };
  static DenseOrder dense_order(const memory::desc& md) {
    const dnnl_memory_desc_t& d = md.data;
    if (d.format_kind != dnnl_blocked) return {};
    const auto& blocking = d.format_desc.blocking;
    DenseOrder dense;
    dense.extents.assign(d.dims, d.dims + d.ndims);
    int64_t expect = 1;  // the inner blocks' elements
    for (int k = 0; k < blocking.inner_nblks; ++k) {
      dense.blocks.emplace_back(blocking.inner_idxs[k], blocking.inner_blks[k]);
      dense.extents[static_cast<size_t>(blocking.inner_idxs[k])] /= blocking.inner_blks[k];
      expect *= blocking.inner_blks[k];
    }
    dense.order.resize(static_cast<size_t>(d.ndims));
    for (int i = 0; i < d.ndims; ++i) dense.order[static_cast<size_t>(i)] = i;
    const auto* strides = blocking.strides;
    std::stable_sort(dense.order.begin(), dense.order.end(), [&](int a, int b) { return strides[a] > strides[b]; });
    for (auto it = dense.order.rbegin(); it != dense.order.rend(); ++it) {
      const int64_t extent = dense.extents[static_cast<size_t>(*it)];
      if (d.padded_dims[*it] != d.dims[*it] || (extent > 1 && strides[*it] != expect)) return {};
      expect *= extent;
    }
    return dense;
  }

  // rows_ > 0 when every tensor is dense in the same order (and blocks): then
  // the output is rows_ rows, each the inputs' rows (row_bytes_[i]) side by
  // side. This includes a concat along blocked channels (nChw8c at batch 1 is
  // one row) when every input's channels fill whole blocks.
  void plan_row_copy(int axis) {
    const DenseOrder dense = dense_order(dst_);
    if (dense.order.empty()) return;
    for (const memory::desc& src : srcs_)
      if (!(dense_order(src) == dense)) return;
    int64_t rows = 1;
    for (int dim : dense.order) {
      if (dim == axis) break;
      rows *= dense.extents[static_cast<size_t>(dim)];
    }
    row_bytes_.clear();
    for (const memory::desc& src : srcs_) row_bytes_.push_back(src.get_size() / static_cast<size_t>(rows));
    rows_ = rows;
    impl_ = "rows";
  }

  void copy_rows(const RunContext& ctx) const {
    size_t out_row = 0;
    for (size_t b : row_bytes_) out_row += b;
    auto* dst = static_cast<unsigned char*>(ctx.out(0).raw());
    const size_t n = row_bytes_.size();
    if (rows_ >= 4 * omp_get_max_threads()) {
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < rows_; ++r) {
        unsigned char* to = dst + static_cast<size_t>(r) * out_row;
        for (size_t i = 0; i < n; ++i) {
          std::memcpy(to, static_cast<const unsigned char*>(ctx.in(i).raw()) + static_cast<size_t>(r) * row_bytes_[i],
                      row_bytes_[i]);
          to += row_bytes_[i];
        }
      }
      return;
    }
    // Few long rows (plain NCHW at batch 1): split each copy into blocks.
    constexpr size_t kBlock = size_t{1} << 16;
    for (int64_t r = 0; r < rows_; ++r) {
      unsigned char* to = dst + static_cast<size_t>(r) * out_row;
      for (size_t i = 0; i < n; ++i) {
        const auto* from = static_cast<const unsigned char*>(ctx.in(i).raw()) + static_cast<size_t>(r) * row_bytes_[i];
        if (from == to) {  // written in place by its producer (input_offsets_in_output)
          to += row_bytes_[i];
          continue;
        }
        const auto blocks = static_cast<int64_t>((row_bytes_[i] + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static) if (blocks > 1)
        for (int64_t k = 0; k < blocks; ++k) {
          const size_t at = static_cast<size_t>(k) * kBlock;
          std::memcpy(to + at, from + at, std::min(kBlock, row_bytes_[i] - at));
        }
        to += row_bytes_[i];
      }
    }
  }

  // Every input arrives in one blocked format ("aBcd8b"; the layouts differ in
  // their dims when the inputs differ along the axis, as a fire module's do).
  static bool keeps_incoming_layout(const PrepareContext& ctx) {
    if (!ctx.blocked_inputs_allowed() || !ctx.incoming_layout(0)) return false;
    for (size_t i = 1; i < ctx.num_inputs(); ++i)
      if (!ctx.incoming_layout(i) || ctx.incoming_layout(i)->name() != ctx.incoming_layout(0)->name()) return false;
    return true;
  }

  // Where float32 images arrive in different formats (YOLO's upsampled
  // maps in channel blocks beside NHWC ones from the backbone): the pixel
  // format (NHWC or channel blocks) that the most input bytes arrive in,
  // where it holds every input unpadded; the other inputs are reordered to
  // it, where in plain data every blocked input was reordered, and the
  // output back again for its readers. Null: none arrives in one, or it
  // does not hold them all, or the output must be plain (a graph output:
  // oneDNN's concat from blocks into plain data is its reference loop).
  static du::Format pixel_format(const PrepareContext& ctx) {
    if (!ctx.blocked_inputs_allowed() || !ctx.blocked_outputs_allowed()) return nullptr;
    du::Format best = nullptr;
    int64_t best_bytes = 0;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      const du::Format f = du::format_of(ctx.incoming_layout(i), ctx.input_shape(i));
      if (!f) continue;
      int64_t bytes = 0;
      for (size_t j = 0; j < ctx.num_inputs(); ++j)
        if (du::format_of(ctx.incoming_layout(j), ctx.input_shape(j)) == f) bytes += shape_numel(ctx.input_shape(j));
      if (bytes > best_bytes) {
        best = f;
        best_bytes = bytes;
      }
    }
    for (size_t i = 0; best && i < ctx.num_inputs(); ++i)
      if (!du::pixel_layout(best(ctx.input_shape(i))) || !du::layout_of(best(ctx.input_shape(i)), ctx.input_shape(i), DType::kFloat32))
        return nullptr;
    return best;
  }

  std::vector<memory::desc> srcs_;
  memory::desc dst_;
  std::vector<Layout> in_layouts_;  // empty: plain
  int64_t rows_ = 0;
  std::vector<size_t> row_bytes_;
};

}  // namespace

// oneDNN's concat copies float32, bfloat16, int8, uint8 and int32 (float16 only on some ISAs).
constexpr unsigned kConcatTypes = kFloat32Only | dtype_bit(DType::kBFloat16) | dtype_bit(DType::kInt8) |
                                  dtype_bit(DType::kUInt8) | dtype_bit(DType::kInt32);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("Concat", kDnnl, DnnlConcat, {kConcatTypes});

}  // namespace anvil::kernels
