#!/usr/bin/env python3
"""Three models on one GPU (issue #23, docs/gpu-sharing.md): ResNet-50, a YOLOv5s detector and
the OCR recognizer served by one `sampan serve`, each driven by its own `sampan perf` with
Poisson arrivals over HTTP (inputs in system shared memory with --shared-memory).

Phases (explicit model control; every perf run time-boxed; results rewritten after each phase):
  1. solo: each model alone: its capacity (closed loop), then Poisson loads at --rates of it;
     its solo figure is the highest throughput within its SLO (p99, failed requests counted late);
  2. together: the three loaded, each at SCALE x its solo figure, all at once, for the scales of
     --scales from the largest down until every model meets its SLO; the issue's bar is
     sum(together) >= 90% of sum(solo);
  3. priority: ResNet-50 at --priority-resnet-share of its solo figure while YOLO is overloaded
     (--overload x its capacity), once with ResNet-50 at PRIORITY_DEFAULT and once at
     PRIORITY_MAX (a second copy of the model, `resnet_hi`); the bar: ResNet-50's p99 within its SLO.

Each model is scheduled by the SLO batcher (`sampan { latency_slo_ms }`), or by dynamic
batching with --delay-us. Instances: --instances (each model).

Backends:
  --backend sim   plumbing check on a CPU machine: three sim plans (src/backends/sim) whose
                  latencies are the recorded ResNet-50 FP16 H100 profiles (bench/results/
                  sim_profiles) times --sim-factor, YOLO's x3 and OCR's x0.5 of them (made up:
                  the sim has no YOLO or OCR profile), SLOs x the factor. One simulated device
                  runs one batch at a time, so sharing is plain serialisation there and priorities
                  do nothing: the figures check the script, not Sampan.
  --backend cuda  --plan resnet=PLAN --plan yolo=PLAN --plan ocr=PLAN (serve_gpu/multi_model_session.sh
                  builds them); the configs' inputs and outputs come from the plans (auto-complete).
"""

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import slo_grid as sg  # noqa: E402  (http, the sim plan recipe)

ROOT = HERE.parents[1]
MODELS = ("resnet", "yolo", "ocr")
SIM_SCALE = {"resnet": 1.0, "yolo": 3.0, "ocr": 0.5}  # made-up latency ratios of the sim plans


def kv_list(text, cast=str):
    out = {}
    for item in text.split(","):
        if item:
            k, v = item.split("=", 1)
            out[k.strip()] = cast(v.strip())
    return out


def met(r, slo_ms):
    """Within the SLO: p99 with failed (shed) requests counted as infinitely late, where `sampan perf`
    reports it (p99_failed_as_late), else p99 of the successes with at most 0.1% failed."""
    if r is None:
        return False
    if "p99_all_ms" in r:
        return r["p99_all_ms"] is not None and r["p99_all_ms"] <= slo_ms
    return r["p99_ms"] <= slo_ms and r["error_share"] <= 0.001


def build_sim_plans(args, work):
    """One sim plan per model: the ResNet-50 H100 profiles x sim factor x the model's made-up ratio."""
    plans = {}
    for name in MODELS:
        plan, _ = sg.build_sim_plan(args.sampan, work / f"sim_{name}", args.sim_factor * SIM_SCALE[name],
                                    args.max_batch[name])
        plans[name] = plan
    return plans


def config(args, name, priority="PRIORITY_DEFAULT"):
    backend = f'backend: "{args.backend}" ' if args.backend == "sim" else ""
    text = (f"max_batch_size: {args.max_batch[name]}\n"
            f"instance_group [ {{ count: {args.instances} kind: KIND_GPU }} ]\n"
            f"optimization {{ priority: {priority} }}\n")
    if args.delay_us:
        text += f"dynamic_batching {{ max_queue_delay_microseconds: {args.delay_us} }}\n"
        if backend:
            text += f"sampan {{ {backend}}}\n"
    else:
        text += f"sampan {{ {backend}latency_slo_ms: {args.slo[name]:g} }}\n"
    return text


def perf_many(args, runs, tag, work):
    """Runs `sampan perf` for every (model, rate or None for closed loop) at once; results by model."""
    procs = {}
    for model, rate, concurrency in runs:
        out = work / f"{tag}_{model}.json"
        out.unlink(missing_ok=True)
        cmd = sg.perf_command(args, model, out, rate, concurrency=concurrency)
        procs[model] = (subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True), out, rate)
    results = {}
    deadline = time.time() + args.window_ms / 1000 * 6 + 60
    for model, (p, out, rate) in procs.items():
        try:
            _, err = p.communicate(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            results[model] = None
            continue
        if not out.exists():
            print(f"  perf {model} failed: {err.strip()[-300:]}", flush=True)
            results[model] = None
            continue
        results[model] = sg.perf_result(out, rate)
    return results


def write(args, results, final):
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results["complete"] = final
    out.write_text(json.dumps(results, indent=1))

    def cell(r, slo):
        if r is None:
            return "—"
        ok = "met" if met(r, slo) else "MISSED"
        return f"{r['throughput']:.1f}/s, p99 {r['p99_ms']:.2f} ms, {r['errors']} err ({ok})"

    md = [f"# Three models on one GPU ({args.backend}"
          + (f", time x{args.sim_factor:g}, made-up YOLO/OCR ratios" if args.backend == "sim" else "")
          + f", {results.get('device', '')})", "",
          f"SLOs (ms): {', '.join(f'{m} {args.slo[m]:g}' for m in MODELS)}; {args.instances} instance(s) each; "
          + ("SLO batcher" if not args.delay_us else f"dynamic batching, delay {args.delay_us} us")
          + f"; windows of {args.window_ms} ms x 3; met = p99 <= SLO, failed requests counted as late "
          "(or, from an older sampan perf, p99 <= SLO and <= 0.1% errors)."
          + ("" if final else " (PARTIAL: the run did not finish)"), "",
          "## Solo", "", "| model | capacity (closed loop) | " + " | ".join(f"{f:.0%}" for f in args.rates)
          + " | solo figure |", "|---|---|" + "---|" * len(args.rates) + "---|"]
    for m in MODELS:
        s = results["solo"].get(m)
        if not s:
            continue
        cap = s.get("capacity")
        best = s.get("best")
        md.append(f"| {m} | {cap['throughput']:.1f}/s | " if cap else f"| {m} | — | ")
        md[-1] += " | ".join(cell(r, args.slo[m]) for r in s.get("runs", [])) + " | "
        md[-1] += f"{best['throughput']:.1f}/s |" if best else "— |"
    md += ["", "## Together", "", "| scale | " + " | ".join(MODELS) + " | all met | sum / solo sum |",
           "|---|" + "---|" * len(MODELS) + "---|---|"]
    for t in results["together"]:
        md.append(f"| {t['scale']:g} | " + " | ".join(cell(t["runs"].get(m), args.slo[m]) for m in MODELS)
                  + f" | {'yes' if t['all_met'] else 'no'} | "
                  + (f"{t['ratio']:.3f}" if t.get("ratio") is not None else "—") + " |")
    if results.get("together_best"):
        b = results["together_best"]
        md += ["", f"Highest scale with every SLO met: {b['scale']:g}: together {b['sum']:.1f}/s against solo "
               f"{b['solo_sum']:.1f}/s = {b['ratio']:.3f} (the bar: >= 0.9)."]
    if results.get("priority"):
        md += ["", "## ResNet-50 under a YOLO overload", "", "| ResNet-50 priority | resnet | yolo (overload) | "
               "resnet within SLO |", "|---|---|---|---|"]
        for p in results["priority"]:
            r = p["runs"].get(p["resnet_model"])
            y = p["runs"].get("yolo")
            md.append(f"| {p['priority']} | {cell(r, args.slo['resnet'])} | {cell(y, args.slo['yolo'])} "
                      f"| {'yes' if met(r, args.slo['resnet']) else 'no'} |")
    out.with_suffix(".md").write_text("\n".join(md) + "\n")
    if final:
        print("\n".join(md), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sampan", default=str(ROOT / "build" / "sampan"))
    ap.add_argument("--backend", choices=["sim", "cuda"], default="sim")
    ap.add_argument("--plan", action="append", default=[], help="cuda: MODEL=PLAN for resnet, yolo and ocr")
    ap.add_argument("--sim-factor", type=float, default=10.0)
    ap.add_argument("--slo-ms", default="resnet=15,yolo=30,ocr=15", help="MODEL=MS (sim: x the sim factor)")
    ap.add_argument("--max-batch", default="resnet=128,yolo=32,ocr=64")
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--delay-us", type=int, default=0,
                    help="dynamic batching with this delay instead of the SLO batcher")
    ap.add_argument("--rates", default="0.5,0.7,0.9", help="solo Poisson loads, fractions of capacity")
    ap.add_argument("--scales", default="1,0.9,0.8,0.6,0.4", help="together: fractions of each solo figure")
    ap.add_argument("--priority-resnet-share", type=float, default=0.5)
    ap.add_argument("--overload", type=float, default=1.5, help="YOLO's Poisson rate, x its solo capacity")
    ap.add_argument("--window-ms", type=int, default=2000)
    ap.add_argument("--max-threads", type=int, default=512)
    ap.add_argument("--shared-memory", action="store_true")
    ap.add_argument("--port", type=int, default=18500)
    ap.add_argument("--work", default="/tmp/multi_model")
    ap.add_argument("--out", required=True, help="JSON results; a .md table is written beside it")
    ap.add_argument("--skip-priority", action="store_true")
    args = ap.parse_args()
    args.rates = [float(f) for f in args.rates.split(",")]
    scales = sorted((float(s) for s in args.scales.split(",")), reverse=True)
    args.max_batch = kv_list(args.max_batch, int)
    args.slo = kv_list(args.slo_ms, float)
    if args.backend == "sim":
        args.slo = {m: v * args.sim_factor for m, v in args.slo.items()}

    work = pathlib.Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if args.backend == "sim":
        plans = build_sim_plans(args, work)
    else:
        plans = {k: pathlib.Path(v) for k, v in kv_list(",".join(args.plan)).items()}
        missing = [m for m in MODELS if m not in plans or not plans[m].exists()]
        if missing:
            sys.exit(f"--backend cuda needs --plan MODEL=PLAN for {', '.join(missing)}")

    models = {m: (plans[m], config(args, m)) for m in MODELS}
    models["resnet_hi"] = (plans["resnet"], config(args, "resnet", "PRIORITY_MAX"))
    env = dict(os.environ)
    if args.backend == "sim":
        env.setdefault("SAMPAN_SIM_DEVICES", "1")
    srv = sg.Server(args, work, models, env)
    base = srv.base
    results = {"backend": args.backend, "slo_ms": args.slo, "instances": args.instances,
               "batching": "slo" if not args.delay_us else f"delay {args.delay_us} us", "solo": {},
               "together": [], "priority": [], "device": sg.device_name(args.backend, "simulated GPU")}
    load, unload = srv.load, srv.unload

    def memory(name):
        st, body = sg.http("GET", f"{base}/v2/models/{name}/stats", 10)
        if st != 200:
            return None
        return json.loads(body)["model_stats"][0].get("memory_usage")

    try:
        srv.wait_live(240)

        # 1. Solo.
        for m in MODELS:
            load(m)
            s = results["solo"][m] = {"memory_usage": memory(m)}
            cap = perf_many(args, [(m, None, min(4 * args.max_batch[m], args.max_threads))], f"cap_{m}", work)[m]
            s["capacity"] = cap
            s["runs"] = []
            if cap:
                for f in args.rates:
                    r = perf_many(args, [(m, f * cap["throughput"], None)], f"solo_{m}_{f}", work)[m]
                    if r:
                        r["fraction"] = f
                    s["runs"].append(r)
                    print(f"solo {m} {f:.0%}: {r}", flush=True)
            ok = [r for r in s["runs"] if met(r, args.slo[m])]
            s["best"] = max(ok, key=lambda r: r["throughput"]) if ok else None
            unload(m)
            write(args, results, final=False)

        # 2. Together.
        solo = {m: (results["solo"][m]["best"] or {}).get("throughput") for m in MODELS}
        if all(solo.values()):
            for m in MODELS:
                load(m)
            results["memory_usage_together"] = {m: memory(m) for m in MODELS}
            solo_sum = sum(solo.values())
            for scale in scales:
                runs = perf_many(args, [(m, scale * solo[m], None) for m in MODELS], f"together_{scale:g}", work)
                all_met = all(met(runs[m], args.slo[m]) for m in MODELS)
                total = sum(r["throughput"] for r in runs.values() if r)
                t = {"scale": scale, "runs": runs, "all_met": all_met, "sum": total, "solo_sum": solo_sum,
                     "ratio": total / solo_sum}
                results["together"].append(t)
                print(f"together x{scale:g}: all met {all_met}, {total:.1f}/s of solo {solo_sum:.1f}/s", flush=True)
                write(args, results, final=False)
                if all_met:
                    results["together_best"] = t
                    break
            for m in MODELS:
                unload(m)
        else:
            print(f"together skipped: a model met its SLO at no solo load ({solo})", flush=True)

        # 3. ResNet-50 (default, then PRIORITY_MAX) under a YOLO overload.
        cap_yolo = (results["solo"]["yolo"].get("capacity") or {}).get("throughput")
        if not args.skip_priority and solo["resnet"] and cap_yolo:
            load("yolo")
            for resnet_model, priority in (("resnet", "PRIORITY_DEFAULT"), ("resnet_hi", "PRIORITY_MAX")):
                load(resnet_model)
                runs = perf_many(args, [(resnet_model, args.priority_resnet_share * solo["resnet"], None),
                                        ("yolo", args.overload * cap_yolo, None)], f"prio_{resnet_model}", work)
                results["priority"].append({"priority": priority, "resnet_model": resnet_model, "runs": runs})
                print(f"priority {priority}: {runs}", flush=True)
                unload(resnet_model)
                write(args, results, final=False)
            unload("yolo")
    finally:
        srv.kill()
    write(args, results, final=True)


if __name__ == "__main__":
    main()
