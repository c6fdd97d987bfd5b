// The kernel interface: prepared once per plan, run many times.
//
// A kernel is made for one node by its registered factory. prepare() sees the
// concrete input dtypes/shapes and the inputs that are constant at plan time;
// The op's schema has already checked that the inputs fit and computed the
// output types (PrepareContext::output_type()); prepare() checks what its
// implementation needs (throwing anvil::Error that names the node), returns the
// output types with the layouts it writes, and builds whatever run() needs (prepacked weights, oneDNN
// primitives). run() only computes: it neither allocates nor validates, and it
// is const so one prepared kernel serves concurrent runs.
//
//   class ReluKernel : public Kernel {
//     std::vector<TensorType> prepare(const PrepareContext& ctx) override {
//       return ctx.output_types();
//     }
//     void run(const RunContext& ctx) const override { ... }
//   };
//   ANVIL_REGISTER_KERNEL("Relu", kRef, [](const ir::Node&) { return std::make_unique<ReluKernel>(); });
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "anvil/tensor.h"
#include "core/check.h"
#include "ir/graph.h"

namespace anvil::kernels {

class WeightCache;

// Thrown by PrepareContext::require_constant() when an input's value (a
// Reshape's shape, a Slice's starts...) is not known at plan time. The planner
// then prepares the node at run time, when the value is there.
class ValueNeeded : public Error {
 public:
  using Error::Error;
};

class Kernel;
struct TensorType;

// How a tensor's bytes are arranged. Plain (a null Layout) is ONNX's row-major
// order; a backend describes its own formats (oneDNN's nChw16c, NHWC...) with
// a LayoutDesc, opaque to the planner, which only compares layouts, sizes
// buffers by them and asks them for the kernel that converts between two.
class LayoutDesc;
using Layout = std::shared_ptr<const LayoutDesc>;

class LayoutDesc {
 public:
  virtual ~LayoutDesc() = default;
  virtual std::string name() const = 0;       // "aBcd16b"
  virtual size_t bytes() const = 0;           // padded byte size of the tensor in this layout
  virtual bool same_as(const LayoutDesc& other) const = 0;
  // A prepared kernel that converts a tensor of `from` (whose layout is this
  // one, or plain) into `to` (this one, or plain); input 0 to output 0.
  virtual std::unique_ptr<Kernel> make_reorder(const TensorType& from, const Layout& to) const = 0;
};

bool same_layout(const Layout& a, const Layout& b);
std::string layout_name(const Layout& layout);  // "plain" when null

struct TensorType {
  TensorType() = default;
  TensorType(DType d, Shape s, Layout l = nullptr, bool seq = false)
      : dtype(d), shape(std::move(s)), layout(std::move(l)), sequence(seq) {}

  DType dtype = DType::kUndefined;
  Shape shape;
  Layout layout;          // null: plain
  bool sequence = false;  // a sequence of tensors of `dtype` (shape unused); see Tensor::sequence
  bool operator==(const TensorType& o) const {
    return dtype == o.dtype && shape == o.shape && same_layout(layout, o.layout) && sequence == o.sequence;
  }
};

// Bytes of a tensor of this type: padded when the layout is blocked.
size_t type_bytes(const TensorType& type);

class PrepareContext {
 public:
  // Runs the op's schema on the inputs (ir/schema.h): inputs that do not fit
  // it fail here, with kInvalidArgument, before any kernel sees them.
  PrepareContext(const ir::Node& node, std::vector<TensorType> types, std::vector<const Tensor*> constants,
                 int num_threads, WeightCache* weights = nullptr);

  const ir::Node& node() const { return node_; }
  const ir::Attributes& attrs() const { return node_.attrs; }
  int opset() const { return node_.opset; }
  int num_threads() const { return num_threads_; }
  // The session's packed-weight cache; nullptr when preparing outside a
  // session (constant folding, tests): then kernels pack privately.
  WeightCache* weight_cache() const { return weights_; }
  // Whether the kernel may read inputs in a layout of its own (declared by
  // Kernel::input_layout; the planner inserts the reorders) and write its
  // outputs in one (returned in their TensorType). False when preparing outside
  // a plan, at run time, or (outputs) for a graph output: then only plain.
  // input_type() is always the logical type, whose layout is null.
  bool blocked_inputs_allowed() const { return blocked_inputs_; }
  bool blocked_outputs_allowed() const { return blocked_outputs_; }
  // The layout input i's producer wrote it in: a hint for a kernel that can
  // read several (a pooling that keeps its input's blocked format). Null: plain.
  Layout incoming_layout(size_t i) const { return i < incoming_.size() ? incoming_[i] : nullptr; }
  // Whether output 0 is an input of a Concat along channels (axis 1) that the
  // planner can place in place once each input is a whole range of channel
  // blocks (not a graph output; every input a convolution's, read last there).
  bool output_feeds_channel_concat() const { return feeds_channel_concat_; }
  // Which of the kernel's alternatives (Kernel::alternatives) prepare() is to
  // take: -1 (the default) lets the kernel's own rule pick; the tuner sets
  // others. A kernel that cannot take the one asked for takes its rule's.
  int choice() const { return choice_; }
  void set_choice(int choice) { choice_ = choice; }
  void allow_blocked_layouts(bool inputs, bool outputs, std::vector<Layout> incoming = {},
                             bool feeds_channel_concat = false) {
    blocked_inputs_ = inputs;
    blocked_outputs_ = outputs;
    incoming_ = std::move(incoming);
    feeds_channel_concat_ = feeds_channel_concat;
  }
  size_t num_inputs() const { return types_.size(); }
  // False for an omitted optional input.
  bool has_input(size_t i) const { return i < types_.size() && types_[i].dtype != DType::kUndefined; }
  const TensorType& input_type(size_t i) const;
  const Shape& input_shape(size_t i) const { return input_type(i).shape; }
  DType input_dtype(size_t i) const { return input_type(i).dtype; }
  // The tensor when input i is known at plan time, nullptr otherwise. Records
  // that the kernel looked at the value (see values_read()).
  const Tensor* constant(size_t i) const;
  // Like constant(), but throws ValueNeeded naming `what` when the input is not constant.
  const Tensor& require_constant(size_t i, const char* what) const;
  // Inputs whose values prepare() or the schema looked at: a kernel prepared at
  // run time is reused only for the same values of these inputs.
  const std::vector<bool>& values_read() const { return values_read_; }

  // Output o's type (plain) as the op's schema infers it for these inputs:
  // kernels take their output shapes from here rather than computing them.
  // Throws ValueNeeded when the shape depends on an input value not known at
  // plan time; kInternal when the schema cannot give it (outputs sized by the
  // data, such as NonZero's, are the kernel's to size: see output_known()).
  const TensorType& output_type(size_t o) const;
  const Shape& output_shape(size_t o) const { return output_type(o).shape; }
  DType output_dtype(size_t o) const { return output_type(o).dtype; }
  bool output_known(size_t o) const { return o < outputs_.size() && outputs_[o].dtype != DType::kUndefined; }
  // output_type() of every output the node has.
  std::vector<TensorType> output_types() const;

  // Throws Error(kind) with the node's description in front of the message.
  template <typename... Args>
  [[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(kind, node_.describe() + ": " + fmt::format(f, std::forward<Args>(args)...));
  }

 private:
  const ir::Node& node_;
  std::vector<TensorType> types_;
  std::vector<const Tensor*> constants_;
  int num_threads_;
  WeightCache* weights_;
  bool blocked_inputs_ = false, blocked_outputs_ = false, feeds_channel_concat_ = false;
  int choice_ = -1;
  std::vector<Layout> incoming_;
  mutable std::vector<bool> values_read_;
  std::vector<TensorType> outputs_;  // from the schema; undefined where it cannot tell
  bool has_schema_ = false;
};

// Checks a condition in prepare(); the message gets the node in front.
#define ANVIL_PREPARE_CHECK(ctx, cond, kind, ...) \
  do {                                            \
    if (!(cond)) (ctx).fail(kind, __VA_ARGS__);   \
  } while (0)

struct RunContext {
  std::vector<const Tensor*> inputs;  // nullptr for an omitted optional input
  std::vector<Tensor*> outputs;       // shapes set, memory provided by the plan
  void* scratch = nullptr;            // scratch_bytes() bytes, 64-byte aligned

  const Tensor& in(size_t i) const { return *inputs[i]; }
  // Input i as a value to pass on (control flow): an empty Tensor for an
  // omitted input or an optional without a value.
  Tensor value(size_t i) const { return i < inputs.size() && inputs[i] ? *inputs[i] : Tensor(); }
  Tensor& out(size_t i) const { return *outputs[i]; }
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual std::vector<TensorType> prepare(const PrepareContext& ctx) = 0;
  virtual void run(const RunContext& ctx) const = 0;

  // Per-run scratch memory, known after prepare().
  virtual size_t scratch_bytes() const { return 0; }
  // When >= 0, output 0 is the same bytes as that input (Reshape, Squeeze,
  // Identity...): the planner gives both one buffer and run() copies only if
  // they still differ (e.g. when the output is a graph output).
  virtual int output_aliases_input() const { return -1; }
  // When >= 0, output 0 may overwrite that input in place if nothing reads
  // the input afterwards; run() must then work whether or not they share memory.
  virtual int inplace_input() const { return -1; }
  // Non-empty (after prepare()) when each input i is a contiguous byte range
  // of output 0, starting at offsets[i] (a concat of one row per input): the
  // planner may then have the producers write straight into those ranges,
  // and run() must skip an input whose bytes are already in place.
  virtual std::vector<size_t> input_offsets_in_output() const { return {}; }
  // True when run() makes the output tensors itself (assigning *ctx.outputs[i]):
  // control flow, whose output shapes are known only once a body has run, and
  // the sequence and optional ops.
  // Such kernels run as dynamic steps, and prepare() returns placeholder types.
  virtual bool allocates_outputs() const { return false; }
  // True when the outputs depend only on the input types, not their values
  // (Shape): the planner then computes them once, at plan time.
  virtual bool reads_only_input_types() const { return false; }
  // The layout run() reads input i in (after prepare()); null: plain. The
  // planner reorders the producer's output into it when they differ.
  virtual Layout input_layout(size_t) const { return nullptr; }
  // True when the kernel reads constant input i only through a packed copy
  // from the session's weight cache (WeightCache::get), in prepare() and
  // run() alike. Asked before prepare(); the session may then drop the
  // original's pages (WeightCache::release).
  virtual bool reads_input_packed_only(size_t) const { return false; }
  // Name of the implementation, for plan listings ("ref", "dnnl:jit:avx2"...).
  virtual std::string impl_name() const { return "ref"; }
  // After prepare(): the implementations this kernel could run this node
  // with, by name, when it has more than one (oneDNN's matmul or Anvil's
  // packed GEMM); PrepareContext::set_choice(i) picks the i-th. Its own
  // rule picks without a choice; `anvil --tune` times them instead.
  virtual std::vector<std::string> alternatives() const { return {}; }
  // Activation layout the kernel computes in, for plans and profiles: "plain",
  // a oneDNN format ("aBcd8b"), "aBcd8b (staged)" when the kernel reorders
  // plain data itself (outside a plan), "abcd->aBcd8b" for a reorder.
  virtual std::string layout_name() const { return "plain"; }
};

// Copies input `in` to output 0 unless they already share memory.
void copy_if_distinct(const RunContext& ctx, size_t in);

}  // namespace anvil::kernels
