// Random generators: RandomNormal, RandomUniform (shape and dtype from
// attributes), RandomNormalLike, RandomUniformLike (the input's shape, its
// dtype unless `dtype` says otherwise) and Bernoulli (1 with the input's
// probability). Never folded into constants (ir::is_random_op); each run
// draws anew (kernels/ref/random.h).
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

KernelFactory random_factory(Draw d) {
  return [d](const ir::Node& n) -> std::unique_ptr<Kernel> { return std::make_unique<RandomKernel>(n, d); };
}

}  // namespace

ANVIL_REGISTER_KERNEL("RandomNormal", kRef, random_factory(Draw::kNormal));
ANVIL_REGISTER_KERNEL("RandomUniform", kRef, random_factory(Draw::kUniform));
ANVIL_REGISTER_KERNEL("RandomNormalLike", kRef, random_factory(Draw::kNormal));
ANVIL_REGISTER_KERNEL("RandomUniformLike", kRef, random_factory(Draw::kUniform));
ANVIL_REGISTER_OP_VERSIONS("Bernoulli", 15, 21);
ANVIL_REGISTER_KERNEL_TYPED("Bernoulli", kRef, random_factory(Draw::kBernoulli), {kFloats});

}  // namespace anvil::kernels
