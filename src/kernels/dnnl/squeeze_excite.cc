// anvil.SqueezeExcite (passes/fuse_squeeze_excite.cc): a squeeze-and-
// excitation block's channel gates, S = gate(W2 act(W1 mean(X) + B1) + B2),
// in one step. Unfused, the block's GlobalAveragePool and two 1x1
// convolutions on a 1x1 plane are three oneDNN calls of 7-18 us each at
// batch 1 (0.7 ms of EfficientNet-B0's 6, its 16 blocks). Fused, a block
// takes what reading its weights from memory takes (the largest, 442 KB,
// 25-30 us of its 32-38; with them in L2, 12 us).
//
// X is read in the layout it arrives in (the channel blocks or NHWC of the
// convolutions around it, or plain); the means are summed a vector of
// channels at a time (vec sum_columns, reduce_rows), and the two products
// of one row each run on vec dot_rows and add_scaled_rows (the GEMM's
// micro-kernel, one row tall, waited on each FMA's latency: 2-3 us a block),
// with bias and activation in the GEMM's epilogue. S is plain [N, C, 1, 1].
#include <algorithm>
#include <optional>
#include <string>

#include "kernels/dnnl/common.h"
#include "kernels/registry.h"
#include "kernels/vec/gemm.h"
#include "kernels/weight_cache.h"

namespace anvil::kernels {

namespace {

namespace du = dnnl_util;

constexpr int64_t kParallelFloats = 1 << 16;  // smaller planes are summed on one thread
constexpr int64_t kNhwcGroup = 64;            // NHWC's channels summed per work item
constexpr size_t kParallelWeightBytes = size_t{1} << 62;  // smaller products run on one thread

class SqueezeExcite : public Kernel {
 public:
  explicit SqueezeExcite(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    for (size_t i : {size_t{0}, size_t{1}, size_t{3}})  // what the schema checked, where it could type them
      ANVIL_PREPARE_CHECK(ctx, !ctx.input_type(i).sequence && ctx.input_shape(i).size() == 4, ErrorKind::kInvalidModel,
                          "input {} is not a 4-D tensor", i);
    const Shape& x = ctx.input_shape(0);
    for (size_t i = 1; i < 5; ++i)  // the biases (2 and 4) may be absent
      ANVIL_PREPARE_CHECK(ctx, ctx.constant(i) || (i % 2 == 0 && !ctx.has_input(i)), ErrorKind::kUnsupported,
                          "input {} is known only at run time: the reference kernel", i);
    act_ = epilogue(ctx, "activation");
    gate_ = epilogue(ctx, "gate");
    batch_ = x[0];
    channels_ = x[1];
    reduced_ = ctx.input_shape(1)[0];
    plane_ = x[2] * x[3];
    if (ctx.has_input(2)) bias1_ = *ctx.constant(2);
    if (ctx.has_input(4)) bias2_ = *ctx.constant(4);
    w1_ = *ctx.constant(1);  // [R, C]: its rows dot the means
    w2t_ = transposed(ctx, *ctx.constant(3), channels_, reduced_);
    if (const Layout in = du::readable_layout(ctx, 0, x)) {
      if (const std::optional<du::PixelLayout> px = du::pixel_layout(du::desc_of({DType::kFloat32, x, in}))) {
        layout_ = in;
        pixels_ = px;
      }
    }
    return {ctx.output_type(0)};
  }

  // The means [N, C], then the reduced activations [N, R].
  size_t scratch_bytes() const override { return static_cast<size_t>(batch_ * (channels_ + reduced_)) * sizeof(float); }
  bool reads_input_packed_only(size_t i) const override { return i == 3; }  // its transposed copy
  Layout input_layout(size_t i) const override { return i == 0 ? layout_ : nullptr; }
  std::string layout_name() const override { return kernels::layout_name(layout_); }
  std::string impl_name() const override { return std::string(vec::vec_impl_name()) + ":squeeze_excite"; }

  void run(const RunContext& ctx) const override {
    if (batch_ == 0 || channels_ == 0) return;
    auto* means = static_cast<float*>(ctx.scratch);
    float* reduced = means + batch_ * channels_;
    channel_means(ctx.in(0).data<float>(), means);
    product(means, channels_, reduced_, w1_, false, bias1_, act_, reduced);
    product(reduced, reduced_, channels_, w2t_, true, bias2_, gate_, ctx.out(0).data<float>());
  }

 private:
  static vec::GemmEpilogue epilogue(const PrepareContext& ctx, const std::string& attr) {
    const std::string name = ctx.attrs().get_string(attr, "");
    const std::optional<vec::GemmActivation> a = vec::gemm_activation(name);
    ANVIL_PREPARE_CHECK(ctx, a.has_value(), ErrorKind::kUnsupported, "{} '{}': the reference kernel", attr, name);
    vec::GemmEpilogue e;
    e.activation = *a;
    e.alpha = ctx.attrs().get_float(attr + "_alpha", 0.f);
    e.beta = ctx.attrs().get_float(attr + "_beta", 0.f);
    return e;
  }

  // W2 [C, R] as [R, C], whose rows the expansion scales by the reduced
  // activations; shared through the session's weight cache, which can then
  // drop the original.
  static Tensor transposed(const PrepareContext& ctx, const Tensor& w, int64_t rows, int64_t cols) {
    // to [cols, rows] from [rows, cols]
    auto transpose = [](const float* from, int64_t r, int64_t c, float* to) {
      vec::vec_kernels().transpose32(reinterpret_cast<const uint32_t*>(from), c, reinterpret_cast<uint32_t*>(to), r, r, c);
    };
    auto make = [&] {
      Tensor t(DType::kFloat32, {cols, rows});
      transpose(w.data<float>(), rows, cols, t.data<float>());
      return t;
    };
    WeightCache* cache = ctx.weight_cache();
    if (!cache) return make();
    auto unpack = [transpose, rows, cols](const Tensor& t, void* dst) {
      transpose(t.data<float>(), cols, rows, static_cast<float*>(dst));
    };
    return cache->get(w, "transposed:" + std::to_string(rows) + "x" + std::to_string(cols), make, unpack);
  }

  // out [N, n] = epilogue(a [N, k] w' + bias) for w [n, k] (dot products
  // with its rows) or, transposed, w [k, n] (its rows scaled and added). On
  // one thread: the weights come from memory (a model's SE weights outgrow
  // the L2 across a run), and a second thread read them no faster.
  void product(const float* a, int64_t k, int64_t n, const Tensor& w, bool transposed, const Tensor& bias,
               const vec::GemmEpilogue& e, float* out) const {
    const vec::VecKernels& v = vec::vec_kernels();
    for (int64_t i = 0; i < batch_; ++i) {
      float* row = out + i * n;
      if (transposed) {
        std::fill(row, row + n, 0.f);
        v.add_scaled_rows(w.data<float>(), n, a + i * k, k, n, row);
      } else {
        v.dot_rows(w.data<float>(), a + i * k, n, k, row);
      }
    }
    v.gemm.epilogue(out, n, batch_, n, bias.empty() ? nullptr : bias.data<float>(), nullptr, e);
  }

  // means[n * C + c] = the mean of image n's channel c.
  void channel_means(const float* x, float* means) const {
    const vec::VecKernels& v = vec::vec_kernels();
    const bool parallel = batch_ * channels_ * plane_ >= kParallelFloats;
    if (!pixels_) {  // plain: a plane per (image, channel)
      const int64_t planes = batch_ * channels_;
#pragma omp parallel for schedule(static) if (parallel)
      for (int64_t p = 0; p < planes; ++p) v.reduce_rows(vec::Reduction::kMean, x + p * plane_, 1, plane_, means + p);
      return;
    }
    // Pixels of px.channels floats (a channel block, or all of NHWC's),
    // summed in groups of at most kNhwcGroup channels per work item.
    const du::PixelLayout& px = *pixels_;
    const int64_t group = std::min(px.channels, kNhwcGroup), groups = px.channels / group + (px.channels % group != 0);
    const int64_t items = px.planes * groups, blocks = channels_ / px.channels;
    const double inv = 1.0 / static_cast<double>(plane_);
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t p = item / groups, first = item % groups * group, width = std::min(group, px.channels - first);
      double acc[kNhwcGroup] = {};
      v.sum_columns(vec::Reduction::kSum, x + p * px.plane + first, plane_, px.pixel, width, nullptr, acc);
      float* m = means + (p / blocks) * channels_ + p % blocks * px.channels + first;
      for (int64_t j = 0; j < width; ++j) m[j] = static_cast<float>(acc[j] * inv);
    }
  }

  vec::GemmEpilogue act_, gate_;
  int64_t batch_ = 0, channels_ = 0, reduced_ = 0, plane_ = 0;
  Tensor w1_, w2t_;       // W1 [R, C] as given, W2 transposed to [R, C]
  Tensor bias1_, bias2_;  // as given (or none)
  Layout layout_;                   // X's, kept; null: plain
  std::optional<du::PixelLayout> pixels_;
};

}  // namespace

static Registrar squeeze_excite("SqueezeExcite", Backend::kDnnl, factory_of<SqueezeExcite>(), "anvil",
                                {{kFloat32Only}});

}  // namespace anvil::kernels
