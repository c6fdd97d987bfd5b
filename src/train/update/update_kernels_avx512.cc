// The optimizers' loops built for avx512 (CMake sets the flags by file name).
#include "train/update/update_kernels.h"

namespace anvil::train {

namespace {
#include "train/update/update_kernels_impl.h"
}  // namespace

extern const UpdateKernels kUpdateKernelsAvx512 = {adam_impl, sgd_impl, sum_squares_impl};

}  // namespace anvil::train
