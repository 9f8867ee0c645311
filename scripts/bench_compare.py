#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compare kvc_bench runs of two builds made in one GPU session (scripts/bench_ab.sh).

    python3 scripts/bench_compare.py --old OLD.md [OLD.md ...] --new NEW.md [NEW.md ...]

Reads kvc_bench's Markdown tables (its stdout), takes per (shape, ratio, op, layout) the
minimum graph time over the runs of each build, and prints one table: old us, new us and
the change in per cent. Absolute times drift between GPU sessions; alternated runs of both
builds in one session do not, so only compare files of the same session.
"""
import argparse
import collections
import re
import sys


def read(paths):
    """{(shape, ratio, op, layout): min graph us} over the kvc_bench tables in `paths`."""
    times = collections.defaultdict(list)
    for path in paths:
        with open(path) as f:
            for line in f:
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if len(cells) >= 8 and re.fullmatch(r"[0-9.]+", cells[4]):
                    times[tuple(cells[:4])].append(float(cells[4]))
    return {k: min(v) for k, v in times.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", nargs="+", required=True, help="kvc_bench stdout of the old build")
    ap.add_argument("--new", nargs="+", required=True, help="kvc_bench stdout of the new build")
    args = ap.parse_args(argv)
    old, new = read(args.old), read(args.new)
    common = [k for k in new if k in old]
    if not common:
        print("bench_compare: no row appears in both the old and the new tables", file=sys.stderr)
        return 1
    print("| shape | R | op | layout | old us | new us | change |")
    print("|---|---|---|---|---|---|---|")
    for k in common:
        print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {old[k]:.2f} | {new[k]:.2f} | "
              f"{100 * (new[k] / old[k] - 1):+.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
