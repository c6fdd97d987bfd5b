// Kernel registry, keyed by (domain, op, op versions, input dtypes, backend).
//
// Each kernel file registers its factories with one macro, saying which input
// dtypes the kernel takes:
//
//   ANVIL_REGISTER_KERNEL_TYPED("Conv", kDnnl, make_conv, {kFloat32Only});
//
// The planner selects, per node, the entries whose versions and dtypes match
// the node, best backend first (kDnnl, kVec, kRef). A factory may still return
// nullptr to decline a node for an attribute it cannot handle, and prepare()
// may throw Unsupported (a shape oneDNN lacks); the planner then falls back
// to the next entry. Constant folding asks for kRef only.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype_set.h"
#include "kernels/kernel.h"

namespace anvil::kernels {

// Best first: oneDNN, then Anvil's own vectorized kernels (kernels/vec/), then
// the reference kernels that run every case.
enum class Backend { kDnnl = 0, kVec = 1, kRef = 2 };

using KernelFactory = std::function<std::unique_ptr<Kernel>(const ir::Node&)>;

const char* backend_name(Backend backend);

// The input dtypes a kernel takes: masks[i] (a DTypeSet) for input i, the last
// mask for any further inputs (variadic ops). Empty: the kernel checks dtypes itself.
struct InputTypes {
  std::vector<unsigned> masks;
  bool accepts(const std::vector<TensorType>& types) const;
  std::string describe() const;  // "(float32, float32, float32...)"
};

struct KernelEntry {
  std::string op_type;
  std::string domain;
  Backend backend;
  KernelFactory factory;
  InputTypes input_types;
  // The op versions (ONNX since_versions) this entry implements; 0 and 0:
  // every version the op's registration declares (Registry::set_versions).
  int min_version = 0;
  int max_version = 0;
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
  // Entries that run `node` (its op version at node.opset) on inputs of these
  // types, best backend first. Throws Unsupported, naming the node, the dtypes
  // it has and those Anvil's kernels take, when none does.
  std::vector<const KernelEntry*> select(const ir::Node& node, const std::vector<TensorType>& types) const;
  bool has_op(const std::string& domain, const std::string& op_type) const;
  std::vector<std::string> op_types() const;
  // The reference backend's kernel for `node` (fused ops' reference kernels
  // run the op they extend through it); never null: every op has one.
  std::unique_ptr<Kernel> make_reference(const ir::Node& node) const;

 private:
  std::vector<KernelEntry> entries_;
  std::map<std::string, std::pair<int, int>> versions_;  // op -> [min, max] since_version
};

struct Registrar {
  Registrar(const char* op_type, Backend backend, KernelFactory factory, const char* domain = "",
            InputTypes input_types = {}) {
    Registry::global().add({op_type, domain, backend, std::move(factory), std::move(input_types)});
  }
};

#define ANVIL_CONCAT_INNER(a, b) a##b
#define ANVIL_CONCAT(a, b) ANVIL_CONCAT_INNER(a, b)
// Registers a factory for an op of the default ONNX domain.
#define ANVIL_REGISTER_KERNEL(op, backend, factory) \
  static ::anvil::kernels::Registrar ANVIL_CONCAT(anvil_reg_, __COUNTER__)(op, ::anvil::kernels::Backend::backend, factory)
// Registers a factory whose kernel takes the input dtypes `...` (an InputTypes initializer).
#define ANVIL_REGISTER_KERNEL_TYPED(op, backend, factory, ...)                                                   \
  static ::anvil::kernels::Registrar ANVIL_CONCAT(anvil_reg_, __COUNTER__)(op, ::anvil::kernels::Backend::backend, \
                                                                          factory, "", ::anvil::kernels::InputTypes{__VA_ARGS__})

// Declares the versions of an ai.onnx op its kernels implement (see Registry::set_versions).
struct VersionRegistrar {
  VersionRegistrar(const char* op_type, int min_version, int max_version) {
    Registry::global().set_versions(op_type, min_version, max_version);
  }
};
#define ANVIL_REGISTER_OP_VERSIONS(op, min_version, max_version) \
  static ::anvil::kernels::VersionRegistrar ANVIL_CONCAT(anvil_ver_, __COUNTER__)(op, min_version, max_version)

// Registers KernelClass, constructed from the node, for an op.
template <typename KernelClass>
KernelFactory factory_of() {
  return [](const ir::Node& n) -> std::unique_ptr<Kernel> { return std::make_unique<KernelClass>(n); };
}
#define ANVIL_REGISTER_KERNEL_CLASS(op, backend, KernelClass) \
  ANVIL_REGISTER_KERNEL(op, backend, ::anvil::kernels::factory_of<KernelClass>())
#define ANVIL_REGISTER_KERNEL_CLASS_TYPED(op, backend, KernelClass, ...) \
  ANVIL_REGISTER_KERNEL_TYPED(op, backend, ::anvil::kernels::factory_of<KernelClass>(), __VA_ARGS__)

}  // namespace anvil::kernels
