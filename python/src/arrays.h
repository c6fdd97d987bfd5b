// numpy arrays <-> anvil::Tensor for the Python module.
//
// Inputs: a C-contiguous array in native byte order is used in place (a view;
// the caller keeps the array alive); others are copied once. Outputs: a tensor
// that only the run holds becomes the array's own memory (no copy).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <vector>

#include "anvil/session.h"
#include "anvil/tensor.h"

namespace anvil::python {

namespace py = pybind11;

// The tensor (or sequence, or empty optional) that `obj` gives for `info`.
// Arrays made along the way (copies) are appended to `keep`, which must
// outlive the run. Throws anvil::Error (invalid argument) for what cannot be
// one. Needs the GIL.
Tensor tensor_from_python(const ValueInfo& info, py::handle obj, std::vector<py::object>& keep);

// An array for a tensor, a list of arrays for a sequence, None for an empty
// optional. Needs the GIL.
py::object tensor_to_python(Tensor tensor);

}  // namespace anvil::python
