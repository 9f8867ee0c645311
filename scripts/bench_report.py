#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Turn kvc_bench's JSON into bench/RESULTS.md (date, GPU, commit, table, targets) and a plot.

    python3 scripts/bench_report.py BENCH_JSON [--commit SHA] [--date YYYY-MM-DD]
        [--results bench/RESULTS.md] [--plot bench/bench.png]

BENCH_JSON is kvc_bench's bench.json or kvc_nvbench's nvbench --json output (recognised by
its "benchmarks" list; from_nvbench() maps its states to the same rows, docs/measuring.md).
The plot (matplotlib, skipped with a note when it is missing) shows % of the copy
bandwidth against tokens, one line per op/layout/ratio.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
from collections import defaultdict

# Issue targets (H200, issue 11's that kvc_bench measures; the peer ratios are in
# scripts/peer_report.py): (description, predicate over rows, check[, "any"]): met when every
# selected row passes, or with "any" when one of them does (alternative ways to run a step).
def _step(shape):
    return (f"Decode step {shape}: <= 3.0 us (best of A+B, fused, with or without PDL)",
            lambda r: r["op"] in ("fused", "fused pdl", "A+B", "A+B pdl") and r["ratio"] == 2
            and r["shape"] == shape and r["layout"] == "fp8_ds_mla",
            lambda r: r["graph_us"] <= 3.0, "any")


TARGETS = [
    ("Op A, ratios 1 and 2, T >= 32768: >= 92% of copy",
     lambda r: r["op"] == "compress" and r["ratio"] in (1, 2) and r["tokens"] >= 32768, lambda r: r["pct_copy"] >= 92),
    ("Op B fp8_ds_mla, T >= 32768: >= 80% of copy",
     lambda r: r["op"] == "insert" and r["layout"] == "fp8_ds_mla" and r["tokens"] >= 32768,
     lambda r: r["pct_copy"] >= 80),
    ("Op A, ratios 4 and 128, T >= 32768: >= 80% of copy",
     lambda r: r["op"] == "compress" and r["ratio"] in (4, 128) and r["tokens"] >= 32768, lambda r: r["pct_copy"] >= 80),
    ("Op A, ratios 4 and 128, decode 64x2: <= 8 us",
     lambda r: r["op"] == "compress" and r["ratio"] in (4, 128) and r["shape"] == "decode 64x2",
     lambda r: r["graph_us"] <= 8),
    _step("decode 64x2"),
    _step("decode 256x2"),
]


# ---------------------------------------------------------------------------------------
# kvc_nvbench's JSON (nvbench --json, file version 1.x): benchmarks[].states[] with
# axis_values [{name, type, value}] and summaries [{tag, name, ..., data: [{name, type,
# value}]}], numbers written as strings. kvc_nvbench's benchmarks and axes (bench/kvc_nvbench.cu):
# compress / insert / fused / step over Ratio, Layout, Shape, PDL, Launch (graph | stream);
# copy over Ratio, Layout, Shape, Op; copy_peak; empty. Each state's summaries include
# kvc/launches (op launches per nvbench launch), kvc/bytes, kvc/tokens and the per-launch
# times kvc/batch/time_per_launch and kvc/cold/time_per_launch (seconds).

def _nv_value(entry):
    """The value of one {name, type, value} entry (nvbench writes numbers as strings)."""
    v = entry.get("value")
    if entry.get("type") == "int64":
        return int(v)
    if entry.get("type") == "float64":
        return float(v)
    return v


def _nv_summaries(state):
    out = {}
    for summ in state.get("summaries") or []:
        for d in summ.get("data") or []:
            if d.get("name") == "value":
                out[summ["tag"]] = _nv_value(d)
    return out


def _nv_per_launch_us(summ, kind):
    """Microseconds per op launch of nvbench's `kind` (batch or cold) measurement."""
    t = summ.get(f"kvc/{kind}/time_per_launch")
    if t is None:
        total = summ.get(f"nv/{kind}/time/gpu/mean")
        if total is None or not summ.get("kvc/launches"):
            return None
        t = total / summ["kvc/launches"]
    return t * 1e6


_NV_OPS = {"compress": "compress", "insert": "insert", "fused": "fused", "step": "A+B"}
_COPY_OF = {"compress": "compress", "insert": "insert", "fused": "fused", "fused pdl": "fused",
            "A+B": "step", "A+B pdl": "step"}


def _nv_order(root, op, layout, shape, ratio):
    """kvc_bench's row order: shape, ratio, then compress, insert / fused per layout, the steps."""
    def axis_values(name):
        for b in root["benchmarks"]:
            for a in b.get("axes") or []:
                if a["name"] == name:
                    return [v["input_string"] for v in a["values"]]
        return []
    shapes, layouts = axis_values("Shape"), axis_values("Layout")
    index = lambda seq, v: seq.index(v) if v in seq else len(seq)
    if op == "compress":
        group = (0, 0, 0)
    elif op in ("insert", "fused"):
        group = (1, index(layouts, layout), op == "fused")
    else:
        group = (2, ["A+B", "A+B pdl", "fused pdl"].index(op) if op in ("A+B", "A+B pdl", "fused pdl") else 3, 0)
    return (index(shapes, shape), ratio, group)


def from_nvbench(root):
    """kvc_nvbench's JSON as kvc_bench's bench.json: the same header fields and rows (op,
    layout, shape, ratio, tokens, bytes, graph_us, stream_us, copy_us, gbps, pct_copy), plus
    cold_us. graph_us / stream_us are nvbench's batch measurement per op launch (back-to-back
    replays, as kvc_bench times them) of Launch=graph / stream; cold_us the cold one
    (L2 flushed before each replay); copy_us the copy benchmark's batch time of the same
    shape, ratio, layout and op bytes."""
    devices = {d["id"]: d for d in root.get("devices", [])}
    used = [s["device"] for b in root["benchmarks"] for s in b.get("states", []) if not s.get("is_skipped")]
    dev = devices.get(used[0] if used else 0, next(iter(devices.values()), {}))
    ops, copies = {}, {}
    empty_us = peak_gbps = None
    for bench in root["benchmarks"]:
        name = bench["name"]
        for st in bench.get("states", []):
            if st.get("is_skipped"):
                continue
            axes = {a["name"]: _nv_value(a) for a in st.get("axis_values") or []}
            summ = _nv_summaries(st)
            batch_us = _nv_per_launch_us(summ, "batch")
            if name == "empty":
                empty_us = batch_us
                continue
            if name == "copy_peak":
                if batch_us:
                    peak_gbps = summ["kvc/bytes"] / batch_us / 1e3
                continue
            ratio = int(axes["Ratio"])
            if name == "copy":
                layout = "-" if axes["Op"] == "compress" else axes["Layout"]
                copies[(axes["Shape"], ratio, layout, axes["Op"])] = batch_us
                continue
            if name not in _NV_OPS:
                continue
            op = _NV_OPS[name] + (" pdl" if int(axes.get("PDL", 0)) else "")
            layout = "-" if name == "compress" else axes.get("Layout", "fp8_ds_mla")
            key = (op, layout, axes["Shape"], ratio)
            row = ops.setdefault(key, {"op": op, "layout": layout, "shape": axes["Shape"], "ratio": ratio,
                                       "tokens": summ.get("kvc/tokens"), "bytes": summ.get("kvc/bytes"),
                                       "graph_us": None, "stream_us": None, "cold_us": None})
            if axes.get("Launch", "graph") == "graph":
                row["graph_us"] = batch_us
                row["cold_us"] = _nv_per_launch_us(summ, "cold")
            else:
                row["stream_us"] = batch_us
    rows = []
    for (op, layout, shape, ratio), r in sorted(ops.items(), key=lambda kv: _nv_order(root, *kv[0])):
        if r["graph_us"] is None:
            print(f"bench_report: {op} {layout} {shape} R={ratio}: no Launch=graph state, row left out")
            continue
        copy_us = copies.get((shape, ratio, layout, _COPY_OF[op]))
        r["copy_us"] = copy_us
        r["gbps"] = r["bytes"] / r["graph_us"] / 1e3
        r["pct_copy"] = 100.0 * copy_us / r["graph_us"] if copy_us else None
        rows.append(r)
    return {
        "source": "kvc_nvbench",
        "gpu": dev.get("name", "?"), "sms": dev.get("number_of_sms", 0), "l2_bytes": dev.get("l2_cache_size", 0),
        "empty_kernel_us": empty_us, "copy_512MiB_gbps": peak_gbps, "rows": rows,
    }


def load(path):
    """bench.json (kvc_bench) or nvbench's JSON (kvc_nvbench), as kvc_bench's format."""
    with open(path) as f:
        data = json.load(f)
    if "rows" not in data and "benchmarks" in data:
        return from_nvbench(data)
    return data


def _f(value, spec):
    """`value` formatted with `spec`, or "-" where it was not measured."""
    return "-" if value is None else format(value, spec)


def _checked(check, row):
    """check(row), False where a value it compares was not measured (None)."""
    try:
        return bool(check(row))
    except TypeError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--commit", default=None)
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--results", default="bench/RESULTS.md")
    ap.add_argument("--plot", default="bench/bench.png")
    args = ap.parse_args()
    if not os.path.isfile(args.json):
        sys.exit(f"bench_report: {args.json} does not exist; kvc_bench writes it on a machine with a "
                 "GPU (cmake --workflow --preset bench), and without one nothing was measured")
    data = load(args.json)
    rows = data["rows"]
    nvb = data.get("source") == "kvc_nvbench"
    commit = args.commit
    if commit is None:
        try:
            commit = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True).strip()
        except Exception:
            commit = "unknown"

    lines = [
        "# kvcompress benchmark results",
        "",
        f"- date: {args.date}",
        f"- GPU: {data['gpu']} ({data['sms']} SMs, L2 {data['l2_bytes'] / 1e6:.0f} MB)",
        f"- commit: {commit}",
        f"- empty kernel (graph replay): {_f(data['empty_kernel_us'], '.2f')} us; 512 MiB device copy: "
        f"{_f(data['copy_512MiB_gbps'], '.0f')} GB/s (read + write)",
    ]
    if nvb:
        lines += [
            "- measured with kvc_nvbench (nvbench): head dim 512, fp32 kv_score, int64 indices, 64 records per cache "
            "page; times are nvbench's batch measurement per launch (replays back to back, the same input-set "
            "rotation as kvc_bench) of CUDA-graph replays (`graph`) and of plain stream launches (`stream`); `cold` is "
            "nvbench's cold measurement per launch of the graph (L2 flushed before each replay); `% copy` compares "
            "with the copy benchmark moving the same bytes, timed the same way in the same run. Bytes count each "
            "input read once and each output written once, indices included (bench/kvc_nvbench.cu, `count_bytes`).",
            "- regenerate: `kvc_nvbench --json nvbench.json` (docs/measuring.md), then "
            "`python3 scripts/bench_report.py nvbench.json`.",
        ]
    else:
        lines += [
        "- head dim 512, fp32 kv_score, int64 indices, 64 records per cache page; times are the median per launch "
        "of CUDA-graph replays (`graph`) and of plain stream launches (`stream`); `% copy` compares with a "
        "device-to-device copy moving the same bytes, timed the same way in the same run. Bytes count each input "
        "read once and each output written once, indices included (bench/kvc_bench.cu, `count_bytes`).",
        "- regenerate: `cmake --workflow --preset bench`, then `python3 scripts/bench_report.py build/default/bench/bench.json`.",
        ]
    lines += [
        "",
        "![% of copy bandwidth against tokens](bench.png)",
        "",
        "## Targets",
        "",
        "| target | measured | met |",
        "|---|---|---|",
    ]
    for desc, select, check, *mode in TARGETS:
        sel = [r for r in rows if select(r)]
        if not sel:
            lines.append(f"| {desc} | not measured | - |")
            continue
        label = (lambda r: r["op"]) if mode == ["any"] else (lambda r: r["shape"])
        meas = "; ".join(f"{label(r)}: {r['graph_us']:.2f} us, {_f(r['pct_copy'], '.0f')}%" for r in sel)
        met = (any if mode == ["any"] else all)(_checked(check, r) for r in sel)
        lines.append(f"| {desc} | {meas} | {'yes' if met else '**no**'} |")
    # PDL: the same step with plain launches and with programmatic dependent launch.
    by_key = {(r["shape"], r["ratio"], r["op"], r["layout"]): r for r in rows}
    pdl_lines = []
    for r in rows:
        if not r["op"].endswith(" pdl"):
            continue
        plain = by_key.get((r["shape"], r["ratio"], r["op"][:-4], r["layout"]))
        if plain is None:
            continue
        pdl_lines.append(f"| {r['shape']} | {r['ratio']} | {plain['op']} | {plain['graph_us']:.2f} | {r['graph_us']:.2f} | "
                         f"{_f(plain['stream_us'], '.2f')} | {_f(r['stream_us'], '.2f')} |")
    if pdl_lines:
        lines += ["", "## Programmatic dependent launch (fp8_ds_mla)", "",
                  "Microseconds per launch or step (graph replay and plain stream launches), without and with "
                  "`LaunchOptions::pdl` (each launch chained to the previous one, as the torch package launches).", "",
                  "| shape | ratio | op | graph | graph, PDL | stream | stream, PDL |", "|---|---|---|---|---|---|---|"]
        lines += pdl_lines
    cold = "cold us | " if nvb else ""
    lines += ["", "## All measurements", "",
              f"| shape | tokens | ratio | op | layout | MB | graph us | stream us | {cold}GB/s | % copy |",
              "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if nvb else "")]
    for r in rows:
        cold = f"{_f(r.get('cold_us'), '.2f')} | " if nvb else ""
        lines.append(f"| {r['shape']} | {r['tokens']} | {r['ratio']} | {r['op']} | {r['layout']} | "
                     f"{r['bytes'] / 1e6:.2f} | {r['graph_us']:.2f} | {_f(r['stream_us'], '.2f')} | {cold}"
                     f"{r['gbps']:.0f} | {_f(r['pct_copy'], '.1f')} |")
    with open(args.results, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {args.results}")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    series = defaultdict(list)
    for r in rows:
        key = f"{r['op']} {r['layout'] if r['layout'] != '-' else ''} R={r['ratio']}".replace("  ", " ")
        if r["pct_copy"] is not None:
            series[key].append((r["tokens"], r["pct_copy"]))
    fig, ax = plt.subplots(figsize=(10, 6))
    for key, pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=key)
    ax.set_xscale("log")
    ax.set_xlabel("tokens per call")
    ax.set_ylabel("% of device-to-device copy bandwidth (same bytes)")
    ax.set_title(f"kvcompress on {data['gpu']} ({commit}, {args.date})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
