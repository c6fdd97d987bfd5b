// The kernel interface: prepared once per plan, run many times.
//
// A kernel is made for one node by its registered factory. prepare() sees the
// concrete input dtypes/shapes and the inputs that are constant at plan time;
// it validates them (throwing anvil::Error that names the node), returns the
// output types, and builds whatever run() needs (prepacked weights, oneDNN
// primitives). run() only computes: it neither allocates nor validates, and it
// is const so one prepared kernel serves concurrent runs.
//
//   class ReluKernel : public Kernel {
//     std::vector<TensorType> prepare(const PrepareContext& ctx) override {
//       return {ctx.input_type(0)};
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

struct TensorType {
  DType dtype = DType::kUndefined;
  Shape shape;
  bool operator==(const TensorType& o) const { return dtype == o.dtype && shape == o.shape; }
};

class PrepareContext {
 public:
  PrepareContext(const ir::Node& node, std::vector<TensorType> types, std::vector<const Tensor*> constants,
                 int num_threads, WeightCache* weights = nullptr)
      : node_(node),
        types_(std::move(types)),
        constants_(std::move(constants)),
        num_threads_(num_threads),
        weights_(weights),
        values_read_(constants_.size(), false) {}

  const ir::Node& node() const { return node_; }
  const ir::Attributes& attrs() const { return node_.attrs; }
  int opset() const { return node_.opset; }
  int num_threads() const { return num_threads_; }
  // The session's packed-weight cache; nullptr when preparing outside a
  // session (constant folding, tests): then kernels pack privately.
  WeightCache* weight_cache() const { return weights_; }
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
  // Inputs whose values prepare() looked at: a kernel prepared at run time is
  // reused only for the same values of these inputs.
  const std::vector<bool>& values_read() const { return values_read_; }

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
  mutable std::vector<bool> values_read_;
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
  // True when run() makes the output tensors itself (assigning *ctx.outputs[i]):
  // control flow, whose output shapes are known only once a body has run.
  // Such kernels run as dynamic steps, and prepare() returns placeholder types.
  virtual bool allocates_outputs() const { return false; }
  // True when the outputs depend only on the input types, not their values
  // (Shape): the planner then computes them once, at plan time.
  virtual bool reads_only_input_types() const { return false; }
  // Name of the implementation, for plan listings ("ref", "dnnl:jit:avx2"...).
  virtual std::string impl_name() const { return "ref"; }
  // Activation layout the kernel computes in, for plans and profiles: "plain",
  // or a oneDNN blocked format ("aBcd8b (staged)" when reordered in the kernel).
  virtual std::string layout_name() const { return "plain"; }
};

// Copies input `in` to output 0 unless they already share memory.
void copy_if_distinct(const RunContext& ctx, size_t in);

}  // namespace anvil::kernels
