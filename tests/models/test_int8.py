"""INT8 tests (issue #16), on the models, calibration and held-out data that
tests/models/export_qdq.py writes (tests/models/export_all.sh runs it).

a. Explicit quantization: ORT-quantized models (`qdq/<model>.qdq.onnx`, QDQ format, and
   `qdq/<model>.qop.onnx`, QOperator format) run by `sampan run --backend cpu|reference` on
   held-out samples, against onnxruntime running the same file, and (looser) against the FP32 model.
b. Implicit quantization: `sampan build MODEL.onnx --backend cpu --int8 --calibData DIR --calib
   CACHE --saveEngine PLAN` on the FP32 model, the plan run on held-out samples against FP32
   onnxruntime; calibration determinism, the cache round trip, and refused bad inputs.

Reference for (a). An ORT-quantized graph is defined by its QDQ semantics (DequantizeLinear ->
float op -> QuantizeLinear), which onnxruntime computes exactly when its graph optimisations are
off (`ORT_DISABLE_ALL`); its default session instead runs fused integer kernels, which round
differently and, on CPUs without VNNI, saturate u8 x s8 products in int16 (vpmaddubsw). The two
ORT sessions disagree by more than one int8 implementation should from another (measured on an
AVX2 EPYC: resnet50 rel-L2 0.018, ocr_det 0.13-0.23, ocr_rec logits 0.3). So every int8 output is
compared with both sessions and the closer one counts ("ORT int8" below).

Metrics, per model (the quantized outputs are themselves quantized: resnet50's logits have a
step of ~1.05, ocr_rec's probabilities and ocr_det's map steps of 1/255):
  resnet50, mobilenet_v2   rel-L2 of the logits, and top-1
  minilm_l6                cosine of sentence_embedding (the masked mean-pooled, L2-normalised
                           last_hidden_state)
  ocr_rec                  the greedy CTC decoding (spaces ignored vs ORT int8: the space class is
                           marginal in this model and flips between ORT's own two sessions)
  ocr_det                  IoU of the text masks (probability > 0.3, DB's binarisation threshold)

ISA. On CPUs without VNNI (AVX2; AVX-512 before Cascade Lake) Sampan's cpu backend halves
weights wider than 7 bits (16-bit pair sums would saturate otherwise: backends/cpu/onednn_quant.cpp),
so its results sit a little further from ORT's: MiniLM's bound against ORT int8 is 0.98 there
instead of 0.99. The reference backend computes the QDQ semantics exactly and is held to 0.99
everywhere.

Environment as tests/models/test_models.py: SAMPAN_BIN (default build/sampan), SAMPAN_MODELS
(default build/models), SAMPAN_TIMEOUT. SAMPAN_INT8_SAMPLES=N caps the held-out samples per test
(default: the small numbers below, so the file runs in a few minutes under ASan).
"""
import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_models import ctc_greedy_decode, load_charset, rel_l2  # noqa: E402  (helpers, no tests)

ROOT = HERE.parents[1]
MODELS = Path(os.environ.get("SAMPAN_MODELS", ROOT / "build" / "models"))
SAMPAN = Path(os.environ.get("SAMPAN_BIN", ROOT / "build" / "sampan"))
TIMEOUT = int(os.environ.get("SAMPAN_TIMEOUT", "1800"))
MAX_SAMPLES = int(os.environ.get("SAMPAN_INT8_SAMPLES", "0"))
DET_THRESHOLD = 0.3

def _cpu_flags() -> set:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


VNNI = bool(_cpu_flags() & {"avx512_vnni", "avx_vnni", "amx_int8"})

# model -> kind of output check
KIND = {"resnet50": "logits", "mobilenet_v2": "logits", "minilm_l6": "embedding", "ocr_rec": "text",
        "ocr_det": "mask"}
# Bounds. vs_int8: Sampan vs the closer ORT session on the same quantized model. vs_fp32: the same
# Sampan output vs the FP32 model (what the quantization itself costs; ORT int8 measured in
# brackets). implicit: Sampan's own calibration (`--int8`) vs FP32.
VS_INT8 = {"logits": 0.05, "embedding": 0.99, "mask": 0.90}           # rel-L2 <= / cos >= / IoU >=
VS_FP32 = {"logits": 0.10,       # [resnet50 0.020, mobilenet_v2 0.027]
           "embedding": 0.97,    # [minilm_l6.qdq 0.986, .qop 0.990]
           "mask": 0.85}         # [0.90-0.95]
IMPLICIT = {"resnet50": 0.10, "minilm_l6": 0.99}  # rel-L2 <=, cos >=; ocr_rec: text == FP32's
# 7-bit weights on CPUs without VNNI (see the top of this file).
VS_INT8_CPU_NO_VNNI = {"embedding": 0.98}
# Implicit builds: extra flags per model. MiniLM's activations carry outliers the entropy
# calibrator clips (TensorRT's advice for BERT is the max): minmax, and the accuracy gate on held-
# out samples 0..3 (the tests then evaluate on 4..7).
GATE_SAMPLES = 4
IMPLICIT_FLAGS = {"minilm_l6": ["--calibMethod", "minmax", "--accuracyBound", "0.99"],
                  # OCR recognition: every time step's class must stay; on this AVX2 machine the gate
                  # keeps most layers in float (measured: top-1 0.925 with all 47 in int8).
                  "ocr_rec": ["--calibMethod", "minmax", "--accuracyMetric", "top1", "--accuracyBound", "0.99"]}


# --------------------------------------------------------------------------------------------
# Data, models and runners
def need(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"{path} is missing: run `.venv/bin/python tests/models/export_qdq.py` "
                    f"(bash tests/models/export_all.sh does)", pytrace=False)
    return path


def sample_files(model: str, split: str, n: int, skip: int = 0) -> list:
    """n samples of OUT/<split>/<model>/NAME.K.npy (after the first `skip`) as [{input name: file}]."""
    d = need(MODELS / split / model)
    by_k = {}
    for f in d.glob("*.npy"):
        name, k, _ = f.name.rsplit(".", 2)
        by_k.setdefault(int(k), {})[name] = f
    if MAX_SAMPLES:
        n = min(n, MAX_SAMPLES)
    assert len(by_k) >= n + skip, f"{d} holds {len(by_k)} samples, need {n + skip}"
    return [by_k[k] for k in sorted(by_k)[skip:skip + n]]


def gate_dir(model: str, dest: Path) -> Path:
    """Held-out samples 0..GATE_SAMPLES-1 copied to `dest` (the accuracy gate's data)."""
    dest.mkdir(parents=True, exist_ok=True)
    for k, files in enumerate(sample_files(model, "heldout", GATE_SAMPLES)):
        for name, f in files.items():
            shutil.copy(f, dest / f"{name}.{k}.npy")
    return dest


def load(files: dict) -> dict:
    return {name: np.load(f) for name, f in files.items()}


def _safe(name: str) -> str:
    return name.replace("/", "_").replace("\\", "_").replace(":", "_")


def sampan(*args, ok=True, timeout=TIMEOUT) -> subprocess.CompletedProcess:
    if not SAMPAN.exists():
        pytest.fail(f"sampan binary {SAMPAN} not found (build it with scripts/build.sh or set SAMPAN_BIN)")
    cmd = [str(SAMPAN), *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    proc.cmdline = " ".join(cmd)
    if ok and proc.returncode != 0:
        pytest.fail(f"`{proc.cmdline}` failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                    f"{proc.stderr[-3000:]}", pytrace=False)
    return proc


def output_names(onnx_path: Path) -> list:
    return [o.name for o in onnx.load(str(onnx_path), load_external_data=False).graph.output]


def sampan_run(model: Path, files: dict, out_dir: Path, extra=(), names_from: Path = None) -> dict:
    """`sampan run MODEL --input NAME=FILE ... --output-dir D [extra]`; outputs by name. For a
    plan, `names_from` is the ONNX model whose graph outputs name the files."""
    args = ["run", model, "--output-dir", out_dir, *extra]
    for name, f in files.items():
        args += ["--input", f"{name}={f}"]
    sampan(*args)
    outs = {}
    for n in output_names(names_from or model):
        f = out_dir / f"{_safe(n)}.npy"
        assert f.exists(), f"sampan did not write output {n} ({f})"
        outs[n] = np.load(f)
    return outs


@functools.lru_cache(maxsize=None)
def ort_session(path: Path, fused: bool = True) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    if not fused:  # DQ -> float op -> Q, node by node: the QDQ graph's exact semantics
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def ort_run(path: Path, feed: dict, fused: bool = True) -> dict:
    s = ort_session(path, fused)
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feed)))


def ort_int8(path: Path, feed: dict) -> dict:
    """Both ORT readings of a quantized model: its fused int8 kernels and its exact QDQ semantics."""
    return {"ORT int8 (fused kernels)": ort_run(path, feed, True),
            "ORT int8 (unfused, QDQ semantics)": ort_run(path, feed, False)}


# --------------------------------------------------------------------------------------------
# Metrics
def the_output(kind: str, outs: dict) -> np.ndarray:
    if kind == "embedding":
        return outs["sentence_embedding"]
    assert len(outs) == 1, f"expected one output, got {sorted(outs)}"
    return next(iter(outs.values()))


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    ma, mb = a > DET_THRESHOLD, b > DET_THRESHOLD
    union = np.logical_or(ma, mb).sum()
    return float(np.logical_and(ma, mb).sum() / union) if union else 1.0


@functools.lru_cache(maxsize=None)
def charset():
    return load_charset()


def decode(probs: np.ndarray) -> str:
    return ctc_greedy_decode(probs[0], charset())


def no_spaces(text: str) -> str:
    return "".join(text.split())


HIGHER_IS_BETTER = {"logits": False, "embedding": True, "mask": True}


def metric(kind: str, ours: np.ndarray, ref: np.ndarray):
    """(value, better-is-higher) of one output vs one reference: rel-L2, cosine or mask IoU."""
    fn = {"logits": rel_l2, "embedding": cosine, "mask": mask_iou}[kind]
    return fn(ours, ref), HIGHER_IS_BETTER[kind]


def closest(kind: str, ours: np.ndarray, refs: dict):
    """(best metric over several references, the reference that gave it)."""
    scored = [(metric(kind, ours, the_output(kind, r))[0], name) for name, r in refs.items()]
    return max(scored) if HIGHER_IS_BETTER[kind] else min(scored)


def check_shapes(label: str, ours: dict, ref: dict):
    assert set(ours) == set(ref), f"{label}: outputs {sorted(ours)} != onnxruntime's {sorted(ref)}"
    for k, e in ref.items():
        assert ours[k].shape == e.shape, f"{label}/{k}: shape {ours[k].shape} != onnxruntime {e.shape}"
        assert ours[k].dtype == e.dtype, f"{label}/{k}: dtype {ours[k].dtype} != onnxruntime {e.dtype}"
        assert np.isfinite(ours[k]).all(), f"{label}/{k}: non-finite values"


def at_least(n: int) -> int:
    """'Most samples': all of up to 3, all but one of 4..7, all but two of 8."""
    return n - n // 4


def compare_quantized(label: str, kind: str, results: list, vs_int8=None, vs_fp32=None, backend="cpu"):
    """results: [(ours, {ORT int8 readings}, fp32)] per sample -> asserts the model-specific bounds."""
    if vs_int8 is None:
        vs_int8 = VS_INT8_CPU_NO_VNNI.get(kind, VS_INT8.get(kind)) if backend == "cpu" and not VNNI else VS_INT8.get(kind)
    vs_fp32 = VS_FP32.get(kind) if vs_fp32 is None else vs_fp32
    n = len(results)
    lines, fails = [], []
    top1_int8 = top1_fp32 = text_fp32 = 0
    for k, (ours, refs, fp32) in enumerate(results):
        for r in refs.values():
            check_shapes(label, ours, r)
        o, f = the_output(kind, ours), the_output(kind, fp32)
        if kind == "text":
            got = decode(o)
            want = {name: decode(the_output(kind, r)) for name, r in refs.items()}
            fp32_text = decode(f)
            lines.append(f"  sample {k}: sampan {got!r}, " + ", ".join(f"{n_}: {t!r}" for n_, t in want.items())
                         + f", FP32 {fp32_text!r}")
            if no_spaces(got) not in {no_spaces(t) for t in want.values()}:
                fails.append(f"sample {k}: text {got!r} is neither ORT int8 reading {sorted(want.values())}")
            text_fp32 += no_spaces(got) == no_spaces(fp32_text)
            continue
        value, who = closest(kind, o, refs)
        vf, higher = metric(kind, o, f)
        lines.append(f"  sample {k}: vs {who}: {value:.4f}; vs FP32: {vf:.4f}")
        if (value < vs_int8) if higher else (value > vs_int8):
            fails.append(f"sample {k}: {value:.4f} vs {who} (bound {vs_int8})")
        if (vf < vs_fp32) if higher else (vf > vs_fp32):
            fails.append(f"sample {k}: {vf:.4f} vs FP32 (bound {vs_fp32})")
        if kind == "logits":
            top1_int8 += any(int(o.argmax()) == int(the_output(kind, r).argmax()) for r in refs.values())
            top1_fp32 += int(o.argmax()) == int(f.argmax())
    if kind == "logits":
        if top1_int8 < at_least(n):
            fails.append(f"top-1 equal to ORT int8's on {top1_int8}/{n} samples")
        if top1_fp32 < at_least(n):
            fails.append(f"top-1 equal to FP32's on {top1_fp32}/{n} samples")
    if kind == "text" and text_fp32 < n - max(1, n // 4):
        fails.append(f"text equal to FP32's (spaces ignored) on {text_fp32}/{n} lines")
    print(f"{label}:\n" + "\n".join(lines))
    assert not fails, f"{label}:\n" + "\n".join(fails) + "\n" + "\n".join(lines)


# --------------------------------------------------------------------------------------------
# a. Explicit quantization: ORT's QDQ / QOperator models
EXPLICIT_SAMPLES = {"resnet50": 2, "mobilenet_v2": 2, "minilm_l6": 3, "ocr_rec": 2, "ocr_det": 1}


@pytest.mark.parametrize("name,backend", [(n, "cpu") for n in EXPLICIT_SAMPLES] + [("minilm_l6", "reference")])
def test_qdq_model_matches_onnxruntime(name, backend, tmp_path):
    """`sampan run <model>.qdq.onnx --backend cpu` (integer kernels) vs ORT on the same QDQ model,
    and vs FP32; MiniLM also on the reference backend (the fused graph's exact QDQ semantics)."""
    qdq, fp32 = need(MODELS / "qdq" / f"{name}.qdq.onnx"), need(MODELS / f"{name}.onnx")
    results = []
    extra = ["--backend", backend] + (["--optimize"] if backend == "reference" else [])
    for k, files in enumerate(sample_files(name, "heldout", EXPLICIT_SAMPLES[name])):
        feed = load(files)
        ours = sampan_run(qdq, files, tmp_path / f"s{k}", extra)
        results.append((ours, ort_int8(qdq, feed), ort_run(fp32, feed)))
    compare_quantized(f"{name}.qdq.onnx ({backend})", KIND[name], results, backend=backend)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("name,samples", [("resnet50", 1), ("minilm_l6", 2)])
def test_qop_model_matches_onnxruntime(name, samples, backend, tmp_path):
    """QOperator form (QLinearConv, QLinearMatMul; resnet50's also has ORT's com.microsoft
    QLinearAdd, QLinearGlobalAveragePool and QGemm) on both backends vs ORT on the same file."""
    qop, fp32 = need(MODELS / "qdq" / f"{name}.qop.onnx"), need(MODELS / f"{name}.onnx")
    results = []
    for k, files in enumerate(sample_files(name, "heldout", samples)):
        feed = load(files)
        ours = sampan_run(qop, files, tmp_path / f"s{k}", ["--backend", backend])
        results.append((ours, ort_int8(qop, feed), ort_run(fp32, feed)))
    # MiniLM's QOperator graph requantizes after every MatMul; a float rounding difference in the
    # float parts (LayerNorm, GELU, Softmax) flips whole steps downstream. Measured: the reference
    # backend (each op's exact reference kernel) at 0.989-0.994 to ORT's sessions, which differ
    # from each other by as much; so 0.985 here.
    compare_quantized(f"{name}.qop.onnx ({backend})", KIND[name], results, backend=backend,
                      vs_int8=(0.98 if backend == "cpu" and not VNNI else 0.985) if name == "minilm_l6" else None)


def test_qdq_minilm_full_graph(tmp_path):
    """ORT's default quantization of MiniLM: Q/DQ around every LayerNorm, Softmax, GELU part,
    Gather on a uint8 embedding table, Reshape/Transpose, uint8-quantized constants (the fusion
    pass's hard cases). The quantization itself is poor (cos 0.78-0.84 to FP32) and chaotic (ORT's
    two sessions: 0.82-0.88), so: Sampan must be within 0.05 of ORT's worse reading in its cosine
    to FP32, and closer than 0.8 to one of ORT's readings."""
    model, fp32 = need(MODELS / "qdq" / "minilm_l6.full.qdq.onnx"), need(MODELS / "minilm_l6.onnx")
    fails, lines = [], []
    for k, files in enumerate(sample_files("minilm_l6", "heldout", 2)):
        feed = load(files)
        ours = sampan_run(model, files, tmp_path / f"s{k}", ["--backend", "cpu"])
        refs, f = ort_int8(model, feed), ort_run(fp32, feed)["sentence_embedding"]
        for r in refs.values():
            check_shapes("minilm_l6.full.qdq.onnx", ours, r)
        o = ours["sentence_embedding"]
        ort_fp32 = min(cosine(r["sentence_embedding"], f) for r in refs.values())
        value, who = closest("embedding", o, refs)
        lines.append(f"  sample {k}: cos vs FP32 {cosine(o, f):.4f} (ORT int8's worse: {ort_fp32:.4f}); "
                     f"vs {who} {value:.4f}")
        if cosine(o, f) < ort_fp32 - 0.05:
            fails.append(f"sample {k}: cos vs FP32 {cosine(o, f):.4f} < ORT int8's {ort_fp32:.4f} - 0.05")
        if value < 0.8:
            fails.append(f"sample {k}: cos vs {who} {value:.4f} < 0.8")
    print("minilm_l6.full.qdq.onnx:\n" + "\n".join(lines))
    assert not fails, "minilm_l6.full.qdq.onnx:\n" + "\n".join(fails + lines)


# --------------------------------------------------------------------------------------------
# b. Implicit quantization: `sampan build --int8` with Sampan's own calibration
def calib_dir(name: str) -> Path:
    return need(MODELS / "calib" / name)


INT8_FLAGS = ("--int8", "--calibData", "--calibMethod", "--calibBatches", "--calib")


def require_int8_cli():
    """The implicit-quantization tests need the calibration flags (without them the bad-input
    tests could pass on CLI11's 'arguments were not expected' error)."""
    help_text = sampan("build", "--help").stdout
    missing = [f for f in INT8_FLAGS if not re.search(re.escape(f) + r"\b", help_text)]
    if missing:
        pytest.fail(f"`sampan build --help` lists no {', '.join(missing)} (the issue #16 flags)", pytrace=False)


def build_int8(name: str, out_dir: Path, *extra, data=True, method=None, gate=True) -> tuple:
    """`sampan build MODEL.onnx --backend cpu --int8 [--calibData DIR] --calib CACHE --saveEngine PLAN`."""
    require_int8_cli()
    out_dir.mkdir(parents=True, exist_ok=True)
    cache, plan = out_dir / f"{name}.calib", out_dir / f"{name}.plan"
    args = ["build", need(MODELS / f"{name}.onnx"), "--backend", "cpu", "--int8", "--saveEngine", plan]
    if data:
        args += ["--calibData", calib_dir(name)]
    if method:
        args += ["--calibMethod", method]
    if gate and name in IMPLICIT_FLAGS:
        flags = IMPLICIT_FLAGS[name]
        if method:  # an explicit method replaces the model's
            flags = [f for i, f in enumerate(flags) if f != "--calibMethod" and (i == 0 or flags[i - 1] != "--calibMethod")]
        args += flags
        if "--accuracyBound" in flags:
            args += ["--accuracyData", gate_dir(name, out_dir / "gate")]
    if "--calib" not in extra:
        args += ["--calib", cache]
    proc = sampan(*args, *extra)
    assert plan.exists(), f"`{proc.cmdline}` exited 0 but wrote no plan"
    return plan, cache, proc


@pytest.fixture(scope="module")
def int8_plan(tmp_path_factory):
    """Calibrated plan + cache per model (default method, every calibration sample), built once."""
    built = {}

    def get(name):
        if name not in built:
            plan, cache, proc = build_int8(name, tmp_path_factory.mktemp(f"int8_{name}"))
            assert cache.exists() and cache.stat().st_size > 0, \
                f"`{proc.cmdline}` calibrated but wrote no cache {cache}"
            built[name] = (plan, cache)
        return built[name]
    return get


@pytest.mark.parametrize("name,samples", [("resnet50", 2), ("minilm_l6", 4), ("ocr_rec", 4)])
def test_int8_build_matches_fp32(name, samples, int8_plan, tmp_path):
    """`sampan build --int8` (entropy calibration on calib/<model>) then `sampan run PLAN` on
    held-out samples vs FP32 onnxruntime: resnet50 (random weights) rel-L2 <= 0.1, minilm_l6
    cos >= 0.99, ocr_rec the decoded text equal to FP32's (leading/trailing spaces aside)."""
    plan, _ = int8_plan(name)
    fp32 = MODELS / f"{name}.onnx"
    kind = KIND[name]
    fails, lines = [], []
    skip = GATE_SAMPLES if "--accuracyBound" in IMPLICIT_FLAGS.get(name, []) else 0
    samples = min(samples, 8 - skip)
    for k, files in enumerate(sample_files(name, "heldout", samples, skip)):
        ref = ort_run(fp32, load(files))
        ours = sampan_run(plan, files, tmp_path / f"s{k}", names_from=fp32)
        check_shapes(f"{name} int8 plan", ours, ref)
        o, f = the_output(kind, ours), the_output(kind, ref)
        if kind == "text":
            got, want = decode(o), decode(f)
            lines.append(f"  sample {k}: {got!r} (FP32 {want!r})")
            if got.strip() != want.strip():
                fails.append(f"sample {k}: read {got!r}, FP32 reads {want!r}")
            continue
        value, higher = metric(kind, o, f)
        lines.append(f"  sample {k}: {'cos' if higher else 'rel-L2'} vs FP32 {value:.4f}")
        if (value < IMPLICIT[name]) if higher else (value > IMPLICIT[name]):
            fails.append(f"sample {k}: {value:.4f} vs FP32 (bound {IMPLICIT[name]})")
    print(f"{name} --int8:\n" + "\n".join(lines))
    assert not fails, f"{name} --int8:\n" + "\n".join(fails + lines)


def test_calibration_is_deterministic(int8_plan, tmp_path):
    """Calibrating twice writes byte-identical caches; a build from the cache alone (`--calib`
    existing, no --calibData) leaves the cache as it is and gives a plan whose outputs are
    bit-identical to the calibrated build's; `--precision int8` is `--int8`."""
    name = "minilm_l6"
    plan1, cache1 = int8_plan(name)
    _, cache2, _ = build_int8(name, tmp_path / "again")
    assert cache2.read_bytes() == cache1.read_bytes(), \
        f"two calibrations of {name} wrote different caches: {cache1} vs {cache2}"

    before = cache1.read_bytes()
    plan3, _, _ = build_int8(name, tmp_path / "from_cache", "--calib", cache1, data=False)
    assert cache1.read_bytes() == before, "a build that read the cache rewrote it"
    plan4 = tmp_path / "precision" / f"{name}.plan"
    plan4.parent.mkdir()
    gate = [f for i, f in enumerate(IMPLICIT_FLAGS.get(name, []))
            if f != "--calibMethod" and (i == 0 or IMPLICIT_FLAGS[name][i - 1] != "--calibMethod")]
    if "--accuracyBound" in gate:
        gate += ["--accuracyData", gate_dir(name, tmp_path / "precision_gate")]
    sampan("build", MODELS / f"{name}.onnx", "--backend", "cpu", "--precision", "int8", "--calib", cache1,
           *gate, "--saveEngine", plan4)

    fp32 = MODELS / f"{name}.onnx"
    for k, files in enumerate(sample_files(name, "heldout", 2)):
        a = sampan_run(plan1, files, tmp_path / f"p1_{k}", names_from=fp32)
        for label, plan in (("the cache-only build", plan3), ("--precision int8", plan4)):
            b = sampan_run(plan, files, tmp_path / f"{plan.parent.name}_{k}", names_from=fp32)
            for out in a:
                assert a[out].dtype == b[out].dtype and np.array_equal(a[out], b[out]), \
                    f"sample {k}, {out}: {label}'s plan differs from the calibrated plan " \
                    f"(max |diff| {np.abs(a[out].astype(np.float64) - b[out]).max():g})"


def test_calibration_methods(tmp_path):
    """--calibMethod minmax and percentile=99.99 (with --calibBatches) build, and give other
    activation scales than each other and than the default (entropy)."""
    name = "minilm_l6"
    scales = {}
    for method in (None, "minmax", "percentile=99.99"):
        _, cache, _ = build_int8(name, tmp_path / (method or "default").replace("=", "_"),
                                 "--calibBatches", "4", method=method, gate=False)
        text = cache.read_text()
        # The cache's tensor lines ("NAME SCALE int8|uint8"), without the header naming the method.
        lines = [ln for ln in text.splitlines() if ln.split()[-1:] in (["int8"], ["uint8"])]
        scales[method or "entropy"] = lines or text
    for a, b in (("entropy", "minmax"), ("entropy", "percentile=99.99"), ("minmax", "percentile=99.99")):
        assert scales[a] != scales[b], f"--calibMethod {a} and {b} chose the same activation scales"


# Bad inputs: `sampan build` must exit non-zero with a message that names the culprit.
def build_fails(*args) -> str:
    require_int8_cli()
    proc = sampan("build", *args, ok=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"`{proc.cmdline}` should have failed:\n{out[-2000:]}"
    assert "AddressSanitizer" not in out and "runtime error" not in out, out[-4000:]
    assert "were not expected" not in out, f"`{proc.cmdline}`: CLI11 does not know a flag:\n{out[-2000:]}"
    return out


def test_calib_data_empty_directory(tmp_path):
    empty = tmp_path / "empty_calib"
    empty.mkdir()
    out = build_fails(MODELS / "mobilenet_v2.onnx", "--backend", "cpu", "--int8", "--calibData", empty,
                      "--saveEngine", tmp_path / "p.plan")
    assert empty.name in out, f"the message does not name the empty directory {empty}:\n{out[-2000:]}"
    assert not (tmp_path / "p.plan").exists()


def test_calib_data_wrong_shape(tmp_path):
    bad = tmp_path / "calib"
    shutil.copytree(calib_dir("mobilenet_v2"), bad)
    np.save(bad / "input.1.npy", np.zeros((1, 3, 200, 200), np.float32))  # the model takes 1x3x224x224
    out = build_fails(MODELS / "mobilenet_v2.onnx", "--backend", "cpu", "--int8", "--calibData", bad,
                      "--saveEngine", tmp_path / "p.plan")
    assert "input.1.npy" in out, f"the message does not name the bad file input.1.npy:\n{out[-2000:]}"


def _tensor_names(path: Path) -> set:
    g = onnx.load(str(path), load_external_data=False).graph
    names = {v for n in g.node for v in (*n.input, *n.output)} | {i.name for i in g.input}
    # Names an error message could contain by accident ("input", "x", "logits") prove nothing.
    return {v for v in names if len(v) >= 4 and any(c in v for c in "/_.:0123456789")}


def test_calib_cache_from_another_model(int8_plan, tmp_path):
    _, minilm_cache = int8_plan("minilm_l6")
    model = MODELS / "mobilenet_v2.onnx"
    out = build_fails(model, "--backend", "cpu", "--int8", "--calib", minilm_cache, "--saveEngine", tmp_path / "p.plan")
    names = _tensor_names(model) | _tensor_names(MODELS / "minilm_l6.onnx")
    assert any(n in out for n in names), \
        f"the message names no mismatching tensor (of mobilenet_v2 or minilm_l6):\n{out[-2000:]}"


def test_calib_method_bogus(tmp_path):
    out = build_fails(MODELS / "mobilenet_v2.onnx", "--backend", "cpu", "--int8", "--calibData",
                      calib_dir("mobilenet_v2"), "--calibMethod", "bogus", "--saveEngine", tmp_path / "p.plan")
    assert "bogus" in out, f"the message does not name the method 'bogus':\n{out[-2000:]}"


# The accuracy gate.
def test_accuracy_gate_falls_back_and_reports(tmp_path):
    """MiniLM with entropy calibration misses cos 0.99 with every layer in int8: the gate puts the
    layers with the largest own error back in float until it holds, and says so (figure, layers,
    per-layer errors); the plan then meets the bound on samples the gate did not see."""
    name = "minilm_l6"
    plan, _, proc = build_int8(name, tmp_path / "gate_entropy", "--accuracyMetric", "cosine", method="entropy")
    out = proc.stdout
    m = re.search(r"accuracy:\s+cosine = ([0-9.]+) \(bound 0.99\) with (\d+) layers? back in float", out)
    assert m, f"no accuracy line in the build summary:\n{out[-3000:]}"
    assert float(m.group(1)) >= 0.99 and int(m.group(2)) > 0, out[-3000:]
    assert re.search(r"^  0 in float: cosine = 0\.[0-8]", out, re.M), f"entropy at full int8 should miss:\n{out[-3000:]}"
    assert "layer quantization error" in out
    fp32 = MODELS / f"{name}.onnx"
    for k, files in enumerate(sample_files(name, "heldout", 2, GATE_SAMPLES)):
        ref, ours = ort_run(fp32, load(files)), sampan_run(plan, files, tmp_path / f"s{k}", names_from=fp32)
        c = cosine(ours["sentence_embedding"], ref["sentence_embedding"])
        assert c >= 0.985, f"held-out sample {GATE_SAMPLES + k}: cos {c:.4f} after the gate"


def test_accuracy_gate_strict_refuses(tmp_path):
    """--strict: a bound the full-int8 plan misses is an error (no fallback), naming the figure."""
    out = build_fails(MODELS / "minilm_l6.onnx", "--backend", "cpu", "--int8", "--calibData", calib_dir("minilm_l6"),
                      "--calibMethod", "entropy", "--accuracyData", gate_dir("minilm_l6", tmp_path / "gate"),
                      "--accuracyBound", "0.999", "--strict", "--saveEngine", tmp_path / "p.plan")
    assert "misses the bound 0.999" in out and "--strict" in out, out[-2000:]
    assert not (tmp_path / "p.plan").exists()


def test_accuracy_flags_refused_alone(tmp_path):
    out = build_fails(MODELS / "minilm_l6.onnx", "--backend", "cpu", "--accuracyBound", "0.9",
                      "--saveEngine", tmp_path / "p.plan")
    assert "need --int8" in out, out[-2000:]
    out = build_fails(MODELS / "minilm_l6.onnx", "--backend", "cpu", "--int8", "--calibData", calib_dir("minilm_l6"),
                      "--accuracyData", gate_dir("minilm_l6", tmp_path / "g"), "--saveEngine", tmp_path / "p.plan")
    assert "--accuracyBound" in out, out[-2000:]


MEAN = np.array([123.675, 116.28, 103.53], np.float32)
STD = np.array([58.395, 57.12, 57.375], np.float32)


def _pixels(normalized: np.ndarray) -> np.ndarray:
    """An ImageNet-normalised [1, 3, H, W] sample back to uint8 [H, W, 3] pixels."""
    x = normalized[0].transpose(1, 2, 0) * STD + MEAN
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def test_int8_calibrates_from_jpeg_images(tmp_path):
    """`--calibData` holding JPEGs (#16): ResNet-50 built with `--input-format uint8-nhwc --mean
    --std --int8` calibrates on images (decoded, two of them resized from 256x240 to the input's
    224x224, normalised by the plan itself) and its int8 output on a held-out image stays within
    the FP32 bound (rel-L2 <= 0.1) of onnxruntime FP32 on the same pixels normalised in NumPy."""
    from PIL import Image
    model = MODELS / "resnet50.onnx"
    images = tmp_path / "images"
    images.mkdir()
    for k, files in enumerate(sample_files("resnet50", "calib", 4)):
        img = Image.fromarray(_pixels(np.load(files["input"])))
        if k % 2:
            img = img.resize((256, 240), Image.BILINEAR)
        img.save(images / f"cal_{k}.jpg", quality=95)
    plan = tmp_path / "r50_int8_images.plan"
    proc = sampan("build", "--onnx", model, "--backend", "cpu", "--int8", "--calibData", images,
                  "--input-format", "input:uint8-nhwc", "--mean", ",".join(map(str, MEAN)),
                  "--std", ",".join(map(str, STD)), "--saveEngine", plan, "--calib", tmp_path / "cache")
    assert "4 samples" in proc.stdout + proc.stderr or "samples=4" in proc.stdout + proc.stderr, \
        f"the build does not report 4 image samples:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    held = sample_files("resnet50", "heldout", 1)[0]
    pixels = _pixels(np.load(held["input"]))[None]  # [1, 224, 224, 3]
    np.save(tmp_path / "pixels.npy", pixels)
    ours = sampan_run(plan, {"input": tmp_path / "pixels.npy"}, tmp_path / "out", names_from=model)
    feed = {"input": ((pixels[0].astype(np.float32) - MEAN) / STD).transpose(2, 0, 1)[None]}
    ref = ort_run(model, feed)
    err = rel_l2(the_output("logits", ours), the_output("logits", ref))
    print(f"resnet50 --int8 calibrated on JPEGs: rel-L2 vs FP32 {err:.4f}")
    assert err <= IMPLICIT["resnet50"], f"rel-L2 {err:.4f} vs FP32 > {IMPLICIT['resnet50']}"

    # A float-input build (no --input-format) refuses the images, saying what to give.
    out = build_fails(model, "--backend", "cpu", "--int8", "--calibData", images, "--saveEngine", tmp_path / "p.plan")
    assert "--input-format" in out, f"the refusal does not say to use --input-format:\n{out[-2000:]}"
