// Training checkpoints: one folder per epoch under the checkpoint directory,
// written beside and renamed into place, with `latest` (a one-line file,
// replaced atomically) naming the newest complete one. A run that fails (a
// loss that is not finite, a crash) leaves the last good checkpoint as it was.
//
//   DIR/latest             "epoch-3"
//   DIR/epoch-3/model.onnx the inference model with this epoch's weights
//                          (anvil run and ONNX Runtime run it as it is)
//   DIR/epoch-3/state.json epoch, steps, the parameters' names, the loss
//   DIR/epoch-3/optimizer/first-K.npy, second-K.npy  the moments of parameter K
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "anvil/tensor.h"

namespace anvil::train {

struct CheckpointState {
  int epoch = 0;       // the last epoch done, from 1
  int64_t steps = 0;   // optimizer steps done
  double loss = 0;     // the epoch's mean loss
  std::vector<std::string> parameters;   // in the optimizer's order
  std::vector<Tensor> first, second;     // the optimizer's moments (empty tensors where it keeps none)
};

// Writes DIR/epoch-N with `model_bytes` and `state`, points `latest` at it
// and removes checkpoints older than the previous one. Throws anvil::Error
// (kInvalidArgument) when the directory cannot be written.
void save_checkpoint(const std::string& dir, const std::string& model_bytes, const CheckpointState& state);

struct LoadedCheckpoint {
  std::string folder;      // DIR/epoch-N
  std::string model_path;  // DIR/epoch-N/model.onnx
  CheckpointState state;
};

// The checkpoint `latest` names; nullopt when DIR has none. Throws
// anvil::Error (kInvalidArgument) for a damaged checkpoint.
std::optional<LoadedCheckpoint> load_latest_checkpoint(const std::string& dir);

}  // namespace anvil::train
