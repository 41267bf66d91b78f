#!/usr/bin/env python3
"""An SVG chart of a slo_grid.py result: p99 latency (failed requests counted as infinitely late,
drawn at the top edge) against the offered load, one line per setting, the SLO batchers bold, each
SLO as a dashed line. Standard library only (the GPU machine and CI have no plotting package).

Usage: python3 bench/serve_gpu/slo_chart.py RESULT.json [OUT.svg] (default: RESULT.svg)
"""

import json
import pathlib
import sys
from xml.sax.saxutils import escape

W, H, L, R, T, B = 760, 440, 70, 230, 40, 50  # size and margins (px)
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
          "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39"]


def p99_all(run):
    """The run's p99 with failures as infinitely late (None: infinite); older results lack it."""
    if run is None:
        return None
    if "p99_all_ms" in run:
        return run["p99_all_ms"]
    return run["p99_ms"] if run.get("error_share", 1.0) <= 0.001 else None


def chart(result, title):
    runs = result["runs"]
    loads = sorted({r["fraction"] for rs in runs.values() for r in rs if r})
    slos = [row["slo_ms"] for row in result.get("summary", [])]
    finite = [v for rs in runs.values() for r in rs if (v := p99_all(r)) is not None]
    top = max(max(finite, default=1.0), max(slos, default=1.0)) * 1.15
    top = min(top, 4 * max(slos, default=top))  # a collapsed setting (seconds) would flatten the rest
    x0, x1 = min(loads), max(loads)

    def px(load):
        return L + (W - L - R) * ((load - x0) / (x1 - x0) if x1 > x0 else 0.5)

    def py(ms):
        return T + (H - T - B) * (1 - min(ms, top) / top)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
           f'font-size="11"><rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="22" font-size="14">{escape(title)}</text>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
           f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">offered load (fraction of the '
           f'measured capacity, Poisson)</text>',
           f'<text x="16" y="{(T + H - B) / 2}" transform="rotate(-90 16 {(T + H - B) / 2})" text-anchor="middle">'
           f'p99 ms (failed = infinitely late; clipped at the top)</text>']
    for load in loads:
        out.append(f'<text x="{px(load):.1f}" y="{H - B + 16}" text-anchor="middle">{load:.0%}</text>')
    for i in range(6):
        ms = top * i / 5
        out.append(f'<text x="{L - 6}" y="{py(ms) + 4:.1f}" text-anchor="end">{ms:.0f}</text>')
        out.append(f'<line x1="{L}" y1="{py(ms):.1f}" x2="{W - R}" y2="{py(ms):.1f}" stroke="#eee"/>')
    for slo in slos:
        out.append(f'<line x1="{L}" y1="{py(slo):.1f}" x2="{W - R}" y2="{py(slo):.1f}" stroke="black" '
                   f'stroke-dasharray="6,4"/><text x="{W - R + 4}" y="{py(slo) + 4:.1f}">SLO {slo:g} ms</text>')
    legend_y = T + 20
    for k, (name, rs) in enumerate(runs.items()):
        color = COLORS[k % len(COLORS)]
        bold = name.startswith("slo_")
        pts = [(px(r["fraction"]), py(top if p99_all(r) is None else p99_all(r))) for r in rs if r]
        if not pts:
            continue
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="{3 if bold else 1.2}"/>')
        out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{3.5 if bold else 2.2}" fill="{color}"/>' for x, y in pts]
        label = f"SLO batcher ({name[4:]} ms)" if bold else name
        out.append(f'<line x1="{W - R + 60}" y1="{legend_y}" x2="{W - R + 80}" y2="{legend_y}" stroke="{color}" '
                   f'stroke-width="{3 if bold else 1.2}"/><text x="{W - R + 84}" y="{legend_y + 4}">'
                   f'{escape(label)}</text>')
        legend_y += 15
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    src = pathlib.Path(sys.argv[1])
    result = json.loads(src.read_text())
    dst = pathlib.Path(sys.argv[2]) if len(sys.argv) == 3 else src.with_suffix(".svg")
    dst.write_text(chart(result, f"SLO batcher vs hand-tuned settings ({result.get('device', result['backend'])})"))
    print(dst)


if __name__ == "__main__":
    main()
