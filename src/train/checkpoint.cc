#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "anvil/tensor_io.h"
#include "core/check.h"

namespace anvil::train {

namespace fs = std::filesystem;

namespace {

// Flushes a file's or a folder's contents to the disk, so a rename that
// follows never publishes data a power loss could still take back.
void sync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ANVIL_CHECK(fd >= 0, ErrorKind::kInvalidArgument, "cannot open '{}' to sync it: {}", path.string(),
              std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  ANVIL_CHECK(rc == 0, ErrorKind::kInvalidArgument, "cannot sync '{}': {}", path.string(), std::strerror(err));
}

void write_file(const fs::path& path, const std::string& bytes) {
  {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ANVIL_CHECK(out.good(), ErrorKind::kInvalidArgument, "cannot write '{}'", path.string());
  }
  sync_path(path);
}

// "epoch-N" with N digits only: the checkpoint folders this module writes.
std::optional<int> checkpoint_epoch(const std::string& name) {
  if (name.size() < 7 || name.size() > 15 || name.rfind("epoch-", 0) != 0) return std::nullopt;
  int epoch = 0;
  for (size_t i = 6; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    epoch = epoch * 10 + (name[i] - '0');
    if (epoch > 100000000) return std::nullopt;
  }
  return epoch;
}

std::string read_small_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  ANVIL_CHECK(in.good(), ErrorKind::kInvalidArgument, "cannot read '{}'", path.string());
  ANVIL_CHECK(in.tellg() <= (16 << 20), ErrorKind::kInvalidArgument, "'{}' is too large for a checkpoint's state",
              path.string());
  in.seekg(0);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

fs::path moment_path(const fs::path& folder, const char* which, size_t k) {
  return folder / "optimizer" / (std::string(which) + "-" + std::to_string(k) + ".npy");
}

// Replaces `path` by a file holding `text`, atomically (rename over it).
void replace_file(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  write_file(tmp, text);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  ANVIL_CHECK(!ec, ErrorKind::kInvalidArgument, "cannot write '{}': {}", path.string(), ec.message());
}

}  // namespace

void save_checkpoint(const std::string& dir, const std::string& model_bytes, const CheckpointState& state) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  ANVIL_CHECK(!ec, ErrorKind::kInvalidArgument, "cannot create the checkpoint directory '{}': {}", dir, ec.message());
  const std::string name = "epoch-" + std::to_string(state.epoch);
  const fs::path staging = fs::path(dir) / ("." + name + ".tmp"), folder = fs::path(dir) / name;
  fs::remove_all(staging, ec);
  fs::create_directories(staging / "optimizer", ec);
  ANVIL_CHECK(!ec, ErrorKind::kInvalidArgument, "cannot write in '{}': {}", dir, ec.message());

  write_file(staging / "model.onnx", model_bytes);
  for (size_t k = 0; k < state.parameters.size(); ++k) {
    if (!state.first[k].empty()) write_tensor_npy(moment_path(staging, "first", k).string(), state.first[k]);
    if (!state.second[k].empty()) write_tensor_npy(moment_path(staging, "second", k).string(), state.second[k]);
  }
  nlohmann::json meta = {{"format", 1}, {"epoch", state.epoch}, {"steps", state.steps}, {"loss", state.loss},
                         {"parameters", state.parameters}};
  write_file(staging / "state.json", meta.dump(1));
  sync_path(staging / "optimizer");
  sync_path(staging);

  fs::remove_all(folder, ec);
  fs::rename(staging, folder, ec);
  ANVIL_CHECK(!ec, ErrorKind::kInvalidArgument, "cannot write '{}': {}", folder.string(), ec.message());
  sync_path(dir);
  replace_file(fs::path(dir) / "latest", name + "\n");
  sync_path(dir);
  // Keep this one and the one before it.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::optional<int> epoch = checkpoint_epoch(entry.path().filename().string());
    if (epoch && *epoch < state.epoch - 1) fs::remove_all(entry.path(), ec);
  }
}

std::optional<LoadedCheckpoint> load_latest_checkpoint(const std::string& dir) {
  const fs::path latest = fs::path(dir) / "latest";
  std::error_code ec;
  if (!fs::exists(latest, ec)) {
    ANVIL_CHECK(!ec, ErrorKind::kInvalidArgument, "cannot read '{}': {}", latest.string(), ec.message());
    return std::nullopt;
  }
  std::string name = read_small_file(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
  ANVIL_CHECK(checkpoint_epoch(name).has_value(), ErrorKind::kInvalidArgument,
              "{}: 'latest' does not name a checkpoint ('{}')", dir, name.substr(0, 64));
  LoadedCheckpoint c;
  const fs::path folder = fs::path(dir) / name;
  c.folder = folder.string();
  c.model_path = (folder / "model.onnx").string();
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(read_small_file(folder / "state.json"));
    // Integers only, in range: a float or a huge value would be undefined to convert.
    const auto& epoch = meta.at("epoch");
    const auto& steps = meta.at("steps");
    ANVIL_CHECK(epoch.is_number_integer() && steps.is_number_integer() && epoch.get<int64_t>() >= 1 &&
                    epoch.get<int64_t>() <= 1000000 && steps.get<int64_t>() >= 0 &&
                    steps.get<int64_t>() <= (int64_t{1} << 53),
                ErrorKind::kInvalidArgument, "{}: state.json has epoch {} and steps {}", c.folder, epoch.dump(),
                steps.dump());
    c.state.epoch = static_cast<int>(epoch.get<int64_t>());
    c.state.steps = steps.get<int64_t>();
    c.state.loss = meta.at("loss").is_number() ? meta.at("loss").get<double>() : 0.0;
    c.state.parameters = meta.at("parameters").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::kInvalidArgument, "{}: state.json is damaged: {}", c.folder, e.what());
  }
  ANVIL_CHECK(c.state.parameters.size() <= 1000000, ErrorKind::kInvalidArgument, "{}: state.json lists {} parameters",
              c.folder, c.state.parameters.size());
  for (size_t k = 0; k < c.state.parameters.size(); ++k) {
    const fs::path first = moment_path(folder, "first", k), second = moment_path(folder, "second", k);
    c.state.first.push_back(fs::exists(first, ec) ? read_tensor_npy(first.string()) : Tensor());
    c.state.second.push_back(fs::exists(second, ec) ? read_tensor_npy(second.string()) : Tensor());
  }
  return c;
}

}  // namespace anvil::train
