// The vectorized loops built for the x86-64-v2 baseline (SSE4.1).
#include <immintrin.h>

#include <cstring>

#include "kernels/vec/vec_kernels.h"

namespace anvil::kernels::vec {

namespace {
#include "kernels/vec/vec_kernels_impl.h"
#include "kernels/vec/gemm_impl.h"
#include "kernels/vec/pool_impl.h"
#include "kernels/vec/winograd_impl.h"
#include "kernels/vec/bit_gemm_impl.h"
#include "kernels/vec/recurrent_impl.h"
}  // namespace

extern const VecKernels kVecKernelsSse41 = {select32_impl, transpose32_impl, reduce_rows_impl, sum_columns_impl,
                                          extreme_columns_impl, softmax_row_impl, rms_norm_row_impl, moments_row_impl,
                                          attention_exps_impl, chain_block_impl, batch_norm_rows_impl, swish_impl, sigmoid_impl,
                                          dot_rows_impl, add_scaled_rows_impl,
                                          {kGemmMr, kGemmNr, kGemmKc, kGemmKc, kGemmKcLargeL2, kWidth, kGemmRowSweepKc, kGemmPackContiguousA, gemm_tile_impl, gemm_tile_packed_a_impl, gemm_pack_a_impl,
                                           gemm_gather_conv_a_impl, transpose32_impl, gemm_epilogue_impl},
                                          max_pool_rows_impl, max_pool_grad_rows_impl,
                                            {winograd_input_tile_impl, winograd_output_tile_impl},
                                          {bit_gemm_block_impl, gate_row_impl},
                                          {rnn_cell_impl, lstm_cell_impl, gru_gates_impl, gru_output_impl}};

}  // namespace anvil::kernels::vec
