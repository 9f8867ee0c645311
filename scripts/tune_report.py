#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tables of kvc_nvbench's tuning benchmarks (bench/kvc_tune.cu) from its --json output:
one row per state group, one column per forced launch shape, µs per launch (nvbench's batch
measurement), the fastest in bold, and the host API's pick for the row (docs/measuring.md).

    python3 scripts/tune_report.py tune.json [--md out.md]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_report import nv_states  # noqa: E402  (same directory)


def table(title, rows, columns, pick_name):
    """rows: {row key: ({column: us}, pick)}; columns in order."""
    out = [f"### {title}", "", "| " + " | ".join(["state"] + [str(c) for c in columns] + [pick_name]) + " |",
           "|" + "---|" * (len(columns) + 2)]
    for key, (cells, pick) in rows.items():
        best = min((v for v in cells.values() if v is not None), default=None)
        vals = []
        for c in columns:
            v = cells.get(c)
            vals.append("-" if v is None else (f"**{v:.2f}**" if v == best else f"{v:.2f}"))
        out.append("| " + " | ".join([key] + vals + [str(pick)]) + " |")
    return "\n".join(out) + "\n"


def report(root):
    measured, failed = nv_states(root)
    parts = []
    clusters, cluster_cols = {}, set()
    windows, window_cols = {}, set()
    for st in measured:
        a, s, us = st["axes"], st["summaries"], st["batch_us"]
        if st["bench"] == "tune_clusters":
            # Rows: shape and window (tokens a window; older runs had no Window axis).
            window = a.get("Window")
            key = a["Shape"] if window is None else f"{a['Shape']} window {window}"
            auto = s.get("kvc/auto_cluster")
            if s.get("kvc/auto_window") is not None:
                auto = f"window {s.get('kvc/auto_window')} cluster {auto}"
            cells, _ = clusters.setdefault(key, ({}, auto))
            cells[int(a["Cluster"])] = us
            cluster_cols.add(int(a["Cluster"]))
        elif st["bench"] == "tune_windows":
            key = f"{a['Op']} R={a['Ratio']} {a['Shape']}"
            col = f"{a['Window']}" + ("+split" if int(a["Split"]) else "")
            cells, _ = windows.setdefault(key, ({}, s.get("kvc/auto_window")))
            cells[col] = us
            window_cols.add((int(a["Window"]), int(a["Split"])))
    if clusters:
        parts.append(table("tune_clusters: Op A ratio 128, blocks of a cluster per window (µs)", clusters,
                           sorted(cluster_cols), "auto"))
    if windows:
        cols = [f"{w}" + ("+split" if sp else "") for w, sp in sorted(window_cols)]
        parts.append(table("tune_windows: warp rows, tokens a warp (+split: one-wave split; µs)", windows, cols,
                           "auto (window+wide)"))
    for b, name, reason in failed:
        parts.append(f"- failed: {b} {name}: {reason}")
    return "\n".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", help="kvc_nvbench --json output holding tune_clusters / tune_windows states")
    ap.add_argument("--md", help="also write the tables to this file")
    args = ap.parse_args()
    with open(args.json) as f:
        text = report(json.load(f))
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
