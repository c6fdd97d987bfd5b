// Tests of ImageDecoder (src/kernels/ref/image_decoder.cc) on images written
// byte by byte here (PNM, BMP), their pixel formats, and the files it must
// refuse cleanly. JPEG, PNG, TIFF, WebP and JPEG 2000 decoding is checked
// against Pillow's output by the conformance suite's ImageDecoder cases.
#include <gtest/gtest.h>

#include <string>

#include "kernel_tester.h"

namespace anvil {
namespace {

using testing::attrs;
using testing::error_kind_of;
using testing::make_tensor;
using testing::opset;
using testing::run_kernel;
using testing::values;

Tensor bytes_of(const std::string& s) {
  return make_tensor<uint8_t>(DType::kUInt8, {static_cast<int64_t>(s.size())},
                              std::vector<uint8_t>(s.begin(), s.end()));
}

std::vector<Tensor> decode(const std::string& file, const char* format = "RGB") {
  return run_kernel("ImageDecoder", {bytes_of(file)}, attrs({{"pixel_format", std::string(format)}}), opset(20));
}

// A 2 x 1 P6 image: a red pixel, then a green one.
const std::string kPnm = std::string("P6\n# a comment\n2 1\n255\n") + std::string("\xff\x00\x00\x00\xff\x00", 6);

TEST(ImageDecoder, PnmInEveryPixelFormat) {
  std::vector<Tensor> y = decode(kPnm);
  EXPECT_EQ(y[0].shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(values<uint8_t>(y[0]), (std::vector<uint8_t>{255, 0, 0, 0, 255, 0}));
  EXPECT_EQ(values<uint8_t>(decode(kPnm, "BGR")[0]), (std::vector<uint8_t>{0, 0, 255, 0, 255, 0}));
  // Pillow's luma: (R*19595 + G*38470 + B*7471 + 32768) >> 16 = 76 for red, 150 for green.
  y = decode(kPnm, "Grayscale");
  EXPECT_EQ(y[0].shape(), (Shape{1, 2, 1}));
  EXPECT_EQ(values<uint8_t>(y[0]), (std::vector<uint8_t>{76, 150}));
}

// A 2 x 2, 24-bit, bottom-up BMP: rows of 6 bytes padded to 8, pixels stored B, G, R.
std::string bmp_2x2() {
  std::string b = "BM";
  auto u32 = [&](uint32_t v) { for (int i = 0; i < 4; ++i) b += static_cast<char>((v >> (8 * i)) & 0xff); };
  auto u16 = [&](uint16_t v) { b += static_cast<char>(v & 0xff); b += static_cast<char>(v >> 8); };
  u32(54 + 16); u32(0); u32(54);              // file size, reserved, pixel offset
  u32(40); u32(2); u32(2); u16(1); u16(24);   // header size, width, height, planes, bits
  u32(0); u32(16); u32(0); u32(0); u32(0); u32(0);
  b += std::string("\x01\x02\x03\x04\x05\x06\x00\x00", 8);  // bottom row: (3,2,1), (6,5,4)
  b += std::string("\x07\x08\x09\x0a\x0b\x0c\x00\x00", 8);  // top row: (9,8,7), (12,11,10)
  return b;
}

TEST(ImageDecoder, BmpRowsAreBottomUp) {
  std::vector<Tensor> y = decode(bmp_2x2());
  EXPECT_EQ(y[0].shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(values<uint8_t>(y[0]), (std::vector<uint8_t>{9, 8, 7, 12, 11, 10, 3, 2, 1, 6, 5, 4}));
}

TEST(ImageDecoder, RefusesBadFilesCleanly) {
  EXPECT_EQ(error_kind_of([&] { decode("not an image at all"); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_kind_of([&] { decode(bmp_2x2().substr(0, 60)); }), ErrorKind::kInvalidArgument);  // cut short
  // A header that claims 10^10 pixels is refused before anything is allocated.
  EXPECT_EQ(error_kind_of([&] { decode("P6\n100000 100000\n255\n\xff"); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_kind_of([&] { decode("\xff\xd8\xff\xe0 truncated JPEG"); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_kind_of([&] { decode("\x89PNG\r\n\x1a\n truncated PNG"); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_kind_of([&] { decode(kPnm, "CMYK"); }), ErrorKind::kInvalidModel);
}

}  // namespace
}  // namespace anvil
