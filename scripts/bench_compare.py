#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compare kvc_nvbench runs of two builds made in one GPU session (scripts/bench_ab.sh).

    python3 scripts/bench_compare.py --old OLD.json [OLD.json ...] --new NEW.json [NEW.json ...]

Reads kvc_nvbench's --json files (bench_report.nv_states), takes per state the minimum over
the runs of each build of nvbench's batch time per launch (kvc/batch/time_per_launch: what
RESULTS.md calls graph us / stream us), and prints one table of the states both builds
measured: old us, new us and the change in per cent. Op states are named as RESULTS.md names
its rows (shape, ratio, op with " pdl", layout, launch; Data=hot marked " (hot)"); the other
benchmarks (copy, copy_peak, empty, latency_floor) by name and axes. Absolute times drift
between GPU sessions; alternated runs of both builds in one session do not, so only compare
files of the same session. Exit status 1 when no state is in both; failed states are named
on stderr.
"""
import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_report  # noqa: E402


def state_key(st):
    """(shape, ratio, op, layout, launch) of one measured state (bench_report.nv_states)."""
    op_key = bench_report.nv_op_key(st)
    if op_key is not None:
        op, layout, shape, ratio, data, launch = op_key
        return (shape, str(ratio), op + (f" ({data})" if data != "rotating" else ""), layout, launch)
    axes = dict(st["axes"])
    shape = axes.pop("Shape", "-")
    ratio = str(axes.pop("Ratio", "-"))
    layout = axes.pop("Layout", "-")
    extra = " ".join(f"{k}={v}" for k, v in axes.items())
    return (shape, ratio, f"{st['bench']} {extra}".strip(), layout, "graph")


def read(paths, label):
    """{state key: min batch us per launch} over the kvc_nvbench JSON files in `paths`."""
    times = collections.defaultdict(list)
    for path in paths:
        with open(path) as f:
            try:
                root = json.load(f)
            except ValueError:
                root = {}
        if not isinstance(root, dict) or "benchmarks" not in root:
            sys.exit(f"bench_compare: {path} is not kvc_nvbench's --json output (kvc_bench's Markdown, from "
                     "before issue 15, is not read: compare runs of one tool only)")
        measured, failed = bench_report.nv_states(root)
        for bench, state, reason in failed:
            print(f"bench_compare: {label} {path}: {bench} {state}: {reason}", file=sys.stderr)
        for st in measured:
            if st["batch_us"] is not None:
                times[state_key(st)].append(st["batch_us"])
    return {k: min(v) for k, v in times.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", nargs="+", required=True, help="kvc_nvbench --json files of the old build")
    ap.add_argument("--new", nargs="+", required=True, help="kvc_nvbench --json files of the new build")
    args = ap.parse_args(argv)
    old, new = read(args.old, "old"), read(args.new, "new")
    common = [k for k in new if k in old]
    if not common:
        print("bench_compare: no state appears in both the old and the new runs", file=sys.stderr)
        return 1
    print("| shape | R | op | layout | launch | old us | new us | change |")
    print("|---|---|---|---|---|---|---|---|")
    for k in common:
        print(f"| {' | '.join(k)} | {old[k]:.2f} | {new[k]:.2f} | {100 * (new[k] / old[k] - 1):+.1f} % |")
    only_old, only_new = len(old) - len(common), len(new) - len(common)
    if only_old or only_new:
        print(f"bench_compare: {only_old} state(s) only in the old runs, {only_new} only in the new", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
