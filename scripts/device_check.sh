#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# GPU check of a build: device tests, the examples, the benchmark (kvc_nvbench, when present:
# its JSON, Markdown and scripts/bench_report.py's RESULTS.md in OUT_DIR; KVC_BENCH_ARGS adds
# kvc_nvbench arguments, split at spaces, e.g. "--quick"; KVC_BENCH_TIMEOUT, default 600 s), the torch
# package (KVC_TORCH_CHECK=1: `pip install --no-build-isolation --no-deps python/` from a
# clean python/build, timed, then its pytest and examples/05_torch_op/example.py;
# KVC_TORCH_TEST=0 skips those two), the peer comparison (KVC_PEER_CHECK=1:
# .peer/peer_bench.py, a copy of ../shared/peer, against the installed package `kvcompress`),
# then compute-sanitizer memcheck and racecheck
# (KVC_SANITIZE=0 skips them); prints a short table last. kvc_adversarial_tests (issue 13,
# when built) runs after the device tests and once more under memcheck; KVC_ADVERSARIAL=0
# skips both, KVC_ADVERSARIAL_ARGS adds arguments (e.g. "--filter A.r2."), and
# KVC_ADVERSARIAL_JOBS (default 4) sets how many case processes run at once. Used on the
# lent GPU machine:
#   scripts/device_check.sh <dir holding kvc_device_tests [kvc_nvbench, libnvbench.so]> [out_dir]
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
  result[$name]="rc=$rc $((SECONDS - start))s $(grep -E 'test cases:|ERROR SUMMARY|RACECHECK SUMMARY|wrote outside' "$out/$name.log" | tail -n1 | tr -s ' ')"
  tail -n 12 "$out/$name.log"
}
here=$(cd "$(dirname "$0")/.." && pwd)
if [[ ${KVC_TORCH_CHECK:-0} == 1 ]]; then
  # The torch package (python/): a clean ahead-of-time build and install (timed), on the
  # CPUs while the device tests run; its pytest and the peer comparison follow the benchmark.
  rm -rf "$here/python/build"
  (start=$SECONDS
   PIP_BREAK_SYSTEM_PACKAGES=1 timeout 600 python3 -m pip install --no-build-isolation --no-deps -v "$here/python" &&
     echo "torch package built in $((SECONDS - start)) s") >"$out/torch_build.log" 2>&1 &
  torch_pid=$!
fi
run device 200 "$bin/kvc_device_tests" --duration=true
[[ -x "$bin/kvc_debug_contract_tests" ]] && run debug_contract 60 "$bin/kvc_debug_contract_tests"
# Issue 13's adversarial tier: each case in a child process of its own, its last line
# "N cases, K wrote outside, F wrote foreign rows" (kvc_adversarial_tests --help).
adversarial=0
[[ ${KVC_ADVERSARIAL:-1} == 1 && -x "$bin/kvc_adversarial_tests" ]] && adversarial=1
adv_args=(--jobs "${KVC_ADVERSARIAL_JOBS:-4}" ${KVC_ADVERSARIAL_ARGS:-})
if [[ $adversarial == 1 ]]; then
  run adversarial 400 "$bin/kvc_adversarial_tests" "${adv_args[@]}"
  grep -E ' FAIL' "$out/adversarial.log" | head -n 40
fi
for ex in "$bin"/kvc_example_*; do
  [[ -x $ex ]] || continue
  name=$(basename "$ex")
  timeout 60 "$ex" >"$out/$name.log" 2>&1
  result[$name]="rc=$? $(tail -n1 "$out/$name.log")"
done
if [[ -x "$bin/kvc_nvbench" ]]; then
  run bench "${KVC_BENCH_TIMEOUT:-600}" "$bin/kvc_nvbench" --json "$out/nvbench.json" --md "$out/nvbench.md" \
    ${KVC_BENCH_ARGS:-}
  python3 "$(dirname "$0")/bench_report.py" "$out/nvbench.json" --commit "${KVC_COMMIT:-unknown}" \
    --results "$out/RESULTS.md" --plot "$out/bench.png" >>"$out/bench.log" 2>&1 &&
    sed -n '/## Targets/,/## All/p' "$out/RESULTS.md"
fi
if [[ ${KVC_TORCH_CHECK:-0} == 1 ]]; then
  wait "$torch_pid"
  torch_rc=$?
  result[torch_build]="rc=$torch_rc $(grep -o 'built in [0-9]* s' "$out/torch_build.log")"
  tail -n 5 "$out/torch_build.log"
  if [[ ${KVC_TORCH_TEST:-1} == 1 ]]; then
    # From the repository root: run from python/, the source folder would shadow the package.
    run torch_test 400 env -C "$here" python3 -m pytest -q -rs -p no:cacheprovider python/tests
    result[torch_test]="${result[torch_test]} $(tail -n1 "$out/torch_test.log")"
    run torch_example 200 python3 "$here/examples/05_torch_op/example.py"
    result[torch_example]="${result[torch_example]} $(tail -n1 "$out/torch_example.log")"
  fi
  if [[ ${KVC_PEER_CHECK:-0} == 1 && -f "$here/.peer/peer_bench.py" ]]; then
    run peer 300 env PYTHONUNBUFFERED=1 python3 "$here/.peer/peer_bench.py" \
      --json "$out/peer.json" ${KVC_PEER_ARGS:-}
    sed -n '/^| shape/,$p' "$out/peer.log"
    [[ -f "$out/peer.json" ]] && python3 "$(dirname "$0")/peer_report.py" "$out/peer.json" \
      --commit "${KVC_COMMIT:-unknown}" --out "$out/PEER.md" >/dev/null
  fi
fi
if [[ ${KVC_SANITIZE:-1} == 1 ]]; then
CS="compute-sanitizer --error-exitcode 99"
# The sanitizers slow kernels 10-100x: the whole suite under memcheck, the shared-memory
# kernels (every op, every ratio shape) under racecheck.
# KVC_MEMCHECK_ARGS: doctest filters for the memcheck run, split at spaces (write a space in a
# pattern as '?', e.g. -tce='*bounds:?prefill*' leaves out the slowest case).
run memcheck 240 $CS --tool memcheck "$bin/kvc_device_tests" ${KVC_MEMCHECK_ARGS:-}
run racecheck 150 $CS --tool racecheck "$bin/kvc_device_tests" \
  -tc="*fused*,*every compiled ratio*,*longer than the ring*,*Op B: every layout*,*40000 tokens*"
# Last, the slowest (one sanitized process per case): when a run is cut short, this goes.
if [[ $adversarial == 1 ]]; then
  # The case processes are sanitized too (--target-processes all): a case whose process
  # has a memcheck error exits 99 and fails (its own report goes to the parent, which prints
  # only the case line), so "0 wrote outside" with every case PASS means no errors; the
  # ERROR SUMMARY lines that reach this log are summed. API errors are not reported: the
  # stale-error cases provoke one (a failing cudaMalloc) on purpose.
  run adversarial_memcheck 600 $CS --tool memcheck --target-processes all --report-api-errors no \
    "$bin/kvc_adversarial_tests" "${adv_args[@]}" --timeout 300
  log="$out/adversarial_memcheck.log"
  errors=$(grep -o 'ERROR SUMMARY: [0-9]*' "$log" | awk '{s += $3} END {print s + 0}')
  result[adversarial_memcheck]="$(cut -d' ' -f1-2 <<<"${result[adversarial_memcheck]}") $(grep 'wrote outside' "$log" | tail -n1); memcheck: $errors errors in $(grep -c 'ERROR SUMMARY' "$log") processes"
fi
fi
echo
echo "| step | result |"
echo "|---|---|"
for k in device debug_contract adversarial memcheck adversarial_memcheck racecheck torch_build torch_test torch_example peer bench $(printf '%s\n' "${!result[@]}" | grep kvc_example | sort); do
  [[ -n ${result[$k]:-} ]] && echo "| $k | ${result[$k]} |"
done
