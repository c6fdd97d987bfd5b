// Dropout. In inference (the default, and every version before 12) the output
// is the input and the mask all true. From opset 12, training_mode=true drops
// each element with probability `ratio` and scales the kept ones by
// 1 / (1 - ratio); the mask says which were kept (draws: kernels/ref/random.h).
#include <cstring>

#include "kernels/ref/common.h"
#include "kernels/ref/random.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

class DropoutKernel : public Kernel {
 public:
  explicit DropoutKernel(const ir::Node& node)
      : seeds_(node.attrs.has("seed") ? std::optional<uint64_t>(node.attrs.get_int("seed", 0)) : std::nullopt) {}

  int output_aliases_input() const override { return training_ ? -1 : 0; }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    training_ = false;
    if (ctx.opset() >= 12 && ctx.has_input(2)) {
      const Tensor& mode = ctx.require_constant(2, "training_mode");
      ANVIL_PREPARE_CHECK(ctx, mode.dtype() == DType::kBool && mode.numel() == 1, ErrorKind::kInvalidArgument,
                          "training_mode must be one bool");
      training_ = *mode.data<bool>();
    }
    if (training_) {
      ratio_ = 0.5;
      if (ctx.has_input(1)) {
        const Tensor& r = ctx.require_constant(1, "ratio");
        ANVIL_PREPARE_CHECK(ctx, r.numel() == 1, ErrorKind::kInvalidArgument, "ratio must be a scalar");
        ratio_ = dispatch_dtype(r.dtype(), [&](auto tag) -> double {
          using T = typename decltype(tag)::type;
          if constexpr (std::is_class_v<T>) return static_cast<double>(static_cast<float>(r.data<T>()[0]));
          else return static_cast<double>(r.data<T>()[0]);
        });
      }
      ANVIL_PREPARE_CHECK(ctx, ratio_ >= 0 && ratio_ < 1, ErrorKind::kInvalidArgument, "ratio {} is not in [0, 1)",
                          ratio_);
    }
    return ctx.output_types();  // the mask is bool, or like the data before opset 10
  }

  void run(const RunContext& ctx) const override {
    Tensor* mask = ctx.outputs.size() > 1 ? ctx.outputs[1] : nullptr;
    if (!training_ || ratio_ == 0) {
      copy_if_distinct(ctx, 0);
      if (mask) set_all_true(*mask);
      return;
    }
    std::mt19937_64 rng = seeds_.next();
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    const Tensor& x = ctx.in(0);
    const double scale = 1.0 / (1.0 - ratio_);
    dispatch_dtype(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T> || std::is_class_v<T>) {
        const T* in = x.data<T>();
        T* out = ctx.out(0).data<T>();
        for (int64_t i = 0; i < x.numel(); ++i) {
          const bool keep = uniform(rng) >= ratio_;
          out[i] = keep ? T(static_cast<float>(static_cast<double>(static_cast<float>(in[i])) * scale)) : T(0.f);
          if (mask) set_one(*mask, i, keep);
        }
      }
    });
  }

 private:
  static void set_one(Tensor& mask, int64_t i, bool value) {
    dispatch_dtype(mask.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_class_v<T>) mask.data<T>()[i] = T(value ? 1.f : 0.f);
      else mask.data<T>()[i] = static_cast<T>(value);
    });
  }

  static void set_all_true(Tensor& mask) {
    for (int64_t i = 0; i < mask.numel(); ++i) set_one(mask, i, true);
  }

  RunSeeds seeds_;
  bool training_ = false;
  double ratio_ = 0.5;
};

}  // namespace

ANVIL_REGISTER_KERNEL_CLASS("Dropout", kRef, DropoutKernel);

}  // namespace anvil::kernels
