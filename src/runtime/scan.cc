// Scan: runs its body once per slice of the scan inputs, threading N state
// values through, and stacks the K per-iteration scan outputs. Opset 9 and
// later: axes and directions per scan input and output. Opset 8: every input
// and output has a batch axis first (each batch element scans on its own,
// along axis 1), an optional first input gives each its sequence length (the
// scan outputs past it stay 0), and `directions` reverses scan inputs.
// Like If and Loop, a dynamic step that allocates its outputs.
#include <cstring>

#include "core/check.h"
#include "kernels/registry.h"
#include "runtime/executor.h"

namespace anvil::runtime {
namespace {

using kernels::PrepareContext;
using kernels::RunContext;
using kernels::TensorType;

// Element `t` of `x` along `axis`, as a tensor without that axis.
Tensor slice_along(const Tensor& x, int64_t axis, int64_t t) {
  Shape shape = x.shape();
  const int64_t len = shape[static_cast<size_t>(axis)];
  shape.erase(shape.begin() + axis);
  Tensor out(x.dtype(), shape);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < x.shape().size(); ++d) inner *= x.shape()[d];
  const size_t bytes = static_cast<size_t>(inner) * dtype_size(x.dtype());
  const auto* src = static_cast<const char*>(x.raw());
  auto* dst = static_cast<char*>(out.raw());
  for (int64_t o = 0; o < outer; ++o)
    if (bytes) std::memcpy(dst + o * bytes, src + (o * len + t) * bytes, bytes);
  return out;
}

// Writes `part` as element `t` along `axis` of `out`.
void place_along(Tensor& out, int64_t axis, int64_t t, const Tensor& part) {
  const int64_t len = out.shape()[static_cast<size_t>(axis)];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= out.shape()[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < out.shape().size(); ++d) inner *= out.shape()[d];
  const size_t bytes = static_cast<size_t>(inner) * dtype_size(out.dtype());
  auto* dst = static_cast<char*>(out.raw());
  const auto* src = static_cast<const char*>(part.raw());
  for (int64_t o = 0; o < outer; ++o)
    if (bytes) std::memcpy(dst + (o * len + t) * bytes, src + o * bytes, bytes);
}

class ScanKernel : public kernels::Kernel {
 public:
  explicit ScanKernel(const ir::Node& node) : node_(node) {}
  bool allocates_outputs() const override { return true; }
  std::string impl_name() const override { return "control-flow"; }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    body_ = node_.attrs.get_graph("body");
    ANVIL_PREPARE_CHECK(ctx, body_ != nullptr, ErrorKind::kInvalidModel, "attribute 'body' (a graph) is required");
    legacy_ = ctx.opset() < 9;
    // Scan-8's first input is sequence_lens; the body never sees it.
    const int64_t inputs = static_cast<int64_t>(node_.num_explicit_inputs()) - (legacy_ ? 1 : 0);
    scan_inputs_ = ctx.attrs().get_int("num_scan_inputs", 0);
    ANVIL_PREPARE_CHECK(ctx, scan_inputs_ >= 1 && scan_inputs_ <= inputs, ErrorKind::kInvalidModel,
                        "num_scan_inputs {} must be in [1, {}]", scan_inputs_, inputs);
    states_ = inputs - scan_inputs_;
    ANVIL_PREPARE_CHECK(ctx, static_cast<int64_t>(body_->inputs().size()) == inputs, ErrorKind::kInvalidModel,
                        "the body has {} inputs; it needs {}", body_->inputs().size(), inputs);
    scan_outputs_ = static_cast<int64_t>(body_->outputs().size()) - states_;
    ANVIL_PREPARE_CHECK(ctx, scan_outputs_ >= 0 && node_.outputs.size() == body_->outputs().size(),
                        ErrorKind::kInvalidModel, "the node has {} outputs, the body {}", node_.outputs.size(),
                        body_->outputs().size());
    in_axes_ = axes(ctx, "scan_input_axes", scan_inputs_);
    in_reverse_ = ctx.attrs().get_ints(legacy_ ? "directions" : "scan_input_directions",
                                       std::vector<int64_t>(scan_inputs_, 0));
    out_axes_ = axes(ctx, "scan_output_axes", scan_outputs_);
    out_reverse_ = ctx.attrs().get_ints("scan_output_directions", std::vector<int64_t>(scan_outputs_, 0));
    ANVIL_PREPARE_CHECK(ctx, static_cast<int64_t>(in_reverse_.size()) == scan_inputs_ &&
                                 static_cast<int64_t>(out_reverse_.size()) == scan_outputs_,
                        ErrorKind::kInvalidModel, "scan directions must have one entry per scan input and output");
    executor_ = std::make_unique<GraphExecutor>(*body_, ctx.weight_cache());
    threads_ = ctx.num_threads();
    return std::vector<TensorType>(node_.outputs.size());
  }

  void run(const RunContext& ctx) const override {
    if (legacy_) return run_batched(ctx);
    std::vector<Tensor> state, xs;
    for (int64_t s = 0; s < states_; ++s) state.push_back(ctx.value(static_cast<size_t>(s)));
    for (int64_t i = 0; i < scan_inputs_; ++i) {
      ANVIL_CHECK(ctx.inputs[static_cast<size_t>(states_ + i)] != nullptr, ErrorKind::kInvalidArgument,
                  "{}: scan input {} has no value", node_.describe(), i);
      xs.push_back(ctx.in(static_cast<size_t>(states_ + i)));
    }
    const int64_t len = scan_length(xs);
    std::vector<Tensor> outs(static_cast<size_t>(scan_outputs_));
    scan_loop(ctx, state, xs, len, len, outs);
    for (int64_t s = 0; s < states_; ++s)
      if (ctx.outputs[static_cast<size_t>(s)]) *ctx.outputs[static_cast<size_t>(s)] = state[static_cast<size_t>(s)].clone();
    for (int64_t k = 0; k < scan_outputs_; ++k) {
      Tensor& o = outs[static_cast<size_t>(k)];
      if (o.empty()) o = Tensor(DType::kFloat32, {0});  // no iterations: nothing to stack
      if (ctx.outputs[static_cast<size_t>(states_ + k)]) *ctx.outputs[static_cast<size_t>(states_ + k)] = o;
    }
  }

 private:
  // The common length of the scan inputs along their axes.
  int64_t scan_length(const std::vector<Tensor>& xs) const {
    int64_t len = -1;
    for (size_t i = 0; i < xs.size(); ++i) {
      const Tensor& x = xs[i];
      int64_t axis = in_axes_[i];
      if (axis < 0) axis += x.rank();
      ANVIL_CHECK(axis >= 0 && axis < x.rank(), ErrorKind::kInvalidArgument, "{}: scan input {} of shape {} has no "
                  "axis {}", node_.describe(), i, shape_str(x.shape()), in_axes_[i]);
      const int64_t n = x.shape()[static_cast<size_t>(axis)];
      ANVIL_CHECK(len < 0 || n == len, ErrorKind::kInvalidArgument, "{}: scan inputs have lengths {} and {}",
                  node_.describe(), len, n);
      len = n;
    }
    return len;
  }

  // Runs the body `len` times over the scan inputs `xs`; the scan outputs are
  // `stacked` long (longer than len only for Scan-8's shorter sequences).
  void scan_loop(const RunContext& ctx, std::vector<Tensor>& state, const std::vector<Tensor>& xs, int64_t len,
                 int64_t stacked, std::vector<Tensor>& outs) const {
    const size_t first_implicit = node_.num_explicit_inputs();
    for (int64_t t = 0; t < len; ++t) {
      std::vector<Tensor> inputs = state;
      for (size_t i = 0; i < xs.size(); ++i) {
        int64_t axis = in_axes_[i];
        if (axis < 0) axis += xs[i].rank();
        const int64_t at = in_reverse_[i] ? len - 1 - t : t;
        inputs.push_back(slice_along(xs[i], axis, at));
      }
      for (const ir::Graph::Capture& c : body_->captures) inputs.push_back(ctx.value(first_implicit + c.implicit_index));
      std::vector<Tensor> out = executor_->run(inputs, threads_);
      for (int64_t s = 0; s < states_; ++s) state[static_cast<size_t>(s)] = std::move(out[static_cast<size_t>(s)]);
      for (int64_t k = 0; k < scan_outputs_; ++k) store(outs, k, t, stacked, out[static_cast<size_t>(states_ + k)]);
    }
  }

  // Scan-8: each batch element scans on its own; the results stack along axis 0.
  void run_batched(const RunContext& ctx) const {
    const Tensor* lens = ctx.inputs.empty() ? nullptr : ctx.inputs[0];
    std::vector<Tensor> initial, xs;
    for (int64_t s = 0; s < states_; ++s) initial.push_back(ctx.value(static_cast<size_t>(1 + s)));
    for (int64_t i = 0; i < scan_inputs_; ++i) {
      ANVIL_CHECK(ctx.inputs[static_cast<size_t>(1 + states_ + i)] != nullptr, ErrorKind::kInvalidArgument,
                  "{}: scan input {} has no value", node_.describe(), i);
      xs.push_back(ctx.in(static_cast<size_t>(1 + states_ + i)));
    }
    std::vector<const Tensor*> batched;
    for (const Tensor& t : initial) batched.push_back(&t);
    for (const Tensor& t : xs) batched.push_back(&t);
    int64_t batch = -1;
    for (const Tensor* t : batched) {
      ANVIL_CHECK(t->rank() >= 1 && (batch < 0 || t->shape()[0] == batch), ErrorKind::kInvalidArgument,
                  "{}: every input needs the same batch axis first, got shape {}", node_.describe(),
                  shape_str(t->shape()));
      batch = t->shape()[0];
    }
    std::vector<Tensor> final_states(static_cast<size_t>(states_)), scans(static_cast<size_t>(scan_outputs_));
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<Tensor> state, slices;
      for (const Tensor& t : initial) state.push_back(slice_along(t, 0, b));
      for (const Tensor& t : xs) slices.push_back(slice_along(t, 0, b));
      const int64_t full = scan_length(slices);
      int64_t len = full;
      if (lens && lens->numel() > 0) {
        ANVIL_CHECK(lens->numel() == batch && lens->dtype() == DType::kInt32, ErrorKind::kInvalidArgument,
                    "{}: sequence_lens must be int32 with one length per batch element", node_.describe());
        len = lens->data<int32_t>()[b];
        ANVIL_CHECK(len >= 0 && len <= full, ErrorKind::kInvalidArgument, "{}: sequence length {} is outside [0, {}]",
                    node_.describe(), len, full);
      }
      std::vector<Tensor> outs(static_cast<size_t>(scan_outputs_));
      scan_loop(ctx, state, slices, len, full, outs);
      for (int64_t s = 0; s < states_; ++s) stack_batch(final_states[static_cast<size_t>(s)], b, batch, state[static_cast<size_t>(s)]);
      for (int64_t k = 0; k < scan_outputs_; ++k) {
        ANVIL_CHECK(!outs[static_cast<size_t>(k)].empty(), ErrorKind::kUnsupported,
                    "{}: a batch element with no iterations leaves scan output {} without a shape", node_.describe(), k);
        stack_batch(scans[static_cast<size_t>(k)], b, batch, outs[static_cast<size_t>(k)]);
      }
    }
    for (int64_t s = 0; s < states_; ++s)
      if (ctx.outputs[static_cast<size_t>(s)]) *ctx.outputs[static_cast<size_t>(s)] = final_states[static_cast<size_t>(s)];
    for (int64_t k = 0; k < scan_outputs_; ++k)
      if (ctx.outputs[static_cast<size_t>(states_ + k)]) *ctx.outputs[static_cast<size_t>(states_ + k)] = scans[static_cast<size_t>(k)];
  }

  // Writes batch element b of `out` (allocated [batch, part...] on first use).
  void stack_batch(Tensor& out, int64_t b, int64_t batch, const Tensor& part) const {
    if (out.empty()) {
      Shape shape = part.shape();
      shape.insert(shape.begin(), batch);
      out = Tensor(part.dtype(), shape);
    }
    ANVIL_CHECK(Shape(out.shape().begin() + 1, out.shape().end()) == part.shape() && out.dtype() == part.dtype(),
                ErrorKind::kInvalidArgument, "{}: batch elements give outputs of shapes {} and {}", node_.describe(),
                shape_str(Shape(out.shape().begin() + 1, out.shape().end())), shape_str(part.shape()));
    place_along(out, 0, b, part);
  }

  std::vector<int64_t> axes(const PrepareContext& ctx, const char* name, int64_t count) const {
    std::vector<int64_t> a = ctx.attrs().get_ints(name, std::vector<int64_t>(static_cast<size_t>(count), 0));
    ANVIL_PREPARE_CHECK(ctx, static_cast<int64_t>(a.size()) == count, ErrorKind::kInvalidModel,
                        "{} has {} entries for {} values", name, a.size(), count);
    return a;
  }

  // Stores iteration t's element of scan output k, allocating the output on the first iteration.
  void store(std::vector<Tensor>& outs, int64_t k, int64_t t, int64_t len, const Tensor& part) const {
    Tensor& o = outs[static_cast<size_t>(k)];
    int64_t axis = out_axes_[static_cast<size_t>(k)];
    const int64_t rank = part.rank() + 1;
    if (axis < 0) axis += rank;
    ANVIL_CHECK(axis >= 0 && axis < rank, ErrorKind::kInvalidModel, "{}: scan output axis {} is out of range",
                node_.describe(), out_axes_[static_cast<size_t>(k)]);
    if (o.empty()) {
      Shape shape = part.shape();
      shape.insert(shape.begin() + axis, len);
      o = Tensor(part.dtype(), shape);
    }
    Shape expect = o.shape();
    expect.erase(expect.begin() + axis);
    ANVIL_CHECK(part.shape() == expect && part.dtype() == o.dtype(), ErrorKind::kInvalidArgument,
                "{}: scan output {} changes shape between iterations ({} then {})", node_.describe(), k,
                shape_str(expect), shape_str(part.shape()));
    place_along(o, axis, out_reverse_[static_cast<size_t>(k)] ? len - 1 - t : t, part);
  }

  const ir::Node& node_;
  bool legacy_ = false;
  const ir::Graph* body_ = nullptr;
  int64_t states_ = 0, scan_inputs_ = 0, scan_outputs_ = 0;
  std::vector<int64_t> in_axes_, in_reverse_, out_axes_, out_reverse_;
  std::unique_ptr<GraphExecutor> executor_;
  int threads_ = 1;
};

ANVIL_REGISTER_OP_VERSIONS("Scan", 8, 21);
ANVIL_REGISTER_KERNEL_CLASS("Scan", kRef, ScanKernel);

}  // namespace
}  // namespace anvil::runtime
