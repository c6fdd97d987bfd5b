#include "kernel_tester.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <cstdlib>
#include <random>
#include <stdexcept>

#include "kernels/ref/common.h"
#include "kernels/weight_cache.h"

namespace anvil::testing {

KernelResult run_kernel_full(const std::string& op, const std::vector<Tensor>& inputs, const ir::Attributes& attrs,
                             const KernelOptions& options) {
  ir::Node node;
  node.op_type = op;
  node.domain = options.domain;
  node.name = "test_" + op;
  node.opset = options.opset;
  node.attrs = attrs;
  // Kernels read the node's output count (Split, Dropout's optional mask).
  std::vector<std::unique_ptr<ir::Value>> output_values;
  for (int i = 0; i < options.num_outputs; ++i) {
    output_values.push_back(std::make_unique<ir::Value>());
    output_values.back()->name = node.name + "_out" + std::to_string(i);
    node.outputs.push_back(output_values.back().get());
  }

  // Kernels may look at the node's input count (variadic ops); omitted inputs stay nullptr.
  std::vector<std::unique_ptr<ir::Value>> input_values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    input_values.push_back(std::make_unique<ir::Value>());
    input_values.back()->name = node.name + "_in" + std::to_string(i);
    node.inputs.push_back(inputs[i].empty() ? nullptr : input_values.back().get());
  }
  std::vector<kernels::TensorType> types;
  std::vector<const Tensor*> constants;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    types.push_back({t.dtype(), t.shape()});
    bool is_const = i < options.constant_inputs.size()
                        ? options.constant_inputs[i]
                        : (!t.empty() && !dtype_is_float(t.dtype()) && t.dtype() != DType::kBool);
    constants.push_back(is_const && !t.empty() ? &t : nullptr);
  }

  // As in the planner: the schema checks the inputs first, then a kernel is selected by op version and dtypes.
  kernels::WeightCache weights;
  weights.set_model_weight_bytes(options.model_weight_bytes);
  kernels::PrepareContext pctx(node, types, constants, options.num_threads,
                               options.model_weight_bytes ? &weights : nullptr);
  if (!options.incoming_layouts.empty()) pctx.allow_blocked_layouts(true, options.blocked_outputs, options.incoming_layouts);
  pctx.set_choice(options.choice);
  auto entries = kernels::Registry::global().select(node, types);
  const kernels::KernelEntry* entry = nullptr;
  for (const auto* e : entries)
    if (e->backend == options.backend) entry = e;
  if (!entry) throw std::runtime_error("no kernel registered for " + op + " with the requested backend");
  std::unique_ptr<kernels::Kernel> kernel = entry->factory(node);
  if (!kernel) throw std::runtime_error("kernel factory declined " + op);

  std::vector<kernels::TensorType> out_types = kernel->prepare(pctx);

  KernelResult result;
  result.impl = kernel->impl_name();
  kernels::RunContext rctx;
  for (const Tensor& t : inputs) rctx.inputs.push_back(t.empty() ? nullptr : &t);
  result.types = out_types;
  for (size_t i = 0; i < inputs.size(); ++i) result.input_layouts.push_back(kernel->input_layout(i));
  // Kernels that allocate their outputs (data-sized, strings) get empty
  // tensors, as in the executor. A padded layout gets its padded bytes,
  // filled with NaN bytes as the executor fills outputs under ANVIL_VERIFY,
  // so that padding a kernel leaves unwritten shows (it must hold zeros).
  for (const auto& ot : out_types) {
    if (kernel->allocates_outputs()) {
      result.outputs.emplace_back();
      continue;
    }
    const size_t bytes = kernels::type_bytes(ot);
    if (bytes > shape_nbytes(ot.shape, ot.dtype)) {
      auto storage = std::make_shared<Tensor>(DType::kUInt8, Shape{static_cast<int64_t>(bytes)});
      std::memset(storage->raw(), 0xff, bytes);
      result.outputs.push_back(Tensor::adopt(ot.dtype, ot.shape, storage, storage->raw()));
    } else {
      result.outputs.emplace_back(ot.dtype, ot.shape);
    }
  }
  for (Tensor& t : result.outputs) rctx.outputs.push_back(&t);
  std::vector<unsigned char> scratch_storage(kernel->scratch_bytes() + 64);
  void* scratch = scratch_storage.data();
  size_t space = scratch_storage.size();
  rctx.scratch = std::align(64, kernel->scratch_bytes(), scratch, space);
  kernel->run(rctx);
  return result;
}

std::vector<float> iota_f(int64_t n, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return v;
}

Tensor random_f32(Shape shape, uint32_t seed) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

Tensor scalar_f32(float v) {
  Tensor t(DType::kFloat32, {});
  t.data<float>()[0] = v;
  return t;
}

Tensor conv2d_by_hand(const Tensor& x, const Tensor& w, const Tensor* bias, const ConvByHand& g) {
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), wd = x.dim(3);
  const int64_t o_total = w.dim(0), c_per = w.dim(1), kh = w.dim(2), kw = w.dim(3);
  const int64_t o_per = o_total / g.group;
  const int64_t oh = (h + g.pad_top + g.pad_bottom - kh) / g.stride + 1;
  const int64_t ow = (wd + g.pad_left + g.pad_right - kw) / g.stride + 1;
  Tensor y(DType::kFloat32, {n, o_total, oh, ow});
  float* out = y.data<float>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t o = 0; o < o_total; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double sum = bias ? bias->data<float>()[o] : 0.0;
          for (int64_t cc = 0; cc < c_per; ++cc) {
            const int64_t ci = o / o_per * c_per + cc;
            for (int64_t a = 0; a < kh; ++a)
              for (int64_t e = 0; e < kw; ++e) {
                const int64_t r = i * g.stride - g.pad_top + a, q = j * g.stride - g.pad_left + e;
                if (r >= 0 && r < h && q >= 0 && q < wd)
                  sum += double{x.data<float>()[((b * c + ci) * h + r) * wd + q]} *
                         w.data<float>()[((o * c_per + cc) * kh + a) * kw + e];
              }
          }
          *out++ = static_cast<float>(sum);
        }
  return y;
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) throw std::runtime_error("max_abs_diff: shapes differ");
  float m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(a.data<float>()[i] - b.data<float>()[i]));
  return m;
}

}  // namespace anvil::testing
