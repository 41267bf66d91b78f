#!/usr/bin/env python3
"""Folds `perf script` output into stacks and draws them as a flame graph (SVG), with no tool
beyond the standard library (Debian packages neither Brendan Gregg's scripts nor inferno).

    perf record -F 999 -g -p PID -- sleep 10
    perf script | bench/frontend/flamegraph.py --title "sampan serve" > out.svg
    perf script | bench/frontend/flamegraph.py --folded > out.folded   (one "a;b;c count" line a stack)

Frames are named as perf names them, with their arguments and templates cut short; a stack's
root is its thread's command name.
"""
import argparse
import collections
import html
import re
import sys


def fold(lines):
    stacks = collections.Counter()
    comm, frames = None, []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if comm is not None and frames:
                stacks[";".join([comm] + frames[::-1])] += 1
            comm, frames = None, []
            continue
        if comm is None:
            comm = line.split()[0] if not line.startswith((" ", "\t")) else "?"
            continue
        parts = line.strip().split(None, 1)
        if len(parts) < 2:
            continue
        name = re.sub(r"\+0x[0-9a-f]+$", "", parts[1].rsplit(" (", 1)[0])
        frames.append(short(name))
    if comm is not None and frames:
        stacks[";".join([comm] + frames[::-1])] += 1
    return stacks


def short(name):
    """Drops argument lists and template arguments (they make frames unreadably long)."""
    out, depth = [], 0
    for ch in name:
        if ch in "<(":
            if depth == 0:
                out.append("<>" if ch == "<" else "()")
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    s = "".join(out).replace("()()", "()")
    return s if len(s) < 160 else s[:157] + "..."


def svg(stacks, title, width=1600, row=16):
    root = {"n": 0, "c": {}}
    for stack, count in stacks.items():
        node = root
        node["n"] += count
        for frame in stack.split(";"):
            node = node["c"].setdefault(frame, {"n": 0, "c": {}})
            node["n"] += count
    total = max(1, root["n"])
    rects = []

    def walk(node, name, x, depth):
        w = node["n"] / total * (width - 20)
        if w < 0.3:
            return
        rects.append((x, depth, w, name, node["n"]))
        cx = x
        for child_name, child in sorted(node["c"].items()):
            walk(child, child_name, cx, depth + 1)
            cx += child["n"] / total * (width - 20)

    walk(root, "all", 10, 0)
    depth_max = max(d for _, d, _, _, _ in rects) + 1
    height = (depth_max + 3) * row
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" '
           f'font-size="11">',
           f'<text x="10" y="14" font-size="13">{html.escape(title)} ({total} samples)</text>']
    for x, depth, w, name, n in rects:
        y = height - (depth + 1) * row
        hue = 20 + (hash(name) % 40)
        label = html.escape(name)
        pct = 100.0 * n / total
        out.append(f'<g><title>{label} ({n} samples, {pct:.2f}%)</title>'
                   f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 1}" fill="hsl({hue},90%,60%)"/>')
        chars = int(w / 6.6)
        if chars >= 3:
            text = name if len(name) <= chars else name[:chars - 2] + ".."
            out.append(f'<text x="{x + 2:.1f}" y="{y + row - 4}">{html.escape(text)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--title", default="flame graph")
    ap.add_argument("--folded", action="store_true", help="print folded stacks instead of an SVG")
    args = ap.parse_args()
    stacks = fold(sys.stdin)
    if not stacks:
        sys.exit("flamegraph: no stacks in the input (perf record -g, then perf script)")
    if args.folded:
        for stack, count in stacks.most_common():
            print(f"{stack} {count}")
    else:
        print(svg(stacks, args.title))


if __name__ == "__main__":
    main()
