// Einsum: any equation ir::parse_einsum accepts (contractions, transposes,
// diagonals, sums, batch dimensions through "..."), as one loop over the
// output's labels and the contracted ones. Accumulates in double (floats) or
// int64 (integers). A reference kernel: no blocking or BLAS.
#include <algorithm>

#include "ir/einsum.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

class EinsumKernel : public Kernel {
 public:
  explicit EinsumKernel(const ir::Node& node) : equation_(node.attrs.get_string("equation", "")) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    std::vector<size_t> ranks;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) ranks.push_back(ctx.input_shape(i).size());
    spec_ = ir::parse_einsum(equation_, ranks);  // the schema checked the equation and the sizes
    sizes_.assign(static_cast<size_t>(spec_.num_labels), 1);
    for (size_t i = 0; i < ranks.size(); ++i)
      for (size_t a = 0; a < ranks[i]; ++a) {
        // A label's size: its dim where not broadcast (1). Not the largest:
        // an empty dim (0) must stay 0 (found by make fuzz: the kernel wrote
        // an empty output's elements, and read an empty input's).
        const auto l = static_cast<size_t>(spec_.inputs[i][a]);
        if (ctx.input_shape(i)[a] != 1) sizes_[l] = ctx.input_shape(i)[a];
      }
    // Strides per input per label (0 where the label is absent or broadcast).
    strides_.assign(ranks.size(), std::vector<int64_t>(static_cast<size_t>(spec_.num_labels), 0));
    for (size_t i = 0; i < ranks.size(); ++i) {
      const std::vector<int64_t> s = contiguous_strides(ctx.input_shape(i));
      for (size_t a = 0; a < ranks[i]; ++a)
        if (ctx.input_shape(i)[a] != 1) strides_[i][static_cast<size_t>(spec_.inputs[i][a])] += s[a];
    }
    std::vector<bool> in_output(static_cast<size_t>(spec_.num_labels), false);
    for (int l : spec_.output) in_output[static_cast<size_t>(l)] = true;
    contracted_.clear();
    for (int l = 0; l < spec_.num_labels; ++l)
      if (!in_output[static_cast<size_t>(l)]) contracted_.push_back(l);
    // One loop over every label: refuse what this reference kernel would not finish.
    double work = 1;
    for (int64_t s : sizes_) work *= static_cast<double>(s);
    ANVIL_PREPARE_CHECK(ctx, work <= 1e10, ErrorKind::kUnsupported,
                        "'{}' takes {:.3g} steps, more than the reference Einsum kernel runs", equation_, work);
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    dispatch_dtype(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_same_v<T, bool>) compute<T>(ctx);
    });
  }

 private:
  template <typename T>
  void compute(const RunContext& ctx) const {
    constexpr bool kFloat = std::is_floating_point_v<T> || kIs16BitFloat<T>;
    using Acc = std::conditional_t<kFloat, double, int64_t>;
    auto load = [](T v) -> Acc {
      if constexpr (kIs16BitFloat<T>) return static_cast<double>(static_cast<float>(v));
      else return static_cast<Acc>(v);
    };
    const size_t n_in = strides_.size();
    int64_t outputs = 1, inner = 1;
    for (int l : spec_.output) outputs *= sizes_[static_cast<size_t>(l)];
    for (int l : contracted_) inner *= sizes_[static_cast<size_t>(l)];
    T* y = ctx.out(0).data<T>();
    std::vector<int64_t> index(static_cast<size_t>(spec_.num_labels));
    for (int64_t o = 0; o < outputs; ++o) {
      int64_t rem = o;
      for (size_t k = spec_.output.size(); k-- > 0;) {
        const auto l = static_cast<size_t>(spec_.output[k]);
        index[l] = rem % sizes_[l];
        rem /= sizes_[l];
      }
      Acc sum = 0;
      for (int64_t c = 0; c < inner; ++c) {
        rem = c;
        for (size_t k = contracted_.size(); k-- > 0;) {
          const auto l = static_cast<size_t>(contracted_[k]);
          index[l] = rem % sizes_[l];
          rem /= sizes_[l];
        }
        Acc product = 1;
        for (size_t i = 0; i < n_in; ++i) {
          int64_t off = 0;
          for (size_t l = 0; l < index.size(); ++l) off += index[l] * strides_[i][l];
          product *= load(ctx.in(i).data<T>()[off]);
        }
        sum += product;
      }
      if constexpr (kIs16BitFloat<T>) y[o] = T(static_cast<float>(sum));
      else y[o] = static_cast<T>(sum);
    }
  }

  std::string equation_;
  ir::EinsumSpec spec_;
  std::vector<int64_t> sizes_;
  std::vector<std::vector<int64_t>> strides_;
  std::vector<int> contracted_;
};

}  // namespace

ANVIL_REGISTER_OP_VERSIONS("Einsum", 12, 28);  // 28 adds bfloat16
ANVIL_REGISTER_KERNEL_CLASS_TYPED("Einsum", kRef, EinsumKernel, {kNumeric | kHalfs});

}  // namespace anvil::kernels
