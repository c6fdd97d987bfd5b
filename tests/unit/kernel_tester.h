// Runs one kernel on hand-made tensors, the way the planner would.
//
//   auto out = anvil::testing::run_kernel("Relu", {make_tensor<float>({2}, {-1, 2})});
//   EXPECT_EQ(out[0].data<float>()[0], 0.f);
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "anvil/error.h"
#include "anvil/tensor.h"
#include "ir/attribute.h"
#include "kernels/registry.h"

namespace anvil::testing {

template <typename T>
Tensor make_tensor(DType dtype, Shape shape, const std::vector<T>& values) {
  Tensor t(dtype, std::move(shape));
  if (static_cast<int64_t>(values.size()) != t.numel()) throw std::runtime_error("make_tensor: wrong value count");
  for (size_t i = 0; i < values.size(); ++i) t.data<T>()[i] = values[i];
  return t;
}
inline Tensor f32(Shape shape, const std::vector<float>& v) { return make_tensor<float>(DType::kFloat32, std::move(shape), v); }
inline Tensor i64(Shape shape, const std::vector<int64_t>& v) { return make_tensor<int64_t>(DType::kInt64, std::move(shape), v); }
inline Tensor i32(Shape shape, const std::vector<int32_t>& v) { return make_tensor<int32_t>(DType::kInt32, std::move(shape), v); }
inline Tensor u8(Shape shape, const std::vector<uint8_t>& v) { return make_tensor<uint8_t>(DType::kUInt8, std::move(shape), v); }

struct KernelOptions {
  kernels::Backend backend = kernels::Backend::kRef;
  int opset = 17;
  std::string domain;  // "" for ONNX ops, "anvil" for fused ops
  int num_outputs = 1;
  // Which inputs are known at plan time. Empty: the integer-typed inputs are
  // (as the session does for small integer inputs); float inputs are not.
  std::vector<bool> constant_inputs;
  int num_threads = 1;  // the planned thread count the kernel sees (PrepareContext::num_threads)
  // When set, the kernel prepares with a weight cache that counts this many
  // bytes of model weights (WeightCache::model_weight_bytes); none otherwise.
  size_t model_weight_bytes = 0;
  // When set, the kernel may read and write layouts of its own, and input i
  // arrives in incoming_layouts[i] (the inputs given are laid out so); the
  // outputs come back in whatever layout the kernel returns.
  std::vector<kernels::Layout> incoming_layouts;
  // With incoming_layouts: whether the outputs may take layouts of their own
  // (false: as a graph output's, plain).
  bool blocked_outputs = true;
  // >= 0: the kernel's alternative of that index (Kernel::alternatives), as
  // the tuner asks for it; -1: its own rule's pick.
  int choice = -1;
};

struct KernelResult {
  std::vector<Tensor> outputs;
  std::string impl;
  std::vector<kernels::TensorType> types;  // the outputs' planned types, layouts included
  std::vector<kernels::Layout> input_layouts;  // the layouts the kernel reads its inputs in
};

// Inputs that are empty Tensors are omitted optional inputs. Throws whatever
// the kernel's prepare() throws (anvil::Error).
KernelResult run_kernel_full(const std::string& op, const std::vector<Tensor>& inputs,
                             const ir::Attributes& attrs = {}, const KernelOptions& options = {});
inline std::vector<Tensor> run_kernel(const std::string& op, const std::vector<Tensor>& inputs,
                                      const ir::Attributes& attrs = {}, const KernelOptions& options = {}) {
  return run_kernel_full(op, inputs, attrs, options).outputs;
}

// Shared helpers of the kernel tests.
template <typename T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

inline ir::Attributes attrs(std::initializer_list<std::pair<const char*, ir::AttrValue>> list) {
  ir::Attributes a;
  for (const auto& [name, v] : list) a.set(name, v);
  return a;
}

inline KernelOptions opset(int version, int num_outputs = 1) {
  KernelOptions o;
  o.opset = version;
  o.num_outputs = num_outputs;
  return o;
}

// The live nodes of type `op` in a graph (the passes' tests).
inline size_t count_live_ops(const ir::Graph& g, const std::string& op) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += !node->dead && node->op_type == op;
  return n;
}

// The kind of the anvil::Error that fn throws (a test failure if none).
inline ErrorKind error_kind_of(const std::function<void()>& fn, std::string* message = nullptr) {
  try {
    fn();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "no anvil::Error thrown";
  return ErrorKind::kInternal;
}

// start, start + 1, ... (n values)
std::vector<float> iota_f(int64_t n, float start = 0.f);
// Uniform in [-1, 1), seeded.
Tensor random_f32(Shape shape, uint32_t seed);
// A float32 scalar (shape []) holding v.
Tensor scalar_f32(float v);

// Geometry of conv2d_by_hand: one stride for both axes, ONNX's pads.
struct ConvByHand {
  int64_t stride = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t group = 1;
  static ConvByHand padded(int64_t pad, int64_t stride = 1) { return {stride, pad, pad, pad, pad, 1}; }
};
// A 2-D convolution computed in double, for tests to compare kernels with:
// x [N, C, H, W], w [O, C / group, KH, KW], bias [O] or null; y [N, O, OH, OW].
Tensor conv2d_by_hand(const Tensor& x, const Tensor& w, const Tensor* bias, const ConvByHand& geometry);

// Max |a-b| over all elements (both float32); throws on shape mismatch.
float max_abs_diff(const Tensor& a, const Tensor& b);

}  // namespace anvil::testing
