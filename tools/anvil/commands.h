// The anvil command's subcommands; each file adds its options to the CLI11 app
// and returns the function that runs it.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "anvil/session.h"

namespace anvil::cli {

using Command = std::function<int()>;

Command add_info(CLI::App& app);
Command add_run(CLI::App& app);
Command add_bench(CLI::App& app);
Command add_conformance(CLI::App& app);
Command add_inspect(CLI::App& app);
Command add_optimize(CLI::App& app);
Command add_serve(CLI::App& app);
Command add_train(CLI::App& app);

// Shared helpers (common.cc).
Session load_session(const std::string& model, const SessionOptions& options, int batch = 1);
// Parses "-i NAME=FILE" arguments and reads the files.
std::map<std::string, Tensor> read_inputs(const Session& session, const std::vector<std::string>& specs);
// With no inputs given, seeded random tensors for every model input (symbolic dims: 1, or `batch`
// for dim 0); given inputs are returned as they are, so a missing one is reported by the session.
// `shapes` ("NAME=1x128", from --shape) fix the shape of named inputs.
std::map<std::string, Tensor> random_inputs(const Session& session, std::map<std::string, Tensor> given,
                                            uint64_t seed, int batch = 1,
                                            const std::vector<std::string>& shapes = {});
// The input tensors of a case folder: NAME.npy, or .pb files named by their
// TensorProto name (ONNX test_data_set_N folders: input_0.pb, ...).
// The inputs of a case folder (.npy, or .pb named input_K.pb like ONNX's test
// data, read as the model's K-th input's kind: tensor, sequence or optional).
std::map<std::string, Tensor> read_case_inputs(const Session& session, const std::string& dir);
std::string format_bytes(size_t bytes);
// --streams: "auto" (0) or a positive count; throws anvil::Error otherwise.
int parse_streams(const std::string& text);
// --tune and --tune-cache FILE (SessionOptions::tune, tune_cache).
void add_tune_options(CLI::App& app, bool* tune, std::string* cache);
// "tuning: N nodes timed, M from the cache FILE" when the session tunes.
void print_tuning(const Session& session);
// profile.cc: per-node and per-op tables, and a Chrome trace file.
void print_profile(const std::vector<RunProfile>& runs, const char* unit = "run");
void write_chrome_trace(const std::vector<RunProfile>& runs, const std::string& path);
size_t peak_rss_bytes();

}  // namespace anvil::cli
