// A float32 tensor's bytes laid out as one oneDNN memory format, copied out
// in another (the unit tests' inputs in a layout, outputs back to plain).
// Only the tensor's logical bytes come out: `to` must not be padded.
#pragma once

#include <cstring>

#include "anvil/tensor.h"
#include "kernels/dnnl/common.h"

namespace anvil::testing {

inline Tensor relaid(const Tensor& x, const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  kernels::dnnl_util::PackedWeights p = kernels::dnnl_util::pack(from, x.raw(), to);
  Tensor y(DType::kFloat32, x.shape());
  std::memcpy(y.raw(), p.storage.raw(), y.nbytes());
  return y;
}

}  // namespace anvil::testing
