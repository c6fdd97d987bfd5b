// The trust boundary: checks a parsed ModelProto before anything else reads it.
//
// libonnx is a parser, not a validator of hostile input: its checker and shape
// inference divide by zero on a stride of 0 and read past short raw_data. So
// Anvil validates every field that later code sizes memory or loops by —
// dims, element and byte counts (checked int64), raw and typed data sizes,
// attribute ranges, external-data fields, subgraph nesting — and only then
// hands the model on. Every failure is one anvil::Error (kInvalidModel or
// kUnsupported) that names the tensor, node or attribute.
#pragma once

#include <string>

namespace onnx {
class ModelProto;
class TensorProto;
}  // namespace onnx

namespace anvil::onnx_io {

// Nesting limit for subgraphs (If/Loop/Scan bodies): deeper models are refused
// instead of recursing without bound.
constexpr int kMaxGraphDepth = 16;

void validate_model(const onnx::ModelProto& model);

// Dims, element/byte counts and the size of the data a tensor carries (raw,
// typed or external fields; external files are checked when read).
void validate_tensor(const onnx::TensorProto& tensor);

}  // namespace anvil::onnx_io
