#include "kernels/vec/winograd.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "anvil/cpu.h"
#include "core/check.h"
#include "core/checked.h"
#include "kernels/thread_share.h"
#include "kernels/vec/gemm.h"

namespace anvil::kernels::vec {

namespace {

// G of U = G g G^T (6 x 3).
constexpr double kG[6][3] = {{1 / 4.0, 0, 0},           {-1 / 6.0, -1 / 6.0, -1 / 6.0}, {-1 / 6.0, 1 / 6.0, -1 / 6.0},
                             {1 / 24.0, 1 / 12.0, 1 / 6.0}, {1 / 24.0, -1 / 12.0, 1 / 6.0}, {0, 0, 1}};

// Tiles per block for a thread with `thread_tiles` tiles: as many as keep
// the block's transformed input (36 x C_in floats a tile) and one panel's
// products (36 x nr) in half the L2, a whole number of row tiles; or the
// thread's whole share where it fits three quarters of the L2. The weights
// (36 x C_in x C_out) are read once per block, from L3 or below: a block of
// T tiles does T / 2 FLOPs per byte of them. On a 512 KiB L2 (Zen 3) half
// would cut ResNet's 14x14 stage (256 channels, 8 tiles a thread at two
// threads) into blocks of 4, each reading its 9.7 MB of weights.
int64_t block_tiles(const GemmKernels& g, int64_t cin, int64_t thread_tiles) {
  const int64_t l2 = static_cast<int64_t>(cpu_info().l2_bytes);
  const int64_t per_tile = kWinogradProducts * (cin + g.nr) * static_cast<int64_t>(sizeof(float));
  if (thread_tiles * per_tile <= l2 / 4 * 3) return std::max<int64_t>(thread_tiles, 1);
  return std::max<int64_t>(g.mr, l2 / 2 / per_tile / g.mr * g.mr);
}

// A thread's buffers for a block's transformed input and products, kept across runs.
struct WinogradBuffers {
  std::vector<float> v, m;
};
WinogradBuffers& winograd_buffers() {
  thread_local WinogradBuffers buffers;
  return buffers;
}

// Tiles [t0, t1) of the batch (an item's tiles row by row, then the next
// item's): the input transform, then per panel of output channels the 36
// products and the output transform. Numbering the batch's tiles as one
// range reads the weights once per block, not once per item.
class TileBlock {
 public:
  TileBlock(const VecKernels& k, const WinogradConvArgs& p) : k_(k), g_(k.gemm), p_(p) {}

  // more_blocks: the thread runs another block after this one (which reads
  // the weights from their start again).
  void run(int64_t t0, int64_t t1, float* v, float* m, bool more_blocks) const {
    const int64_t tiles = t1 - t0;
    transform_input(t0, t1, v);
    for (int64_t panel = 0; panel < panels(); ++panel) {
      multiply_panel(panel, tiles, v, m, more_blocks);
      transform_output(panel, t0, t1, m);
    }
  }

 private:
  int64_t tiles_w() const { return ceil_div(p_.ow, kWinogradTile); }
  int64_t panels() const { return ceil_div(p_.cout, g_.nr); }

  // The weights' panel block of output-channel panel `panel`, product e and
  // k-block k0 (pack_gemm_b's layout per product), and its k-block's rows.
  struct PanelBlock {
    const float* b = nullptr;
    int64_t kc = 0;
  };
  PanelBlock panel_block(int64_t panel, int e, int64_t k0) const {
    const int64_t n_padded = panels() * g_.nr, kc = std::min<int64_t>(g_.kc, p_.cin - k0);
    return {p_.u_packed + e * p_.cin * n_padded + k0 * n_padded + panel * kc * g_.nr, kc};
  }
  // The block read after (panel, e, k0): the next k-block, product or panel,
  // or the first again for the thread's next block of tiles; none after that.
  PanelBlock next_panel_block(int64_t panel, int e, int64_t k0, bool more_blocks) const {
    if (k0 + g_.kc < p_.cin) return panel_block(panel, e, k0 + g_.kc);
    if (e + 1 < kWinogradProducts) return panel_block(panel, e + 1, 0);
    if (panel + 1 < panels()) return panel_block(panel + 1, 0, 0);
    return more_blocks ? panel_block(0, 0, 0) : PanelBlock{};
  }
  int64_t tiles_per_item() const { return ceil_div(p_.oh, kWinogradTile) * tiles_w(); }

  // Tile t's batch item, and its place there: the output's top-left pixel.
  struct TilePlace {
    int64_t item, oy, ox;
  };
  TilePlace place(int64_t t) const {
    const int64_t item = t / tiles_per_item(), in_item = t % tiles_per_item();
    return {item, in_item / tiles_w() * kWinogradTile, in_item % tiles_w() * kWinogradTile};
  }

  // V: tile t's 36 transformed rows of C_in, one after another, at v + t * 36 * C_in
  // (element e's matrix [tiles x C_in] at v + e * C_in, rows 36 * C_in apart):
  // each call writes lines next to the last one's. Element-major, the 36
  // matrices a block apart, the Winograd convolutions ran 1-6% slower.
  void transform_input(int64_t t0, int64_t t1, float* v) const {
    const int64_t plane = p_.ih * p_.iw * g_.width, v_tile = kWinogradProducts * p_.cin;
    for (int64_t t = t0; t < t1; ++t) {
      const TilePlace at = place(t);
      const float* x = p_.x + at.item * p_.x_item;
      for (int64_t c = 0; c < p_.cin; c += g_.width)
        k_.winograd.input_tile(x + c / g_.width * plane, p_.ih, p_.iw, at.oy - p_.pad_top, at.ox - p_.pad_left,
                               v + (t - t0) * v_tile + c, p_.cin);
    }
  }

  // M: element e's products for the panel's columns, [tiles x nr] at m + e * tiles * nr.
  void multiply_panel(int64_t panel, int64_t tiles, const float* v, float* m, bool more_blocks) const {
    const int n = static_cast<int>(std::min<int64_t>(g_.nr, p_.cout - panel * g_.nr));
    const int64_t lda = kWinogradProducts * p_.cin, row_tiles = ceil_div(tiles, g_.mr);
    for (int e = 0; e < kWinogradProducts; ++e) {
      const float* a = v + e * p_.cin;
      float* c = m + e * tiles * g_.nr;
      for (int64_t k0 = 0; k0 < p_.cin; k0 += g_.kc) {
        const PanelBlock block = panel_block(panel, e, k0);
        // The row tiles split the next block's lines (GemmPrefetch): weights that stream from
        // memory otherwise arrive only as the first row tile asks for them.
        const PanelBlock next = p_.prefetch_b ? next_panel_block(panel, e, k0, more_blocks) : PanelBlock{};
        for (int64_t i = 0; i < tiles; i += g_.mr) {
          const int rows = static_cast<int>(std::min<int64_t>(g_.mr, tiles - i));
          float* tile = c + i * g_.nr;
          g_.tile(a + i * lda + k0, lda, block.b, block.kc, k0 > 0 ? tile : nullptr, tile, g_.nr, rows, n, nullptr,
                  gemm_prefetch_share(next.b, next.kc * g_.nr, i / g_.mr, row_tiles));
        }
      }
    }
  }

  void transform_output(int64_t panel, int64_t t0, int64_t t1, const float* m) const {
    const int64_t tiles = t1 - t0, m_stride = tiles * g_.nr, plane = p_.oh * p_.ow * g_.width;
    const int64_t j0 = panel * g_.nr, j1 = std::min<int64_t>(p_.cout, j0 + g_.nr);
    for (int64_t t = t0; t < t1; ++t) {
      const TilePlace tile = place(t);
      const int rows = static_cast<int>(std::min<int64_t>(kWinogradTile, p_.oh - tile.oy));
      const int cols = static_cast<int>(std::min<int64_t>(kWinogradTile, p_.ow - tile.ox));
      for (int64_t j = j0; j < j1; j += g_.width) {
        const int64_t at = tile.item * p_.y_item + j / g_.width * plane + (tile.oy * p_.ow + tile.ox) * g_.width;
        k_.winograd.output_tile(m + (t - t0) * g_.nr + (j - j0), m_stride, p_.bias ? p_.bias + j : nullptr,
                                p_.residual ? p_.residual + at : nullptr, p_.y + at, p_.ow, rows, cols, p_.relu);
      }
    }
  }

  const VecKernels& k_;
  const GemmKernels& g_;
  const WinogradConvArgs& p_;
};

}  // namespace

int64_t winograd_row_tiles(const GemmKernels& g, int64_t batch, int64_t oh, int64_t ow) {
  return ceil_div(batch * ceil_div(oh, kWinogradTile) * ceil_div(ow, kWinogradTile), g.mr);
}

int64_t winograd_weight_bytes(const GemmKernels& g, int64_t cout, int64_t cin) {
  return checked_mul(winograd_packed_floats(g, cout, cin), int64_t{kWinogradProducts * sizeof(float)},
                     "Winograd weights");
}

int64_t winograd_packed_floats(const GemmKernels& g, int64_t cout, int64_t cin) {
  return checked_mul(cin, ceil_div(cout, g.nr) * g.nr, "Winograd weights");
}

Tensor pack_winograd_weights(const GemmKernels& g, const float* w, int64_t cout, int64_t cin) {
  const int64_t per_matrix = winograd_packed_floats(g, cout, cin);
  Tensor packed = Tensor::uninitialized(
      DType::kFloat32, {checked_mul(per_matrix, int64_t{kWinogradProducts}, "Winograd weights")});
  // U[e] as [C_in, C_out] (e = 6 i + j), then packed.
  std::vector<float> u(static_cast<size_t>(checked_mul(cin, cout, "Winograd weights")));
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j) {
      for (int64_t o = 0; o < cout; ++o)
        for (int64_t c = 0; c < cin; ++c) {
          const float* f = w + (o * cin + c) * 9;
          double sum = 0;
          for (int a = 0; a < 3; ++a)
            for (int b = 0; b < 3; ++b) sum += kG[i][a] * f[a * 3 + b] * kG[j][b];
          u[static_cast<size_t>(c * cout + o)] = static_cast<float>(sum);
        }
      const Tensor one = pack_gemm_b(g, u.data(), cin, cout, cout, 1);
      std::memcpy(packed.data<float>() + (i * 6 + j) * per_matrix, one.data<float>(),
                  static_cast<size_t>(per_matrix) * sizeof(float));
    }
  return packed;
}

void conv_winograd(const VecKernels& k, const WinogradConvArgs& p) {
  const GemmKernels& g = k.gemm;
  ANVIL_CHECK(p.cin % g.width == 0 && p.cout % g.width == 0 && p.cin > 0, ErrorKind::kInternal,
              "conv_winograd: channels {} -> {} are not whole vectors of {}", p.cin, p.cout, g.width);
  const int64_t tiles = p.batch * ceil_div(p.oh, kWinogradTile) * ceil_div(p.ow, kWinogradTile);
  if (tiles == 0 || p.cout == 0) return;
  const int64_t work = tiles * p.cin * p.cout;  // a product of that many multiply-adds, times 36
  const TileBlock tile_block(k, p);
#pragma omp parallel if (work >= (1 << 14) && tiles > g.mr)
  {
    // Whole row tiles per thread, so only the last block has a short one.
    const auto [r0, r1] = share(ceil_div(tiles, g.mr), omp_get_thread_num(), omp_get_num_threads());
    const int64_t t_begin = r0 * g.mr, t_end = std::min(tiles, r1 * g.mr);
    const int64_t block = p.block_tiles > 0 ? p.block_tiles : block_tiles(g, p.cin, t_end - t_begin);
    WinogradBuffers& buffers = winograd_buffers();
    buffers.v.resize(static_cast<size_t>(kWinogradProducts * block * p.cin));
    buffers.m.resize(static_cast<size_t>(kWinogradProducts * block * g.nr));
    for (int64_t t0 = t_begin; t0 < t_end; t0 += block)
      tile_block.run(t0, std::min(t_end, t0 + block), buffers.v.data(), buffers.m.data(), t0 + block < t_end);
  }
}

}  // namespace anvil::kernels::vec
