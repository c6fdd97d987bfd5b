// TensorProto <-> anvil::Tensor, with external data read from the model's folder.
#pragma once

#include <string>

#include "anvil/tensor.h"

namespace onnx { class TensorProto; }

namespace anvil::onnx_io {

// ONNX TensorProto.DataType code -> DType; kUndefined for types Anvil lacks.
DType dtype_from_onnx(int onnx_type);
int dtype_to_onnx(DType dtype);
const char* onnx_type_name(int onnx_type);

// `base_dir` is where external data files are looked up ("" forbids external data).
Tensor tensor_from_proto(const onnx::TensorProto& proto, const std::string& base_dir);
// The same tensor, where the proto's raw data is read for the last time: its
// pages are dropped as they are copied (the caller frees the bytes, which
// are garbage afterwards), so the two are never both whole in memory.
Tensor tensor_from_proto_consuming(const onnx::TensorProto& proto, const std::string& base_dir);
void tensor_to_proto(const Tensor& tensor, const std::string& name, onnx::TensorProto* proto);

}  // namespace anvil::onnx_io
