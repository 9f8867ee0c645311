#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Count the SASS instructions one path through a kernel executes, without a GPU.

A kernel's decode path is a few hundred instructions of one warp; which of the kernel's
~2000 it runs is decided by a few dozen conditional branches. This walks the control flow
of one kernel in `nvdisasm -c` output, taking each conditional branch (and predicated
EXIT) as a decision file says:

  T: taken by every lane, N: not taken, B: both (a divergent branch: the warp runs both
  sides; they meet again at the BSYNC)

and prints the number of distinct instructions reached (a loop body counts once: one
closing group a window at decode). A branch the file does not decide stops its path and
is listed as NEED, with its address, so the file is written by walking the path.

  decisions: derive a decision file from an ncu listing of executed instructions
             (scripts/profile.sh's *.exec.txt: index, warp-level count, SASS) of the same
             binary. It calibrates the walk: on its own SASS the count equals the
             listing's executed instructions (bench/NOTES.md 54: 575 for Op A, 897 for
             the fused op at decode 256x2).
  count:     walk one kernel with a decision file; --list prints the path.

  scripts/sass_path.py decisions a.sass LatentEpilogue prof/2-...exec.txt a.json
  scripts/sass_path.py count b.sass LatentEpilogue b.json [--list]

The kernel is the first `.text.<name>` section whose mangled name contains the given text.
"""
import argparse
import json
import re
import sys


def load(sass, kernel):
    """[(address, predicate or None, body)] of the kernel, and {label: index}."""
    ins, labels, pending, on = [], {}, [], False
    for line in open(sass):
        m = re.match(r'\s*\.text\.(\S+):', line)
        if m:
            on = kernel in m.group(1) and not ins
            continue
        if not on:
            continue
        m = re.match(r'^(\.L_x_\d+):', line.strip())
        if m:
            pending.append(m.group(1))
            continue
        m = re.match(r'\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;', line)
        if m:
            for label in pending:
                labels[label] = len(ins)
            pending = []
            pm = re.match(r'(@!?U?P[T0-9]+)\s+(.*)', m.group(2))
            ins.append((m.group(1), pm.group(1) if pm else None, pm.group(2) if pm else m.group(2)))
    if not ins:
        sys.exit(f'no kernel matching {kernel!r} in {sass}')
    return ins, labels


def target(body, labels):
    m = re.search(r'`\((\.L_x_\d+)\)', body)
    return labels[m.group(1)] if m else None


def walk(ins, labels, decide):
    seen, need, stack = set(), [], [0]
    while stack:
        i = stack.pop()
        while i < len(ins) and i not in seen:
            seen.add(i)
            addr, pred, body = ins[i]
            op = body.split()[0]
            is_exit = op == 'EXIT' or op.startswith('EXIT.')
            is_branch = op == 'BRA' or (op.startswith('BRA.') and not op.startswith('BRA.DIV'))
            if not (is_exit or is_branch):
                if op.startswith('RET'):
                    break
                i += 1  # BRA.DIV (convergent warps: not taken), CALL (not followed), the rest
                continue
            tgt = None if is_exit else target(body, labels)  # an EXIT taken ends the path
            d = 'T' if pred is None else decide.get(addr)
            if d is None:
                need.append(ins[i])
                break
            if d == 'B' and tgt is not None:
                stack.append(tgt)
            if d != 'T':
                i += 1
            elif tgt is None:
                break
            else:
                i = tgt
    return seen, need


def decisions(args):
    ins, labels = load(args.sass, args.kernel)
    executed = set()
    for line in list(open(args.exec))[1:]:
        parts = line.split()
        if int(parts[1]) > 0:
            executed.add(int(parts[0]))
    out = {}
    for i, (addr, pred, body) in enumerate(ins):
        if i not in executed or pred is None:
            continue
        if body.startswith('EXIT'):
            out[addr] = 'B' if i + 1 in executed else 'T'
        elif body.startswith('BRA') and not body.startswith('BRA.DIV'):
            fall, taken = i + 1 in executed, target(body, labels) in executed
            out[addr] = 'B' if fall and taken else 'T' if taken else 'N'
    json.dump(out, open(args.out, 'w'), indent=0, sort_keys=True)
    seen, _ = walk(ins, labels, out)
    print(f'{len(out)} decisions; the walk reaches {len(seen)} instructions, the listing executed {len(executed)}')


def count(args):
    ins, labels = load(args.sass, args.kernel)
    seen, need = walk(ins, labels, json.load(open(args.decisions)))
    print(f'instructions on the path: {len(seen)}')
    for addr, pred, body in need:
        print(f'NEED {addr} {pred} {body}')
    if args.list:
        for i in sorted(seen):
            print(ins[i][0], ins[i][1] or '', ins[i][2])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(required=True)
    d = sub.add_parser('decisions')
    d.add_argument('sass'); d.add_argument('kernel'); d.add_argument('exec'); d.add_argument('out')
    d.set_defaults(run=decisions)
    c = sub.add_parser('count')
    c.add_argument('sass'); c.add_argument('kernel'); c.add_argument('decisions')
    c.add_argument('--list', action='store_true')
    c.set_defaults(run=count)
    args = ap.parse_args()
    args.run(args)


if __name__ == '__main__':
    main()
