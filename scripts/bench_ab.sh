#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A/B of two builds of kvc_nvbench on one GPU in one session: runs OLD and NEW alternately
# (ROUNDS times, default 2), each with the kvc_nvbench arguments given after the two binaries
# (e.g. --quick -b compress -a Ratio=2, or --hot -b insert -a Layout=fp8_ds_mla), writing
# OUT_DIR/{old,new}N.json (--json) and .log (stdout: nvbench's Markdown), then prints
# scripts/bench_compare.py's table (per state the minimum batch time per launch of each build).
# Absolute times drift between sessions on shared machines; alternated runs do not. Each
# binary needs its libnvbench.so beside it (the build puts it there): carry both folders.
#   scripts/bench_ab.sh OLD_KVC_NVBENCH NEW_KVC_NVBENCH OUT_DIR [kvc_nvbench args ...]
set -uo pipefail
usage="usage: bench_ab.sh OLD_KVC_NVBENCH NEW_KVC_NVBENCH OUT_DIR [kvc_nvbench args]"
old=${1:?$usage}
new=${2:?$usage}
out=${3:?$usage}
shift 3
mkdir -p "$out"
for ((i = 1; i <= ${ROUNDS:-2}; ++i)); do
  "$old" "$@" --json "$out/old$i.json" >"$out/old$i.log" 2>&1 ||
    echo "bench_ab: old run $i failed (rc $?), see $out/old$i.log" >&2
  "$new" "$@" --json "$out/new$i.json" >"$out/new$i.log" 2>&1 ||
    echo "bench_ab: new run $i failed (rc $?), see $out/new$i.log" >&2
done
here=$(cd "$(dirname "$0")" && pwd)
shopt -s nullglob
python3 "$here/bench_compare.py" --old "$out"/old*.json --new "$out"/new*.json | tee "$out/compare.md"
