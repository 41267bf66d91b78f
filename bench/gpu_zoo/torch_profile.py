#!/usr/bin/env python3
"""PyTorch's own kernels for a zoo model, for comparing step by step with SAMPAN_CUDA_PROFILE.

Loads the exported model (export_zoo.py's .pt weights), runs it in FP16 on the GPU as run_zoo.py
times it (channels-last for CNNs), and prints torch.profiler's CUDA kernel table: which kernel
PyTorch runs for attention, LayerNorm, the convolutions, and how long each takes.
Usage: python3 bench/gpu_zoo/torch_profile.py --models-dir /tmp/zoo/models --model bert_base_b128
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_zoo as ez  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models-dir", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--rows", type=int, default=30)
    a = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    entry = ez.BY_NAME[a.model]
    m = ez.load_model(entry, a.models_dir).half().cuda().eval()
    if entry.cnn:
        m = m.to(memory_format=torch.channels_last)
    ins = []
    for n, _, _ in entry.inputs:
        t = torch.from_numpy(np.load(os.path.join(a.models_dir, f"{entry.name}.{n}.npy"))).cuda()
        if t.is_floating_point():
            t = t.half()
            if entry.cnn and t.dim() == 4:
                t = t.contiguous(memory_format=torch.channels_last)
        ins.append(t)
    with torch.inference_mode():
        for _ in range(5):
            m(*ins)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(a.iters):
                m(*ins)
            torch.cuda.synchronize()
    print(f"== {a.model}: PyTorch {torch.__version__} kernels, {a.iters} forward passes (times are totals)")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=a.rows, max_name_column_width=90))


if __name__ == "__main__":
    main()
