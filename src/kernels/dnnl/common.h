// Shared plumbing of the oneDNN kernels: the engine, per-thread streams,
// memory descriptors for plain tensors, post-op activations.
//
// The oneDNN kernels are thin wrappers: prepare() builds a primitive
// descriptor (weights in `any` layout, prepacked once when constant, user
// scratchpad so concurrent runs share nothing), run() wraps pointers in
// dnnl::memory and executes. A oneDNN error while preparing becomes
// kUnsupported, so the planner falls back to the reference kernel.
#pragma once

#include <string>

#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/kernel.h"

namespace anvil::kernels::dnnl_util {

dnnl::engine& engine();
// One stream per calling thread: concurrent runs never share a stream.
dnnl::stream& stream();

dnnl::memory::data_type data_type(DType dtype);  // undef for dtypes oneDNN lacks
dnnl::memory::dims dims(const Shape& shape);
dnnl::memory::desc plain_desc(const Shape& shape, DType dtype);
// Memory wrapping a tensor's bytes (no copy).
dnnl::memory wrap(const dnnl::memory::desc& desc, const void* data);

// "brg:avx2" etc., for plan listings.
std::string impl_name(const dnnl::primitive_desc_base& pd);

// Appends an ONNX activation (as the fusion pass names it) as eltwise post-ops;
// false when oneDNN has no equivalent.
bool append_activation(dnnl::post_ops& ops, const std::string& activation, float alpha, float beta);

// Primitive attributes with a user-managed scratchpad.
dnnl::primitive_attr user_scratchpad_attr();

// A constant tensor reordered once into the layout `desc` asks for. Owns its bytes.
struct PackedWeights {
  Tensor storage;
  dnnl::memory memory;
};
PackedWeights pack(const dnnl::memory::desc& from, const void* data, const dnnl::memory::desc& to);

}  // namespace anvil::kernels::dnnl_util
