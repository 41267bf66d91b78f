#!/usr/bin/env python3
"""The SLO batcher against a grid of hand-tuned Triton-style settings (issue #23).

One model, served by `sampan serve` in explicit model-control mode, is loaded in turn with
  - `sampan { latency_slo_ms: SLO }` and no dynamic-batching knobs (the SLO batcher), and
  - every grid setting: dynamic_batching { preferred_batch_size, max_queue_delay_microseconds }
    x instance_group count (the issue's grid: preferred none/32/64/128, delays 0.1/0.5/1/2/4 ms,
    instances 1/2/3; flags narrow it),
and each is driven by `sampan perf` with Poisson arrivals at fractions of the measured capacity
(closed loop at high concurrency against the first grid setting with the largest preferred size),
then, for the SLO batcher and the best grid setting, by a bursty trace (--request-intervals).
A load is met when p99 <= SLO and at most 0.1% of the requests failed (shed ones count).
Writes JSON and a Markdown table: per setting and load, throughput, p99 and errors; the highest
met load of the SLO batcher and of the best grid setting, with the throughput ratio.

Backends:
  --backend sim   the simulated GPU (src/backends/sim): a tiny ONNX model built here, its
                  latency the recorded ResNet-50 FP16 H100 profiles (bench/results/sim_profiles)
                  times --sim-factor (so a 2-core machine can drive it; the SLO is scaled too
                  when --slo-ms is not given: 15 ms x factor);
  --backend cuda  --plan PLAN (e.g. bench/serve_gpu/run.sh's resnet50_u8.plan) with --io TEXT,
                  the config's input/output lines.
Bounded: every perf run has a timeout; the server is killed at the end whatever happened.
"""

import argparse
import json
import math
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROFILES = ROOT / "bench" / "results" / "sim_profiles"


def http(method, url, timeout=120):
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e)


class Server:
    """`sampan serve` over a repository whose versions link to plans (HTTP only, metrics on port + 2,
    shared memory on, explicit model control), with the calls the benches make of it."""

    def __init__(self, args, work, models, env=None):
        """models: name -> (plan path, config.pbtxt text)."""
        repo = work / "repo"
        for name, (plan, text) in models.items():
            (repo / name / "1").mkdir(parents=True)
            os.symlink(pathlib.Path(plan).resolve(), repo / name / "1" / "model.plan")
            (repo / name / "config.pbtxt").write_text(text)
        self.log = open(work / "serve.log", "w")
        self.proc = subprocess.Popen(
            [args.sampan, "serve", "--model-repository", str(repo), "--model-control-mode", "explicit",
             "--http-address", "127.0.0.1", "--http-port", str(args.port), "--grpc-port", "-1",
             "--metrics-address", "127.0.0.1", "--metrics-port", str(args.port + 2), "--enable-shared-memory"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.base = f"http://127.0.0.1:{args.port}"

    def wait_live(self, tries=120):
        for _ in range(tries):
            if http("GET", self.base + "/v2/health/live", 2)[0] == 200:
                return
            time.sleep(0.5)

    def load(self, name):
        st, body = http("POST", f"{self.base}/v2/repository/models/{name}/load", 900)
        if st != 200:
            raise RuntimeError(f"load {name}: {st} {body}")

    def unload(self, name):
        """Unloads `name` and waits until the index no longer shows it READY."""
        http("POST", f"{self.base}/v2/repository/models/{name}/unload", 600)
        for _ in range(300):
            st, body = http("POST", self.base + "/v2/repository/index", 10)
            if st == 200 and all(m.get("name") != name or m.get("state") != "READY" for m in json.loads(body)):
                return
            time.sleep(0.1)

    def kill(self):
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.log.close()


def device_name(backend, sim_label):
    if backend != "cuda":
        return sim_label
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown GPU"


def build_sim_plan(sampan, work, factor, max_batch):
    """A 4-wide Add model whose sim plan waits the recorded ResNet-50 H100 latencies x factor."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    work.mkdir(parents=True, exist_ok=True)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    b = numpy_helper.from_array(np.ones((4,), np.float32), "bias")
    g = helper.make_graph([helper.make_node("Add", ["x", "bias"], ["y"])], "add", [x], [y], initializer=[b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx_path = work / "add.onnx"
    onnx_path.write_bytes(m.SerializeToString())
    args = [sampan, "build", str(onnx_path), "--backend", "sim", "--minShapes", "x:1x4",
            "--optShapes", f"x:{max_batch}x4", "--maxShapes", f"x:{max_batch}x4", "-o", str(work / "model.plan")]
    for p in sorted(PROFILES.glob("resnet50_fp16_b*.json")):
        d = json.loads(p.read_text())
        for key in ("latency_ms", "compute_ms", "h2d_ms", "d2h_ms", "enqueue_ms"):
            if key in d:
                d[key] = {k: v * factor for k, v in d[key].items()}
        d["throughput_qps"] /= factor
        d["throughput_items_per_s"] = d.get("throughput_items_per_s", d["throughput_qps"]) / factor
        d["runs_on"] = f"NVIDIA H100 (recorded ResNet-50 FP16), time x{factor:g}"
        q = work / p.name
        q.write_text(json.dumps(d))
        args += ["--sim-profile", str(q)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        sys.exit(f"sim build failed:\n{r.stdout}{r.stderr}")
    return work / "model.plan", ('input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
                                 'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')


def config(args, io, preferred, delay_us, instances, slo_ms):
    backend = f'backend: "{args.backend}" ' if args.backend == "sim" else ""
    kind = "KIND_GPU"
    text = f"max_batch_size: {args.max_batch}\n{io}instance_group [ {{ count: {instances} kind: {kind} }} ]\n"
    if slo_ms:
        text += f"sampan {{ {backend}latency_slo_ms: {slo_ms:g} }}\n"
    else:
        pref = f"preferred_batch_size: [ {', '.join(str(p) for p in preferred)} ] " if preferred else ""
        text += f"dynamic_batching {{ {pref}max_queue_delay_microseconds: {delay_us} }}\n"
        if backend:
            text += f"sampan {{ {backend}}}\n"
    return text


def latency_histogram(args, name):
    """The server's request-latency histogram of `name` (cumulative counts by upper bound, seconds)."""
    try:
        st, text = http("GET", f"http://127.0.0.1:{args.port + 2}/metrics", 10)
    except OSError:
        return {}
    if st != 200:
        return {}
    h = {}
    for line in text.splitlines():
        if line.startswith("sampan_request_latency_seconds_bucket{") and f'model="{name}"' in line:
            le = line.split('le="', 1)[1].split('"', 1)[0]
            h[float("inf") if le == "+Inf" else float(le)] = float(line.rsplit(" ", 1)[1])
    return h


def server_side(before, after, slos_ms):
    """Server-side latency (receipt to response) over the whole run, from the histogram's delta: its
    p50/p99 (linear within a bucket) and the share of requests over each SLO (exact when the SLO is a
    bucket edge: 5 and 15 ms are)."""
    bounds = sorted(after)
    cum = [after[b] - before.get(b, 0.0) for b in bounds]
    total = cum[-1] if cum else 0.0
    if total <= 0:
        return None

    def quantile(q):
        want = q * total
        lo, prev = 0.0, 0.0
        for b, c in zip(bounds, cum):
            if c >= want:
                if b == float("inf"):
                    return lo * 1e3
                return (lo + (b - lo) * (want - prev) / max(c - prev, 1e-9)) * 1e3
            lo, prev = b, c
        return lo * 1e3

    def over(slo_ms):
        edge = [c for b, c in zip(bounds, cum) if b <= slo_ms / 1e3 + 1e-12]
        return (total - (edge[-1] if edge else 0.0)) / total

    return {"requests": total, "p50_ms": quantile(0.5), "p99_ms": quantile(0.99),
            "over_slo": {f"{s:g}": over(s) for s in slos_ms}}


def perf_command(args, name, out, rate=None, intervals=None, concurrency=None):
    """`sampan perf` for one level: open loop (Poisson at `rate`, or the `intervals` trace) or closed loop."""
    cmd = [args.sampan, "perf", "-m", name, "-u", f"127.0.0.1:{args.port}", "-p", str(args.window_ms), "-r", "3",
           "-s", "100", "--json", str(out), "--max-threads", str(args.max_threads), "--seed", "7"]
    if args.shared_memory:
        cmd += ["--shared-memory", "system"]
    if rate:
        cmd += ["--request-rate-range", f"{rate:.1f}", "--request-distribution", "poisson"]
    elif intervals:
        cmd += ["--request-intervals", str(intervals)]
    else:
        cmd += ["--concurrency-range", str(concurrency)]
    return cmd


def perf_result(out, rate):
    """The figures of one `sampan perf --json` level the benches keep."""
    r = json.loads(out.read_text())["results"][-1]
    n = r["requests"] + r["errors"]
    late = r["latency_us"].get("p99_failed_as_late")  # null once 1% failed
    return {"rate": rate, "throughput": r["throughput_infer_per_s"], "p99_ms": r["latency_us"]["p99"] / 1e3,
            "p50_ms": r["latency_us"]["p50"] / 1e3, "errors": r["errors"], "requests": n,
            "error_share": r["errors"] / n if n else 1.0, "avg_batch": r["server_avg_batch"],
            "p99_all_ms": None if late is None else late / 1e3, "server_us": r.get("server_us")}


def perf(args, name, out, rate=None, intervals=None, concurrency=None):
    cmd = perf_command(args, name, out, rate, intervals, concurrency)
    before = latency_histogram(args, name)
    try:
        subprocess.run(cmd, capture_output=True, text=True, timeout=args.window_ms / 1000 * 6 + 60)
    except subprocess.TimeoutExpired:
        return None
    if not out.exists():
        return None
    return {**perf_result(out, rate),
            "server": server_side(before, latency_histogram(args, name), getattr(args, "slo_list", []))}


def met(r, slo_ms):
    """p99 <= SLO with every failed (shed) request counted as infinitely late: at least 99% of the
    requests sent were answered, successfully, within the SLO."""
    return r is not None and r.get("p99_all_ms") is not None and r["p99_all_ms"] <= slo_ms


def bursty_trace(path, capacity, period_s=2.0, burst_s=0.5, base=0.4, peak=0.9):
    """Poisson-free periodic bursts: `base` x capacity, then `peak` x capacity for burst_s of every period_s."""
    gaps, t = [], 0.0
    while t < period_s:
        rate = capacity * (peak if (t % period_s) >= period_s - burst_s else base)
        gaps.append(1e6 / rate)
        t += 1.0 / rate
    path.write_text("\n".join(f"{g:.1f}" for g in gaps) + "\n")
    return path


def summarize(results, grid, slo):
    """The highest met load of the SLO batcher and of the best grid setting, for one SLO."""
    sname = f"slo_{slo:g}"

    def best_met(name):
        ok = [r for r in results["runs"].get(name, []) if met(r, slo)]
        return max(ok, key=lambda r: r["throughput"]) if ok else None

    s = best_met(sname)
    grid_best = None
    for name, *_ in grid:
        b = best_met(name)
        if b and (grid_best is None or b["throughput"] > grid_best[1]["throughput"]):
            grid_best = (name, b)
    return {"slo_ms": slo, "slo_batcher": s,
            "grid_best": {"model": grid_best[0], **grid_best[1]} if grid_best else None,
            "ratio": (s["throughput"] / grid_best[1]["throughput"]) if s and grid_best else None,
            "loads_any_setting_meets": sorted({r["fraction"] for n in results["runs"]
                                               for r in results["runs"][n] if met(r, slo)}),
            "loads_slo_batcher_meets": sorted({r["fraction"] for r in results["runs"].get(sname, []) if met(r, slo)})}


def write(args, results, grid, slos, fractions, final):
    """JSON and Markdown of what ran so far (rewritten after every setting: a run cut short keeps it)."""
    results["summary"] = [summarize(results, grid, slo) for slo in slos]
    results["complete"] = final
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    cap = results.get("capacity", {})
    md = [f"# SLO batcher vs a grid of hand-tuned settings ({args.backend}"
          + (f", time x{args.sim_factor:g}" if args.backend == "sim" else "") + f", {results.get('device', '')})", "",
          f"Capacity {cap.get('throughput', 0):.1f} inferences/s ({cap.get('model')}, closed loop); Poisson "
          f"arrivals at {args.rates} of it; windows of {args.window_ms} ms x 3; a load is met when the p99 "
          "with failed (shed) requests counted as infinitely late is <= SLO: >= 99% of the requests sent were "
          "answered within the SLO." + ("" if final else " (PARTIAL: the run did not finish)"), "",
          "Server p99 is the server's own receipt-to-response p99 over the whole run (its latency histogram, "
          "linear within a bucket) and its share of requests over the first SLO (exact: the SLOs are bucket edges), "
          "a sign of how much of the client's p99 the client itself adds.", "",
          "| setting | " + " | ".join(f"{f:.0%}: infer/s, p99 ms (failed as late), errors, server p99 ms" for f in fractions)
          + " |",
          "|---|" + "---|" * len(fractions)]

    def cell(r):
        if r is None:
            return "—"
        srv = r.get("server")
        p99 = f"{r['p99_ms']:.2f}"
        if r["errors"]:
            p99 += f" ({'∞' if r.get('p99_all_ms') is None else format(r['p99_all_ms'], '.2f')})"
        return (f"{r['throughput']:.1f}, {p99}, {r['errors']}, "
                + (f"{srv['p99_ms']:.2f} ({100 * srv['over_slo'][f'{slos[0]:g}']:.2f}% > {slos[0]:g} ms)"
                   if srv else "—"))
    for name, runs in results["runs"].items():
        md.append(f"| {name} | " + " | ".join(cell(r) for r in runs) + " |")
    md += ["", "| SLO ms | SLO batcher: highest met infer/s | best grid setting | its infer/s | ratio | "
           "loads met (any / SLO batcher) | bursty trace p99 ms, errors (SLO batcher / grid best) |",
           "|---|---|---|---|---|---|---|"]
    for row in results["summary"]:
        s, g = row["slo_batcher"], row["grid_best"]
        b = results.get("bursty", {}).get(f"{row['slo_ms']:g}", {})
        bt = " / ".join("—" if v is None else f"{v['p99_ms']:.2f}, {v['errors']}" for v in b.values())
        def num(x, spec):
            return "—" if x is None else format(x, spec)
        md.append(f"| {row['slo_ms']:g} | {num(s and s['throughput'], '.1f')} | {g['model'] if g else '—'} | "
                  f"{num(g and g['throughput'], '.1f')} | {num(row['ratio'], '.3f')} | "
                  f"{row['loads_any_setting_meets']} / {row['loads_slo_batcher_meets']} | {bt} |")
    out.with_suffix(".md").write_text("\n".join(md) + "\n")
    import slo_chart  # noqa: E402  (beside this file)
    out.with_suffix(".svg").write_text(slo_chart.chart(results, f"SLO batcher vs hand-tuned settings "
                                                                f"({results.get('device', args.backend)})"))
    if final:
        print("\n".join(md))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sampan", default=str(ROOT / "build" / "sampan"))
    ap.add_argument("--backend", choices=["sim", "cuda"], default="sim")
    ap.add_argument("--plan", help="cuda: the plan to serve")
    ap.add_argument("--io", help="cuda: the config's input/output lines")
    ap.add_argument("--sim-factor", type=float, default=10.0)
    ap.add_argument("--max-batch", type=int, default=128)
    ap.add_argument("--slo-ms", type=float, nargs="+", help="SLOs to test (default 15 [x sim factor])")
    ap.add_argument("--slo-instances", type=int, default=2)
    ap.add_argument("--rates", default="0.5,0.7,0.9")
    ap.add_argument("--preferred", default="none,32,64,128")
    ap.add_argument("--delays-us", default="100,500,1000,2000,4000")
    ap.add_argument("--instances", default="1,2,3")
    ap.add_argument("--window-ms", type=int, default=2000)
    ap.add_argument("--max-threads", type=int, default=512)
    ap.add_argument("--shared-memory", action="store_true", help="inputs in system shared memory")
    ap.add_argument("--port", type=int, default=18400)
    ap.add_argument("--work", default="/tmp/slo_grid")
    ap.add_argument("--out", required=True, help="JSON results; a .md table is written beside it")
    ap.add_argument("--no-trace", action="store_true")
    args = ap.parse_args()

    work = pathlib.Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if args.backend == "sim":
        plan, io = build_sim_plan(args.sampan, work / "sim", args.sim_factor, args.max_batch)
        slos = args.slo_ms or [15 * args.sim_factor]
    else:
        if not args.plan or not args.io:
            sys.exit("--backend cuda needs --plan and --io")
        plan, io = pathlib.Path(args.plan), args.io.replace("\\n", "\n").rstrip("\n") + "\n"
        slos = args.slo_ms or [15.0]

    args.slo_list = slos
    grid = []
    for p in args.preferred.split(","):
        pref = [] if p == "none" else [int(p)]
        if pref and pref[0] > args.max_batch:
            continue
        for d in args.delays_us.split(","):
            for i in args.instances.split(","):
                grid.append((f"g_p{p}_d{d}_i{i}", pref, int(d), int(i)))
    models = {name: config(args, io, pref, d, i, 0) for name, pref, d, i in grid}
    for slo in slos:
        models[f"slo_{slo:g}"] = config(args, io, [], 0, args.slo_instances, slo)
    env = dict(os.environ)
    if args.backend == "sim":
        env.setdefault("SAMPAN_SIM_DEVICES", "1")
    srv = Server(args, work, {name: (plan, text) for name, text in models.items()}, env)
    results = {"backend": args.backend, "sim_factor": args.sim_factor if args.backend == "sim" else None,
               "max_batch": args.max_batch, "window_ms": args.window_ms, "runs": {}, "summary": [],
               "device": device_name(args.backend, "simulated GPU: recorded H100 ResNet-50 FP16 latencies")}
    load, unload = srv.load, srv.unload
    try:
        srv.wait_live()

        # Capacity: the largest preferred size, the longest delay, the most instances, closed loop.
        cap_name = max(grid, key=lambda g: (g[1][0] if g[1] else 0, g[2], g[3]))[0]
        load(cap_name)
        cap = perf(args, cap_name, work / "capacity.json", concurrency=min(4 * args.max_batch, args.max_threads))
        unload(cap_name)
        capacity = cap["throughput"]
        results["capacity"] = {"model": cap_name, **cap}
        print(f"capacity {capacity:.1f} inferences/s ({cap_name}, closed loop)", flush=True)
        fractions = [float(f) for f in args.rates.split(",")]

        # The SLO batcher first: a run cut short by its time box still has it.
        for name in sorted(models, key=lambda n: not n.startswith("slo_")):
            load(name)
            runs = []
            for f in fractions:
                r = perf(args, name, work / f"{name}_{f}.json", rate=f * capacity)
                if r:
                    r["fraction"] = f
                runs.append(r)
                print(f"{name} {f:.0%}: {r}", flush=True)
            if name.startswith("slo_"):
                st, text = http("GET", f"http://127.0.0.1:{args.port + 2}/metrics", 10)
                results.setdefault("slo_metrics", {})[name] = [
                    line for line in text.splitlines()
                    if line.startswith(("sampan_slo_", "sampan_batch_bucket")) and f'model="{name}"' in line]
            results["runs"][name] = runs
            unload(name)
            write(args, results, grid, slos, fractions, final=False)

        write(args, results, grid, slos, fractions, final=False)
        for slo in slos:
            row = summarize(results, grid, slo)
            if not args.no_trace and row["grid_best"]:
                trace = bursty_trace(work / "trace.txt", capacity)
                for name in (f"slo_{slo:g}", row["grid_best"]["model"]):
                    load(name)
                    results.setdefault("bursty", {}).setdefault(f"{slo:g}", {})[name] = perf(
                        args, name, work / f"{name}_trace.json", intervals=trace)
                    unload(name)
                write(args, results, grid, slos, fractions, final=False)
    finally:
        srv.kill()

    write(args, results, grid, slos, fractions, final=True)

if __name__ == "__main__":
    main()
