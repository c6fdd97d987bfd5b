"""One inference script, written against onnxruntime's API, run under either engine.

    python rt_script.py onnxruntime OUT.npz MODEL_DIR...
    python rt_script.py anvil OUT.npz MODEL_DIR...

The only line that differs between the engines is the import. Every model
folder holds NAME.onnx and either input.npy (one input) or case_K/ folders
of INPUT_NAME.npy files. The outputs go to OUT.npz as "<model>/<case>/<output>".
"""

import sys
from pathlib import Path

import numpy as np

if sys.argv[1] == "anvil":
    import anvil as rt
else:
    import onnxruntime as rt


def cases(folder: Path, input_names):
    if (folder / "input.npy").is_file():
        yield "input", {input_names[0]: np.load(folder / "input.npy")}
        return
    for case in sorted(folder.glob("case_*")):
        yield case.name, {name: np.load(case / f"{name}.npy") for name in input_names}


def main() -> int:
    _, engine, out_path, *folders = sys.argv
    options = rt.SessionOptions()
    options.intra_op_num_threads = 2
    options.graph_optimization_level = rt.GraphOptimizationLevel.ORT_ENABLE_ALL
    results = {}
    for folder in map(Path, folders):
        model = folder / f"{folder.name}.onnx"
        session = rt.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        input_names = [i.name for i in session.get_inputs()]
        output_names = [o.name for o in session.get_outputs()]
        for case, feed in cases(folder, input_names):
            for name, value in zip(output_names, session.run(None, feed)):
                results[f"{folder.name}/{case}/{name}"] = value
    np.savez(out_path, **results)
    print(f"{engine}: {len(results)} outputs of {len(folders)} models")
    return 0


if __name__ == "__main__":
    sys.exit(main())
