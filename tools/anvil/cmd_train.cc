// anvil train: train an ONNX model's weights, or a network from a JSON spec,
// on .npy or CSV data (softmax cross-entropy, binary cross-entropy or MSE),
// with a progress line, per-epoch reports, stopping rules, checkpoints and
// the trained model written as ONNX.
#include <unistd.h>  // first: it defines __GLIBC__ where that is the C library
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cmath>
#include <cstdio>
#include <fstream>

#include <fmt/format.h>

#include "anvil/error.h"
#include "anvil/tensor_io.h"
#include "anvil/train.h"
#include "commands.h"

namespace anvil::cli {

namespace {

struct TrainArgs {
  std::string model, data, labels, export_path;
  int label_column = -1;
  bool keep_denormals = false;
  TrainOptions options;
};

bool is_csv(const std::string& path) { return path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0; }

// Fails now, not after hours of training, when the trained model could not be written.
void check_writable(const std::string& path) {
  const std::string probe = path + ".tmp";
  {
    std::ofstream out(probe, std::ios::binary);
    if (!out) throw Error(ErrorKind::kInvalidArgument, "cannot write '" + path + "'");
  }
  std::remove(probe.c_str());
}

// Every step allocates batches and outputs of the same sizes. glibc maps
// blocks over 32 MiB afresh each time (a batch of 25,000 x 512 floats is 51
// MB) and returns them on free, so their pages fault in again every step;
// from the heap, kept, they are reused (batch 25,000: 17,000 fewer page
// faults and about 1.7% more samples/s on Zen 3). Where the heap cannot grow,
// glibc still falls back to mapping.
void keep_large_blocks() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

int train(TrainArgs& a) {
  keep_large_blocks();
  a.options.flush_denormals = !a.keep_denormals;
  if (!a.export_path.empty()) check_writable(a.export_path);
  if (is_csv(a.data) && !a.labels.empty())
    throw Error(ErrorKind::kInvalidArgument, "a CSV file holds its labels (--label-column): drop --labels");
  if (!is_csv(a.data) && a.labels.empty())
    throw Error(ErrorKind::kInvalidArgument, "--labels is required with .npy data");
  auto [features, labels] = is_csv(a.data) ? read_csv_data(a.data, a.label_column)
                                           : std::pair{read_tensor_file(a.data), read_tensor_file(a.labels)};
  const bool tty = isatty(STDERR_FILENO);
  fmt::print("training {} on {} samples: {} epochs, batch {}, {} (lr {}), loss {}\n", a.model,
             features.rank() ? features.dim(0) : 0, a.options.epochs, a.options.batch, a.options.optimizer,
             a.options.lr, a.options.loss);
  auto accuracy = [](double v) { return std::isnan(v) ? std::string() : fmt::format("  accuracy {:.2f}%", 100 * v); };
  auto on_batch = [&](const TrainProgress& p) {
    if (tty && (p.batch % 10 == 0 || p.batch == p.batches))
      fmt::print(stderr, "\repoch {} [{:<30}] {}/{}  loss {:.4f}{}  {:.0f} samples/s   ", p.epoch,
                 std::string(static_cast<size_t>(30 * p.batch / p.batches), '#'), p.batch, p.batches, p.loss,
                 accuracy(p.accuracy), p.samples_per_s);
  };
  auto on_epoch = [&](const EpochReport& r) {
    if (tty) fmt::print(stderr, "\r{:110}\r", "");
    fmt::print("epoch {:>3}  loss {:.4f}{}  {:.0f} samples/s\n", r.epoch, r.loss, accuracy(r.accuracy), r.samples_per_s);
    std::fflush(stdout);
  };
  TrainResult result = train_classifier(a.model, features, labels, a.options, on_batch, on_epoch);
  if (result.resumed_from) fmt::print("resumed after epoch {} from {}\n", result.resumed_from, a.options.checkpoint_dir);
  int64_t weights = 0;
  for (const auto& [name, t] : result.parameters) weights += t.numel();
  fmt::print("trained {} weights in {} tensors\n", weights, result.parameters.size());
  if (result.stop_reason != "epochs")
    fmt::print("stopped after epoch {}: the {} target is reached\n", result.epochs.back().epoch, result.stop_reason);
  if (!a.options.checkpoint_dir.empty()) fmt::print("checkpoints in {}\n", a.options.checkpoint_dir);
  if (a.options.profile) {
    if (result.step_profiles.empty())
      fmt::print("profile: no step to show (steps of a full batch after the first are profiled)\n");
    else
      print_profile(result.step_profiles, "step");
  }
  if (!a.export_path.empty()) {
    write_model_file(result.trained_model, a.export_path);
    fmt::print("trained model written to {}\n", a.export_path);
  }
  return 0;
}

}  // namespace

Command add_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  TrainOptions& o = a->options;
  app.add_option("--model", a->model,
                 "ONNX model (one input, one output), or a JSON spec of layers (.json, docs/training.md)")
      ->required();
  app.add_option("--data", a->data,
                 "features: .npy [S, ...] float32 or uint8 (scaled to [0, 1]), or a CSV file with a label column")
      ->required();
  app.add_option("--labels", a->labels, ".npy labels: [S] int64/int32 classes, or float32 targets (bce, mse)");
  app.add_option("--label-column", a->label_column, "CSV: the label's column (negative: from the end)");
  app.add_option("--loss", o.loss, "cross_entropy, bce (binary, with logits) or mse");
  app.add_option("--epochs", o.epochs, "passes over the data")->check(CLI::Range(1, 1000000));
  app.add_option("-b,--batch", o.batch, "samples per step")->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--optimizer", o.optimizer, "sgd, adam or adamw");
  app.add_option("--lr", o.lr, "learning rate");
  app.add_option("--momentum", o.momentum, "SGD momentum");
  app.add_flag("--nesterov", o.nesterov, "SGD with Nesterov momentum");
  app.add_option("--weight-decay", o.weight_decay, "L2 penalty, decoupled for adamw (default 0; 0.01 for adamw)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--clip-norm", o.clip_norm, "clip the gradients' global L2 norm to this (0: off)");
  app.add_option("--schedule", o.schedule, "learning-rate schedule: constant, step or cosine");
  app.add_option("--seed", o.seed, "seed of the shuffling, dropout masks and a JSON spec's initial weights");
  app.add_flag("--shuffle,!--no-shuffle", o.shuffle, "shuffle the samples each epoch (default: on)");
  app.add_flag("--drop-last", o.drop_last, "skip the last, partial batch of each epoch");
  app.add_option("--until-accuracy", o.until_accuracy, "stop after the epoch whose accuracy reaches this (0 to 1)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--until-loss", o.until_loss, "stop after the epoch whose mean loss falls to this")
      ->check(CLI::Range(0.0, 1e30));
  app.add_option("-t,--threads", o.threads, "threads (0: all cores)")->check(CLI::Range(0, 4096));
  app.add_option("--workers", o.workers, "data-loader workers (0: batches made between steps)")
      ->check(CLI::Range(0, 256));
  app.add_flag("--worker-processes", o.worker_processes, "fork()ed loader workers instead of threads");
  app.add_option("--prefetch", o.prefetch, "batches made ahead per worker")->check(CLI::Range(1, 1024));
  app.add_option("--checkpoint", o.checkpoint_dir, "write a checkpoint to this directory after every epoch");
  app.add_flag("--resume", o.resume, "continue from the latest checkpoint in --checkpoint");
  app.add_flag("--deterministic", o.deterministic,
               "bit-identical weights across reruns with the same --seed and --threads");
  app.add_flag("--keep-denormals", a->keep_denormals,
               "compute with denormal floats (below 1.2e-38) rather than as zero, as IEEE 754 has them: exact, "
               "and slow on x86 once gradients get that small");
  app.add_option("--export", a->export_path, "write the trained model to this ONNX file");
  app.add_flag("--profile", a->options.profile,
               "print the time of every node of a training step (forward, loss, gradients), the optimizer's update "
               "and the wait for data, the mean over the full batches after the first step (up to 100)");
  return [a] { return train(*a); };
}

}  // namespace anvil::cli
