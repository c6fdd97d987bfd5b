// Anvil's vectorized kernels (src/kernels/vec/): every ISA path the CPU has
// against formulas computed here in double, and each op kernel (at the ISA
// vector_isa() picks, which ANVIL_MAX_ISA caps: ctest also runs these tests
// capped at sse41 and avx2) against the reference kernel.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <tuple>

#include <sys/mman.h>
#include <unistd.h>

#include "anvil/cpu.h"
#include "core/vector_isa.h"
#include "kernel_tester.h"
#include "kernels/vec/vec_kernels.h"

namespace anvil {
namespace {

using kernels::Backend;
using kernels::vec::Reduction;
using kernels::vec::VecKernels;
using testing::attrs;
using testing::KernelOptions;
using testing::random_f32;
using testing::run_kernel;
using testing::values;

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> normal_values(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// Relative error against a double reference, with an absolute floor for values near 0.
void expect_close(float got, double want, double rel, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": got " << got << ", want NaN";
    return;
  }
  if (std::isinf(want)) {
    EXPECT_EQ(got, static_cast<float>(want)) << what;
    return;
  }
  EXPECT_LE(std::abs(got - want), rel * std::max(1.0, std::abs(want))) << what << ": got " << got << ", want " << want;
}

TEST(VecKernels, SelectEveryStridePattern) {
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const VecKernels& k = kernels::vec::vec_kernels_for(isa);
    for (int64_t n : {1, 7, 8, 33, 100}) {
      std::vector<uint8_t> c(static_cast<size_t>(n));
      std::vector<uint32_t> x(static_cast<size_t>(n)), y(static_cast<size_t>(n)), o(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        c[j] = (j * 7 + 3) % 5 < 2;
        x[j] = static_cast<uint32_t>(1000 + j);
        y[j] = static_cast<uint32_t>(2000 + j);
      }
      for (int sc : {0, 1})
        for (int sx : {0, 1})
          for (int sy : {0, 1}) {
            k.select32(reinterpret_cast<const bool*>(c.data()), x.data(), y.data(), o.data(), n, sc, sx, sy);
            for (int64_t j = 0; j < n; ++j) {
              const uint32_t want = c[sc * j] ? x[sx * j] : y[sy * j];
              ASSERT_EQ(o[j], want) << "n " << n << " strides " << sc << sx << sy << " at " << j;
            }
          }
    }
  }
}

TEST(VecKernels, TransposeOfTilesAndEdges) {
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const VecKernels& k = kernels::vec::vec_kernels_for(isa);
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {8, 8}, {16, 9}, {17, 31}, {64, 40}}) {
      const int64_t src_ld = cols + 3, dst_ld = rows + 2;  // leading dimensions wider than the block
      std::vector<uint32_t> src(static_cast<size_t>(rows * src_ld)), dst(static_cast<size_t>(cols * dst_ld), 0xdead);
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint32_t>(i * 2654435761u);
      k.transpose32(src.data(), src_ld, dst.data(), dst_ld, rows, cols);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
          ASSERT_EQ(dst[j * dst_ld + i], src[i * src_ld + j]) << rows << "x" << cols << " at " << i << "," << j;
      for (int64_t j = 0; j < cols; ++j)  // the padding between rows of dst is untouched
        for (int64_t i = rows; i < dst_ld; ++i) ASSERT_EQ(dst[j * dst_ld + i], 0xdeadu);
    }
  }
}

double reduce_double(Reduction kind, const float* x, int64_t n) {
  double acc = kind == Reduction::kMax ? -INFINITY : kind == Reduction::kMin ? INFINITY : 0.0;
  double shift = 0;
  if (kind == Reduction::kLogSumExp) {
    shift = -INFINITY;
    for (int64_t j = 0; j < n; ++j) shift = std::max(shift, static_cast<double>(x[j]));
    if (std::isinf(shift)) shift = 0;
  }
  for (int64_t j = 0; j < n; ++j) {
    const double v = x[j];
    switch (kind) {
      case Reduction::kSum: case Reduction::kMean: acc += v; break;
      case Reduction::kMax: acc = (v > acc || std::isnan(v)) && !std::isnan(acc) ? v : acc; break;
      case Reduction::kMin: acc = (v < acc || std::isnan(v)) && !std::isnan(acc) ? v : acc; break;
      case Reduction::kSumSquare: case Reduction::kL2: case Reduction::kSquaredDeviation: acc += v * v; break;  // from 0
      case Reduction::kL1: acc += std::abs(v); break;
      case Reduction::kLogSumExp: acc += std::exp(v - shift); break;
    }
  }
  if (kind == Reduction::kMean) return acc / static_cast<double>(n);
  if (kind == Reduction::kL2) return std::sqrt(acc);
  if (kind == Reduction::kLogSumExp) return shift + std::log(acc);
  return acc;
}

TEST(VecKernels, RowReductionsMatchDoublePrecision) {
  const Reduction kinds[] = {Reduction::kSum, Reduction::kMean, Reduction::kMax, Reduction::kMin,
                             Reduction::kSumSquare, Reduction::kL1, Reduction::kL2, Reduction::kLogSumExp,
                             Reduction::kSquaredDeviation};
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const VecKernels& k = kernels::vec::vec_kernels_for(isa);
    for (int64_t n : {1, 5, 16, 67, 768, 4099}) {
      const int64_t rows = 3;
      std::vector<float> x = normal_values(static_cast<size_t>(rows * n), static_cast<uint32_t>(n), 3.f);
      for (Reduction kind : kinds) {
        std::vector<float> out(rows);
        k.reduce_rows(kind, x.data(), rows, n, out.data());
        for (int64_t r = 0; r < rows; ++r)
          expect_close(out[r], reduce_double(kind, x.data() + r * n, n), 2e-5,
                       "kind " + std::to_string(static_cast<int>(kind)) + " n " + std::to_string(n));
      }
    }
  }
}

// dot_rows and add_scaled_rows (a squeeze-and-excitation block's two
// products of one row) at lengths with and without a vector tail, and
// add_scaled_rows over columns of wider rows (ld > n) into a nonzero out.
TEST(VecKernels, SingleRowProductsMatchDoublePrecision) {
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const VecKernels& k = kernels::vec::vec_kernels_for(isa);
    for (int64_t n : {1, 7, 16, 40, 67, 130, 1152}) {
      const int64_t rows = 5, ld = n + 3;
      const std::vector<float> w = normal_values(static_cast<size_t>(rows * ld), static_cast<uint32_t>(n), 1.f);
      const std::vector<float> x = normal_values(static_cast<size_t>(std::max(n, rows)), static_cast<uint32_t>(n + 1), 1.f);
      std::vector<float> dots(rows);
      k.dot_rows(w.data(), x.data(), rows, n, dots.data());  // rows n apart here
      for (int64_t r = 0; r < rows; ++r) {
        double want = 0;
        for (int64_t j = 0; j < n; ++j) want += double(w[static_cast<size_t>(r * n + j)]) * x[static_cast<size_t>(j)];
        expect_close(dots[static_cast<size_t>(r)], want, 2e-5, "dot_rows n " + std::to_string(n));
      }
      std::vector<float> out(static_cast<size_t>(n), 0.5f);
      k.add_scaled_rows(w.data(), ld, x.data(), rows, n, out.data());
      for (int64_t j = 0; j < n; ++j) {
        double want = 0.5;
        for (int64_t r = 0; r < rows; ++r) want += double(x[static_cast<size_t>(r)]) * w[static_cast<size_t>(r * ld + j)];
        expect_close(out[static_cast<size_t>(j)], want, 2e-5, "add_scaled_rows n " + std::to_string(n));
      }
    }
  }
}

TEST(VecKernels, RowReductionsOfSpecialValues) {
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const VecKernels& k = kernels::vec::vec_kernels_for(isa);
    float out = 0;
    std::vector<float> with_nan(40, 1.f);
    with_nan[37] = std::nanf("");
    for (Reduction kind : {Reduction::kMax, Reduction::kMin, Reduction::kSum}) {
      k.reduce_rows(kind, with_nan.data(), 1, 40, &out);
      EXPECT_TRUE(std::isnan(out)) << static_cast<int>(kind);
    }
    // A NaN anywhere in a long row (the four-vector body, the single
    // vectors after it, the tail) reaches the result.
    for (int64_t n : {70, 200, 1100})
      for (int64_t at : {int64_t{0}, int64_t{17}, int64_t{63}, int64_t{64}, n / 2, n - 1}) {
        std::vector<float> row = normal_values(static_cast<size_t>(n), 5);
        row[static_cast<size_t>(at)] = std::nanf("");
        for (Reduction kind : {Reduction::kMax, Reduction::kMin, Reduction::kSum, Reduction::kL2}) {
          k.reduce_rows(kind, row.data(), 1, n, &out);
          EXPECT_TRUE(std::isnan(out)) << static_cast<int>(kind) << " n " << n << " NaN at " << at;
        }
      }
    std::vector<float> with_inf(40, -2.f);
    with_inf[3] = -kInf;
    k.reduce_rows(Reduction::kMin, with_inf.data(), 1, 40, &out);
    EXPECT_EQ(out, -kInf);
    k.reduce_rows(Reduction::kMax, with_inf.data(), 1, 40, &out);  // an infinity without NaN: no NaN
    EXPECT_EQ(out, -2.f);
    std::vector<float> all_minus_inf(20, -kInf);
    k.reduce_rows(Reduction::kLogSumExp, all_minus_inf.data(), 1, 20, &out);
    EXPECT_EQ(out, -kInf);
    // Empty rows: the reductions' identities, and NaN for the mean (0 / 0).
    k.reduce_rows(Reduction::kSum, nullptr, 1, 0, &out);
    EXPECT_EQ(out, 0.f);
    k.reduce_rows(Reduction::kMax, nullptr, 1, 0, &out);
    EXPECT_EQ(out, -kInf);
    k.reduce_rows(Reduction::kMean, nullptr, 1, 0, &out);
    EXPECT_TRUE(std::isnan(out));
  }
}

// The column folds against reduce_double down each column, finished as reduce.cc does.
TEST(VecKernels, ColumnFoldsMatchDoublePrecision) {
  const Reduction kinds[] = {Reduction::kSum, Reduction::kMean, Reduction::kMax, Reduction::kMin,
                             Reduction::kSumSquare, Reduction::kL1, Reduction::kL2, Reduction::kLogSumExp};
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const VecKernels& k = kernels::vec::vec_kernels_for(isa);
    for (int64_t n : {1, 5, 16, 67, 768, 2048})
      for (int64_t rows : {1, 3, 64, 65, 131}) {
        const int64_t ld = n + 3;
        std::vector<float> x = normal_values(static_cast<size_t>(rows * ld), static_cast<uint32_t>(n + rows), 3.f);
        for (Reduction kind : kinds) {
          const bool extreme = kind == Reduction::kMax || kind == Reduction::kMin;
          std::vector<float> ext(static_cast<size_t>(n), kind == Reduction::kMin ? kInf : -kInf), shift(ext.size());
          std::vector<double> acc(ext.size(), 0.0);
          if (extreme || kind == Reduction::kLogSumExp)
            k.extreme_columns(extreme ? kind : Reduction::kMax, x.data(), rows, ld, n, ext.data());
          for (int64_t j = 0; j < n; ++j) shift[j] = std::isinf(ext[j]) ? 0.f : ext[j];
          if (!extreme) k.sum_columns(kind, x.data(), rows, ld, n, shift.data(), acc.data());
          for (int64_t j = 0; j < n; ++j) {
            std::vector<float> column(static_cast<size_t>(rows));
            for (int64_t r = 0; r < rows; ++r) column[r] = x[r * ld + j];
            const double got = extreme                          ? ext[j]
                               : kind == Reduction::kMean      ? acc[j] / rows
                               : kind == Reduction::kL2        ? std::sqrt(acc[j])
                               : kind == Reduction::kLogSumExp ? shift[j] + std::log(acc[j])
                                                               : acc[j];
            expect_close(static_cast<float>(got), reduce_double(kind, column.data(), rows), 2e-5,
                         "kind " + std::to_string(static_cast<int>(kind)) + " n " + std::to_string(n) + " rows " +
                             std::to_string(rows) + " column " + std::to_string(j));
          }
        }
      }
  }
}

// sum_columns' squared deviations from each column's shift (a variance's
// second pass, the shift the column's mean rounded to float): values of mean
// 100 and spread 1, and a constant column (deviations of exactly 0), against
// the sum in double; narrow rows (under a vector) and wide, runs of 64 rows
// and more.
TEST(VecKernels, ColumnSquaredDeviationsMatchDoublePrecision) {
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const VecKernels& k = kernels::vec::vec_kernels_for(isa);
    for (int64_t n : {3, 16, 67, 300})
      for (int64_t rows : {1, 64, 131}) {
        const int64_t ld = n + 1;
        std::vector<float> x = normal_values(static_cast<size_t>(rows * ld), static_cast<uint32_t>(n * rows), 1.f);
        for (float& v : x) v += 100.f;
        for (int64_t r = 0; r < rows; ++r) x[r * ld + 1] = 42.5f;  // column 1: constant
        std::vector<float> shift(static_cast<size_t>(n));
        std::vector<double> acc(shift.size(), 0.0);
        for (int64_t j = 0; j < n; ++j) {
          double mean = 0;
          for (int64_t r = 0; r < rows; ++r) mean += x[r * ld + j];
          shift[j] = static_cast<float>(mean / static_cast<double>(rows));
        }
        k.sum_columns(Reduction::kSquaredDeviation, x.data(), rows, ld, n, shift.data(), acc.data());
        for (int64_t j = 0; j < n; ++j) {
          double want = 0;
          for (int64_t r = 0; r < rows; ++r) want += std::pow(static_cast<double>(x[r * ld + j]) - shift[j], 2);
          EXPECT_NEAR(acc[j], want, 2e-5 * (1 + want)) << "n " << n << " rows " << rows << " column " << j;
        }
        EXPECT_EQ(acc[1], 0.0) << "n " << n << " rows " << rows;
      }
  }
}

void softmax_double(const float* x, const float* mask, int mask_stride, int64_t n, bool log, std::vector<double>& y) {
  y.assign(static_cast<size_t>(n), 0.0);
  double m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    y[j] = static_cast<double>(x[j]) + (mask ? mask[mask_stride * j] : 0.f);
    m = std::max(m, y[j]);
  }
  if (std::isinf(m)) m = 0;
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(y[j] - m);
  for (int64_t j = 0; j < n; ++j) y[j] = log ? (y[j] - m) - std::log(sum) : std::exp(y[j] - m) / sum;
}

TEST(VecKernels, SoftmaxRowsWithAndWithoutMasks) {
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const VecKernels& k = kernels::vec::vec_kernels_for(isa);
    for (int64_t n : {1, 3, 16, 50, 128, 1000}) {
      // Logits up to +-40 so exp spans e^-80..e^0 after the shift; a mask of 0 and -inf/-1e4.
      std::vector<float> x = normal_values(static_cast<size_t>(n), static_cast<uint32_t>(n + 1), 15.f);
      std::vector<float> mask(static_cast<size_t>(n), 0.f);
      for (int64_t j = 0; j < n; ++j)
        if (j % 3 == 2) mask[j] = j % 2 ? -kInf : -1e4f;
      for (bool log : {false, true})
        for (int variant = 0; variant < 3; ++variant) {  // no mask, a mask row, one broadcast value
          const float* m = variant == 0 ? nullptr : mask.data();
          const int stride = variant == 1 ? 1 : 0;
          std::vector<float> y(static_cast<size_t>(n));
          std::vector<double> want;
          k.softmax_row(x.data(), m, stride, n, y.data(), log);
          softmax_double(x.data(), m, stride, n, log, want);
          for (int64_t j = 0; j < n; ++j)
            expect_close(y[j], want[j], log ? 1e-5 : 2e-6,
                         "n " + std::to_string(n) + " log " + std::to_string(log) + " variant " +
                             std::to_string(variant) + " at " + std::to_string(j));
        }
    }
    // The reference's answers where no finite shift exists: all -inf rows give NaN.
    std::vector<float> dead(9, -kInf), y(9);
    k.softmax_row(dead.data(), nullptr, 0, 9, y.data(), false);
    for (float v : y) EXPECT_TRUE(std::isnan(v));
    // +inf present (no finite shift either): NaN there, 0 elsewhere; a NaN
    // anywhere: NaN everywhere. Rows long enough for the vector body.
    for (int64_t n : {5, 40}) {
      std::vector<float> row = normal_values(static_cast<size_t>(n), 3), out(static_cast<size_t>(n));
      row[2] = kInf;
      k.softmax_row(row.data(), nullptr, 0, n, out.data(), false);
      for (int64_t j = 0; j < n; ++j) {
        if (j == 2) EXPECT_TRUE(std::isnan(out[j])) << n;
        else EXPECT_EQ(out[j], 0.f) << n << " at " << j;
      }
      row[2] = std::nanf("");
      k.softmax_row(row.data(), nullptr, 0, n, out.data(), false);
      for (float v : out) EXPECT_TRUE(std::isnan(v)) << n;
    }
  }
}

// ---------------------------------------------------------------- op kernels against the reference

KernelOptions vec_backend(int opset = 17) {
  KernelOptions o;
  o.backend = Backend::kVec;
  o.opset = opset;
  return o;
}

void expect_same_as_ref(const std::string& op, const std::vector<Tensor>& in, const ir::Attributes& a,
                        float tol = 0.f, KernelOptions vec = vec_backend()) {
  KernelOptions ref = vec;
  ref.backend = Backend::kRef;
  const Tensor got = run_kernel(op, in, a, vec)[0];
  const Tensor want = run_kernel(op, in, a, ref)[0];
  ASSERT_EQ(got.shape(), want.shape()) << op;
  ASSERT_EQ(got.dtype(), want.dtype()) << op;
  if (got.dtype() != DType::kFloat32) {
    ASSERT_EQ(0, std::memcmp(got.raw(), want.raw(), got.nbytes())) << op;
    return;
  }
  for (int64_t i = 0; i < got.numel(); ++i) {
    const float g = got.data<float>()[i], w = want.data<float>()[i];
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << op << " at " << i;
      continue;
    }
    if (g == w) continue;  // infinities included
    ASSERT_LE(std::abs(g - w), tol * std::max(1.f, std::abs(w))) << op << " at " << i << ": " << g << " vs " << w;
  }
}

Tensor bools(Shape shape, uint32_t seed) {
  Tensor t(DType::kBool, std::move(shape));
  std::mt19937 gen(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<bool>()[i] = gen() % 3 == 0;
  return t;
}

// RMSNormalization (opset 23) on the ISA's vectors against the reference's
// double precision: rows shorter and longer than a vector, with tails, over
// the last axis, the last two and the whole tensor, a scale per element and
// one in all, and a row of one.
TEST(VecKernels, RmsNormalizationMatchesTheReference) {
  struct Case {
    Shape x;
    int64_t axis;
    Shape scale;
  };
  const Case cases[] = {{{3, 37}, -1, {37}}, {{2, 4, 16}, 1, {4, 16}}, {{2, 3, 100}, -1, {1}},
                        {{5, 1}, -1, {1}},   {{4, 9}, 0, {4, 9}},       {{64, 512}, -1, {512}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.x));
    expect_same_as_ref("RMSNormalization", {random_f32(c.x, 7), random_f32(c.scale, 8)},
                       attrs({{"axis", c.axis}, {"epsilon", 1e-3f}}), 2e-6f, vec_backend(23));
  }
  EXPECT_EQ(testing::run_kernel_full("RMSNormalization", {random_f32({2, 8}, 9), random_f32({8}, 10)}, {},
                                     vec_backend(23)).impl,
            kernels::vec::vec_impl_name());
}

// InstanceNormalization on the ISA's vectors against the reference's double
// precision: planes shorter than a vector, with tails, longer than a run of
// the moments' float sums (4096), values far from zero beside their spread
// (a mean 100 times the deviation), batch 2, a rank-5 input.
TEST(VecKernels, InstanceNormalizationMatchesTheReference) {
  const Shape shapes[] = {{2, 3, 5}, {1, 4, 5, 7}, {1, 2, 10001}, {2, 3, 2, 3, 4}, {1, 1, 1}};
  for (const Shape& x : shapes)
    for (float offset : {0.f, 100.f}) {
      SCOPED_TRACE(::testing::Message() << shape_str(x) << " offset " << offset);
      Tensor in = random_f32(x, 11);
      for (int64_t i = 0; i < in.numel(); ++i) in.data<float>()[i] += offset;
      expect_same_as_ref("InstanceNormalization", {in, random_f32({x[1]}, 12), random_f32({x[1]}, 13)},
                         attrs({{"epsilon", 1e-3f}}), 1e-5f);
    }
  // An infinity makes its plane NaN, as the reference's; the other plane stays finite.
  Tensor with_inf = random_f32({1, 2, 40}, 17);
  with_inf.data<float>()[5] = std::numeric_limits<float>::infinity();
  expect_same_as_ref("InstanceNormalization", {with_inf, random_f32({2}, 18), random_f32({2}, 19)}, {}, 1e-5f);
  EXPECT_EQ(testing::run_kernel_full("InstanceNormalization",
                                     {random_f32({1, 2, 8}, 14), random_f32({2}, 15), random_f32({2}, 16)}, {},
                                     vec_backend())
                .impl,
            kernels::vec::vec_impl_name());
}

TEST(VecKernels, WhereBroadcastsAsTheReference) {
  const std::vector<std::array<Shape, 3>> cases = {
      {Shape{1, 1, 8, 8}, Shape{2, 3, 8, 8}, Shape{}},      // a causal mask over heads, a scalar fill
      {Shape{2, 3, 8, 8}, Shape{2, 3, 8, 8}, Shape{2, 3, 8, 8}},
      {Shape{4, 1}, Shape{4, 37}, Shape{1, 37}},            // one condition per row
      {Shape{37}, Shape{5, 1}, Shape{5, 37}},               // X broadcast along rows
      {Shape{3, 1, 5}, Shape{1, 4, 1}, Shape{3, 4, 5}},
      {Shape{0, 4}, Shape{0, 4}, Shape{4}},                 // empty
  };
  for (const auto& [c, x, y] : cases) {
    SCOPED_TRACE(::testing::PrintToString(c) + ::testing::PrintToString(x) + ::testing::PrintToString(y));
    expect_same_as_ref("Where", {bools(c, 1), random_f32(x, 2), random_f32(y, 3)}, {});
  }
  // int32 values take the same path; other sizes go to the reference kernel.
  Tensor xi(DType::kInt32, {2, 9}), yi(DType::kInt32, {9});
  for (int64_t i = 0; i < 18; ++i) xi.data<int32_t>()[i] = static_cast<int32_t>(i);
  for (int64_t i = 0; i < 9; ++i) yi.data<int32_t>()[i] = static_cast<int32_t>(-i);
  expect_same_as_ref("Where", {bools({2, 9}, 4), xi, yi}, {});
  EXPECT_EQ(testing::error_kind_of([] {
              run_kernel("Where", {bools({3}, 1), testing::i64({3}, {1, 2, 3}), testing::i64({3}, {4, 5, 6})}, {},
                         vec_backend());
            }),
            ErrorKind::kUnsupported);
}

TEST(VecKernels, TransposeMatchesTheReference) {
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {{1, 12, 20, 16}, {0, 1, 3, 2}},   // K^T in attention
      {{1, 16, 9, 11}, {0, 2, 3, 1}},    // NCHW -> NHWC
      {{1, 9, 11, 16}, {0, 3, 1, 2}},    // NHWC -> NCHW
      {{70, 130}, {1, 0}},
      {{2, 3, 4, 5, 6}, {4, 2, 0, 3, 1}},
      {{5, 1, 7}, {2, 1, 0}},
  };
  for (const auto& [shape, perm] : cases) {
    SCOPED_TRACE(::testing::PrintToString(shape) + ::testing::PrintToString(perm));
    expect_same_as_ref("Transpose", {random_f32(shape, 5)}, attrs({{"perm", perm}}));
  }
  expect_same_as_ref("Transpose", {random_f32({6, 10}, 6)}, {});  // no perm: reversed axes
  // A permutation that keeps the innermost axis is a row copy, left to the reference kernel.
  EXPECT_EQ(testing::error_kind_of([] {
              run_kernel("Transpose", {random_f32({2, 3, 4}, 1)}, attrs({{"perm", std::vector<int64_t>{1, 0, 2}}}),
                         vec_backend());
            }),
            ErrorKind::kUnsupported);
}

TEST(VecKernels, InnerReductionsMatchTheReference) {
  const char* ops[] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare",
                       "ReduceL1", "ReduceL2", "ReduceLogSumExp"};
  for (const char* op : ops) {
    SCOPED_TRACE(op);
    for (int64_t keep : {0, 1}) {
      // Over the last axis, the last two, and everything (axes through the attribute at opset 17,
      // through an input for ReduceSum).
      for (std::vector<int64_t> axes : {std::vector<int64_t>{-1}, {2, 3}, {0, 1, 2, 3}}) {
        Tensor x = random_f32({2, 3, 5, 67}, 7);
        ir::Attributes a = attrs({{"keepdims", keep}});
        std::vector<Tensor> in = {x};
        if (std::string(op) == "ReduceSum") in.push_back(testing::i64({static_cast<int64_t>(axes.size())}, axes));
        else a.set("axes", axes);
        expect_same_as_ref(op, in, a, 3e-6f);
      }
    }
  }
  // Size-1 axes between the reduced ones, nothing reduced (noop_with_empty_axes),
  // and values whose sums and squares leave float's range before the result does.
  expect_same_as_ref("ReduceSum", {random_f32({3, 1, 4, 1, 5}, 8), testing::i64({2}, {2, 4})}, attrs({{"keepdims", int64_t{0}}}),
                     3e-6f);
  expect_same_as_ref("ReduceSum", {random_f32({3, 4}, 9), testing::i64({0}, {})}, attrs({{"noop_with_empty_axes", int64_t{1}}}));
  Tensor big = testing::f32({2, 3}, {3e38f, 3e38f, -1e38f, 1e20f, -2e20f, 3e-23f});
  for (const char* op : {"ReduceMean", "ReduceL2", "ReduceSumSquare", "ReduceL1"})
    expect_same_as_ref(op, {big}, attrs({{"axes", std::vector<int64_t>{-1}}}), 1e-6f);
}

TEST(VecKernels, LeadingAndMiddleReductionsMatchTheReference) {
  const char* ops[] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare",
                       "ReduceL1", "ReduceL2", "ReduceLogSumExp"};
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
    int threads;
  };
  const Case cases[] = {
      {{2, 3, 5, 67}, {0}, 1},       {{2, 3, 5, 67}, {1, 2}, 1},   {{2, 3, 5, 67}, {0, 1, 2}, 1},
      {{3, 1, 4, 1, 17}, {0, 2}, 1},  // size-1 axes between the reduced ones
      {{2, 300, 70}, {1}, 2},        // a block per batch item, each on a thread
      {{3, 60, 2100}, {1}, 2},       // rows wider than one block of columns
      {{3000, 20}, {0}, 2},          // one block, its rows split between threads
      {{1500, 2, 20}, {0}, 3},       // 2 x 20 columns kept: one block, split
      {{0, 200, 4}, {1}, 2},         // no output
      {{128, 0}, {0}, 2},            // no output
      {{3, 0, 5}, {1}, 1},           // nothing reduced: the identities
  };
  for (const char* op : ops) {
    SCOPED_TRACE(op);
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::PrintToString(c.shape) + " axes " + ::testing::PrintToString(c.axes));
      for (int64_t keep : {0, 1}) {
        ir::Attributes a = attrs({{"keepdims", keep}});
        std::vector<Tensor> in = {random_f32(c.shape, 7)};
        if (std::string(op) == "ReduceSum") in.push_back(testing::i64({static_cast<int64_t>(c.axes.size())}, c.axes));
        else a.set("axes", c.axes);
        KernelOptions vec = vec_backend();
        vec.num_threads = c.threads;
        // Both kernels add runs of rows in float, split differently: up to
        // 3,000 values in (-1, 1) whose sum cancels to much less.
        expect_same_as_ref(op, in, a, 3e-5f, vec);
      }
    }
  }
  // Special values down a column: NaN propagates, infinities and sums that
  // leave float's range (before the result does) give the reference's answers.
  const float nan = std::nanf("");
  const float columns[4][5] = {{nan, 3e38f, -kInf, 1e20f, -kInf},
                               {1.f, 3e38f, 2.f, 1e20f, -kInf},
                               {2.f, -3e38f, kInf, 1e20f, -kInf},
                               {3.f, 1.f, 4.f, -1e20f, -kInf}};
  Tensor special = random_f32({4, 16}, 15);  // the first five columns special, the rest plain
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 5; ++j) special.data<float>()[r * 16 + j] = columns[r][j];
  for (const char* op : ops) {
    ir::Attributes a = attrs({{"keepdims", int64_t{0}}});
    std::vector<Tensor> in = {special};
    if (std::string(op) == "ReduceSum") in.push_back(testing::i64({1}, {0}));
    else a.set("axes", std::vector<int64_t>{0});
    expect_same_as_ref(op, in, a, 1e-6f);
  }
  // Two blocks (two batch items) each split between threads: four threads
  // asked for, whatever the cores.
  {
    const int threads_before = omp_get_max_threads();
    omp_set_num_threads(4);
    KernelOptions four = vec_backend();
    four.num_threads = 4;
    for (const char* op : {"ReduceMean", "ReduceMax", "ReduceLogSumExp"})
      expect_same_as_ref(op, {random_f32({2, 3000, 20}, 13)}, attrs({{"axes", std::vector<int64_t>{1}}}), 3e-5f, four);
    omp_set_num_threads(threads_before);
  }
  // Values whose squares underflow in float: L2 and SumSquare as the
  // reference, which squares in double (over rows and down columns).
  Tensor tiny = random_f32({70, 40}, 14);
  for (int64_t i = 0; i < tiny.numel(); ++i) tiny.data<float>()[i] *= 1e-21f;
  for (int64_t axis : {0, 1})
    for (const char* op : {"ReduceL2", "ReduceSumSquare"}) {
      const ir::Attributes a = attrs({{"axes", std::vector<int64_t>{axis}}});
      KernelOptions ref = vec_backend();
      ref.backend = Backend::kRef;
      const Tensor got = run_kernel(op, {tiny}, a, vec_backend())[0], want = run_kernel(op, {tiny}, a, ref)[0];
      for (int64_t i = 0; i < want.numel(); ++i)  // relative: the values are far below 1
        EXPECT_LE(std::abs(got.data<float>()[i] - want.data<float>()[i]), 1e-5f * std::abs(want.data<float>()[i]))
            << op << " axis " << axis << " at " << i;
    }
  // A LogSumExp whose rows, split between threads, differ by far more than
  // exp's range in double: each part's exps must use the whole column's max.
  Tensor steep = random_f32({3000, 20}, 12);
  for (int64_t i = 0; i < steep.numel(); ++i) steep.data<float>()[i] += i < 1500 * 20 ? -1000.f : 100.f;
  KernelOptions two = vec_backend();
  two.num_threads = 2;
  expect_same_as_ref("ReduceLogSumExp", {steep}, attrs({{"axes", std::vector<int64_t>{0}}}), 1e-6f, two);
  // Fewer columns than a vector, and two separate runs of axes: the reference kernel's job.
  EXPECT_EQ(testing::error_kind_of([] {
              run_kernel("ReduceSum", {random_f32({30, 4}, 1), testing::i64({1}, {0})}, {}, vec_backend());
            }),
            ErrorKind::kUnsupported);
  EXPECT_EQ(testing::error_kind_of([] {
              run_kernel("ReduceMax", {random_f32({4, 5, 6}, 1)}, attrs({{"axes", std::vector<int64_t>{0, 2}}}),
                         vec_backend());
            }),
            ErrorKind::kUnsupported);
}

TEST(VecKernels, SoftmaxAndMaskedSoftmaxMatchTheReference) {
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    SCOPED_TRACE(op);
    expect_same_as_ref(op, {random_f32({2, 3, 77}, 8)}, {}, 2e-6f);
    expect_same_as_ref(op, {random_f32({4, 10}, 9)}, attrs({{"axis", int64_t{1}}}), 2e-6f);
    expect_same_as_ref(op, {random_f32({4, 10}, 9)}, attrs({{"axis", int64_t{1}}}), 2e-6f, vec_backend(11));
  }
  // Not over the last axis: oneDNN's or the reference kernel's job.
  EXPECT_EQ(testing::error_kind_of([] {
              run_kernel("Softmax", {random_f32({4, 10}, 1)}, attrs({{"axis", int64_t{0}}}), vec_backend());
            }),
            ErrorKind::kUnsupported);

  // MaskedSoftmax(X, M) against the reference Softmax of the reference Add.
  KernelOptions masked = vec_backend(1);
  masked.domain = "anvil";
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3, 8, 40}, {2, 1, 1, 40}},   // a padding mask
      {{2, 3, 8, 40}, {1, 1, 8, 40}},   // a causal mask
      {{2, 3, 8, 40}, {2, 3, 8, 1}},    // one value per row
      {{1, 40}, {3, 40}},               // X broadcast over rows
      {{3, 1}, {3, 40}},                // X broadcast along the row
  };
  KernelOptions masked_ref = masked;
  masked_ref.backend = Backend::kRef;
  for (const auto& [xs, ms] : shapes) {
    SCOPED_TRACE(::testing::PrintToString(xs) + ::testing::PrintToString(ms));
    Tensor x = random_f32(xs, 10), mask = random_f32(ms, 11);
    for (int64_t i = 0; i < mask.numel(); i += 3) mask.data<float>()[i] = -1e4f;
    const Tensor sum = run_kernel("Add", {x, mask})[0];
    const Tensor want = run_kernel("Softmax", {sum})[0];
    for (const KernelOptions& o : {masked, masked_ref}) {  // the vectorized kernel and the reference one
      const Tensor got = run_kernel("MaskedSoftmax", {x, mask}, {}, o)[0];
      ASSERT_EQ(got.shape(), want.shape());
      EXPECT_LE(testing::max_abs_diff(got, want), 2e-6f) << (o.backend == Backend::kVec ? "vec" : "ref");
    }
  }
  // A row masked entirely with -inf is 0/0, as in the reference Softmax.
  Tensor x = random_f32({2, 6}, 12), mask(DType::kFloat32, {2, 6});
  for (int64_t i = 0; i < 12; ++i) mask.data<float>()[i] = i < 6 ? -kInf : 0.f;
  for (const KernelOptions& o : {masked, masked_ref}) {
    const Tensor got = run_kernel("MaskedSoftmax", {x, mask}, {}, o)[0];
    for (int64_t i = 0; i < 6; ++i) EXPECT_TRUE(std::isnan(got.data<float>()[i])) << i;
    for (int64_t i = 6; i < 12; ++i) EXPECT_FALSE(std::isnan(got.data<float>()[i])) << i;
  }
}

}  // namespace
}  // namespace anvil

namespace anvil {
namespace {

using ir::ChainOp;
using ir::ChainOperand;
using ir::ChainStep;

double chain_formula(ChainOp op, double a, double b, double v) {
  switch (op) {
    case ChainOp::kRelu: return v > 0 ? v : 0;
    case ChainOp::kNeg: return -v;
    case ChainOp::kAbs: return std::abs(v);
    case ChainOp::kSqrt: return std::sqrt(v);
    case ChainOp::kExp: return std::exp(v);
    case ChainOp::kSigmoid: return 1 / (1 + std::exp(-v));
    case ChainOp::kAdd: return a + b;
    case ChainOp::kSub: return a - b;
    case ChainOp::kMul: return a * b;
    case ChainOp::kDiv: return a / b;
    case ChainOp::kCount: break;
  }
  return NAN;
}

TEST(VecKernels, ChainBlocksMatchTheFormulas) {
  // Every op, binary ones with each operand kind on each side; Abs before Sqrt keeps it real.
  const std::vector<ChainStep> steps = {
      {ChainOp::kMul, ChainOperand::kFull, false, 0}, {ChainOp::kAdd, ChainOperand::kScalar, true, 0.25f},
      {ChainOp::kSub, ChainOperand::kRow, true, 0},   {ChainOp::kDiv, ChainOperand::kScalar, false, 1.5f},
      {ChainOp::kSigmoid, ChainOperand::kNone, false, 0}, {ChainOp::kSub, ChainOperand::kScalar, false, 0.5f},
      {ChainOp::kRelu, ChainOperand::kNone, false, 0}, {ChainOp::kNeg, ChainOperand::kNone, false, 0},
      {ChainOp::kAdd, ChainOperand::kFull, false, 0},  {ChainOp::kAbs, ChainOperand::kNone, false, 0},
      {ChainOp::kSqrt, ChainOperand::kNone, false, 0}, {ChainOp::kExp, ChainOperand::kNone, false, 0},
      {ChainOp::kDiv, ChainOperand::kRow, true, 0},    {ChainOp::kMul, ChainOperand::kRow, false, 0},
  };
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const VecKernels& k = kernels::vec::vec_kernels_for(isa);
    for (int64_t n : {1, 7, 16, 45}) {
      const std::vector<float> x = normal_values(static_cast<size_t>(n), 20, 2.f), full = normal_values(size_t(n), 21),
                               row = normal_values(size_t(n), 22);
      std::vector<const float*> operands;
      for (const ChainStep& s : steps)
        operands.push_back(s.operand == ChainOperand::kFull ? full.data() : s.operand == ChainOperand::kRow ? row.data() : nullptr);
      std::vector<float> y(static_cast<size_t>(n));
      k.chain_block(steps.data(), static_cast<int>(steps.size()), x.data(), operands.data(), y.data(), n);
      for (int64_t j = 0; j < n; ++j) {
        double v = x[j];
        for (size_t s = 0; s < steps.size(); ++s) {
          const ChainStep& st = steps[s];
          const double o = st.operand == ChainOperand::kScalar ? st.scalar : operands[s] ? operands[s][j] : 0.0;
          v = chain_formula(st.op, st.swapped ? o : v, st.swapped ? v : o, v);
        }
        expect_close(y[j], v, 2e-5, "n " + std::to_string(n) + " at " + std::to_string(j));
      }
      // In place: y may be x.
      std::vector<float> inplace = x;
      k.chain_block(steps.data(), static_cast<int>(steps.size()), inplace.data(), operands.data(), inplace.data(), n);
      for (int64_t j = 0; j < n; ++j) EXPECT_EQ(inplace[j], y[j]) << j;
    }
  }
}

// x * sigmoid(alpha x) against double precision (from alpha x rounded to
// float) at every ISA: normal values over a wide range, both signs of alpha,
// the exp's cut-off (-87.33) and special values; a few float ulp allowed, and 1e-35 absolute where the
// true value is under float's normal range times |x|. In place too.
TEST(VecKernels, SwishMatchesDoublePrecision) {
  std::vector<float> x = normal_values(301, 23, 30.f);
  for (float v : {0.f, -0.f, 1e-30f, -1e-30f, 87.f, -87.f, -87.5f, -103.f, -200.f, 200.f, 3e38f, -3e38f})
    x.push_back(v);
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const VecKernels& k = kernels::vec::vec_kernels_for(isa);
    for (float alpha : {1.f, 1.702f, -0.5f, 0.f}) {
      std::vector<float> y(x.size());
      k.swish(x.data(), y.data(), static_cast<int64_t>(x.size()), alpha);
      for (size_t j = 0; j < x.size(); ++j) {
        const float ax = alpha * x[j];  // rounded in float, as every float kernel's argument (the reference's too)
        const double v = x[j], want = v / (1.0 + std::exp(-static_cast<double>(ax)));
        EXPECT_LE(std::abs(y[j] - want), 8e-7 * std::abs(want) + 1e-35)
            << "alpha " << alpha << " x " << x[j] << ": got " << y[j] << ", want " << want;
      }
      std::vector<float> inplace = x;
      k.swish(inplace.data(), inplace.data(), static_cast<int64_t>(x.size()), alpha);
      EXPECT_EQ(inplace, y);
    }
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> special = {nan, kInf, -kInf}, out(3);
    k.swish(special.data(), out.data(), 3, 1.f);
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_EQ(out[1], kInf);
    EXPECT_TRUE(std::isnan(out[2]));  // -inf * sigmoid(-inf) = -inf * 0, as the reference's x / (1 + exp(-x))
    for (float alpha : {0.f, nan}) {  // a NaN alpha * x with x itself a number: NaN, as the reference
      k.swish(special.data() + 1, out.data(), 2, alpha);
      EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1])) << alpha << ": " << out[0] << " " << out[1];
    }
  }
}

// sigmoid(x) against double precision at every ISA, both tails to past the
// exp's cut-off, special values, in place.
TEST(VecKernels, SigmoidMatchesDoublePrecision) {
  std::vector<float> x = normal_values(301, 24, 30.f);
  for (float v : {0.f, -0.f, 1e-30f, 87.f, -87.f, -87.5f, -103.f, -200.f, 200.f, 3e38f, -3e38f}) x.push_back(v);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const VecKernels& k = kernels::vec::vec_kernels_for(isa);
    std::vector<float> y(x.size());
    k.sigmoid(x.data(), y.data(), static_cast<int64_t>(x.size()));
    for (size_t j = 0; j < x.size(); ++j) {
      const double want = 1.0 / (1.0 + std::exp(-static_cast<double>(x[j])));
      EXPECT_LE(std::abs(y[j] - want), 8e-7 * want + 1e-35) << "x " << x[j] << ": got " << y[j] << ", want " << want;
    }
    std::vector<float> inplace = x;
    k.sigmoid(inplace.data(), inplace.data(), static_cast<int64_t>(x.size()));
    EXPECT_EQ(inplace, y);
    std::vector<float> special = {nan, kInf, -kInf}, out(3);
    k.sigmoid(special.data(), out.data(), 3);
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_NEAR(out[1], 1.f, 1.2e-7f);  // the reciprocal's estimate may leave 1 - 2^-24
    EXPECT_EQ(out[2], 0.f);
  }
}

ir::Attributes chain_attrs(std::vector<int64_t> ops, std::vector<int64_t> operands, std::vector<int64_t> args,
                           std::vector<float> scalars) {
  ir::Attributes a;
  a.set("ops", ops);
  a.set("operands", operands);
  a.set("args", args);
  a.set("scalars", scalars);
  return a;
}

TEST(VecKernels, ElementwiseChainKernelsMatchTheFormula) {
  // ((x * a + b) - 0.5) / 1.5 -> Sigmoid, with a per last-axis position and b of x's shape, given first.
  const auto op = [](ChainOp o) { return static_cast<int64_t>(o); };
  const auto kind = [](ChainOperand k, bool first = false) {
    return static_cast<int64_t>(k) + (first ? ir::kChainOperandFirst : 0);
  };
  const ir::Attributes a = chain_attrs(
      {op(ChainOp::kMul), op(ChainOp::kAdd), op(ChainOp::kSub), op(ChainOp::kDiv), op(ChainOp::kSigmoid)},
      {kind(ChainOperand::kRow), kind(ChainOperand::kFull, true), kind(ChainOperand::kScalar),
       kind(ChainOperand::kScalar), kind(ChainOperand::kNone)},
      {1, 2, 0, 1, 0}, {0.5f, 1.5f});
  Tensor x = random_f32({3, 700, 11}, 30), row = random_f32({11}, 31), full = random_f32({3, 700, 11}, 32);
  for (Backend backend : {Backend::kVec, Backend::kRef}) {
    KernelOptions o;
    o.backend = backend;
    o.domain = "anvil";
    o.opset = 1;
    const Tensor y = run_kernel("ElementwiseChain", {x, row, full}, a, o)[0];
    ASSERT_EQ(y.shape(), x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double v = ((double(x.data<float>()[i]) * row.data<float>()[i % 11] + full.data<float>()[i]) - 0.5) / 1.5;
      EXPECT_NEAR(y.data<float>()[i], 1 / (1 + std::exp(-v)), 1e-6) << i << (backend == Backend::kVec ? " vec" : " ref");
    }
  }
}

TEST(VecKernels, ChainBlocksCoverLongRowsShortRowsAndThreads) {
  // Rows longer than a block (split), many short rows (whole rows per block), and no row operand.
  const auto op = [](ChainOp o) { return static_cast<int64_t>(o); };
  KernelOptions o;
  o.domain = "anvil";
  o.opset = 1;
  for (Shape shape : {Shape{2, 5000}, Shape{5000, 8}, Shape{3, 7}}) {
    SCOPED_TRACE(::testing::PrintToString(shape));
    const ir::Attributes a = chain_attrs({op(ChainOp::kAdd), op(ChainOp::kRelu), op(ChainOp::kMul)},
                                         {static_cast<int64_t>(ChainOperand::kRow), 0,
                                          static_cast<int64_t>(ChainOperand::kRow) + ir::kChainOperandFirst},
                                         {1, 0, 2}, {});
    Tensor x = random_f32(shape, 50), r1 = random_f32({shape.back()}, 51), r2 = random_f32({shape.back()}, 52);
    for (Backend backend : {Backend::kVec, Backend::kRef}) {
      o.backend = backend;
      const Tensor y = run_kernel("ElementwiseChain", {x, r1, r2}, a, o)[0];
      for (int64_t i = 0; i < x.numel(); ++i) {
        const int64_t c = i % shape.back();
        const float v = x.data<float>()[i] + r1.data<float>()[c];
        ASSERT_EQ(y.data<float>()[i], r2.data<float>()[c] * (v > 0 ? v : 0.f)) << i;
      }
    }
  }
  const ir::Attributes scaled = chain_attrs({op(ChainOp::kMul), op(ChainOp::kAbs)},
                                            {static_cast<int64_t>(ChainOperand::kScalar), 0}, {0, 0}, {-2.f});
  Tensor x = random_f32({70000}, 53);
  x.data<float>()[5] = 0.f;  // -2 * 0 = -0, whose absolute value is +0
  for (Backend backend : {Backend::kVec, Backend::kRef}) {
    o.backend = backend;
    const Tensor y = run_kernel("ElementwiseChain", {x}, scaled, o)[0];
    for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(y.data<float>()[i], std::fabs(-2.f * x.data<float>()[i])) << i;
    EXPECT_FALSE(std::signbit(y.data<float>()[5]));
  }
}

TEST(VecKernels, MalformedChainsAreRefused) {
  KernelOptions o;
  o.domain = "anvil";
  o.opset = 1;
  Tensor x = random_f32({2, 4}, 40), row = random_f32({4}, 41), wrong = random_f32({3}, 42);
  const int64_t add = static_cast<int64_t>(ChainOp::kAdd), relu = static_cast<int64_t>(ChainOp::kRelu);
  const int64_t scalar = static_cast<int64_t>(ChainOperand::kScalar), row_kind = static_cast<int64_t>(ChainOperand::kRow);
  const std::vector<std::pair<std::vector<Tensor>, ir::Attributes>> bad = {
      {{x}, chain_attrs({add, add}, {scalar}, {0}, {1.f})},                  // lists of different lengths
      {{x}, chain_attrs({}, {}, {}, {})},                                    // no steps
      {{x}, chain_attrs({99}, {0}, {0}, {})},                                // no such op
      {{x}, chain_attrs({relu}, {scalar}, {0}, {1.f})},                      // a unary op with an operand
      {{x}, chain_attrs({add}, {0}, {0}, {})},                               // a binary op without one
      {{x}, chain_attrs({add}, {scalar}, {3}, {1.f})},                       // past the scalars
      {{x}, chain_attrs({add}, {9}, {0}, {})},                               // no such operand kind
      {{x, row}, chain_attrs({add}, {row_kind}, {2}, {})},                   // past the inputs
      {{x, row}, chain_attrs({add}, {row_kind}, {0}, {})},                   // X is not one value per position
      {{x, wrong}, chain_attrs({add}, {row_kind}, {1}, {})},                 // not one value per position
      {{x, row}, chain_attrs({add}, {static_cast<int64_t>(ChainOperand::kFull)}, {1}, {})},  // not X's shape
  };
  for (size_t i = 0; i < bad.size(); ++i)
    for (Backend backend : {Backend::kVec, Backend::kRef}) {
      o.backend = backend;
      EXPECT_EQ(testing::error_kind_of([&] { run_kernel("ElementwiseChain", bad[i].first, bad[i].second, o); }),
                ErrorKind::kInvalidModel)
          << "case " << i;
    }
}

// Batch normalization rows at every ISA: per lane over rows of a channel
// block (the ISA's width and others, with a tail) and NHWC's pixels, and one
// value for a whole plane; with and without the ReLU; in place.
TEST(VecKernels, BatchNormRowsMatchTheFormula) {
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const VecKernels& k = kernels::vec::vec_kernels_for(isa);
    for (const auto& [rows, n, per_lane] : {std::tuple{5, 16, true}, std::tuple{3, 8, true}, std::tuple{4, 5, true},
                                            std::tuple{2, 37, true}, std::tuple{1, 1, false}, std::tuple{1, 45, false},
                                            std::tuple{3, 16, false}})
      for (bool relu : {false, true}) {
        const std::string what = std::to_string(rows) + "x" + std::to_string(n) + (per_lane ? " per lane" : " plane") +
                                 (relu ? " relu" : "");
        const size_t count = static_cast<size_t>(rows * n);
        const std::vector<float> x = normal_values(count, 40, 2.f), mean = normal_values(size_t(n), 41),
                                 scale = normal_values(size_t(n), 42), shift = normal_values(size_t(n), 43);
        std::vector<float> y(count);
        k.batch_norm_rows(x.data(), y.data(), rows, n, mean.data(), scale.data(), shift.data(), per_lane, relu);
        for (size_t i = 0; i < count; ++i) {
          const size_t c = per_lane ? i % static_cast<size_t>(n) : 0;
          double want = (double(x[i]) - mean[c]) * scale[c] + shift[c];
          if (relu) want = std::max(want, 0.0);
          expect_close(y[i], want, 1e-6, what + " at " + std::to_string(i));
        }
        std::vector<float> inplace = x;
        k.batch_norm_rows(inplace.data(), inplace.data(), rows, n, mean.data(), scale.data(), shift.data(), per_lane,
                          relu);
        EXPECT_EQ(inplace, y) << what;
      }
  }
}

// A region of `floats` floats that ends where an inaccessible page begins:
// a load or store past its end faults.
class GuardedFloats {
 public:
  explicit GuardedFloats(size_t floats) : page_(static_cast<size_t>(::sysconf(_SC_PAGESIZE))) {
    base_ = ::mmap(nullptr, 2 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(base_, MAP_FAILED);
    EXPECT_EQ(::mprotect(static_cast<char*>(base_) + page_, page_, PROT_NONE), 0);
    data_ = reinterpret_cast<float*>(static_cast<char*>(base_) + page_) - floats;
  }
  ~GuardedFloats() { ::munmap(base_, 2 * page_); }
  float* data() const { return data_; }

 private:
  size_t page_;
  void* base_ = nullptr;
  float* data_ = nullptr;
};

// Row tails (masked loads and stores on AVX-512 and AVX2) touch nothing past
// the row: rows that end against an inaccessible page, at every ISA, for
// tails of every length.
TEST(VecKernels, RowTailsStopAtTheRowsEnd) {
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const VecKernels& k = kernels::vec::vec_kernels_for(isa);
    for (int64_t n = 1; n <= 33; ++n) {
      GuardedFloats x(static_cast<size_t>(n)), y(static_cast<size_t>(n)), params(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) x.data()[j] = params.data()[j] = 0.5f * static_cast<float>(j) - 3.f;
      k.batch_norm_rows(x.data(), y.data(), 1, n, params.data(), params.data(), params.data(), true, true);
      for (int64_t j = 0; j < n; ++j) {
        const double p = params.data()[j], want = std::max((double(x.data()[j]) - p) * p + p, 0.0);
        ASSERT_NEAR(y.data()[j], want, 1e-6) << "n " << n << " at " << j;
      }
      k.softmax_row(x.data(), nullptr, 0, n, y.data(), false);
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += y.data()[j];
      ASSERT_NEAR(sum, 1.0, 1e-5) << "n " << n;
    }
  }
}

// Max pooling over pixels of `channels` contiguous floats, every ISA path
// against the reference's rule (the first tap in the window, then any greater
// one) computed here: windows cut by padding and the end, dilation, strides,
// channel counts that fill a vector, two, or part of one; NaN first and later.
TEST(VecKernels, MaxPoolRowsMatchTheReferenceRule) {
  struct Case {
    int64_t ih, iw, channels;
    kernels::vec::PoolWindow w;
  };
  const Case cases[] = {
      {11, 11, 8, {3, 3, 2, 2, 1, 1, 0, 0}},    // SqueezeNet's (ceil_mode: the last window is cut)
      {12, 9, 16, {3, 3, 2, 2, 1, 1, 1, 1}},    // ResNet's, padded
      {7, 8, 5, {2, 3, 1, 2, 2, 1, 1, 0}},      // dilated rows, a partial vector of channels
      {5, 5, 40, {5, 5, 1, 1, 1, 1, 2, 2}},     // NHWC-like: many channels per pixel
  };
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const auto pool = kernels::vec::vec_kernels_for(isa).max_pool_rows;
    uint32_t seed = 40;
    for (const Case& t : cases) {
      const auto& w = t.w;
      const int64_t oh = (t.ih + 2 * w.ph - ((w.kh - 1) * w.dh + 1) + w.sh - 1) / w.sh + 1;  // ceil: a cut window
      const int64_t ow = (t.iw + 2 * w.pw - ((w.kw - 1) * w.dw + 1) + w.sw - 1) / w.sw + 1;
      const int64_t src_pixel = t.channels + 3, dst_pixel = t.channels + 1;  // pixels apart by more than their channels
      std::vector<float> src = normal_values(static_cast<size_t>(t.ih * t.iw * src_pixel), seed++);
      src[0] = std::nanf("");                              // a NaN first in its window: kept
      src[static_cast<size_t>(5 * src_pixel + 1)] = std::nanf("");  // later in a window: passed over
      std::vector<float> dst(static_cast<size_t>(oh * ow * dst_pixel), 123.f);
      pool(src.data(), t.ih, t.iw, src_pixel, dst.data(), ow, dst_pixel, t.channels, w, 0, oh);
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x = 0; x < ow; ++x)
          for (int64_t c = 0; c < t.channels; ++c) {
            float best = -std::numeric_limits<float>::max();
            bool found = false;
            for (int64_t i = 0; i < w.kh; ++i)
              for (int64_t j = 0; j < w.kw; ++j) {
                const int64_t r = y * w.sh - w.ph + i * w.dh, q = x * w.sw - w.pw + j * w.dw;
                if (r < 0 || r >= t.ih || q < 0 || q >= t.iw) continue;
                const float v = src[static_cast<size_t>((r * t.iw + q) * src_pixel + c)];
                if (!found || v > best) best = v;
                found = true;
              }
            const float got = dst[static_cast<size_t>((y * ow + x) * dst_pixel + c)];
            if (std::isnan(best)) EXPECT_TRUE(std::isnan(got)) << y << "," << x << "," << c;
            else EXPECT_EQ(got, best) << y << "," << x << "," << c;
          }
      for (int64_t p = 0; p < oh * ow; ++p)  // the floats between pixels are left alone
        EXPECT_EQ(dst[static_cast<size_t>(p * dst_pixel + t.channels)], 123.f);
    }
  }
}

// Max pooling's gradient over the same pixel layouts, every ISA path against
// the reference's rule computed here: each window's dY added at its first
// maximum (a window of padding alone sends nothing), overlapping windows
// summed in output order, with relu_gate only where the maximum is
// positive; ties, NaN first and later, channel counts that fill a vector,
// two or part of one. Bit for bit: the same additions in the same order.
TEST(VecKernels, MaxPoolGradRowsMatchTheReferenceRule) {
  struct Case {
    int64_t ih, iw, channels;
    kernels::vec::PoolWindow w;
  };
  const Case cases[] = {
      {8, 8, 16, {2, 2, 2, 2, 1, 1, 0, 0}},     // a CNN's 2x2 at stride 2
      {11, 11, 8, {3, 3, 2, 2, 1, 1, 0, 0}},    // overlapping, the last window cut
      {12, 9, 16, {3, 3, 2, 2, 1, 1, 1, 1}},    // ResNet's, padded
      {7, 8, 5, {2, 3, 1, 2, 2, 1, 1, 0}},      // dilated rows, a partial vector of channels
      {5, 5, 40, {5, 5, 1, 1, 1, 1, 2, 2}},     // NHWC-like: many channels per pixel
      {3, 4, 3, {2, 2, 3, 3, 1, 1, 1, 1}},      // windows of padding alone (stride 3 from -1)
  };
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const auto grad = kernels::vec::vec_kernels_for(isa).max_pool_grad_rows;
    uint32_t seed = 60;
    for (const Case& t : cases)
      for (const bool gate : {false, true}) {
        const auto& w = t.w;
        SCOPED_TRACE(std::to_string(t.ih) + "x" + std::to_string(t.iw) + "x" + std::to_string(t.channels) +
                     (gate ? " gated" : ""));
        const int64_t oh = (t.ih + 2 * w.ph - ((w.kh - 1) * w.dh + 1) + w.sh - 1) / w.sh + 1;
        const int64_t ow = (t.iw + 2 * w.pw - ((w.kw - 1) * w.dw + 1) + w.sw - 1) / w.sw + 1;
        const int64_t x_pixel = t.channels + 3, dy_pixel = t.channels + 1;
        // Whole numbers in [-3, 1]: ties in most windows, and maxima of exactly 0 (which the gate stops).
        std::vector<float> x = normal_values(static_cast<size_t>(t.ih * t.iw * x_pixel), seed++);
        for (float& v : x) v = std::min(1.f, std::max(-3.f, std::floor(v)));
        x[0] = std::nanf("");
        x[static_cast<size_t>(5 * x_pixel + 1)] = std::nanf("");
        const std::vector<float> dy = normal_values(static_cast<size_t>(oh * ow * dy_pixel), seed++);
        std::vector<float> dx(x.size(), 0.f), want(x.size(), 0.f);
        grad(dy.data(), ow, dy_pixel, x.data(), t.ih, t.iw, x_pixel, dx.data(), t.channels, w, gate, 0, oh);
        for (int64_t y = 0; y < oh; ++y)
          for (int64_t q0 = 0; q0 < ow; ++q0)
            for (int64_t c = 0; c < t.channels; ++c) {
              float best = 0.f;
              int64_t at = -1;
              for (int64_t i = 0; i < w.kh; ++i)
                for (int64_t j = 0; j < w.kw; ++j) {
                  const int64_t r = y * w.sh - w.ph + i * w.dh, q = q0 * w.sw - w.pw + j * w.dw;
                  if (r < 0 || r >= t.ih || q < 0 || q >= t.iw) continue;
                  const int64_t k = (r * t.iw + q) * x_pixel + c;
                  if (at < 0 || x[static_cast<size_t>(k)] > best) {
                    best = x[static_cast<size_t>(k)];
                    at = k;
                  }
                }
              if (at >= 0 && (!gate || best > 0.f))
                want[static_cast<size_t>(at)] += dy[static_cast<size_t>((y * ow + q0) * dy_pixel + c)];
            }
        for (size_t i = 0; i < dx.size(); ++i) ASSERT_EQ(dx[i], want[i]) << i;  // between pixels: 0 left alone
      }
  }
}

}  // namespace
}  // namespace anvil
