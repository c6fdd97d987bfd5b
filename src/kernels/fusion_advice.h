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

}  // namespace anvil::kernels
