// The type of an IR value: a tensor (element type and a shape whose dims are
// known sizes or named symbols), a sequence of tensors, or an optional.
//
//   ir::Type t = ir::Type::tensor(DType::kInt64, {ir::Dim::named("batch"), ir::Dim::named("seq")});
//   ir::Type s = ir::Type::sequence(ir::Type::tensor(DType::kFloat32));   // rank unknown
//   t.is_static()  // false: "batch" and "seq" are bound per run
//
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "anvil/tensor.h"

namespace anvil::ir {

// One dimension: a known size (>= 0), a named symbol ("batch"), or unknown.
struct Dim {
  int64_t value = -1;
  std::string symbol;

  static Dim known(int64_t v) { return {v, {}}; }
  static Dim named(std::string s) { return {-1, std::move(s)}; }
  static Dim unknown() { return {}; }

  bool is_known() const { return value >= 0; }
  bool is_symbol() const { return value < 0 && !symbol.empty(); }
  bool operator==(const Dim& o) const { return value == o.value && symbol == o.symbol; }
  bool operator!=(const Dim& o) const { return !(*this == o); }
  std::string str() const;  // "8", "batch", "?"
};

using SymShape = std::vector<Dim>;

// "[batch,128,768]", as shape_str() writes concrete shapes.
std::string dims_str(const SymShape& dims);

enum class TypeKind { kUndefined, kTensor, kSequence, kOptional };

class Type {
 public:
  Type() = default;
  // A tensor whose rank is unknown.
  static Type tensor(DType elem);
  static Type tensor(DType elem, SymShape shape);
  // A tensor of a concrete shape (-1 entries become unknown dims).
  static Type tensor(DType elem, const Shape& shape);
  static Type sequence(Type element);
  static Type optional(Type element);

  TypeKind kind() const { return kind_; }
  bool is_tensor() const { return kind_ == TypeKind::kTensor; }
  bool defined() const { return kind_ != TypeKind::kUndefined; }
  // Tensors: the element type.
  DType dtype() const { return dtype_; }
  bool is_string() const { return dtype_ == DType::kString; }
  bool has_shape() const { return has_shape_; }
  const SymShape& dims() const { return dims_; }
  int rank() const { return static_cast<int>(dims_.size()); }
  // Sequences and optionals: the element type.
  const Type& element() const;

  // Every dim known (a tensor with a shape).
  bool is_static() const;
  // The dims as numbers, -1 for symbols and unknown dims.
  Shape shape_or_minus_one() const;
  std::string str() const;  // "float32[batch,seq,768]", "seq(float32[?])"

  bool operator==(const Type& o) const;
  bool operator!=(const Type& o) const { return !(*this == o); }

 private:
  TypeKind kind_ = TypeKind::kUndefined;
  DType dtype_ = DType::kUndefined;
  bool has_shape_ = false;
  SymShape dims_;
  std::shared_ptr<const Type> element_;
};

}  // namespace anvil::ir
