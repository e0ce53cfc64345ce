#!/usr/bin/env python3
"""Tables from tools/llama_compare/bench_pairs.sh's output folder.

Usage: python3 tools/llama_compare/summarize.py OUT [THREADS...] [--min-idle N]

--min-idle N keeps only the runs bench_pairs.sh started on CPUs at least N%
idle with no other benchmark running (a pair counts when both runs do).

For each cell and thread count: every run's figure in round order, the
median, and the ratio of each round's loom run to the same round's llama.cpp
run (then the median of those ratios), as markdown table rows; with the
range of 1-minute load averages seen before the runs (and of the CPUs' idle
share bench_pairs.sh measured just before them).
"""

import glob
import json
import os
import re
import statistics
import sys


def load_average(text):
    m = re.search(r"load average: ([0-9.]+)", text)
    return float(m.group(1)) if m else None


def idle_before(text):
    """bench_pairs.sh's check just before the run: % idle over 3 s."""
    m = re.search(r"^# waited \d+s: idle (\d+)%", text, re.M)
    return int(m.group(1)) if m else None


def loom_figure(text, what, level=None):
    if what == "prefill":
        m = re.search(r"^prefill: \d+ tokens in [0-9.]+ s = ([0-9.]+) tokens/s", text, re.M)
    elif what == "decode":
        m = re.search(r"^decode: +\d+ tokens in [0-9.]+ s = ([0-9.]+) tokens/s", text, re.M)
    else:
        m = re.search(r"^concurrency +%d: .* = +([0-9.]+) tokens/s" % level, text, re.M)
    return float(m.group(1)) if m else None


def llama_bench_figure(text):
    start = text.find("[")
    try:
        rows = json.loads(text[start:text.rfind("]") + 1])
        return float(rows[0]["avg_ts"])
    except (ValueError, IndexError, KeyError):
        return None


def batched_figure(text, level):
    """Output tokens over the whole run (prompt included): B x (TG + 1) / T,
    the + 1 being the token the prefill's logits give (loom counts it)."""
    for line in text.splitlines():
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cols) == 10 and cols[2] == str(level) and cols[0].isdigit():
            tg, b, t = int(cols[1]), int(cols[2]), float(cols[8])
            return b * (tg + 1) / t
    return None


MIN_IDLE = None


def runs(folder, engine, parse):
    out = []
    for path in sorted(glob.glob(os.path.join(folder, engine + ".*.txt")),
                       key=lambda p: int(p.rsplit(".", 2)[1])):
        with open(path) as f:
            text = f.read()
        idle = idle_before(text)
        if MIN_IDLE is not None and (idle is None or idle < MIN_IDLE
                                     or not re.search(r"^# waited .*, 0 other benchmark", text, re.M)):
            continue
        out.append((int(path.rsplit(".", 2)[1]), parse(text), load_average(text), idle))
    return out


def fmt(x):
    return "-" if x is None else (f"{x:.1f}" if x >= 10 else f"{x:.2f}")


def row(threads, label, mine, theirs, mine_label, theirs_label):
    a = {r: v for r, v, _, _ in mine if v is not None}
    b = {r: v for r, v, _, _ in theirs if v is not None}
    ratios = [a[r] / b[r] for r in sorted(a) if r in b]
    med = lambda d: statistics.median(d.values()) if d else None
    loads = [la for _, _, la, _ in mine + theirs if la is not None]
    load = f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-"
    idles = [i for _, _, _, i in mine + theirs if i is not None]
    if idles:
        load += f"; idle {min(idles)}-{max(idles)}%"
    rstr = ", ".join(f"{x:.2f}" for x in ratios)
    ratio_med = f"**{statistics.median(ratios):.2f}x**" if ratios else "-"
    return (f"| {threads} | {label} | {mine_label} **{fmt(med(a))}** ({', '.join(fmt(a[r]) for r in sorted(a))}) "
            f"| {theirs_label} **{fmt(med(b))}** ({', '.join(fmt(b[r]) for r in sorted(b))}) "
            f"| {ratio_med} ({rstr}) | {load} |")


def main():
    global MIN_IDLE
    args = sys.argv[1:]
    if "--min-idle" in args:
        i = args.index("--min-idle")
        MIN_IDLE = int(args[i + 1])
        del args[i:i + 2]
    out = args[0]
    threads = args[1:] or sorted(d[1:] for d in os.listdir(out) if d.startswith("t"))
    print("| threads | measurement (tokens/s) | loom | llama.cpp | loom / llama.cpp, median (per pair) | load (idle before) |")
    print("|---|---|---|---|---|---|")
    for t in threads:
        base = os.path.join(out, "t" + t)
        for cell in ("pp512", "pp2048"):
            d = os.path.join(base, cell)
            if not os.path.isdir(d):
                continue
            ll = runs(d, "llama-bf16", llama_bench_figure)
            for eng, name in (("loom-bf16", "bf16 compute"), ("loom-f32", "f32 compute")):
                print(row(t, f"prefill {cell}", runs(d, eng, lambda x: loom_figure(x, "prefill")), ll, name, "bf16"))
        d = os.path.join(base, "tg")
        if os.path.isdir(d):
            dec = lambda x: loom_figure(x, "decode")
            ll = runs(d, "llama-bf16", llama_bench_figure)
            print(row(t, "decode, batch 1", runs(d, "loom-f32", dec), ll, "bf16 weights, f32 compute", "bf16"))
            print(row(t, "decode, batch 1", runs(d, "loom-bf16", dec), ll, "bf16 weights, bf16 compute", "bf16"))
            print(row(t, "decode, batch 1, 8-bit", runs(d, "loom-int8", dec),
                      runs(d, "llama-q8_0", llama_bench_figure), "int8", "Q8_0"))
        d = os.path.join(base, "batched")
        if os.path.isdir(d):
            for c in (4, 16):
                ll = runs(d, "llama-bf16", lambda x, c=c: batched_figure(x, c))
                for eng, name in (("loom-bf16", "bf16 compute"), ("loom-f32", "f32 compute")):
                    mine = runs(d, f"{eng}-c{c}", lambda x, c=c: loom_figure(x, "conc", c))
                    print(row(t, f"{c} sequences, 32+32, output tokens/s", mine, ll, name, "bf16"))


if __name__ == "__main__":
    main()
