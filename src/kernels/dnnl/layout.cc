// oneDNN memory formats as planned layouts, and the reorder kernel the planner
// inserts between a producer and a consumer that disagree on a layout.
#include <algorithm>
#include <cstring>

#include "kernels/dnnl/common.h"

namespace anvil::kernels::dnnl_util {

namespace {

class DnnlLayout : public LayoutDesc {
 public:
  explicit DnnlLayout(const dnnl::memory::desc& md) : md_(md) {}
  const dnnl::memory::desc& md() const { return md_; }
  std::string name() const override { return layout_name(md_); }
  size_t bytes() const override { return md_.get_size(); }
  bool same_as(const LayoutDesc& other) const override {
    const auto* o = dynamic_cast<const DnnlLayout*>(&other);
    return o && o->md_ == md_;
  }
  std::unique_ptr<Kernel> make_reorder(const TensorType& from, const Layout& to) const override;

 private:
  dnnl::memory::desc md_;
};

class DnnlReorder : public Kernel {
 public:
  DnnlReorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to)
      : from_(from), to_(to), reorder_(dnnl::reorder::primitive_desc(engine(), from, engine(), to)) {}

  std::vector<TensorType> prepare(const PrepareContext&) override {
    fail(ErrorKind::kInternal, "a reorder is made prepared");
  }
  void run(const RunContext& ctx) const override {
    dnnl::memory src = wrap(from_, ctx.in(0).raw());
    dnnl::memory dst = wrap(to_, ctx.out(0).raw());
    reorder_.execute(stream(), src, dst);
    stream().wait();
  }
  std::string impl_name() const override { return "dnnl:reorder"; }
  std::string layout_name() const override {
    return dnnl_util::layout_name(from_) + "->" + dnnl_util::layout_name(to_);
  }

 private:
  dnnl::memory::desc from_, to_;
  dnnl::reorder reorder_;
};

// A reorder between two pixel layouts of a float32 image, 1-3 spatial dims
// (spatial_pixel_layout), the smaller of whose channel runs is 8: NHWC and
// nChw8c, or nChw8c and nChw16c (timed only as part of models):
// each pixel's channels copied in runs of the smaller block, a tile of
// pixels at a time, so the source's rows stay in cache while each
// destination plane is written a contiguous run per tile. oneDNN 2.6.3 took
// 5.6-6.6 ms to reorder SegFormer's [1, 1024, 64, 64] concat from NHWC to
// nChw8c (AVX2), 3x its time from plain NCHW; this loop 2.7-2.9 ms (AMD EPYC
// Zen 4, one thread), and all of the model's NHWC <-> nChw8c reorders 4.3
// ms against 8.1. Between NHWC and nChw16c (AVX-512) oneDNN's own reorder
// ran faster (ResNet-50's nine: 0.68 ms against 1.10), so it keeps those.
class PixelReorder : public Kernel {
 public:
  PixelReorder(const dnnl::memory::desc& from_md, const dnnl::memory::desc& to_md, const PixelLayout& from,
               const PixelLayout& to, int64_t batch, int64_t channels, int64_t pixels)
      : name_(dnnl_util::layout_name(from_md) + "->" + dnnl_util::layout_name(to_md)), from_(from), to_(to), batch_(batch),
        channels_(channels), pixels_(pixels) {}

  std::vector<TensorType> prepare(const PrepareContext&) override {
    fail(ErrorKind::kInternal, "a reorder is made prepared");
  }
  void run(const RunContext& ctx) const override {
    const int64_t run = std::min(from_.channels, to_.channels);
    // The ISAs' channel blocks as fixed-size copies, which the compiler inlines.
    if (run == 8) return copy_runs(ctx, [](float* d, const float* s) { std::memcpy(d, s, 8 * sizeof(float)); });
    if (run == 16) return copy_runs(ctx, [](float* d, const float* s) { std::memcpy(d, s, 16 * sizeof(float)); });
    const auto bytes = static_cast<size_t>(run) * sizeof(float);
    copy_runs(ctx, [bytes](float* d, const float* s) { std::memcpy(d, s, bytes); });
  }
  std::string impl_name() const override { return "pixels:reorder"; }
  std::string layout_name() const override { return name_; }

 private:
  static constexpr int64_t kTile = 32;                // pixels a step: 32 rows of NHWC stay in L1 / L2
  static constexpr int64_t kParallelFloats = 1 << 15;  // smaller images reorder on one thread
  template <typename Copy>
  void copy_runs(const RunContext& ctx, Copy copy) const {
    const auto* x = static_cast<const float*>(ctx.in(0).raw());
    auto* y = static_cast<float*>(ctx.out(0).raw());
    const int64_t run = std::min(from_.channels, to_.channels), tiles = (pixels_ + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) if (batch_ * pixels_ * channels_ >= kParallelFloats)
    for (int64_t job = 0; job < batch_ * tiles; ++job) {
      const int64_t n = job / tiles, p0 = job % tiles * kTile, p1 = std::min(pixels_, p0 + kTile);
      for (int64_t c = 0; c < channels_; c += run) {
        const float* src = x + at(from_, n, c) + p0 * from_.pixel;
        float* dst = y + at(to_, n, c) + p0 * to_.pixel;
        for (int64_t p = p0; p < p1; ++p, src += from_.pixel, dst += to_.pixel) copy(dst, src);
      }
    }
  }

  // Floats to channel c of pixel 0 of batch item n.
  int64_t at(const PixelLayout& l, int64_t n, int64_t c) const {
    return (n * (channels_ / l.channels) + c / l.channels) * l.plane + c % l.channels;
  }

  std::string name_;
  PixelLayout from_, to_;
  int64_t batch_, channels_, pixels_;
};

std::unique_ptr<Kernel> DnnlLayout::make_reorder(const TensorType& from, const Layout& to) const {
  TensorType target = from;
  target.layout = to;
  try {
    const dnnl::memory::desc from_md = desc_of(from), to_md = desc_of(target);
    const std::optional<PixelLayout> a = spatial_pixel_layout(from_md), b = spatial_pixel_layout(to_md);
    if (from.dtype == DType::kFloat32 && a && b && from.shape.size() >= 3 && std::min(a->channels, b->channels) == 8) {
      int64_t pixels = 1;
      for (size_t i = 2; i < from.shape.size(); ++i) pixels *= from.shape[i];
      return std::make_unique<PixelReorder>(from_md, to_md, *a, *b, from.shape[0], from.shape[1], pixels);
    }
    return std::make_unique<DnnlReorder>(from_md, to_md);
  } catch (const dnnl::error& e) {
    fail(ErrorKind::kInternal, "oneDNN cannot reorder {} to {} ({})", kernels::layout_name(from.layout),
         kernels::layout_name(to), e.what());
  }
}

}  // namespace

Layout layout_of(const dnnl::memory::desc& md, const dnnl::memory::desc& plain) {
  if (md == plain) return nullptr;
  return std::make_shared<DnnlLayout>(md);
}

Layout layout_of(const dnnl::memory::desc& md, const Shape& shape, DType dtype) {
  return layout_of(md, plain_desc(shape, dtype));
}

size_t ActivationLayouts::init(const PrepareContext& ctx, const dnnl::memory::desc& plain_src,
                               const dnnl::memory::desc& src_md, const dnnl::memory::desc& plain_dst,
                               const dnnl::memory::desc& dst_md, size_t offset) {
  planned = ctx.blocked_inputs_allowed();
  if (planned) {
    src_layout = layout_of(src_md, plain_src);
    offset = src.init(src_md, src_md, offset);
  } else {
    offset = src.init(plain_src, src_md, offset);
  }
  if (ctx.blocked_outputs_allowed()) {
    dst_layout = layout_of(dst_md, plain_dst);
    return dst.init(dst_md, dst_md, offset);
  }
  return dst.init(plain_dst, dst_md, offset);
}

dnnl::memory::desc nhwc_desc(const Shape& shape) {
  return dnnl::memory::desc(dims(shape), dnnl::memory::data_type::f32, dnnl::memory::format_tag::nhwc);
}

Format format_of(const Layout& in, const Shape& shape) {
  if (!in) return nullptr;
  if (same_layout(in, layout_of(nhwc_desc(shape), shape, DType::kFloat32))) return nhwc_desc;
  if (same_layout(in, layout_of(blocked_desc(shape), shape, DType::kFloat32))) return blocked_desc;
  return nullptr;
}

Layout elementwise_layout(const PrepareContext& ctx, size_t i, const Shape& shape) {
  return ctx.blocked_outputs_allowed() ? readable_layout(ctx, i, shape) : nullptr;
}

Layout readable_layout(const PrepareContext& ctx, size_t i, const Shape& shape) {
  if (!ctx.blocked_inputs_allowed()) return nullptr;
  const Layout in = ctx.incoming_layout(i);
  const auto* d = in ? dynamic_cast<const DnnlLayout*>(in.get()) : nullptr;
  if (!d || d->md().dims() != dims(shape) || d->md().data_type() != dnnl::memory::data_type::f32) return nullptr;
  if (d->md().get_size() != plain_desc(shape, DType::kFloat32).get_size()) return nullptr;
  return in;
}

dnnl::memory::desc desc_of(const TensorType& type) {
  if (!type.layout) return plain_desc(type.shape, type.dtype);
  const auto* d = dynamic_cast<const DnnlLayout*>(type.layout.get());
  ANVIL_CHECK(d, ErrorKind::kInternal, "layout {} is not a oneDNN format", type.layout->name());
  return d->md();
}

}  // namespace anvil::kernels::dnnl_util
