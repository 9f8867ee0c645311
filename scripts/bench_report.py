#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Turn the benchmark's JSON into bench/RESULTS.md (date, GPU, commit, targets, table) and a plot.

    python3 scripts/bench_report.py JSON [--commit SHA] [--date YYYY-MM-DD]
        [--results bench/RESULTS.md] [--plot bench/bench.png] [--print] [--skip-missing]

JSON is kvc_nvbench's nvbench --json output (build/default/bench/nvbench.json after
`cmake --workflow --preset bench`; docs/measuring.md): from_nvbench() maps its states to
rows. Results recorded before issue 15 are kvc_bench's bench.json (e.g.
bench/history/results-2fed0fa-kvc_bench.json: a "rows" list); load() reads both. --print also writes the Markdown to stdout;
--skip-missing exits 77 (ctest's skip code) instead of 1 when JSON does not exist. The plot
(matplotlib, skipped with a note when it is missing) shows % of the copy bandwidth against
tokens, one line per op/layout/ratio.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
from collections import defaultdict

# Issue targets (H200, issue 11's that the benchmark measures; the peer ratios are in
# scripts/peer_report.py): (description, predicate over rows, check[, "any"]): met when every
# selected row passes, or with "any" when one of them does (alternative ways to run a step).
# Only Data=rotating rows (inputs read from HBM where they do not fit L2) are checked.
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
# value}]}], numbers written as strings. kvc_nvbench's benchmarks and axes (bench/kvc_nvbench.cu,
# bench/kvc_latency_floor.cu): compress / insert / fused / step over Ratio, Layout, Shape, PDL,
# Data (rotating | hot), Launch (graph | stream); copy over Ratio, Layout, Shape, Op;
# copy_peak; empty; latency_floor over Trips, Blocks, PDL. Each state's summaries include
# kvc/launches (launches per nvbench launch), kvc/bytes, kvc/tokens and the per-launch times
# kvc/batch/time_per_launch and kvc/cold/time_per_launch (seconds). Files of builds before
# issue 15's end lack PDL on compress / insert and Data: read as PDL=0, Data=rotating.

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
    """Microseconds per launch of nvbench's `kind` (batch or cold) measurement."""
    t = summ.get(f"kvc/{kind}/time_per_launch")
    if t is None:
        total = summ.get(f"nv/{kind}/time/gpu/mean")
        if total is None or not summ.get("kvc/launches"):
            return None
        t = total / summ["kvc/launches"]
    return t * 1e6


# A failed state: kvc_nvbench threw (a CUDA error, a kvc::Status, an unknown axis value) and
# nvbench marked it skipped with this reason; kvc_nvbench then exits 1.
NV_FAILED = "Unexpected error"


def nv_states(root):
    """(measured, failed): every state of kvc_nvbench's JSON that ran, as dicts {bench, axes
    (name -> value, Device left out), summaries (tag -> value), batch_us, cold_us}, and every
    state that failed, as (benchmark, state name, reason). Other skipped states are left out."""
    measured, failed = [], []
    for bench in root["benchmarks"]:
        for st in bench.get("states", []):
            if st.get("is_skipped"):
                reason = st.get("skip_reason") or ""
                if reason.startswith(NV_FAILED):
                    failed.append((bench["name"], st.get("name", "?"), reason))
                continue
            summ = _nv_summaries(st)
            measured.append({
                "bench": bench["name"],
                "axes": {a["name"]: _nv_value(a) for a in st.get("axis_values") or [] if a["name"] != "Device"},
                "device": st.get("device", 0), "summaries": summ,
                "batch_us": _nv_per_launch_us(summ, "batch"), "cold_us": _nv_per_launch_us(summ, "cold"),
            })
    return measured, failed


_NV_OPS = {"compress": "compress", "insert": "insert", "fused": "fused", "step": "A+B"}
_COPY_OF = {"compress": "compress", "compress pdl": "compress", "insert": "insert", "insert pdl": "insert",
            "fused": "fused", "fused pdl": "fused", "A+B": "step", "A+B pdl": "step"}


def nv_op_key(state):
    """(op, layout, shape, ratio, data, launch) of an op state (compress, insert, fused,
    step), named as RESULTS.md names the rows ("compress pdl", "A+B", ...); None for the
    other benchmarks."""
    name, axes = state["bench"], state["axes"]
    if name not in _NV_OPS:
        return None
    op = _NV_OPS[name] + (" pdl" if int(axes.get("PDL", 0)) else "")
    layout = "-" if name == "compress" else axes.get("Layout", "fp8_ds_mla")
    return (op, layout, axes["Shape"], int(axes["Ratio"]), axes.get("Data", "rotating"), axes.get("Launch", "graph"))


def _nv_order(root, op, layout, shape, ratio, data):
    """The row order: data (rotating first), shape, ratio, then compress, compress pdl,
    insert / fused per layout, insert pdl, the steps (A+B, A+B pdl, fused pdl)."""
    def axis_values(name):
        for b in root["benchmarks"]:
            for a in b.get("axes") or []:
                if a["name"] == name:
                    return [v["input_string"] for v in a["values"]]
        return []
    shapes, layouts = axis_values("Shape"), axis_values("Layout")
    index = lambda seq, v: seq.index(v) if v in seq else len(seq)
    groups = {"compress": (0, 0, 0), "compress pdl": (0, 1, 0), "insert": (1, index(layouts, layout), 0),
              "fused": (1, index(layouts, layout), 1), "insert pdl": (2, 0, 0), "A+B": (3, 0, 0),
              "A+B pdl": (3, 1, 0), "fused pdl": (3, 2, 0)}
    return (data != "rotating", index(shapes, shape), ratio, groups.get(op, (4, 0, 0)))


def from_nvbench(root):
    """kvc_nvbench's JSON as rows (op, layout, shape, ratio, data, tokens, bytes, graph_us,
    stream_us, cold_us, copy_us, gbps, pct_copy) and the header fields (gpu, sms, l2_bytes,
    empty_kernel_us, copy_512MiB_gbps), plus latency_floor and failed. graph_us / stream_us are
    nvbench's batch measurement per op launch (back-to-back replays) of Launch=graph / stream;
    cold_us the cold one of the graph (L2 flushed before each replay); copy_us the copy
    benchmark's batch time of the same shape, ratio, layout and op bytes."""
    devices = {d["id"]: d for d in root.get("devices", [])}
    measured, failed = nv_states(root)
    dev = devices.get(measured[0]["device"] if measured else 0, next(iter(devices.values()), {}))
    ops, copies, floor = {}, {}, []
    empty_us = peak_gbps = None
    for st in measured:
        name, axes, summ, batch_us = st["bench"], st["axes"], st["summaries"], st["batch_us"]
        if name == "empty":
            empty_us = batch_us
        elif name == "copy_peak":
            if batch_us:
                peak_gbps = summ["kvc/bytes"] / batch_us / 1e3
        elif name == "copy":
            layout = "-" if axes["Op"] == "compress" else axes["Layout"]
            copies[(axes["Shape"], int(axes["Ratio"]), layout, axes["Op"])] = batch_us
        elif name == "latency_floor":
            floor.append({"trips": int(axes["Trips"]), "blocks": int(axes["Blocks"]), "pdl": int(axes["PDL"]),
                          "us": batch_us, "cold_us": st["cold_us"]})
        elif name in _NV_OPS:
            op, layout, shape, ratio, data, launch = nv_op_key(st)
            row = ops.setdefault((op, layout, shape, ratio, data), {
                "op": op, "layout": layout, "shape": shape, "ratio": ratio, "data": data,
                "tokens": summ.get("kvc/tokens"), "bytes": summ.get("kvc/bytes"),
                "graph_us": None, "stream_us": None, "cold_us": None})
            if launch == "graph":
                row["graph_us"] = batch_us
                row["cold_us"] = st["cold_us"]
            else:
                row["stream_us"] = batch_us
    rows = []
    for key, r in sorted(ops.items(), key=lambda kv: _nv_order(root, *kv[0])):
        if r["graph_us"] is None:
            print(f"bench_report: {' '.join(map(str, key))}: no Launch=graph state, row left out")
            continue
        copy_us = copies.get((r["shape"], r["ratio"], r["layout"], _COPY_OF[r["op"]]))
        r["copy_us"] = copy_us
        r["gbps"] = r["bytes"] / r["graph_us"] / 1e3
        r["pct_copy"] = 100.0 * copy_us / r["graph_us"] if copy_us else None
        rows.append(r)
    floor.sort(key=lambda f: (f["blocks"], f["trips"], f["pdl"]))
    return {
        "source": "kvc_nvbench",
        "gpu": dev.get("name", "?"), "sms": dev.get("number_of_sms", 0), "l2_bytes": dev.get("l2_cache_size", 0),
        "empty_kernel_us": empty_us, "copy_512MiB_gbps": peak_gbps, "rows": rows,
        "latency_floor": floor, "failed": failed,
    }


def load(path):
    """kvc_nvbench's nvbench JSON, or kvc_bench's bench.json (results recorded before issue
    15), as one format: kvc_bench's fields and rows (from_nvbench adds data, cold_us,
    latency_floor, failed and source)."""
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


def _op_label(r):
    return r["op"] + (f" ({r['data']})" if r.get("data", "rotating") != "rotating" else "")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json")
    ap.add_argument("--commit", default=None)
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--results", default="bench/RESULTS.md")
    ap.add_argument("--plot", default="bench/bench.png")
    ap.add_argument("--print", action="store_true", help="also write the Markdown to stdout")
    ap.add_argument("--skip-missing", action="store_true", help="exit 77 instead of 1 when JSON does not exist")
    args = ap.parse_args(argv)
    if not os.path.isfile(args.json):
        print(f"bench_report: {args.json} does not exist; kvc_nvbench writes it on a machine with a GPU "
              "(cmake --workflow --preset bench), and without one nothing was measured", file=sys.stderr)
        return 77 if args.skip_missing else 1
    data = load(args.json)
    rows = data["rows"]
    nvb = data.get("source") == "kvc_nvbench"
    commit = args.commit
    if commit is None:
        try:
            commit = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True,
                                             stderr=subprocess.DEVNULL).strip()
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
            "page; times are nvbench's batch measurement per launch (graphs of at least 20 launches replayed back to "
            "back, rotating through enough input sets to read from HBM where they do not fit L2) of CUDA-graph "
            "replays (`graph`) and of plain stream launches (`stream`); `cold` is nvbench's cold measurement per "
            "launch of the graph (L2 flushed before each replay); `% copy` compares with the copy benchmark moving "
            "the same bytes, timed the same way in the same run. Bytes count each input read once and each output "
            "written once, indices included (bench/bench_problems.hpp, `count_bytes`).",
            "- regenerate: `cmake --workflow --preset bench` (or `kvc_nvbench --json nvbench.json`, docs/measuring.md), "
            "then `python3 scripts/bench_report.py build/default/bench/nvbench.json`.",
        ]
        if data.get("failed"):
            bench, state, reason = data["failed"][0]
            lines.append(f"- **{len(data['failed'])} state(s) failed**; the first: {bench} `{state}`: {reason}")
    else:
        lines += [
            "- measured with kvc_bench (the benchmark before kvc_nvbench; bench/kvc_bench.cu until issue 15): head "
            "dim 512, fp32 kv_score, int64 indices, 64 records per cache page; times are the median per launch of "
            "CUDA-graph replays (`graph`) and of plain stream launches (`stream`); `% copy` compares with a "
            "device-to-device copy moving the same bytes, timed the same way in the same run. Bytes count each input "
            "read once and each output written once, indices included (`count_bytes`).",
            "- measure again: `cmake --workflow --preset bench`, then "
            "`python3 scripts/bench_report.py build/default/bench/nvbench.json`.",
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
    rotating = [r for r in rows if r.get("data", "rotating") == "rotating"]
    for desc, select, check, *mode in TARGETS:
        sel = [r for r in rotating if select(r)]
        if not sel:
            lines.append(f"| {desc} | not measured | - |")
            continue
        label = (lambda r: r["op"]) if mode == ["any"] else (lambda r: r["shape"])
        meas = "; ".join(f"{label(r)}: {r['graph_us']:.2f} us, {_f(r['pct_copy'], '.0f')}%" for r in sel)
        met = (any if mode == ["any"] else all)(_checked(check, r) for r in sel)
        lines.append(f"| {desc} | {meas} | {'yes' if met else '**no**'} |")
    # PDL: the same op or step with plain launches and with programmatic dependent launch.
    by_key = {(r["shape"], r["ratio"], r["op"], r["layout"]): r for r in rotating}
    pdl_lines = []
    for r in rotating:
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
    floor = data.get("latency_floor") or []
    if floor:
        cell = {(f["trips"], f["blocks"], f["pdl"]): f for f in floor}
        lines += ["", "## Latency floor", "",
                  "Microseconds per launch of kernels that only do a decode call's chain of dependent round trips "
                  "(`latency_floor`, bench/kvc_latency_floor.cu): graph replays back to back (the table L2-hot), and "
                  "`cold` with L2 flushed before each replay.", "",
                  "| kernel | blocks | plain | PDL | plain, cold | PDL, cold |", "|---|---|---|---|---|---|"]
        for trips, blocks in sorted({(f["trips"], f["blocks"]) for f in floor}, key=lambda tb: (tb[1], tb[0])):
            plain, pdl = cell.get((trips, blocks, 0), {}), cell.get((trips, blocks, 1), {})
            kernel = "empty" if trips == 0 else f"{trips} dependent load{'s' if trips > 1 else ''} + store"
            lines.append(f"| {kernel} | {blocks} | {_f(plain.get('us'), '.2f')} | {_f(pdl.get('us'), '.2f')} | "
                         f"{_f(plain.get('cold_us'), '.2f')} | {_f(pdl.get('cold_us'), '.2f')} |")
    cold = "cold us | " if nvb else ""
    lines += ["", "## All measurements", "",
              f"| shape | tokens | ratio | op | layout | MB | graph us | stream us | {cold}GB/s | % copy |",
              "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if nvb else "")]
    for r in rows:
        cold = f"{_f(r.get('cold_us'), '.2f')} | " if nvb else ""
        lines.append(f"| {r['shape']} | {r['tokens']} | {r['ratio']} | {_op_label(r)} | {r['layout']} | "
                     f"{r['bytes'] / 1e6:.2f} | {r['graph_us']:.2f} | {_f(r['stream_us'], '.2f')} | {cold}"
                     f"{r['gbps']:.0f} | {_f(r['pct_copy'], '.1f')} |")
    text = "\n".join(lines) + "\n"
    with open(args.results, "w") as f:
        f.write(text)
    if args.print:
        print(text)
    print(f"wrote {args.results}")
    if nvb and data.get("failed"):
        print(f"bench_report: {len(data['failed'])} state(s) of {args.json} failed (see {args.results})",
              file=sys.stderr)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return 0
    series = defaultdict(list)
    for r in rows:
        key = f"{_op_label(r)} {r['layout'] if r['layout'] != '-' else ''} R={r['ratio']}".replace("  ", " ")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
