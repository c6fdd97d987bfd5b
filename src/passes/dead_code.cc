// Removes nodes whose outputs no live node or graph output reads.
#include <set>

#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

class DeadCode : public Pass {
 public:
  std::string name() const override { return "dead_code"; }
  bool run(ir::Graph& graph) override {
    std::set<const ir::Value*> live(graph.outputs().begin(), graph.outputs().end());
    bool changed = false;
    const auto& nodes = graph.nodes();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      ir::Node& n = **it;
      if (n.dead) continue;
      bool needed = false;
      for (const ir::Value* o : n.outputs) needed |= o && live.count(o);
      if (!needed) {
        n.dead = true;
        changed = true;
        continue;
      }
      for (const ir::Value* in : n.inputs)
        if (in) live.insert(in);
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_dead_code() { return std::make_unique<DeadCode>(); }

}  // namespace anvil::passes
