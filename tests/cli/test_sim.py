"""The sim backend from the command line: `sampan build --backend sim --sim-profile`, `sampan bench`
and `sampan run` of a sim plan, `sampan info`, and the errors (src/backends/sim/sim.h).

Run: SAMPAN_BIN=build/sampan .venv/bin/python -m pytest tests/cli/test_sim.py
"""
import json
import os
import subprocess

import numpy as np
import onnx
import pytest

from test_build_bench import make_conv_net, sampan, sampan_bin


def bench_json(path, batch, median_ms, qps, backend="cuda"):
    """A `sampan bench --json` file with the fields the sim reads (and a few others)."""
    stats = {"min": median_ms * 0.9, "max": median_ms * 1.2, "mean": median_ms, "median": median_ms,
             "p90": median_ms, "p95": median_ms, "p99": median_ms, "stddev": 0.01}
    path.write_text(json.dumps({"plan": "m.plan", "backend": backend, "runs_on": "NVIDIA H200, sm_90",
                                "streams": 1, "in_flight": 1, "batch": batch, "throughput_qps": qps,
                                "latency_ms": stats}))
    return path


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("sim")
    onnx_path = d / "convnet.onnx"
    onnx.save(make_conv_net(), onnx_path)
    # b1: 20 ms a run, one at a time; b8: 40 ms a run, pipelined so the device is busy 25 ms a run.
    b1 = bench_json(d / "b1.json", 1, 20.0, 50.0)
    b8 = bench_json(d / "b8.json", 8, 40.0, 40.0)
    plan = d / "sim.plan"
    build = sampan("build", "--onnx", onnx_path, "--backend", "sim", "--sim-profile", b1, "--sim-profile", b8,
                   "--minShapes", "x:1x3x12x12", "--optShapes", "x:8x3x12x12", "--maxShapes", "x:16x3x12x12",
                   "--saveEngine", plan, "--verbose")
    return {"dir": d, "onnx": onnx_path, "plan": plan, "build": build, "b1": b1, "b8": b8}


def bench(plan, *args):
    j = plan.parent / "bench.json"
    r = sampan("bench", "--loadEngine", plan, "--warmUp", "0", "--duration", "0", "--json", j, *args)
    return r, json.loads(j.read_text())


def test_build_says_it_is_simulated(work):
    out = work["build"].stdout
    assert "backend:    sim" in out, out
    assert "SIMULATED GPU plan" in out and "b1 20 ms" in out and "b8 40 ms" in out, out
    assert "b1.json" in out and "NVIDIA H200" in out, out


def test_bench_waits_the_recorded_latency(work):
    r, one = bench(work["plan"], "--iterations", "6", "--shapes", "x:1x3x12x12")
    assert "SIMULATED GPU" in r.stdout, r.stdout
    assert one["backend"] == "sim" and one["batch"] == 1
    assert 20.0 <= one["latency_ms"]["median"] < 35.0, one["latency_ms"]
    # Batch 4 lies between the recorded 1 and 8: 20 + 3/7 * 20 ms. (The upper bounds leave room for a
    # loaded CI machine; the lower ones are exact: a run never ends before its recorded latency.)
    _, four = bench(work["plan"], "--iterations", "4", "--shapes", "x:4x3x12x12")
    assert 28.57 <= four["latency_ms"]["median"] < 40.0, four["latency_ms"]
    # Batch 16, above the largest recorded: in proportion, 80 ms.
    _, big = bench(work["plan"], "--iterations", "3", "--shapes", "x:16x3x12x12")
    assert 80.0 <= big["latency_ms"]["median"] < 100.0, big["latency_ms"]


def test_streams_share_one_simulated_device(work):
    # Batch 8 keeps the device busy 25 ms a run: four streams together reach ~40 runs/s, not 4 x 25.
    _, b = bench(work["plan"], "--iterations", "12", "--streams", "4", "--shapes", "x:8x3x12x12")
    assert 25.0 <= b["throughput_qps"] <= 40.5, b


def test_run_gives_deterministic_outputs_of_the_right_shape(work, tmp_path):
    x = np.ones((3, 3, 12, 12), np.float32)
    np.save(tmp_path / "x.npy", x)
    outs = []
    for k in range(2):
        sampan("run", work["plan"], "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / f"o{k}")
        outs.append(np.load(tmp_path / f"o{k}" / "logits.npy"))
    assert outs[0].shape == (3, 10) and outs[0].dtype == np.float32
    np.testing.assert_array_equal(outs[0], outs[1])
    np.save(tmp_path / "x2.npy", x * 2)
    sampan("run", work["plan"], "--input", f"x={tmp_path / 'x2.npy'}", "--output-dir", tmp_path / "o2")
    assert not np.array_equal(np.load(tmp_path / "o2" / "logits.npy"), outs[0])


def test_info_describes_the_simulated_machine(work):
    env = dict(os.environ, SAMPAN_SIM_DEVICES="3", SAMPAN_SIM_DEVICE_MEMORY_MIB="2048")
    r = subprocess.run([sampan_bin(), "info"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert "SIMULATED GPU" in r.stdout, r.stdout
    assert "devices: 3 (SAMPAN_SIM_DEVICES)" in r.stdout and "memory: 2048 MiB each" in r.stdout, r.stdout


def test_errors_name_what_is_wrong(work, tmp_path):
    r = sampan("build", "--onnx", work["onnx"], "--backend", "sim", "--saveEngine", tmp_path / "p.plan",
               check=False)
    assert r.returncode != 0 and "--sim-profile FILE" in r.stderr, r.stderr
    r = sampan("build", "--onnx", work["onnx"], "--backend", "cpu", "--sim-profile", work["b1"],
               "--saveEngine", tmp_path / "p.plan", check=False)
    assert r.returncode != 0 and "--sim-profile is for --backend sim" in r.stderr, r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"batch": 2, "latency_ms": {"median": 3}}')
    r = sampan("build", "--onnx", work["onnx"], "--backend", "sim", "--sim-profile", bad,
               "--saveEngine", tmp_path / "p.plan", check=False)
    assert r.returncode != 0 and "bad.json" in r.stderr and "'throughput_qps'" in r.stderr, r.stderr
    twice = bench_json(tmp_path / "again.json", 8, 3.0, 100.0)
    r = sampan("build", "--onnx", work["onnx"], "--backend", "sim", "--sim-profile", work["b8"], "--sim-profile",
               twice, "--saveEngine", tmp_path / "p.plan", check=False)
    assert r.returncode != 0 and "batch 8 is given twice" in r.stderr, r.stderr
    for var, value in (("SAMPAN_SIM_DEVICES", "0"), ("SAMPAN_SIM_DEVICES", "two"),
                       ("SAMPAN_SIM_DEVICE_MEMORY_MIB", "-5")):
        env = dict(os.environ, **{var: value})
        r = subprocess.run([sampan_bin(), "bench", "--loadEngine", str(work["plan"]), "--iterations", "1"],
                           capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode != 0 and var in r.stderr, (var, value, r.stderr)
    env = dict(os.environ, SAMPAN_SIM_DEVICES="1")
    r = subprocess.run([sampan_bin(), "bench", "--loadEngine", str(work["plan"]), "--iterations", "1",
                        "--device", "1"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode != 0 and "sim device 1 does not exist" in r.stderr, r.stderr


def test_the_recorded_gpu_profiles_build_and_replay(work, tmp_path):
    """bench/results/sim_profiles: ResNet-50 FP16 on an H100, as bench/sim/record_profiles.sh wrote them."""
    d = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                     "bench", "results", "sim_profiles")
    files = sorted(f for f in os.listdir(d) if f.startswith("resnet50_fp16_b") and f.endswith(".json"))
    assert len(files) >= 5, files
    args = []
    for f in files:
        args += ["--sim-profile", os.path.join(d, f)]
    plan = tmp_path / "h100.plan"
    r = sampan("build", "--onnx", work["onnx"], "--backend", "sim", *args, "--minShapes", "x:1x3x12x12",
               "--optShapes", "x:8x3x12x12", "--maxShapes", "x:16x3x12x12", "--saveEngine", plan, "--verbose")
    assert "b8 0.98877" in r.stdout, r.stdout
    _, b8 = bench(plan, "--iterations", "20", "--shapes", "x:8x3x12x12")
    recorded = json.load(open(os.path.join(d, "resnet50_fp16_b8.json")))["latency_ms"]["median"]
    assert recorded <= b8["latency_ms"]["median"] < recorded + 10.0, (recorded, b8["latency_ms"])
