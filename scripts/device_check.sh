#!/usr/bin/env bash
# GPU check of a build: device tests, the examples, the benchmark (when present), the torch
# op (KVC_TORCH_CHECK=1: cold JIT build, timed, and its pytest; KVC_TORCH_TEST=0 skips the
# pytest), the peer comparison (KVC_PEER_CHECK=1: .peer/peer_bench.py, a copy of
# ../shared/peer, against the torch op), then compute-sanitizer memcheck and racecheck
# (KVC_SANITIZE=0 skips them); prints a short table last. Used on the lent GPU machine:
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
here=$(cd "$(dirname "$0")/.." && pwd)
if [[ ${KVC_TORCH_CHECK:-0} == 1 ]]; then
  # examples/05_torch_op: a cold just-in-time build (timed), on the CPUs while the device
  # tests run; its pytest and the peer comparison follow the benchmark.
  tdir=$(mktemp -d)
  KVC_TORCH_BUILD_DIR="$tdir" timeout 400 python3 -c \
    "import sys,time; sys.path.insert(0,'$here/examples/05_torch_op'); import kvcompress_torch as k; t=time.time(); k.load(); print('torch op built in %.0f s' % (time.time()-t))" \
    >"$out/torch_build.log" 2>&1 &
  torch_pid=$!
fi
run device 200 "$bin/kvc_device_tests" --duration=true
[[ -x "$bin/kvc_debug_contract_tests" ]] && run debug_contract 60 "$bin/kvc_debug_contract_tests"
for ex in "$bin"/kvc_example_*; do
  [[ -x $ex ]] || continue
  name=$(basename "$ex")
  timeout 60 "$ex" >"$out/$name.log" 2>&1
  result[$name]="rc=$? $(tail -n1 "$out/$name.log")"
done
if [[ -x "$bin/kvc_bench" ]]; then
  run bench 240 "$bin/kvc_bench" --out "$out" ${KVC_BENCH_ARGS:-}
  python3 "$(dirname "$0")/bench_report.py" "$out/bench.json" --commit "${KVC_COMMIT:-unknown}" \
    --results "$out/RESULTS.md" --plot "$out/bench.png" >>"$out/bench.log" 2>&1
  sed -n '/## Targets/,/## All/p' "$out/RESULTS.md"
fi
if [[ ${KVC_TORCH_CHECK:-0} == 1 ]]; then
  wait "$torch_pid"
  torch_rc=$?
  result[torch_build]="rc=$torch_rc $(grep -o 'built in [0-9]* s' "$out/torch_build.log")"
  tail -n 5 "$out/torch_build.log"
  if [[ ${KVC_TORCH_TEST:-1} == 1 ]]; then
    run torch_test 300 env KVC_TORCH_BUILD_DIR="$tdir" python3 -m pytest -q -p no:cacheprovider "$here/examples/05_torch_op"
    result[torch_test]="${result[torch_test]} $(tail -n1 "$out/torch_test.log")"
  fi
  if [[ ${KVC_PEER_CHECK:-0} == 1 && -f "$here/.peer/peer_bench.py" ]]; then
    run peer 300 env KVC_TORCH_BUILD_DIR="$tdir" PYTHONUNBUFFERED=1 python3 "$here/.peer/peer_bench.py" \
      --ops "$here/examples/05_torch_op" --json "$out/peer.json" ${KVC_PEER_ARGS:-}
    sed -n '/^| shape/,$p' "$out/peer.log"
    [[ -f "$out/peer.json" ]] && python3 "$(dirname "$0")/peer_report.py" "$out/peer.json" \
      --commit "${KVC_COMMIT:-unknown}" --out "$out/PEER.md" >/dev/null
  fi
fi
if [[ ${KVC_SANITIZE:-1} == 1 ]]; then
CS="compute-sanitizer --error-exitcode 99"
# The sanitizers slow kernels 10-100x: the whole suite under memcheck, the shared-memory
# kernels (every op, every ratio shape) under racecheck.
run memcheck 180 $CS --tool memcheck "$bin/kvc_device_tests"
run racecheck 150 $CS --tool racecheck "$bin/kvc_device_tests" \
  -tc="*fused*,*every compiled ratio*,*longer than the ring*,*Op B: every layout*,*40000 tokens*"
fi
echo
echo "| step | result |"
echo "|---|---|"
for k in device debug_contract memcheck racecheck torch_build torch_test peer bench $(printf '%s\n' "${!result[@]}" | grep kvc_example | sort); do
  [[ -n ${result[$k]:-} ]] && echo "| $k | ${result[$k]} |"
done
