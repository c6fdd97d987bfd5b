// Sequence and optional ops: SequenceEmpty/Construct/Insert/Erase/At/Length,
// SplitToSequence, ConcatFromSequence, Optional, OptionalHasElement,
// OptionalGetElement. Their values (Tensor::sequence, empty optionals) are
// made per run, so every one of them runs as a dynamic step.
#include <cstring>

#include "core/checked.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

// Base: outputs made in run(); prepare() checks input kinds.
class SequenceKernel : public Kernel {
 public:
  explicit SequenceKernel(const ir::Node& node) : node_(node) {}
  bool allocates_outputs() const override { return true; }

 protected:
  std::vector<TensorType> placeholders() const { return std::vector<TensorType>(node_.outputs.size()); }
  void require_sequence(const PrepareContext& ctx, size_t i) const {
    ANVIL_PREPARE_CHECK(ctx, ctx.input_type(i).sequence, ErrorKind::kInvalidModel, "input {} must be a sequence", i);
  }
  void require_tensor(const PrepareContext& ctx, size_t i) const {
    ANVIL_PREPARE_CHECK(ctx, !ctx.input_type(i).sequence, ErrorKind::kInvalidModel, "input {} must be a tensor", i);
  }
  // A position input (scalar int32/int64), normalized into [0, size] (or [0, size) when `existing`).
  int64_t position(const Tensor* t, int64_t size, bool existing, int64_t fallback) const {
    if (!t) return fallback;
    ANVIL_CHECK(t->numel() == 1 && (t->dtype() == DType::kInt64 || t->dtype() == DType::kInt32),
                ErrorKind::kInvalidArgument, "{}: position must be one int32 or int64", node_.describe());
    int64_t p = tensor_to_ints(*t)[0];
    const int64_t limit = existing ? size : size + 1;
    ANVIL_CHECK(p >= -size && p < limit, ErrorKind::kInvalidArgument,
                "{}: position {} is out of range for a sequence of {} tensors", node_.describe(), p, size);
    return p < 0 ? p + size : p;
  }

  const ir::Node& node_;
};

class SequenceEmptyKernel : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    dtype_ = dtype_from_onnx_code(ctx.attrs().get_int("dtype", 1));
    ANVIL_PREPARE_CHECK(ctx, dtype_ != DType::kUndefined, ErrorKind::kUnsupported, "dtype {} is not supported",
                        ctx.attrs().get_int("dtype", 1));
    return placeholders();
  }
  void run(const RunContext& ctx) const override { *ctx.outputs[0] = Tensor::sequence(dtype_, {}); }

 private:
  DType dtype_ = DType::kFloat32;
};

class SequenceConstructKernel : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.num_inputs() >= 1, ErrorKind::kInvalidModel, "needs at least one input");
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      require_tensor(ctx, i);
      ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(i) == ctx.input_dtype(0), ErrorKind::kInvalidModel,
                          "inputs have different types ({} and {})", dtype_name(ctx.input_dtype(0)),
                          dtype_name(ctx.input_dtype(i)));
    }
    return placeholders();
  }
  void run(const RunContext& ctx) const override {
    std::vector<Tensor> items;
    for (const Tensor* t : ctx.inputs) items.push_back(t->clone());  // inputs may be arena memory
    *ctx.outputs[0] = Tensor::sequence(ctx.in(0).dtype(), std::move(items));
  }
};

class SequenceInsertKernel : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    require_sequence(ctx, 0);
    require_tensor(ctx, 1);
    ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(1) == ctx.input_dtype(0), ErrorKind::kInvalidModel,
                        "the tensor is {} but the sequence holds {}", dtype_name(ctx.input_dtype(1)),
                        dtype_name(ctx.input_dtype(0)));
    return placeholders();
  }
  void run(const RunContext& ctx) const override {
    std::vector<Tensor> items = ctx.in(0).items();
    const auto size = static_cast<int64_t>(items.size());
    int64_t at = position(ctx.inputs.size() > 2 ? ctx.inputs[2] : nullptr, size, false, size);
    items.insert(items.begin() + at, ctx.in(1).clone());
    *ctx.outputs[0] = Tensor::sequence(ctx.in(0).dtype(), std::move(items));
  }
};

class SequenceEraseKernel : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    require_sequence(ctx, 0);
    return placeholders();
  }
  void run(const RunContext& ctx) const override {
    std::vector<Tensor> items = ctx.in(0).items();
    const auto size = static_cast<int64_t>(items.size());
    ANVIL_CHECK(size > 0, ErrorKind::kInvalidArgument, "{}: erasing from an empty sequence", node_.describe());
    int64_t at = position(ctx.inputs.size() > 1 ? ctx.inputs[1] : nullptr, size, true, size - 1);
    items.erase(items.begin() + at);
    *ctx.outputs[0] = Tensor::sequence(ctx.in(0).dtype(), std::move(items));
  }
};

class SequenceAtKernel : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    require_sequence(ctx, 0);
    ANVIL_PREPARE_CHECK(ctx, ctx.has_input(1), ErrorKind::kInvalidModel, "input 'position' is required");
    return placeholders();
  }
  void run(const RunContext& ctx) const override {
    const auto& items = ctx.in(0).items();
    ANVIL_CHECK(ctx.inputs.size() > 1 && ctx.inputs[1], ErrorKind::kInvalidArgument, "{}: the position has no value",
                node_.describe());
    int64_t at = position(ctx.inputs[1], static_cast<int64_t>(items.size()), true, 0);
    *ctx.outputs[0] = items[static_cast<size_t>(at)].clone();
  }
};

class SequenceLengthKernel : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    require_sequence(ctx, 0);
    return placeholders();
  }
  void run(const RunContext& ctx) const override {
    Tensor n(DType::kInt64, {});
    n.data<int64_t>()[0] = static_cast<int64_t>(ctx.in(0).items().size());
    *ctx.outputs[0] = std::move(n);
  }
};

// Tensors seen as [outer, axis, inner]: copies `extent` indices of the axis,
// from `src_offset` in a source whose axis has `src_axis` indices to
// `dst_offset` in a destination whose axis has `dst_axis`.
struct AxisBlock {
  int64_t outer, inner;
  size_t elem;
  void copy(const Tensor& src, int64_t src_axis, int64_t src_offset, Tensor& dst, int64_t dst_axis,
            int64_t dst_offset, int64_t extent) const {
    const size_t row = static_cast<size_t>(extent * inner) * elem;
    if (!row) return;
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(static_cast<char*>(dst.raw()) + static_cast<size_t>((o * dst_axis + dst_offset) * inner) * elem,
                  static_cast<const char*>(src.raw()) + static_cast<size_t>((o * src_axis + src_offset) * inner) * elem,
                  row);
  }
};

AxisBlock axis_block(const Shape& shape, int64_t axis, DType dtype) {
  return {shape_numel(Shape(shape.begin(), shape.begin() + axis)),
          shape_numel(Shape(shape.begin() + axis + 1, shape.end())), dtype_size(dtype)};
}

// `extent` indices of `from` along `axis` from `offset`; the axis dropped when !keep_axis.
Tensor slice_axis(const Tensor& from, int64_t axis, int64_t offset, int64_t extent, bool keep_axis) {
  Shape shape = from.shape();
  shape[static_cast<size_t>(axis)] = extent;
  if (!keep_axis) shape.erase(shape.begin() + axis);
  Tensor out(from.dtype(), shape);
  axis_block(from.shape(), axis, from.dtype()).copy(from, from.shape()[axis], offset, out, extent, 0, extent);
  return out;
}

class SplitToSequenceKernel : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    require_tensor(ctx, 0);
    const auto rank = static_cast<int64_t>(ctx.input_shape(0).size());
    ANVIL_PREPARE_CHECK(ctx, rank >= 1, ErrorKind::kInvalidArgument, "input must not be a scalar");
    axis_ = normalize_axis(ctx, ctx.attrs().get_int("axis", 0), rank);
    keepdims_ = ctx.attrs().get_int("keepdims", 1) != 0;
    return placeholders();
  }
  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const int64_t n = x.shape()[static_cast<size_t>(axis_)];
    std::vector<int64_t> sizes;
    const Tensor* split = ctx.inputs.size() > 1 ? ctx.inputs[1] : nullptr;
    bool keep = true;
    if (!split) {
      sizes.assign(static_cast<size_t>(n), 1);  // one per index; keepdims decides the axis
      keep = keepdims_;
    } else if (split->rank() == 0) {
      int64_t chunk = tensor_to_ints(*split)[0];
      ANVIL_CHECK(chunk > 0, ErrorKind::kInvalidArgument, "{}: split must be > 0, got {}", node_.describe(), chunk);
      for (int64_t at = 0; at < n; at += chunk) sizes.push_back(std::min(chunk, n - at));
    } else {
      sizes = tensor_to_ints(*split);
      int64_t total = 0;
      for (int64_t s : sizes) {
        ANVIL_CHECK(s >= 0, ErrorKind::kInvalidArgument, "{}: split sizes must be >= 0", node_.describe());
        total = checked_add(total, s, "split sizes");
      }
      ANVIL_CHECK(total == n, ErrorKind::kInvalidArgument, "{}: split sizes add up to {}, but the axis has {}",
                  node_.describe(), total, n);
    }
    std::vector<Tensor> items;
    int64_t offset = 0;
    for (int64_t s : sizes) {
      items.push_back(slice_axis(x, axis_, offset, s, keep));
      offset += s;
    }
    *ctx.outputs[0] = Tensor::sequence(x.dtype(), std::move(items));
  }

 private:
  int64_t axis_ = 0;
  bool keepdims_ = true;
};

class ConcatFromSequenceKernel : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    require_sequence(ctx, 0);
    ANVIL_PREPARE_CHECK(ctx, ctx.attrs().has("axis"), ErrorKind::kInvalidModel, "attribute 'axis' is required");
    axis_ = ctx.attrs().get_int("axis", 0);
    new_axis_ = ctx.attrs().get_int("new_axis", 0) != 0;
    return placeholders();
  }
  void run(const RunContext& ctx) const override {
    const auto& items = ctx.in(0).items();
    ANVIL_CHECK(!items.empty(), ErrorKind::kInvalidArgument, "{}: the sequence is empty", node_.describe());
    Shape first = items[0].shape();
    const auto rank = static_cast<int64_t>(first.size()) + (new_axis_ ? 1 : 0);
    ANVIL_CHECK(axis_ >= -rank && axis_ < rank, ErrorKind::kInvalidArgument, "{}: axis {} is out of range for rank {}",
                node_.describe(), axis_, rank);
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    ANVIL_CHECK(new_axis_ || !first.empty(), ErrorKind::kInvalidArgument, "{}: cannot concatenate scalars",
                node_.describe());
    Shape out = first;
    if (new_axis_) out.insert(out.begin() + axis, 0);
    out[static_cast<size_t>(axis)] = 0;
    for (const Tensor& t : items) {
      // A sequence may hold tensors of any shapes: check the rank before indexing by the axis.
      ANVIL_CHECK(t.shape().size() == first.size() && t.dtype() == items[0].dtype(), ErrorKind::kInvalidArgument,
                  "{}: sequence tensors differ in rank or type ({} {} and {} {})", node_.describe(),
                  dtype_name(items[0].dtype()), shape_str(first), dtype_name(t.dtype()), shape_str(t.shape()));
      Shape s = t.shape();
      if (new_axis_) s.insert(s.begin() + axis, 1);
      for (int64_t k = 0; k < rank; ++k)
        ANVIL_CHECK(k == axis || s[k] == out[k], ErrorKind::kInvalidArgument,
                    "{}: tensor of shape {} does not fit {} off axis {}", node_.describe(), shape_str(t.shape()),
                    shape_str(first), axis);
      out[static_cast<size_t>(axis)] = checked_add(out[static_cast<size_t>(axis)], s[axis], "concatenated size");
    }
    Tensor result(items[0].dtype(), out);
    const AxisBlock block = axis_block(out, axis, result.dtype());
    int64_t offset = 0;
    for (const Tensor& t : items) {
      const int64_t extent = new_axis_ ? 1 : t.shape()[static_cast<size_t>(axis)];
      block.copy(t, extent, 0, result, out[axis], offset, extent);
      offset += extent;
    }
    *ctx.outputs[0] = std::move(result);
  }

 private:
  int64_t axis_ = 0;
  bool new_axis_ = false;
};

// Optional(x) is x; Optional() with only a type is an optional without a value.
class OptionalKernel : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<TensorType> prepare(const PrepareContext&) override { return placeholders(); }
  void run(const RunContext& ctx) const override {
    *ctx.outputs[0] = !ctx.inputs.empty() && ctx.inputs[0] ? ctx.in(0).clone() : Tensor();
  }
};

class OptionalHasElementKernel : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<TensorType> prepare(const PrepareContext&) override { return placeholders(); }
  void run(const RunContext& ctx) const override {
    Tensor b(DType::kBool, {});
    b.data<bool>()[0] = !ctx.inputs.empty() && ctx.inputs[0] && !ctx.in(0).empty();
    *ctx.outputs[0] = std::move(b);
  }
};

class OptionalGetElementKernel : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<TensorType> prepare(const PrepareContext&) override { return placeholders(); }
  void run(const RunContext& ctx) const override {
    ANVIL_CHECK(!ctx.inputs.empty() && ctx.inputs[0] && !ctx.in(0).empty(), ErrorKind::kInvalidArgument,
                "{}: the optional has no value", node_.describe());
    *ctx.outputs[0] = ctx.in(0).clone();
  }
};

}  // namespace

ANVIL_REGISTER_OP_VERSIONS("SequenceEmpty", 11, 11);
ANVIL_REGISTER_OP_VERSIONS("SequenceConstruct", 11, 11);
ANVIL_REGISTER_OP_VERSIONS("SequenceInsert", 11, 11);
ANVIL_REGISTER_OP_VERSIONS("SequenceErase", 11, 11);
ANVIL_REGISTER_OP_VERSIONS("SequenceAt", 11, 11);
ANVIL_REGISTER_OP_VERSIONS("SequenceLength", 11, 11);
ANVIL_REGISTER_OP_VERSIONS("SplitToSequence", 11, 11);
ANVIL_REGISTER_OP_VERSIONS("ConcatFromSequence", 11, 11);
ANVIL_REGISTER_OP_VERSIONS("Optional", 15, 15);
ANVIL_REGISTER_OP_VERSIONS("OptionalHasElement", 15, 18);
ANVIL_REGISTER_OP_VERSIONS("OptionalGetElement", 15, 18);
ANVIL_REGISTER_KERNEL_CLASS("SequenceEmpty", kRef, SequenceEmptyKernel);
ANVIL_REGISTER_KERNEL_CLASS("SequenceConstruct", kRef, SequenceConstructKernel);
ANVIL_REGISTER_KERNEL_CLASS("SequenceInsert", kRef, SequenceInsertKernel);
ANVIL_REGISTER_KERNEL_CLASS("SequenceErase", kRef, SequenceEraseKernel);
ANVIL_REGISTER_KERNEL_CLASS("SequenceAt", kRef, SequenceAtKernel);
ANVIL_REGISTER_KERNEL_CLASS("SequenceLength", kRef, SequenceLengthKernel);
ANVIL_REGISTER_KERNEL_CLASS("SplitToSequence", kRef, SplitToSequenceKernel);
ANVIL_REGISTER_KERNEL_CLASS("ConcatFromSequence", kRef, ConcatFromSequenceKernel);
ANVIL_REGISTER_KERNEL_CLASS("Optional", kRef, OptionalKernel);
ANVIL_REGISTER_KERNEL_CLASS("OptionalHasElement", kRef, OptionalHasElementKernel);
ANVIL_REGISTER_KERNEL_CLASS("OptionalGetElement", kRef, OptionalGetElementKernel);

}  // namespace anvil::kernels
