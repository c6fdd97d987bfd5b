// Training a model's weights (what `anvil train` runs): the float32
// initializers of an ONNX model, or a network built from a JSON spec
// (anvil/nn.h), whose one output is trained with softmax cross-entropy
// (logits [N, C], integer labels), binary cross-entropy with logits or MSE
// (float targets shaped like the output), on in-memory features and labels.
//
//   anvil::TrainOptions opts;
//   opts.epochs = 10;
//   anvil::TrainResult r = anvil::train_classifier("mlp.onnx", features, labels, opts);
//   anvil::write_model_file(r.trained_model, "mlp_trained.onnx");
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "anvil/session.h"
#include "anvil/tensor.h"

namespace anvil {

struct TrainOptions {
  std::string loss = "cross_entropy";  // cross_entropy | bce (with logits) | mse
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
  uint64_t seed = 0;               // the shuffling order, dropout masks and a JSON spec's initial weights
  double until_accuracy = 0;       // > 0: stop after the epoch whose accuracy reaches it
  double until_loss = 0;           // > 0: stop after the epoch whose mean loss falls to it
  int threads = 0;                 // 0: all cores
  int workers = 0;                 // data-loader workers (0: batches made between steps)
  bool worker_processes = false;   // fork()ed workers instead of threads
  int prefetch = 2;                // batches made ahead per worker
  std::string checkpoint_dir;      // non-empty: a checkpoint after every epoch (train/checkpoint.h)
  bool resume = false;             // continue from checkpoint_dir's latest checkpoint
  bool deterministic = false;      // bit-identical weights across reruns at one thread count
  bool flush_denormals = true;     // floats below 1.2e-38 as zero while training (x86 FTZ/DAZ): tiny
                                   // gradients otherwise take the CPU's slow path
  bool profile = false;            // record each step's time, node by node (TrainResult::step_profiles)
};

struct EpochReport {
  int epoch = 0;  // from 1
  double loss = 0;        // mean over the epoch's batches, weighted by their rows
  double accuracy = 0;    // of the predictions made while training, in [0, 1]; NaN for mse
  double samples_per_s = 0;
  int64_t steps = 0;
};

struct TrainProgress {
  int epoch = 0;
  int64_t batch = 0, batches = 0;
  double loss = 0;          // of this batch
  double accuracy = 0;      // of the epoch so far (NaN for mse)
  double samples_per_s = 0; // of the epoch so far
};

struct TrainResult {
  std::vector<EpochReport> epochs;
  std::string stop_reason;  // "epochs", "accuracy", "loss"
  std::map<std::string, Tensor> parameters;  // the trained initializers (and running statistics)
  std::string trained_model;  // the trained model as ONNX bytes (inference form)
  int resumed_from = 0;       // the checkpoint's epoch when resumed, else 0
  // With options.profile: one per full batch after the run's first step (up
  // to 100): the training graph's nodes (forward, loss, gradients), then
  // the optimizer's update and the wait for the step's batch.
  std::vector<RunProfile> step_profiles;
};

// `model_path`: an ONNX file, or a JSON spec (.json, anvil/nn.h) built with
// options.seed. `features`: [S, ...] float32, or uint8 scaled to [0, 1] batch
// by batch; `labels`: [S] int64 or int32 in [0, C) for cross-entropy, or
// targets (float32, or integers) with the output's per-sample size for bce
// and mse. Throws anvil::Error with one clear message for bad data, a model
// it cannot train, or a loss that is not finite (the checkpoints written
// before it stay).
TrainResult train_classifier(const std::string& model_path, const Tensor& features, const Tensor& labels,
                             const TrainOptions& options,
                             const std::function<void(const TrainProgress&)>& on_batch = {},
                             const std::function<void(const EpochReport&)>& on_epoch = {});

// Writes the model at `model_path` with `parameters` as its initializers.
void save_trained_model(const std::string& model_path, const std::map<std::string, Tensor>& parameters,
                        const std::string& out_path);
// Writes `bytes` to `path` through a file beside it and a rename: a failed
// write never leaves a truncated model.
void write_model_file(const std::string& bytes, const std::string& path);

// A numeric CSV file (a header line optional) as features [S, F] float32 and
// labels [S] int64 from column `label_column` (negative: from the end).
std::pair<Tensor, Tensor> read_csv_data(const std::string& path, int label_column = -1);

}  // namespace anvil
