#include "core/vector_isa.h"

#include <cstdlib>
#include <string>

#include "anvil/cpu.h"
#include "core/check.h"

namespace anvil {

namespace {

// The cap ANVIL_MAX_ISA sets on our vector code; oneDNN's names map to the
// nearest level below (avx and sse41 -> sse41, avx2_vnni -> avx2).
VectorIsa cap_from_env() {
  const char* env = std::getenv("ANVIL_MAX_ISA");
  if (!env || !*env) return VectorIsa::kAvx512;
  const std::string s = env;
  if (s == "sse41" || s == "avx") return VectorIsa::kSse41;
  if (s == "avx2" || s == "avx2_vnni") return VectorIsa::kAvx2;
  if (s == "avx512" || s == "avx512_vnni" || s == "avx512_bf16" || s == "amx" || s == "all") return VectorIsa::kAvx512;
  fail(ErrorKind::kInvalidArgument,
       "ANVIL_MAX_ISA='{}' is not one of sse41, avx, avx2, avx2_vnni, avx512, avx512_vnni, avx512_bf16, amx, all", s);
}

VectorIsa detect() {
  const VectorIsa best = supported_vector_isas().back();
  const VectorIsa cap = cap_from_env();
  return static_cast<int>(cap) < static_cast<int>(best) ? cap : best;
}

}  // namespace

std::vector<VectorIsa> supported_vector_isas() {
  const CpuInfo& cpu = cpu_info();
  std::vector<VectorIsa> isas = {VectorIsa::kSse41};
  if (cpu.avx2 && cpu.fma) isas.push_back(VectorIsa::kAvx2);
  if (isas.back() == VectorIsa::kAvx2 && cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512dq)
    isas.push_back(VectorIsa::kAvx512);
  return isas;
}

VectorIsa vector_isa() {
  static const VectorIsa isa = detect();
  return isa;
}

const char* vector_isa_name(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::kSse41: return "sse41";
    case VectorIsa::kAvx2: return "avx2";
    case VectorIsa::kAvx512: return "avx512";
  }
  return "?";
}

}  // namespace anvil
