#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A/B of two builds of kvc_bench on one GPU in one session: runs OLD and NEW alternately
# (ROUNDS times, default 2, each with the kvc_bench arguments given after the two binaries,
# e.g. --quick --ratio 2), then prints scripts/bench_compare.py's table (min per row).
# Absolute times drift between sessions on shared machines; alternated runs do not.
#   scripts/bench_ab.sh OLD_KVC_BENCH NEW_KVC_BENCH OUT_DIR [kvc_bench args ...]
set -uo pipefail
old=${1:?usage: bench_ab.sh OLD_KVC_BENCH NEW_KVC_BENCH OUT_DIR [args]}
new=${2:?usage: bench_ab.sh OLD_KVC_BENCH NEW_KVC_BENCH OUT_DIR [args]}
out=${3:?usage: bench_ab.sh OLD_KVC_BENCH NEW_KVC_BENCH OUT_DIR [args]}
shift 3
mkdir -p "$out"
for ((i = 1; i <= ${ROUNDS:-2}; ++i)); do
  "$old" "$@" >"$out/old$i.md" 2>&1 || echo "bench_ab: old run $i failed (rc $?), see $out/old$i.md" >&2
  "$new" "$@" >"$out/new$i.md" 2>&1 || echo "bench_ab: new run $i failed (rc $?), see $out/new$i.md" >&2
done
here=$(cd "$(dirname "$0")" && pwd)
python3 "$here/bench_compare.py" --old "$out"/old*.md --new "$out"/new*.md | tee "$out/compare.md"
