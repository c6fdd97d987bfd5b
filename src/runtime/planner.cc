#include <algorithm>
#include <climits>
#include <map>
#include <set>

#include "core/check.h"
#include "core/checked.h"
#include "kernels/registry.h"
#include "runtime/memory_plan.h"
#include "kernels/weight_cache.h"
#include "runtime/plan.h"
#include "runtime/tuner.h"

namespace anvil::runtime {

using kernels::TensorType;

namespace {

// A kernel's outputs are the types its op's schema gives, in the layouts it chose.
void check_against_schema(const kernels::PrepareContext& ctx, const std::vector<TensorType>& outputs) {
  for (size_t o = 0; o < outputs.size(); ++o) {
    // Kernels that make their outputs at run time (sequences, optionals) return placeholders.
    if (!ctx.output_known(o) || outputs[o].dtype == DType::kUndefined || outputs[o].sequence) continue;
    const TensorType& t = ctx.output_type(o);
    ANVIL_CHECK(outputs[o].dtype == t.dtype && outputs[o].shape == t.shape, ErrorKind::kInternal,
                "{}: output {} is {}{} by its kernel but {}{} by its schema", ctx.node().describe(), o,
                dtype_name(outputs[o].dtype), shape_str(outputs[o].shape), dtype_name(t.dtype), shape_str(t.shape));
  }
}

// `entry`'s kernel prepared in `ctx`. Nullopt when its factory or its
// prepare() declines (an Unsupported error, kept in `declined` when given);
// other errors propagate.
std::optional<PreparedKernel> try_prepare(const kernels::KernelEntry& entry, const ir::Node& node,
                                          const std::vector<const Tensor*>& constants,
                                          kernels::WeightCache* weights, kernels::PrepareContext& ctx,
                                          std::exception_ptr* declined) {
  std::unique_ptr<kernels::Kernel> kernel = entry.factory(node);
  if (!kernel) return std::nullopt;
  if (weights)  // a weight whose pages the session dropped is rebuilt before a kernel reads it
    for (size_t i = 0; i < constants.size(); ++i)
      if (constants[i] && !kernel->reads_input_packed_only(i)) weights->restore(*constants[i]);
  try {
    std::vector<TensorType> out = kernel->prepare(ctx);
    for (const TensorType& t : out)
      ANVIL_CHECK(!t.layout || ctx.blocked_outputs_allowed(), ErrorKind::kInternal,
                  "{}: the kernel returned a {} output where only plain is allowed", node.describe(),
                  t.layout->name());
    check_against_schema(ctx, out);
    return PreparedKernel{std::move(kernel), std::move(out)};
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kUnsupported) throw;
    if (declined) *declined = std::current_exception();  // kept whole: a ValueNeeded must reach the planner as one
    return std::nullopt;
  }
}

kernels::PrepareContext make_context(const ir::Node& node, const std::vector<TensorType>& types,
                                     const std::vector<const Tensor*>& constants, int num_threads,
                                     kernels::WeightCache* weights, const LayoutFreedom* layouts) {
  kernels::PrepareContext ctx(node, types, constants, num_threads, weights);
  if (layouts) ctx.allow_blocked_layouts(layouts->inputs, layouts->outputs, layouts->incoming, layouts->feeds_channel_concat);
  return ctx;
}

// The kernel `entry` prepared with alternative `choice`; nullopt when it declines.
std::optional<PreparedKernel> prepare_choice(const kernels::KernelEntry& entry, const ir::Node& node,
                                             const std::vector<TensorType>& types,
                                             const std::vector<const Tensor*>& constants, int num_threads,
                                             kernels::WeightCache* weights, const LayoutFreedom* layouts, int choice) {
  kernels::PrepareContext ctx = make_context(node, types, constants, num_threads, weights, layouts);
  ctx.set_choice(choice);
  return try_prepare(entry, node, constants, weights, ctx, nullptr);
}

// Where the kernel the rules chose has alternatives: the tuning cache's
// choice, or each alternative timed on the plan's shapes and the fastest kept.
PreparedKernel tune(PreparedKernel chosen, const kernels::KernelEntry& entry, const ir::Node& node,
                    const std::vector<TensorType>& types, const std::vector<const Tensor*>& constants,
                    int num_threads, kernels::WeightCache* weights, const LayoutFreedom* layouts, Tuner& tuner) {
  const std::vector<std::string> alternatives = chosen.kernel->alternatives();
  if (alternatives.size() < 2) return chosen;
  const std::string key = tuner.key(node, types, layouts ? layouts->incoming : std::vector<kernels::Layout>{},
                                    num_threads);
  if (const std::optional<std::string> cached = tuner.cached(key)) {
    const auto it = std::find(alternatives.begin(), alternatives.end(), *cached);
    if (it != alternatives.end()) {
      tuner.count_cached();
      const int choice = static_cast<int>(it - alternatives.begin());
      std::optional<PreparedKernel> p =
          prepare_choice(entry, node, types, constants, num_threads, weights, layouts, choice);
      return p ? std::move(*p) : std::move(chosen);
    }
  }
  std::map<std::string, double> times;
  std::optional<PreparedKernel> best;
  double best_ms = 0;
  std::string best_name;
  for (size_t i = 0; i < alternatives.size(); ++i) {
    std::optional<PreparedKernel> p =
        prepare_choice(entry, node, types, constants, num_threads, weights, layouts, static_cast<int>(i));
    if (!p) continue;
    const double ms = time_kernel(*p->kernel, types, constants, p->output_types);
    times[alternatives[i]] = ms;
    if (!best || ms < best_ms) {
      best = std::move(p);
      best_ms = ms;
      best_name = alternatives[i];
    }
  }
  if (!best) return chosen;
  tuner.record(key, best_name, times);
  chosen.kernel.reset();  // the losers' packed weights go now, so tuning holds one extra copy at a time
  if (weights) weights->prune_unused();
  return std::move(*best);
}

}  // namespace

PreparedKernel prepare_kernel(const ir::Node& node, const std::vector<TensorType>& types,
                              const std::vector<const Tensor*>& constants, int num_threads, bool ref_only,
                              std::vector<bool>* values_read, kernels::WeightCache* weights,
                              const LayoutFreedom* layouts, Tuner* tuner) {
  auto entries = kernels::Registry::global().select(node, types);
  kernels::PrepareContext ctx = make_context(node, types, constants, num_threads, weights, layouts);
  std::exception_ptr declined;
  for (const kernels::KernelEntry* entry : entries) {
    if (ref_only && entry->backend != kernels::Backend::kRef) continue;
    std::optional<PreparedKernel> prepared = try_prepare(*entry, node, constants, weights, ctx, &declined);
    if (!prepared) continue;  // try the next backend
    if (values_read) *values_read = ctx.values_read();
    if (tuner) return tune(std::move(*prepared), *entry, node, types, constants, num_threads, weights, layouts, *tuner);
    return std::move(*prepared);
  }
  if (declined) std::rethrow_exception(declined);
  fail(ErrorKind::kUnsupported, "{}: no kernel accepts this node", node.describe());
}

std::vector<Tensor> evaluate_kernel(const PreparedKernel& prepared, const std::vector<const Tensor*>& inputs) {
  std::vector<Tensor> outputs;
  for (const TensorType& t : prepared.output_types) outputs.emplace_back(t.dtype, t.shape);
  kernels::RunContext ctx;
  ctx.inputs = inputs;
  for (Tensor& t : outputs) ctx.outputs.push_back(&t);
  std::vector<unsigned char> scratch(prepared.kernel->scratch_bytes() + kArenaAlignment);
  ctx.scratch = scratch.data() + (kArenaAlignment - reinterpret_cast<uintptr_t>(scratch.data()) % kArenaAlignment);
  prepared.kernel->run(ctx);
  return outputs;
}

namespace {

constexpr int kForever = INT_MAX;

class PlanBuilder {
 public:
  PlanBuilder(const ir::Graph& graph, const std::vector<TensorType>& inputs, const PlanOptions& options)
      : graph_(graph),
        inputs_(inputs),
        threads_(options.num_threads),
        weights_(options.weights),
        blocked_layouts_(options.blocked_layouts),
        release_early_(options.release_weights_early && options.weights),
        tuner_(options.tuner),
        plan_(std::make_unique<Plan>()) {}

  std::unique_ptr<Plan> build() {
    compute_last_uses();
    bind_inputs_and_constants();
    const auto& nodes = graph_.nodes();
    for (size_t i = 0; i < nodes.size(); ++i) add_node(*nodes[i], static_cast<int>(i));
    place_concats_in_place();
    bind_graph_outputs();
    place_buffers();
    return std::move(plan_);
  }

 private:
  void compute_last_uses() {
    const auto& nodes = graph_.nodes();
    for (size_t i = 0; i < nodes.size(); ++i)
      for (const ir::Value* v : nodes[i]->inputs)
        if (v) {
          last_use_[v] = std::max(last_use_[v], static_cast<int>(i));
          if (v->is_constant()) ++constant_reads_left_[v];
        }
    for (size_t k = 0; k < graph_.outputs().size(); ++k) {
      last_use_[graph_.outputs()[k]] = kForever;
      output_index_.emplace(graph_.outputs()[k], static_cast<int>(k));  // first occurrence wins
    }
    for (size_t i = 0; i < nodes.size(); ++i)
      if (convolutions_may_write_in_place(*nodes[i], static_cast<int>(i)))
        for (const ir::Value* v : nodes[i]->inputs) channel_concat_inputs_.insert(v);
  }

  // Whether the inputs of `node` (at `index`) are worth writing in channel
  // blocks (the hint PrepareContext::output_feeds_channel_concat): a Concat
  // along axis 1 that place_concats_in_place could take once they are, so
  // not a graph output, every input a distinct convolution's output read
  // last by the concat. Otherwise the convolutions would switch kernels (and
  // the concat would see mixed layouts) for no copy saved.
  bool convolutions_may_write_in_place(const ir::Node& node, int index) const {
    if (node.op_type != "Concat" || !node.domain.empty() || node.outputs.empty() || !node.outputs[0]) return false;
    if (output_index_.count(node.outputs[0])) return false;
    const ir::Type& t = node.outputs[0]->type;
    const int64_t axis = node.attrs.get_int("axis", 0);
    if (!(axis == 1 || (axis == -3 && t.is_tensor() && t.has_shape() && t.rank() == 4))) return false;
    std::set<const ir::Value*> seen;
    for (const ir::Value* v : node.inputs) {
      if (!v || !seen.insert(v).second || !v->producer) return false;
      const ir::Node& p = *v->producer;
      const bool conv = (p.op_type == "Conv" && p.domain.empty()) || (p.op_type == "FusedConv" && p.domain == "anvil");
      if (!conv || v != p.outputs[0] || last_use_.at(v) != index) return false;
    }
    return true;
  }

  int add_slot(Slot s) {
    plan_->slots.push_back(std::move(s));
    return static_cast<int>(plan_->slots.size()) - 1;
  }

  void bind_inputs_and_constants() {
    for (size_t i = 0; i < graph_.inputs().size(); ++i) {
      Slot s;
      s.type = inputs_[i];
      s.kind = Slot::Kind::kInput;
      s.index = static_cast<int>(i);
      slot_of_[graph_.inputs()[i]] = add_slot(s);
    }
    // A subgraph's captures follow its inputs in the executor's input list.
    for (size_t k = 0; k < graph_.captures.size(); ++k) {
      size_t index = graph_.inputs().size() + k;
      ANVIL_CHECK(index < inputs_.size(), ErrorKind::kInternal, "no tensor for capture '{}'",
                  graph_.captures[k].inner->name);
      Slot s;
      s.type = inputs_[index];
      s.kind = Slot::Kind::kInput;
      s.index = static_cast<int>(index);
      slot_of_[graph_.captures[k].inner] = add_slot(s);
    }
    for (const auto& v : graph_.values()) {
      if (!v->is_constant()) continue;
      Slot s;
      s.kind = Slot::Kind::kConstant;
      s.type = {v->constant->dtype(), v->constant->shape()};
      s.constant = &*v->constant;
      slot_of_[v.get()] = add_slot(s);
    }
  }

  int root_of(int slot) const {
    while (plan_->slots[slot].kind == Slot::Kind::kAlias) slot = plan_->slots[slot].index;
    return slot;
  }

  void add_node(const ir::Node& node, int index) {
    std::vector<TensorType> types;  // logical: layouts travel in `layouts.incoming`
    std::vector<const Tensor*> constants;
    std::vector<int> in_slots;
    LayoutFreedom layouts;
    bool all_constant = true, reads_dynamic = false;
    for (const ir::Value* v : node.inputs) {
      if (!v) {
        types.push_back({});
        constants.push_back(nullptr);
        in_slots.push_back(-1);
        layouts.incoming.push_back(nullptr);
        continue;
      }
      auto it = slot_of_.find(v);
      ANVIL_CHECK(it != slot_of_.end(), ErrorKind::kInvalidModel, "{}: input '{}' is not computed before the node",
                  node.describe(), v->name);
      const Slot& s = plan_->slots[it->second];
      types.push_back({s.type.dtype, s.type.shape});
      layouts.incoming.push_back(s.type.layout);
      constants.push_back(s.kind == Slot::Kind::kConstant ? s.constant : nullptr);
      all_constant &= s.kind == Slot::Kind::kConstant;
      reads_dynamic |= s.kind == Slot::Kind::kDynamic || s.type.sequence;
      in_slots.push_back(it->second);
    }
    // Control flow runs its bodies at run time; values from dynamic steps have no plan-time shape.
    if (reads_dynamic || node.has_subgraphs()) {
      note_constant_reads(node, nullptr, in_slots);
      add_dynamic_step(node, constants, in_slots, index);
      return;
    }
    // Computed once here, with the reference kernels (random ops draw anew every run).
    bool fold = all_constant && !ir::is_random_op(node);
    layouts.inputs = blocked_layouts_ && !fold;
    layouts.outputs = layouts.inputs && std::none_of(node.outputs.begin(), node.outputs.end(), [&](const ir::Value* v) {
                        return v && output_index_.count(v);
                      });
    layouts.feeds_channel_concat = layouts.outputs && !node.outputs.empty() && node.outputs[0] &&
                                   channel_concat_inputs_.count(node.outputs[0]);
    PreparedKernel prepared;
    try {
      const ConsumableReads consumable(*this, node, fold);
      prepared = prepare_kernel(node, types, constants, threads_, /*ref_only=*/fold, nullptr, weights_, &layouts,
                                fold ? nullptr : tuner_);
    } catch (const kernels::ValueNeeded&) {
      note_constant_reads(node, nullptr, in_slots);
      add_dynamic_step(node, constants, in_slots, index);  // its shapes depend on run-time values
      return;
    }
    const bool string_outputs = std::any_of(prepared.output_types.begin(), prepared.output_types.end(),
                                            [](const TensorType& t) { return t.dtype == DType::kString; });
    if (prepared.kernel->allocates_outputs() || string_outputs) {
      // Sequences, optionals and strings (objects, not bytes in the arena): made per run.
      note_constant_reads(node, nullptr, in_slots);
      add_dynamic_step(node, constants, in_slots, index);
      return;
    }
    check_output_count(node, prepared);
    if (fold || prepared.kernel->reads_only_input_types()) note_constant_reads(node, nullptr, in_slots);
    if (fold) {
      fold_node(node, prepared, constants);
      return;
    }
    if (prepared.kernel->reads_only_input_types()) {
      // Shape and the like: bytes-less views carry the types the kernel reads.
      std::vector<Tensor> views;
      for (const TensorType& t : types) views.push_back(Tensor::view(t.dtype, t.shape, nullptr));
      std::vector<const Tensor*> ptrs;
      for (size_t i = 0; i < views.size(); ++i) ptrs.push_back(types[i].dtype == DType::kUndefined ? nullptr : &views[i]);
      fold_node(node, prepared, ptrs);
      return;
    }
    const std::vector<int> plain_slots = in_slots;
    for (size_t i = 0; i < in_slots.size(); ++i)
      if (in_slots[i] >= 0) in_slots[i] = in_layout(in_slots[i], node.inputs[i], prepared.kernel->input_layout(i), index);
    note_constant_reads(node, in_slots == plain_slots ? prepared.kernel.get() : nullptr, in_slots);
    Step step;
    step.node = &node;
    step.inputs = in_slots;
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const ir::Value* v = node.outputs[o];
      if (!v) {
        step.outputs.push_back(-1);
        continue;
      }
      int slot = make_output_slot(node, *prepared.kernel, prepared.output_types[o], o, in_slots, index, v);
      slot_of_[v] = slot;
      step.outputs.push_back(slot);
    }
    if (size_t scratch = prepared.kernel->scratch_bytes()) step.scratch_offset = scratch_buffer(scratch, index);
    step.kernel = std::move(prepared.kernel);
    plan_->steps.push_back(std::move(step));
  }

  // Counts the reads of the node's constant inputs (`kernel`: the one that
  // runs it, null when the node is folded, dynamic or reordered); a constant
  // whose reads are all packed ones is released once the last is prepared.
  // One read unpacked after all gets back the bytes its packing consumed.
  void note_constant_reads(const ir::Node& node, const kernels::Kernel* kernel, const std::vector<int>& in_slots) {
    if (!release_early_) return;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ir::Value* v = node.inputs[i];
      if (!v || !v->is_constant() || v->is_graph_output) continue;
      const bool packed = kernel && i < in_slots.size() && in_slots[i] >= 0 && kernel->reads_input_packed_only(i);
      if (!packed) {
        unreleasable_.insert(v);
        weights_->restore(*v->constant);
      }
      if (--constant_reads_left_[v] == 0 && !unreleasable_.count(v)) weights_->release(*v->constant);
    }
  }

  // While a node is prepared, the constants it reads last, with every reader
  // before it packed: its packing may consume them (WeightCache::get_consuming);
  // note_constant_reads restores any the kernel turns out to read unpacked.
  class ConsumableReads {
   public:
    ConsumableReads(PlanBuilder& b, const ir::Node& node, bool fold) : weights_(b.weights_) {
      if (!b.release_early_ || fold) return;
      for (const ir::Value* v : node.inputs)
        if (v && v->is_constant() && !v->is_graph_output && b.constant_reads_left_[v] == 1 && !b.unreleasable_.count(v)) {
          weights_->set_consumable(*v->constant, true);
          marked_.push_back(&*v->constant);
        }
    }
    ~ConsumableReads() {
      for (const Tensor* t : marked_) weights_->set_consumable(*t, false);
    }
    ConsumableReads(const ConsumableReads&) = delete;
    ConsumableReads& operator=(const ConsumableReads&) = delete;

   private:
    kernels::WeightCache* weights_;
    std::vector<const Tensor*> marked_;
  };

  // The slot holding `value` (now in `slot`) in layout `to`: `slot` itself, or
  // the output of a reorder step, inserted once per value and layout.
  int in_layout(int slot, const ir::Value* value, const kernels::Layout& to, int index) {
    const TensorType from = plan_->slots[slot].type;
    if (kernels::same_layout(from.layout, to)) return slot;
    for (const auto& [layout, reordered] : reorders_[slot])
      if (kernels::same_layout(layout, to)) return reordered;

    ir::Node& node = plan_->reorder_nodes.emplace_back();
    node.op_type = "Reorder";
    node.domain = "anvil";
    node.name = value->name + "/" + kernels::layout_name(to);
    Step step;
    step.node = &node;
    step.kernel = (from.layout ? from.layout : to)->make_reorder(from, to);
    step.inputs = {slot};
    Slot s;
    s.kind = Slot::Kind::kArena;
    s.type = {from.dtype, from.shape, to};
    size_t bytes = kernels::type_bytes(s.type);
    check_allocation(bytes, fmt::format("{} in layout {}", value->name, kernels::layout_name(to)));
    s.buffer = new_buffer(bytes, index);
    int out = add_slot(s);
    root_last_use_[out] = std::max(index, last_use(value));
    buffer_last_[s.buffer] = root_last_use_[out];
    step.outputs = {out};
    plan_->steps.push_back(std::move(step));
    ++plan_->reorders;
    reorders_[slot].emplace_back(to, out);
    return out;
  }

  // A step prepared at run time: its outputs live outside the arena, in
  // tensors each run allocates, so the arena plan never depends on them.
  // It reads plain data only.
  void add_dynamic_step(const ir::Node& node, const std::vector<const Tensor*>& constants,
                        std::vector<int> in_slots, int index) {
    for (size_t i = 0; i < in_slots.size(); ++i)
      if (in_slots[i] >= 0) in_slots[i] = in_layout(in_slots[i], node.inputs[i], nullptr, index);
    Step step;
    step.node = &node;
    step.inputs = in_slots;
    std::vector<bool> plan_constant;
    for (const Tensor* c : constants) plan_constant.push_back(c != nullptr);
    step.dynamic = std::make_unique<DynamicKernels>(node, std::move(plan_constant), threads_, weights_);
    for (const ir::Value* v : node.outputs) {
      if (!v) {
        step.outputs.push_back(-1);
        continue;
      }
      Slot s;
      s.kind = Slot::Kind::kDynamic;
      int slot = add_slot(s);
      slot_of_[v] = slot;
      step.outputs.push_back(slot);
    }
    // Arena buffers read by this step must stay alive until it ran.
    for (int in : in_slots)
      if (in >= 0) extend_root_to(root_of(in), index);
    ++plan_->dynamic_steps;
    plan_->steps.push_back(std::move(step));
  }

  void check_output_count(const ir::Node& node, const PreparedKernel& p) const {
    for (size_t o = p.output_types.size(); o < node.outputs.size(); ++o)
      ANVIL_CHECK(!node.outputs[o], ErrorKind::kUnsupported, "{}: output {} is not produced by Anvil's kernel",
                  node.describe(), o);
  }

  void fold_node(const ir::Node& node, const PreparedKernel& prepared, const std::vector<const Tensor*>& constants) {
    std::vector<Tensor> results = evaluate_kernel(prepared, constants);
    ++plan_->folded_nodes;
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      if (!node.outputs[o]) continue;
      plan_->owned_constants.push_back(std::move(results[o]));
      Slot s;
      s.kind = Slot::Kind::kConstant;
      s.constant = &plan_->owned_constants.back();
      s.type = {s.constant->dtype(), s.constant->shape()};
      slot_of_[node.outputs[o]] = add_slot(s);
    }
  }

  int make_output_slot(const ir::Node& node, const kernels::Kernel& kernel, const TensorType& type, size_t o,
                       const std::vector<int>& in_slots, int index, const ir::Value* v) {
    Slot s;
    s.type = type;
    if (auto it = output_index_.find(v); it != output_index_.end()) {
      s.kind = Slot::Kind::kOutput;
      s.index = it->second;
      return add_slot(s);
    }
    if (o == 0) {
      int alias = kernel.output_aliases_input();
      if (alias >= 0 && alias < static_cast<int>(in_slots.size()) && in_slots[alias] >= 0) {
        s.kind = Slot::Kind::kAlias;
        s.index = root_of(in_slots[alias]);
        extend_root(s.index, v);
        return add_slot(s);
      }
      int inplace = kernel.inplace_input();
      if (inplace >= 0 && inplace < static_cast<int>(in_slots.size()) && in_slots[inplace] >= 0) {
        int root = root_of(in_slots[inplace]);
        const Slot& r = plan_->slots[root];
        size_t out_bytes = kernels::type_bytes(type);
        // The node must not read the buffer through another input while overwriting it.
        bool read_elsewhere = false;
        for (size_t j = 0; j < in_slots.size(); ++j)
          read_elsewhere |= static_cast<int>(j) != inplace && in_slots[j] >= 0 && root_of(in_slots[j]) == root;
        bool free_after = r.kind == Slot::Kind::kArena && root_last_use_[root] <= index && !read_elsewhere &&
                          out_bytes <= buffer_bytes_[r.buffer];
        if (free_after) {
          s.kind = Slot::Kind::kAlias;
          s.index = root;
          extend_root(root, v);
          return add_slot(s);
        }
      }
    }
    s.kind = Slot::Kind::kArena;
    size_t bytes = kernels::type_bytes(type);
    check_allocation(bytes, fmt::format("{}: output {} ({} {})", node.describe(), o, dtype_name(type.dtype),
                                        shape_str(type.shape)));
    s.buffer = new_buffer(bytes, index);
    int slot = add_slot(s);
    root_last_use_[slot] = std::max(index, last_use(v));
    buffer_last_[s.buffer] = root_last_use_[slot];
    return slot;
  }

  // Concats of one row per input (Kernel::input_offsets_in_output) planned in
  // place, each input's buffer becoming its range of the output's: the
  // producers write there and the concat copies nothing (SqueezeNet's fire
  // modules, at batch 1 in nChw8c / nChw16c). The output's buffer then lives from the
  // first producer on, which can raise the peak where an input is made long
  // before its concat (a U-Net's skips); so all of them stay copies when the
  // arena would grow.
  void place_concats_in_place() {
    const std::vector<Slot> slots = plan_->slots;
    const std::vector<size_t> bytes = buffer_bytes_;
    const std::vector<int> first = buffer_first_;
    size_t placed = 0;
    for (const Step& step : plan_->steps) placed += place_inputs_in_output(step);
    if (placed == 0) return;
    if (arena_bytes_of_buffers() > arena_bytes_of(bytes, first, buffer_last_)) {
      plan_->slots = slots;
      buffer_bytes_ = bytes;
      buffer_first_ = first;
      return;
    }
    plan_->concats_in_place = placed;
  }

  // One concat (see place_concats_in_place): taken where each input is an
  // arena buffer of its own, of exactly its range's size (so no producer
  // writes past it), last read by the concat (so no later step overwrites
  // it in place), and the output is an arena buffer too. Returns 1 if taken.
  size_t place_inputs_in_output(const Step& step) {
    if (!step.kernel || step.outputs.size() != 1 || step.outputs[0] < 0 || !step.node) return 0;
    const std::vector<size_t> offsets = step.kernel->input_offsets_in_output();
    const int out = step.outputs[0];
    if (offsets.empty() || offsets.size() != step.inputs.size() || plan_->slots[out].kind != Slot::Kind::kArena) return 0;
    const int index = node_index(*step.node);
    if (index < 0) return 0;
    const size_t out_bytes = buffer_bytes_[plan_->slots[out].buffer];
    std::vector<int> roots;
    for (size_t k = 0; k < step.inputs.size(); ++k) {
      if (step.inputs[k] < 0) return 0;
      const int root = root_of(step.inputs[k]);
      const Slot& r = plan_->slots[root];
      const bool own = r.kind == Slot::Kind::kArena && root != out &&
                       std::find(roots.begin(), roots.end(), root) == roots.end();
      if (!own || root_last_use_[root] > index) return 0;
      // The ranges as the kernel reports them: aligned, of the input's size, apart, inside the output.
      const size_t size = kernels::type_bytes(plan_->slots[step.inputs[k]].type);
      const size_t end = k + 1 < offsets.size() ? offsets[k + 1] : out_bytes;
      if (offsets[k] % kArenaAlignment != 0 || buffer_bytes_[r.buffer] != size || offsets[k] > end ||
          end - offsets[k] < size)
        return 0;
      roots.push_back(root);
    }
    const int buffer = plan_->slots[out].buffer;
    for (size_t k = 0; k < roots.size(); ++k) {
      Slot& r = plan_->slots[roots[k]];
      buffer_first_[buffer] = std::min(buffer_first_[buffer], buffer_first_[r.buffer]);
      buffer_bytes_[r.buffer] = 0;
      r.kind = Slot::Kind::kAlias;
      r.index = out;
      r.offset = offsets[k];
      r.buffer = -1;
    }
    return 1;
  }

  // The graph index of a step's node; -1 for the reorders the planner made.
  int node_index(const ir::Node& node) {
    if (node_index_.empty())
      for (size_t i = 0; i < graph_.nodes().size(); ++i) node_index_[graph_.nodes()[i].get()] = static_cast<int>(i);
    auto it = node_index_.find(&node);
    return it == node_index_.end() ? -1 : it->second;
  }

  static MemoryPlanner planner_of(const std::vector<size_t>& bytes, const std::vector<int>& first,
                                  const std::vector<int>& last) {
    MemoryPlanner planner;
    for (size_t b = 0; b < bytes.size(); ++b) planner.add(bytes[b], first[b], last[b]);
    return planner;
  }
  static size_t arena_bytes_of(const std::vector<size_t>& bytes, const std::vector<int>& first,
                               const std::vector<int>& last) {
    return plan_greedy_by_size(planner_of(bytes, first, last)).arena_bytes;
  }
  size_t arena_bytes_of_buffers() const { return arena_bytes_of(buffer_bytes_, buffer_first_, buffer_last_); }

  int last_use(const ir::Value* v) const {
    auto it = last_use_.find(v);
    return it == last_use_.end() ? -1 : it->second;
  }

  void extend_root(int root, const ir::Value* v) { extend_root_to(root, last_use(v)); }

  void extend_root_to(int root, int last) {
    const Slot& r = plan_->slots[root];
    if (r.kind != Slot::Kind::kArena) return;
    root_last_use_[root] = std::max(root_last_use_[root], last);
    buffer_last_[r.buffer] = std::max(buffer_last_[r.buffer], root_last_use_[root]);
  }

  int new_buffer(size_t bytes, int first) {
    buffer_bytes_.push_back(bytes);
    buffer_first_.push_back(first);
    buffer_last_.push_back(first);
    return static_cast<int>(buffer_bytes_.size()) - 1;
  }

  // Scratch lives for its step only; returns the slot-less buffer id, offset resolved later.
  size_t scratch_buffer(size_t bytes, int index) {
    scratch_buffers_.push_back({plan_->steps.size(), new_buffer(bytes, index)});
    return 0;
  }

  void bind_graph_outputs() {
    const auto& outs = graph_.outputs();
    plan_->output_types.resize(outs.size());
    for (size_t k = 0; k < outs.size(); ++k) {
      auto it = slot_of_.find(outs[k]);
      ANVIL_CHECK(it != slot_of_.end(), ErrorKind::kInvalidModel, "graph output '{}' is never computed", outs[k]->name);
      const Slot& s = plan_->slots[it->second];
      ANVIL_INTERNAL_CHECK(!s.type.layout);  // nodes writing graph outputs write them plain
      plan_->output_types[k] = s.type;
      bool written_by_step = s.kind == Slot::Kind::kOutput && s.index == static_cast<int>(k);
      if (!written_by_step) plan_->final_copies.emplace_back(static_cast<int>(k), it->second);
    }
  }

  void place_buffers() {
    const MemoryPlanner planner = planner_of(buffer_bytes_, buffer_first_, buffer_last_);
    MemoryPlan mp = plan_greedy_by_size(planner);
    ANVIL_INTERNAL_CHECK(plan_is_valid(planner, mp));
    plan_->arena_bytes = mp.arena_bytes;
    check_allocation(mp.arena_bytes, "the activation arena");
    for (Slot& s : plan_->slots)
      if (s.kind == Slot::Kind::kArena) s.offset = mp.offsets[s.buffer];
    for (const auto& [step, buffer] : scratch_buffers_) plan_->steps[step].scratch_offset = mp.offsets[buffer];
    for (const auto& v : graph_.values())
      if (v->is_constant()) plan_->weight_bytes += v->constant->nbytes();
  }

  const ir::Graph& graph_;
  const std::vector<TensorType>& inputs_;
  int threads_;
  kernels::WeightCache* weights_;
  bool blocked_layouts_;
  bool release_early_;
  Tuner* tuner_;
  std::map<const ir::Value*, int> constant_reads_left_;
  std::set<const ir::Value*> unreleasable_;
  std::unique_ptr<Plan> plan_;
  std::map<int, std::vector<std::pair<kernels::Layout, int>>> reorders_;  // slot -> (layout, reordered slot)
  std::map<const ir::Value*, int> slot_of_;
  std::map<const ir::Value*, int> last_use_;
  std::map<const ir::Value*, int> output_index_;
  std::set<const ir::Value*> channel_concat_inputs_;
  std::map<int, int> root_last_use_;  // arena root slot -> last node index that reads it or an alias
  std::map<const ir::Node*, int> node_index_;
  std::vector<size_t> buffer_bytes_;
  std::vector<int> buffer_first_, buffer_last_;
  std::vector<std::pair<size_t, int>> scratch_buffers_;  // (step, buffer)
};

}  // namespace

std::unique_ptr<Plan> build_plan(const ir::Graph& graph, const std::vector<TensorType>& inputs,
                                 const PlanOptions& options) {
  return PlanBuilder(graph, inputs, options).build();
}

}  // namespace anvil::runtime
