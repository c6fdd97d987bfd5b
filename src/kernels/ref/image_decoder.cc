// ImageDecoder (opset 20): an encoded image (1-D uint8) to [H, W, 3] in RGB
// or BGR, or [H, W, 1] luma, as Pillow (ONNX's reference) decodes it.
// Formats by their signature: JPEG (libjpeg), PNG (libpng), TIFF (libtiff),
// WebP (libwebp), JPEG 2000 (OpenJPEG; JP2 files and raw codestreams), and
// BMP (24/32-bit uncompressed) and binary PNM (P5, P6) read here.
//
// The bytes are untrusted: dimensions are checked (kMaxPixels, the
// allocation cap) before any pixel buffer exists, and every library reports
// failure by status, never by unwinding through C code.
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>

#include <jpeglib.h>
#include <openjpeg.h>
#include <png.h>
#include <tiffio.h>
#include <webp/decode.h>

#include "core/checked.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

// 2^28 pixels (a 16384 x 16384 image): beyond that an "image" is an attack.
constexpr int64_t kMaxPixels = int64_t{1} << 28;

struct Image {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> rgb;  // height * width * 3
};

[[noreturn]] void bad_image(const std::string& what) {
  fail(ErrorKind::kInvalidArgument, "ImageDecoder: {}", what);
}

void size_image(Image& img, int64_t width, int64_t height) {
  if (width <= 0 || height <= 0 || width > kMaxPixels || height > kMaxPixels || width * height > kMaxPixels)
    bad_image(fmt::format("an image of {} x {} pixels is empty or too large", width, height));
  check_allocation(static_cast<size_t>(width * height * 3), "ImageDecoder: the decoded image");
  img.width = width;
  img.height = height;
  img.rgb.assign(static_cast<size_t>(width * height * 3), 0);
}

bool starts_with(const std::vector<uint8_t>& b, std::initializer_list<uint8_t> magic) {
  return b.size() >= magic.size() && std::equal(magic.begin(), magic.end(), b.begin());
}

// --- JPEG (libjpeg reports errors by longjmp: no C++ object with a destructor
// lives between the setjmp and the calls that may jump) -----------------------

struct JpegErrors {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr info) {
  auto* errors = reinterpret_cast<JpegErrors*>(info->err);
  (*info->err->format_message)(info, errors->message);
  longjmp(errors->jump, 1);
}

// Decodes into `pixels` (malloc'ed, owned by the caller); returns the error or "".
std::string jpeg_decode(const std::vector<uint8_t>& bytes, uint8_t*& pixels, int64_t& width, int64_t& height) {
  jpeg_decompress_struct info;
  JpegErrors errors;
  info.err = jpeg_std_error(&errors.mgr);
  errors.mgr.error_exit = jpeg_error_exit;
  errors.mgr.output_message = [](j_common_ptr) {};
  errors.message[0] = '\0';
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&info);
    return errors.message[0] ? errors.message : "corrupt JPEG data";
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&info, TRUE);
  info.out_color_space = JCS_RGB;
  const int64_t w = info.image_width, h = info.image_height;
  if (w <= 0 || h <= 0 || w * h > kMaxPixels || static_cast<size_t>(w * h * 3) > max_allocation_bytes()) {
    jpeg_destroy_decompress(&info);
    return fmt::format("an image of {} x {} pixels is empty or too large", w, h);
  }
  pixels = static_cast<uint8_t*>(std::malloc(static_cast<size_t>(w * h * 3)));
  if (!pixels) {
    jpeg_destroy_decompress(&info);
    return "out of memory";
  }
  jpeg_start_decompress(&info);
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = pixels + static_cast<size_t>(info.output_scanline) * static_cast<size_t>(w) * 3;
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  width = w;
  height = h;
  return "";
}

Image decode_jpeg(const std::vector<uint8_t>& bytes) {
  uint8_t* pixels = nullptr;
  int64_t w = 0, h = 0;
  const std::string error = jpeg_decode(bytes, pixels, w, h);
  std::unique_ptr<uint8_t, void (*)(void*)> owner(pixels, std::free);
  if (!error.empty()) bad_image("JPEG: " + error);
  Image img;
  size_image(img, w, h);
  std::memcpy(img.rgb.data(), pixels, img.rgb.size());
  return img;
}

// --- PNG (libpng's simplified API returns a status) ---------------------------

Image decode_png(const std::vector<uint8_t>& bytes) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size())) bad_image(std::string("PNG: ") + png.message);
  png.format = PNG_FORMAT_RGB;
  Image img;
  try {
    size_image(img, png.width, png.height);
  } catch (...) {
    png_image_free(&png);
    throw;
  }
  if (!png_image_finish_read(&png, nullptr, img.rgb.data(), 0, nullptr)) {
    const std::string message = png.message;
    png_image_free(&png);
    bad_image("PNG: " + message);
  }
  return img;
}

// --- TIFF (libtiff on a memory stream; errors return statuses) ----------------

struct MemoryFile {
  const std::vector<uint8_t>* bytes;
  toff_t at = 0;
};

tsize_t tiff_read(thandle_t h, tdata_t buf, tsize_t size) {
  auto* f = static_cast<MemoryFile*>(h);
  const toff_t left = f->at < f->bytes->size() ? f->bytes->size() - f->at : 0;
  const auto n = static_cast<toff_t>(size) < left ? static_cast<toff_t>(size) : left;
  std::memcpy(buf, f->bytes->data() + f->at, n);
  f->at += n;
  return static_cast<tsize_t>(n);
}
tsize_t tiff_write(thandle_t, tdata_t, tsize_t) { return 0; }
toff_t tiff_seek(thandle_t h, toff_t off, int whence) {
  auto* f = static_cast<MemoryFile*>(h);
  const toff_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? f->at : f->bytes->size();
  if (off > f->bytes->size() || base + off > f->bytes->size()) return static_cast<toff_t>(-1);
  f->at = base + off;
  return f->at;
}
int tiff_close(thandle_t) { return 0; }
toff_t tiff_size(thandle_t h) { return static_cast<MemoryFile*>(h)->bytes->size(); }
int tiff_map(thandle_t, tdata_t*, toff_t*) { return 0; }
void tiff_unmap(thandle_t, tdata_t, toff_t) {}

Image decode_tiff(const std::vector<uint8_t>& bytes) {
  TIFFSetErrorHandler(nullptr);  // failures come back as statuses; the messages would go to stderr
  TIFFSetWarningHandler(nullptr);
  MemoryFile file{&bytes};
  TIFF* tif = TIFFClientOpen("image", "rm", &file, tiff_read, tiff_write, tiff_seek, tiff_close, tiff_size, tiff_map,
                             tiff_unmap);
  if (!tif) bad_image("TIFF: not a readable TIFF");
  std::unique_ptr<TIFF, void (*)(TIFF*)> closer(tif, TIFFClose);
  uint32_t w = 0, h = 0;
  TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w);
  TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h);
  Image img;
  size_image(img, w, h);
  check_allocation(static_cast<size_t>(w) * h * 4, "ImageDecoder: the TIFF raster");
  std::vector<uint32_t> raster(static_cast<size_t>(w) * h);
  if (!TIFFReadRGBAImageOriented(tif, w, h, raster.data(), ORIENTATION_TOPLEFT, 0)) bad_image("TIFF: corrupt image data");
  for (size_t i = 0; i < raster.size(); ++i) {
    img.rgb[3 * i] = static_cast<uint8_t>(TIFFGetR(raster[i]));
    img.rgb[3 * i + 1] = static_cast<uint8_t>(TIFFGetG(raster[i]));
    img.rgb[3 * i + 2] = static_cast<uint8_t>(TIFFGetB(raster[i]));
  }
  return img;
}

// --- WebP ----------------------------------------------------------------------

Image decode_webp(const std::vector<uint8_t>& bytes) {
  int w = 0, h = 0;
  if (!WebPGetInfo(bytes.data(), bytes.size(), &w, &h)) bad_image("WebP: not a readable WebP");
  Image img;
  size_image(img, w, h);
  if (!WebPDecodeRGBInto(bytes.data(), bytes.size(), img.rgb.data(), img.rgb.size(), w * 3))
    bad_image("WebP: corrupt image data");
  return img;
}

// --- JPEG 2000 (OpenJPEG on a memory stream) ----------------------------------

struct OpjSource {
  const std::vector<uint8_t>* bytes;
  OPJ_OFF_T at = 0;
};

OPJ_SIZE_T opj_read(void* buf, OPJ_SIZE_T n, void* user) {
  auto* s = static_cast<OpjSource*>(user);
  const auto left = static_cast<OPJ_SIZE_T>(static_cast<OPJ_OFF_T>(s->bytes->size()) - s->at);
  if (left == 0) return static_cast<OPJ_SIZE_T>(-1);
  const OPJ_SIZE_T take = n < left ? n : left;
  std::memcpy(buf, s->bytes->data() + s->at, take);
  s->at += static_cast<OPJ_OFF_T>(take);
  return take;
}
OPJ_OFF_T opj_skip(OPJ_OFF_T n, void* user) {
  auto* s = static_cast<OpjSource*>(user);
  const auto size = static_cast<OPJ_OFF_T>(s->bytes->size());
  const OPJ_OFF_T to = std::clamp<OPJ_OFF_T>(s->at + n, 0, size);
  const OPJ_OFF_T moved = to - s->at;
  s->at = to;
  return moved;
}
OPJ_BOOL opj_seek(OPJ_OFF_T to, void* user) {
  auto* s = static_cast<OpjSource*>(user);
  if (to < 0 || to > static_cast<OPJ_OFF_T>(s->bytes->size())) return OPJ_FALSE;
  s->at = to;
  return OPJ_TRUE;
}

Image decode_jpeg2000(const std::vector<uint8_t>& bytes, bool jp2) {
  OpjSource src{&bytes};
  std::unique_ptr<opj_stream_t, void (*)(opj_stream_t*)> stream(opj_stream_create(OPJ_J2K_STREAM_CHUNK_SIZE, OPJ_TRUE),
                                                                 opj_stream_destroy);
  opj_stream_set_user_data(stream.get(), &src, nullptr);
  opj_stream_set_user_data_length(stream.get(), bytes.size());
  opj_stream_set_read_function(stream.get(), opj_read);
  opj_stream_set_skip_function(stream.get(), opj_skip);
  opj_stream_set_seek_function(stream.get(), opj_seek);
  std::unique_ptr<opj_codec_t, void (*)(opj_codec_t*)> codec(opj_create_decompress(jp2 ? OPJ_CODEC_JP2 : OPJ_CODEC_J2K),
                                                               opj_destroy_codec);
  auto quiet = [](const char*, void*) {};
  opj_set_error_handler(codec.get(), quiet, nullptr);
  opj_set_warning_handler(codec.get(), quiet, nullptr);
  opj_set_info_handler(codec.get(), quiet, nullptr);
  opj_dparameters_t params;
  opj_set_default_decoder_parameters(&params);
  opj_image_t* raw = nullptr;
  if (!opj_setup_decoder(codec.get(), &params) || !opj_read_header(stream.get(), codec.get(), &raw))
    bad_image("JPEG 2000: not a readable header");
  std::unique_ptr<opj_image_t, void (*)(opj_image_t*)> image(raw, opj_image_destroy);
  const int64_t w = static_cast<int64_t>(image->x1) - image->x0, h = static_cast<int64_t>(image->y1) - image->y0;
  if (w <= 0 || h <= 0 || w * h > kMaxPixels) bad_image(fmt::format("JPEG 2000: {} x {} pixels", w, h));
  check_allocation(static_cast<size_t>(w * h) * 4 * (image->numcomps ? image->numcomps : 1), "ImageDecoder: JPEG 2000");
  if (!opj_decode(codec.get(), stream.get(), image.get()) || !opj_end_decompress(codec.get(), stream.get()))
    bad_image("JPEG 2000: corrupt image data");
  const OPJ_UINT32 comps = image->numcomps;
  if (comps != 1 && comps != 3 && comps != 4) bad_image(fmt::format("JPEG 2000: {} components", comps));
  for (OPJ_UINT32 c = 0; c < (comps == 1 ? 1u : 3u); ++c) {
    const opj_image_comp_t& k = image->comps[c];
    if (!k.data || k.w != static_cast<OPJ_UINT32>(w) || k.h != static_cast<OPJ_UINT32>(h) || k.prec < 1 || k.prec > 16)
      bad_image("JPEG 2000: subsampled or unusual components are not supported");
  }
  Image img;
  size_image(img, w, h);
  for (int64_t i = 0; i < w * h; ++i)
    for (int c = 0; c < 3; ++c) {
      const opj_image_comp_t& k = image->comps[comps == 1 ? 0 : c];
      int32_t v = k.data[i];
      if (k.sgnd) v += 1 << (k.prec - 1);
      if (k.prec > 8) v >>= (k.prec - 8);
      else if (k.prec < 8) v <<= (8 - k.prec);
      img.rgb[static_cast<size_t>(3 * i + c)] = static_cast<uint8_t>(std::clamp(v, 0, 255));
    }
  return img;
}

// --- BMP (uncompressed 24- and 32-bit) ------------------------------------------

uint32_t le32(const std::vector<uint8_t>& b, size_t at) {
  return static_cast<uint32_t>(b[at]) | static_cast<uint32_t>(b[at + 1]) << 8 | static_cast<uint32_t>(b[at + 2]) << 16 |
         static_cast<uint32_t>(b[at + 3]) << 24;
}

Image decode_bmp(const std::vector<uint8_t>& b) {
  if (b.size() < 54) bad_image("BMP: the headers are cut short");
  const uint32_t offset = le32(b, 10), header = le32(b, 14);
  const auto w = static_cast<int32_t>(le32(b, 18)), signed_h = static_cast<int32_t>(le32(b, 22));
  const int bpp = b[28] | b[29] << 8;
  const uint32_t compression = le32(b, 30);
  if (header < 40 || compression != 0 || (bpp != 24 && bpp != 32))
    bad_image(fmt::format("BMP: {}-bit images with compression {} are not supported (24/32-bit uncompressed are)", bpp,
                          compression));
  const int64_t h = signed_h < 0 ? -static_cast<int64_t>(signed_h) : signed_h;
  Image img;
  size_image(img, w, h);
  const int64_t stride = (static_cast<int64_t>(bpp) * w + 31) / 32 * 4, bytes_pp = bpp / 8;
  if (static_cast<int64_t>(offset) + stride * h > static_cast<int64_t>(b.size()))
    bad_image("BMP: the pixel data is cut short");
  for (int64_t r = 0; r < h; ++r) {
    const int64_t src_row = signed_h < 0 ? r : h - 1 - r;  // bottom-up unless the height is negative
    const uint8_t* row = b.data() + offset + src_row * stride;
    for (int64_t c = 0; c < w; ++c) {
      uint8_t* px = img.rgb.data() + (r * w + c) * 3;
      px[0] = row[c * bytes_pp + 2];
      px[1] = row[c * bytes_pp + 1];
      px[2] = row[c * bytes_pp];
    }
  }
  return img;
}

// --- PNM (binary P5 grey, P6 colour, maxval 255) -------------------------------

Image decode_pnm(const std::vector<uint8_t>& b) {
  const bool color = b[1] == '6';
  size_t at = 2;
  auto number = [&]() -> int64_t {
    while (at < b.size() && (std::isspace(b[at]) || b[at] == '#')) {
      if (b[at] == '#')
        while (at < b.size() && b[at] != '\n') ++at;
      else
        ++at;
    }
    int64_t v = 0;
    const size_t start = at;
    while (at < b.size() && std::isdigit(b[at]) && at - start < 10) v = v * 10 + (b[at++] - '0');
    if (at == start) bad_image("PNM: the header is malformed");
    return v;
  };
  const int64_t w = number(), h = number(), maxval = number();
  if (maxval != 255) bad_image(fmt::format("PNM: maxval {} is not supported (255 is)", maxval));
  ++at;  // the single whitespace before the pixels
  Image img;
  size_image(img, w, h);
  const int64_t channels = color ? 3 : 1;
  if (static_cast<int64_t>(at) + w * h * channels > static_cast<int64_t>(b.size())) bad_image("PNM: the pixel data is cut short");
  for (int64_t i = 0; i < w * h; ++i)
    for (int c = 0; c < 3; ++c) img.rgb[static_cast<size_t>(3 * i + c)] = b[at + static_cast<size_t>(i * channels + (color ? c : 0))];
  return img;
}

Image decode(const std::vector<uint8_t>& b) {
  if (starts_with(b, {0xff, 0xd8, 0xff})) return decode_jpeg(b);
  if (starts_with(b, {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a})) return decode_png(b);
  if (starts_with(b, {'I', 'I', 42, 0}) || starts_with(b, {'M', 'M', 0, 42})) return decode_tiff(b);
  if (b.size() >= 12 && starts_with(b, {'R', 'I', 'F', 'F'}) && std::memcmp(b.data() + 8, "WEBP", 4) == 0)
    return decode_webp(b);
  if (starts_with(b, {0, 0, 0, 0x0c, 'j', 'P', ' ', ' '})) return decode_jpeg2000(b, true);
  if (starts_with(b, {0xff, 0x4f, 0xff, 0x51})) return decode_jpeg2000(b, false);
  if (starts_with(b, {'B', 'M'})) return decode_bmp(b);
  if (b.size() > 2 && b[0] == 'P' && (b[1] == '5' || b[1] == '6')) return decode_pnm(b);
  bad_image("the bytes are not a JPEG, PNG, TIFF, WebP, JPEG 2000, BMP or binary PNM image");
}

class ImageDecoderKernel : public Kernel {
 public:
  explicit ImageDecoderKernel(const ir::Node& node) : format_(node.attrs.get_string("pixel_format", "RGB")) {}
  bool allocates_outputs() const override { return true; }  // the image's size is in its bytes

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, format_ == "RGB" || format_ == "BGR" || format_ == "Grayscale", ErrorKind::kInvalidModel,
                        "pixel_format '{}' is not RGB, BGR or Grayscale", format_);
    ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(0).size() == 1, ErrorKind::kInvalidArgument,
                        "the encoded image must be 1-D bytes, got {}", shape_str(ctx.input_shape(0)));
    return {{DType::kUInt8, {-1, -1, format_ == "Grayscale" ? 1 : 3}}};
  }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const auto* p = static_cast<const uint8_t*>(x.raw());
    const Image img = decode(std::vector<uint8_t>(p, p + x.numel()));
    const int64_t pixels = img.width * img.height;
    Tensor y(DType::kUInt8, {img.height, img.width, format_ == "Grayscale" ? 1 : 3});
    uint8_t* out = y.data<uint8_t>();
    for (int64_t i = 0; i < pixels; ++i) {
      const uint8_t* px = img.rgb.data() + 3 * i;
      if (format_ == "Grayscale") {
        // Pillow's RGB -> L: ITU-R 601-2 luma in 16-bit fixed point, rounded.
        out[i] = static_cast<uint8_t>((px[0] * 19595 + px[1] * 38470 + px[2] * 7471 + 0x8000) >> 16);
      } else {
        const bool bgr = format_ == "BGR";
        out[3 * i] = px[bgr ? 2 : 0];
        out[3 * i + 1] = px[1];
        out[3 * i + 2] = px[bgr ? 0 : 2];
      }
    }
    *ctx.outputs[0] = std::move(y);
  }

 private:
  std::string format_;
};

}  // namespace

ANVIL_REGISTER_OP_VERSIONS("ImageDecoder", 20, 20);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("ImageDecoder", kRef, ImageDecoderKernel, {dtype_bit(DType::kUInt8)});

}  // namespace anvil::kernels
