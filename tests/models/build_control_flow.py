#!/usr/bin/env python3
"""Builds three small control-flow models with onnx.helper (opset 17), each a real pattern:

  cf_nms_loop.onnx   detection post-processing: boxes decoded from (cx, cy, w, h) to corners,
                     then greedy non-max suppression as a Loop (while the best remaining score is
                     above the score threshold, at most N iterations): each iteration takes the
                     best box (ArgMax), records it (scan outputs: index and score), and suppresses
                     every box whose IoU with it exceeds the IoU threshold. The body reads the
                     decoded boxes and both thresholds from the enclosing graph; an If picks the
                     suppression value by the score dtype rule. Selected boxes gathered after.
                     Inputs: boxes f32[N,4] (cx, cy, w, h), scores f32[N].
  cf_gru_decode.onnx greedy decoding with a small GRU (vocabulary 11, embedding 8, hidden 16): a
                     Loop of at most max_len steps, carrying the token and the hidden state, stops
                     when the argmax token is EOS (0); scan outputs: the tokens and the logits.
                     Embedding, GRU weights and output projection are outer-scope initializers.
                     Inputs: h0 f32[1,1,16], start i64[1], max_len i64[].
  cf_scan_cumsum.onnx two Scans: a cumulative sum over axis 0 of x f32[T,B,F] (state f32[B,F],
                     scan output = running sum) and a reverse cumulative sum over axis 1 written
                     along axis 1 (scan_input_axes, scan_input_directions, scan_output_axes and
                     scan_output_directions all non-default). Input: x f32[T,B,F].

Weights come from a fixed seed. Each model is checked with onnx.checker and, under onnxruntime,
against a numpy implementation of the same computation.

Usage: .venv/bin/python tests/models/build_control_flow.py [--out build/models] [--force]
"""
import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def const(name, array):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(array), name))


def model(graph):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="sampan-tests")
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


# ---------------------------------------------------------------------------------------------
def nms_loop(score_thr=0.3, iou_thr=0.5):
    # Body: (iter, cond, masked_scores) -> (cond_out, masked_scores', best_index, best_score)
    body_nodes = [
        helper.make_node("ArgMax", ["s_in"], ["best_idx"], axis=0, keepdims=1),      # i64[1]
        helper.make_node("Gather", ["s_in", "best_idx"], ["best_score"], axis=0),    # f32[1]
        helper.make_node("Gather", ["corners", "best_idx"], ["best_box"], axis=0),   # f32[1,4] (outer value)
        const("i0", np.array([0], np.int64)), const("i1", np.array([1], np.int64)),
        const("i2", np.array([2], np.int64)), const("i3", np.array([3], np.int64)),
        const("i4", np.array([4], np.int64)), const("ax1", np.array([1], np.int64)),
        helper.make_node("Slice", ["corners", "i0", "i1", "ax1"], ["x1"]),
        helper.make_node("Slice", ["corners", "i1", "i2", "ax1"], ["y1"]),
        helper.make_node("Slice", ["corners", "i2", "i3", "ax1"], ["x2"]),
        helper.make_node("Slice", ["corners", "i3", "i4", "ax1"], ["y2"]),
        helper.make_node("Slice", ["best_box", "i0", "i1", "ax1"], ["bx1"]),
        helper.make_node("Slice", ["best_box", "i1", "i2", "ax1"], ["by1"]),
        helper.make_node("Slice", ["best_box", "i2", "i3", "ax1"], ["bx2"]),
        helper.make_node("Slice", ["best_box", "i3", "i4", "ax1"], ["by2"]),
        helper.make_node("Max", ["x1", "bx1"], ["ix1"]), helper.make_node("Max", ["y1", "by1"], ["iy1"]),
        helper.make_node("Min", ["x2", "bx2"], ["ix2"]), helper.make_node("Min", ["y2", "by2"], ["iy2"]),
        const("zero", np.array(0, np.float32)),
        helper.make_node("Sub", ["ix2", "ix1"], ["iw0"]), helper.make_node("Max", ["iw0", "zero"], ["iw"]),
        helper.make_node("Sub", ["iy2", "iy1"], ["ih0"]), helper.make_node("Max", ["ih0", "zero"], ["ih"]),
        helper.make_node("Mul", ["iw", "ih"], ["inter"]),                               # f32[N,1]
        helper.make_node("Sub", ["x2", "x1"], ["w"]), helper.make_node("Sub", ["y2", "y1"], ["h"]),
        helper.make_node("Mul", ["w", "h"], ["area"]),
        helper.make_node("Sub", ["bx2", "bx1"], ["bw"]), helper.make_node("Sub", ["by2", "by1"], ["bh"]),
        helper.make_node("Mul", ["bw", "bh"], ["barea"]),
        helper.make_node("Add", ["area", "barea"], ["sum_area"]),
        helper.make_node("Sub", ["sum_area", "inter"], ["union"]),
        helper.make_node("Div", ["inter", "union"], ["iou2d"]),
        helper.make_node("Squeeze", ["iou2d", "ax1"], ["iou"]),                         # f32[N]
        helper.make_node("Greater", ["iou", "iou_thr"], ["overlap"]),                   # outer value iou_thr
        # The chosen box itself is removed too (its IoU with itself is 1, but a zero-area box has 0/0).
        helper.make_node("Shape", ["s_in"], ["n"]),
        helper.make_node("Squeeze", ["n"], ["n_scalar"]),
        helper.make_node("Range", ["zero_i", "n_scalar", "one_i"], ["all_idx"]),
        helper.make_node("Equal", ["all_idx", "best_idx"], ["is_best"]),
        helper.make_node("Or", ["overlap", "is_best"], ["drop"]),
        # The value a suppressed score takes: If picks -1 for non-negative thresholds, else thr - 1.
        helper.make_node("Less", ["score_thr", "zero"], ["thr_negative"]),
        helper.make_node("If", ["thr_negative"], ["sup"],
                         then_branch=helper.make_graph(
                             [helper.make_node("Sub", ["score_thr", "one_f"], ["sup_t"])], "then",
                             [], [helper.make_tensor_value_info("sup_t", F32, [])]),
                         else_branch=helper.make_graph(
                             [const("minus_one", np.array(-1, np.float32))], "else",
                             [], [helper.make_tensor_value_info("minus_one", F32, [])])),
        helper.make_node("Where", ["drop", "sup", "s_in"], ["s_out"]),
        helper.make_node("ReduceMax", ["s_out"], ["next_best"], keepdims=0),
        helper.make_node("Greater", ["next_best", "score_thr"], ["cond_out"]),
        helper.make_node("Squeeze", ["best_idx"], ["best_idx_s"]),
        helper.make_node("Squeeze", ["best_score"], ["best_score_s"]),
    ]
    body = helper.make_graph(
        body_nodes, "nms_body",
        [helper.make_tensor_value_info("iter", I64, []), helper.make_tensor_value_info("cond_in", BOOL, []),
         helper.make_tensor_value_info("s_in", F32, ["N"])],
        [helper.make_tensor_value_info("cond_out", BOOL, []), helper.make_tensor_value_info("s_out", F32, ["N"]),
         helper.make_tensor_value_info("best_idx_s", I64, []), helper.make_tensor_value_info("best_score_s", F32, [])])
    nodes = [
        const("score_thr", np.array(score_thr, np.float32)), const("iou_thr", np.array(iou_thr, np.float32)),
        const("half", np.array(0.5, np.float32)), const("one_f", np.array(1, np.float32)),
        const("zero_i", np.array(0, np.int64)), const("one_i", np.array(1, np.int64)),
        const("s0", np.array([0], np.int64)), const("s2", np.array([2], np.int64)), const("s4", np.array([4], np.int64)),
        const("a1", np.array([1], np.int64)),
        helper.make_node("Slice", ["boxes", "s0", "s2", "a1"], ["centre"]),
        helper.make_node("Slice", ["boxes", "s2", "s4", "a1"], ["size"]),
        helper.make_node("Mul", ["size", "half"], ["half_size"]),
        helper.make_node("Sub", ["centre", "half_size"], ["top_left"]),
        helper.make_node("Add", ["centre", "half_size"], ["bottom_right"]),
        helper.make_node("Concat", ["top_left", "bottom_right"], ["corners"], axis=1),
        helper.make_node("Shape", ["scores"], ["count"]),
        helper.make_node("Squeeze", ["count"], ["trip"]),
        helper.make_node("ReduceMax", ["scores"], ["top"], keepdims=0),
        helper.make_node("Greater", ["top", "score_thr"], ["cond0"]),
        helper.make_node("Loop", ["trip", "cond0", "scores"], ["final_scores", "keep", "keep_scores"], body=body),
        helper.make_node("Gather", ["corners", "keep"], ["keep_boxes"], axis=0),
    ]
    graph = helper.make_graph(
        nodes, "nms_loop",
        [helper.make_tensor_value_info("boxes", F32, ["N", 4]), helper.make_tensor_value_info("scores", F32, ["N"])],
        [helper.make_tensor_value_info("keep", I64, ["K"]), helper.make_tensor_value_info("keep_scores", F32, ["K"]),
         helper.make_tensor_value_info("keep_boxes", F32, ["K", 4])])
    return model(graph)


def nms_numpy(boxes, scores, score_thr=0.3, iou_thr=0.5):
    c = np.concatenate([boxes[:, :2] - boxes[:, 2:] * 0.5, boxes[:, :2] + boxes[:, 2:] * 0.5], 1)
    s = scores.copy()
    keep = []
    while len(keep) < len(s) and s.max() > score_thr:
        i = int(np.argmax(s))
        keep.append(i)
        ix1, iy1 = np.maximum(c[:, 0], c[i, 0]), np.maximum(c[:, 1], c[i, 1])
        ix2, iy2 = np.minimum(c[:, 2], c[i, 2]), np.minimum(c[:, 3], c[i, 3])
        inter = np.maximum(ix2 - ix1, 0) * np.maximum(iy2 - iy1, 0)
        area = (c[:, 2] - c[:, 0]) * (c[:, 3] - c[:, 1])
        iou = inter / (area + area[i] - inter)
        drop = (iou > iou_thr) | (np.arange(len(s)) == i)
        s = np.where(drop, np.float32(-1), s)
    return np.array(keep, np.int64)


def nms_inputs(rng, n=64):
    centre = rng.uniform(0, 100, (n, 2)).astype(np.float32)
    size = rng.uniform(5, 30, (n, 2)).astype(np.float32)
    return {"boxes": np.concatenate([centre, size], 1), "scores": rng.uniform(0, 1, n).astype(np.float32)}


# ---------------------------------------------------------------------------------------------
VOCAB, EMB, HID, EOS = 11, 8, 16, 0


def gru_weights():
    rng = np.random.default_rng(1234)
    return {
        "embedding": rng.normal(0, 1, (VOCAB, EMB)).astype(np.float32),
        "W": rng.normal(0, 0.5, (1, 3 * HID, EMB)).astype(np.float32),
        "R": rng.normal(0, 0.5, (1, 3 * HID, HID)).astype(np.float32),
        "B": rng.normal(0, 0.1, (1, 6 * HID)).astype(np.float32),
        "proj": rng.normal(0, 1, (HID, VOCAB)).astype(np.float32),
    }


def gru_decode():
    w = gru_weights()
    body_nodes = [
        helper.make_node("Gather", ["embedding", "tok_in"], ["emb"], axis=0),       # f32[1,EMB]
        helper.make_node("Unsqueeze", ["emb", "axis0"], ["x"]),                       # f32[1,1,EMB]
        helper.make_node("GRU", ["x", "W", "R", "B", "", "h_in"], ["", "h_out"], hidden_size=HID,
                         linear_before_reset=1),
        helper.make_node("Reshape", ["h_out", "flat"], ["h2"]),                       # f32[1,HID]
        helper.make_node("MatMul", ["h2", "proj"], ["logits"]),                       # f32[1,VOCAB]
        helper.make_node("ArgMax", ["logits", ], ["tok_out"], axis=1, keepdims=0),    # i64[1]
        helper.make_node("Squeeze", ["tok_out"], ["tok_s"]),
        helper.make_node("Equal", ["tok_s", "eos"], ["is_eos"]),
        helper.make_node("Not", ["is_eos"], ["cond_out"]),
    ]
    body = helper.make_graph(
        body_nodes, "decode_step",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond_in", BOOL, []),
         helper.make_tensor_value_info("tok_in", I64, [1]), helper.make_tensor_value_info("h_in", F32, [1, 1, HID])],
        [helper.make_tensor_value_info("cond_out", BOOL, []), helper.make_tensor_value_info("tok_out", I64, [1]),
         helper.make_tensor_value_info("h_out", F32, [1, 1, HID]),
         helper.make_tensor_value_info("tok_s", I64, []), helper.make_tensor_value_info("logits", F32, [1, VOCAB])])
    nodes = [
        const("axis0", np.array([0], np.int64)), const("flat", np.array([1, HID], np.int64)),
        const("eos", np.array(EOS, np.int64)), const("go", np.array(True)),
        helper.make_node("Loop", ["max_len", "go", "start", "h0"], ["last_tok", "h_last", "tokens", "all_logits"],
                         body=body),
    ]
    graph = helper.make_graph(
        nodes, "gru_decode",
        [helper.make_tensor_value_info("h0", F32, [1, 1, HID]), helper.make_tensor_value_info("start", I64, [1]),
         helper.make_tensor_value_info("max_len", I64, [])],
        [helper.make_tensor_value_info("tokens", I64, ["T"]), helper.make_tensor_value_info("all_logits", F32, ["T", 1, VOCAB]),
         helper.make_tensor_value_info("h_last", F32, [1, 1, HID])],
        initializer=[numpy_helper.from_array(v, k) for k, v in w.items()])
    return model(graph)


def gru_decode_numpy(h0, start, max_len):
    w = gru_weights()
    sig = lambda v: 1 / (1 + np.exp(-v))
    Wz, Wr, Wh = np.split(w["W"][0], 3)
    Rz, Rr, Rh = np.split(w["R"][0], 3)
    b = np.split(w["B"][0], 6)
    h, tok, tokens = h0[0, 0].astype(np.float64), int(start[0]), []
    for _ in range(int(max_len)):
        x = w["embedding"][tok]
        z = sig(Wz @ x + Rz @ h + b[0] + b[3])
        r = sig(Wr @ x + Rr @ h + b[1] + b[4])
        hh = np.tanh(Wh @ x + b[2] + r * (Rh @ h + b[5]))
        h = (1 - z) * hh + z * h
        tok = int(np.argmax(h @ w["proj"]))
        tokens.append(tok)
        if tok == EOS:
            break
    return np.array(tokens, np.int64)


def gru_inputs(rng, max_len=12):
    return {"h0": rng.normal(0, 1, (1, 1, HID)).astype(np.float32),
            "start": np.array([int(rng.integers(1, VOCAB))], np.int64), "max_len": np.array(max_len, np.int64)}


# ---------------------------------------------------------------------------------------------
def scan_cumsum():
    fwd_body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "x_t"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["running"])],
        "cumsum_step",
        [helper.make_tensor_value_info("acc_in", F32, ["B", "F"]), helper.make_tensor_value_info("x_t", F32, ["B", "F"])],
        [helper.make_tensor_value_info("acc_out", F32, ["B", "F"]), helper.make_tensor_value_info("running", F32, ["B", "F"])])
    rev_body = helper.make_graph(
        [helper.make_node("Add", ["r_in", "col"], ["r_out"]), helper.make_node("Identity", ["r_out"], ["r_running"])],
        "rev_cumsum_step",
        [helper.make_tensor_value_info("r_in", F32, ["T", "F"]), helper.make_tensor_value_info("col", F32, ["T", "F"])],
        [helper.make_tensor_value_info("r_out", F32, ["T", "F"]), helper.make_tensor_value_info("r_running", F32, ["T", "F"])])
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        const("s1", np.array([1], np.int64)), const("s3", np.array([3], np.int64)), const("s0", np.array([0], np.int64)),
        helper.make_node("Slice", ["shape", "s1", "s3"], ["bf"]),
        helper.make_node("ConstantOfShape", ["bf"], ["zeros_bf"], value=numpy_helper.from_array(np.zeros(1, np.float32))),
        helper.make_node("Scan", ["zeros_bf", "x"], ["total", "cumsum"], body=fwd_body, num_scan_inputs=1),
        helper.make_node("Gather", ["shape", "s0"], ["t"], axis=0),
        const("s2", np.array([2], np.int64)),
        helper.make_node("Gather", ["shape", "s2"], ["f"], axis=0),
        helper.make_node("Concat", ["t", "f"], ["tf"], axis=0),
        helper.make_node("ConstantOfShape", ["tf"], ["zeros_tf"], value=numpy_helper.from_array(np.zeros(1, np.float32))),
        helper.make_node("Scan", ["zeros_tf", "x"], ["rev_total", "rev_cumsum"], body=rev_body, num_scan_inputs=1,
                         scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1],
                         scan_output_directions=[1]),
    ]
    graph = helper.make_graph(
        nodes, "scan_cumsum", [helper.make_tensor_value_info("x", F32, ["T", "B", "F"])],
        [helper.make_tensor_value_info("cumsum", F32, ["T", "B", "F"]), helper.make_tensor_value_info("total", F32, ["B", "F"]),
         helper.make_tensor_value_info("rev_cumsum", F32, ["T", "B", "F"]),
         helper.make_tensor_value_info("rev_total", F32, ["T", "F"])])
    return model(graph)


def cumsum_inputs(rng, t=7, b=3, f=5):
    return {"x": rng.normal(0, 1, (t, b, f)).astype(np.float32)}


# ---------------------------------------------------------------------------------------------
MODELS = {"cf_nms_loop": nms_loop, "cf_gru_decode": gru_decode, "cf_scan_cumsum": scan_cumsum}


def self_check(out: Path):
    import onnxruntime as ort
    rng = np.random.default_rng(7)
    run = lambda name, feeds: ort.InferenceSession(str(out / f"{name}.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)
    feeds = nms_inputs(rng)
    keep = run("cf_nms_loop", feeds)[0]
    assert np.array_equal(keep, nms_numpy(feeds["boxes"], feeds["scores"])), "NMS loop disagrees with numpy"
    feeds = gru_inputs(rng)
    tokens = run("cf_gru_decode", feeds)[0]
    assert np.array_equal(tokens, gru_decode_numpy(feeds["h0"], feeds["start"], feeds["max_len"])), "GRU decode disagrees"
    x = cumsum_inputs(rng)["x"]
    cs, total, rcs, rtotal = run("cf_scan_cumsum", {"x": x})
    np.testing.assert_allclose(cs, np.cumsum(x, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(total, x.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rcs, np.flip(np.cumsum(np.flip(x, 1), 1), 1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rtotal, x.sum(1), rtol=1e-5, atol=1e-5)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="build/models")
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, build in MODELS.items():
        path = out / f"{name}.onnx"
        if path.exists() and not args.force and path.stat().st_mtime >= Path(__file__).stat().st_mtime:
            continue
        onnx.save(build(), str(path))
    self_check(out)
    print(f"build_control_flow: {', '.join(MODELS)} in {out}")


if __name__ == "__main__":
    main()
