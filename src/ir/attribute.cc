#include "ir/attribute.h"

#include "core/check.h"

namespace anvil::ir {

namespace {
template <typename T>
const T* get_as(const std::map<std::string, AttrValue>& m, const std::string& name, const char* kind) {
  auto it = m.find(name);
  if (it == m.end()) return nullptr;
  const T* p = std::get_if<T>(&it->second);
  ANVIL_CHECK(p, ErrorKind::kInvalidModel, "attribute '{}' must be {}", name, kind);
  return p;
}
}  // namespace

int64_t Attributes::get_int(const std::string& name, int64_t fallback) const {
  const int64_t* p = get_as<int64_t>(values_, name, "an int");
  return p ? *p : fallback;
}

float Attributes::get_float(const std::string& name, float fallback) const {
  auto it = values_.find(name);
  if (it != values_.end())
    if (const int64_t* i = std::get_if<int64_t>(&it->second)) return static_cast<float>(*i);
  const float* p = get_as<float>(values_, name, "a float");
  return p ? *p : fallback;
}

std::string Attributes::get_string(const std::string& name, const std::string& fallback) const {
  const std::string* p = get_as<std::string>(values_, name, "a string");
  return p ? *p : fallback;
}

std::vector<int64_t> Attributes::get_ints(const std::string& name, std::vector<int64_t> fallback) const {
  const auto* p = get_as<std::vector<int64_t>>(values_, name, "a list of ints");
  return p ? *p : fallback;
}

std::vector<float> Attributes::get_floats(const std::string& name, std::vector<float> fallback) const {
  const auto* p = get_as<std::vector<float>>(values_, name, "a list of floats");
  return p ? *p : fallback;
}

std::vector<std::string> Attributes::get_strings(const std::string& name, std::vector<std::string> fallback) const {
  const auto* p = get_as<std::vector<std::string>>(values_, name, "a list of strings");
  return p ? *p : fallback;
}

const Tensor* Attributes::get_tensor(const std::string& name) const {
  return get_as<Tensor>(values_, name, "a tensor");
}

const Type* Attributes::get_type(const std::string& name) const { return get_as<Type>(values_, name, "a type"); }

Graph* Attributes::get_graph(const std::string& name) const {
  const GraphPtr* p = get_as<GraphPtr>(values_, name, "a graph");
  return p ? p->get() : nullptr;
}

std::vector<Graph*> Attributes::subgraphs() const {
  std::vector<Graph*> out;
  for (const auto& [name, v] : values_) {
    if (const GraphPtr* g = std::get_if<GraphPtr>(&v)) out.push_back(g->get());
    if (const auto* gs = std::get_if<std::vector<GraphPtr>>(&v))
      for (const GraphPtr& g : *gs) out.push_back(g.get());
  }
  return out;
}

}  // namespace anvil::ir
