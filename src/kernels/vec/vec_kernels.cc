#include "kernels/vec/vec_kernels.h"

namespace anvil::kernels::vec {

extern const VecKernels kVecKernelsSse41, kVecKernelsAvx2, kVecKernelsAvx512;

const VecKernels& vec_kernels_for(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::kAvx512: return kVecKernelsAvx512;
    case VectorIsa::kAvx2: return kVecKernelsAvx2;
    case VectorIsa::kSse41: break;
  }
  return kVecKernelsSse41;
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
