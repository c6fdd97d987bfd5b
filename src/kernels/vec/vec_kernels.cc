#include "kernels/vec/vec_kernels.h"

#include <algorithm>

#include "anvil/cpu.h"

namespace anvil::kernels::vec {

extern const VecKernels kVecKernelsSse41, kVecKernelsAvx2, kVecKernelsAvx512;

int gemm_kc_for_l2(const GemmKernels& g, size_t l2_bytes) {
  return l2_bytes >= kLargeL2Bytes ? g.kc_large_l2 : g.kc_small_l2;
}

namespace {

// An ISA's table with the GEMM's k-block fitted to this CPU's L2.
VecKernels fitted_to_l2(const VecKernels& table) {
  VecKernels fitted = table;
  // A core's L2 shared by SMT siblings (or a cluster of cores) holds each
  // thread's share only.
  const CpuInfo& cpu = cpu_info();
  fitted.gemm.kc = gemm_kc_for_l2(table.gemm, cpu.l2_bytes / static_cast<size_t>(std::max(1, cpu.l2_shared_by)));
  return fitted;
}

}  // namespace

const VecKernels& vec_kernels_for(VectorIsa isa) {
  static const VecKernels avx512 = fitted_to_l2(kVecKernelsAvx512), avx2 = fitted_to_l2(kVecKernelsAvx2),
                          sse41 = fitted_to_l2(kVecKernelsSse41);
  switch (isa) {
    case VectorIsa::kAvx512: return avx512;
    case VectorIsa::kAvx2: return avx2;
    case VectorIsa::kSse41: break;
  }
  return sse41;
}

const VecKernels& vec_kernels() {
  static const VecKernels& table = vec_kernels_for(vector_isa());
  return table;
}

const char* vec_impl_name() {
  switch (vector_isa()) {
    case VectorIsa::kAvx512: return "vec:avx512";
    case VectorIsa::kAvx2: return "vec:avx2";
    case VectorIsa::kSse41: break;
  }
  return "vec:sse41";
}

}  // namespace anvil::kernels::vec
