#!/usr/bin/env python3
"""Sampan (CUDA backend, FP16, CUDA graphs) vs PyTorch on one GPU, in one run.

Exports ResNet-50 (torchvision, random weights) and BERT-base (transformers
BertModel, default config, random weights, seq 128) to ONNX, then for each batch:
  * sampan build --backend cuda --fp16 (static shapes) -> plan build time
  * sampan bench --useCudaGraph                         -> items/s, latency
  * PyTorch eager FP16 (channels-last for ResNet)       -> items/s, latency
  * PyTorch FP16 under torch.cuda.CUDAGraph replay      -> items/s, latency
and prints a table with the ratio Sampan / PyTorch-graph and the fraction of
the GPU's FP16 matrix rate achieved. Writes everything as JSON to --out.

Sampan is timed twice: whole inferences from host memory (input copy to the
device and output copy back included), and with `--noDataTransfers` (inputs
resident on the device, no output copy), which is how PyTorch is timed here.
The ratio column compares the device-resident figure with PyTorch's CUDA graph.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch

RESNET_GFLOP = 8.18  # per image, 2 * 4.09 GMAC
BERT_GFLOP = 22.3    # per 128-token sequence: 2 * 85M encoder weights * 128 + attention


def export_resnet(path):
    import torchvision
    m = torchvision.models.resnet50(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    torch.onnx.export(m, x, path, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}}, opset_version=17, dynamo=False)
    return m


def export_bert(path):
    from transformers import BertConfig, BertModel
    bert = BertModel(BertConfig()).eval()

    class Encoder(torch.nn.Module):  # keyword call: BertModel.forward's positional order varies by version
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            o = self.bert(input_ids=input_ids, attention_mask=attention_mask)
            return o.last_hidden_state, o.pooler_output

    m = Encoder().eval()
    ids = torch.randint(0, 30522, (1, 128))
    mask = torch.ones(1, 128, dtype=torch.int64)
    torch.onnx.export(m, (ids, mask), path, input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state", "pooler_output"],
                      dynamic_axes={"input_ids": {0: "N"}, "attention_mask": {0: "N"}},
                      opset_version=17, dynamo=False)
    return m


def time_torch(fn, iters=50, warmup=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return float(np.median(times))


def torch_peers(model, inputs, channels_last):
    m = model.half().cuda()
    if channels_last:
        m = m.to(memory_format=torch.channels_last)
    ins = [t.cuda() for t in inputs]
    if channels_last:
        ins = [ins[0].half().contiguous(memory_format=torch.channels_last)]
    with torch.inference_mode():
        eager = time_torch(lambda: m(*ins))
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                m(*ins)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            m(*ins)
        graph = time_torch(g.replay, iters=100)
    return eager, graph


def sampan_build(sampan, onnx, shapes, plan, log):
    cmd = [sampan, "build", onnx, "--backend", "cuda", "--fp16", "--saveEngine", plan,
           "--minShapes", shapes, "--optShapes", shapes, "--maxShapes", shapes, "--verbose"]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.time() - t0
    log.write(" ".join(cmd) + "\n" + r.stdout + r.stderr + "\n")
    if r.returncode != 0:
        raise RuntimeError(f"build failed: {r.stderr[-2000:]}")
    kernels = next((l.split(":", 1)[1].strip() for l in r.stdout.splitlines() if l.startswith("kernels:")), "")
    return dt, kernels


def sampan_bench(sampan, plan, out_json, log, duration, transfers=True):
    cmd = [sampan, "bench", "--loadEngine", plan, "--useCudaGraph", "--duration", str(duration), "--json", out_json]
    if not transfers:
        cmd.append("--noDataTransfers")
    r = subprocess.run(cmd, capture_output=True, text=True)
    log.write(" ".join(cmd) + "\n" + r.stdout + r.stderr + "\n")
    if r.returncode != 0:
        raise RuntimeError(f"bench failed: {r.stderr[-2000:]}")
    with open(out_json) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sampan", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--batches", default="1,8,64,256")
    ap.add_argument("--bert-batches", default="1,8,32,128")
    ap.add_argument("--models", default="resnet50,bert")
    ap.add_argument("--peak-tflops", type=float, default=760.0)
    ap.add_argument("--duration", type=float, default=2.0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "gpu_peers.log"), "w")
    rows = []
    for model in a.models.split(","):
        onnx = os.path.join(a.out, f"{model}.onnx")
        if model == "resnet50":
            tm = export_resnet(onnx)
            batches = [int(b) for b in a.batches.split(",")]
        else:
            tm = export_bert(onnx)
            batches = [int(b) for b in a.bert_batches.split(",")]
        for b in batches:
            if model == "resnet50":
                shapes = f"input:{b}x3x224x224"
                inputs = [torch.randn(b, 3, 224, 224)]
                gflop = RESNET_GFLOP
            else:
                shapes = f"input_ids:{b}x128,attention_mask:{b}x128"
                inputs = [torch.randint(0, 30522, (b, 128)), torch.ones(b, 128, dtype=torch.int64)]
                gflop = BERT_GFLOP
            plan = os.path.join(a.out, f"{model}_b{b}.plan")
            row = {"model": model, "batch": b}
            try:
                row["build_s"], row["kernels"] = sampan_build(a.sampan, onnx, shapes, plan, log)
                j = sampan_bench(a.sampan, plan, os.path.join(a.out, f"{model}_b{b}.json"), log, a.duration)
                row["sampan_items_s"] = j["throughput_items_per_s"]
                row["sampan_lat_ms"] = j["latency_ms"]["median"]
                row["sampan_compute_ms"] = j["compute_ms"]["median"]
                d = sampan_bench(a.sampan, plan, os.path.join(a.out, f"{model}_b{b}_dev.json"), log, a.duration,
                                 transfers=False)
                row["sampan_dev_items_s"] = d["throughput_items_per_s"]
                row["sampan_dev_lat_ms"] = d["latency_ms"]["median"]
                row["sampan_dev_compute_ms"] = d["compute_ms"]["median"]
            except Exception as e:  # noqa: BLE001 - report and go on to the peers
                row["sampan_error"] = str(e)[-500:]
            try:
                eager, graph = torch_peers(tm, inputs, channels_last=(model == "resnet50"))
                row["torch_eager_ms"], row["torch_graph_ms"] = eager, graph
                row["torch_eager_items_s"] = b / eager * 1e3
                row["torch_graph_items_s"] = b / graph * 1e3
            except Exception as e:  # noqa: BLE001
                row["torch_error"] = str(e)[-500:]
            if "sampan_dev_items_s" in row and "torch_graph_items_s" in row:
                row["ratio_vs_graph"] = row["sampan_dev_items_s"] / row["torch_graph_items_s"]
                row["ratio_vs_graph_with_copies"] = row["sampan_items_s"] / row["torch_graph_items_s"]
                row["latency_ratio_vs_graph"] = row["sampan_dev_lat_ms"] / row["torch_graph_ms"]
                # items/s * GFLOP/item = GFLOP/s; / 1e3 = TFLOP/s
                row["sampan_tflops_frac"] = row["sampan_dev_items_s"] * gflop / 1e3 / a.peak_tflops
                # batch * GFLOP / ms = TFLOP/s (device compute time alone)
                row["sampan_compute_tflops_frac"] = b * gflop / row["sampan_dev_compute_ms"] / a.peak_tflops
            rows.append(row)
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
    with open(os.path.join(a.out, "gpu_peers.json"), "w") as f:
        json.dump(rows, f, indent=1)
    hdr = (f"{'model':9} {'b':>4} {'build s':>8} {'host/s':>9} {'dev/s':>9} {'dev ms':>8} {'comp ms':>8} "
           f"{'eager/s':>9} {'graph/s':>9} {'graph ms':>8} {'ratio':>6} {'lat x':>6} {'%peak':>6}")
    print(hdr)
    for r in rows:
        def g(k, fmt):
            return format(r[k], fmt) if k in r else "-"
        pk = format(100 * r["sampan_compute_tflops_frac"], "6.1f") if "sampan_compute_tflops_frac" in r else "-"
        print(f"{r['model']:9} {r['batch']:>4} {g('build_s', '8.1f')} {g('sampan_items_s', '9.0f')} "
              f"{g('sampan_dev_items_s', '9.0f')} {g('sampan_dev_lat_ms', '8.3f')} {g('sampan_dev_compute_ms', '8.3f')} "
              f"{g('torch_eager_items_s', '9.0f')} {g('torch_graph_items_s', '9.0f')} {g('torch_graph_ms', '8.3f')} "
              f"{g('ratio_vs_graph', '6.2f')} {g('latency_ratio_vs_graph', '6.2f')} {pk:>6}")
        if "kernels" in r:
            print("   kernels:", r["kernels"])
        if "sampan_error" in r:
            print("   sampan error:", r["sampan_error"][-300:])
    print("host/s: Sampan from host memory (copies included); dev/s, dev ms: --noDataTransfers (inputs on the device,"
          " as PyTorch); comp ms: device time; ratio: dev/s over PyTorch CUDA graph; lat x: dev ms over graph ms;"
          " %peak: device compute over --peak-tflops")


if __name__ == "__main__":
    sys.exit(main())
