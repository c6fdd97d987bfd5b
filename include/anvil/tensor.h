// anvil::Tensor — a typed, shaped, 64-byte aligned buffer.
//
//   anvil::Tensor t(anvil::DType::kFloat32, {1, 3, 224, 224});   // owns zeroed memory
//   float* p = t.data<float>();
//   anvil::Tensor v = anvil::Tensor::view(anvil::DType::kFloat32, {10}, ptr);  // borrows
//
// Copies are shallow (they share the buffer); clone() makes a deep copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace anvil {

enum class DType : uint8_t {
  kUndefined,
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt8,
  kUInt8,
  kInt16,
  kUInt16,
  kInt32,
  kUInt32,
  kInt64,
  kUInt64,
  kBool,
  // ONNX's 8-, 4- and 2-bit types. In memory each element takes one byte (the
  // float formats' bit pattern, the integers' value); ONNX files pack the 4-
  // and 2-bit ones, and the file readers and writers convert.
  kFloat8E4M3FN,
  kFloat8E4M3FNUZ,
  kFloat8E5M2,
  kFloat8E5M2FNUZ,
  kFloat8E8M0,
  kFloat4E2M1,
  kInt4,
  kUInt4,
  kInt2,
  kUInt2,
  // UTF-8 strings: each element a std::string (data<std::string>()). Only the
  // string kernels see them; the planner gives their outputs no arena memory.
  kString,
};

using Shape = std::vector<int64_t>;

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
bool dtype_is_float(DType dtype);  // float32/64, float16, bfloat16 (not the 8- and 4-bit floats)
// Element count; throws anvil::Error (invalid argument) when it overflows int64.
int64_t shape_numel(const Shape& shape);
// Byte count of a dense tensor; throws when it overflows.
size_t shape_nbytes(const Shape& shape, DType dtype);
std::string shape_str(const Shape& shape);

// A dense tensor, or (like ONNX Runtime's OrtValue) one of the other values
// an ONNX graph passes between nodes:
//  - a sequence of tensors (ONNX seq(tensor)): is_sequence(); dtype() is the
//    element type, items() the tensors, and it holds no bytes of its own;
//  - an optional without a value: a default-constructed, empty() Tensor.
class Tensor {
 public:
  Tensor() = default;
  // Allocates zero-initialised memory.
  Tensor(DType dtype, Shape shape);
  // A tensor that borrows `data`; the caller keeps it alive.
  static Tensor view(DType dtype, Shape shape, void* data);
  // Owned memory left as the allocator gives it (not zeroed): for outputs a
  // kernel writes in full.
  static Tensor uninitialized(DType dtype, Shape shape);
  // A tensor over `data`, which `owner` keeps alive (e.g. a mapped file) for
  // as long as any copy of the tensor exists.
  static Tensor adopt(DType dtype, Shape shape, std::shared_ptr<void> owner, void* data);
  // A sequence of `items`, each of dtype `elem`.
  static Tensor sequence(DType elem, std::vector<Tensor> items);

  bool is_sequence() const { return items_ != nullptr; }
  // The tensors of a sequence (empty for a tensor).
  const std::vector<Tensor>& items() const;

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[static_cast<size_t>(i)]; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool empty() const { return dtype_ == DType::kUndefined; }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  // The elements as T. Sanitizer builds (ANVIL_CHECK_ELEMENT_SIZES) abort when
  // T's size is neither 1 (byte access) nor the dtype's element size: an
  // overread inside the planner's arena is one allocation to ASan, so a kernel
  // reading int64 from an int32 slot would otherwise go unnoticed. (A macro
  // of the whole build: do not mix objects built with and without it.)
  template <typename T> T* data() {
    check_element_size<T>();
    return static_cast<T*>(data_);
  }
  template <typename T> const T* data() const {
    check_element_size<T>();
    return static_cast<const T*>(data_);
  }

  // How many tensors share this one's bytes (itself, its copies and views);
  // 0 for a view of memory the tensor does not own.
  long use_count() const { return owner_.use_count(); }

  // A deep copy of a tensor; a sequence shares its (immutable) items.
  Tensor clone() const;
  // Same buffer, new shape with the same element count.
  Tensor reshaped(Shape shape) const;

 private:
  Tensor(DType dtype, Shape shape, bool zeroed);
  template <typename T> void check_element_size() const {
#ifdef ANVIL_CHECK_ELEMENT_SIZES
    if (sizeof(T) != 1 && data_ != nullptr && sizeof(T) != dtype_size(dtype_)) element_size_mismatch(sizeof(T));
#endif
  }
  [[noreturn]] void element_size_mismatch(size_t read_as) const;
  DType dtype_ = DType::kUndefined;
  Shape shape_;
  std::shared_ptr<void> owner_;
  void* data_ = nullptr;
  std::shared_ptr<const std::vector<Tensor>> items_;  // set for a sequence
};

// What a graph input or output holds: a tensor, a sequence of tensors, or an
// optional (which may hold nothing: an empty() Tensor) of either.
enum class ValueKind { kTensor, kSequence, kOptionalTensor, kOptionalSequence };
const char* value_kind_name(ValueKind kind);

// Element `i` of a dense tensor as a double: every numeric dtype, the 16-, 8-
// and 4-bit floats decoded, bool as 0 or 1 (64-bit integers beyond 2^53 round).
double element_as_double(const Tensor& t, int64_t i);

}  // namespace anvil
