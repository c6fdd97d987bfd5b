#include "arrays.h"

#include <cstring>
#include <string>
#include <utility>

#include "anvil/error.h"

namespace anvil::python {

namespace {

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorKind::kInvalidArgument, message); }

// Types numpy lacks come from ml_dtypes (bfloat16, float8, int4...), when installed.
struct ExtraType {
  DType dtype;
  const char* name;
};
constexpr ExtraType kExtraTypes[] = {
    {DType::kBFloat16, "bfloat16"},         {DType::kFloat8E4M3FN, "float8_e4m3fn"},
    {DType::kFloat8E4M3FNUZ, "float8_e4m3fnuz"}, {DType::kFloat8E5M2, "float8_e5m2"},
    {DType::kFloat8E5M2FNUZ, "float8_e5m2fnuz"}, {DType::kFloat8E8M0, "float8_e8m0fnu"},
    {DType::kFloat4E2M1, "float4_e2m1fn"},  {DType::kInt4, "int4"},
    {DType::kUInt4, "uint4"},               {DType::kInt2, "int2"},
    {DType::kUInt2, "uint2"},
};

bool is_string_kind(char kind) { return kind == 'U' || kind == 'S' || kind == 'O'; }

DType dtype_of(const py::dtype& d) {
  const char kind = d.kind();
  const auto size = d.itemsize();
  if (is_string_kind(kind)) return DType::kString;
  if (kind == 'b') return DType::kBool;
  if (kind == 'f') return size == 4 ? DType::kFloat32 : size == 8 ? DType::kFloat64 : size == 2 ? DType::kFloat16 : DType::kUndefined;
  if (kind == 'i')
    return size == 1 ? DType::kInt8 : size == 2 ? DType::kInt16 : size == 4 ? DType::kInt32 : size == 8 ? DType::kInt64 : DType::kUndefined;
  if (kind == 'u')
    return size == 1 ? DType::kUInt8 : size == 2 ? DType::kUInt16 : size == 4 ? DType::kUInt32 : size == 8 ? DType::kUInt64 : DType::kUndefined;
  const std::string name = py::str(d.attr("name"));
  for (const ExtraType& t : kExtraTypes)
    if (name == t.name) return t.dtype;
  return DType::kUndefined;
}

py::dtype numpy_dtype(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return py::dtype("float32");
    case DType::kFloat64: return py::dtype("float64");
    case DType::kFloat16: return py::dtype("float16");
    case DType::kInt8: return py::dtype("int8");
    case DType::kUInt8: return py::dtype("uint8");
    case DType::kInt16: return py::dtype("int16");
    case DType::kUInt16: return py::dtype("uint16");
    case DType::kInt32: return py::dtype("int32");
    case DType::kUInt32: return py::dtype("uint32");
    case DType::kInt64: return py::dtype("int64");
    case DType::kUInt64: return py::dtype("uint64");
    case DType::kBool: return py::dtype("bool");
    default: break;
  }
  for (const ExtraType& t : kExtraTypes) {
    if (t.dtype != dtype) continue;
    try {
      return py::dtype::from_args(py::module_::import("ml_dtypes").attr(t.name));
    } catch (const py::error_already_set&) {
      throw Error(ErrorKind::kUnsupported, std::string("a ") + dtype_name(dtype) +
                                               " output needs numpy's ml_dtypes package (pip install ml_dtypes)");
    }
  }
  throw Error(ErrorKind::kUnsupported, std::string("no numpy type for ") + dtype_name(dtype));
}

Shape shape_of(const py::array& a) {
  Shape shape(static_cast<size_t>(a.ndim()));
  for (size_t d = 0; d < shape.size(); ++d) shape[d] = static_cast<int64_t>(a.shape(static_cast<py::ssize_t>(d)));
  return shape;
}

Tensor string_tensor(const py::array& a, const std::string& name) {
  Tensor t(DType::kString, shape_of(a));
  py::object flat = a.attr("ravel")();
  int64_t i = 0;
  for (py::handle item : flat) {
    if (py::isinstance<py::bytes>(item))
      t.data<std::string>()[i++] = item.cast<std::string>();
    else if (py::isinstance<py::str>(item))
      t.data<std::string>()[i++] = item.cast<std::string>();
    else
      invalid("input '" + name + "' holds a " + std::string(py::str(py::type::of(item).attr("__name__"))) +
              " where a string was expected");
  }
  return t;
}

std::string type_name(py::handle obj) { return py::str(py::type::of(obj).attr("__name__")); }

Tensor array_tensor(DType expected, py::handle obj, const std::string& name, std::vector<py::object>& keep) {
  py::module_ np = py::module_::import("numpy");
  if (!py::isinstance<py::array>(obj)) {
    if (!py::isinstance(obj, np.attr("generic")))
      invalid("input '" + name + "' must be a numpy array, got " + type_name(obj));
    obj = keep.emplace_back(np.attr("asarray")(obj));  // a numpy scalar
  }
  py::array a = py::reinterpret_borrow<py::array>(obj);
  const DType dtype = dtype_of(a.dtype());
  if (dtype == DType::kUndefined) invalid("input '" + name + "' has numpy type " + std::string(py::str(a.dtype())) + ", which Anvil has no type for");
  if (expected != DType::kUndefined && dtype != expected)
    invalid("input '" + name + "' must be " + dtype_name(expected) + ", got " + dtype_name(dtype));
  if (dtype == DType::kString) {
    if (a.dtype().kind() == 'O' || a.dtype().kind() == 'U' || a.dtype().kind() == 'S') return string_tensor(a, name);
  }
  const bool native = a.dtype().attr("isnative").cast<bool>();
  const bool aligned = a.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_;
  // np.require, not ascontiguousarray (which makes a 0-d array 1-d in numpy
  // 1.x), and its result, not a ufunc's (a 0-d input gives a numpy scalar).
  const py::tuple c_aligned = py::make_tuple("C", "A");
  if (dtype == DType::kBool) {
    // numpy bools may hold any byte (a uint8 array viewed as bool): kernels read 0 or 1.
    a = py::reinterpret_borrow<py::array>(
        keep.emplace_back(np.attr("require")(np.attr("not_equal")(a, false), py::none(), c_aligned)));
  } else if (!native || !aligned || !(a.flags() & py::array::c_style)) {
    py::object target = native ? py::object(a.dtype()) : a.dtype().attr("newbyteorder")("=");
    a = py::reinterpret_borrow<py::array>(keep.emplace_back(np.attr("require")(a, target, c_aligned)));
  } else {
    keep.push_back(a);
  }
  return Tensor::view(dtype, shape_of(a), const_cast<void*>(a.data()));
}

}  // namespace

Tensor tensor_from_python(const ValueInfo& info, py::handle obj, std::vector<py::object>& keep) {
  const bool sequence = info.kind == ValueKind::kSequence || info.kind == ValueKind::kOptionalSequence;
  if (obj.is_none()) return Tensor();  // an optional without a value (the session refuses it elsewhere)
  if (sequence) {
    if (!py::isinstance<py::list>(obj) && !py::isinstance<py::tuple>(obj))
      invalid("input '" + info.name + "' is a sequence: pass a list of numpy arrays, got " + type_name(obj));
    std::vector<Tensor> items;
    for (py::handle item : obj) {
      Tensor t = array_tensor(info.dtype, item, info.name, keep);
      // Sequence items outlive the run inside sequence ops: they get their own bytes.
      items.push_back(t.dtype() == DType::kString ? t : t.clone());
    }
    return Tensor::sequence(info.dtype, std::move(items));
  }
  return array_tensor(DType::kUndefined, obj, info.name, keep);
}

py::object tensor_to_python(Tensor tensor) {
  if (tensor.empty()) return py::none();
  if (tensor.is_sequence()) {
    py::list items;
    for (const Tensor& t : tensor.items()) items.append(tensor_to_python(t));
    return items;
  }
  std::vector<py::ssize_t> shape(tensor.shape().begin(), tensor.shape().end());
  if (tensor.dtype() == DType::kString) {
    py::array out(py::dtype("O"), shape);
    py::object flat = out.attr("reshape")(-1);
    for (int64_t i = 0; i < tensor.numel(); ++i) {
      const std::string& s = tensor.data<std::string>()[i];
      PyObject* text = PyUnicode_DecodeUTF8(s.data(), static_cast<py::ssize_t>(s.size()), "replace");
      if (!text) throw py::error_already_set();
      flat[py::int_(i)] = py::reinterpret_steal<py::str>(text);
    }
    return out;
  }
  py::dtype dtype = numpy_dtype(tensor.dtype());
  if (tensor.use_count() == 1) {
    // Only the run holds these bytes: the array takes them over.
    auto* owner = new Tensor(std::move(tensor));
    py::capsule free_when_done(owner, [](void* p) { delete static_cast<Tensor*>(p); });
    return py::array(dtype, shape, {}, owner->raw(), free_when_done);
  }
  py::array out(dtype, shape);
  if (tensor.nbytes()) std::memcpy(out.mutable_data(), tensor.raw(), tensor.nbytes());
  return out;
}

}  // namespace anvil::python
