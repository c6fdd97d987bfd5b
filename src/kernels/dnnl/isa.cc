// Which ISA oneDNN runs, and ANVIL_MAX_ISA: caps oneDNN's dispatch so every
// ISA path can be exercised on one machine.
#include <cstdlib>
#include <string>

#include <oneapi/dnnl/dnnl.hpp>

#include "anvil/cpu.h"
#include "core/check.h"

namespace anvil {

namespace {

dnnl::cpu_isa parse_isa(const std::string& s) {
  using isa = dnnl::cpu_isa;
  if (s == "sse41") return isa::sse41;
  if (s == "avx") return isa::avx;
  if (s == "avx2") return isa::avx2;
  if (s == "avx2_vnni") return isa::avx2_vnni;
  if (s == "avx512") return isa::avx512_core;
  if (s == "avx512_vnni") return isa::avx512_core_vnni;
  if (s == "avx512_bf16") return isa::avx512_core_bf16;
  if (s == "amx") return isa::avx512_core_amx;
  if (s == "all") return isa::all;
  fail(ErrorKind::kInvalidArgument,
       "ANVIL_MAX_ISA='{}' is not one of sse41, avx, avx2, avx2_vnni, avx512, avx512_vnni, avx512_bf16, amx, all", s);
}

}  // namespace

// Applies ANVIL_MAX_ISA once, before oneDNN creates any primitive.
void apply_max_isa() {
  static bool done = [] {
    const char* cap = std::getenv("ANVIL_MAX_ISA");
    if (cap && *cap) dnnl::set_max_cpu_isa(parse_isa(cap));
    return true;
  }();
  (void)done;
}

std::string dnnl_isa_name() {
  apply_max_isa();
  using isa = dnnl::cpu_isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case isa::sse41: return "sse41";
    case isa::avx: return "avx";
    case isa::avx2: return "avx2";
    case isa::avx2_vnni: return "avx2_vnni";
    case isa::avx512_core: return "avx512_core";
    case isa::avx512_core_vnni: return "avx512_core_vnni";
    case isa::avx512_core_bf16: return "avx512_core_bf16";
    case isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

std::string dnnl_version() {
  const dnnl_version_t* v = ::dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

}  // namespace anvil
