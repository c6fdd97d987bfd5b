// Reference anvil.SqueezeExcite (ir/schemas/nn.cc): per image n,
//   m[c] = the mean of X[n, c] over its plane (in double)
//   h[r] = act(sum_c W1[r, c] m[c] + B1[r])
//   S[n, c] = gate(sum_r W2[c, r] h[r] + B2[c])
// with the weights and biases read at run time, in any layout's plain form.
#include <vector>

#include "kernels/activation.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {
namespace {

class RefSqueezeExcite : public Kernel {
 public:
  explicit RefSqueezeExcite(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const ir::Attributes& a = ctx.attrs();
    act_ = {a.get_string("activation", ""), a.get_float("activation_alpha", 0.f), a.get_float("activation_beta", 0.f)};
    gate_ = {a.get_string("gate", ""), a.get_float("gate_alpha", 0.f), a.get_float("gate_beta", 0.f)};
    for (const FusedActivationSpec* f : {&act_, &gate_})
      ANVIL_PREPARE_CHECK(ctx, is_known_activation(f->name), ErrorKind::kInvalidModel, "unknown {} '{}'",
                          f == &act_ ? "activation" : "gate", f->name);
    // The schema checked the shapes; a value it could not type (a sequence) gets no further.
    for (size_t i : {size_t{0}, size_t{1}, size_t{3}})
      ANVIL_PREPARE_CHECK(ctx, !ctx.input_type(i).sequence && ctx.input_shape(i).size() == 4, ErrorKind::kInvalidModel,
                          "input {} is not a 4-D tensor", i);
    const Shape& x = ctx.input_shape(0);
    channels_ = x[1];
    reduced_ = ctx.input_shape(1)[0];
    return {ctx.output_type(0)};
  }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const int64_t batch = x.dim(0), plane = x.dim(2) * x.dim(3);
    const float* w1 = ctx.in(1).data<float>();
    const float* w2 = ctx.in(3).data<float>();
    const float* b1 = ctx.inputs.size() > 2 && ctx.inputs[2] ? ctx.inputs[2]->data<float>() : nullptr;
    const float* b2 = ctx.inputs.size() > 4 && ctx.inputs[4] ? ctx.inputs[4]->data<float>() : nullptr;
    std::vector<double> mean(static_cast<size_t>(channels_));
    std::vector<float> h(static_cast<size_t>(reduced_));
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t c = 0; c < channels_; ++c) {
        const float* p = x.data<float>() + (n * channels_ + c) * plane;
        double sum = 0;
        for (int64_t i = 0; i < plane; ++i) sum += p[i];
        mean[static_cast<size_t>(c)] = sum / static_cast<double>(plane);
      }
      for (int64_t r = 0; r < reduced_; ++r) {
        double acc = b1 ? b1[r] : 0.0;
        for (int64_t c = 0; c < channels_; ++c) acc += double(w1[r * channels_ + c]) * mean[static_cast<size_t>(c)];
        h[static_cast<size_t>(r)] = static_cast<float>(acc);
      }
      apply_activation(h.data(), reduced_, act_.name, act_.alpha, act_.beta);
      float* s = ctx.out(0).data<float>() + n * channels_;
      for (int64_t c = 0; c < channels_; ++c) {
        double acc = b2 ? b2[c] : 0.0;
        for (int64_t r = 0; r < reduced_; ++r) acc += double(w2[c * reduced_ + r]) * h[static_cast<size_t>(r)];
        s[c] = static_cast<float>(acc);
      }
      apply_activation(s, channels_, gate_.name, gate_.alpha, gate_.beta);
    }
  }

 private:
  FusedActivationSpec act_, gate_;
  int64_t channels_ = 0, reduced_ = 0;
};

}  // namespace

static Registrar squeeze_excite_ref("SqueezeExcite", Backend::kRef, factory_of<RefSqueezeExcite>(), "anvil",
                                    {{kFloat32Only}});

}  // namespace anvil::kernels
