// train::Trainer — the training loop's step: the gradient graph planned once
// as a Session (the same planner and kernels as inference), the parameters
// owned here and updated in place by the optimizer after each run.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "anvil/session.h"
#include "train/autodiff.h"
#include "train/optimizer.h"

namespace anvil::train {

struct StepResult {
  double loss = 0;
  double grad_norm = 0;               // before clipping
  std::vector<Tensor> extra_outputs;  // the values named in `extra_outputs`, this batch's
};

class Trainer {
 public:
  Trainer(std::unique_ptr<ir::Graph> forward, const std::string& loss, const std::vector<std::string>& parameters,
          const OptimizerOptions& optimizer, const SessionOptions& session = {},
          const std::vector<std::string>& extra_outputs = {});

  // Forward, backward and one optimizer step at `lr` on one batch (the
  // forward graph's inputs by name). Throws anvil::Error for bad inputs and
  // (kInvalidArgument) when the loss is not finite, leaving the parameters as
  // they were before the step. With `profile`, records the graph's nodes and
  // then the optimizer's update into it.
  StepResult step(const std::map<std::string, Tensor>& batch, float lr, RunProfile* profile = nullptr);
  // The loss and extra outputs on a batch, without updating anything.
  StepResult evaluate(const std::map<std::string, Tensor>& batch) const;

  const std::vector<std::string>& parameter_names() const { return grad_.parameters; }
  const std::vector<Tensor>& parameters() const { return params_; }
  std::vector<Tensor>& mutable_parameters() { return params_; }  // updated in place by step()
  // Whether step() and evaluate() flush denormal floats to zero
  // (core/denormals.h; on unless turned off).
  void set_flush_denormals(bool on) { flush_denormals_ = on; }
  const Optimizer& optimizer() const { return *optimizer_; }
  Optimizer& mutable_optimizer() { return *optimizer_; }

 private:
  GradientGraph grad_;
  size_t extra_count_;
  std::unique_ptr<Session> session_;
  std::vector<Tensor> params_;
  std::unique_ptr<Optimizer> optimizer_;
  int threads_ = 0;  // the session's team (0: one per core)
  bool flush_denormals_ = true;

  // Runs the gradient graph: the loss, the extra outputs, then the gradients.
  std::vector<Tensor> run(const std::map<std::string, Tensor>& batch, RunProfile* profile = nullptr) const;
};

}  // namespace anvil::train
