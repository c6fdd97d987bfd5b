// anvil::train_classifier: an ONNX classifier's initializers trained with
// softmax cross-entropy on in-memory data (include/anvil/train.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <set>

#include "anvil/train.h"
#include "core/check.h"
#include "ir/schema.h"
#include "onnx/importer.h"
#include "runtime/kernel_support.h"
#include "train/trainer.h"

namespace anvil {

namespace {

// Labels as int64, each checked against the class count.
Tensor checked_labels(const Tensor& labels, int64_t classes) {
  ANVIL_CHECK(labels.dtype() == DType::kInt64 || labels.dtype() == DType::kInt32, ErrorKind::kInvalidArgument,
              "labels must be int64 or int32, got {}", dtype_name(labels.dtype()));
  ANVIL_CHECK(labels.rank() == 1, ErrorKind::kInvalidArgument, "labels must be one per sample (rank 1), got shape {}",
              shape_str(labels.shape()));
  Tensor out(DType::kInt64, labels.shape());
  for (int64_t i = 0; i < labels.numel(); ++i) {
    const int64_t v = labels.dtype() == DType::kInt64 ? labels.data<int64_t>()[i] : labels.data<int32_t>()[i];
    ANVIL_CHECK(v >= 0 && v < classes, ErrorKind::kInvalidArgument,
                "label {} of sample {} is out of range: the model has {} classes (0 to {})", v, i, classes,
                classes - 1);
    out.data<int64_t>()[i] = v;
  }
  return out;
}

// Rows `order[begin, end)` of `features`, as the float32 batch the model takes.
Tensor feature_batch(const Tensor& features, const std::vector<int64_t>& order, int64_t begin, int64_t end) {
  Shape shape = features.shape();
  shape[0] = end - begin;
  Tensor out(DType::kFloat32, shape);
  const int64_t row = features.dim(0) ? features.numel() / features.dim(0) : 0;
  for (int64_t r = begin; r < end; ++r) {
    float* dst = out.data<float>() + (r - begin) * row;
    const int64_t src = order[static_cast<size_t>(r)] * row;
    if (features.dtype() == DType::kUInt8) {
      for (int64_t i = 0; i < row; ++i) dst[i] = static_cast<float>(features.data<uint8_t>()[src + i]) / 255.f;
    } else {
      std::memcpy(dst, features.data<float>() + src, static_cast<size_t>(row) * sizeof(float));
    }
  }
  return out;
}

}  // namespace

TrainResult train_classifier(const std::string& model_path, const Tensor& features, const Tensor& labels,
                             const TrainOptions& options, const std::function<void(const TrainProgress&)>& on_batch,
                             const std::function<void(const EpochReport&)>& on_epoch) {
  ANVIL_CHECK(options.epochs >= 1 && options.batch >= 1, ErrorKind::kInvalidArgument,
              "epochs and batch size must be >= 1, got {} and {}", options.epochs, options.batch);
  ANVIL_CHECK(features.dtype() == DType::kFloat32 || features.dtype() == DType::kUInt8, ErrorKind::kInvalidArgument,
              "features must be float32 or uint8, got {}", dtype_name(features.dtype()));
  ANVIL_CHECK(features.rank() >= 1, ErrorKind::kInvalidArgument, "features must have a sample axis, got a scalar");
  ANVIL_CHECK(features.dim(0) > 0, ErrorKind::kInvalidArgument, "the dataset is empty");
  ANVIL_CHECK(labels.rank() >= 1 && labels.dim(0) == features.dim(0), ErrorKind::kInvalidArgument,
              "{} feature rows but {} labels", features.dim(0), labels.rank() ? labels.dim(0) : 0);

  std::unique_ptr<ir::Graph> graph = onnx_io::import_model_file(model_path, runtime::kernel_support);
  ir::infer_types(*graph);
  ANVIL_CHECK(graph->inputs().size() == 1 && graph->outputs().size() == 1, ErrorKind::kInvalidArgument,
              "{}: a classifier to train has one input and one output (the logits), this model has {} and {}",
              model_path, graph->inputs().size(), graph->outputs().size());
  ir::Value* input = graph->inputs()[0];
  ir::Value* logits = graph->outputs()[0];
  const ir::Type& in = input->type;
  ANVIL_CHECK(in.is_tensor() && in.dtype() == DType::kFloat32 && in.has_shape() && in.rank() == features.rank(),
              ErrorKind::kInvalidArgument, "{}: the model takes {}, the feature rows are {} of {}", model_path,
              in.str(), dtype_name(features.dtype()), shape_str(features.shape()));
  for (int d = 1; d < in.rank(); ++d) {
    const ir::Dim& dim = in.dims()[static_cast<size_t>(d)];
    ANVIL_CHECK(!dim.is_known() || dim.value == features.dim(d), ErrorKind::kInvalidArgument,
                "{}: the model takes {}, the feature rows are {}", model_path, in.str(), shape_str(features.shape()));
  }
  const ir::Dim batch_dim = in.dims()[0];
  ANVIL_CHECK(!batch_dim.is_known() || batch_dim.value == options.batch, ErrorKind::kInvalidArgument,
              "{}: the model's input has a fixed batch of {}: train with --batch {} or export it with a dynamic "
              "batch axis", model_path, batch_dim.value, batch_dim.value);
  ANVIL_CHECK(logits->dtype() == DType::kFloat32, ErrorKind::kInvalidArgument,
              "{}: the output (the logits) must be float32, it is {}", model_path, logits->type.str());
  const std::string head = logits->producer ? logits->producer->op_type : "";
  ANVIL_CHECK(head != "Softmax" && head != "LogSoftmax" && head != "Sigmoid", ErrorKind::kInvalidArgument,
              "{}: the output comes from {}: training needs the logits before it (the loss applies the softmax)",
              model_path, head);
  ANVIL_CHECK(logits->type.has_shape() && logits->type.rank() == 2 && logits->type.dims()[1].is_known(),
              ErrorKind::kInvalidArgument, "{}: the output must be logits [N, C] with C known, it is {}", model_path,
              logits->type.str());
  const int64_t classes = logits->type.dims()[1].value;
  const Tensor targets = checked_labels(labels, classes);

  // Parameters: the float32 initializers of more than one element that the
  // logits depend on (an unused one is left alone).
  const auto consumers = graph->consumers();
  auto reaches_logits = [&](const ir::Value* start) {
    std::vector<const ir::Value*> todo{start};
    std::set<const ir::Value*> seen{start};
    while (!todo.empty()) {
      const ir::Value* v = todo.back();
      todo.pop_back();
      if (v == logits) return true;
      auto it = consumers.find(v);
      if (it == consumers.end()) continue;
      for (const ir::Node* n : it->second)
        for (const ir::Value* o : n->outputs)
          if (o && seen.insert(o).second) todo.push_back(o);
    }
    return false;
  };
  std::vector<std::string> params;
  for (const auto& v : graph->values())
    if (v->is_constant() && v->dtype() == DType::kFloat32 && v->constant->numel() > 1 && reaches_logits(v.get()))
      params.push_back(v->name);
  ANVIL_CHECK(!params.empty(), ErrorKind::kInvalidArgument, "{}: the model has no float32 weights to train",
              model_path);

  ir::Value* label_input = graph->add_input(graph->unique_name("labels"), DType::kInt64, {-1});
  label_input->type = ir::Type::tensor(DType::kInt64, ir::SymShape{batch_dim});
  const std::string loss_name = graph->unique_name("loss");
  graph->add_node_with_outputs("SoftmaxCrossEntropyLoss", {logits, label_input}, {graph->add_value(loss_name)})->opset =
      17;
  train::OptimizerOptions opt;
  opt.kind = options.optimizer;
  opt.lr = options.lr;
  opt.momentum = options.momentum;
  opt.nesterov = options.nesterov;
  opt.weight_decay = options.weight_decay >= 0 ? options.weight_decay : (options.optimizer == "adamw" ? 0.01f : 0.f);
  opt.clip_norm = options.clip_norm;
  SessionOptions session;
  session.num_threads = options.threads;
  train::Trainer trainer(std::move(graph), loss_name, params, opt, session, {logits->name});

  const int64_t samples = features.dim(0);
  const bool drop_last = options.drop_last || batch_dim.is_known();
  const int64_t batches = drop_last ? samples / options.batch : (samples + options.batch - 1) / options.batch;
  ANVIL_CHECK(batches > 0, ErrorKind::kInvalidArgument, "{} samples make no full batch of {}", samples,
              options.batch);
  train::Schedule schedule;
  schedule.kind = options.schedule;
  ANVIL_CHECK(schedule.kind == "constant" || schedule.kind == "step" || schedule.kind == "cosine",
              ErrorKind::kInvalidArgument, "unknown schedule '{}' (schedules: constant, step, cosine)", schedule.kind);
  schedule.total_steps = batches * options.epochs;
  schedule.step_size = std::max<int64_t>(1, schedule.total_steps / 3);

  TrainResult result;
  result.stop_reason = "epochs";
  std::vector<int64_t> order(static_cast<size_t>(samples));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(options.seed);
  for (int epoch = 1; epoch <= options.epochs; ++epoch) {
    if (options.shuffle) std::shuffle(order.begin(), order.end(), rng);
    const auto start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    int64_t right = 0, seen = 0;
    for (int64_t b = 0; b < batches; ++b) {
      const int64_t begin = b * options.batch, end = std::min(samples, begin + options.batch);
      Tensor y(DType::kInt64, {end - begin});
      for (int64_t r = begin; r < end; ++r) y.data<int64_t>()[r - begin] = targets.data<int64_t>()[order[static_cast<size_t>(r)]];
      const float lr = schedule.lr_at(options.lr, trainer.optimizer().steps());
      train::StepResult step = trainer.step({{input->name, feature_batch(features, order, begin, end)},
                                             {label_input->name, y}}, lr);
      const Tensor& out = step.extra_outputs[0];
      for (int64_t r = 0; r < end - begin; ++r) {
        const float* row = out.data<float>() + r * classes;
        right += std::max_element(row, row + classes) - row == y.data<int64_t>()[r];
      }
      loss_sum += step.loss * static_cast<double>(end - begin);
      seen += end - begin;
      if (on_batch) on_batch({epoch, b + 1, batches, step.loss});
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EpochReport report{epoch, loss_sum / static_cast<double>(seen), static_cast<double>(right) / static_cast<double>(seen),
                       static_cast<double>(seen) / seconds, trainer.optimizer().steps()};
    result.epochs.push_back(report);
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
  for (size_t k = 0; k < params.size(); ++k) result.parameters[trainer.parameter_names()[k]] = trainer.parameters()[k];
  return result;
}

void save_trained_model(const std::string& model_path, const std::map<std::string, Tensor>& parameters,
                        const std::string& out_path) {
  const std::string bytes = onnx_io::model_with_initializers(model_path, parameters);
  // Written beside it and renamed: a failed write never leaves a truncated model (even over the input).
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

}  // namespace anvil
