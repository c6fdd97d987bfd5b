// Shared plumbing of the oneDNN kernels: the engine, per-thread streams,
// memory descriptors for plain tensors, post-op activations.
//
// The oneDNN kernels are thin wrappers: prepare() builds a primitive
// descriptor (weights in `any` layout, prepacked once when constant, user
// scratchpad so concurrent runs share nothing), run() wraps pointers in
// dnnl::memory and executes. A oneDNN error while preparing becomes
// kUnsupported, so the planner falls back to the reference kernel.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/kernel.h"

namespace anvil::kernels::dnnl_util {

dnnl::engine& engine();
// One stream per calling thread: concurrent runs never share a stream.
dnnl::stream& stream();

dnnl::memory::data_type data_type(DType dtype);  // undef for dtypes oneDNN lacks
dnnl::memory::dims dims(const Shape& shape);
// Each value less `minus` (ONNX dilations, 1 = dense, are oneDNN's 0).
dnnl::memory::dims dims_minus(const std::vector<int64_t>& values, int64_t minus);
dnnl::memory::desc plain_desc(const Shape& shape, DType dtype);
// Memory wrapping a tensor's bytes (no copy).
dnnl::memory wrap(const dnnl::memory::desc& desc, const void* data);

// "brg:avx2" etc., for plan listings.
std::string impl_name(const dnnl::primitive_desc_base& pd);

// Appends an ONNX activation (as the fusion pass names it) as eltwise post-ops;
// false when oneDNN has no equivalent (or refuses its parameters: a Clip whose
// min is above its max, or NaN).
bool append_activation(dnnl::post_ops& ops, const std::string& activation, float alpha, float beta);

// Primitive attributes with a user-managed scratchpad.
dnnl::primitive_attr user_scratchpad_attr();

// A constant tensor reordered once into the layout `desc` asks for. Owns its bytes.
struct PackedWeights {
  Tensor storage;
  dnnl::memory memory;
};
PackedWeights pack(const dnnl::memory::desc& from, const void* data, const dnnl::memory::desc& to);
// `data` (as `from`) reordered into a new tensor laid out as `to`, a slab of
// `from`'s outermost axis of about `slab_bytes` at a time, `consumed(end)`
// told after each slab how far through the source it has read (no slab
// reads before that again). Every reorder is made before the first runs.
// Nullopt, with nothing done, where the layouts do not split into two slabs
// or more (only a plain, dense `from` and an unpadded `to` do).
std::optional<Tensor> pack_in_slabs(const dnnl::memory::desc& from, const void* data, const dnnl::memory::desc& to,
                                    const std::function<void(size_t)>& consumed, size_t slab_bytes);
// Packs the constant `source` (laid out as `from`) through the session's weight
// cache, so every plan of the session shares one packed copy. Where the
// cache lets it consume the source (WeightCache::get_consuming), it packs in
// slabs of 32 MiB, the source's pages dropped slab by slab.
PackedWeights pack_shared(const PrepareContext& ctx, const Tensor& source, const dnnl::memory::desc& from,
                          const dnnl::memory::desc& to);

// An activation that the primitive wants in another layout than the plain one
// it has between nodes: staged in the kernel's scratch memory and reordered on
// the way in or out. (A layout pass that keeps whole regions blocked will make
// these reorders unnecessary.)
class Staging {
 public:
  // Reserves scratch from `offset` when `inner` differs from `plain`; returns the end offset.
  size_t init(const dnnl::memory::desc& plain, const dnnl::memory::desc& inner, size_t offset);
  bool staged() const { return staged_; }
  // "plain", or the inner layout followed by " (staged)".
  std::string layout() const;
  // The primitive's view of a plain input: reordered into scratch when staged.
  dnnl::memory input(const void* data, void* scratch) const;
  // Where the primitive writes an output (scratch when staged).
  dnnl::memory output(void* data, void* scratch) const;
  // Copies a plain tensor into the primitive's output layout (sum post-ops).
  void load(const void* data, const dnnl::memory& target) const;
  // Moves a staged output back into the plain tensor.
  void finish(const dnnl::memory& written, void* data) const;

 private:
  dnnl::memory::desc plain_, inner_;
  bool staged_ = false;
  size_t offset_ = 0;
  dnnl::reorder to_inner_, to_plain_;
};

// The activations of a primitive with one source and one destination: in a
// plan they stay in the primitive's own layouts (the planner reorders between
// neighbours that disagree); elsewhere they are staged from and to plain in
// the kernel's scratch memory.
struct ActivationLayouts {
  Staging src, dst;
  Layout src_layout, dst_layout;  // planned layouts (null: plain)
  bool planned = false;

  // `plain_*`: the plain descriptors, `src`/`dst`: the primitive's. Reserves
  // staging scratch from `offset`; returns its end.
  size_t init(const PrepareContext& ctx, const dnnl::memory::desc& plain_src, const dnnl::memory::desc& src,
              const dnnl::memory::desc& plain_dst, const dnnl::memory::desc& dst, size_t offset);
  // For plans and profiles: the layout the source is read in.
  std::string name() const { return planned ? kernels::layout_name(src_layout) : src.layout(); }
};

// oneDNN's generic name of a memory layout: "abcd" (plain NCHW), "aBcd8b"
// (nChw8c), "acdb" (NHWC).
std::string layout_name(const dnnl::memory::desc& md);

// A oneDNN memory format as a planned layout (kernels/kernel.h): null when
// `md` is the plain layout of (shape, dtype).
Layout layout_of(const dnnl::memory::desc& md, const Shape& shape, DType dtype);
// Null when `md` equals `plain`.
Layout layout_of(const dnnl::memory::desc& md, const dnnl::memory::desc& plain);
// The layout an element-wise kernel keeps for input i of `shape` (and its
// output): the one its producer wrote, where the plan allows layouts of the
// kernels' own both ways and that layout is oneDNN's, of that shape and
// without padding (a padded channel block would hold f(0) where it must
// hold zero). Null: plain. Keeping it saves the reorders to plain data and
// back around each such op between convolutions (docs/architecture.md).
Layout elementwise_layout(const PrepareContext& ctx, size_t i, const Shape& shape);
// The same for a kernel that only reads input i in its layout (its outputs plain).
Layout readable_layout(const PrepareContext& ctx, size_t i, const Shape& shape);

// A float32 memory format applied to a shape: NHWC (nhwc_desc) or the ISA's
// channel blocks (blocked_desc), the two that keep each pixel's channels
// together. Training's gradients keep the one the forward pass wrote.
using Format = dnnl::memory::desc (*)(const Shape&);
dnnl::memory::desc nhwc_desc(const Shape& shape);
// Which of the two `in`, the layout a float32 tensor of `shape` arrives in,
// is; null for any other (plain included).
Format format_of(const Layout& in, const Shape& shape);

// The bytes of product weights past which a model's weights come from
// memory on every run rather than from the last-level cache: the L3, at
// most 32 MiB, since the L3 is shared with other cores and tenants (on the
// 2-vCPU Xeon guests, whose L3 reads 260 MiB, ResNet-18's 45 MB of weights
// came from memory). 0 when the L3's size is unknown.
size_t streaming_weight_bytes();
// Whether the model's product weights (WeightCache::model_weight_bytes) pass
// streaming_weight_bytes(); false outside a session.
bool weights_stream(const PrepareContext& ctx);
// The same for products of few rows, whose choice of GEMM costs less when
// it is wrong: half of streaming_weight_bytes() (matmul.cc,
// streams_weights_faster).
size_t few_rows_streaming_weight_bytes();
bool weights_stream_past_few_rows(const PrepareContext& ctx);

// The oneDNN descriptor of a planned tensor type (plain when it has no layout).
dnnl::memory::desc desc_of(const TensorType& type);

// Picks the blocked activation layout of this ISA for rank-4/5 float tensors
// (nChw8c / nChw16c), for primitives that cannot choose one themselves (pooling).
dnnl::memory::desc blocked_desc(const Shape& shape);
// Channels per block of blocked_desc: 16 on AVX-512, 8 below.
int64_t channel_block(const Shape& shape);

// False when ANVIL_CONV_LAYOUT=plain keeps convolutions on NCHW kernels (no
// reorders; read once).
bool blocked_layouts_allowed();
// Whether a 2-D convolution of x (NCHW) into out_channels, one group, fills
// blocked_desc's channel blocks on both sides: where oneDNN's blocked
// kernels run it (a network's first convolution, on an image's 1-3
// channels, does not); with `outputs_only`, on the output's side alone.
bool fills_channel_blocks(const Shape& x, int64_t out_channels, int64_t group, bool outputs_only = false);

// How a 4-D tensor's pixels hold their channels: `channels` contiguous floats
// per pixel, pixels `pixel` floats apart, `planes` planes (batch x channel
// blocks) `plane` floats apart: nChw8c / nChw16c (a channel block per plane)
// and NHWC (all channels). Nullopt for other layouts (plain NCHW) and for
// padding (partial channel blocks).
struct PixelLayout {
  int64_t channels, pixel, planes, plane;
  bool operator==(const PixelLayout& o) const = default;
};
std::optional<PixelLayout> pixel_layout(const dnnl::memory::desc& md);
// The same for a float tensor of 1-3 spatial dims (rank 3-5), its spatial
// dims flattened into one run of pixels: NWC, NHWC and NDHWC, and the
// channel blocks of each. pixel_layout is its 4-D case.
std::optional<PixelLayout> spatial_pixel_layout(const dnnl::memory::desc& md);

// Where element (n, c, h, w) of a 4-D float tensor lies: in a pixel layout
// (NHWC, or channel blocks: PixelLayout) or plain NCHW.
struct PixelAddressing {
  int64_t block = 1;        // channels a pixel holds together (1: plain)
  int64_t blocks = 1;       // blocks per batch item
  int64_t plane = 0;        // floats from one block's plane to the next
  int64_t pixel = 1;        // floats from one pixel to the next
  int64_t width = 0;        // pixels a row

  static PixelAddressing of(const std::optional<PixelLayout>& layout, const Shape& shape) {
    PixelAddressing a;
    a.width = shape[3];
    if (layout) {
      a.block = layout->channels;
      a.blocks = shape[1] / layout->channels;
      a.plane = layout->plane;
      a.pixel = layout->pixel;
    } else {  // NCHW: a block of one channel per plane
      a.blocks = shape[1];
      a.plane = shape[2] * shape[3];
    }
    return a;
  }
  int64_t at(int64_t n, int64_t c, int64_t h, int64_t w) const {
    return (n * blocks + c / block) * plane + (h * width + w) * pixel + c % block;
  }
};

// Base of the kernels that run one oneDNN primitive: keeps the primitive, its
// scratchpad and its name; run() in the subclass only binds pointers.
class PrimitiveKernel : public Kernel {
 public:
  size_t scratch_bytes() const override { return scratchpad_md_.get_size(); }
  std::string impl_name() const override { return impl_; }

 protected:
  // Creates the primitive from `pd`; a dnnl::error becomes kUnsupported.
  template <typename Primitive, typename PrimitiveDesc>
  void create(const PrepareContext& ctx, const std::function<PrimitiveDesc()>& make_pd) {
    try {
      PrimitiveDesc pd = make_pd();
      primitive_ = Primitive(pd);
      scratchpad_md_ = pd.scratchpad_desc();
      impl_ = impl_name(pd);
    } catch (const dnnl::error& e) {
      ctx.fail(ErrorKind::kUnsupported, "oneDNN cannot run this case ({})", e.what());
    }
  }
  void execute(std::unordered_map<int, dnnl::memory>& args, void* scratch) const;

  dnnl::primitive primitive_;
  dnnl::memory::desc scratchpad_md_;
  std::string impl_;

 private:
  static std::string impl_name(const dnnl::primitive_desc_base& pd) { return dnnl_util::impl_name(pd); }
};

}  // namespace anvil::kernels::dnnl_util
