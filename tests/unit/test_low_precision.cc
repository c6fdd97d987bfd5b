// Tests of the 8-, 4- and 2-bit element types (src/core/low_precision.cc), the
// packed file form (src/onnx/tensor_proto.cc) and Cast into and out of them
// (src/kernels/ref/cast.cc), against values worked out by hand from the
// formats' definitions (OCP 8-bit floats, OCP MX E2M1 and E8M0, the FNUZ
// variants) and the tables of ONNX's Cast specification.
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "anvil/tensor_io.h"
#include "core/low_precision.h"
#include "kernel_tester.h"
#include "onnx/tensor_proto.h"

namespace anvil {
namespace {

using testing::attrs;
using testing::f32;
using testing::make_tensor;
using testing::opset;
using testing::run_kernel;
using testing::values;

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(LowPrecision, E4M3FnValues) {
  const DType d = DType::kFloat8E4M3FN;
  EXPECT_EQ(minifloat_to_double(d, 0x7e), 448.0);          // S.1111.110, the largest
  EXPECT_EQ(minifloat_to_double(d, 0x01), std::ldexp(1.0, -9));  // smallest subnormal
  EXPECT_EQ(minifloat_to_double(d, 0x38), 1.0);            // exponent 7 = bias
  EXPECT_TRUE(std::isnan(minifloat_to_double(d, 0x7f)));
  EXPECT_TRUE(std::isnan(minifloat_to_double(d, 0xff)));
  EXPECT_TRUE(std::signbit(minifloat_to_double(d, 0x80)));
  EXPECT_EQ(double_to_minifloat(d, 0.5), 0x30);
  EXPECT_EQ(double_to_minifloat(d, 464), 0x7e);  // half-way to 480: ties to the even 448
  EXPECT_EQ(double_to_minifloat(d, 1.0625), 0x38);  // half-way between 1 and 1.125: even is 1
  EXPECT_EQ(double_to_minifloat(d, 1.0626), 0x39);
  EXPECT_EQ(double_to_minifloat(d, 1e6), 0x7e);      // saturates
  EXPECT_EQ(double_to_minifloat(d, -kInf), 0xfe);
  EXPECT_EQ(double_to_minifloat(d, 1e6, false), 0x7f);  // NaN without saturation
  EXPECT_EQ(double_to_minifloat(d, -kInf, false), 0xff);
  EXPECT_EQ(double_to_minifloat(d, -1e-7), 0x80);  // underflows to negative zero
  EXPECT_EQ(double_to_minifloat(d, std::nan("")), 0x7f);
}

TEST(LowPrecision, FnuzFormatsHaveOneNaNAndNoNegativeZero) {
  const DType e4 = DType::kFloat8E4M3FNUZ, e5 = DType::kFloat8E5M2FNUZ;
  EXPECT_EQ(minifloat_to_double(e4, 0x7f), 240.0);
  EXPECT_EQ(minifloat_to_double(e4, 0x40), 1.0);  // bias 8
  EXPECT_EQ(minifloat_to_double(e5, 0x7f), 57344.0);
  EXPECT_EQ(minifloat_to_double(e5, 0x40), 1.0);  // bias 16
  EXPECT_TRUE(std::isnan(minifloat_to_double(e4, 0x80)));
  EXPECT_EQ(double_to_minifloat(e4, -1e-7), 0x00);
  EXPECT_EQ(double_to_minifloat(e4, -0.0), 0x00);
  EXPECT_EQ(double_to_minifloat(e5, kInf, false), 0x80);
  EXPECT_EQ(double_to_minifloat(e5, kInf, true), 0x7f);
  EXPECT_EQ(double_to_minifloat(e4, -1.0), 0xc0);
}

TEST(LowPrecision, E5M2HasInfinities) {
  const DType d = DType::kFloat8E5M2;
  EXPECT_EQ(minifloat_to_double(d, 0x7b), 57344.0);
  EXPECT_EQ(minifloat_to_double(d, 0x7c), kInf);
  EXPECT_EQ(minifloat_to_double(d, 0xfc), -kInf);
  EXPECT_TRUE(std::isnan(minifloat_to_double(d, 0x7d)));
  EXPECT_EQ(double_to_minifloat(d, 1.0), 0x3c);
  EXPECT_EQ(double_to_minifloat(d, 1e6, false), 0x7c);
  EXPECT_EQ(double_to_minifloat(d, -1e6, true), 0xfb);
  EXPECT_EQ(double_to_minifloat(d, std::nan("")), 0x7e);
}

TEST(LowPrecision, E2M1RoundsToItsEightMagnitudes) {
  const DType d = DType::kFloat4E2M1;
  const double magnitudes[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (uint8_t c = 0; c < 8; ++c) {
    EXPECT_EQ(minifloat_to_double(d, c), magnitudes[c]);
    EXPECT_EQ(minifloat_to_double(d, static_cast<uint8_t>(c | 8)), -magnitudes[c]);
  }
  EXPECT_EQ(double_to_minifloat(d, 0.25), 0x0);   // tie between 0 and 0.5: even code 0
  EXPECT_EQ(double_to_minifloat(d, 0.75), 0x2);   // tie between 0.5 and 1: even code 2
  EXPECT_EQ(double_to_minifloat(d, 5.0), 0x6);    // tie between 4 and 6: even code 6
  EXPECT_EQ(double_to_minifloat(d, -3.5), 0xe);   // tie between 3 and 4: 4
  EXPECT_EQ(double_to_minifloat(d, 1e6, false), 0x7);  // no infinity: always saturates
  EXPECT_EQ(double_to_minifloat(d, -kInf), 0xf);
}

TEST(LowPrecision, E8M0IsAPowerOfTwoWithARoundMode) {
  const DType d = DType::kFloat8E8M0;
  EXPECT_EQ(minifloat_to_double(d, 127), 1.0);
  EXPECT_EQ(minifloat_to_double(d, 0), std::ldexp(1.0, -127));
  EXPECT_TRUE(std::isnan(minifloat_to_double(d, 0xff)));
  EXPECT_EQ(double_to_minifloat(d, 3.0, true, RoundMode::kUp), 129);    // 3 -> 4
  EXPECT_EQ(double_to_minifloat(d, 3.0, true, RoundMode::kDown), 128);  // 3 -> 2
  EXPECT_EQ(double_to_minifloat(d, 2.5, true, RoundMode::kNearestEven), 128);
  EXPECT_EQ(double_to_minifloat(d, 3.0, true, RoundMode::kNearestEven), 129);
  EXPECT_EQ(double_to_minifloat(d, 4.0, true, RoundMode::kUp), 129);  // exact
  EXPECT_EQ(double_to_minifloat(d, kInf), 0xff);
  // Past 2^127 saturation keeps 254; without it the exponent reaches the NaN code.
  EXPECT_EQ(double_to_minifloat(d, 3e38, true, RoundMode::kUp), 254);
  EXPECT_EQ(double_to_minifloat(d, 3e38, false, RoundMode::kUp), 255);
}

TEST(LowPrecision, NarrowIntegers) {
  EXPECT_EQ(narrow_int_from_double(DType::kInt4, 7.9), 7);
  EXPECT_EQ(narrow_int_from_double(DType::kInt4, -8.9), -8);
  EXPECT_EQ(narrow_int_from_double(DType::kInt4, 8.0), 0);  // out of range
  EXPECT_EQ(narrow_int_from_double(DType::kUInt4, -1.0), 0);
  EXPECT_EQ(narrow_int_from_double(DType::kUInt2, 3.5), 3);
  EXPECT_EQ(narrow_int_from_double(DType::kInt2, std::nan("")), 0);
  EXPECT_EQ(narrow_int_wrap(DType::kInt4, 17), 1);
  EXPECT_EQ(narrow_int_wrap(DType::kInt4, -9), 7);
  EXPECT_EQ(narrow_int_wrap(DType::kInt4, 200), -8);
  EXPECT_EQ(narrow_int_wrap(DType::kUInt2, 6), 2);
  EXPECT_EQ(narrow_int_wrap(DType::kInt2, 3), -1);
}

TEST(LowPrecision, PackingPutsTheFirstElementInTheLowBits) {
  const std::vector<uint8_t> int4 = {static_cast<uint8_t>(-8), 7, static_cast<uint8_t>(-1)};
  std::vector<uint8_t> packed(file_nbytes(DType::kInt4, 3));
  ASSERT_EQ(packed.size(), 2u);
  pack_elements(DType::kInt4, int4.data(), 3, packed.data());
  EXPECT_EQ(packed, (std::vector<uint8_t>{0x78, 0x0f}));
  std::vector<uint8_t> back(3);
  unpack_elements(DType::kInt4, packed.data(), 3, back.data());
  EXPECT_EQ(back, int4);

  const std::vector<uint8_t> uint2 = {0, 1, 2, 3, 1};
  packed.assign(file_nbytes(DType::kUInt2, 5), 0);
  ASSERT_EQ(packed.size(), 2u);
  pack_elements(DType::kUInt2, uint2.data(), 5, packed.data());
  EXPECT_EQ(packed, (std::vector<uint8_t>{0xe4, 0x01}));
  back.assign(5, 0);
  unpack_elements(DType::kUInt2, packed.data(), 5, back.data());
  EXPECT_EQ(back, uint2);
}

TEST(LowPrecision, TensorProtoRoundTripPacksFourBitTypes) {
  Tensor t = make_tensor<int8_t>(DType::kInt4, {3}, {-3, 5, -8});
  onnx::TensorProto p;
  onnx_io::tensor_to_proto(t, "w", &p);
  EXPECT_EQ(p.data_type(), 22);
  EXPECT_EQ(p.raw_data(), std::string("\x5d\x08", 2));
  Tensor back = onnx_io::tensor_from_proto(p, "");
  EXPECT_EQ(back.dtype(), DType::kInt4);
  EXPECT_EQ(values<int8_t>(back), (std::vector<int8_t>{-3, 5, -8}));
}

TEST(LowPrecision, TensorProtoReadsInt32DataAndChecksItsSize) {
  onnx::TensorProto p;
  p.set_name("f8");
  p.set_data_type(17);  // FLOAT8E4M3FN, one element per int32_data entry
  p.add_dims(2);
  p.add_int32_data(0x38);
  p.add_int32_data(0xfe);
  Tensor t = onnx_io::tensor_from_proto(p, "");
  EXPECT_EQ(values<uint8_t>(t), (std::vector<uint8_t>{0x38, 0xfe}));
  p.set_data_type(22);  // INT4: two elements per entry, so two entries are one too many
  EXPECT_EQ(testing::error_kind_of([&] { onnx_io::tensor_from_proto(p, ""); }), ErrorKind::kInvalidModel);
  p.set_raw_data(std::string("\x01\x02", 2));  // also too long: 2 int4 elements take one byte
  p.clear_int32_data();
  EXPECT_EQ(testing::error_kind_of([&] { onnx_io::tensor_from_proto(p, ""); }), ErrorKind::kInvalidModel);
}

// A file's bool bytes other than 0 and 1 (a hostile or sloppy writer) read
// as true, stored as 1: a bool holding another byte is undefined behaviour
// in the kernels that read it (found by fuzzing an Attention's boolean mask).
TEST(LowPrecision, FileBoolsOtherThanZeroAndOneReadAsTrue) {
  onnx::TensorProto p;
  p.set_name("mask");
  p.set_data_type(9);  // BOOL
  p.add_dims(4);
  p.set_raw_data(std::string("\x00\x81\x01\xff", 4));
  EXPECT_EQ(values<uint8_t>(onnx_io::tensor_from_proto(p, "")), (std::vector<uint8_t>{0, 1, 1, 1}));
  std::string npy("\x93NUMPY\x01\x00", 8);
  std::string header = "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }";
  header.append(128 - 10 - header.size() - 1, ' ');  // the data starts 64-byte aligned
  header += '\n';
  npy += static_cast<char>(header.size());
  npy += '\0';
  npy += header + std::string("\x07\x00\x02", 3);
  EXPECT_EQ(values<uint8_t>(parse_tensor_npy(npy, "mask.npy")), (std::vector<uint8_t>{1, 0, 1}));
  // read_tensor_npy reads a file's data straight into the tensor: the same.
  const std::string path = ::testing::TempDir() + "anvil_mask.npy";
  std::ofstream(path, std::ios::binary) << npy;
  EXPECT_EQ(values<uint8_t>(read_tensor_npy(path)), (std::vector<uint8_t>{1, 0, 1}));
  std::remove(path.c_str());
}

TEST(Cast, IntoAndOutOfFloat8) {
  const Tensor x = f32({5}, {0.5f, 464.f, 1e6f, -1e-7f, std::nanf("")});
  auto to = [&](int64_t code, int64_t saturate) {
    return run_kernel("Cast", {x}, attrs({{"to", code}, {"saturate", saturate}}), opset(21))[0];
  };
  EXPECT_EQ(values<uint8_t>(to(17, 1)), (std::vector<uint8_t>{0x30, 0x7e, 0x7e, 0x80, 0x7f}));
  EXPECT_EQ(values<uint8_t>(to(17, 0)), (std::vector<uint8_t>{0x30, 0x7e, 0x7f, 0x80, 0x7f}));
  EXPECT_EQ(values<uint8_t>(to(19, 0)), (std::vector<uint8_t>{0x38, 0x5f, 0x7c, 0x80, 0x7e}));
  const Tensor f8 = make_tensor<uint8_t>(DType::kFloat8E5M2, {3}, {0x3c, 0xfc, 0x01});
  std::vector<Tensor> y = run_kernel("Cast", {f8}, attrs({{"to", int64_t{1}}}), opset(21));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{1.f, -INFINITY, std::ldexp(1.f, -16)}));
}

TEST(Cast, NarrowIntegersFromFloatsAndIntegers) {
  std::vector<Tensor> y =
      run_kernel("Cast", {f32({4}, {-9.f, -8.5f, 7.9f, 15.f})}, attrs({{"to", int64_t{22}}}), opset(21));
  EXPECT_EQ(y[0].dtype(), DType::kInt4);
  EXPECT_EQ(values<int8_t>(y[0]), (std::vector<int8_t>{0, -8, 7, 0}));
  y = run_kernel("Cast", {testing::i32({3}, {17, -9, 200})}, attrs({{"to", int64_t{22}}}), opset(21));
  EXPECT_EQ(values<int8_t>(y[0]), (std::vector<int8_t>{1, 7, -8}));
  y = run_kernel("Cast", {make_tensor<int8_t>(DType::kInt2, {2}, {-2, 1})}, attrs({{"to", int64_t{3}}}), opset(25));
  EXPECT_EQ(values<int8_t>(y[0]), (std::vector<int8_t>{-2, 1}));
}

TEST(Cast, RoundModeMustBeKnown) {
  EXPECT_EQ(testing::error_kind_of([&] {
              run_kernel("Cast", {f32({1}, {3.f})}, attrs({{"to", int64_t{24}}, {"round_mode", std::string("sideways")}}),
                         opset(25));
            }),
            ErrorKind::kInvalidModel);
}

}  // namespace
}  // namespace anvil
