// ResNet-18's convolutions at batch 1 on one oneDNN, in the primitives Anvil
// creates for them: NHWC source and destination, weights in the layout
// oneDNN picks (reordered once, outside the timing), bias and ReLU fused (the
// downsamples have no ReLU). Unlike the model, no residual add is fused into
// the blocks' second convolutions.
// Each iteration runs every convolution in the model's order, so that, as in
// the model, the others' weights pass through the caches between two runs of
// one (each reads its own source buffer, not the previous output). Written against both oneDNN 2.x (Debian's 2.6.3) and 3.x (the
// PyPI build `onednn-cpu-gomp`), to compare the two on the same shapes
// (issue 7, item 8). The build makes build/bin/anvil_onednn_conv_ab against
// Debian's oneDNN; by hand, against either:
//
//   pip download --no-deps -d /tmp/whl onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0
//   (unzip both wheels; ONEDNN3 = a folder with their include/ and lib/libdnnl.so.3)
//   g++ -O2 -fopenmp bench/tools/onednn_conv_ab.cc -ldnnl -o /tmp/conv_ab_26
//   g++ -O2 -fopenmp -I$ONEDNN3/include bench/tools/onednn_conv_ab.cc $ONEDNN3/lib/libdnnl.so.3
//       -Wl,-rpath,$ONEDNN3/lib -o /tmp/conv_ab_32   (one line)
//   OMP_NUM_THREADS=1 /tmp/conv_ab_26 ITERATIONS
//
// Prints, per convolution, oneDNN's implementation and the median time over
// the iterations, then the median of the iterations' totals.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

struct ConvShape {
  const char* name;
  int ic, oc, ih, k, stride, pad;
  bool relu;
};

// ResNet-18 (torchvision), batch 1, 224x224, square kernels and planes.
const ConvShape kResNet18[] = {
    {"conv1", 3, 64, 224, 7, 2, 3, true},
    {"layer1.0.conv1", 64, 64, 56, 3, 1, 1, true},       {"layer1.0.conv2", 64, 64, 56, 3, 1, 1, true},
    {"layer1.1.conv1", 64, 64, 56, 3, 1, 1, true},       {"layer1.1.conv2", 64, 64, 56, 3, 1, 1, true},
    {"layer2.0.conv1", 64, 128, 56, 3, 2, 1, true},      {"layer2.0.downsample", 64, 128, 56, 1, 2, 0, false},
    {"layer2.0.conv2", 128, 128, 28, 3, 1, 1, true},     {"layer2.1.conv1", 128, 128, 28, 3, 1, 1, true},
    {"layer2.1.conv2", 128, 128, 28, 3, 1, 1, true},     {"layer3.0.conv1", 128, 256, 28, 3, 2, 1, true},
    {"layer3.0.downsample", 128, 256, 28, 1, 2, 0, false}, {"layer3.0.conv2", 256, 256, 14, 3, 1, 1, true},
    {"layer3.1.conv1", 256, 256, 14, 3, 1, 1, true},     {"layer3.1.conv2", 256, 256, 14, 3, 1, 1, true},
    {"layer4.0.conv1", 256, 512, 14, 3, 2, 1, true},     {"layer4.0.downsample", 256, 512, 14, 1, 2, 0, false},
    {"layer4.0.conv2", 512, 512, 7, 3, 1, 1, true},      {"layer4.1.conv1", 512, 512, 7, 3, 1, 1, true},
    {"layer4.1.conv2", 512, 512, 7, 3, 1, 1, true},
};

struct Conv {
  const ConvShape* shape;
  dnnl::primitive primitive;
  memory src, weights, bias, dst, scratchpad;
  std::string impl;
  std::vector<double> seconds;
};

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void fill(const memory& m, float value) {
  auto* p = static_cast<float*>(m.get_data_handle());
  const size_t n = m.get_desc().get_size() / sizeof(float);
  for (size_t i = 0; i < n; ++i) p[i] = value * static_cast<float>(i % 7 + 1);
}

Conv make_conv(const dnnl::engine& eng, dnnl::stream& s, const ConvShape& c) {
  const int oh = (c.ih + 2 * c.pad - c.k) / c.stride + 1;
  const memory::desc src_md({1, c.ic, c.ih, c.ih}, dt::f32, tag::nhwc);
  const memory::desc dst_md({1, c.oc, oh, oh}, dt::f32, tag::nhwc);
  const memory::desc wei_any({c.oc, c.ic, c.k, c.k}, dt::f32, tag::any);
  const memory::desc wei_plain({c.oc, c.ic, c.k, c.k}, dt::f32, tag::oihw);
  const memory::desc bias_md({c.oc}, dt::f32, tag::a);
  const memory::dims strides{c.stride, c.stride}, pads{c.pad, c.pad};
  dnnl::post_ops po;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
#if DNNL_VERSION_MAJOR >= 3
  if (c.relu) po.append_eltwise(dnnl::algorithm::eltwise_relu, 0.f, 0.f);
  attr.set_post_ops(po);
  dnnl::convolution_forward::primitive_desc pd(eng, dnnl::prop_kind::forward_inference,
                                               dnnl::algorithm::convolution_direct, src_md, wei_any, bias_md, dst_md,
                                               strides, pads, pads, attr);
#else
  if (c.relu) po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
  attr.set_post_ops(po);
  dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_md,
                                    wei_any, bias_md, dst_md, strides, pads, pads);
  dnnl::convolution_forward::primitive_desc pd(d, attr, eng);
#endif
  Conv conv{&c, dnnl::convolution_forward(pd), memory(src_md, eng), memory(pd.weights_desc(), eng),
            memory(bias_md, eng), memory(dst_md, eng), memory(pd.scratchpad_desc(), eng), pd.impl_info_str(), {}};
  memory plain(wei_plain, eng);
  fill(plain, 0.01f);
  dnnl::reorder(plain, conv.weights).execute(s, plain, conv.weights);
  fill(conv.src, 0.1f);
  fill(conv.bias, 0.01f);
  s.wait();
  return conv;
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 0;
  if (argc != 2 || iterations < 3 || iterations > 100000) {
    std::fprintf(stderr, "usage: %s ITERATIONS (3 or more)\n", argv[0]);
    return 2;
  }
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  std::vector<Conv> convs;
  for (const ConvShape& c : kResNet18) convs.push_back(make_conv(eng, s, c));
  std::vector<double> totals;
  for (int it = 0; it < iterations + 2; ++it) {  // two warm-up iterations
    double total = 0;
    for (Conv& c : convs) {
      const double t0 = seconds_now();
      c.primitive.execute(s, {{DNNL_ARG_SRC, c.src},
                              {DNNL_ARG_WEIGHTS, c.weights},
                              {DNNL_ARG_BIAS, c.bias},
                              {DNNL_ARG_DST, c.dst},
                              {DNNL_ARG_SCRATCHPAD, c.scratchpad}});
      s.wait();
      const double dt_s = seconds_now() - t0;
      if (it >= 2) c.seconds.push_back(dt_s);
      total += dt_s;
    }
    if (it >= 2) totals.push_back(total);
  }
  const dnnl_version_t* v = dnnl_version();
  std::printf("oneDNN %d.%d.%d, %d iterations, median ms per convolution\n", v->major, v->minor, v->patch,
              iterations);
  for (const Conv& c : convs)
    std::printf("%-22s %-28s %8.4f\n", c.shape->name, c.impl.c_str(), median(c.seconds) * 1e3);
  std::printf("%-22s %-28s %8.4f\n", "total", "", median(totals) * 1e3);
  return 0;
}
