// Reading and writing tensors as files: ONNX TensorProto (.pb) and NumPy (.npy).
#pragma once

#include <string>

#include "anvil/tensor.h"

namespace anvil {

// Reads a .pb (TensorProto) or .npy file, chosen by extension. Throws
// Error(kInvalidArgument) naming the file when it is missing or malformed.
Tensor read_tensor_file(const std::string& path);
Tensor read_tensor_pb(const std::string& path, std::string* name = nullptr);
Tensor read_tensor_npy(const std::string& path);

// The same from bytes in memory; `label` names the source in errors and
// `base_dir` is where a .pb's external data is looked up ("" forbids it).
Tensor parse_tensor_pb(const std::string& bytes, const std::string& label, const std::string& base_dir = "",
                       std::string* name = nullptr);
Tensor parse_tensor_npy(const std::string& bytes, const std::string& label);

void write_tensor_pb(const std::string& path, const Tensor& tensor, const std::string& name);

// A graph input or output of any kind as a .pb file: a TensorProto, a
// SequenceProto (of tensors) or an OptionalProto, as `kind` says. A sequence
// read empty takes `elem` as its element type.
Tensor read_value_pb(const std::string& path, ValueKind kind, DType elem = DType::kUndefined,
                     std::string* name = nullptr);
Tensor parse_value_pb(const std::string& bytes, const std::string& label, ValueKind kind, DType elem = DType::kUndefined,
                      const std::string& base_dir = "", std::string* name = nullptr);
void write_value_pb(const std::string& path, const Tensor& value, const std::string& name, ValueKind kind);
void write_tensor_npy(const std::string& path, const Tensor& tensor);

}  // namespace anvil
