// Node attributes: the ONNX attribute kinds Anvil uses, without protobuf.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "anvil/tensor.h"
#include "ir/type.h"

namespace anvil::ir {

class Graph;
using GraphPtr = std::shared_ptr<Graph>;

// Graph attributes (If's branches, Loop's and Scan's bodies) own their
// subgraph; type attributes (Optional's `type`) are IR types.
using AttrValue = std::variant<int64_t, float, std::string, std::vector<int64_t>,
                               std::vector<float>, std::vector<std::string>, Tensor, GraphPtr,
                               std::vector<GraphPtr>, Type>;

class Attributes {
 public:
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  void set(const std::string& name, AttrValue v) { values_[name] = std::move(v); }
  void erase(const std::string& name) { values_.erase(name); }

  // Typed getters: return `fallback` when absent; throw kInvalidModel when the
  // attribute exists with another kind.
  int64_t get_int(const std::string& name, int64_t fallback) const;
  float get_float(const std::string& name, float fallback) const;
  std::string get_string(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> get_ints(const std::string& name, std::vector<int64_t> fallback = {}) const;
  std::vector<float> get_floats(const std::string& name, std::vector<float> fallback = {}) const;
  std::vector<std::string> get_strings(const std::string& name, std::vector<std::string> fallback = {}) const;
  const Tensor* get_tensor(const std::string& name) const;
  const Type* get_type(const std::string& name) const;
  // The subgraph attribute `name`, or nullptr.
  Graph* get_graph(const std::string& name) const;
  // Every subgraph held by these attributes (GRAPH and GRAPHS kinds).
  std::vector<Graph*> subgraphs() const;

  const std::map<std::string, AttrValue>& all() const { return values_; }

 private:
  std::map<std::string, AttrValue> values_;
};

}  // namespace anvil::ir
