// ONNX operator versions: the opsets at which each ai.onnx operator changed
// (from ONNX's schema registry, generated into onnx_op_versions.inc).
//
// A node's version is the since_version of its op in effect at the model's
// opset: Add in an opset-12 model is Add-7, in an opset-14 model Add-14.
// Kernels declare the versions they implement; import reports any other as
// unsupported, naming node, op and version.
#pragma once

#include <string>
#include <vector>

namespace anvil::ir {

// The since_versions of an ai.onnx op; empty when ONNX has no such op.
const std::vector<int>& onnx_op_history(const std::string& op);

// The version of `op` in effect at `opset`: the largest since_version <= opset;
// 0 when the op is unknown or did not exist yet at that opset.
int onnx_op_version(const std::string& op, int opset);

// True when version `version` of `op` differs from the version before only in
// the element types it allows (from ONNX's schemas, onnx_type_only_versions.inc):
// the kernels of the version before run it, their dtype masks refusing the new types.
bool onnx_version_widens_types_only(const std::string& op, int version);

}  // namespace anvil::ir
