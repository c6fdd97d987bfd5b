// Training a classifier's weights: the float32 initializers of an ONNX model
// whose output is logits [N, C], with softmax cross-entropy, on in-memory
// features and labels (what `anvil train` runs).
//
//   anvil::TrainOptions opts;
//   opts.epochs = 10;
//   anvil::TrainResult r = anvil::train_classifier("mlp.onnx", features, labels, opts);
//   anvil::save_trained_model("mlp.onnx", r.parameters, "mlp_trained.onnx");
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "anvil/tensor.h"

namespace anvil {

struct TrainOptions {
  std::string optimizer = "adam";  // sgd | adam | adamw
  float lr = 1e-3f;
  float momentum = 0.f;            // sgd
  bool nesterov = false;           // sgd
  float weight_decay = -1.f;       // < 0: the optimizer's default (0; 0.01 for adamw, as PyTorch)
  float clip_norm = 0.f;           // > 0: clip the gradients' global L2 norm
  std::string schedule = "constant";  // constant | step (x0.1 every third of the epochs) | cosine
  int epochs = 1;
  int64_t batch = 32;
  bool drop_last = false;
  bool shuffle = true;
  uint64_t seed = 0;               // shuffling order
  double until_accuracy = 0;       // > 0: stop after the epoch whose accuracy reaches it
  double until_loss = 0;           // > 0: stop after the epoch whose mean loss falls to it
  int threads = 0;                 // 0: all cores
};

struct EpochReport {
  int epoch = 0;  // from 1
  double loss = 0;        // mean over the epoch's batches, weighted by their rows
  double accuracy = 0;    // of the predictions made while training, in [0, 1]
  double samples_per_s = 0;
  int64_t steps = 0;
};

struct TrainProgress {
  int epoch = 0;
  int64_t batch = 0, batches = 0;
  double loss = 0;  // of this batch
};

struct TrainResult {
  std::vector<EpochReport> epochs;
  std::string stop_reason;  // "epochs", "accuracy", "loss"
  std::map<std::string, Tensor> parameters;  // the trained initializers
};

// `features`: [S, ...] float32, or uint8 scaled to [0, 1] batch by batch;
// `labels`: [S] int64 or int32 in [0, C). The model's input takes rows of
// `features`; its output is the logits [N, C]. Throws anvil::Error with one
// clear message for bad data, a model it cannot train, or a loss that is not
// finite.
TrainResult train_classifier(const std::string& model_path, const Tensor& features, const Tensor& labels,
                             const TrainOptions& options,
                             const std::function<void(const TrainProgress&)>& on_batch = {},
                             const std::function<void(const EpochReport&)>& on_epoch = {});

// Writes the model at `model_path` with `parameters` as its initializers.
void save_trained_model(const std::string& model_path, const std::map<std::string, Tensor>& parameters,
                        const std::string& out_path);

}  // namespace anvil
