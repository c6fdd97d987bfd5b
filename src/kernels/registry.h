// Kernel registry: each kernel file registers its factories with one macro.
//
// Backends are tried best first (kDnnl before kRef). A factory may return
// nullptr to decline a node it cannot handle (e.g. a dtype oneDNN lacks), and
// prepare() may throw Unsupported, in which case the planner falls back to the
// next backend. Constant folding asks for kRef only.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernel.h"

namespace anvil::kernels {

enum class Backend { kDnnl = 0, kRef = 1 };

using KernelFactory = std::function<std::unique_ptr<Kernel>(const ir::Node&)>;

struct KernelEntry {
  std::string op_type;
  std::string domain;
  Backend backend;
  KernelFactory factory;
};

// Why a node cannot run: kUnsupported (Anvil lacks the op or that version of
// it) or kInvalidModel (the op does not exist at the model's opset).
struct SupportProblem {
  ErrorKind kind;
  std::string message;
};

class Registry {
 public:
  static Registry& global();
  void add(KernelEntry entry);
  // The op versions (ONNX since_versions) the kernels of an ai.onnx op
  // implement. Without a call: the versions in effect from opset 7 to 17.
  void set_versions(const std::string& op_type, int min_version, int max_version);
  // nullopt when some kernel runs (domain, op) at the model's `opset`.
  std::optional<SupportProblem> check_support(const std::string& domain, const std::string& op_type, int opset) const;
  // Entries for (domain, op) sorted best backend first.
  std::vector<const KernelEntry*> find(const std::string& domain, const std::string& op_type) const;
  bool has_op(const std::string& domain, const std::string& op_type) const;
  std::vector<std::string> op_types() const;

 private:
  std::vector<KernelEntry> entries_;
  std::map<std::string, std::pair<int, int>> versions_;  // op -> [min, max] since_version
};

struct Registrar {
  Registrar(const char* op_type, Backend backend, KernelFactory factory, const char* domain = "") {
    Registry::global().add({op_type, domain, backend, std::move(factory)});
  }
};

#define ANVIL_CONCAT_INNER(a, b) a##b
#define ANVIL_CONCAT(a, b) ANVIL_CONCAT_INNER(a, b)
// Registers a factory for an op of the default ONNX domain.
#define ANVIL_REGISTER_KERNEL(op, backend, factory) \
  static ::anvil::kernels::Registrar ANVIL_CONCAT(anvil_reg_, __COUNTER__)(op, ::anvil::kernels::Backend::backend, factory)

// Declares the versions of an ai.onnx op its kernels implement (see Registry::set_versions).
struct VersionRegistrar {
  VersionRegistrar(const char* op_type, int min_version, int max_version) {
    Registry::global().set_versions(op_type, min_version, max_version);
  }
};
#define ANVIL_REGISTER_OP_VERSIONS(op, min_version, max_version) \
  static ::anvil::kernels::VersionRegistrar ANVIL_CONCAT(anvil_ver_, __COUNTER__)(op, min_version, max_version)

// Registers KernelClass, constructed from the node, for an op.
#define ANVIL_REGISTER_KERNEL_CLASS(op, backend, KernelClass) \
  ANVIL_REGISTER_KERNEL(op, backend, [](const ::anvil::ir::Node& n) -> std::unique_ptr<::anvil::kernels::Kernel> { \
    return std::make_unique<KernelClass>(n); })

}  // namespace anvil::kernels
