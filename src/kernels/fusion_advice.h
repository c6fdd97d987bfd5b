// What the kernels tell the graph passes about fusions that pay only on some
// machines (passes::FusionAdvisor, wired by the runtime).
#pragma once

#include "ir/graph.h"

namespace anvil::kernels {

// Whether an anvil.FusedConvDepthwise node (its inputs typed) runs in one
// pass over the data at `threads` threads on this machine (kernels/dnnl/conv.cc),
// rather than as its two convolutions one after the other.
// ANVIL_FUSE_DEPTHWISE=0 says no.
bool conv_depthwise_fusion_pays(const ir::Node& fused, int threads);

// Whether a two-class head's gradient kept as its factors (anvil.TwoClassReluGrad
// and the anvil.BitGemm products by its 0/1 gate, kernels/vec/bit_gemm.cc)
// beats the float32 GEMMs it replaces: on AVX-512, where the table lookups
// ran 1.54x oneDNN's GEMM, not on AVX2, where they ran 0.68x
// (bench/tools/binary_gemm_ab). ANVIL_FUSE_TWO_CLASS_GATE=0 says no, =1 yes
// on every ISA (tests); other values leave the choice to the ISA.
bool two_class_gate_fusion_pays(const ir::Node& fused);

}  // namespace anvil::kernels
