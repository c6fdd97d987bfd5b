// anvil::train_classifier: a model's initializers trained with a loss on
// in-memory data (include/anvil/train.h). The steps: load the model (ONNX or
// a JSON spec), check it against the data, add the loss, pick the
// parameters, rewrite batch norms and dropouts for training, then run epochs
// of the data loader's batches through the Trainer, with checkpoints.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "anvil/nn.h"
#include "anvil/train.h"
#include "core/check.h"
#include "ir/schema.h"
#include "onnx/importer.h"
#include "runtime/kernel_support.h"
#include "train/checkpoint.h"
#include "train/data_loader.h"
#include "train/trainer.h"
#include "train/training_mode.h"

namespace anvil {

namespace {

enum class Loss { kCrossEntropy, kBce, kMse };

Loss parse_loss(const std::string& name) {
  if (name == "cross_entropy") return Loss::kCrossEntropy;
  if (name == "bce") return Loss::kBce;
  if (name == "mse") return Loss::kMse;
  fail(ErrorKind::kInvalidArgument, "unknown loss '{}' (losses: cross_entropy, bce, mse)", name);
}

int64_t integer_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kInt64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i];
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The model to train: an ONNX file, or a JSON spec built with `seed`
// (`bytes` holds its ONNX form, from which the trained model is written).
struct Model {
  std::unique_ptr<ir::Graph> graph;
  std::string bytes;
};

Model load_model(const std::string& path, uint64_t seed) {
  Model m;
  if (ends_with(path, ".json")) {
    m.bytes = nn::Sequential::from_json_file(path).to_onnx(seed);
    m.graph = onnx_io::import_model_bytes(m.bytes, "", runtime::kernel_support);
  } else {
    m.graph = onnx_io::import_model_file(path, runtime::kernel_support);
  }
  ir::infer_types(*m.graph);
  return m;
}

// The model's one input and one output, checked against the features.
struct Head {
  ir::Value* input;
  ir::Value* output;
  ir::Dim batch;
  int64_t per_sample = 1;  // elements of one sample's output
};

Head check_head(ir::Graph& g, const std::string& path, const Tensor& features, int64_t batch, Loss loss) {
  ANVIL_CHECK(g.inputs().size() == 1 && g.outputs().size() == 1, ErrorKind::kInvalidArgument,
              "{}: a model to train has one input and one output, this one has {} and {}", path, g.inputs().size(),
              g.outputs().size());
  Head h{g.inputs()[0], g.outputs()[0], {}};
  const ir::Type& in = h.input->type;
  ANVIL_CHECK(in.is_tensor() && in.dtype() == DType::kFloat32 && in.has_shape() && in.rank() == features.rank(),
              ErrorKind::kInvalidArgument, "{}: the model takes {}, the feature rows are {} of {}", path, in.str(),
              dtype_name(features.dtype()), shape_str(features.shape()));
  for (int d = 1; d < in.rank(); ++d) {
    const ir::Dim& dim = in.dims()[static_cast<size_t>(d)];
    ANVIL_CHECK(!dim.is_known() || dim.value == features.dim(d), ErrorKind::kInvalidArgument,
                "{}: the model takes {}, the feature rows are {}", path, in.str(), shape_str(features.shape()));
  }
  h.batch = in.dims()[0];
  ANVIL_CHECK(!h.batch.is_known() || h.batch.value == batch, ErrorKind::kInvalidArgument,
              "{}: the model's input has a fixed batch of {}: train with --batch {} or export it with a dynamic "
              "batch axis", path, h.batch.value, h.batch.value);
  const ir::Type& out = h.output->type;
  ANVIL_CHECK(out.dtype() == DType::kFloat32 && out.has_shape() && out.rank() >= 1, ErrorKind::kInvalidArgument,
              "{}: the output must be float32 with a known rank, it is {}", path, out.str());
  const std::string head = h.output->producer ? h.output->producer->op_type : "";
  ANVIL_CHECK(loss == Loss::kMse || (head != "Softmax" && head != "LogSoftmax" && head != "Sigmoid"),
              ErrorKind::kInvalidArgument,
              "{}: the output comes from {}: training needs the logits before it (the loss applies it)", path, head);
  for (size_t d = 1; d < out.dims().size(); ++d) {
    ANVIL_CHECK(out.dims()[d].is_known(), ErrorKind::kInvalidArgument,
                "{}: the output's dimensions after the batch must be known, it is {}", path, out.str());
    h.per_sample *= out.dims()[d].value;
  }
  if (loss == Loss::kCrossEntropy)
    ANVIL_CHECK(out.rank() == 2, ErrorKind::kInvalidArgument,
                "{}: cross-entropy needs logits [N, C], the output is {}", path, out.str());
  return h;
}

// The labels as the loss wants them: int64 class indices checked against C,
// or float32 targets shaped [S, output sample shape...].
Tensor checked_targets(const Tensor& labels, Loss loss, const Head& h, int64_t samples) {
  ANVIL_CHECK(labels.rank() >= 1 && labels.dim(0) == samples, ErrorKind::kInvalidArgument,
              "{} feature rows but {} labels", samples, labels.rank() ? labels.dim(0) : 0);
  const bool integer = labels.dtype() == DType::kInt64 || labels.dtype() == DType::kInt32;
  if (loss == Loss::kCrossEntropy) {
    const int64_t classes = h.per_sample;
    ANVIL_CHECK(integer, ErrorKind::kInvalidArgument, "labels must be int64 or int32 class indices, got {}",
                dtype_name(labels.dtype()));
    ANVIL_CHECK(labels.rank() == 1, ErrorKind::kInvalidArgument,
                "labels must be one per sample (rank 1), got shape {}", shape_str(labels.shape()));
    Tensor out(DType::kInt64, labels.shape());
    for (int64_t i = 0; i < labels.numel(); ++i) {
      const int64_t v = integer_at(labels, i);
      ANVIL_CHECK(v >= 0 && v < classes, ErrorKind::kInvalidArgument,
                  "label {} of sample {} is out of range: the model has {} classes (0 to {})", v, i, classes,
                  classes - 1);
      out.data<int64_t>()[i] = v;
    }
    return out;
  }
  ANVIL_CHECK(integer || labels.dtype() == DType::kFloat32, ErrorKind::kInvalidArgument,
              "targets must be float32 or integers, got {}", dtype_name(labels.dtype()));
  ANVIL_CHECK(labels.numel() == samples * h.per_sample, ErrorKind::kInvalidArgument,
              "targets {} do not match the output {} per sample", shape_str(labels.shape()), h.output->type.str());
  Shape shape = h.output->type.shape_or_minus_one();
  shape[0] = samples;
  Tensor out(DType::kFloat32, shape);
  for (int64_t i = 0; i < labels.numel(); ++i) {
    const float v = integer ? static_cast<float>(integer_at(labels, i)) : labels.data<float>()[i];
    ANVIL_CHECK(std::isfinite(v) && (loss != Loss::kBce || (v >= 0 && v <= 1)), ErrorKind::kInvalidArgument,
                "target {} of element {} is {}", v, i,
                loss == Loss::kBce ? "outside [0, 1] (binary cross-entropy)" : "not finite");
    out.data<float>()[i] = v;
  }
  return out;
}

// Appends the loss over the output and a new input for the targets; returns the loss's name.
std::string add_loss(ir::Graph& g, Loss loss, const Head& h, ir::Value*& targets) {
  auto op = [&g](const std::string& type, std::vector<ir::Value*> in, ir::Attributes a = {}) {
    ir::Node* n = g.add_node(type, std::move(in), 1, g.unique_name("loss_" + type));
    n->opset = 17;
    n->attrs = std::move(a);
    return n->outputs[0];
  };
  const std::string name = g.unique_name("loss");
  ir::Value* x = h.output;
  ir::Value* value;
  if (loss == Loss::kCrossEntropy) {
    targets = g.add_input(g.unique_name("labels"), DType::kInt64, {-1});
    targets->type = ir::Type::tensor(DType::kInt64, ir::SymShape{h.batch});
    value = op("SoftmaxCrossEntropyLoss", {x, targets});
  } else {
    targets = g.add_input(g.unique_name("targets"), DType::kFloat32, {});
    ir::SymShape dims = x->type.dims();
    dims[0] = h.batch;
    targets->type = ir::Type::tensor(DType::kFloat32, dims);
    ir::Value* per_element;
    if (loss == Loss::kMse) {
      ir::Value* diff = op("Sub", {x, targets});
      per_element = op("Mul", {diff, diff});
    } else {  // softplus(x) - x t: the kernel computes softplus without overflow; its gradient is sigmoid(x) - t
      per_element = op("Sub", {op("Softplus", {x}), op("Mul", {x, targets})});
    }
    ir::Attributes mean;
    mean.set("keepdims", int64_t{0});
    value = op("ReduceMean", {per_element}, mean);
  }
  ir::Value* out = g.add_value(name);
  g.add_node_with_outputs("Identity", {value}, {out}, g.unique_name("loss"))->opset = 17;
  return name;
}

// Parameters: the float32 initializers of rank >= 1 that the output depends
// on, except those that are settings rather than weights: batch norms'
// running statistics (updated, not trained), dropout ratios, Pow's exponents
// and Clip's bounds. Scalars (rank 0) are constants of the graph's formulas.
std::vector<std::string> trainable_parameters(const ir::Graph& g, const ir::Value* output) {
  std::set<const ir::Value*> statistics;
  for (const auto& n : g.nodes()) {
    if (!n->domain.empty()) continue;
    std::vector<size_t> settings;
    if (n->op_type == "BatchNormalization") settings = {3, 4};
    if (n->op_type == "Dropout" || n->op_type == "Pow") settings = {1};
    if (n->op_type == "Clip") settings = {1, 2};
    for (size_t i : settings)
      if (n->input(i)) statistics.insert(n->input(i));
  }
  const auto consumers = g.consumers();
  std::set<const ir::Value*> reaching{output};  // values the output depends on, found backwards
  std::vector<const ir::Value*> todo{output};
  while (!todo.empty()) {
    const ir::Value* v = todo.back();
    todo.pop_back();
    if (!v->producer) continue;
    for (const ir::Value* in : v->producer->inputs)
      if (in && reaching.insert(in).second) todo.push_back(in);
  }
  std::vector<std::string> params;
  for (const auto& v : g.values())
    if (v->is_constant() && v->dtype() == DType::kFloat32 && v->constant->rank() >= 1 &&
        v->constant->numel() >= 1 && reaching.count(v.get()) && !statistics.count(v.get()))
      params.push_back(v->name);
  return params;
}

// Counts the right predictions of a batch: argmax for cross-entropy, the
// sign of each logit for binary cross-entropy.
int64_t right_predictions(Loss loss, const Tensor& out, const Tensor& targets) {
  int64_t right = 0;
  if (loss == Loss::kCrossEntropy) {
    const int64_t rows = out.dim(0), classes = out.numel() / std::max<int64_t>(rows, 1);
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = out.data<float>() + r * classes;
      right += std::max_element(row, row + classes) - row == targets.data<int64_t>()[r];
    }
  } else if (loss == Loss::kBce) {
    for (int64_t i = 0; i < out.numel(); ++i) right += (out.data<float>()[i] > 0) == (targets.data<float>()[i] > 0.5f);
  }
  return right;
}

train::Schedule make_schedule(const TrainOptions& options, int64_t batches) {
  train::Schedule schedule;
  schedule.kind = options.schedule;
  ANVIL_CHECK(schedule.kind == "constant" || schedule.kind == "step" || schedule.kind == "cosine",
              ErrorKind::kInvalidArgument, "unknown schedule '{}' (schedules: constant, step, cosine)", schedule.kind);
  schedule.total_steps = batches * options.epochs;
  schedule.step_size = std::max<int64_t>(1, schedule.total_steps / 3);
  return schedule;
}

train::OptimizerOptions optimizer_options(const TrainOptions& options) {
  train::OptimizerOptions opt;
  opt.kind = options.optimizer;
  opt.lr = options.lr;
  opt.momentum = options.momentum;
  opt.nesterov = options.nesterov;
  opt.weight_decay = options.weight_decay >= 0 ? options.weight_decay : (options.optimizer == "adamw" ? 0.01f : 0.f);
  opt.clip_norm = options.clip_norm;
  return opt;
}

// Everything a training run holds between epochs.
class Run {
 public:
  Run(const std::string& model_path, const Tensor& features, const Tensor& labels, const TrainOptions& options)
      : path_(model_path), options_(options), loss_(parse_loss(options.loss)) {
    Model model = load_model(model_path, options.seed);
    model_bytes_ = std::move(model.bytes);
    ir::Graph& g = *model.graph;
    const Head head = check_head(g, model_path, features, options.batch, loss_);
    targets_ = checked_targets(labels, loss_, head, features.dim(0));
    classes_ = head.per_sample;
    fixed_batch_ = head.batch.is_known();
    input_name_ = head.input->name;
    output_name_ = head.output->name;
    const std::vector<std::string> params = trainable_parameters(g, head.output);
    ANVIL_CHECK(!params.empty(), ErrorKind::kInvalidArgument, "{}: the model has no float32 weights to train",
                model_path);
    ir::Value* targets = nullptr;
    const std::string loss_name = add_loss(g, loss_, head, targets);
    targets_name_ = targets->name;
    mode_ = train::to_training_mode(g, options.seed);
    std::vector<std::string> extras = {output_name_};
    for (const auto& bn : mode_.batch_norms) {
      extras.push_back(bn.batch_mean);
      extras.push_back(bn.batch_var);
      running_[bn.mean] = bn.initial_mean.clone();
      running_[bn.var] = bn.initial_var.clone();
    }
    SessionOptions session;
    session.num_threads = options.threads;
    trainer_ = std::make_unique<train::Trainer>(std::move(model.graph), loss_name, params, optimizer_options(options),
                                                session, extras);
    trainer_->set_flush_denormals(options.flush_denormals);
  }

  const Tensor& targets() const { return targets_; }

  // The trained weights and running statistics, by initializer name.
  std::map<std::string, Tensor> weights() const {
    std::map<std::string, Tensor> w = running_;
    for (size_t k = 0; k < trainer_->parameters().size(); ++k)
      w[trainer_->parameter_names()[k]] = trainer_->parameters()[k];
    return w;
  }

  std::string trained_model() const {
    return model_bytes_.empty() ? onnx_io::model_with_initializers(path_, weights())
                                : onnx_io::model_bytes_with_initializers(model_bytes_, weights());
  }

  // Puts a checkpoint's weights, running statistics and optimizer state back.
  int resume(const train::LoadedCheckpoint& c) {
    const std::vector<std::string>& names = trainer_->parameter_names();
    ANVIL_CHECK(c.state.parameters == names, ErrorKind::kInvalidArgument,
                "{}: the checkpoint's parameters differ from the model's: is it the same model?", c.folder);
    std::unique_ptr<ir::Graph> saved = onnx_io::import_model_file(c.model_path, runtime::kernel_support);
    auto restore = [&](const std::string& name, Tensor& into) {
      const ir::Value* v = saved->find_value(name);
      ANVIL_CHECK(v && v->is_constant() && v->constant->dtype() == into.dtype() && v->constant->shape() == into.shape(),
                  ErrorKind::kInvalidArgument, "{}: '{}' is missing or has another shape", c.model_path, name);
      std::memcpy(into.raw(), v->constant->raw(), into.nbytes());
    };
    for (size_t k = 0; k < names.size(); ++k) restore(names[k], trainer_->mutable_parameters()[k]);
    for (auto& [name, t] : running_) restore(name, t);
    trainer_->mutable_optimizer().restore(c.state.steps, c.state.first, c.state.second);
    return c.state.epoch;
  }

  void checkpoint(int epoch, double loss) const {
    train::CheckpointState s;
    s.epoch = epoch;
    s.steps = trainer_->optimizer().steps();
    s.loss = loss;
    s.parameters = trainer_->parameter_names();
    s.first = trainer_->optimizer().first_moments();
    s.second = trainer_->optimizer().second_moments();
    train::save_checkpoint(options_.checkpoint_dir, trained_model(), s);
  }

  // One step on a batch; returns the loss and counts the right predictions.
  double step(const train::Batch& b, float lr, int64_t& right, RunProfile* profile) {
    std::map<std::string, Tensor> feed = {{input_name_, b.fields[0]}, {targets_name_, b.fields[1]}};
    if (!mode_.step_input.empty()) {  // the dropout masks' step: the same after a resume
      Tensor step(DType::kInt64, {});
      *step.data<int64_t>() = trainer_->optimizer().steps();
      feed[mode_.step_input] = step;
    }
    train::StepResult r = trainer_->step(feed, lr, profile);
    right += right_predictions(loss_, r.extra_outputs[0], b.fields[1]);
    update_running_statistics(r.extra_outputs);
    return r.loss;
  }

  int64_t predictions_per_sample() const { return loss_ == Loss::kCrossEntropy ? 1 : classes_; }
  bool has_accuracy() const { return loss_ != Loss::kMse; }
  bool fixed_batch() const { return fixed_batch_; }
  const train::Trainer& trainer() const { return *trainer_; }

 private:
  void update_running_statistics(const std::vector<Tensor>& extras) {
    for (size_t k = 0; k < mode_.batch_norms.size(); ++k) {
      const train::RunningStatistics& bn = mode_.batch_norms[k];
      const float m = bn.momentum;
      const Tensor& var = extras[2 + 2 * k];
      for (int64_t i = 0; i < var.numel(); ++i)
        ANVIL_CHECK(std::isfinite(var.data<float>()[i]), ErrorKind::kInvalidArgument,
                    "a BatchNormalization needs more than one value per channel in a batch (its running variance "
                    "is undefined): use a larger batch, or --drop-last for a last batch of one");
      for (const auto& [name, batch] : {std::pair{bn.mean, &extras[1 + 2 * k]}, {bn.var, &var}}) {
        Tensor& run = running_.at(name);
        for (int64_t i = 0; i < run.numel(); ++i)
          run.data<float>()[i] = run.data<float>()[i] * m + batch->data<float>()[i] * (1 - m);
      }
    }
  }

  std::string path_, model_bytes_;
  TrainOptions options_;
  Loss loss_;
  Tensor targets_;
  int64_t classes_ = 1;
  bool fixed_batch_ = false;
  std::string input_name_, output_name_, targets_name_;
  train::TrainingMode mode_;
  std::map<std::string, Tensor> running_;
  std::unique_ptr<train::Trainer> trainer_;
};

void check_options(const TrainOptions& o, const Tensor& features) {
  ANVIL_CHECK(o.epochs >= 1 && o.batch >= 1, ErrorKind::kInvalidArgument,
              "epochs and batch size must be >= 1, got {} and {}", o.epochs, o.batch);
  ANVIL_CHECK(o.workers >= 0 && o.workers <= 256 && o.prefetch >= 1, ErrorKind::kInvalidArgument,
              "workers must be in [0, 256] and prefetch >= 1, got {} and {}", o.workers, o.prefetch);
  ANVIL_CHECK(!o.resume || !o.checkpoint_dir.empty(), ErrorKind::kInvalidArgument,
              "resuming needs the checkpoint directory (--checkpoint DIR)");
  ANVIL_CHECK(features.dtype() == DType::kFloat32 || features.dtype() == DType::kUInt8, ErrorKind::kInvalidArgument,
              "features must be float32 or uint8, got {}", dtype_name(features.dtype()));
  ANVIL_CHECK(features.rank() >= 1, ErrorKind::kInvalidArgument, "features must have a sample axis, got a scalar");
  ANVIL_CHECK(features.dim(0) > 0, ErrorKind::kInvalidArgument, "the dataset is empty");
}

// Whether to profile this step: the full batches after the run's first step
// (which plans the graph), up to kMaxProfiledSteps of them, so that every
// profile has the same nodes and a long run's profiles stay small (a profile
// holds a few hundred bytes a node).
bool profiled(const TrainOptions& o, const train::Batch& b, int64_t steps_run, const std::vector<RunProfile>& done) {
  constexpr size_t kMaxProfiledSteps = 100;
  return o.profile && b.rows == o.batch && steps_run > 0 && done.size() < kMaxProfiledSteps;
}

}  // namespace

TrainResult train_classifier(const std::string& model_path, const Tensor& features, const Tensor& labels,
                             const TrainOptions& options, const std::function<void(const TrainProgress&)>& on_batch,
                             const std::function<void(const EpochReport&)>& on_epoch) {
  check_options(options, features);
  // Deterministic: OpenMP may not change team sizes between regions, so every
  // parallel loop splits its work the same way on every run.
  if (options.deterministic) omp_set_dynamic(0);
  Run run(model_path, features, labels, options);

  train::LoaderOptions lo;
  lo.batch_size = options.batch;
  lo.shuffle = options.shuffle;
  lo.seed = options.seed;
  lo.drop_last = options.drop_last || run.fixed_batch();  // a fixed batch cannot take a partial one
  lo.num_workers = options.workers;
  lo.worker_kind = options.worker_processes ? train::WorkerKind::kProcesses : train::WorkerKind::kThreads;
  lo.prefetch_factor = options.prefetch;
  lo.persistent_workers = true;
  lo.threads = options.threads;
  train::DataLoader loader(std::make_shared<train::TensorDataset>(features, run.targets()), lo);
  ANVIL_CHECK(loader.batches() > 0, ErrorKind::kInvalidArgument, "{} samples make no full batch of {}",
              features.dim(0), options.batch);
  const train::Schedule schedule = make_schedule(options, loader.batches());

  TrainResult result;
  result.stop_reason = "epochs";
  if (options.resume) {
    std::optional<train::LoadedCheckpoint> c = train::load_latest_checkpoint(options.checkpoint_dir);
    ANVIL_CHECK(c.has_value(), ErrorKind::kInvalidArgument, "{} holds no checkpoint to resume from",
                options.checkpoint_dir);
    result.resumed_from = run.resume(*c);
  }
  const double per_sample = static_cast<double>(run.predictions_per_sample());
  const int64_t first_step = run.trainer().optimizer().steps();
  for (int epoch = result.resumed_from + 1; epoch <= options.epochs; ++epoch) {
    loader.start_epoch(epoch - 1);
    const auto start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    int64_t right = 0, seen = 0;
    train::Batch b;
    auto wait_start = std::chrono::steady_clock::now();
    while (loader.next(b)) {
      const double wait_us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - wait_start).count();
      const float lr = schedule.lr_at(options.lr, run.trainer().optimizer().steps());
      RunProfile* profile = profiled(options, b, run.trainer().optimizer().steps() - first_step, result.step_profiles)
                                ? &result.step_profiles.emplace_back()
                                : nullptr;
      double loss;
      try {
        loss = run.step(b, lr, right, profile);
      } catch (const Error& e) {
        if (options.checkpoint_dir.empty() || epoch == 1) throw;  // no checkpoint was written yet
        throw Error(e.kind(), fmt::format("{} (the last good checkpoint, epoch {}, stays in {})", e.what(), epoch - 1,
                                          options.checkpoint_dir));
      }
      if (profile) {
        profile->nodes.push_back({"wait for the batch", "DataLoader", "", "", b.fields[0].shape(), profile->total_us,
                                  wait_us});
        profile->total_us += wait_us;
      }
      loss_sum += loss * static_cast<double>(b.rows);
      seen += b.rows;
      if (on_batch) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        on_batch({epoch, b.index + 1, loader.batches(), loss,
                  run.has_accuracy() ? static_cast<double>(right) / (static_cast<double>(seen) * per_sample)
                                     : std::numeric_limits<double>::quiet_NaN(),
                  static_cast<double>(seen) / std::max(s, 1e-9)});
      }
      wait_start = std::chrono::steady_clock::now();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EpochReport report{epoch, loss_sum / static_cast<double>(seen),
                       run.has_accuracy() ? static_cast<double>(right) / (static_cast<double>(seen) * per_sample)
                                          : std::numeric_limits<double>::quiet_NaN(),
                       static_cast<double>(seen) / seconds, run.trainer().optimizer().steps()};
    result.epochs.push_back(report);
    if (!options.checkpoint_dir.empty()) run.checkpoint(epoch, report.loss);
    if (on_epoch) on_epoch(report);
    if (options.until_accuracy > 0 && report.accuracy >= options.until_accuracy) {
      result.stop_reason = "accuracy";
      break;
    }
    if (options.until_loss > 0 && report.loss <= options.until_loss) {
      result.stop_reason = "loss";
      break;
    }
  }
  result.parameters = run.weights();
  result.trained_model = run.trained_model();
  return result;
}

void write_model_file(const std::string& bytes, const std::string& out_path) {
  const std::string tmp = out_path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    ANVIL_CHECK(out.good(), ErrorKind::kInvalidArgument, "cannot write '{}'", out_path);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ANVIL_CHECK(out.good(), ErrorKind::kInvalidArgument, "cannot write '{}'", out_path);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, out_path, ec);
  ANVIL_CHECK(!ec, ErrorKind::kInvalidArgument, "cannot write '{}': {}", out_path, ec.message());
}

void save_trained_model(const std::string& model_path, const std::map<std::string, Tensor>& parameters,
                        const std::string& out_path) {
  write_model_file(onnx_io::model_with_initializers(model_path, parameters), out_path);
}

std::pair<Tensor, Tensor> read_csv_data(const std::string& path, int label_column) {
  std::shared_ptr<train::TensorDataset> d = train::csv_dataset(path, label_column);
  return {d->features(), d->labels()};
}

}  // namespace anvil
