#include "train/update/update_kernels.h"

namespace anvil::train {

extern const UpdateKernels kUpdateKernelsSse41, kUpdateKernelsAvx2, kUpdateKernelsAvx512;

const UpdateKernels& update_kernels_for(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::kAvx512: return kUpdateKernelsAvx512;
    case VectorIsa::kAvx2: return kUpdateKernelsAvx2;
    case VectorIsa::kSse41: break;
  }
  return kUpdateKernelsSse41;
}

const UpdateKernels& update_kernels() {
  static const UpdateKernels& table = update_kernels_for(vector_isa());
  return table;
}

}  // namespace anvil::train
