// Flush-to-zero and denormals-are-zero (x86's MXCSR FTZ and DAZ bits) for a
// scope, on the calling thread and on each thread of its OpenMP team: float
// results below 1.2e-38 are written as zero and such inputs read as zero.
// Without them, the CPU takes a slow path (a microcode assist) for each
// operation on such a value: a CNN's training epoch ran 3.5x slower once its
// softmax's probabilities for the wrong classes, and so its gradients, had
// fallen that low (bench/train_compare's cnn-32 row). TensorFlow flushes by
// default; PyTorch on request (torch.set_flush_denormal).
#pragma once

#include <vector>

namespace anvil {

class ScopedFlushDenormals {
 public:
  // threads: the team the scope's work runs on (<= 0: one per core). Off:
  // changes nothing. Each thread gets its own mode back at the end (the
  // OpenMP team of the same size keeps its threads in order).
  ScopedFlushDenormals(bool on, int threads);
  ~ScopedFlushDenormals();
  ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
  ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;

 private:
  std::vector<unsigned> previous_;  // each team thread's FTZ and DAZ bits before (empty: off)
};

}  // namespace anvil
