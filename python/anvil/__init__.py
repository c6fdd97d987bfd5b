"""Anvil: a CPU inference engine for ONNX models, with onnxruntime's Python API.

Moving over from ONNX Runtime is a one-line change::

    import anvil as rt            # was: import onnxruntime as rt
    sess = rt.InferenceSession("model.onnx")
    outputs = sess.run(None, {"input": x})

What differs from onnxruntime, and what Anvil adds (execution modes, streams,
``run_async`` futures, per-node profiles), is in docs/python.md.
"""

import atexit
import concurrent.futures
import enum
import json
import os
import threading
import time
import weakref

from ._anvil import (  # noqa: F401  (re-exported)
    Error,
    InternalError,
    InvalidArgument,
    InvalidModel,
    OutOfMemory,
    Unsupported,
    __version__,
    cpu_info,
)
from ._anvil import _Session

__all__ = [
    "Error", "InternalError", "InvalidArgument", "InvalidModel", "OutOfMemory", "Unsupported",
    "ExecutionMode", "GraphOptimizationLevel", "InferenceSession", "NodeArg", "RunOptions",
    "SessionOptions", "cpu_info", "get_available_providers", "get_device", "__version__",
]

_PROVIDERS = ["CPUExecutionProvider"]

# Sessions with run_async requests possibly in flight: at exit each waits for
# them, so no stream calls back into an interpreter that is shutting down.
_async_sessions = weakref.WeakSet()


@atexit.register
def _finish_async_runs():
    for session in list(_async_sessions):
        session._session.wait_idle()


class GraphOptimizationLevel(enum.IntEnum):
    """onnxruntime's names for Anvil's levels 0-3 (ORT_ENABLE_ALL is 3: fusions and blocked layouts)."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """LATENCY: one request at a time on every thread. THROUGHPUT: `streams` requests at once.

    onnxruntime's ORT_SEQUENTIAL and ORT_PARALLEL (inter-operator parallelism)
    are accepted and run in latency mode: Anvil spends its threads inside
    operators.
    """

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1
    LATENCY = 2
    THROUGHPUT = 3


def _int_option(name, value, low, high=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name} must be an int, got {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"between {low} and {high}"
        raise InvalidArgument(f"{name} must be {bound}, got {value}")
    return value


class SessionOptions:
    """Options of an InferenceSession (onnxruntime's names; unknown attributes are refused)."""

    __slots__ = ("_intra", "_inter", "_level", "_mode", "_streams", "_plan_cache", "_tune", "_tune_cache",
                 "enable_profiling",
                 "profile_file_prefix", "log_severity_level", "log_verbosity_level", "logid",
                 "optimized_model_filepath")

    def __init__(self):
        self._intra = 0
        self._inter = 0
        self._level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self._mode = ExecutionMode.LATENCY
        self._streams = 0
        self._plan_cache = 16
        self._tune = False
        self._tune_cache = ""
        self.enable_profiling = False
        self.profile_file_prefix = "anvil_profile"
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.optimized_model_filepath = ""

    @property
    def intra_op_num_threads(self):
        """Threads of the session (0: every core)."""
        return self._intra

    @intra_op_num_threads.setter
    def intra_op_num_threads(self, value):
        self._intra = _int_option("intra_op_num_threads", value, 0, 4096)

    @property
    def inter_op_num_threads(self):
        """Accepted for onnxruntime scripts; Anvil runs operators one after another."""
        return self._inter

    @inter_op_num_threads.setter
    def inter_op_num_threads(self, value):
        self._inter = _int_option("inter_op_num_threads", value, 0, 4096)

    @property
    def graph_optimization_level(self):
        return self._level

    @graph_optimization_level.setter
    def graph_optimization_level(self, value):
        try:
            self._level = GraphOptimizationLevel(value)
        except ValueError:
            raise InvalidArgument(f"graph_optimization_level must be a GraphOptimizationLevel, got {value!r}") from None

    @property
    def execution_mode(self):
        return self._mode

    @execution_mode.setter
    def execution_mode(self, value):
        if isinstance(value, str):
            value = {"latency": ExecutionMode.LATENCY, "throughput": ExecutionMode.THROUGHPUT}.get(value.lower(), value)
        try:
            self._mode = ExecutionMode(value)
        except ValueError:
            raise InvalidArgument(f"execution_mode must be an ExecutionMode, 'latency' or 'throughput', got {value!r}") from None

    @property
    def streams(self):
        """Throughput mode: concurrent requests (0: chosen by cores and model size)."""
        return self._streams

    @streams.setter
    def streams(self, value):
        self._streams = 0 if value == "auto" else _int_option("streams", value, 0, 4096)

    @property
    def plan_cache_size(self):
        """Plans kept for distinct input shapes (least recently used dropped first)."""
        return self._plan_cache

    @plan_cache_size.setter
    def plan_cache_size(self, value):
        self._plan_cache = _int_option("plan_cache_size", value, 1, 1 << 20)

    @property
    def tune(self):
        """Time the alternative kernels of each node when planning and keep the fastest (Anvil's own option)."""
        return self._tune

    @tune.setter
    def tune(self, value):
        if not isinstance(value, bool):
            raise InvalidArgument(f"tune must be a bool, got {type(value).__name__}")
        self._tune = value

    @property
    def tune_cache(self):
        """The tuning cache file ("": $ANVIL_TUNE_CACHE, else $XDG_CACHE_HOME/anvil/tune.json, else ~/.cache/anvil/tune.json)."""
        return self._tune_cache

    @tune_cache.setter
    def tune_cache(self, value):
        self._tune_cache = os.fspath(value) if isinstance(value, os.PathLike) else value
        if not isinstance(self._tune_cache, str):
            raise InvalidArgument(f"tune_cache must be a path, got {type(value).__name__}")

    def _level_number(self):
        return 3 if self._level == GraphOptimizationLevel.ORT_ENABLE_ALL else int(self._level)

    def _mode_name(self):
        return "throughput" if self._mode == ExecutionMode.THROUGHPUT else "latency"


class RunOptions:
    """Accepted by run() for onnxruntime scripts; Anvil has no per-run options yet."""

    def __init__(self):
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.run_tag = ""
        self.terminate = False


_TYPE_NAMES = {
    "float32": "float", "float64": "double", "float16": "float16", "bfloat16": "bfloat16",
    "int8": "int8", "uint8": "uint8", "int16": "int16", "uint16": "uint16", "int32": "int32",
    "uint32": "uint32", "int64": "int64", "uint64": "uint64", "bool": "bool", "string": "string",
    "float8e4m3fn": "float8e4m3fn", "float8e4m3fnuz": "float8e4m3fnuz", "float8e5m2": "float8e5m2",
    "float8e5m2fnuz": "float8e5m2fnuz", "float8e8m0": "float8e8m0", "float4e2m1": "float4e2m1",
    "int4": "int4", "uint4": "uint4", "int2": "int2", "uint2": "uint2",
}


def _type_string(dtype, kind):
    tensor = f"tensor({_TYPE_NAMES.get(dtype, dtype)})"
    return {"tensor": tensor, "sequence": f"seq({tensor})", "optional tensor": f"optional({tensor})",
            "optional sequence": f"optional(seq({tensor}))"}[kind]


class NodeArg:
    """A model input or output: name, shape (ints, symbolic names as strings, None when unnamed) and type."""

    __slots__ = ("name", "shape", "type")

    def __init__(self, name, shape, type):  # noqa: A002  (onnxruntime's attribute name)
        self.name = name
        self.shape = shape
        self.type = type

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


def _node_args(described):
    return [NodeArg(name, shape, _type_string(dtype, kind)) for name, dtype, kind, shape in described]


class InferenceSession:
    """Loads a model (a path or its bytes), plans it and runs it; run() may be called from many threads."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs):
        options = sess_options if sess_options is not None else SessionOptions()
        if not isinstance(options, SessionOptions):
            raise InvalidArgument(f"sess_options must be an anvil.SessionOptions, got {type(options).__name__}")
        if providers is not None and not isinstance(providers, (list, tuple)):
            raise InvalidArgument(f"providers must be a list, got {type(providers).__name__}")
        self._options = options
        self._model_path = path_or_bytes if isinstance(path_or_bytes, (str, os.PathLike)) else None
        self._session = _Session(path_or_bytes, options.intra_op_num_threads, options._level_number(),
                                 options._mode_name(), options.streams, options.plan_cache_size, options.tune,
                                 options.tune_cache)
        self._inputs = _node_args(self._session.inputs())
        self._outputs = _node_args(self._session.outputs())
        self._output_index = {o.name: i for i, o in enumerate(self._outputs)}
        self._profiling = bool(options.enable_profiling)
        self._profile_start_ns = time.time_ns()
        self._profiles = []
        self._profiles_lock = threading.Lock()
        if options.optimized_model_filepath:
            raise Unsupported("optimized_model_filepath: write the optimized model with `anvil optimize IN OUT`")

    # --- what the model takes and gives --------------------------------------------------------
    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_overridable_initializers(self):
        return []

    def get_providers(self):
        return list(_PROVIDERS)

    def get_provider_options(self):
        return {p: {} for p in _PROVIDERS}

    def get_session_options(self):
        return self._options

    @property
    def streams(self):
        """Concurrent requests of run_async (1 in latency mode)."""
        return self._session.streams

    @property
    def threads_per_stream(self):
        return self._session.threads_per_stream

    # --- running ----------------------------------------------------------------------------------
    def _indices(self, output_names):
        if output_names is None:
            return None
        if isinstance(output_names, str) or not isinstance(output_names, (list, tuple)):
            raise InvalidArgument(f"output_names must be a list of names or None, got {type(output_names).__name__}")
        indices = []
        for name in output_names:
            index = self._output_index.get(name) if isinstance(name, str) else None
            if index is None:
                known = ", ".join(repr(o.name) for o in self._outputs)
                raise InvalidArgument(f"the model has no output named {name!r} (its outputs: {known})")
            indices.append(index)
        return indices

    def run(self, output_names, input_feed, run_options=None):
        """Runs the model: a list of arrays, one per name in output_names (None: every output)."""
        return self._session.run(input_feed, self._indices(output_names), self._profiling)

    def run_async(self, output_names, input_feed, callback=None, user_data=None, run_options=None):
        """Queues a run for the session's streams.

        With a callback (onnxruntime's form), returns None and calls
        ``callback(outputs, user_data, error_message)`` on a stream's thread,
        error_message being "" on success. Without one, returns a
        concurrent.futures.Future of the outputs. Input arrays must not be
        changed until the run ends. Bad inputs raise here, before queueing.
        """
        indices = self._indices(output_names)
        if callback is not None and not callable(callback):
            raise InvalidArgument(f"callback must be callable, got {type(callback).__name__}")
        _async_sessions.add(self)
        if callback is None:
            future = concurrent.futures.Future()
            future.set_running_or_notify_cancel()

            def settle(outputs, error):
                if error is None:
                    future.set_result(outputs)
                else:
                    future.set_exception(error)

            self._session.run_async(input_feed, indices, settle)
            return future

        def report(outputs, error):
            callback(outputs, user_data, "" if error is None else str(error))

        self._session.run_async(input_feed, indices, report)
        return None

    # --- profiling --------------------------------------------------------------------------------
    def last_profiles(self):
        """The per-node profiles of the runs since the last call (needs enable_profiling): a list of
        {"total_us", "nodes": [{"node", "op", "impl", "layout", "output_shape", "start_us", "duration_us"}]}."""
        runs = self._session.take_profiles()
        with self._profiles_lock:
            self._profiles.extend(runs)
        return runs

    def get_profiling_start_time_ns(self):
        return self._profile_start_ns

    def end_profiling(self):
        """Writes the profiled runs as a Chrome trace (Perfetto, chrome://tracing) and returns its path."""
        self.last_profiles()
        with self._profiles_lock:
            runs, self._profiles = self._profiles, []
        self._profiling = False
        if not runs:
            return ""
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        path = f"{self._options.profile_file_prefix}_{stamp}.json"
        events, offset = [], 0.0
        for run_index, run in enumerate(runs):
            events.append({"cat": "Session", "name": "model_run", "ph": "X", "pid": 1, "tid": 0,
                           "ts": offset, "dur": run["total_us"], "args": {"run": run_index}})
            for node in run["nodes"]:
                events.append({"cat": "Node", "name": node["node"], "ph": "X", "pid": 1, "tid": 0,
                               "ts": offset + node["start_us"], "dur": node["duration_us"],
                               "args": {"op_name": node["op"], "impl": node["impl"], "layout": node["layout"],
                                        "output_shape": node["output_shape"]}})
            offset += run["total_us"] + 1.0
        try:
            with open(path, "w") as f:
                json.dump(events, f)
        except OSError as e:
            raise InvalidArgument(f"cannot write the profile '{path}': {e.strerror}") from None
        return path


def get_available_providers():
    return list(_PROVIDERS)


def get_device():
    return "CPU"
