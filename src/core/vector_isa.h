// The vector ISA Anvil's own kernels are dispatched to: the best the CPU has,
// capped by ANVIL_MAX_ISA (the same variable that caps oneDNN), so every path
// can be tested on one machine.
//
// Kernels that have per-ISA code keep one translation unit per level, named
// *_sse41.cc, *_avx2.cc and *_avx512.cc (CMake adds the matching -m flags),
// and pick their function table with vector_isa() once.
#pragma once

#include <vector>

namespace anvil {

enum class VectorIsa { kSse41 = 0, kAvx2 = 1, kAvx512 = 2 };

VectorIsa vector_isa();
// Every level the CPU runs, lowest first, whatever ANVIL_MAX_ISA says (tests: each path).
std::vector<VectorIsa> supported_vector_isas();
const char* vector_isa_name(VectorIsa isa);

}  // namespace anvil
