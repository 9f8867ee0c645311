#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Turn peer_bench.py's JSON (--json) into the markdown section of bench/RESULTS.md that
compares kvcompress with vLLM's Triton kernels, with the issue's targets checked.

    python3 scripts/peer_report.py PEER_JSON [--commit SHA] [--date YYYY-MM-DD] [--out FILE]

x = peer time / ours (> 1: kvcompress faster). The step compares the best of ours A+B and
ours fused with the best of peer A+B and peer A+B with PDL.
"""
import argparse
import datetime
import json

DECODE = ("decode", "spec", "r1 decode")  # shape name prefixes held to the decode targets


def step_x(r):
    return min(r["peer_AB"], r["peer_AB_pdl"]) / min(r["ours_AB"], r["ours_fused"])


def targets(r):
    """(what, measured, target) for each target of one shape."""
    decode = r["shape"].startswith(DECODE)
    out = [("Op A", r["peer_A"] / r["ours_A"], 1.3 if decode else 1.1),
           ("Op B", r["peer_B"] / r["ours_B"], 1.3),
           ("step", step_x(r), 1.5)]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = json.load(open(args.json))
    lines = [f"## Against the peer (vLLM's V4.1 Triton kernels), {args.date}, {args.commit}", "",
             "`python3 .peer/peer_bench.py` against the installed package `kvcompress` (a copy of ../shared/peer): same batches, "
             "graph replay, hot L2, microseconds per launch; x = peer / ours (> 1: kvcompress faster). "
             "Targets (issue 11): x A >= 1.3 at decode and speculative shapes, >= 1.1 elsewhere; x B >= 1.3; "
             "x step >= 1.5; decode step at 64x2 and 256x2 <= 3.0 us.", "",
             "| shape | peer A | ours A | x A | peer B | ours B | x B | peer step | ours step | x step |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    met = failed = 0
    for r in rows:
        cells = []
        for what, x, goal in targets(r):
            ok = x >= goal
            met += ok
            failed += not ok
            cells.append(f"{x:.2f}" if ok else f"**{x:.2f}**")
        peer_step = min(r["peer_AB"], r["peer_AB_pdl"])
        ours_step = min(r["ours_AB"], r["ours_fused"])
        step_cell = f"{ours_step:.2f}"
        if r["shape"] in ("decode 64x2", "decode 256x2"):
            ok = ours_step <= 3.0
            met += ok
            failed += not ok
            if not ok:
                step_cell = f"**{ours_step:.2f}**"
        lines.append(f"| {r['shape']} | {r['peer_A']:.2f} | {r['ours_A']:.2f} | {cells[0]} | {r['peer_B']:.2f} | "
                     f"{r['ours_B']:.2f} | {cells[1]} | {peer_step:.2f} | {step_cell} | {cells[2]} |")
    lines += ["", f"{met} of {met + failed} targets met (missed ones in bold)."]
    text = "\n".join(lines) + "\n"
    if args.out:
        open(args.out, "w").write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
