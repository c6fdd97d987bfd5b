#include "ir/type.h"

#include "core/check.h"

namespace anvil::ir {

std::string Dim::str() const {
  if (is_known()) return std::to_string(value);
  return symbol.empty() ? "?" : symbol;
}

Type Type::tensor(DType elem) {
  Type t;
  t.kind_ = TypeKind::kTensor;
  t.dtype_ = elem;
  return t;
}

Type Type::tensor(DType elem, SymShape shape) {
  Type t = tensor(elem);
  t.has_shape_ = true;
  t.dims_ = std::move(shape);
  return t;
}

Type Type::tensor(DType elem, const Shape& shape) {
  SymShape dims;
  for (int64_t d : shape) dims.push_back(d >= 0 ? Dim::known(d) : Dim::unknown());
  return tensor(elem, std::move(dims));
}

Type Type::sequence(Type element) {
  Type t;
  t.kind_ = TypeKind::kSequence;
  t.element_ = std::make_shared<const Type>(std::move(element));
  return t;
}

Type Type::optional(Type element) {
  Type t;
  t.kind_ = TypeKind::kOptional;
  t.element_ = std::make_shared<const Type>(std::move(element));
  return t;
}

const Type& Type::element() const {
  ANVIL_INTERNAL_CHECK(element_ != nullptr);
  return *element_;
}

bool Type::is_static() const {
  if (!is_tensor() || !has_shape_) return false;
  for (const Dim& d : dims_)
    if (!d.is_known()) return false;
  return true;
}

Shape Type::shape_or_minus_one() const {
  Shape s;
  for (const Dim& d : dims_) s.push_back(d.is_known() ? d.value : -1);
  return s;
}

std::string Type::str() const {
  switch (kind_) {
    case TypeKind::kUndefined: return "undefined";
    case TypeKind::kSequence: return "seq(" + element_->str() + ")";
    case TypeKind::kOptional: return "optional(" + element_->str() + ")";
    case TypeKind::kTensor: break;
  }
  std::string s = dtype_name(dtype_);
  return s + (has_shape_ ? dims_str(dims_) : "[...]");
}

std::string dims_str(const SymShape& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ',';
    s += dims[i].str();  // appended, not "," + str(): GCC 12 misreads that temporary (-Wrestrict)
  }
  return s + "]";
}

bool Type::operator==(const Type& o) const {
  if (kind_ != o.kind_) return false;
  if (kind_ == TypeKind::kSequence || kind_ == TypeKind::kOptional) return *element_ == *o.element_;
  return dtype_ == o.dtype_ && has_shape_ == o.has_shape_ && dims_ == o.dims_;
}

}  // namespace anvil::ir
