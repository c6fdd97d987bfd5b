#include "runtime/dynamic_kernels.h"

#include <cstring>

#include "runtime/plan.h"

namespace anvil::runtime {

namespace {

std::string types_key(const std::vector<const Tensor*>& inputs) {
  std::string key;
  for (const Tensor* t : inputs) {
    if (!t) {
      key += "-;";
      continue;
    }
    if (t->is_sequence()) key += "seq:";
    key += t->empty() ? "none" : dtype_name(t->dtype());
    key += shape_str(t->shape());
    key += ';';
  }
  return key;
}

std::string value_bytes(const Tensor& t) { return std::string(static_cast<const char*>(t.raw()), t.nbytes()); }

}  // namespace

bool DynamicKernels::matches(const Entry& e, const std::string& types, const std::vector<const Tensor*>& inputs) const {
  if (e.types != types) return false;
  for (size_t k = 0; k < e.read.size(); ++k) {
    const Tensor& t = *inputs[static_cast<size_t>(e.read[k])];
    if (t.nbytes() != e.values[k].size() || std::memcmp(t.raw(), e.values[k].data(), t.nbytes()) != 0) return false;
  }
  return true;
}

std::shared_ptr<const DynamicKernels::Prepared> DynamicKernels::get(const std::vector<const Tensor*>& inputs) {
  std::string types = types_key(inputs);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (!matches(*it, types, inputs)) continue;
      entries_.splice(entries_.begin(), entries_, it);
      return entries_.front().prepared;
    }
  }
  // Prepared outside the lock: other runs keep using the entries they found.
  std::vector<kernels::TensorType> in_types;
  for (const Tensor* t : inputs)
    in_types.push_back(t ? kernels::TensorType{t->dtype(), t->shape(), nullptr, t->is_sequence()} : kernels::TensorType{});
  std::vector<bool> read;
  PreparedKernel p = prepare_kernel(node_, in_types, inputs, threads_, /*ref_only=*/false, &read, weights_);
  auto prepared = std::make_shared<Prepared>();
  prepared->kernel = std::move(p.kernel);
  prepared->output_types = std::move(p.output_types);

  Entry e;
  e.types = std::move(types);
  size_t key_bytes = 0;
  for (size_t i = 0; i < read.size() && i < inputs.size(); ++i) {
    if (!read[i] || !inputs[i] || (i < plan_constant_.size() && plan_constant_[i])) continue;
    e.read.push_back(static_cast<int>(i));
    e.values.push_back(value_bytes(*inputs[i]));
    key_bytes += inputs[i]->nbytes();
  }
  e.prepared = prepared;
  if (key_bytes <= kMaxKeyBytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.push_front(std::move(e));
    if (entries_.size() > kMaxEntries) entries_.pop_back();
  }
  return prepared;
}

}  // namespace anvil::runtime
