#!/usr/bin/env python3
"""Markdown table of a bench_cpu_peers.py JSON: the rows, what each runtime ran, the machine.

Usage: .venv/bin/python bench/cpu_peers/to_markdown.py RESULT.json [> RESULT.md]
"""
import json
import sys


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    d = json.load(open(sys.argv[1]))
    m = d["meta"]
    print(f"CPU: {m.get('cpu')}; ISA flags: {' '.join(m.get('cpu_isa_flags', []))}")
    print(f"Sampan: SAMPAN_CPU_ISA={m.get('sampan_cpu_isa', 'native')}, precision {m.get('sampan_precision', 'fp32')}; "
          f"ONNX Runtime {m.get('onnxruntime')}, OpenVINO {m.get('openvino')} (FP32 precision hint); "
          f"{m.get('threads')} threads, {m.get('rounds')} alternating rounds x {m.get('iters')} iterations; "
          f"load average at the end {', '.join(f'{x:.2f}' for x in m.get('load_average', []))}")
    runs_on = {r["sampan"].get("runs_on") for r in d["results"] if r["sampan"].get("runs_on")}
    if runs_on:
        print(f"Sampan ran: {'; '.join(sorted(runs_on))}")
    print()
    print("| model | batch | Sampan ms | ORT ms | OpenVINO ms | Sampan/ORT | Sampan/OpenVINO | OpenVINO's main primitives |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    wins_ort = wins_ov = 0
    for r in d["results"]:
        g = lambda n: r[n]["median_ms"] if n in r else float("nan")
        so, sv = r.get("sampan_over_onnxruntime_latency", float("nan")), r.get("sampan_over_openvino_latency", float("nan"))
        wins_ort += so <= 1.0
        wins_ov += sv <= 1.0
        prims = r.get("openvino", {}).get("runs_on", {})
        top = ", ".join(f"{k} {v}" for k, v in list(prims.items())[:3] if not k.startswith("unknown"))
        print(f"| {r['model']} | {r['batch']} | {g('sampan'):.2f} | {g('onnxruntime'):.2f} | {g('openvino'):.2f} | "
              f"{so:.2f} | {sv:.2f} | {top} |")
    n = len(d["results"])
    print()
    print(f"Sampan <= ONNX Runtime on {wins_ort} of {n} rows; <= OpenVINO on {wins_ov} of {n}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
