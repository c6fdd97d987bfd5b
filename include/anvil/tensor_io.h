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
void write_tensor_npy(const std::string& path, const Tensor& tensor);

}  // namespace anvil
