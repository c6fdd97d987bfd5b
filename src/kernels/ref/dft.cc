// Discrete Fourier transforms (opsets 17 and 20): DFT along one axis of a
// real ([..., 1]) or complex ([..., 2]) signal, forward or inverse, with the
// one-sided forms (the n / 2 + 1 bins of a real signal, and back), and STFT
// (windowed frames of a signal, each transformed). Computed in double by the
// direct sum, O(n^2) per transform: a reference kernel, which refuses sizes
// whose work would take minutes.
#include <cmath>
#include <complex>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

using Complex = std::complex<double>;

// Beyond this many multiply-adds the direct sum is refused (seconds of work).
constexpr double kMaxWork = 4e9;

// out[k] = sum_t in[t] e^(-+2 pi i k t / n) for k < out.size(); in is zero
// beyond its length (and truncated to n). inverse: the + sign and 1/n.
void transform(const std::vector<Complex>& in, int64_t n, bool inverse, std::vector<Complex>& out) {
  const double sign = inverse ? 1.0 : -1.0;
  const int64_t len = std::min<int64_t>(n, static_cast<int64_t>(in.size()));
  for (size_t k = 0; k < out.size(); ++k) {
    Complex acc = 0;
    for (int64_t t = 0; t < len; ++t) {
      // k * t mod n keeps the angle small, so long transforms stay accurate.
      const auto phase = static_cast<double>((static_cast<int64_t>(k) * t) % n);
      acc += in[static_cast<size_t>(t)] * std::polar(1.0, sign * 2.0 * M_PI * phase / static_cast<double>(n));
    }
    out[k] = inverse ? acc / static_cast<double>(n) : acc;
  }
}

// The tensor's elements as complex numbers along a [..., 1 or 2] last axis.
// Input i, a constant of one integer (DFT's dft_length and axis, STFT's
// frame_step and frame_length): a file may give it any shape.
int64_t one_int(const PrepareContext& ctx, size_t i, const char* name) {
  const Tensor& t = ctx.require_constant(i, name);
  ANVIL_PREPARE_CHECK(ctx, t.numel() == 1, ErrorKind::kInvalidArgument, "{} must hold one integer, got shape {}", name,
                      shape_str(t.shape()));
  return tensor_to_ints(t)[0];
}

std::vector<Complex> complex_of(const Tensor& t) {
  const std::vector<float> v = tensor_to_floats(t);
  const bool cplx = t.shape().back() == 2;
  std::vector<Complex> c(v.size() / (cplx ? 2 : 1));
  for (size_t i = 0; i < c.size(); ++i) c[i] = cplx ? Complex(v[2 * i], v[2 * i + 1]) : Complex(v[i], 0);
  return c;
}

class DftKernel : public Kernel {
 public:
  explicit DftKernel(const ir::Node& node)
      : inverse_(node.attrs.get_int("inverse", 0) != 0), onesided_(node.attrs.get_int("onesided", 0) != 0) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);
    const auto rank = static_cast<int64_t>(x.size());
    ANVIL_PREPARE_CHECK(ctx, rank >= 2 && (x.back() == 1 || x.back() == 2), ErrorKind::kInvalidArgument,
                        "the input {} must end in 1 (real) or 2 (complex)", shape_str(x));
    int64_t axis = ctx.opset() >= 20 ? -2 : ctx.attrs().get_int("axis", 1);
    if (ctx.opset() >= 20 && ctx.has_input(2)) axis = one_int(ctx, 2, "axis");
    axis = normalize_axis(ctx, axis, rank);
    ANVIL_PREPARE_CHECK(ctx, axis < rank - 1, ErrorKind::kInvalidArgument, "axis {} is the real/imaginary axis", axis);
    axis_ = axis;
    const int64_t len = x[static_cast<size_t>(axis)];
    n_ = inverse_ && onesided_ ? 2 * (len - 1) : len;
    if (ctx.has_input(1)) n_ = one_int(ctx, 1, "dft_length");
    ANVIL_PREPARE_CHECK(ctx, n_ >= 1, ErrorKind::kInvalidArgument, "the transform length {} must be positive", n_);
    ANVIL_PREPARE_CHECK(ctx, !(onesided_ && !inverse_ && x.back() == 2), ErrorKind::kInvalidArgument,
                        "a one-sided forward DFT takes a real signal ([..., 1]), got {}", shape_str(x));
    Shape y = x;
    y[static_cast<size_t>(axis)] = onesided_ && !inverse_ ? n_ / 2 + 1 : n_;
    y.back() = inverse_ && onesided_ ? 1 : 2;  // the inverse of a one-sided spectrum is real
    const double work = static_cast<double>(shape_numel(y)) * static_cast<double>(std::max(n_, len));
    ANVIL_PREPARE_CHECK(ctx, work <= kMaxWork, ErrorKind::kUnsupported,
                        "a DFT of length {} over {} takes {:.3g} steps, more than the reference kernel runs", n_,
                        shape_str(x), work);
    return {{ctx.input_dtype(0), y}};
  }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.out(0);
    const std::vector<Complex> in = complex_of(x);
    const Shape& xs = x.shape();
    const int64_t len = xs[static_cast<size_t>(axis_)], out_len = y.shape()[static_cast<size_t>(axis_)];
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis_; ++d) outer *= xs[static_cast<size_t>(d)];
    for (size_t d = static_cast<size_t>(axis_) + 1; d + 1 < xs.size(); ++d) inner *= xs[d];
    const bool real_out = y.shape().back() == 1;
    std::vector<float> out(static_cast<size_t>(y.numel()));
    std::vector<Complex> signal, spectrum(static_cast<size_t>(real_out ? n_ : out_len));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        signal.assign(static_cast<size_t>(len), 0);
        for (int64_t t = 0; t < len; ++t) signal[static_cast<size_t>(t)] = in[static_cast<size_t>((o * len + t) * inner + i)];
        if (real_out) signal = hermitian(signal);
        transform(signal, n_, inverse_, spectrum);
        for (int64_t k = 0; k < out_len; ++k) {
          const Complex v = spectrum[static_cast<size_t>(k)];
          const auto at = static_cast<size_t>((o * out_len + k) * inner + i);
          if (real_out) {
            out[at] = static_cast<float>(v.real());
          } else {
            out[2 * at] = static_cast<float>(v.real());
            out[2 * at + 1] = static_cast<float>(v.imag());
          }
        }
      }
    floats_to_tensor(out, y);
  }

 private:
  // The full spectrum of a real signal from its one-sided half (numpy's irfft).
  std::vector<Complex> hermitian(const std::vector<Complex>& half) const {
    std::vector<Complex> full(static_cast<size_t>(n_), 0);
    for (int64_t k = 0; k <= n_ / 2 && k < static_cast<int64_t>(half.size()); ++k) {
      full[static_cast<size_t>(k)] = half[static_cast<size_t>(k)];
      if (k > 0 && n_ - k != k) full[static_cast<size_t>(n_ - k)] = std::conj(half[static_cast<size_t>(k)]);
    }
    return full;
  }

  bool inverse_, onesided_;
  int64_t axis_ = 1, n_ = 1;
};

// STFT(signal [B, L, 1 or 2], frame_step, window, frame_length) -> [B, frames, bins, 2].
class StftKernel : public Kernel {
 public:
  explicit StftKernel(const ir::Node& node) : onesided_(node.attrs.get_int("onesided", 1) != 0) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);
    ANVIL_PREPARE_CHECK(ctx, x.size() == 3 && (x[2] == 1 || x[2] == 2), ErrorKind::kInvalidArgument,
                        "the signal {} must be [batch, length, 1 or 2]", shape_str(x));
    step_ = one_int(ctx, 1, "frame_step");
    if (ctx.has_input(2))
      ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(2).size() == 1, ErrorKind::kInvalidArgument,
                          "the window {} must be one axis", shape_str(ctx.input_shape(2)));
    frame_ = ctx.has_input(2) ? ctx.input_shape(2)[0] : x[1];
    if (ctx.has_input(3)) frame_ = one_int(ctx, 3, "frame_length");
    if (ctx.has_input(2))
      ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(2) == Shape{frame_}, ErrorKind::kInvalidArgument,
                          "the window {} must be [frame_length = {}]", shape_str(ctx.input_shape(2)), frame_);
    ANVIL_PREPARE_CHECK(ctx, step_ >= 1 && frame_ >= 1 && frame_ <= x[1], ErrorKind::kInvalidArgument,
                        "frame_step {} and frame_length {} must be positive, the frame within the {} samples", step_,
                        frame_, x[1]);
    ANVIL_PREPARE_CHECK(ctx, !(onesided_ && x[2] == 2), ErrorKind::kInvalidArgument,
                        "a one-sided STFT takes a real signal");
    frames_ = 1 + (x[1] - frame_) / step_;
    bins_ = onesided_ ? frame_ / 2 + 1 : frame_;
    const double work = static_cast<double>(x[0] * frames_ * bins_) * static_cast<double>(frame_);
    ANVIL_PREPARE_CHECK(ctx, work <= kMaxWork, ErrorKind::kUnsupported,
                        "an STFT of {} frames of {} takes {:.3g} steps, more than the reference kernel runs", frames_,
                        frame_, work);
    return {{ctx.input_dtype(0), {x[0], frames_, bins_, 2}}};
  }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const std::vector<Complex> in = complex_of(x);
    const std::vector<float> window =
        ctx.inputs.size() > 2 && ctx.inputs[2] ? tensor_to_floats(ctx.in(2)) : std::vector<float>(static_cast<size_t>(frame_), 1.f);
    const int64_t batch = x.shape()[0], len = x.shape()[1];
    std::vector<float> out(static_cast<size_t>(ctx.out(0).numel()));
    std::vector<Complex> frame(static_cast<size_t>(frame_)), spectrum(static_cast<size_t>(bins_));
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t f = 0; f < frames_; ++f) {
        for (int64_t t = 0; t < frame_; ++t)
          frame[static_cast<size_t>(t)] = in[static_cast<size_t>(b * len + f * step_ + t)] * static_cast<double>(window[static_cast<size_t>(t)]);
        transform(frame, frame_, false, spectrum);
        for (int64_t k = 0; k < bins_; ++k) {
          const auto at = static_cast<size_t>(((b * frames_ + f) * bins_ + k) * 2);
          out[at] = static_cast<float>(spectrum[static_cast<size_t>(k)].real());
          out[at + 1] = static_cast<float>(spectrum[static_cast<size_t>(k)].imag());
        }
      }
    floats_to_tensor(out, ctx.out(0));
  }

 private:
  bool onesided_;
  int64_t step_ = 1, frame_ = 1, frames_ = 0, bins_ = 0;
};

}  // namespace

// 17: axis an attribute; 20: axis an input (default -2).
ANVIL_REGISTER_OP_VERSIONS("DFT", 17, 20);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("DFT", kRef, DftKernel, {kFloats | kHalfs, kInt32And64, dtype_bit(DType::kInt64)});
ANVIL_REGISTER_OP_VERSIONS("STFT", 17, 17);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("STFT", kRef, StftKernel, {kFloats | kHalfs, kInt32And64, kFloats | kHalfs, kInt32And64});

}  // namespace anvil::kernels
