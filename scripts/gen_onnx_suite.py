#!/usr/bin/env python3
"""Writes the ONNX backend test suite of the installed `onnx` package to a folder.

The node cases come from the case definitions the package ships
(onnx.backend.test.case.node.collect_testcases), written as model.onnx plus
test_data_set_*/input_*.pb and output_*.pb, as ONNX's own data generator writes
them; the pytorch-converted, pytorch-operator and simple folders the package
ships are copied. Run with the onnx version the suite should come from (the
set-up's build/venv-onnx pins it):

    build/venv-onnx/bin/python scripts/gen_onnx_suite.py build/onnx-suite
"""
from __future__ import annotations

import os
import shutil
import sys

import onnx
from onnx import TensorProto, numpy_helper
from onnx.backend.test.case import node as node_cases

SHIPPED = ("pytorch-converted", "pytorch-operator", "simple")


def value_proto(value, type_proto, name: str) -> bytes:
    """A test value as the protobuf its declared type calls for."""
    if type_proto.HasField("sequence_type"):
        return numpy_helper.from_list(value, name).SerializeToString()
    if type_proto.HasField("optional_type"):
        return numpy_helper.from_optional(value, name).SerializeToString()
    if type_proto.HasField("map_type"):
        return numpy_helper.from_dict(value, name).SerializeToString()
    if isinstance(value, TensorProto):
        return value.SerializeToString()
    return numpy_helper.from_array(value, name).SerializeToString()


def write_case(case, folder: str) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "model.onnx"), "wb") as f:
        f.write(case.model.SerializeToString())
    graph = case.model.graph
    for i, (inputs, outputs) in enumerate(case.data_sets):
        data = os.path.join(folder, f"test_data_set_{i}")
        os.makedirs(data, exist_ok=True)
        for kind, values, declared in (("input", inputs, graph.input), ("output", outputs, graph.output)):
            for j, value in enumerate(values):
                with open(os.path.join(data, f"{kind}_{j}.pb"), "wb") as f:
                    f.write(value_proto(value, declared[j].type, declared[j].name))


def main(out: str) -> int:
    stamp = os.path.join(out, ".onnx-version")
    if os.path.exists(stamp) and open(stamp).read().strip() == onnx.__version__:
        print(f"gen_onnx_suite: {out} already holds onnx {onnx.__version__}'s suite")
        return 0
    shutil.rmtree(out, ignore_errors=True)
    count = 0
    for case in node_cases.collect_testcases(None):
        write_case(case, os.path.join(out, "node", case.name))
        count += 1
    data = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    for folder in SHIPPED:
        shutil.copytree(os.path.join(data, folder), os.path.join(out, folder))
        count += len(os.listdir(os.path.join(out, folder)))
    with open(stamp, "w") as f:
        f.write(onnx.__version__ + "\n")
    print(f"gen_onnx_suite: {count} cases from onnx {onnx.__version__} in {out}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: gen_onnx_suite.py OUT_DIR")
    sys.exit(main(sys.argv[1]))
