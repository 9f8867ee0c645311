#!/usr/bin/env bash
# GPU check of a build: device tests, the examples, the benchmark (when present), the torch
# op (KVC_TORCH_CHECK=1: cold JIT build, timed, and its pytest), then compute-sanitizer memcheck and racecheck; prints a short
# table last. Used on the lent GPU machine:
#   scripts/device_check.sh <dir holding kvc_device_tests [kvc_bench]> [out_dir]
set -uo pipefail
bin=${1:?usage: device_check.sh BIN_DIR [OUT_DIR]}
out=${2:-${OUT:-/tmp/kvc_out}}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
declare -A result
run() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  result[$name]="rc=$rc $((SECONDS - start))s $(grep -E 'test cases:|ERROR SUMMARY|RACECHECK SUMMARY' "$out/$name.log" | tail -n1 | tr -s ' ')"
  tail -n 12 "$out/$name.log"
}
run device 200 "$bin/kvc_device_tests" --duration=true
for ex in "$bin"/kvc_example_*; do
  [[ -x $ex ]] || continue
  name=$(basename "$ex")
  timeout 60 "$ex" >"$out/$name.log" 2>&1
  result[$name]="rc=$? $(tail -n1 "$out/$name.log")"
done
if [[ -x "$bin/kvc_bench" ]]; then
  run bench 240 "$bin/kvc_bench" --out "$out"
  python3 "$(dirname "$0")/bench_report.py" "$out/bench.json" --commit "${KVC_COMMIT:-unknown}" \
    --results "$out/RESULTS.md" --plot "$out/bench.png" >>"$out/bench.log" 2>&1
  sed -n '/## Targets/,/## All/p' "$out/RESULTS.md"
fi
if [[ ${KVC_TORCH_CHECK:-0} == 1 ]]; then
  # examples/05_torch_op: a cold just-in-time build (timed), then its pytest on the GPU.
  tdir=$(mktemp -d)
  here=$(cd "$(dirname "$0")/.." && pwd)
  run torch_build 400 env KVC_TORCH_BUILD_DIR="$tdir" python3 -c \
    "import sys,time; sys.path.insert(0,'$here/examples/05_torch_op'); import kvcompress_torch as k; t=time.time(); k.load(); print('torch op built in %.0f s' % (time.time()-t))"
  result[torch_build]="${result[torch_build]} $(grep -o 'built in [0-9]* s' "$out/torch_build.log")"
  run torch_test 300 env KVC_TORCH_BUILD_DIR="$tdir" python3 -m pytest -q -p no:cacheprovider "$here/examples/05_torch_op"
  result[torch_test]="${result[torch_test]} $(tail -n1 "$out/torch_test.log")"
fi
CS="compute-sanitizer --error-exitcode 99"
# The sanitizers slow kernels 10-100x: the whole suite under memcheck, the shared-memory
# kernels (every op, every ratio shape) under racecheck.
run memcheck 180 $CS --tool memcheck "$bin/kvc_device_tests"
run racecheck 150 $CS --tool racecheck "$bin/kvc_device_tests" \
  -tc="*fused*,*every compiled ratio*,*longer than the ring*,*Op B: every layout*,*40000 tokens*"
echo
echo "| step | result |"
echo "|---|---|"
for k in device memcheck racecheck torch_build torch_test bench $(printf '%s\n' "${!result[@]}" | grep kvc_example | sort); do
  [[ -n ${result[$k]:-} ]] && echo "| $k | ${result[$k]} |"
done
