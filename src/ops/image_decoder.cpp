// ImageDecoder (opset 20): a 1-D uint8 tensor holding an encoded image -> uint8 [H, W, C] in
// pixel_format RGB (C 3), BGR (C 3) or Grayscale (C 1). Formats: JPEG (libjpeg-turbo, the
// library's default integer IDCT and fancy upsampling, as Pillow decodes), PNG (libpng; 8-bit
// output, palettes and grey expanded, alpha dropped), BMP (uncompressed 24/32-bit and 8-bit
// palettes) and binary PNM (P5/P6, 8-bit). Grayscale from colour uses Pillow's convert("L")
// rounding, L = (19595 R + 38470 G + 7471 B + 2^15) >> 16, so results match ONNX's reference
// (which decodes with Pillow). JPEG 2000, TIFF and WebP are Unsupported; a truncated or
// corrupt image is an error naming the node, never a crash. The output shape depends on the
// data, so inference leaves H and W unknown.
#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "ops/common.h"

#if SAMPAN_HAVE_JPEG
#include <jerror.h>
#include <jpeglib.h>
#endif
#if SAMPAN_HAVE_PNG
#include <png.h>
#endif

namespace sampan::ops {
namespace {

// Decoded pixels, RGB (3 channels) or grey (1), row-major.
struct Image {
  int64_t h = 0, w = 0, c = 0;
  std::vector<uint8_t> px;
};

constexpr int64_t kMaxPixels = int64_t{1} << 28;  // 268 M pixels: a bound on what a header may ask for

bool StartsWith(const uint8_t* p, size_t n, std::initializer_list<uint8_t> magic) {
  if (n < magic.size()) return false;
  size_t i = 0;
  for (uint8_t m : magic)
    if (p[i++] != m) return false;
  return true;
}

// The most pixels a header may ask for: sampan::ImageDecoder's max_pixels, else kMaxPixels.
int64_t PixelLimit(const ir::Node& node) {
  return node.domain == "sampan" ? std::min(node.attr_int("max_pixels", int64_t{1} << 26), kMaxPixels) : kMaxPixels;
}

// Checked from the header, before anything of the image's size is allocated.
Status CheckSize(const ir::Node& node, int64_t w, int64_t h) {
  if (w <= 0 || h <= 0 || w > (1 << 20) || h > (1 << 20))
    return InvalidArgument(node.Label(), ": image size ", w, " x ", h, " is empty or too large");
  if (const int64_t limit = PixelLimit(node); w * h > limit)
    return InvalidArgument(node.Label(), ": image size ", w, " x ", h, " (", w * h, " pixels) is over the limit of ",
                           limit, " pixels", node.domain == "sampan" ? " (attribute max_pixels)" : "");
  return Status::Ok();
}

#if SAMPAN_HAVE_JPEG
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void OnJpegError(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

Result<Image> DecodeJpeg(const ir::Node& node, const uint8_t* data, size_t n) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = OnJpegError;
  err.mgr.output_message = [](j_common_ptr) {};  // nothing is printed
  // A truncated stream is only a warning to libjpeg (it pads with grey); here it is an error,
  // as it is to Pillow.
  err.mgr.emit_message = [](j_common_ptr c, int level) {
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) OnJpegError(c);
  };
  Image img;
  // Nothing with a destructor lives across setjmp: img is declared above and only resized after.
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return InvalidArgument(node.Label(), ": corrupt JPEG: ", err.message);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(n));
  jpeg_read_header(&cinfo, TRUE);
  const bool grey = cinfo.jpeg_color_space == JCS_GRAYSCALE;
  cinfo.out_color_space = grey ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  const int64_t w = cinfo.output_width, h = cinfo.output_height, c = cinfo.output_components;
  if (w <= 0 || h <= 0 || w * h > kMaxPixels || (c != 1 && c != 3)) {
    jpeg_destroy_decompress(&cinfo);
    return InvalidArgument(node.Label(), ": JPEG of ", w, " x ", h, " x ", c, " is not decodable here");
  }
  img.h = h;
  img.w = w;
  img.c = c;
  img.px.resize(static_cast<size_t>(h * w * c));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = img.px.data() + static_cast<size_t>(cinfo.output_scanline) * static_cast<size_t>(w * c);
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return img;
}
#endif

#if SAMPAN_HAVE_PNG
Result<Image> DecodePng(const ir::Node& node, const uint8_t* data, size_t n) {
  png_image png;
  std::memset(&png, 0, sizeof(png));
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&png, data, n))
    return InvalidArgument(node.Label(), ": corrupt PNG: ", png.message);
  // Colour images decode to RGB, grey ones to grey; 16-bit samples become 8-bit, alpha is
  // composited away (as Pillow's RGB conversion drops it).
  const bool grey = (png.format & PNG_FORMAT_FLAG_COLOR) == 0;
  png.format = grey ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  Image img;
  img.w = png.width;
  img.h = png.height;
  img.c = grey ? 1 : 3;
  if (Status st = CheckSize(node, img.w, img.h); !st.ok()) {
    png_image_free(&png);
    return st;
  }
  img.px.resize(PNG_IMAGE_SIZE(png));
  if (!png_image_finish_read(&png, nullptr, img.px.data(), 0, nullptr)) {
    const std::string msg = png.message;
    png_image_free(&png);
    return InvalidArgument(node.Label(), ": corrupt PNG: ", msg);
  }
  return img;
}
#endif

uint32_t Le32(const uint8_t* p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
uint16_t Le16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

// BMP: BITMAPINFOHEADER (or later) files, uncompressed (BI_RGB, or BI_BITFIELDS with the
// usual X8R8G8B8 masks at 32 bits, checked), 8-bit palettes and 24/32-bit pixels; bottom-up or
// top-down.
Result<Image> DecodeBmp(const ir::Node& node, const uint8_t* d, size_t n) {
  auto bad = [&](const char* why) { return InvalidArgument(node.Label(), ": BMP: ", why); };
  if (n < 54) return bad("truncated header");
  const uint32_t offset = Le32(d + 10), hsize = Le32(d + 14);
  if (hsize < 40 || 14 + static_cast<size_t>(hsize) > n) return bad("unsupported or truncated info header");
  const int32_t w = static_cast<int32_t>(Le32(d + 18)), hs = static_cast<int32_t>(Le32(d + 22));
  const uint16_t bpp = Le16(d + 28);
  const uint32_t comp = Le32(d + 30);
  const bool top_down = hs < 0;
  const int64_t h = top_down ? -static_cast<int64_t>(hs) : hs;
  SP_RETURN_IF_ERROR(CheckSize(node, w, h));
  if (!(comp == 0 || (comp == 3 && bpp == 32))) return Unsupported(node.Label(), ": BMP compression ", comp);
  if (comp == 3) {  // bit fields: only the usual X8R8G8B8 layout (masks after a 40-byte header, or in it)
    if (n < 66) return bad("truncated bit-field masks");
    if (Le32(d + 54) != 0x00FF0000u || Le32(d + 58) != 0x0000FF00u || Le32(d + 62) != 0x000000FFu)
      return Unsupported(node.Label(), ": BMP bit-field masks other than 8-bit R, G, B");
  }
  if (bpp != 8 && bpp != 24 && bpp != 32) return Unsupported(node.Label(), ": BMP of ", bpp, " bits per pixel");
  const size_t stride = ((static_cast<size_t>(w) * bpp + 31) / 32) * 4;
  if (offset > n || stride * static_cast<size_t>(h) > n - offset) return bad("truncated pixel data");
  std::vector<uint8_t> palette;  // BGRx entries
  if (bpp == 8) {
    uint32_t colors = Le32(d + 46);
    if (colors == 0) colors = 256;
    const size_t at = 14 + hsize;
    if (colors > 256 || at + colors * 4 > offset) return bad("palette outside the header");
    palette.assign(d + at, d + at + colors * 4);
  }
  Image img;
  img.w = w;
  img.h = h;
  img.c = 3;
  img.px.resize(static_cast<size_t>(w * h * 3));
  for (int64_t y = 0; y < h; ++y) {
    const uint8_t* row = d + offset + stride * static_cast<size_t>(top_down ? y : h - 1 - y);
    uint8_t* out = img.px.data() + static_cast<size_t>(y * w * 3);
    for (int64_t x = 0; x < w; ++x) {
      const uint8_t* bgr;
      if (bpp == 8) {
        const size_t idx = row[x];
        if (idx * 4 >= palette.size()) return bad("pixel indexes past the palette");
        bgr = palette.data() + idx * 4;
      } else {
        bgr = row + x * (bpp / 8);
      }
      out[x * 3] = bgr[2];
      out[x * 3 + 1] = bgr[1];
      out[x * 3 + 2] = bgr[0];
    }
  }
  return img;
}

// Binary PNM: P5 (grey) and P6 (RGB), maxval 255.
Result<Image> DecodePnm(const ir::Node& node, const uint8_t* d, size_t n) {
  size_t i = 2;
  auto skip = [&]() {
    while (i < n) {
      if (d[i] == '#') {
        while (i < n && d[i] != '\n') ++i;
      } else if (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
        ++i;
      } else {
        break;
      }
    }
  };
  auto number = [&]() -> int64_t {
    skip();
    int64_t v = 0;
    size_t digits = 0;
    while (i < n && d[i] >= '0' && d[i] <= '9' && digits < 9) v = v * 10 + (d[i++] - '0'), ++digits;
    return digits ? v : -1;
  };
  const bool grey = d[1] == '5';
  const int64_t w = number(), h = number(), maxval = number();
  if (w < 0 || h < 0 || maxval < 0 || i >= n) return InvalidArgument(node.Label(), ": PNM: truncated header");
  SP_RETURN_IF_ERROR(CheckSize(node, w, h));
  if (maxval != 255) return Unsupported(node.Label(), ": PNM with maxval ", maxval, " (8-bit only)");
  ++i;  // the single whitespace before the raster
  Image img;
  img.w = w;
  img.h = h;
  img.c = grey ? 1 : 3;
  const size_t bytes = static_cast<size_t>(w * h * img.c);
  if (i > n || n - i < bytes) return InvalidArgument(node.Label(), ": PNM: truncated pixel data");
  img.px.assign(d + i, d + i + bytes);
  return img;
}

Result<Image> Decode(const ir::Node& node, const uint8_t* d, size_t n) {
  if (StartsWith(d, n, {0xFF, 0xD8, 0xFF})) {
#if SAMPAN_HAVE_JPEG
    return DecodeJpeg(node, d, n);
#else
    return Unsupported(node.Label(), ": JPEG (this build has no libjpeg)");
#endif
  }
  if (StartsWith(d, n, {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'})) {
#if SAMPAN_HAVE_PNG
    return DecodePng(node, d, n);
#else
    return Unsupported(node.Label(), ": PNG (this build has no libpng)");
#endif
  }
  if (StartsWith(d, n, {'B', 'M'})) return DecodeBmp(node, d, n);
  if (StartsWith(d, n, {'P', '5'}) || StartsWith(d, n, {'P', '6'})) return DecodePnm(node, d, n);
  if (StartsWith(d, n, {0x00, 0x00, 0x00, 0x0C, 'j', 'P'}) || StartsWith(d, n, {0xFF, 0x4F, 0xFF, 0x51}))
    return Unsupported(node.Label(), ": JPEG 2000 images");
  if (StartsWith(d, n, {'I', 'I', 0x2A, 0x00}) || StartsWith(d, n, {'M', 'M', 0x00, 0x2A}))
    return Unsupported(node.Label(), ": TIFF images");
  if (StartsWith(d, n, {'R', 'I', 'F', 'F'})) return Unsupported(node.Label(), ": WebP images");
  return InvalidArgument(node.Label(), ": the ", n, " bytes are not an image of a known format");
}

Result<int64_t> Channels(const ir::Node& node) {
  const std::string f = node.attr_string("pixel_format", "RGB");
  if (f == "RGB" || f == "BGR") return 3;
  if (f == "Grayscale") return 1;
  return InvalidArgument(node.Label(), ": pixel_format must be RGB, BGR or Grayscale, got '", f, "'");
}

Status InferImageDecoder(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  if (ctx.opset() < 20)
    return ctx.Error("ImageDecoder is defined from opset 20 (the model imports opset ", ctx.opset(), ")");
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, {DType::kUInt8}));
  if (const auto& d = ctx.input_dims(0); d && d->size() != 1)
    return ctx.Error("encoded_stream must be 1-D, got rank ", d->size());
  SP_ASSIGN_OR_RETURN(int64_t c, Channels(ctx.node()));
  ctx.set_output(0, DType::kUInt8, ir::Dims{ir::Dim::Unknown(), ir::Dim::Unknown(), ir::Dim::Known(c)});
  return Status::Ok();
}

Status RunImageDecoder(KernelContext& ctx) {
  const Tensor& in = ctx.in(0);
  SP_ASSIGN_OR_RETURN(int64_t c, Channels(ctx.node));
  const std::string format = ctx.node.attr_string("pixel_format", "RGB");
  SP_ASSIGN_OR_RETURN(Image img, Decode(ctx.node, in.data<uint8_t>(), static_cast<size_t>(in.numel())));
  Tensor out = Tensor::Alloc(DType::kUInt8, {img.h, img.w, c});
  uint8_t* y = out.mutable_data<uint8_t>();
  const int64_t pixels = img.h * img.w;
  const uint8_t* p = img.px.data();
  for (int64_t i = 0; i < pixels; ++i) {
    const uint8_t* s = p + i * img.c;
    if (c == 1) {
      y[i] = img.c == 1 ? s[0] : static_cast<uint8_t>((19595u * s[0] + 38470u * s[1] + 7471u * s[2] + 0x8000u) >> 16);
    } else {
      const uint8_t r = s[0], g = img.c == 1 ? s[0] : s[1], b = img.c == 1 ? s[0] : s[2];
      const bool bgr = format == "BGR";
      y[i * 3] = bgr ? b : r;
      y[i * 3 + 1] = g;
      y[i * 3 + 2] = bgr ? r : b;
    }
  }
  ctx.out(0) = std::move(out);
  return Status::Ok();
}

// sampan::ImageDecoder: ImageDecoder for served pipelines. The encoded image also comes as a
// string tensor of one element (a BYTES request input, [1] or a scalar), and the attribute
// max_pixels (default 2^26, at most 2^28) bounds what a header may ask for: a 20000 x 20000 PNG
// is refused before its pixels are allocated.
Status InferSampanImageDecoder(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  const DType t = ctx.input_dtype(0);
  if (t != DType::kUInt8 && t != DType::kString)
    return ctx.Error("encoded_stream must be uint8 [n] or a string tensor of one element, got ", DTypeName(t));
  if (const auto& d = ctx.input_dims(0)) {
    if (t == DType::kUInt8 && d->size() != 1) return ctx.Error("encoded_stream must be 1-D, got rank ", d->size());
    if (t == DType::kString && (d->size() > 1 || (d->size() == 1 && (*d)[0].known() && (*d)[0].value != 1)))
      return ctx.Error("encoded_stream as a string tensor holds one image ([1] or a scalar)");
  }
  if (ctx.node().attr_int("max_pixels", 1) <= 0)
    return ctx.Error("max_pixels must be > 0, got ", ctx.node().attr_int("max_pixels", 1));
  SP_ASSIGN_OR_RETURN(int64_t c, Channels(ctx.node()));
  ctx.set_output(0, DType::kUInt8, ir::Dims{ir::Dim::Unknown(), ir::Dim::Unknown(), ir::Dim::Known(c)});
  return Status::Ok();
}

Status RunSampanImageDecoder(KernelContext& ctx) {
  const Tensor& in = ctx.in(0);
  if (!in.is_string()) return RunImageDecoder(ctx);
  if (in.numel() != 1)
    return ctx.Error("encoded_stream as a string tensor holds one image, got ", in.numel(), " elements");
  const std::string& bytes = in.strings()[0];
  if (bytes.empty()) return ctx.Error("the encoded image is empty (0 bytes)");
  Tensor u8 = Tensor::Wrap(DType::kUInt8, {static_cast<int64_t>(bytes.size())}, nullptr, bytes.data());
  const std::vector<const Tensor*> given = ctx.inputs;
  ctx.inputs = {&u8};
  Status st = RunImageDecoder(ctx);
  ctx.inputs = given;
  return st;
}

SAMPAN_REGISTER_OP("ImageDecoder", InferImageDecoder, RunImageDecoder);
SAMPAN_REGISTER_OP_DEF({.domain = "sampan",
                        .op_type = "ImageDecoder",
                        .infer = InferSampanImageDecoder,
                        .run = RunSampanImageDecoder,
                        .strings = true});

}  // namespace
}  // namespace sampan::ops
