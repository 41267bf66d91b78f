"""The example pipelines (examples/pipelines, issue #18) served by the real server and called with
tritonclient, unmodified: text lines out of product-label images (OCR), boxes out of an image
(YOLOv5s with EfficientNMS_TRT), sentence embeddings out of text (MiniLM). Each is checked against
an independent path: rapidocr's own PaddleOCR pipeline (its Python pre- and post-processing with
OpenCV, the same ONNX models under onnxruntime), numpy NMS and rescaling on the raw detector
outputs, Hugging Face's tokenizer with the numpy forward pass of tests/models/build_minilm.py.
Also: 64 concurrent OCR clients, whose crops batch together at the recognizer, and bad inputs,
each a clear error with the server still serving."""

import importlib.util
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from PIL import Image, ImageDraw
from tritonclient.utils import InferenceServerException

from conftest import MODELS

ROOT = Path(__file__).resolve().parents[2]


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


make = _load(ROOT / "examples" / "pipelines" / "make_pipelines.py", "make_pipelines")
labels = _load(ROOT / "examples" / "pipelines" / "labels.py", "labels")
label_images, image_bytes, FONT = labels.label_images, labels.encode, labels.FONT


def need(*names):
    for n in names:
        if not (MODELS / n).exists():
            pytest.fail(f"{MODELS / n} missing: run bash tests/models/export_all.sh build/models")


def stats_of(client):
    return {s["name"]: s for s in client.get_inference_statistics()["model_stats"]}


def bytes_input(mod, name, values, rows=False):
    """A BYTES input of the values: shape [N], or [N, 1] with rows (a batching model's N rows)."""
    arr = np.array(values, dtype=object)
    if rows:
        arr = arr.reshape(-1, 1)
    inp = mod.InferInput(name, list(arr.shape), "BYTES")
    inp.set_data_from_numpy(arr)
    return inp


# --- OCR ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rapidocr():
    from rapidocr import RapidOCR
    return RapidOCR(params={"Global.font_path": FONT, "Global.log_level": "error"})


def reference_ocr(engine, data):
    """rapidocr's answer for the encoded image: (texts, boxes [N, 4, 2])."""
    import cv2
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    r = engine(img)
    if r.txts is None:
        return [], np.zeros((0, 4, 2), np.float32)
    return list(r.txts), np.asarray(r.boxes, np.float32)


def ocr(client, data, mod=httpclient):
    r = client.infer("ocr", [bytes_input(mod, "IMAGE", [data])])
    text = [t.decode() for t in r.as_numpy("TEXT")]
    return text, r.as_numpy("BOXES"), r.as_numpy("SCORES")


@pytest.fixture(scope="module")
def ocr_repo(tmp_path_factory):
    need("ocr_det.onnx", "ocr_rec.onnx", "ocr_cls.onnx", "ppocr_keys_v1.txt")
    out = tmp_path_factory.mktemp("pipelines")
    make.make_ocr(out, MODELS)
    return out / "ocr"


def test_ocr_pipeline_reads_label_lines_as_rapidocr_does(serve, ocr_repo, rapidocr):
    srv = serve(ocr_repo, "--backend", "cpu")
    c = httpclient.InferenceServerClient(srv.http_url, network_timeout=300)
    for i, data in enumerate(label_images()):
        text, boxes, scores = ocr(c, data)
        ref_text, ref_boxes = reference_ocr(rapidocr, data)
        assert len(ref_text) >= 3, (i, ref_text)  # the reference reads the label
        assert text == ref_text, (i, text, ref_text)
        assert boxes.shape == ref_boxes.shape, (i, boxes.shape, ref_boxes.shape)
        assert np.abs(boxes - ref_boxes).max() <= 3.0, (i, np.abs(boxes - ref_boxes).max())
        assert scores.shape == (len(text),) and (scores >= 0.5).all() and (scores <= 1).all()
    # gRPC, and an image with no text: no lines.
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    text, _, _ = ocr(g, label_images()[0], grpcclient)
    assert text == reference_ocr(rapidocr, label_images()[0])[0]
    blank = image_bytes(Image.new("RGB", (320, 200), (255, 255, 255)))
    text, boxes, scores = ocr(c, blank)
    assert text == [] and boxes.shape == (0, 4, 2) and scores.shape == (0,)


def test_the_decoupled_ocr_pipeline_streams_one_line_per_response(serve, ocr_repo):
    import queue
    srv = serve(ocr_repo, "--backend", "cpu")
    h = httpclient.InferenceServerClient(srv.http_url, network_timeout=300)
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    q = queue.Queue()
    g.start_stream(callback=lambda result, error: q.put((result, error)))
    data = label_images()[0]
    g.async_stream_infer("ocr_lines", [bytes_input(grpcclient, "IMAGE", [data])], request_id="label",
                         enable_empty_final_response=True)
    rows = []
    while True:
        result, error = q.get(timeout=120)
        assert error is None, error
        if result.get_response().parameters["triton_final_response"].bool_param:
            break
        rows.append(result)
    g.stop_stream()
    text, boxes, scores = ocr(h, data)  # the unary pipeline's whole answer
    assert len(text) >= 3
    assert [r.as_numpy("TEXT")[0].decode() for r in rows] == text  # one line each, top to bottom
    np.testing.assert_array_equal(np.concatenate([r.as_numpy("BOXES") for r in rows]), boxes)
    np.testing.assert_array_equal(np.concatenate([r.as_numpy("SCORES") for r in rows]), scores)
    with pytest.raises(InferenceServerException, match="ModelStreamInfer only"):
        h.infer("ocr_lines", [bytes_input(httpclient, "IMAGE", [data])])


def test_ocr_text_step_drops_blank_and_unsure_lines(serve, ocr_repo):
    """ocr_text as rapidocr filters: a line whose text is only spaces and a line scoring under 0.5
    are dropped with their boxes; the others keep their order."""
    srv = serve(ocr_repo, "--backend", "cpu")
    c = httpclient.InferenceServerClient(srv.http_url)
    keys = (MODELS / "ppocr_keys_v1.txt").read_text(encoding="utf-8").splitlines()
    classes = ["<blank>"] + keys + [" "]
    t, n = 6, len(classes)

    def row(chars, p):
        probs = np.full((t, n), (1 - p) / (n - 1), np.float32)
        for k in range(t):
            ch = chars[k] if k < len(chars) else "<blank>"
            probs[k, classes.index(ch)] = p
        return probs

    probs = np.stack([row("ab", 0.9), row(" ", 0.95), row("cd", 0.3), row("ef", 0.8)])
    boxes = np.arange(4 * 8, dtype=np.float32).reshape(4, 4, 2)
    # The boxes are the bounded image's: RATIO (h, w) = (2, 0.5) maps them back, clipped to the
    # original 50 x 40 (height x width).
    ratio, orig = np.array([2.0, 0.5], np.float32), np.array([50, 40], np.int64)
    ins = []
    for name, arr, kind in (("PROBS", probs, "FP32"), ("BOXES", boxes, "FP32"), ("RATIO", ratio, "FP32"),
                            ("ORIG_SIZE", orig, "INT64")):
        i = httpclient.InferInput(name, list(arr.shape), kind)
        i.set_data_from_numpy(arr)
        ins.append(i)
    r = c.infer("ocr_text", ins)
    assert [x.decode() for x in r.as_numpy("TEXT")] == ["ab", "ef"]
    want = boxes[[0, 3]] * np.array([0.5, 2.0], np.float32)
    want = np.minimum(want, np.array([40, 50], np.float32))
    np.testing.assert_array_equal(r.as_numpy("BOXES_OUT"), want)
    np.testing.assert_allclose(r.as_numpy("SCORES"), [0.9, 0.8], rtol=1e-6)


def test_a_large_photo_is_read_within_rapidocrs_bounds(serve, ocr_repo, rapidocr):
    """A 3300 x 1500 label (over rapidocr's 2000 px): the pipeline shrinks it as rapidocr does
    (ImageWithinBounds) and answers the same lines, boxes in the original's pixels."""
    srv = serve(ocr_repo, "--backend", "cpu")
    c = httpclient.InferenceServerClient(srv.http_url, network_timeout=300)
    big = labels.label(labels.LINES[1], 7).resize((3300, 1500))
    data = image_bytes(big)
    text, boxes, _ = ocr(c, data)
    ref_text, ref_boxes = reference_ocr(rapidocr, data)
    assert len(ref_text) >= 3, ref_text
    assert text == ref_text, (text, ref_text)
    assert boxes.shape == ref_boxes.shape and np.abs(boxes - ref_boxes).max() <= 4.0, np.abs(boxes - ref_boxes).max()
    # In the original's pixels: the widest line ends past 1800 px there, near 1100 in the shrunk image.
    assert boxes[..., 0].max() > 1500, boxes[..., 0].max()


def test_64_concurrent_ocr_clients_batch_crops_at_the_recognizer(serve, tmp_path):
    need("ocr_det.onnx", "ocr_rec.onnx", "ocr_cls.onnx", "ppocr_keys_v1.txt")
    # Three detector instances and a 300 ms batching window, so that on two busy cores requests
    # reach the recognizer close enough together to share its executions.
    make.make_ocr(tmp_path, MODELS, det_instances=3, batch_delay_us=300000)
    srv = serve(tmp_path / "ocr", "--backend", "cpu")
    images = label_images()
    c = httpclient.InferenceServerClient(srv.http_url, network_timeout=300)
    want = [ocr(c, data) for data in images]
    before = stats_of(c)["ocr_rec"]
    clients = 64
    barrier = threading.Barrier(clients)
    errors = []

    def client(cid):
        cc = httpclient.InferenceServerClient(srv.http_url, network_timeout=600)
        barrier.wait()
        k = cid % len(images)
        try:
            text, boxes, _ = ocr(cc, images[k])
            if text != want[k][0] or not np.array_equal(boxes, want[k][1]):
                errors.append((cid, text, want[k][0]))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append((cid, str(e)))
        cc.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors, errors[:3]
    after = stats_of(c)["ocr_rec"]
    crops = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    # Every detected line went to the recognizer (lines below the text score are dropped after it).
    assert crops >= sum(len(want[i % len(images)][0]) for i in range(clients)), crops
    # Crops of different requests ran in one recognizer execution.
    assert executions <= clients * 3 // 4, (executions, crops)


def test_sampan_perf_drives_the_ocr_pipeline_with_encoded_images(serve, ocr_repo, tmp_path):
    """`sampan perf --input-data` with perf_analyzer's {"b64": ...} elements: the label images as
    BYTES, answered without errors; bad base64 is refused naming the entry."""
    import base64
    import json
    import subprocess
    from conftest import sampan_bin
    srv = serve(ocr_repo, "--backend", "cpu")
    data = tmp_path / "images.json"
    data.write_text(json.dumps({"data": [{"IMAGE": {"b64": base64.b64encode(d).decode()}} for d in label_images()]}))
    out = tmp_path / "perf.json"
    r = subprocess.run([sampan_bin(), "perf", "-m", "ocr", "-u", srv.http_url, "--input-data", str(data),
                        "--concurrency-range", "2", "-p", "3000", "-r", "3", "--json", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    level = json.loads(out.read_text())["results"][0]
    assert level["errors"] == 0 and level["throughput_infer_per_s"] > 0, level
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"data": [{"IMAGE": {"b64": "not*base64"}}]}))
    r = subprocess.run([sampan_bin(), "perf", "-m", "ocr", "-u", srv.http_url, "--input-data", str(bad), "-p", "200"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "data[0].IMAGE.b64" in r.stderr and "base64" in r.stderr, r.stderr
    bad.write_text(json.dumps({"data": [{"IMAGE": {"content": [], "shape": [0]}}]}))
    r = subprocess.run([sampan_bin(), "perf", "-m", "ocr", "-u", srv.http_url, "--input-data", str(bad), "-p", "200"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "data[0].IMAGE is empty" in r.stderr, r.stderr


def test_bad_images_are_errors_and_the_server_keeps_serving(serve, ocr_repo):
    srv = serve(ocr_repo, "--backend", "cpu")
    c = httpclient.InferenceServerClient(srv.http_url, network_timeout=300)
    good = label_images()[0]
    jpeg = label_images()[1]
    png = image_bytes(Image.new("RGB", (8, 8)))
    huge = bytearray(png)
    huge[16:24] = (20000).to_bytes(4, "big") + (20000).to_bytes(4, "big")
    import zlib
    huge[29:33] = zlib.crc32(bytes(huge[12:29])).to_bytes(4, "big")
    cases = {
        "not an image": (b"hello, this is text", "not an image of a known format"),
        "truncated JPEG": (jpeg[: len(jpeg) // 2], "corrupt JPEG"),
        "20000x20000 PNG": (bytes(huge), "over the limit of"),
        "empty": (b"", "empty (0 bytes)"),
    }
    for what, (data, msg) in cases.items():
        with pytest.raises(InferenceServerException) as e:
            ocr(c, data)
        assert "ensemble step 0 (model 'ocr_pre')" in str(e.value) and msg in str(e.value), (what, str(e.value))
    # No image at all: a BYTES tensor of 0 elements.
    with pytest.raises(InferenceServerException) as e:
        inp = httpclient.InferInput("IMAGE", [0], "BYTES")
        inp.set_data_from_numpy(np.array([], dtype=object))
        c.infer("ocr", [inp])
    assert "IMAGE" in str(e.value), str(e.value)
    assert c.is_server_ready()
    assert len(ocr(c, good)[0]) >= 3


# --- YOLO --------------------------------------------------------------------------------------

def scene(seed, size=(500, 360)):
    """Coloured rectangles and ellipses on a gradient: something for random weights to fire on."""
    rng = np.random.default_rng(seed)
    w, h = size
    base = np.linspace(40, 200, w, dtype=np.float32)[None, :, None] * np.ones((h, 1, 3), np.float32)
    img = Image.fromarray(base.astype(np.uint8))
    d = ImageDraw.Draw(img)
    for _ in range(12):
        x0, y0 = int(rng.integers(0, w - 40)), int(rng.integers(0, h - 40))
        x1, y1 = x0 + int(rng.integers(20, 200)), y0 + int(rng.integers(20, 150))
        col = tuple(int(v) for v in rng.integers(0, 255, 3))
        (d.rectangle if rng.random() < 0.5 else d.ellipse)([x0, y0, x1, y1], fill=col)
    return img


def numpy_nms(raw, score_threshold, iou_threshold=0.45, max_boxes=300):
    """EfficientNMS_TRT's selection on [25200, 85] YOLOv5 outputs (box_coding 1: centre, size)."""
    xy, wh = raw[:, :2], raw[:, 2:4]
    corners = np.concatenate([xy - wh / 2, xy + wh / 2], 1)
    scores = raw[:, 4:5] * raw[:, 5:]
    a, k = np.nonzero(scores >= score_threshold)
    s = scores[a, k]
    order = sorted(range(len(s)), key=lambda i: (-s[i], a[i], k[i]))[:4096]
    kept = []
    for i in order:
        b = corners[a[i]]
        ok = True
        for j in kept:
            if k[j] != k[i]:
                continue
            o = corners[a[j]]
            iw = max(0.0, min(b[2], o[2]) - max(b[0], o[0]))
            ih = max(0.0, min(b[3], o[3]) - max(b[1], o[1]))
            inter = iw * ih
            union = (b[2] - b[0]) * (b[3] - b[1]) + (o[2] - o[0]) * (o[3] - o[1]) - inter
            if union > 0 and inter / union >= iou_threshold:
                ok = False
                break
        if ok:
            kept.append(i)
            if len(kept) == max_boxes:
                break
    return corners[a[kept]], s[kept], k[kept].astype(np.int32)


def test_yolo_pipeline_boxes_equal_numpy_nms_and_rescale_of_the_raw_outputs(serve, tmp_path):
    need("yolov5s.onnx")
    make.make_yolo(tmp_path, MODELS, score_threshold=0.25)
    srv = serve(tmp_path / "yolo", "--backend", "cpu")
    c = httpclient.InferenceServerClient(srv.http_url, network_timeout=300)
    for seed, size in ((1, (500, 360)), (2, (360, 640))):
        data = image_bytes(scene(seed, size))
        r = c.infer("detect", [bytes_input(httpclient, "IMAGE", [data])])
        boxes, scores, classes = r.as_numpy("BOXES"), r.as_numpy("SCORES"), r.as_numpy("CLASSES")
        # The same request step by step: the letterboxed input, the raw detector outputs.
        pre = c.infer("yolo_pre", [bytes_input(httpclient, "IMAGE", [data])])
        images, transform = pre.as_numpy("IMAGES"), pre.as_numpy("TRANSFORM")
        w, h = size
        sy, sx, top, left = (float(v) for v in transform)
        s = min(640 / h, 640 / w)
        assert abs(sy - s) < 1e-3 and abs(sx - s) < 1e-3, transform
        assert abs(top - (640 - round(h * s)) / 2) <= 1 and abs(left - (640 - round(w * s)) / 2) <= 1, transform
        inp = httpclient.InferInput("images", list(images.shape), "FP32")
        inp.set_data_from_numpy(images)
        raw = c.infer("yolov5s", [inp]).as_numpy("output0")[0]
        ref_boxes, ref_scores, ref_classes = numpy_nms(raw, 0.25)
        ref_boxes = (ref_boxes - np.array([left, top, left, top], np.float32)) / np.array([sx, sy, sx, sy], np.float32)
        ref_boxes = np.clip(ref_boxes, 0, np.array([w, h, w, h], np.float32))
        assert len(ref_scores) > 5, "random weights gave too few detections to compare"
        assert boxes.shape == (len(ref_scores), 4) and classes.dtype == np.int32
        np.testing.assert_array_equal(classes, ref_classes)
        np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(boxes, ref_boxes, rtol=1e-4, atol=1e-2)


# --- BERT --------------------------------------------------------------------------------------

def test_bert_pipeline_embeds_text_as_the_numpy_forward_pass(serve, tmp_path):
    need("minilm_l6.onnx")
    from tokenizers import Tokenizer
    sys.path.insert(0, str(ROOT / "tests" / "models"))
    import build_minilm
    make.make_bert(tmp_path, MODELS)
    srv = serve(tmp_path / "bert", "--backend", "cpu")
    c = httpclient.InferenceServerClient(srv.http_url, network_timeout=300)
    texts = ["A man is eating food.", "A man is eating a piece of bread.", "The stock market crashed today.",
             "Café crème, naïve Ångström — 42%!", "Sampan serves ONNX models on GPUs and CPUs.", "",
             "北京的天气很好", "word " * 200]
    r = c.infer("embed", [bytes_input(httpclient, "TEXT", [t.encode() for t in texts], rows=True)])
    emb = r.as_numpy("EMBEDDING")
    assert emb.shape == (len(texts), 384)
    tok = Tokenizer.from_file(str(build_minilm.model_dir() / "tokenizer.json"))
    tok.enable_truncation(128)
    tok.no_padding()
    w = build_minilm.load_safetensors(build_minilm.model_dir() / "model.safetensors")
    for i, t in enumerate(texts):
        ids = np.array([tok.encode(t).ids], np.int64)
        _, ref = build_minilm.numpy_forward(w, ids, np.ones_like(ids), np.zeros_like(ids))
        cos = float(emb[i] @ ref[0] / (np.linalg.norm(emb[i]) * np.linalg.norm(ref[0])))
        assert cos >= 0.9999, (t[:40], cos)
    # The model card's pair: similar sentences close, an unrelated one far.
    assert emb[0] @ emb[1] > 0.6 and emb[0] @ emb[2] < 0.3, (emb[0] @ emb[1], emb[0] @ emb[2])
    # Invalid UTF-8 is an error naming the text; the server keeps serving.
    with pytest.raises(InferenceServerException) as e:
        c.infer("embed", [bytes_input(httpclient, "TEXT", [b"ok", b"\xff\xfe bad"], rows=True)])
    assert "ensemble step 0 (model 'bert_tok')" in str(e.value) and "UTF-8" in str(e.value), str(e.value)
    # At most 64 texts a request (the ensemble's max_batch_size), refused before any work.
    with pytest.raises(InferenceServerException) as e:
        c.infer("embed", [bytes_input(httpclient, "TEXT", [b"x"] * 65, rows=True)])
    assert "65" in str(e.value) and "64" in str(e.value), str(e.value)
    # Texts of many clients batch at the encoder.
    before = stats_of(c)["minilm"]
    errors = []

    def client(cid):
        cc = httpclient.InferenceServerClient(srv.http_url, network_timeout=300)
        try:
            got = cc.infer("embed", [bytes_input(httpclient, "TEXT", [texts[cid % 3].encode()], rows=True)]).as_numpy("EMBEDDING")
            if not np.allclose(got[0], emb[cid % 3], atol=1e-5):
                errors.append(cid)
        except Exception as ex:  # noqa: BLE001 - reported below
            errors.append(str(ex))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors[:3]
    after = stats_of(c)["minilm"]
    assert after["inference_count"] - before["inference_count"] == 24
    assert after["execution_count"] - before["execution_count"] < 24
