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

// Shared helpers (common.cc).
Session load_session(const std::string& model, const SessionOptions& options, int batch = 1);
// Parses "-i NAME=FILE" arguments and reads the files.
std::map<std::string, Tensor> read_inputs(const std::vector<std::string>& specs);
// With no inputs given, seeded random tensors for every model input (symbolic dims: 1, or `batch`
// for dim 0); given inputs are returned as they are, so a missing one is reported by the session.
std::map<std::string, Tensor> random_inputs(const Session& session, std::map<std::string, Tensor> given,
                                            uint64_t seed, int batch = 1);
std::string format_bytes(size_t bytes);
// profile.cc: per-node and per-op tables, and a Chrome trace file.
void print_profile(const std::vector<RunProfile>& runs);
void write_chrome_trace(const std::vector<RunProfile>& runs, const std::string& path);
size_t peak_rss_bytes();

}  // namespace anvil::cli
