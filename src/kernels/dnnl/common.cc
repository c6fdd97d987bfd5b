#include "kernels/dnnl/common.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "anvil/cpu.h"
#include "kernels/weight_cache.h"

namespace anvil {
void apply_max_isa();  // isa.cc
}

namespace anvil::kernels::dnnl_util {

dnnl::engine& engine() {
  static dnnl::engine e = [] {
    apply_max_isa();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

dnnl::memory::data_type data_type(DType dtype) {
  using dt = dnnl::memory::data_type;
  switch (dtype) {
    case DType::kFloat32: return dt::f32;
    case DType::kBFloat16: return dt::bf16;
    case DType::kFloat16: return dt::f16;
    case DType::kInt8: return dt::s8;
    case DType::kUInt8: return dt::u8;
    case DType::kInt32: return dt::s32;
    default: return dt::undef;
  }
}

dnnl::memory::dims dims(const Shape& shape) { return dnnl::memory::dims(shape.begin(), shape.end()); }

dnnl::memory::dims dims_minus(const std::vector<int64_t>& values, int64_t minus) {
  dnnl::memory::dims d;
  for (int64_t v : values) d.push_back(v - minus);
  return d;
}

dnnl::memory::desc plain_desc(const Shape& shape, DType dtype) {
  Shape s = shape.empty() ? Shape{1} : shape;
  dnnl::memory::dims strides(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    strides[i] = acc;
    acc *= s[i];
  }
  return dnnl::memory::desc(dims(s), data_type(dtype), strides);
}

dnnl::memory wrap(const dnnl::memory::desc& desc, const void* data) {
  return dnnl::memory(desc, engine(), const_cast<void*>(data));
}

std::string impl_name(const dnnl::primitive_desc_base& pd) { return std::string("dnnl:") + pd.impl_info_str(); }

bool append_activation(dnnl::post_ops& ops, const std::string& act, float alpha, float beta) {
  using alg = dnnl::algorithm;
  if (act.empty()) return true;
  if (act == "Relu") ops.append_eltwise(1.f, alg::eltwise_relu, 0.f, 0.f);
  else if (act == "LeakyRelu") ops.append_eltwise(1.f, alg::eltwise_relu, alpha, 0.f);
  else if (act == "Elu") ops.append_eltwise(1.f, alg::eltwise_elu, alpha, 0.f);
  else if (act == "Clip" && alpha <= beta) ops.append_eltwise(1.f, alg::eltwise_clip_v2, alpha, beta);
  else if (act == "Sigmoid") ops.append_eltwise(1.f, alg::eltwise_logistic, 0.f, 0.f);
  else if (act == "Tanh") ops.append_eltwise(1.f, alg::eltwise_tanh, 0.f, 0.f);
  else if (act == "HardSwish") ops.append_eltwise(1.f, alg::eltwise_hardswish, 0.f, 0.f);
  else if (act == "Gelu") ops.append_eltwise(1.f, alg::eltwise_gelu_erf, 0.f, 0.f);
  else if (act == "GeluTanh") ops.append_eltwise(1.f, alg::eltwise_gelu_tanh, 0.f, 0.f);
  else if (act == "Swish") ops.append_eltwise(1.f, alg::eltwise_swish, alpha, 0.f);  // x * sigmoid(alpha x)
  else if (act == "HardSigmoid") {
    ops.append_eltwise(1.f, alg::eltwise_linear, alpha, beta);
    ops.append_eltwise(1.f, alg::eltwise_clip, 0.f, 1.f);
  } else {
    return false;
  }
  return true;
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

PackedWeights pack(const dnnl::memory::desc& from, const void* data, const dnnl::memory::desc& to) {
  PackedWeights w;
  w.storage = Tensor(DType::kUInt8, {static_cast<int64_t>(to.get_size())});
  w.memory = dnnl::memory(to, engine(), w.storage.raw());
  dnnl::memory src = wrap(from, data);
  dnnl::reorder(src, w.memory).execute(stream(), src, w.memory);
  stream().wait();
  return w;
}

namespace {

// What one slab of a consuming pack reads: enough for the reorder to run at
// speed, little against the weights that are worth packing this way.
constexpr size_t kSlabBytes = size_t{32} << 20;

// The axis a pack can walk `from` along in slabs: its outermost (largest
// stride) when `from` is plain and dense from offset 0 and `to` has no
// padding; -1 otherwise. `step`: `to`'s block along it, which each slab's
// start must be a multiple of.
int slab_axis(const dnnl::memory::desc& from, const dnnl::memory::desc& to, int64_t* step) {
  const dnnl_memory_desc_t &f = from.data, &t = to.data;
  if (f.format_kind != dnnl_blocked || t.format_kind != dnnl_blocked || f.format_desc.blocking.inner_nblks != 0 ||
      f.offset0 != 0 || t.offset0 != 0 || f.ndims != t.ndims || f.ndims < 1)
    return -1;
  for (int i = 0; i < t.ndims; ++i)
    if (t.padded_dims[i] != t.dims[i] || f.padded_dims[i] != f.dims[i]) return -1;
  int axis = 0;
  for (int i = 1; i < f.ndims; ++i)
    if (f.format_desc.blocking.strides[i] > f.format_desc.blocking.strides[axis]) axis = i;
  const size_t element = dnnl_data_type_size(f.data_type);
  if (static_cast<size_t>(f.format_desc.blocking.strides[axis] * f.dims[axis]) * element != from.get_size()) return -1;
  *step = 1;
  const auto& blocking = t.format_desc.blocking;
  for (int b = 0; b < blocking.inner_nblks; ++b)
    if (blocking.inner_idxs[b] == axis) *step *= blocking.inner_blks[b];
  return axis;
}

}  // namespace

std::optional<Tensor> pack_in_slabs(const dnnl::memory::desc& from, const void* data, const dnnl::memory::desc& to,
                                    const std::function<void(size_t)>& consumed, size_t slab_bytes) {
  int64_t step = 1;
  const int axis = slab_axis(from, to, &step);
  if (axis < 0) return std::nullopt;
  const int64_t length = from.data.dims[axis];
  const size_t slab_stride = from.get_size() / static_cast<size_t>(length);  // bytes per index of the axis
  const int64_t rows = std::max<int64_t>(step, static_cast<int64_t>(slab_bytes / slab_stride) / step * step);
  if (rows >= length) return std::nullopt;
  // Not zeroed, which would make the whole copy resident at once: the slabs write every byte.
  Tensor packed = Tensor::uninitialized(DType::kUInt8, {static_cast<int64_t>(to.get_size())});
  struct Slab {
    dnnl::memory src, dst;
    dnnl::reorder reorder;
    size_t end;  // source bytes read through this slab
  };
  std::vector<Slab> slabs;
  try {
    for (int64_t r = 0; r < length; r += rows) {
      dnnl::memory::dims sizes = from.dims(), offsets(sizes.size(), 0);
      sizes[static_cast<size_t>(axis)] = std::min(rows, length - r);
      offsets[static_cast<size_t>(axis)] = r;
      dnnl::memory src = wrap(from.submemory_desc(sizes, offsets), data);
      dnnl::memory out(to.submemory_desc(sizes, offsets), engine(), packed.raw());
      dnnl::reorder reorder(src, out);
      slabs.push_back({src, out, reorder, static_cast<size_t>(r + sizes[static_cast<size_t>(axis)]) * slab_stride});
    }
  } catch (const dnnl::error&) {
    return std::nullopt;  // a layout oneDNN cannot view in parts
  }
  for (Slab& slab : slabs) {
    slab.reorder.execute(stream(), slab.src, slab.dst);
    stream().wait();
    consumed(slab.end);
  }
  return packed;
}

PackedWeights pack_shared(const PrepareContext& ctx, const Tensor& source, const dnnl::memory::desc& from,
                          const dnnl::memory::desc& to) {
  WeightCache* cache = ctx.weight_cache();
  if (!cache) return pack(from, source.raw(), to);
  // Both descriptors are plain structs that oneDNN zero-fills: their bytes are the layout's identity.
  std::string key(reinterpret_cast<const char*>(&from.data), sizeof(from.data));
  key.append(reinterpret_cast<const char*>(&to.data), sizeof(to.data));
  PackedWeights w;
  // oneDNN reorders only blocked layouts back: Winograd's transformed weights
  // have no unpack, so their source is kept (WeightCache::release).
  WeightCache::Unpack unpack;
  if (to.data.format_kind == dnnl_blocked)
    unpack = [from, to](const Tensor& packed, void* dst) {
      dnnl::memory in(to, engine(), const_cast<void*>(packed.raw()));
      dnnl::memory out = wrap(from, dst);
      dnnl::reorder(in, out).execute(stream(), in, out);
      stream().wait();
    };
  w.storage = cache->get_consuming(
      source, key,
      [&](const WeightCache::Consumed& consumed) {
        if (consumed)
          if (std::optional<Tensor> packed = pack_in_slabs(from, source.raw(), to, consumed, kSlabBytes)) return *packed;
        return pack(from, source.raw(), to).storage;
      },
      std::move(unpack));
  w.memory = dnnl::memory(to, engine(), w.storage.raw());
  return w;
}

std::string layout_name(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked) return "any";
  const auto& b = d.format_desc.blocking;
  std::vector<int> order(static_cast<size_t>(d.ndims));
  for (int i = 0; i < d.ndims; ++i) order[static_cast<size_t>(i)] = i;
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return b.strides[x] > b.strides[y]; });
  std::vector<bool> blocked(static_cast<size_t>(d.ndims), false);
  for (int k = 0; k < b.inner_nblks; ++k) blocked[static_cast<size_t>(b.inner_idxs[k])] = true;
  std::string name;
  for (int i : order) name += static_cast<char>((blocked[static_cast<size_t>(i)] ? 'A' : 'a') + i);
  for (int k = 0; k < b.inner_nblks; ++k)
    name += std::to_string(b.inner_blks[k]) + static_cast<char>('a' + b.inner_idxs[k]);
  return name;
}

std::string Staging::layout() const { return staged_ ? layout_name(inner_) + " (staged)" : "plain"; }

namespace {

// A reorder that keeps no scratchpad of its own where it needs none (the
// float layouts staged here), so that one primitive runs from any thread;
// oneDNN's library-managed scratchpad otherwise.
dnnl::reorder staging_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  dnnl::reorder::primitive_desc pd(engine(), from, engine(), to, user_scratchpad_attr());
  if (pd.scratchpad_desc().get_size() == 0) return dnnl::reorder(pd);
  return dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), to));
}

}  // namespace

size_t Staging::init(const dnnl::memory::desc& plain, const dnnl::memory::desc& inner, size_t offset) {
  plain_ = plain;
  inner_ = inner;
  staged_ = inner != plain;
  offset_ = (offset + 63) / 64 * 64;
  if (!staged_) return offset;
  to_inner_ = staging_reorder(plain_, inner_);
  to_plain_ = staging_reorder(inner_, plain_);
  return offset_ + inner_.get_size();
}

dnnl::memory Staging::input(const void* data, void* scratch) const {
  dnnl::memory src = wrap(plain_, data);
  if (!staged_) return src;
  dnnl::memory staged = wrap(inner_, static_cast<char*>(scratch) + offset_);
  to_inner_.execute(stream(), src, staged);
  return staged;
}

dnnl::memory Staging::output(void* data, void* scratch) const {
  return staged_ ? wrap(inner_, static_cast<char*>(scratch) + offset_) : wrap(plain_, data);
}

void Staging::load(const void* data, const dnnl::memory& target) const {
  dnnl::memory src = wrap(plain_, data);
  dnnl::memory dst = target;
  to_inner_.execute(stream(), src, dst);
}

void Staging::finish(const dnnl::memory& written, void* data) const {
  if (!staged_) return;
  dnnl::memory src = written;
  dnnl::memory dst = wrap(plain_, data);
  to_plain_.execute(stream(), src, dst);
}

dnnl::memory::desc blocked_desc(const Shape& shape) {
  using tag = dnnl::memory::format_tag;
  (void)engine();  // ANVIL_MAX_ISA is applied before oneDNN is first asked its ISA (which fixes it)
  bool wide = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core;
  tag t = shape.size() == 4 ? (wide ? tag::nChw16c : tag::nChw8c) : (wide ? tag::nCdhw16c : tag::nCdhw8c);
  return dnnl::memory::desc(dims(shape), dnnl::memory::data_type::f32, t);
}

int64_t channel_block(const Shape& shape) { return blocked_desc(shape).data.format_desc.blocking.inner_blks[0]; }

bool blocked_layouts_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("ANVIL_CONV_LAYOUT");
    return !(v && std::string(v) == "plain");
  }();
  return allowed;
}

bool fills_channel_blocks(const Shape& x, int64_t out_channels, int64_t group, bool outputs_only) {
  if (x.size() != 4 || group != 1 || !blocked_layouts_allowed()) return false;
  const int64_t block = channel_block(x);
  return (outputs_only || x[1] % block == 0) && out_channels % block == 0;
}

void PrimitiveKernel::execute(std::unordered_map<int, dnnl::memory>& args, void* scratch) const {
  if (scratchpad_md_.get_size()) args[DNNL_ARG_SCRATCHPAD] = wrap(scratchpad_md_, scratch);
  primitive_.execute(stream(), args);
  stream().wait();
}

size_t streaming_weight_bytes() { return std::min<size_t>(cpu_info().l3_bytes, size_t{32} << 20); }

namespace {
bool weights_pass(const PrepareContext& ctx, size_t threshold) {
  const WeightCache* weights = ctx.weight_cache();
  return weights && threshold > 0 && weights->model_weight_bytes() > threshold;
}
}  // namespace

bool weights_stream(const PrepareContext& ctx) { return weights_pass(ctx, streaming_weight_bytes()); }

size_t few_rows_streaming_weight_bytes() { return streaming_weight_bytes() / 2; }

bool weights_stream_past_few_rows(const PrepareContext& ctx) {
  return weights_pass(ctx, few_rows_streaming_weight_bytes());
}

std::optional<PixelLayout> spatial_pixel_layout(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked || d.ndims < 3 || d.ndims > 5 || d.offset0 != 0) return std::nullopt;
  for (int i = 0; i < d.ndims; ++i)
    if (d.padded_dims[i] != d.dims[i] || d.padded_offsets[i] != 0) return std::nullopt;
  const auto& b = d.format_desc.blocking;
  const dnnl_dim_t* s = b.strides;
  const int last = d.ndims - 1;
  const int64_t n = d.dims[0], c = d.dims[1];
  // Whether the spatial dims lie row-major, `inner` floats from one pixel to the next.
  const auto pixels_row_major = [&](int64_t inner) {
    int64_t stride = inner;
    for (int i = last; i >= 2; --i) {
      if (s[i] != stride) return false;
      stride *= d.dims[i];
    }
    return true;
  };
  int64_t pixels = 1;
  for (int i = 2; i <= last; ++i) pixels *= d.dims[i];
  if (b.inner_nblks == 1 && b.inner_idxs[0] == 1 && c % b.inner_blks[0] == 0) {  // nCw8c, nChw16c, ...
    const int64_t blk = b.inner_blks[0], plane = pixels * blk;
    if (pixels_row_major(blk) && s[1] == plane && (n == 1 || s[0] == c / blk * plane))
      return PixelLayout{blk, blk, n * (c / blk), plane};
  } else if (b.inner_nblks == 0 && s[1] == 1 && pixels_row_major(c) && (n == 1 || s[0] == pixels * c)) {
    return PixelLayout{c, c, n, pixels * c};  // NWC, NHWC, NDHWC
  }
  return std::nullopt;
}

std::optional<PixelLayout> pixel_layout(const dnnl::memory::desc& md) {
  return md.data.ndims == 4 ? spatial_pixel_layout(md) : std::nullopt;
}

}  // namespace anvil::kernels::dnnl_util
