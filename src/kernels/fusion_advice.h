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
// beats the float32 GEMMs it replaces: on AVX-512 (anvil train 1.18x the
// samples/s on issue 9's MLP), and on AVX2 where each logical CPU's share of
// its L2 is 1 MiB or more (1.23x with ANVIL_MAX_ISA=avx2 on that Xeon's 2 MiB
// L2 a core): a group's tables (512 KiB; 256 KiB where K takes several
// groups) must stay in L2 beside the bits and Y's rows. Not where the share
// is smaller (a Zen 3's 512 KiB, halved by SMT: not measured). ANVIL_FUSE_TWO_CLASS_GATE=0
// says no, =1 yes on every ISA (tests); other values leave the choice to the CPU.
bool two_class_gate_fusion_pays(const ir::Node& fused);

// Whether Transpose [0, 2, 3, 1] of the image `probe` reads (a probe node
// anvil.ChannelsLastTranspose over it) would read the convolutions' layout as
// it is (kernels/dnnl/transpose.cc) rather than plain data: float32, rank 4,
// layouts allowed, and on AVX-512 (whose convolutions write NHWC) or with
// the channels a whole number of the ISA's blocks (below AVX-512 they write
// channel blocks, padded ones going to plain). passes/channels_last_before_split.cc
// asks it.
bool channels_last_transpose_reads_layout(const ir::Node& probe);

}  // namespace anvil::kernels
