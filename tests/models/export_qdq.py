#!/usr/bin/env python3
"""Writes the INT8 test models and their calibration / held-out data (issue #16).

Usage: .venv/bin/python tests/models/export_qdq.py [OUT_DIR] [--only NAME]... [--force]
OUT_DIR defaults to build/models and must already hold the FP32 models (export_all.sh).

For each model in MODELS it writes
  OUT/qdq/<model>.qdq.onnx        onnxruntime.quantization.quantize_static, QuantFormat.QDQ,
                                  activations QUInt8 (asymmetric, per tensor), weights QInt8
                                  (symmetric, per channel), MinMax calibration, after
                                  quant_pre_process (symbolic shape inference + ORT basic opts)
  OUT/qdq/<model>.qop.onnx        the same in QuantFormat.QOperator (QLinearConv, QLinearMatMul,
                                  ...), for the models with qop=True (resnet50's holds ORT's
                                  com.microsoft QLinearAdd, QLinearGlobalAveragePool and QGemm)
  OUT/qdq/minilm_l6.full.qdq.onnx MiniLM with ORT's defaults (every op); minilm_l6.qdq/.qop.onnx
                                  quantize the MatMuls only, without the FFN down-projections
                                  (see minilm_scope: ORT's defaults cost too much accuracy)
  OUT/calib/<model>/NAME.K.npy    16 calibration samples (K = 0..15), one file per graph input,
                                  batch dimension 1; the same samples feed quantize_static
  OUT/heldout/<model>/NAME.K.npy  8 held-out samples from other seeds (disjoint from calib)

The opset-12 PaddleOCR models are lifted to opset 13 first (per-axis DequantizeLinear). Inputs:
ImageNet-normalised synthetic photos (resnet50, mobilenet_v2), WordPiece ids of generated English
sentences, 32 tokens, mask all ones (minilm_l6), rendered text lines 1x3x48x320 (ocr_rec) and
text pages 1x3x320x320 (ocr_det).
Everything is deterministic: seeded numpy, PIL rendering with DejaVuSans, and ORT's calibrator
over the same samples; running it twice gives byte-identical files. A model whose outputs are
newer than this script and its FP32 source is skipped unless --force.
"""
import argparse
import hashlib
import logging
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[2]
FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
N_CALIB, N_HELDOUT = 16, 8
SPLITS = {"calib": (0, N_CALIB), "heldout": (1, N_HELDOUT)}  # split -> (seed stream, count)
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)
MINILM_SEQ = 32
DET_SIZE = 320  # ocr_det's H and W are dynamic; 320x320 keeps calibration and tests fast
REC_H, REC_W = 48, 320
WORDS = ("Sampan ONNX inference engine model layer kernel batch quant int8 fp32 tensor scale "
         "river boat harbour market street north south east west open closed total price "
         "invoice number date page chapter section table figure result error warning "
         "Hello World Test Data Line Alpha Beta Gamma Delta Omega").split()


# --------------------------------------------------------------------------------------------
# Sample generators: rng -> {input name: array with batch dim 1}
def _font(size):
    from PIL import ImageFont
    if not FONT.exists():
        sys.exit(f"export_qdq: font {FONT} missing (apt package fonts-dejavu-core; scripts/setup.sh installs it)")
    return ImageFont.truetype(str(FONT), size)


def render_text(text, size=40, fg=(0, 0, 0), bg=(255, 255, 255)):
    """The same rendering as tests/models/test_models.py's render_text, with colours."""
    from PIL import Image, ImageDraw
    font = _font(size)
    left, top, right, bottom = font.getbbox(text)
    img = Image.new("RGB", (right - left + 24, bottom - top + 24), bg)
    ImageDraw.Draw(img).text((12 - left, 12 - top), text, fill=fg, font=font)
    return img


def rec_preprocess(img, height=REC_H, width=REC_W):
    """PaddleOCR resize_norm_img (as test_models.py): keep aspect at height 48, (x/255-0.5)/0.5,
    zero-pad the width, NCHW, BGR."""
    from PIL import Image
    w, h = img.size
    rw = min(width, math.ceil(height * w / h))
    a = np.asarray(img.convert("RGB").resize((rw, height), Image.BILINEAR), np.float32)[:, :, ::-1]
    a = (a.transpose(2, 0, 1) / 255.0 - 0.5) / 0.5
    out = np.zeros((1, 3, height, width), np.float32)
    out[0, :, :, :rw] = a
    return out


def _imagenet_norm(rgb_u8):
    a = rgb_u8.astype(np.float32) / 255.0
    a = (a - IMAGENET_MEAN) / IMAGENET_STD
    return np.ascontiguousarray(a.transpose(2, 0, 1)[None], dtype=np.float32)


def random_word_line(rng, max_chars=18):
    """1-3 words or numbers, at most max_chars characters."""
    while True:
        parts = []
        for _ in range(int(rng.integers(1, 4))):
            if rng.random() < 0.25:
                parts.append(str(int(rng.integers(0, 100000))))
            else:
                parts.append(str(WORDS[int(rng.integers(len(WORDS)))]))
        text = " ".join(parts)
        if len(text) <= max_chars:
            return text


def gen_image(rng, size=224):
    """A natural-looking 8-bit photo stand-in: smooth colour field + shapes + sensor noise,
    ImageNet-normalised (values about [-2.1, 2.6]) as torchvision classifiers expect."""
    from PIL import Image, ImageDraw
    low = (rng.random((4, 4, 3)) * 255).astype(np.uint8)
    img = Image.fromarray(low).resize((size, size), Image.BILINEAR)
    d = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(3, 8))):
        x0, y0 = (int(v) for v in rng.integers(0, size - 16, 2))
        w, h = (int(v) for v in rng.integers(16, size // 2, 2))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        box = (x0, y0, min(size - 1, x0 + w), min(size - 1, y0 + h))
        (d.ellipse if rng.random() < 0.5 else d.rectangle)(box, fill=colour)
    a = np.asarray(img, np.float32) + rng.normal(0, 8, (size, size, 3))
    return {"input": _imagenet_norm(np.clip(a, 0, 255).astype(np.uint8))}


_VOCAB = None
DET = "the a this that every one my our their".split()
ADJ = "small large quick quiet old new red green bright dark happy busy early late local public simple strange".split()
NOUN = ("boat river engine model city market teacher student report window garden computer question answer "
        "music book road bridge storm price team").split()
VERB = "reads builds finds sees opens moves carries explains follows repairs changes describes watches answers".split()
ADV = "slowly quickly carefully often never again today yesterday".split()
PREP = "in near under across behind after before with".split()


def sentence(rng):
    """A short English sentence from a fixed word list (determiner adjective noun verb ...)."""
    def pick(words):
        return words[int(rng.integers(len(words)))]
    w = [pick(DET)] + ([pick(ADJ)] if rng.random() < 0.6 else []) + [pick(NOUN), pick(VERB), pick(DET)]
    w += ([pick(ADJ)] if rng.random() < 0.5 else []) + [pick(NOUN)]
    if rng.random() < 0.6:
        w += [pick(PREP), pick(DET), pick(NOUN)]
    if rng.random() < 0.4:
        w += [pick(ADV)]
    text = " ".join(w)
    return text[0].upper() + text[1:] + ("." if rng.random() < 0.8 else "?")


def gen_tokens(rng, seq=MINILM_SEQ):
    """Real WordPiece ids of English sentences (build_minilm.py's tokenizer and the model's own
    vocab.txt), truncated to [CLS] + 30 tokens + [SEP]; attention mask all ones, token types 0."""
    global _VOCAB
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from build_minilm import model_dir, wordpiece
    if _VOCAB is None:
        lines = (model_dir() / "vocab.txt").read_text(encoding="utf-8").splitlines()
        _VOCAB = {t: i for i, t in enumerate(lines)}
    body = []
    while len(body) < seq - 2:
        body += wordpiece(sentence(rng), _VOCAB)[1:-1]
    ids = np.array([[_VOCAB["[CLS]"]] + body[:seq - 2] + [_VOCAB["[SEP]"]]], np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


def gen_rec_line(rng):
    """A rendered line of text (dark on light, size 28-44 px), PaddleOCR rec-preprocessed to 1x3x48x320."""
    while True:
        text = random_word_line(rng)
        bgv = int(rng.integers(215, 256))
        fgv = int(rng.integers(0, 60))
        img = render_text(text, int(rng.integers(28, 45)), (fgv,) * 3, (bgv,) * 3)
        if img.size[0] * REC_H / img.size[1] <= REC_W:  # fits without squeezing
            return {"x": rec_preprocess(img)}, text


def gen_det_page(rng, size=DET_SIZE):
    """A page of 3-5 text lines at random places (as test_models.py's _noisy_text_page, smaller)."""
    from PIL import Image
    canvas = Image.new("RGB", (size, size), (int(rng.integers(220, 256)),) * 3)
    y = int(rng.integers(5, 30))
    for _ in range(int(rng.integers(3, 6))):
        line = render_text(random_word_line(rng, 14), int(rng.integers(16, 30)))
        if y + line.size[1] > size:
            break
        x = int(rng.integers(0, max(1, size - line.size[0])))
        canvas.paste(line, (x, y))
        y += line.size[1] + int(rng.integers(0, 40))
    a = np.asarray(canvas, np.float32) / 255.0 + rng.normal(0, 0.05, (size, size, 3))
    a = (a.astype(np.float32) - IMAGENET_MEAN) / IMAGENET_STD
    return {"x": np.ascontiguousarray(a.transpose(2, 0, 1)[None], dtype=np.float32)}


def minilm_scope(model: onnx.ModelProto) -> dict:
    """MiniLM: quantize the MatMuls only (the 36 weight projections and the 12 attention
    products), leaving out the six FFN down-projections (weight 1536 x 384, input = GELU output).
    With ORT's defaults (every op, MinMax, per-tensor uint8 activations) the sentence embedding's
    cosine to FP32 is ~0.8, and the FFN down-projection alone costs ~0.9 (its GELU-output input
    has outliers); without it the cosine is ~0.985. ORT's default graph is kept as
    <model>.full.qdq.onnx for its Q/DQ patterns (LayerNorm, Softmax, GELU, Gather, Transpose)."""
    shapes = {i.name: list(i.dims) for i in model.graph.initializer}
    ffn2 = [n.name for n in model.graph.node
            if n.op_type == "MatMul" and shapes.get(n.input[1], [0])[0] == 1536]
    assert len(ffn2) == 6 and all(ffn2), f"expected 6 named FFN down-projection MatMuls, found {ffn2}"
    return {"op_types_to_quantize": ["MatMul"], "nodes_to_exclude": ffn2}


# name -> generator, qop (write <model>.qop.onnx too), scope (quantize_static arguments chosen
# from the pre-processed model; default: ORT's defaults, every supported op), full (also write
# <model>.full.qdq.onnx with ORT's defaults)
MODELS = {
    "resnet50": {"gen": gen_image, "qop": True},
    "mobilenet_v2": {"gen": gen_image},
    "minilm_l6": {"gen": gen_tokens, "qop": True, "scope": minilm_scope, "full": True},
    "ocr_rec": {"gen": lambda rng: gen_rec_line(rng)[0]},
    "ocr_det": {"gen": gen_det_page},
}
MODEL_SEED = {"resnet50": 1, "mobilenet_v2": 2, "minilm_l6": 3, "ocr_rec": 4, "ocr_det": 5}


def samples(name, split):
    stream, count = SPLITS[split]
    rng = np.random.default_rng([16, MODEL_SEED[name], stream])
    gen = MODELS[name]["gen"]
    return [gen(rng) for _ in range(count)]


def rec_texts(split):
    """The text of each ocr_rec sample of a split (the same rng stream as samples())."""
    stream, count = SPLITS[split]
    rng = np.random.default_rng([16, MODEL_SEED["ocr_rec"], stream])
    return [gen_rec_line(rng)[1] for _ in range(count)]


def _digest(feed):
    h = hashlib.sha256()
    for k in sorted(feed):
        h.update(k.encode())
        h.update(np.ascontiguousarray(feed[k]).tobytes())
    return h.hexdigest()


def write_split(out_dir: Path, data):
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    for k, feed in enumerate(data):
        for name, value in feed.items():
            np.save(out_dir / f"{name}.{k}.npy", value)


# --------------------------------------------------------------------------------------------
# Quantization
def make_reader(data):
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(data)

        def get_next(self):
            return next(self.it, None)

        def __len__(self):
            return len(data)

        def rewind(self):
            self.it = iter(data)

    return Reader()


def preprocess(src: Path, dst: Path):
    """quant_pre_process (symbolic shape inference, ORT basic optimisations, ONNX shape
    inference); falls back to the plain model, with a note, when it fails."""
    from onnxruntime.quantization.shape_inference import quant_pre_process
    try:
        quant_pre_process(str(src), str(dst), skip_optimization=False, skip_onnx_shape=False,
                          skip_symbolic_shape=False, auto_merge=True)
        return dst, "quant_pre_process"
    except Exception as e:  # noqa: BLE001 - record and go on with the raw model
        print(f"export_qdq: {src.name}: quant_pre_process failed ({type(e).__name__}: {str(e)[:200]}); "
              f"quantizing the model as it is", file=sys.stderr)
        return src, "none (quant_pre_process failed)"


def upgrade_opset(src: Path, dst: Path, opset=13):
    """Per-channel DequantizeLinear (attribute axis) needs opset 13; the PaddleOCR models are
    opset 12. onnx's version converter lifts them (Squeeze/Unsqueeze axes become inputs)."""
    m = onnx.load(str(src), load_external_data=False)
    version = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
    if version >= opset:
        return src, ""
    from onnx import version_converter
    m = version_converter.convert_version(onnx.load(str(src)), opset)
    onnx.checker.check_model(m)
    onnx.save(m, str(dst))
    return dst, f"opset {version} -> {opset}"


def quantize(src: Path, dst: Path, data, fmt, scope=None):
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    quantize_static(str(src), str(dst), make_reader(data),
                    quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
                    per_channel=True, reduce_range=False,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax, **(scope or {}))
    # Every node named (ORT leaves none unnamed, but be sure), and only the opset imports the
    # graph uses (the pre-processed model declares every domain ORT knows: ai.onnx.ml,
    # com.microsoft.nchwc, org.pytorch.aten, ...).
    m = onnx.load(str(dst))
    for i, n in enumerate(m.graph.node):
        if not n.name:
            n.name = f"{n.op_type}_{i}"
    used = {n.domain for n in m.graph.node} | {""}
    keep = [o for o in m.opset_import if (o.domain if o.domain != "ai.onnx" else "") in used]
    del m.opset_import[:]
    m.opset_import.extend(keep)
    onnx.checker.check_model(m)
    onnx.save(m, str(dst))


INPUT_NAMES = {"resnet50": ["input"], "mobilenet_v2": ["input"], "ocr_rec": ["x"], "ocr_det": ["x"],
               "minilm_l6": ["input_ids", "attention_mask", "token_type_ids"]}


def up_to_date(name, out: Path, src: Path) -> bool:
    first = INPUT_NAMES[name][0]
    files = [out / "calib" / name / f"{first}.{N_CALIB - 1}.npy", out / "heldout" / name / f"{first}.{N_HELDOUT - 1}.npy"]
    files += [out / "qdq" / f for f in model_files(name)]
    if not all(f.exists() for f in files):
        return False
    newest_dep = max(Path(__file__).stat().st_mtime, src.stat().st_mtime)
    return all(f.stat().st_mtime >= newest_dep for f in files)


def model_files(name):
    spec = MODELS[name]
    return [f"{name}.qdq.onnx"] + ([f"{name}.qop.onnx"] if spec.get("qop") else []) \
        + ([f"{name}.full.qdq.onnx"] if spec.get("full") else [])


def export(name, out: Path, force: bool):
    src = out / f"{name}.onnx"
    if not src.exists():
        raise FileNotFoundError(f"{src} missing: run tests/models/export_all.sh first")
    if not force and up_to_date(name, out, src):
        print(f"export_qdq: {name} up to date")
        return
    t0 = time.time()
    calib, heldout = samples(name, "calib"), samples(name, "heldout")
    overlap = {_digest(f) for f in calib} & {_digest(f) for f in heldout}
    assert not overlap, f"{name}: calibration and held-out samples overlap"
    graph_inputs = [i.name for i in onnx.load(str(src), load_external_data=False).graph.input]
    assert sorted(calib[0]) == sorted(graph_inputs), f"{name}: inputs {graph_inputs} != generated {sorted(calib[0])}"
    write_split(out / "calib" / name, calib)
    write_split(out / "heldout" / name, heldout)
    (out / "qdq").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="export_qdq.") as tmp:
        src, how = upgrade_opset(src, Path(tmp) / f"{name}.op13.onnx")
        pre, how_pre = preprocess(src, Path(tmp) / f"{name}.pre.onnx")
        how = ", ".join(filter(None, [how, how_pre]))
        spec = MODELS[name]
        scope = spec["scope"](onnx.load(str(pre), load_external_data=False)) if "scope" in spec else None
        quantize(pre, out / "qdq" / f"{name}.qdq.onnx", calib, "qdq", scope)
        if spec.get("qop"):
            quantize(pre, out / "qdq" / f"{name}.qop.onnx", calib, "qop", scope)
        if spec.get("full"):
            quantize(pre, out / "qdq" / f"{name}.full.qdq.onnx", calib, "qdq")
    print(f"export_qdq: {name}: wrote " + ", ".join(f"qdq/{f}" for f in model_files(name))
          + f", calib/{name} ({len(calib)}), heldout/{name} ({len(heldout)}); pre-processing: {how}; "
          f"{time.time() - t0:.1f}s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=str(ROOT / "build" / "models"))
    ap.add_argument("--only", action="append", choices=list(MODELS), help="export only this model (repeatable)")
    ap.add_argument("--force", action="store_true", help="rewrite even when up to date")
    args = ap.parse_args()
    logging.getLogger().setLevel(logging.ERROR)  # ORT's quantizer warns about pre-processing etc.
    out = Path(args.out)
    failed = []
    for name in args.only or MODELS:
        try:
            export(name, out, args.force)
        except Exception as e:  # noqa: BLE001 - name the model, go on, fail at the end
            print(f"export_qdq: {name} FAILED: {type(e).__name__}: {e}", file=sys.stderr)
            failed.append(name)
    if failed:
        sys.exit(f"export_qdq: failed: {' '.join(failed)}")


if __name__ == "__main__":
    main()
