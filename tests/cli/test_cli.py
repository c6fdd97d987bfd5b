"""The working paths of the anvil command: info, run, bench, conformance."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper

from anvil_testing import (assert_ok, describe, float_info, make_add_model, make_conv_relu_model, make_relu_model,
                           output_file_name, read_tensor_pb, save_model, write_tensor_pb)

SHAPE = (1, 3, 4, 4)
TESTDATA = Path("/usr/share/libonnx-testdata/data/node")
STAT_KEYS = ("mean_ms", "median_ms", "p90_ms", "p99_ms", "min_ms", "max_ms")
BENCH_KEYS = ("model", "threads", "batch", "session_create_ms", "first_run_ms", "cycles", "overall",
              "throughput_per_s", "peak_rss_bytes", "arena_bytes")


def seeded(seed: int, shape=SHAPE) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


@pytest.fixture
def add_model(tmp_path):
    return make_add_model(tmp_path / "add.onnx")


# --------------------------------------------------------------------------
# anvil info
# --------------------------------------------------------------------------

# /proc/cpuinfo flag -> (name, spellings accepted in `anvil info`)
ISA_FLAGS = {
    "sse4_1": ("SSE4.1", r"sse\s?4[._]?1"),
    "avx2": ("AVX2", r"avx-?2"),
    "avx512f": ("AVX-512", r"avx-?512"),
    "avx512_vnni": ("VNNI", r"vnni"),
    "avx_vnni": ("VNNI", r"vnni"),
    "avx512_bf16": ("BF16", r"bf16"),
    "amx_tile": ("AMX", r"amx"),
}


def cpuinfo() -> tuple:
    """(model name, set of flags) of the first CPU in /proc/cpuinfo."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "", set()
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    flags = re.search(r"^flags\s*:\s*(.+)$", text, re.MULTILINE)
    return (" ".join(model.group(1).split()) if model else "",
            set(flags.group(1).split()) if flags else set())


def test_info_lists_cpu_and_isa(anvil):
    """CPU model, cores, caches, and every ISA extension this CPU has."""
    result = anvil("info", timeout=30)
    assert_ok(result)
    text = result.stdout
    model, flags = cpuinfo()
    if model:
        assert model in " ".join(text.split()), f"`anvil info` does not name the CPU {model!r}" + describe(result)
    assert re.search(ISA_FLAGS["sse4_1"][1], text, re.IGNORECASE), "no SSE4.1 line" + describe(result)
    for flag in sorted(flags & ISA_FLAGS.keys()):
        label, pattern = ISA_FLAGS[flag]
        assert re.search(pattern, text, re.IGNORECASE), (
            f"the CPU has {label} ({flag}) but `anvil info` does not mention it" + describe(result))
    for word in ("cores", "L1", "L2", "oneDNN"):
        assert re.search(re.escape(word), text, re.IGNORECASE), f"`anvil info` does not mention {word}" + describe(result)


def test_info_honours_max_isa(anvil):
    """ANVIL_MAX_ISA=sse41 caps oneDNN too: its ISA line names no AVX level."""
    result = anvil("info", timeout=30, env={"ANVIL_MAX_ISA": "sse41"})
    assert_ok(result)
    onednn = [line for line in result.stdout.splitlines() if re.search("onednn", line, re.IGNORECASE)]
    assert onednn, "no oneDNN line in `anvil info`" + describe(result)
    assert not any(re.search("avx", line, re.IGNORECASE) for line in onednn), (
        "oneDNN ISA not capped by ANVIL_MAX_ISA=sse41" + describe(result))


# --------------------------------------------------------------------------
# anvil run
# --------------------------------------------------------------------------

def run_add(anvil, model, out_dir, a_file, b_file):
    result = anvil("run", model, "-i", f"A={a_file}", "-i", f"B={b_file}", "-o", out_dir, timeout=60)
    assert_ok(result)
    return read_tensor_pb(out_dir / "C.pb"), result


@pytest.mark.parametrize("kind", ["pb", "npy", "mixed"])
def test_run_add_inputs(anvil, add_model, tmp_path, kind):
    a, b = seeded(1), seeded(2)
    if kind in ("pb", "mixed"):
        a_file = write_tensor_pb(tmp_path / "a.pb", a, "A")
    else:
        a_file = tmp_path / "a.npy"
        np.save(a_file, a)
    if kind == "pb":
        b_file = write_tensor_pb(tmp_path / "b.pb", b, "B")
    else:
        b_file = tmp_path / "b.npy"
        np.save(b_file, b)
    out, result = run_add(anvil, add_model, tmp_path / "out", a_file, b_file)
    assert out.dtype == np.float32 and out.shape == SHAPE
    np.testing.assert_allclose(out, a + b, rtol=1e-6, atol=1e-7)
    assert "C" in result.stdout, "the summary should name the output" + describe(result)


def test_run_reads_inputs_from_pipes(anvil, add_model, tmp_path):
    """Input files that are FIFOs (as `-i A=<(...)` gives): read to their end, their size being unknown."""
    import os
    import threading

    a, b = seeded(1), seeded(2)
    np.save(tmp_path / "a_src.npy", a)
    payloads = {tmp_path / "a.npy": (tmp_path / "a_src.npy").read_bytes(),
                tmp_path / "b.pb": numpy_helper.from_array(b, "B").SerializeToString()}
    writers = []
    for fifo, data in payloads.items():
        os.mkfifo(fifo)
        writers.append(threading.Thread(target=lambda f=fifo, d=data: f.write_bytes(d), daemon=True))
        writers[-1].start()
    out, _ = run_add(anvil, add_model, tmp_path / "out", tmp_path / "a.npy", tmp_path / "b.pb")
    for w in writers:
        w.join(timeout=10)
    np.testing.assert_allclose(out, a + b, rtol=1e-6, atol=1e-7)


def test_run_output_name_is_sanitized(anvil, tmp_path):
    name = "sum:0/out put"
    model = make_add_model(tmp_path / "add_odd.onnx", output_name=name)
    a, b = seeded(3), seeded(4)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    out_dir = tmp_path / "out"
    assert_ok(anvil("run", model, "-i", f"A={tmp_path / 'a.npy'}", "-i", f"B={tmp_path / 'b.npy'}",
                    "-o", out_dir, timeout=60))
    assert output_file_name(name) == "sum_0_out_put.pb"
    assert sorted(p.name for p in out_dir.iterdir()) == ["sum_0_out_put.pb"]
    np.testing.assert_allclose(read_tensor_pb(out_dir / "sum_0_out_put.pb"), a + b, rtol=1e-6)


def test_run_random_inputs(anvil, tmp_path):
    """No -i: seeded random inputs of the declared shape; same seed, same result."""
    model = make_relu_model(tmp_path / "relu.onnx")
    outs = {}
    for label, seed in (("first", 5), ("again", 5), ("other", 6)):
        out_dir = tmp_path / label
        assert_ok(anvil("run", model, "-o", out_dir, "--seed", seed, timeout=60))
        outs[label] = read_tensor_pb(out_dir / "data_out.pb")
    assert outs["first"].shape == SHAPE and outs["first"].dtype == np.float32
    assert np.all(np.isfinite(outs["first"])) and np.all(outs["first"] >= 0)
    assert np.any(outs["first"] > 0), "random input gave an all-zero Relu output"
    np.testing.assert_array_equal(outs["first"], outs["again"])
    assert not np.array_equal(outs["first"], outs["other"]), "--seed did not change the inputs"


def test_run_shape_sizes_a_symbol_in_every_input(anvil, tmp_path):
    """--shape for one input sizes its symbols in the others: Concat([seq], [seq]) gives [2 * seq]."""
    from onnx import helper
    graph = helper.make_graph(
        [helper.make_node("Concat", ["a", "b"], ["c"], axis=0)], "concat",
        [float_info("a", ["seq"]), float_info("b", ["seq"])], [float_info("c", ["both"])])
    model = save_model(graph, tmp_path / "concat.onnx")
    out_dir = tmp_path / "out"
    assert_ok(anvil("run", model, "--shape", "a=5", "-o", out_dir, timeout=60))
    assert read_tensor_pb(out_dir / "c.pb").shape == (10,)


def test_run_tune_times_then_reads_the_cache(anvil, tmp_path):
    """--tune times a MatMul's two kernels, writes the choice to --tune-cache; the next run plans from it."""
    from onnx import helper
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((64, 48)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [float_info("x", [16, 64])], [float_info("y", [16, 48])], [w])
    model = save_model(graph, tmp_path / "mm.onnx")
    cache = tmp_path / "tune.json"
    x = rng.standard_normal((16, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    for run, expected in ((1, "tuning: 1 nodes timed, 0 from the cache"), (2, "tuning: 0 nodes timed, 1 from the cache")):
        out_dir = tmp_path / f"out{run}"
        r = anvil("run", model, "-i", f"x={tmp_path / 'x.npy'}", "-o", out_dir, "--tune", "--tune-cache", cache,
                  timeout=60)
        assert_ok(r)
        assert expected in r.stdout, r.stdout
        np.testing.assert_allclose(read_tensor_pb(out_dir / "y.pb"), x @ numpy_helper.to_array(w), rtol=1e-4, atol=1e-4)
    choices = json.loads(cache.read_text())["choices"]
    assert len(choices) == 1 and next(iter(choices.values()))["choice"] in ("dnnl", "packed_gemm"), choices
    r = anvil("run", model, "--tune-cache", cache, timeout=60)  # the cache alone is refused
    assert r.returncode != 0 and "--tune-cache requires --tune" in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_run_threads_agree(anvil, add_model, tmp_path):
    np.save(tmp_path / "a.npy", seeded(7))
    np.save(tmp_path / "b.npy", seeded(8))
    results = []
    for threads in (1, 2):
        out_dir = tmp_path / f"t{threads}"
        assert_ok(anvil("run", add_model, "-i", f"A={tmp_path / 'a.npy'}", "-i", f"B={tmp_path / 'b.npy'}",
                        "-o", out_dir, "--threads", threads, timeout=60))
        results.append(read_tensor_pb(out_dir / "C.pb"))
    np.testing.assert_array_equal(results[0], results[1])


# --------------------------------------------------------------------------
# anvil bench
# --------------------------------------------------------------------------

def check_stats(stats: dict, where: str) -> None:
    """Keys present, positive, finite, ordered min <= median <= p90 <= p99 <= max."""
    for key in STAT_KEYS:
        assert key in stats, f"{where}: no '{key}' in {stats}"
        assert isinstance(stats[key], (int, float)) and np.isfinite(stats[key]) and stats[key] > 0, (
            f"{where}: {key} = {stats[key]!r}")
    ordered = [stats[k] for k in ("min_ms", "median_ms", "p90_ms", "p99_ms", "max_ms")]
    assert all(a <= b + 1e-9 for a, b in zip(ordered, ordered[1:])), f"{where}: statistics out of order: {stats}"
    assert stats["min_ms"] - 1e-9 <= stats["mean_ms"] <= stats["max_ms"] + 1e-9, (
        f"{where}: mean outside [min, max]: {stats}")


def check_bench_json(report: dict, cycles: int, threads=None, batch: int = 1) -> None:
    missing = [k for k in BENCH_KEYS if k not in report]
    assert not missing, f"bench JSON lacks {missing}: {report}"
    assert isinstance(report["model"], str) and report["model"]
    assert isinstance(report["threads"], int) and report["threads"] >= 1
    if threads is not None:
        assert report["threads"] == threads
    assert report["batch"] == batch
    assert report["session_create_ms"] >= 0 and report["first_run_ms"] > 0
    assert isinstance(report["cycles"], list) and len(report["cycles"]) == cycles
    for i, cycle in enumerate(report["cycles"]):
        check_stats(cycle, f"cycle {i}")
    check_stats(report["overall"], "overall")
    o = report["overall"]
    assert o["min_ms"] <= min(c["min_ms"] for c in report["cycles"]) + 1e-9
    assert o["max_ms"] >= max(c["max_ms"] for c in report["cycles"]) - 1e-9
    # Samples per second: batch / latency, whichever latency statistic is used.
    per_s = report["throughput_per_s"]
    assert batch * 1000.0 / o["max_ms"] * 0.99 <= per_s <= batch * 1000.0 / o["min_ms"] * 1.01, (
        f"throughput {per_s}/s inconsistent with latencies {o}")
    assert report["arena_bytes"] >= 0
    assert report["peak_rss_bytes"] >= max(report["arena_bytes"], 1 << 20), "implausible peak RSS"


def test_bench_peak_rss_is_its_own_not_the_launchers(anvil, add_model, tmp_path):
    """peak_rss_bytes is the process's own high-water mark (VmHWM): a launcher
    that holds 600 MiB when it starts anvil must not show in the figure
    (getrusage's ru_maxrss carries the parent's across fork and exec)."""
    out = tmp_path / "bench.json"
    launcher = (
        "import subprocess, sys\n"
        "hog = bytearray(600 << 20)\n"
        "for i in range(0, len(hog), 4096): hog[i] = 1\n"
        "sys.exit(subprocess.run(sys.argv[1:]).returncode)\n")
    import subprocess
    import sys
    from anvil_testing import anvil_bin
    result = subprocess.run([sys.executable, "-c", launcher, str(anvil_bin()), "bench", str(add_model), "--cycles",
                             "1", "--iters", "2", "--warmup", "0", "--json", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    rss = json.loads(out.read_text())["peak_rss_bytes"]
    assert (1 << 20) <= rss < (400 << 20), f"peak RSS {rss >> 20} MiB includes the launcher's 600 MiB"


def test_bench_zoo_resnet18(anvil, tmp_path):
    out = tmp_path / "out.json"
    result = anvil("bench", "zoo:resnet18", "--cycles", "1", "--iters", "3", "--warmup", "1",
                   "--json", out, timeout=300)
    assert_ok(result)
    report = json.loads(out.read_text())
    check_bench_json(report, cycles=1)
    assert "resnet18" in report["model"]
    # The largest ResNet-18 activation (1x64x112x112 float) must fit in the arena.
    assert report["arena_bytes"] >= 64 * 112 * 112 * 4, f"arena {report['arena_bytes']} B is too small"
    assert report["peak_rss_bytes"] >= 40 * (1 << 20), "ResNet-18 weights alone are 45 MB"


def test_bench_model_file_with_inputs(anvil, tmp_path):
    model = make_relu_model(tmp_path / "relu.onnx")
    np.save(tmp_path / "x.npy", seeded(9))
    out = tmp_path / "relu.json"
    result = anvil("bench", model, "--threads", "1", "--cycles", "2", "--iters", "5", "--warmup", "1",
                   "-i", f"data_in={tmp_path / 'x.npy'}", "--json", out, timeout=120)
    assert_ok(result)
    check_bench_json(json.loads(out.read_text()), cycles=2, threads=1)


# --------------------------------------------------------------------------
# anvil conformance
# --------------------------------------------------------------------------

RELU_CASE = TESTDATA / "test_relu"


@pytest.mark.skipif(not RELU_CASE.is_dir(), reason="libonnx-testdata is not installed")
def test_conformance_relu_passes(anvil):
    result = anvil("conformance", RELU_CASE, timeout=120)
    assert_ok(result)
    assert "test_relu" in result.stdout, "one line per case, naming it" + describe(result)


@pytest.mark.skipif(not RELU_CASE.is_dir(), reason="libonnx-testdata is not installed")
def test_conformance_reports_a_wrong_output(anvil, tmp_path):
    """A case whose expected output is wrong fails, with a non-zero exit (not a crash)."""
    case = tmp_path / "test_relu_wrong"
    shutil.copytree(RELU_CASE, case)
    expected = case / "test_data_set_0" / "output_0.pb"
    original = TensorProto()
    original.ParseFromString(expected.read_bytes())
    write_tensor_pb(expected, numpy_helper.to_array(original) + 1.0, original.name)
    result = anvil("conformance", case, timeout=120)
    assert result.returncode > 0, "a failing case must give a non-zero exit" + describe(result)
    assert "test_relu_wrong" in result.stdout + result.stderr, describe(result)


@pytest.mark.skipif(not RELU_CASE.is_dir(), reason="libonnx-testdata is not installed")
def test_conformance_summary_counts_folders_and_operators(anvil, tmp_path):
    """--summary counts each case once per folder and once per operator its model uses."""
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copytree(RELU_CASE, suite / "test_relu")
    shutil.copytree(TESTDATA / "test_add", suite / "test_add")
    wrong = suite / "test_relu_wrong"
    shutil.copytree(RELU_CASE, wrong)
    expected = wrong / "test_data_set_0" / "output_0.pb"
    original = TensorProto()
    original.ParseFromString(expected.read_bytes())
    write_tensor_pb(expected, numpy_helper.to_array(original) + 1.0, original.name)
    report = tmp_path / "report.json"
    result = anvil("conformance", suite, "--summary", "--json", report, timeout=120)
    assert result.returncode == 1, describe(result)
    doc = json.loads(report.read_text())
    assert doc["per_folder"]["suite"] == {"cases": 3, "pass": 2, "fail": 1, "error": 0, "unsupported": 0,
                                          "invalid": 0}, doc
    assert doc["per_op"]["Relu"]["cases"] == 2 and doc["per_op"]["Relu"]["fail"] == 1, doc
    assert doc["per_op"]["Add"] == {"cases": 1, "pass": 1, "fail": 0, "error": 0, "unsupported": 0, "invalid": 0}, doc
    assert re.search(r"^Relu\s+2\s+1\s+1\s", result.stdout, re.M), describe(result)


def test_bench_profile_and_chrome_trace(anvil, tmp_path):
    """--profile prints one row per kernel and a summary by op type; --profile-json
    writes a Chrome trace whose events are those kernels."""
    model = make_conv_relu_model(tmp_path / "conv_relu.onnx")
    trace = tmp_path / "trace.json"
    result = anvil("bench", model, "--threads", "1", "--cycles", "1", "--iters", "2", "--warmup", "0",
                   "--profile", "--profile-runs", "3", "--profile-json", trace, timeout=120)
    assert_ok(result)
    out = result.stdout
    assert "per-node profile: mean of 3 runs" in out, out
    # Conv + Relu fuse into one FusedConv at the default level: one row, and the op summary.
    rows = [line for line in out.splitlines() if line.startswith("anvil.FusedConv 'conv0'")]
    assert len(rows) == 1, out
    assert "[1,8,8,8]" in rows[0] and "%" in rows[0], rows[0]
    assert re.search(r"^FusedConv\s+1\s+[0-9.]+\s+[0-9.]+%$", out, re.MULTILINE), out

    events = json.loads(trace.read_text())["traceEvents"]
    runs = [e for e in events if e["cat"] == "run"]
    nodes = [e for e in events if e["cat"] == "FusedConv"]
    # Whatever else ran is the reorders the planner put around the conv's own layout.
    others = [e for e in events if e["cat"] not in ("run", "FusedConv")]
    assert len(runs) == 3 and len(nodes) == 3, events
    assert all(e["args"]["impl"] == "dnnl:reorder" and "->" in e["args"]["layout"] for e in others), others
    for e in nodes:
        assert e["ph"] == "X" and e["dur"] >= 0 and e["name"] == "anvil.FusedConv 'conv0'", e
        assert e["args"]["output_shape"] == "[1,8,8,8]" and e["args"]["impl"], e


# --------------------------------------------------------------------------
# Sequences and optionals as graph inputs and outputs (SequenceProto and
# OptionalProto files, as ONNX's test data writes them)
# --------------------------------------------------------------------------

def test_run_reads_and_writes_sequence_and_optional_files(anvil, tmp_path):
    from onnx import helper, numpy_helper as nh, save
    seq_f = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    opt_f = helper.make_value_info("o", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, None)))
    graph = helper.make_graph(
        [helper.make_node("SequenceInsert", ["s", "x"], ["s2"]),
         helper.make_node("OptionalHasElement", ["o"], ["has"])],
        "seq_io", [seq_f, helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]), opt_f],
        [helper.make_tensor_sequence_value_info("s2", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("has", TensorProto.BOOL, [])])
    model = tmp_path / "seq_io.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    case = tmp_path / "case"
    case.mkdir()
    items = [np.arange(3, dtype=np.float32), np.ones(1, np.float32)]
    (case / "input_0.pb").write_bytes(nh.from_list(items, "s").SerializeToString())
    write_tensor_pb(case / "input_1.pb", np.array([5, 6], np.float32), "x")
    empty = __import__("onnx").OptionalProto(name="o", elem_type=1)  # an optional tensor without a value
    (case / "input_2.pb").write_bytes(empty.SerializeToString())
    out_dir = tmp_path / "out"
    result = anvil("run", model, "--case", case, "-o", out_dir, timeout=60)
    assert_ok(result)
    seq = __import__("onnx").SequenceProto()
    seq.ParseFromString((out_dir / "0" / "s2.pb").read_bytes())
    got = nh.to_list(seq)
    assert len(got) == 3, describe(result)
    for g, w in zip(got, items + [np.array([5, 6], np.float32)]):
        np.testing.assert_array_equal(g, w)
    assert not read_tensor_pb(out_dir / "0" / "has.pb").item(), describe(result)
    assert "sequence of 3" in result.stdout, describe(result)
