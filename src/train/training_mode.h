// train::to_training_mode — an inference graph rewritten to train: every
// BatchNormalization normalizes with the batch's statistics (decomposed into
// ops that have gradient rules) and hands them out to update its running
// statistics; every Dropout drops, from a seeded sequence of draws.
//
// The exported model is the inference graph, unchanged but for its weights
// and running statistics, so ONNX Runtime runs it as it runs any model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "anvil/tensor.h"
#include "ir/graph.h"

namespace anvil::train {

// One BatchNormalization's running statistics, updated after each step as
// ONNX and PyTorch do: running = running * momentum + batch * (1 - momentum),
// the variance unbiased (n / (n - 1)), as PyTorch keeps it.
struct RunningStatistics {
  std::string mean, var;              // the initializers holding them
  std::string batch_mean, batch_var;  // values of the training graph, [C] each
  float momentum = 0.9f;
  Tensor initial_mean, initial_var;   // the initializers' values before training
};

struct TrainingMode {
  std::vector<RunningStatistics> batch_norms;
  int dropouts = 0;
  // With dropouts: the int64 scalar input the trainer feeds the step number
  // to; each mask is a function of (seed, dropout, step) only, so reruns and
  // resumed runs draw the same masks.
  std::string step_input;
};

// Rewrites `graph` in place: each Dropout becomes anvil.TrainingDropout.
// Throws anvil::Error (kUnsupported) for a BatchNormalization it cannot
// rewrite (non-constant statistics, unknown rank) or a Dropout whose ratio is
// not a constant.
TrainingMode to_training_mode(ir::Graph& graph, uint64_t seed);

}  // namespace anvil::train
