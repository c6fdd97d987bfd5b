// Random generators: RandomNormal, RandomUniform (shape and dtype from
// attributes), RandomNormalLike, RandomUniformLike (the input's shape, its
// dtype unless `dtype` says otherwise) and Bernoulli (1 with the input's
// probability). Never folded into constants (ir::is_random_op); each run
// draws anew (kernels/ref/random.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "kernels/ref/common.h"
#include "kernels/ref/random.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

enum class Draw { kNormal, kUniform, kBernoulli };

// The float `seed` attribute's bits (any float, NaN included, seeds deterministically).
std::optional<uint64_t> seed_of(const ir::Node& node) {
  if (!node.attrs.has("seed")) return std::nullopt;
  const float seed = node.attrs.get_float("seed", 0.f);
  uint32_t bits;
  std::memcpy(&bits, &seed, sizeof bits);
  return bits;
}

class RandomKernel : public Kernel {
 public:
  RandomKernel(const ir::Node& node, Draw draw)
      : draw_(draw),
        seeds_(seed_of(node)),
        a_(node.attrs.get_float(draw == Draw::kNormal ? "mean" : "low", 0.f)),
        b_(node.attrs.get_float(draw == Draw::kNormal ? "scale" : "high", 1.f)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    std::vector<TensorType> out = ctx.output_types();
    ANVIL_PREPARE_CHECK(ctx, dtype_in(out[0].dtype, kFloats | kHalfs) || draw_ == Draw::kBernoulli,
                        ErrorKind::kInvalidModel, "dtype {} is not a floating-point type", dtype_name(out[0].dtype));
    ANVIL_PREPARE_CHECK(ctx, std::isfinite(a_) && std::isfinite(b_) && (draw_ == Draw::kNormal ? b_ >= 0 : a_ <= b_),
                        ErrorKind::kInvalidModel, "{} must be finite with {}", draw_ == Draw::kNormal ? "mean and scale" : "low and high",
                        draw_ == Draw::kNormal ? "scale >= 0" : "low <= high");
    return out;
  }

  void run(const RunContext& ctx) const override {
    std::mt19937_64 rng = seeds_.next();
    Tensor& y = ctx.out(0);
    const Tensor* p = draw_ == Draw::kBernoulli ? &ctx.in(0) : nullptr;
    std::normal_distribution<double> normal(a_, b_);
    std::uniform_real_distribution<double> uniform(draw_ == Draw::kBernoulli ? 0.0 : a_, draw_ == Draw::kBernoulli ? 1.0 : b_);
    dispatch_dtype(y.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* out = y.data<T>();
      for (int64_t i = 0; i < y.numel(); ++i) {
        double v;
        if (draw_ == Draw::kNormal) v = normal(rng);
        else if (draw_ == Draw::kUniform) v = uniform(rng);
        else v = uniform(rng) < probability(*p, i) ? 1.0 : 0.0;
        if constexpr (std::is_class_v<T>) out[i] = T(static_cast<float>(v));
        else out[i] = static_cast<T>(v);
      }
    });
  }

 private:
  static double probability(const Tensor& t, int64_t i) {
    return t.dtype() == DType::kFloat64 ? t.data<double>()[i] : static_cast<double>(t.data<float>()[i]);
  }

  Draw draw_;
  RunSeeds seeds_;
  double a_, b_;
};

// Multinomial: sample_size draws per row of [batch, classes] unnormalized
// log-probabilities (softmax), by inverting the cumulative distribution.
class MultinomialKernel : public Kernel {
 public:
  explicit MultinomialKernel(const ir::Node& node)
      : seeds_(seed_of(node)), samples_(node.attrs.get_int("sample_size", 1)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);
    ANVIL_PREPARE_CHECK(ctx, x.size() == 2 && x[1] >= 1, ErrorKind::kInvalidArgument,
                        "the input {} must be [batch, classes] with classes >= 1", shape_str(x));
    return ctx.output_types();  // the schema checked sample_size and dtype
  }

  void run(const RunContext& ctx) const override {
    std::mt19937_64 rng = seeds_.next();
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    const Tensor& x = ctx.in(0);
    const int64_t batch = x.shape()[0], classes = x.shape()[1];
    std::vector<double> cdf(static_cast<size_t>(classes));
    Tensor& y = ctx.out(0);
    for (int64_t b = 0; b < batch; ++b) {
      double top = -INFINITY;
      for (int64_t c = 0; c < classes; ++c) top = std::max(top, element_as_double(x, b * classes + c));
      double sum = 0;
      for (int64_t c = 0; c < classes; ++c) {
        const double logit = element_as_double(x, b * classes + c);
        sum += std::isfinite(top) ? std::exp(logit - top) : 0.0;
        cdf[static_cast<size_t>(c)] = sum;
      }
      ANVIL_CHECK(sum > 0 && std::isfinite(sum), ErrorKind::kInvalidArgument,
                  "Multinomial: row {} has no finite log-probability to sample from", b);
      for (int64_t s = 0; s < samples_; ++s) {
        const double u = uniform(rng) * sum;
        const auto pick = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
        const int64_t k = std::min<int64_t>(pick, classes - 1);
        if (y.dtype() == DType::kInt32) y.data<int32_t>()[b * samples_ + s] = static_cast<int32_t>(k);
        else y.data<int64_t>()[b * samples_ + s] = k;
      }
    }
  }

 private:
  RunSeeds seeds_;
  int64_t samples_;
};

KernelFactory random_factory(Draw d) {
  return [d](const ir::Node& n) -> std::unique_ptr<Kernel> { return std::make_unique<RandomKernel>(n, d); };
}

}  // namespace

ANVIL_REGISTER_KERNEL("RandomNormal", kRef, random_factory(Draw::kNormal));
ANVIL_REGISTER_KERNEL("RandomUniform", kRef, random_factory(Draw::kUniform));
ANVIL_REGISTER_KERNEL("RandomNormalLike", kRef, random_factory(Draw::kNormal));
ANVIL_REGISTER_KERNEL("RandomUniformLike", kRef, random_factory(Draw::kUniform));
ANVIL_REGISTER_OP_VERSIONS("Multinomial", 7, 22);  // 22 adds element types
ANVIL_REGISTER_KERNEL_CLASS_TYPED("Multinomial", kRef, MultinomialKernel, {kFloats | kHalfs});
ANVIL_REGISTER_OP_VERSIONS("Bernoulli", 15, 21);
ANVIL_REGISTER_KERNEL_TYPED("Bernoulli", kRef, random_factory(Draw::kBernoulli), {kFloats});

}  // namespace anvil::kernels
