// anvil::nn::Sequential — a feed-forward network built layer by layer in C++
// or from a JSON spec, written as an ONNX model whose float initializers are
// its weights, seeded and initialised as PyTorch initialises the same layers.
// `anvil train --model net.json` trains one; the trained model is plain ONNX.
//
//   anvil::nn::Sequential net({1, 8, 8});           // one sample's shape
//   net.conv2d(16, 3, 1, 1).relu().max_pool2d(2).flatten().linear(10);
//   net.save("digits_cnn.onnx", /*seed=*/0);
//
// The JSON spec names the same layers (docs/training.md):
//   {"input": [1, 8, 8], "layers": [{"type": "conv2d", "out": 16, "kernel": 3, "padding": 1},
//                                    {"type": "relu"}, {"type": "max_pool2d", "kernel": 2},
//                                    {"type": "flatten"}, {"type": "linear", "out": 10}]}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace anvil::nn {

class Sequential {
 public:
  // `sample_shape`: one sample's shape, without the batch axis ({512}, {1, 28, 28}).
  explicit Sequential(std::vector<int64_t> sample_shape);

  // Each throws anvil::Error (kInvalidArgument) naming the layer when it does
  // not fit the shape before it or a size is not positive.
  Sequential& linear(int64_t out_features, bool bias = true);  // on [N, F]
  Sequential& conv2d(int64_t out_channels, int64_t kernel, int64_t stride = 1, int64_t padding = 0,
                     bool bias = true);                         // on [N, C, H, W]
  Sequential& batch_norm(float momentum = 0.1f, float eps = 1e-5f);  // 1-D on [N, F], 2-D on [N, C, H, W]
  Sequential& max_pool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0);  // stride 0: the kernel
  Sequential& avg_pool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0);  // padding counts, as in PyTorch
  Sequential& global_avg_pool();  // [N, C, H, W] -> [N, C, 1, 1]
  Sequential& flatten();          // [N, ...] -> [N, F]
  Sequential& relu();
  Sequential& leaky_relu(float alpha = 0.01f);
  Sequential& sigmoid();
  Sequential& tanh();
  Sequential& gelu();                  // exact (erf) form
  Sequential& dropout(float p = 0.5f);  // active while training only

  const std::vector<int64_t>& output_shape() const { return shape_; }  // one sample's
  size_t layers() const { return layers_.size(); }

  // The network as a serialized ONNX ModelProto (opset 17): input "x"
  // [batch, sample_shape...], output "logits" [batch, output_shape...].
  std::string to_onnx(uint64_t seed = 0) const;
  void save(const std::string& path, uint64_t seed = 0) const;

  // The JSON spec above; throws anvil::Error (kInvalidArgument) with the
  // layer's index for anything it cannot build.
  static Sequential from_json(const std::string& text);
  static Sequential from_json_file(const std::string& path);

  struct Layer {
    std::string type;
    int64_t out = 0, kernel = 0, stride = 1, padding = 0;
    bool bias = true;
    float alpha = 0.f, eps = 0.f;
    std::vector<int64_t> in_shape;  // one sample's shape before the layer
  };

 private:
  Sequential& add(Layer layer, std::vector<int64_t> out_shape);
  Sequential& pool(const char* type, int64_t kernel, int64_t stride, int64_t padding);
  Layer check(const std::string& type, size_t rank, const char* needs) const;

  std::vector<int64_t> input_, shape_;
  std::vector<Layer> layers_;
};

}  // namespace anvil::nn
