// RNN, GRU and LSTM nodes as their kernels read them: the cell, directions,
// layout, sizes and options, checked against the inputs' types and shapes
// once for the reference kernel (ref/recurrent.cc) and Anvil's vectorized
// one (vec/recurrent.cc), so that both accept and refuse the same nodes.
//
// Gates are laid out as ONNX stores them: RNN [i], GRU [z, r, h], LSTM
// [i, o, f, c]; P (LSTM peepholes) as [i, o, f].
#pragma once

#include <string>
#include <vector>

#include "kernels/kernel.h"

namespace anvil::kernels {

enum class RecurrentCell { kRnn, kGru, kLstm };

struct RecurrentSpec {
  RecurrentCell cell = RecurrentCell::kRnn;
  int64_t dirs = 1;           // 2 when bidirectional
  bool reverse_only = false;  // direction "reverse"
  int64_t layout = 0;         // 0: X [seq, batch, input]; 1: [batch, seq, input]
  int64_t seq = 0, batch = 0, input = 0, hidden = 0;
  float clip = -1;  // < 0: none
  bool input_forget = false;         // LSTM
  bool linear_before_reset = false;  // GRU
  // The `activations` attribute, or the defaults, one list per direction
  // (activations_per_direction names each, back to back).
  std::vector<std::string> activations;

  int64_t gates() const { return cell == RecurrentCell::kRnn ? 1 : cell == RecurrentCell::kGru ? 3 : 4; }
  size_t activations_per_direction() const {
    return cell == RecurrentCell::kRnn ? 1 : cell == RecurrentCell::kGru ? 2 : 3;
  }
  // Whether direction d runs backwards in time.
  bool reversed(int64_t d) const { return reverse_only || d == 1; }
  // Whether every direction's activations are ONNX's defaults (RNN: Tanh;
  // GRU: Sigmoid, Tanh; LSTM: Sigmoid, Tanh, Tanh).
  bool default_activations() const;
};

// The node's spec; fails the prepare (kInvalidModel, kInvalidArgument or
// kUnsupported) where the inputs or attributes do not fit the op.
RecurrentSpec recurrent_spec(const PrepareContext& ctx, RecurrentCell cell);

}  // namespace anvil::kernels
