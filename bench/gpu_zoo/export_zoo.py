#!/usr/bin/env python3
"""Exports the bench/gpu_zoo model zoo to ONNX (opset 17, static shapes, FP32 weights).

For every model NAME it writes, under --out:
  NAME.onnx            the model (torchvision / YOLO re-implementation / transformers BERT:
                       torch.onnx.export with the TorchScript exporter, dynamo=False, and the
                       dynamo exporter only if that one fails (recorded in NAME.json);
                       PaddleOCR: the carried rapidocr ONNX with its dynamic dims fixed)
  NAME.INPUT.npy       the sample input(s) (fixed seed)
  NAME.pt              the PyTorch weights (state_dict) the ONNX was made from, so that
                       run_zoo.py times and checks exactly the same model
  NAME.ref.npy         FP32 reference output for the sample input, when --ref is not none
                       (cuda: PyTorch on the GPU, TF32 off; cpu: PyTorch on the CPU; the
                       PaddleOCR models always get onnxruntime CPU FP32)
  NAME.json            what was made (batch, inputs, output, checksum, export seconds,
                       exporter, error); written last, so run_zoo.py waits for it

Weights: random init with a fixed seed (torch.manual_seed(0) before construction), then
two changes that keep a random network numerically meaningful in FP16: BatchNorm running
statistics are set from one training-mode pass over a fixed random batch (otherwise
eval-mode BN is the identity and e.g. ResNet-101's activations reach 3.6e5 and
Inception-v3's 2.5e12, beyond FP16's 65504), and layers initialised to all-zero weights
(ViT's head) get a normal init (otherwise every logit is 0). Each model is time-boxed
(--timeout per model, SIGALRM); a failure is recorded in NAME.json and the next model
is exported. Models already exported (NAME.json present, no error) are skipped unless
--force.

Usage: export_zoo.py --out DIR [--models "resnet50 vit_b_16 ..."|all] [--batch N]
                     [--ref cuda|cpu|none] [--ocr-dir DIR] [--threads N]
"""
import argparse
import glob
import json
import os
import signal
import sys
import time
import traceback

try:
    import numpy as np
except ImportError:  # --dry-run / --precheck / --merge-only need no numpy
    np = None

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

OPSET = 17
SEED = 0


class Entry:
    def __init__(self, name, kind, batch, inputs, output, classifier=False, cnn=False, arch=None, **kw):
        self.name = name
        self.kind = kind              # tv | yolo | bert | ocr
        self.batch = batch
        self.inputs = inputs          # [(name, shape without batch, dtype)]
        self.output = output
        self.classifier = classifier  # top-1 agreement is reported
        self.cnn = cnn                # PyTorch peer runs channels-last
        self.arch = arch or name
        self.kw = kw

    def input_shapes(self, batch=None):
        b = batch or self.batch
        return {n: (b,) + tuple(s) for n, s, _ in self.inputs}


def _tv(name, size=224, cnn=True, batch=32, **kw):
    return Entry(name, "tv", batch, [("input", (3, size, size), "float32")], "logits", classifier=True, cnn=cnn, **kw)


def _bert(name, batch, **cfg):
    return Entry(name, "bert", batch, [("input_ids", (128,), "int64"), ("attention_mask", (128,), "int64")],
                 "last_hidden_state", arch="bert", **cfg)


ZOO = [
    _tv("alexnet"), _tv("vgg16_bn"), _tv("resnet18"), _tv("resnet50"), _tv("resnet50_b256", arch="resnet50", batch=256), _tv("resnet101"), _tv("resnext50_32x4d"),
    _tv("wide_resnet50_2"), _tv("densenet121"),
    _tv("inception_v3", 299, aux_logits=False, init_weights=True),
    _tv("googlenet", aux_logits=False, init_weights=True),
    _tv("squeezenet1_1"), _tv("shufflenet_v2_x1_0"), _tv("mobilenet_v2"), _tv("mobilenet_v3_large"), _tv("mnasnet1_0"),
    _tv("efficientnet_b0"), _tv("efficientnet_v2_s"), _tv("regnet_y_1_6gf"), _tv("convnext_tiny"),
    _tv("vit_b_16", cnn=False), _tv("swin_t", cnn=False), _tv("maxvit_t", cnn=False),
    Entry("yolov5s", "yolo", 16, [("images", (3, 640, 640), "float32")], "output0", cnn=True),
    Entry("yolov8n", "yolo", 16, [("images", (3, 640, 640), "float32")], "output0", cnn=True),
    _bert("bert_base_b32", 32),
    _bert("bert_base_b128", 128),
    _bert("minilm_l6", 32, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536),
    Entry("ppocr_det", "ocr", 8, [("x", (3, 640, 640), "float32")], None, src="ppocr_det.onnx"),
    Entry("ppocr_rec", "ocr", 32, [("x", (3, 48, 320), "float32")], None, classifier=True, src="ppocr_rec.onnx"),
    Entry("ppocr_cls", "ocr", 32, [("x", (3, 48, 192), "float32")], None, classifier=True, src="ppocr_cls.onnx"),
]
BY_NAME = {e.name: e for e in ZOO}
ALIASES = {"bert": ["bert_base_b32", "bert_base_b128"], "ocr": ["ppocr_det", "ppocr_rec", "ppocr_cls"],
           "yolo": ["yolov5s", "yolov8n"]}


def select(models):
    """'all' or names separated by spaces/commas (aliases: bert, ocr, yolo), in the order given."""
    if not models or models.strip() in ("all", ""):
        return list(ZOO)
    out = []
    for tok in models.replace(",", " ").split():
        for n in ALIASES.get(tok, [tok]):
            if n not in BY_NAME:
                raise SystemExit(f"unknown model '{n}' (known: {' '.join(BY_NAME)} or all/bert/ocr/yolo)")
            if BY_NAME[n] not in out:
                out.append(BY_NAME[n])
    return out


def find_ocr_dir(given=None):
    """The carried PaddleOCR folder (build-cuda/carry/ocr), else rapidocr's models in .venv (local tests)."""
    for d in [given, os.path.join(REPO, "build-cuda", "carry", "ocr")]:
        if d and os.path.isdir(d):
            return d
    return None


def ocr_source(entry, ocr_dir):
    if ocr_dir and os.path.exists(os.path.join(ocr_dir, entry.kw["src"])):
        return os.path.join(ocr_dir, entry.kw["src"])
    key = {"ppocr_det": "det", "ppocr_rec": "rec", "ppocr_cls": "cls"}[entry.name]
    hits = sorted(glob.glob(os.path.join(REPO, ".venv", "lib", "python3*", "site-packages", "rapidocr*", "models",
                                         f"*_{key}_*.onnx")))
    if not hits:
        raise FileNotFoundError(f"{entry.kw['src']} not in {ocr_dir or 'build-cuda/carry/ocr'} "
                                f"(run bench/gpu_zoo/stage_ocr.sh here and carry build-cuda/carry)")
    return hits[0]


# ----------------------------------------------------------------------------- PyTorch models

class BertLastHidden:
    """Factory for a module returning BertModel's last_hidden_state only (keyword call)."""

    @staticmethod
    def make(**cfg):
        import torch
        from transformers import BertConfig, BertModel

        class Encoder(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.bert = BertModel(BertConfig(**cfg), add_pooling_layer=False)

            def forward(self, input_ids, attention_mask):
                return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

        return Encoder()


def construct(entry):
    """The architecture with the seeded random init (no calibration)."""
    import torch
    torch.manual_seed(SEED)
    if entry.kind == "tv":
        import torchvision
        fn = getattr(torchvision.models, entry.arch, None)
        if fn is None:
            raise RuntimeError(f"torchvision {torchvision.__version__} has no {entry.arch}")
        return fn(weights=None, **entry.kw)
    if entry.kind == "yolo":
        import yolo_blocks
        return getattr(yolo_blocks, entry.name)()
    if entry.kind == "bert":
        return BertLastHidden.make(**entry.kw)
    raise ValueError(entry.kind)


def calibrate(model, entry):
    """BN running stats from one training-mode pass over a fixed random batch; zero-init layers re-initialised."""
    import torch
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for m in model.modules():
            w = getattr(m, "weight", None)
            if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)) and w is not None and not w.any():
                w.normal_(0.0, 1.0 / max(1, w[0].numel()) ** 0.5, generator=g)
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if bns:
        for m in bns:
            m.reset_running_stats()
            m.momentum = None  # cumulative average: after one pass, the batch's own statistics
        c, h, w = entry.inputs[0][1]
        x = torch.randn(8 if h <= 320 else 4, c, h, w, generator=g)
        model.train()
        with torch.no_grad():
            model(x)
    model.eval()
    return len(bns)


def checksum(model):
    import torch
    s = 0.0
    for t in model.state_dict().values():
        if torch.is_floating_point(t):
            s += float(t.double().abs().sum())
    return s


def load_model(entry, models_dir):
    """The exported model, for run_zoo.py: construct, then the saved weights (exactly those in the ONNX)."""
    import torch
    m = construct(entry)
    sd = torch.load(os.path.join(models_dir, entry.name + ".pt"), map_location="cpu")
    m.load_state_dict(sd, strict=True)
    return m.eval()


def text_page(rng, shape):
    """Synthetic pages for the text detector: light paper with dark, text-line-shaped strokes,
    normalised as rapidocr feeds PP-OCR's detector ((x / 255 - mean) / std, ImageNet mean/std).
    Gaussian noise is no input for it: its probability map is all but zero (max 0.006), so a
    relative error over it measures noise."""
    n, c, h, w = shape
    img = np.empty((n, h, w, c), np.float32)
    for b in range(n):
        img[b] = rng.uniform(200, 255, c)  # paper tint
        for _ in range(max(8, h // 16)):
            lh = int(rng.integers(max(4, h // 64), max(5, h // 20)))
            lw = int(rng.integers(max(8, w // 12), max(9, w // 3)))
            y0, x0 = int(rng.integers(0, h - lh)), int(rng.integers(0, w - lw))
            ink = rng.uniform(0, 90)
            # words: runs of strokes separated by gaps
            x = x0
            while x < x0 + lw:
                ww = int(rng.integers(3, max(4, lh * 3)))
                img[b, y0:y0 + lh, x:min(x + ww, x0 + lw)] = ink
                x += ww + int(rng.integers(1, max(2, lh // 2)))
        img[b] += rng.normal(0, 4, (h, w, c))
    mean = np.array([0.485, 0.456, 0.406], np.float32)[:c] * 255
    std = np.array([0.229, 0.224, 0.225], np.float32)[:c] * 255
    return np.ascontiguousarray(((np.clip(img, 0, 255) - mean) / std).transpose(0, 3, 1, 2)).astype(np.float32)


def sample_inputs(entry, batch=None):
    rng = np.random.default_rng(1)
    out = {}
    for name, shape in entry.input_shapes(batch).items():
        if entry.kind == "bert" and name == "input_ids":
            out[name] = rng.integers(1000, 30000, shape).astype(np.int64)
            out[name][:, 0] = 101  # [CLS]
        elif entry.kind == "bert" and name == "attention_mask":
            mask = np.ones(shape, np.int64)
            lengths = rng.integers(shape[1] // 4, shape[1] + 1, shape[0])
            lengths[0] = shape[1]
            for i, n in enumerate(lengths):
                mask[i, n:] = 0
            out[name] = mask
        elif entry.kind == "yolo":
            out[name] = rng.random(shape, dtype=np.float32)  # image in [0, 1)
        elif entry.name == "ppocr_det":
            out[name] = text_page(rng, shape)
        elif entry.kind == "ocr":
            out[name] = rng.uniform(-1, 1, shape).astype(np.float32)  # (x/255 - 0.5) / 0.5
        else:
            out[name] = rng.standard_normal(shape, dtype=np.float32)
    return out


def torch_reference(model, entry, inputs, device):
    """FP32 output (TF32 off) for the sample input, on device."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    m = model.float().to(device).eval()
    args = [torch.from_numpy(inputs[n]).to(device) for n, _, _ in entry.inputs]
    with torch.inference_mode():
        y = m(*args)
    return y.float().cpu().numpy()


def onnx_export(model, entry, inputs, path):
    import torch
    args = tuple(torch.from_numpy(inputs[n]) for n, _, _ in entry.inputs)
    kw = dict(input_names=[n for n, _, _ in entry.inputs], output_names=[entry.output], opset_version=OPSET,
              do_constant_folding=True)
    try:
        torch.onnx.export(model, args, path, dynamo=False, **kw)
        return "torchscript"
    except TypeError as e:  # torch < 2.x: no dynamo argument (the TorchScript exporter is the only one)
        if "dynamo" not in str(e):
            raise
        torch.onnx.export(model, args, path, **kw)
        return "torchscript"
    except Exception as e:  # noqa: BLE001 - the TorchScript exporter failed: try the dynamo one (needs onnxscript)
        first = f"{type(e).__name__}: {str(e)[:300]}"
        print(f"torchscript exporter failed ({first}); trying dynamo=True", flush=True)
        try:
            torch.onnx.export(model, args, path, dynamo=True, external_data=False, **kw)
        except Exception as e2:  # noqa: BLE001
            raise RuntimeError(f"torchscript exporter: {first}; dynamo exporter: {type(e2).__name__}: "
                               f"{str(e2)[:300]}") from e2
        return f"dynamo (torchscript failed: {first[:200]})"


# ----------------------------------------------------------------------------- PaddleOCR (ONNX in, ONNX out)

def fix_ocr(src, dst, entry, batch=None, dynamic=False):
    """Static input dims (batch, H, W); output dims left for the shape inference. With dynamic, the
    model keeps its dynamic dims and run_zoo.py builds it with one static profile instead."""
    import onnx
    m = onnx.load(src)
    shape = entry.input_shapes(batch)["x"]
    inp = next(i for i in m.graph.input if i.name == "x")
    for d, v in zip(inp.type.tensor_type.shape.dim, shape):
        if dynamic:
            continue
        d.Clear()
        d.dim_value = v
    for o in m.graph.output:
        for k, d in enumerate(o.type.tensor_type.shape.dim):
            if not d.dim_value:
                d.Clear()
                d.dim_param = f"{o.name.replace('/', '_')}_d{k}"
    del m.graph.value_info[:]  # stale dynamic dims; recomputed by whoever reads the model
    onnx.checker.check_model(m)
    onnx.save(m, dst)
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)
    return m.graph.output[0].name, opset


def ort_reference(path, inputs, threads=0):
    import onnxruntime as ort
    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = threads
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return s.run(None, inputs)[0].astype(np.float32)


# ----------------------------------------------------------------------------- driver

class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout("timed out")


def atomic_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def export_one(entry, out, ref, ocr_dir, batch=None, threads=0, ocr_dynamic=False):
    t0 = time.time()
    base = os.path.join(out, entry.name)
    b = batch or entry.batch
    inputs = sample_inputs(entry, batch)
    meta = {"name": entry.name, "kind": entry.kind, "batch": b,
            "inputs": {n: {"shape": list(v.shape), "dtype": str(v.dtype), "file": f"{entry.name}.{n}.npy"}
                       for n, v in inputs.items()},
            "classifier": entry.classifier, "cnn": entry.cnn, "opset": OPSET}
    for n, v in inputs.items():
        np.save(f"{base}.{n}.npy", v)
    if entry.kind == "ocr":
        src = ocr_source(entry, ocr_dir)
        meta["source"] = os.path.basename(src)
        meta["output"], meta["opset"] = fix_ocr(src, base + ".onnx", entry, batch, ocr_dynamic)
        meta["exporter"] = "rapidocr onnx, " + ("dims left dynamic" if ocr_dynamic else "dims fixed")
        if ocr_dynamic:
            meta["profile"] = "x:" + "x".join(str(d) for d in inputs["x"].shape)
        np.save(base + ".ref.npy", ort_reference(base + ".onnx", inputs, threads))
        meta["reference"] = "onnxruntime cpu fp32"
    else:
        import torch
        model = construct(entry)
        meta["bn_calibrated"] = calibrate(model, entry)
        meta["params"] = sum(p.numel() for p in model.parameters())
        meta["checksum"] = checksum(model)
        meta["output"] = entry.output
        torch.save(model.state_dict(), base + ".pt")
        meta["exporter"] = onnx_export(model, entry, inputs, base + ".onnx")
        meta["torch"] = torch.__version__
        if ref != "none":
            dev = "cuda" if ref == "cuda" else "cpu"
            np.save(base + ".ref.npy", torch_reference(model, entry, inputs, dev))
            meta["reference"] = f"torch {dev} fp32" + (" (tf32 off)" if dev == "cuda" else "")
    meta["export_s"] = round(time.time() - t0, 2)
    meta["onnx_mib"] = round(os.path.getsize(base + ".onnx") / 2**20, 1)
    return meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for NAME.onnx, NAME.*.npy, NAME.pt, NAME.json")
    ap.add_argument("--models", default=os.environ.get("MODELS", "all"))
    ap.add_argument("--batch", type=int, default=0, help="override every model's batch (local tests)")
    ap.add_argument("--ref", default="auto", choices=["auto", "cuda", "cpu", "none"],
                    help="PyTorch FP32 reference: auto = cuda if available, else none (run_zoo.py makes it)")
    ap.add_argument("--ocr-dir", default=None, help="carried PaddleOCR ONNX files (default build-cuda/carry/ocr)")
    ap.add_argument("--timeout", type=float, default=180, help="seconds per model")
    ap.add_argument("--threads", type=int, default=0, help="torch/onnxruntime CPU threads (0: default)")
    ap.add_argument("--force", action="store_true", help="export again even if NAME.json exists")
    ap.add_argument("--ocr-dynamic", action="store_true", default=os.environ.get("OCR_DYNAMIC") == "1",
                    help="keep the PaddleOCR models' dynamic dims; run_zoo.py then passes --minShapes/--optShapes/"
                         "--maxShapes (all equal) to sampan build")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    entries = select(a.models)
    ref = a.ref
    if any(e.kind != "ocr" for e in entries):
        import torch
        if a.threads:
            torch.set_num_threads(a.threads)
        if ref == "auto":
            ref = "cuda" if torch.cuda.is_available() else "none"
    ocr_dir = find_ocr_dir(a.ocr_dir)
    signal.signal(signal.SIGALRM, _alarm)
    failed = 0
    for e in entries:
        mpath = os.path.join(a.out, e.name + ".json")
        if not a.force and os.path.exists(mpath):
            with open(mpath) as f:
                if "error" not in json.load(f):
                    print(f"{e.name}: already exported", flush=True)
                    continue
        t0 = time.time()
        signal.alarm(max(1, int(a.timeout)))
        try:
            meta = export_one(e, a.out, ref, ocr_dir, a.batch or None, a.threads, a.ocr_dynamic)
        except Exception as ex:  # noqa: BLE001 - record, go on
            failed += 1
            msg = f"{type(ex).__name__}: {ex}"
            meta = {"name": e.name, "batch": a.batch or e.batch, "error": msg[-1500:],
                    "export_s": round(time.time() - t0, 2)}
            traceback.print_exc()
        finally:
            signal.alarm(0)
        atomic_json(mpath, meta)
        print(f"{e.name}: {'FAILED ' + meta['error'][:300] if 'error' in meta else 'ok'} "
              f"({meta['export_s']:.1f} s{', %.1f MiB' % meta['onnx_mib'] if 'onnx_mib' in meta else ''})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
