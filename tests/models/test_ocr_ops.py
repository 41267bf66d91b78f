"""The image-geometry ops of the served OCR / detection pipelines (sampan::DbPostProcess,
sampan::TextLineCrop, sampan::ResizeImage), run by `sampan run` on one-node ONNX graphs, against
rapidocr 3.4.2's own Python functions (with cv2 and pyclipper) on rendered product labels: one
straight, one rotated 180 degrees, one slightly rotated. The PaddleOCR det model (run with
onnxruntime) gives real probability maps; the recognizer reads the crops both ways.

Bounds measured (cv2 5.1, rapidocr 3.4.2, the three labels): ResizeImage limit_side and
letterbox equal the Python preprocessing to float rounding (< 1e-6); DbPostProcess finds the same
boxes in the same order, corners within 1 px (2 to 6 of a label's 40 coordinates differ, by 1: cv2's
float32 rectangle corners truncated on the other side of a whole pixel); TextLineCrop on the same
boxes: at most one grey level (1/127.5) apart on 0.01-0.04 % of the values, mean difference
< 4e-6; the recognizer reads the same text from both. The served chain against RapidOCR: the same
lines and text (14 of 15 lines to the letter, one space tipped by a box 1 px off), boxes within 1 px.
"""
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from test_models import FONT, ctc_greedy_decode, load_charset, model_path, run_ort, run_sampan

# The references are required (scripts/requirements-test.txt): a missing one fails, never skips.
import cv2  # noqa: E402
from rapidocr.ch_ppocr_det.main import TextDetector  # noqa: E402
from rapidocr.ch_ppocr_det.utils import DBPostProcess, DetPreProcess  # noqa: E402
from rapidocr.ch_ppocr_cls.main import TextClassifier  # noqa: E402
from rapidocr.ch_ppocr_rec.main import TextRecognizer  # noqa: E402
from rapidocr.utils.process_img import get_rotate_crop_image  # noqa: E402

LABEL = [("ORGANIC GREEN TEA", 34), ("Net wt 250 g (8.8 oz)", 24), ("Best before 2026-11-30", 22),
         ("LOT 4711 B", 20), ("Sampan Foods Ltd.", 26)]
BACKGROUND = (236, 230, 218)


def label_image(angle: float = 0.0) -> np.ndarray:
    """A product label (several lines of several sizes) rotated by `angle` degrees, BGR uint8."""
    from PIL import Image, ImageDraw, ImageFont
    canvas = Image.new("RGB", (640, 420), BACKGROUND)
    draw = ImageDraw.Draw(canvas)
    y = 40
    for i, (text, size) in enumerate(LABEL):
        draw.text((50 + 20 * (i % 3), y), text, fill=(25, 25, 30), font=ImageFont.truetype(str(FONT), size))
        y += int(size * 2.1)
    if angle:
        canvas = canvas.rotate(angle, resample=Image.BICUBIC, fillcolor=BACKGROUND)
    return np.ascontiguousarray(np.asarray(canvas)[:, :, ::-1])


IMAGES = {"straight": 0.0, "upside_down": 180.0, "tilted": 4.0}


def one_node_model(tmp_path: Path, op: str, inputs, outputs, **attrs) -> Path:
    """A model of one sampan-domain node; inputs/outputs are (name, TensorProto type, dims)."""
    node = helper.make_node(op, [n for n, _, _ in inputs], [n for n, _, _ in outputs], domain="sampan", name="n", **attrs)
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("sampan", 1)])
    path = tmp_path / f"{op}.onnx"
    onnx.save(model, str(path))
    return path


def sampan_op(tmp_path, op, inputs: dict, in_types: dict, outputs, tag: str = "", **attrs) -> dict:
    """Runs one `op` node on `inputs` with `sampan run` (in its own folder, tag or op)."""
    sub = tmp_path / (tag or op)
    sub.mkdir(parents=True, exist_ok=True)
    ins = [(n, in_types[n], [f"{n}_{k}" for k in range(v.ndim)]) for n, v in inputs.items()]
    outs = [(n, t, None) for n, t in outputs]
    return run_sampan(one_node_model(sub, op, ins, outs, **attrs), inputs, sub)


def det_prob(img: np.ndarray):
    """rapidocr's det preprocessing and the det model's probability map (onnxruntime)."""
    x = DetPreProcess(736, "min")(img)
    (prob,) = run_ort(model_path("ocr_det"), {"x": x}).values()
    return x, prob


def rapidocr_boxes(prob: np.ndarray, shape):
    post = DBPostProcess(thresh=0.3, box_thresh=0.5, max_candidates=1000, unclip_ratio=1.6, score_mode="fast",
                         use_dilation=True)
    boxes, scores = post(prob, shape)
    return (TextDetector.sorted_boxes(boxes) if len(boxes) else boxes), scores


@pytest.mark.parametrize("name", list(IMAGES))
def test_resize_image_limit_side_equals_det_preprocess(name, tmp_path):
    img = label_image(IMAGES[name])
    ours = sampan_op(tmp_path, "ResizeImage", {"image": img}, {"image": TensorProto.UINT8},
                     [("tensor", TensorProto.FLOAT), ("transform", TensorProto.FLOAT)])
    ref = DetPreProcess(736, "min")(img)
    assert ours["tensor"].shape == ref.shape
    assert np.abs(ours["tensor"] - ref).max() < 1e-5
    h, w = img.shape[:2]
    np.testing.assert_allclose(ours["transform"], [ref.shape[2] / h, ref.shape[3] / w, 0, 0], rtol=1e-6)


def ultralytics_letterbox(img, new_shape):
    """ultralytics LetterBox(auto=False, center=True) as numpy + cv2, then x / 255, RGB, NCHW."""
    shape = img.shape[:2]
    r = min(new_shape[0] / shape[0], new_shape[1] / shape[1])
    new_unpad = int(round(shape[1] * r)), int(round(shape[0] * r))
    dw, dh = (new_shape[1] - new_unpad[0]) / 2, (new_shape[0] - new_unpad[1]) / 2
    if shape[::-1] != new_unpad:
        img = cv2.resize(img, new_unpad, interpolation=cv2.INTER_LINEAR)
    top, bottom = int(round(dh - 0.1)), int(round(dh + 0.1))
    left, right = int(round(dw - 0.1)), int(round(dw + 0.1))
    img = cv2.copyMakeBorder(img, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(114, 114, 114))
    x = img[:, :, ::-1].transpose(2, 0, 1)[None].astype(np.float32) / 255.0
    return x, (r, r, top, left)


@pytest.mark.parametrize("size", [(640, 640), (384, 640), (320, 256)])
def test_resize_image_letterbox_equals_ultralytics(size, tmp_path):
    img = label_image(4.0)[:397, :611]  # odd sizes: uneven padding
    ours = sampan_op(tmp_path, "ResizeImage", {"image": img}, {"image": TensorProto.UINT8},
                     [("tensor", TensorProto.FLOAT), ("transform", TensorProto.FLOAT)], mode="letterbox",
                     size=list(size), mean=[0.0], std=[255.0], swap_rb=1)
    ref, transform = ultralytics_letterbox(img, size)
    assert ours["tensor"].shape == ref.shape
    assert np.abs(ours["tensor"] - ref).max() < 1e-6
    np.testing.assert_allclose(ours["transform"], transform, rtol=1e-6)


@pytest.mark.parametrize("name", list(IMAGES))
def test_db_postprocess_equals_rapidocr(name, tmp_path):
    img = label_image(IMAGES[name])
    _, prob = det_prob(img)
    ref_boxes, _ = rapidocr_boxes(prob, img.shape[:2])
    ours = sampan_op(tmp_path, "DbPostProcess", {"prob": prob, "src_size": np.array(img.shape[:2], np.int64)},
                     {"prob": TensorProto.FLOAT, "src_size": TensorProto.INT64},
                     [("boxes", TensorProto.FLOAT), ("scores", TensorProto.FLOAT), ("batch_index", TensorProto.INT64)])
    boxes = ours["boxes"]
    assert len(ref_boxes) >= len(LABEL), f"rapidocr found {len(ref_boxes)} lines"
    assert boxes.shape == (len(ref_boxes), 4, 2), f"{boxes.shape} boxes, rapidocr {np.shape(ref_boxes)}"
    diff = np.abs(boxes - ref_boxes).max()
    print(f"{name}: {len(boxes)} boxes, corners within {diff} px, {(np.abs(boxes - ref_boxes) > 0).sum()} coordinates differ")
    assert diff <= 1, f"corners differ by up to {diff} px:\n{boxes}\n{ref_boxes}"
    assert ours["scores"].shape == (len(ref_boxes),) and np.all(ours["scores"] >= 0.5)
    assert np.all(ours["batch_index"] == 0)


def test_db_postprocess_batch_and_slow_mode(tmp_path):
    maps = [det_prob(label_image(a))[1] for a in (0.0, 4.0)]
    assert maps[0].shape == maps[1].shape
    prob = np.concatenate(maps)
    ours = sampan_op(tmp_path, "DbPostProcess", {"prob": prob}, {"prob": TensorProto.FLOAT},
                     [("boxes", TensorProto.FLOAT), ("scores", TensorProto.FLOAT), ("batch_index", TensorProto.INT64)],
                     score_mode="slow")
    post = DBPostProcess(thresh=0.3, box_thresh=0.5, max_candidates=1000, unclip_ratio=1.6, score_mode="slow",
                         use_dilation=True)
    start = 0
    for b, m in enumerate(maps):
        ref, _ = post(m, m.shape[2:])
        ref = TextDetector.sorted_boxes(ref)
        got = ours["boxes"][ours["batch_index"] == b]
        assert got.shape == ref.shape
        assert np.abs(got - ref).max() <= 1
        assert np.all(ours["batch_index"][start:start + len(ref)] == b)  # image 0's boxes first
        start += len(ref)


def rec_norm(crop, max_wh_ratio):
    return TextRecognizer.resize_norm_img(SimpleNamespace(rec_image_shape=[3, 48, 320]), crop, max_wh_ratio)


def cls_norm(crop):
    return TextClassifier.resize_norm_img(SimpleNamespace(cls_image_shape=[3, 48, 192]), crop)


@pytest.mark.parametrize("name", list(IMAGES))
def test_text_line_crop_equals_rapidocr_and_reads_the_same(name, tmp_path):
    img = label_image(IMAGES[name])
    _, prob = det_prob(img)
    boxes, _ = rapidocr_boxes(prob, img.shape[:2])
    boxes = np.ascontiguousarray(boxes, np.float32)
    crops = [get_rotate_crop_image(img, b.copy()) for b in boxes]
    flip = np.array([k % 2 == 1 for k in range(len(boxes))])
    max_ratio = max([320 / 48] + [c.shape[1] / c.shape[0] for c in crops])
    ref_rec = np.stack([rec_norm(c, max_ratio) for c in crops])
    ref_cls = np.stack([cls_norm(cv2.rotate(c, 1) if f else c) for c, f in zip(crops, flip)])
    types = {"image": TensorProto.UINT8, "boxes": TensorProto.FLOAT, "flip": TensorProto.BOOL}
    rec = sampan_op(tmp_path, "TextLineCrop", {"image": img, "boxes": boxes}, types, [("lines", TensorProto.FLOAT)],
                    tag="rec")["lines"]
    cls = sampan_op(tmp_path, "TextLineCrop", {"image": img, "boxes": boxes, "flip": flip}, types,
                    [("lines", TensorProto.FLOAT)], tag="cls", width=192)["lines"]
    assert rec.shape == ref_rec.shape and cls.shape == ref_cls.shape
    # A pixel now and then is one level off (a sum on a rounding tie): one level is 1/127.5.
    for what, d in (("rec", np.abs(rec - ref_rec)), ("cls", np.abs(cls - ref_cls))):
        print(f"{name} {what}: max {d.max():.3g} mean {d.mean():.3g} off {(d > 1e-5).mean():.3g}")
        assert d.max() < 1.01 / 127.5 and d.mean() < 1e-5, (what, d.max(), d.mean())
    # The recognizer reads the same text from both.
    chars = load_charset()
    (p_ours,) = run_ort(model_path("ocr_rec"), {"x": rec}).values()
    (p_ref,) = run_ort(model_path("ocr_rec"), {"x": ref_rec.astype(np.float32)}).values()
    texts = [ctc_greedy_decode(p, chars) for p in p_ours]
    assert texts == [ctc_greedy_decode(p, chars) for p in p_ref]
    if name != "upside_down":  # the recognizer often drops spaces at this size
        assert "ORGANICGREENTEA" in [t.replace(" ", "") for t in texts], texts


def test_served_pipeline_reads_what_rapidocr_reads(tmp_path):
    """The chain a served pipeline runs (ResizeImage -> det -> DbPostProcess -> TextLineCrop(cls)
    -> cls -> TextLineCrop(rec, flip) -> rec), against RapidOCR itself: same lines, same text,
    boxes within 3 px."""
    from rapidocr import RapidOCR
    engine = RapidOCR(params={"Global.font_path": str(FONT)})
    chars = load_charset()
    for name, angle in IMAGES.items():
        img = label_image(angle)
        ref = engine(img)
        sub = tmp_path / name
        x = sampan_op(sub, "ResizeImage", {"image": img}, {"image": TensorProto.UINT8},
                      [("tensor", TensorProto.FLOAT)])["tensor"]
        (prob,) = run_ort(model_path("ocr_det"), {"x": x}).values()
        det = sampan_op(sub, "DbPostProcess", {"prob": prob, "src_size": np.array(img.shape[:2], np.int64)},
                        {"prob": TensorProto.FLOAT, "src_size": TensorProto.INT64},
                        [("boxes", TensorProto.FLOAT), ("scores", TensorProto.FLOAT)])
        boxes = det["boxes"]
        types = {"image": TensorProto.UINT8, "boxes": TensorProto.FLOAT, "flip": TensorProto.BOOL}
        cls_in = sampan_op(sub, "TextLineCrop", {"image": img, "boxes": boxes}, types, [("lines", TensorProto.FLOAT)],
                           tag="cls", width=192)["lines"]
        (cls_p,) = run_ort(model_path("ocr_cls"), {"x": cls_in}).values()
        flip = (cls_p.argmax(1) == 1) & (cls_p.max(1) > 0.9)
        rec_in = sampan_op(sub, "TextLineCrop", {"image": img, "boxes": boxes, "flip": flip}, types,
                           [("lines", TensorProto.FLOAT)], tag="rec")["lines"]
        (rec_p,) = run_ort(model_path("ocr_rec"), {"x": rec_in}).values()
        texts = [ctc_greedy_decode(p, chars) for p in rec_p]
        scores = [float(p.max(1)[p.argmax(1) != 0].mean()) if (p.argmax(1) != 0).any() else 0.0 for p in rec_p]
        keep = [i for i, (t, s) in enumerate(zip(texts, scores)) if t.strip() and s >= 0.5]
        # A box a pixel off (cv2's float32 corners truncated) can tip a borderline space: compare
        # the text without spaces, and count the lines read exactly alike.
        ours_t = [texts[i] for i in keep]
        assert [t.replace(" ", "") for t in ours_t] == [t.replace(" ", "") for t in ref.txts], f"{name}: {ours_t} vs {ref.txts}"
        same = sum(a == b for a, b in zip(ours_t, ref.txts))
        print(f"{name}: {same}/{len(ref.txts)} lines read exactly alike")
        diff = np.abs(boxes[keep] - np.asarray(ref.boxes)).max()
        print(f"{name}: boxes within {diff} px of RapidOCR's")
        assert diff <= 3, f"{name}: boxes differ by {diff} px"
