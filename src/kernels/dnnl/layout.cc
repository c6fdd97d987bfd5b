// oneDNN memory formats as planned layouts, and the reorder kernel the planner
// inserts between a producer and a consumer that disagree on a layout.
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

std::unique_ptr<Kernel> DnnlLayout::make_reorder(const TensorType& from, const Layout& to) const {
  TensorType target = from;
  target.layout = to;
  try {
    return std::make_unique<DnnlReorder>(desc_of(from), desc_of(target));
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
