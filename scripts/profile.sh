#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Nsight Compute profiles of single kernels of the benchmark, for bench/NOTES.md analysis:
# speed of light, occupancy, warp stall reasons, memory traffic, and the SASS lines with the
# most stall samples. Needs ncu with hardware counters (the lent H200's Firecracker runtime).
#   scripts/profile.sh <dir holding kvc_nvbench> [out_dir] [case ...]
# A case is "kernel-regex|shape|ratio|op[|layout]", e.g. "compress_kernel|decode 64x2|4|compress":
# shape is a Shape name of kvc_nvbench (exact: "prefill 1x32768 @odd"), op a RESULTS.md op
# (compress, compress pdl, insert, insert pdl, fused, fused pdl, A+B, A+B pdl), layout a
# Layout (default: every layout the op is measured with; the regex picks the kernel). The case
# becomes one filtered kvc_nvbench run with nvbench's --profile (each state run once: one
# graph replay of at least 20 launches, no warm-up, no batch measurement, no blocking kernel),
# Launch=graph (and Data=rotating, the default); ncu skips the first 10 matching launches and profiles the
# next, mid-graph. Without cases, the default list below runs. KVC_NCU_NAME_BASE=demangled
# matches the regex against the demangled name with its template arguments, e.g.
# "insert_kernel<.int.2, .int.512, kvc::v0_2_0::Nvfp4Layout,|decode 1024x4|2|insert" for one
# layout (ncu writes the arguments as "(int)2"; "." stands for the parentheses).
# KVC_NCU_ARGS adds ncu options, split at spaces, e.g. "--cache-control none
# --warp-sampling-interval 0" for a decode launch as graph replays see it (hot L2) with the
# densest stall sampling (a 2 us kernel otherwise gets ~150 samples). KVC_NVBENCH_ARGS adds
# kvc_nvbench options, split at spaces (e.g. "--hot": Data=hot, one input set).
set -uo pipefail
bin=${1:?usage: profile.sh BIN_DIR [OUT_DIR] [CASE...]}
out=${2:-${OUT:-/tmp/kvc_profile}}
shift $(( $# >= 2 ? 2 : 1 ))
mkdir -p "$out"
cases=("$@")
if [[ ${#cases[@]} -eq 0 ]]; then
  cases=(
    "compress_kernel|prefill 1x32768 @odd|2|compress"
    "insert_kernel|prefill 1x32768 @odd|2|insert|fp8_ds_mla"
    "compress_kernel|prefill 1x32768 @odd|2|fused|fp8_ds_mla"
    "compress_kernel|prefill 1x32768 @odd|128|compress"
    "compress_kernel|decode 64x2|4|compress"
    "compress_kernel|decode 64x2|128|compress"
  )
fi
# kvc_nvbench's benchmark and PDL axis of a RESULTS.md op name.
op_args() {
  case "$1" in
    compress) echo "compress 0" ;;   "compress pdl") echo "compress 1" ;;
    insert) echo "insert 0" ;;       "insert pdl") echo "insert 1" ;;
    fused) echo "fused 0" ;;         "fused pdl") echo "fused 1" ;;
    "A+B") echo "step 0" ;;          "A+B pdl") echo "step 1" ;;
    *) return 1 ;;
  esac
}
sections=(--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats
          --section MemoryWorkloadAnalysis --section SchedulerStats --section SourceCounters --section InstructionStats)
n=0
for c in "${cases[@]}"; do
  IFS='|' read -r kernel shape ratio op layout <<<"$c"
  n=$((n + 1))
  name="$n-$(echo "$op-r$ratio-$shape${layout:+-$layout}" | tr ' x@+' '____')"
  if ! read -r benchmark pdl < <(op_args "$op"); then
    echo "== $name: unknown op '$op' (compress, compress pdl, insert, insert pdl, fused, fused pdl, A+B, A+B pdl)"
    continue
  fi
  args=(-b "$benchmark" --profile -a "Shape=$shape" -a "Ratio=$ratio" -a "PDL=$pdl" -a Launch=graph)
  [[ -n ${layout:-} ]] && args+=(-a "Layout=$layout")
  echo "== $name: $kernel ($shape, R=$ratio, $op${layout:+, $layout}): kvc_nvbench ${args[*]}"
  # One replay per state (--profile); skip 10 launches of the graph, profile the 11th.
  timeout 300 ncu --clock-control none --kernel-name-base "${KVC_NCU_NAME_BASE:-function}" \
    -k "regex:$kernel" --launch-skip 10 --launch-count 1 ${KVC_NCU_ARGS:-} \
    "${sections[@]}" -o "$out/$name" -f \
    "$bin/kvc_nvbench" "${args[@]}" ${KVC_NVBENCH_ARGS:-} >"$out/$name.run.log" 2>&1
  echo "ncu rc=$?" >>"$out/$name.run.log"
  ncu -i "$out/$name.ncu-rep" --print-units base >"$out/$name.txt" 2>&1
  # The SASS lines with the most warp stall samples (source page, CSV).
  ncu -i "$out/$name.ncu-rep" --page source --csv --print-source sass >"$out/$name.sass.csv" 2>/dev/null
  python3 - "$out/$name.sass.csv" >"$out/$name.hot.txt" 2>&1 <<'EOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
# The page starts with a "Kernel Name" line; the header is the first row naming "Source".
starts = [i for i, r in enumerate(rows) if any(h.strip().lower() == "source" for h in r)]
if not starts:
    sys.exit("no source page: " + repr(rows[:3]))
head = rows[starts[0]]
rows = rows[starts[0]:]
def col(name):
    for i, h in enumerate(head):
        if h.strip().lower() == name:
            return i
    return None
src = col("source")
samp = col("warp stall sampling (all samples)")
if samp is None:
    samp = next((i for i, h in enumerate(head) if "stall sampling" in h.lower()), None)
if src is None or samp is None:
    print("columns:", head)
    sys.exit(0)
def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0
body = rows[1:]
total = sum(num(r[samp]) for r in body if len(r) > samp) or 1.0
top = sorted(range(len(body)), key=lambda i: -num(body[i][samp]) if len(body[i]) > samp else 0)[:25]
print(f"{len(body)} SASS lines, {total:.0f} stall samples; top lines (index, % samples, SASS):")
for i in sorted(top):
    r = body[i]
    print(f"{i:5d} {100 * num(r[samp]) / total:5.1f}%  {r[src].strip()}")
# Every executed SASS line with its warp-level execution count (where the instructions go).
ex = next((i for i, h in enumerate(head) if h.strip().lower() == "instructions executed"), None)
if ex is None:
    print("no 'Instructions Executed' column:", head)
else:
    with open(sys.argv[1][:-len(".sass.csv")] + ".exec.txt", "w") as f:
        f.write(f"# index, instructions executed (warp level), SASS; {sum(num(r[ex]) for r in body if len(r) > ex):.0f} in all\n")
        for i, r in enumerate(body):
            if len(r) > ex and num(r[ex]) > 0:
                f.write(f"{i:5d} {num(r[ex]):9.0f}  {r[src].strip()}\n")
EOF
  # KVC_PROFILE_KEEP_CSV=1 keeps the whole source page.
  [[ ${KVC_PROFILE_KEEP_CSV:-0} == 1 ]] || rm -f "$out/$name.sass.csv"
  grep -E 'Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit Registers|Warp Cycles Per Issued|Executed Instructions|Stall' "$out/$name.txt" | head -30
done
