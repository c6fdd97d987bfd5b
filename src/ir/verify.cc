#include "ir/verify.h"

#include <cstdlib>
#include <set>

#include "core/check.h"

namespace anvil::ir {

namespace {

class Verifier {
 public:
  Verifier(ErrorKind kind, const std::string& stage) : kind_(kind), stage_(stage) {}

  void graph(const Graph& g) {
    std::set<const Value*> owned;
    for (const auto& v : g.values()) owned.insert(v.get());
    std::set<const Value*> defined;
    for (const Value* v : g.inputs()) {
      check(owned.count(v), "graph input '{}' does not belong to graph '{}'", v->name, g.name);
      defined.insert(v);
    }
    for (const auto& v : g.values()) {
      if (v->is_constant()) {
        check(!v->producer, "constant '{}' also has a producer", v->name);
        check(v->type == Type::tensor(v->constant->dtype(), v->constant->shape()),
              "constant '{}' is typed {} but holds a {} tensor of shape {}", v->name, v->type.str(),
              dtype_name(v->constant->dtype()), shape_str(v->constant->shape()));
        defined.insert(v.get());
      }
      if (v->is_capture) defined.insert(v.get());
    }
    for (const Graph::Capture& c : g.captures) {
      check(c.inner->is_capture && owned.count(c.inner), "capture '{}' is not a capture value of graph '{}'",
            c.inner->name, g.name);
      check(g.owner && c.implicit_index < g.owner->num_implicit_inputs,
            "capture '{}' maps to implicit input {} of a node that has {}", c.inner->name, c.implicit_index,
            g.owner ? g.owner->num_implicit_inputs : 0);
    }
    for (const auto& n : g.nodes()) {
      if (n->dead) continue;
      node(g, *n, owned, defined);
    }
    for (const Value* v : g.outputs())
      check(v && defined.count(v), "graph output '{}' of graph '{}' is never defined", v ? v->name : "?", g.name);
  }

 private:
  void node(const Graph& g, const Node& n, const std::set<const Value*>& owned, std::set<const Value*>& defined) {
    check(n.num_implicit_inputs <= n.inputs.size(), "{} has {} implicit inputs but {} inputs", n.describe(),
          n.num_implicit_inputs, n.inputs.size());
    for (const Value* v : n.inputs) {
      if (!v) continue;
      check(owned.count(v), "{} reads '{}', a value of another graph (outer values are read through captures)",
            n.describe(), v->name);
      check(defined.count(v), "{} reads '{}' before it is defined", n.describe(), v->name);
    }
    for (const Value* v : n.outputs) {
      if (!v) continue;
      check(owned.count(v), "{} writes '{}', a value of another graph", n.describe(), v->name);
      check(v->producer == &n, "'{}' is an output of {} but names another producer", v->name, n.describe());
      check(!defined.count(v), "'{}' is defined twice (the second time by {})", v->name, n.describe());
      defined.insert(v);
    }
    for (Graph* sub : n.attrs.subgraphs()) {
      check(sub->parent == &g && sub->owner == &n, "a subgraph of {} does not name it as its owner", n.describe());
      graph(*sub);
    }
  }

  template <typename... Args>
  void check(bool ok, fmt::format_string<Args...> f, Args&&... args) {
    if (!ok) throw Error(kind_, "IR check failed " + stage_ + ": " + fmt::format(f, std::forward<Args>(args)...));
  }

  ErrorKind kind_;
  std::string stage_;
};

}  // namespace

void verify(const Graph& graph, ErrorKind kind, const std::string& stage) { Verifier(kind, stage).graph(graph); }

bool verification_enabled() {
#ifndef NDEBUG
  return true;
#else
  static const bool enabled = [] {
    const char* env = std::getenv("ANVIL_VERIFY");
    return env && env[0] == '1';
  }();
  return enabled;
#endif
}

}  // namespace anvil::ir
