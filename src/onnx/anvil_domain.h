// The `com.anvil` ONNX domain: how `anvil optimize` writes the nodes that
// standard ONNX at the model's opset cannot hold, and how the importer reads
// them back.
//   - Anvil's own fused ops (internal domain "anvil"): FusedConv, FusedMatMul,
//     FusedGemm, MaskedSoftmax, ElementwiseChain, FusedConvDepthwise, QkvAttention,
//     FusedBatchNorm, ChannelShuffle, SqueezeExcite, TokensToImage, ImageToTokens.
//   - ONNX ops newer than the model's opset that the passes create (Gelu-20,
//     LayerNormalization-17, Attention-23, RMSNormalization-23, Swish-24,
//     GroupNormalization-21):
//     written as com.anvil nodes of the
//     same name, meaning the ONNX op at that version. Raising the model's
//     opset instead would change the meaning of its other nodes.
#pragma once

#include <optional>
#include <string>

namespace anvil::onnx_io {

inline constexpr const char* kAnvilOnnxDomain = "com.anvil";
// Version 2 (2026-12-04) added FusedMatMul's transA / transB, which a
// version-1 reader would ignore; version-1 files read the same under 2.
inline constexpr int kAnvilOnnxDomainVersion = 2;

struct AnvilDomainOp {
  const char* op_type;
  const char* domain;  // in the IR: "anvil" or "" (ONNX)
  int opset;           // the IR node's opset
};

// The IR form of com.anvil op `op_type`; nullopt when it is not one.
std::optional<AnvilDomainOp> anvil_domain_op(const std::string& op_type);

}  // namespace anvil::onnx_io
