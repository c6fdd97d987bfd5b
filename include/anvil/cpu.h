// What the CPU offers, read with CPUID and sysfs, and what Anvil will use of it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace anvil {

struct CpuInfo {
  std::string vendor;
  std::string model_name;
  int logical_cores = 0;
  int physical_cores = 0;
  size_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;  // per instance
  int l2_shared_by = 1;  // logical CPUs sharing cpu0's L2 instance (SMT siblings, a cluster of E-cores)
  bool sse41 = false, sse42 = false, avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_vnni = false, avx512_bf16 = false, avx_vnni = false;
  bool amx_tile = false, amx_int8 = false, amx_bf16 = false;

  std::vector<std::string> isa_list() const;  // names of the extensions present
};

const CpuInfo& cpu_info();

// The ISA oneDNN dispatches to (honours ONEDNN_MAX_CPU_ISA / ANVIL_MAX_ISA).
std::string dnnl_isa_name();
std::string dnnl_version();

}  // namespace anvil
