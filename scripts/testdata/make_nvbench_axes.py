#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes nvbench_axes.json (beside this file), the test fixture of kvc_nvbench's axes after
issue 15's last step: PDL on compress and insert, Data (rotating | hot), latency_floor, a
state skipped for a reason and one that failed. nvbench's JSON format 1.0.0, the structure of
nvbench_small.json (whose meta and devices it copies); times are chosen, not measured.
scripts/test_bench_report.py and test_bench_compare.py read it.

    python3 scripts/testdata/make_nvbench_axes.py
"""
import copy
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
LAYOUTS = ["fp8_ds_mla", "bf16_rows", "fp8_rows", "mxfp8", "nvfp4", "nvfp4_rows", "fp8_ds_mla_v32"]
SHAPES = ["decode 64x2", "decode 256x2", "decode 1024x4", "decode 128x6", "prefill 1x8192",
          "prefill 1x32768 @odd", "prefill 4x16384", "mixed 2x2048+192x2"]
LIM = {"min_samples": 10, "min_time": 0.1, "max_noise": 0.01, "skip_time": -1.0, "timeout": 5.0}

def axis(name, typ, values):
    if typ == "type":
        vals = [{"input_string": str(v), "description": desc, "is_active": True} for v, desc in values]
    elif typ == "int64":
        vals = [{"input_string": str(v), "description": "", "value": v} for v in values]
    else:
        vals = [{"input_string": v, "description": "", "value": v} for v in values]
    return {"name": name, "type": typ, "flags": "", "values": vals}

RATIO = axis("Ratio", "type", [(r, f"nvbench::enum_type<{r}, int>") for r in (1, 2, 4, 128)])
LAYOUT = axis("Layout", "type", [(l, "kvc::CacheLayout") for l in LAYOUTS])

def summ(tag, name, typ, value, hint=None, desc="", hide=None):
    s = {"tag": tag, "name": name, "description": desc}
    if hint: s["hint"] = hint
    if hide: s["hide"] = hide
    s["data"] = [{"name": "value", "type": typ, "value": repr(float(value)) if typ == "float64" else str(value)}]
    return s

def times(batch_us, cold_us, launches, per_launch=True):
    out = [summ("nv/cold/sample_size", "Samples", "int64", 1000, "sample_size", "Number of isolated kernel executions"),
           summ("nv/cold/time/gpu/mean", "GPU Time", "float64", cold_us * launches * 1e-6, "duration",
                "Mean isolated kernel execution time (measured with CUDA events)"),
           summ("nv/batch/sample_size", "Samples", "int64", 5000, "sample_size", "Number of batch kernel executions"),
           summ("nv/batch/time/gpu/mean", "Batch GPU", "float64", batch_us * launches * 1e-6, "duration",
                "Mean batch kernel execution time (measured by CUDA events)"),
           summ("kvc/launches", "Launches", "int64", launches, desc="launches per nvbench launch (replay)",
                hide="kvcompress metadata (JSON only)")]
    if per_launch:
        out += [summ("kvc/batch/time_per_launch", "Batch GPU/launch", "float64", batch_us * 1e-6, "duration"),
                summ("kvc/cold/time_per_launch", "Cold GPU/launch", "float64", cold_us * 1e-6, "duration")]
    return out

def state(axes_vals, summaries=None, skip=None, tci=0):
    name = "Device=0 " + " ".join(f"{n}={v}" for n, t, v in axes_vals)
    st = {"name": name, **LIM, "device": 0, "type_config_index": tci,
          "axis_values": [{"name": n, "type": t, "value": str(v)} for n, t, v in axes_vals]}
    if skip:
        st["summaries"] = []
        st["is_skipped"] = True
        st["skip_reason"] = skip
    else:
        st["summaries"] = summaries
        st["is_skipped"] = False
    return st

def op_state(ratio, layout, shape, pdl, data, launch, batch, cold, tokens, nbytes, skip=None, with_layout=True):
    ax = [("Ratio", "string", ratio)]
    if with_layout: ax.append(("Layout", "string", layout))
    ax += [("Shape", "string", shape), ("PDL", "int64", pdl), ("Data", "string", data), ("Launch", "string", launch)]
    if skip: return state(ax, skip=skip)
    s = times(batch, cold, 20)
    s += [summ("kvc/sets", "Input sets", "int64", 1 if data == "hot" else 8, desc="input sets the launches rotate through",
               hide="kvcompress metadata (JSON only)"),
          summ("kvc/tokens", "Tokens", "int64", tokens, desc="tokens per op call", hide="kvcompress metadata (JSON only)"),
          summ("kvc/bytes", "Bytes/launch", "float64", nbytes, "bytes", "bytes one op launch moves (count_bytes)",
               hide="kvcompress metadata (JSON only)")]
    return state(ax, s)

def bench(name, index, axes, states):
    return {"name": name, "index": index, **LIM, "devices": [0], "axes": axes, "states": states}

OP_AXES = [axis("Shape", "string", SHAPES), axis("PDL", "int64", [0, 1]), axis("Data", "string", ["rotating"]),
           axis("Launch", "string", ["graph", "stream"])]
A = 397060
B_FP8, B_NVFP4 = 240640, 230000
compress = bench("compress", 0, [RATIO] + OP_AXES, [
    op_state(2, None, "decode 64x2", 0, "rotating", "graph", 1.70, 2.10, 128, A, with_layout=False),
    op_state(2, None, "decode 64x2", 0, "rotating", "stream", 5.20, 5.60, 128, A, with_layout=False),
    op_state(2, None, "decode 64x2", 1, "rotating", "graph", 1.40, 1.90, 128, A, with_layout=False),
    op_state(2, None, "decode 64x2", 1, "rotating", "stream", 4.90, 5.30, 128, A, with_layout=False),
    op_state(2, None, "decode 64x2", 0, "hot", "graph", 1.50, 2.00, 128, A, with_layout=False),
    op_state(4, None, "decode 64x2", 0, "rotating", "graph", 0, 0, 0, 0, with_layout=False,
             skip="Unexpected error: kvc::compress: ratio 4 is not in the compiled list KVC_RATIOS (1, 2)"),
])
insert = bench("insert", 1, [RATIO, LAYOUT] + OP_AXES, [
    op_state(2, "fp8_ds_mla", "decode 64x2", 0, "rotating", "graph", 2.30, 2.60, 128, B_FP8),
    op_state(2, "fp8_ds_mla", "decode 64x2", 1, "rotating", "graph", 1.90, 2.40, 128, B_FP8),
    op_state(2, "nvfp4", "decode 64x2", 0, "rotating", "graph", 2.50, 2.90, 128, B_NVFP4),
    op_state(2, "nvfp4", "decode 64x2", 1, "rotating", "graph", 0, 0, 0, 0,
             skip="Op B with PDL is measured with fp8_ds_mla only"),
])
def copy_state(ratio, layout, shape, op, batch, nbytes):
    ax = [("Ratio", "string", ratio), ("Layout", "string", layout), ("Shape", "string", shape), ("Op", "string", op)]
    s = times(batch, batch * 1.3, 20) + [
        summ("kvc/tokens", "Tokens", "int64", 128, desc="tokens per op call", hide="kvcompress metadata (JSON only)"),
        summ("kvc/bytes", "Bytes/launch", "float64", nbytes, "bytes", "bytes one copy launch moves (read + write)",
             hide="kvcompress metadata (JSON only)")]
    return state(ax, s)
copyb = bench("copy", 4, [RATIO, LAYOUT, axis("Shape", "string", SHAPES),
                          axis("Op", "string", ["compress", "insert", "fused", "step"])], [
    copy_state(2, "fp8_ds_mla", "decode 64x2", "compress", 1.30, A),
    copy_state(2, "fp8_ds_mla", "decode 64x2", "insert", 1.28, B_FP8),
    copy_state(2, "nvfp4", "decode 64x2", "insert", 1.10, B_NVFP4),
])
peak = bench("copy_peak", 5, [], [state([], times(138.0, 140.0, 20) + [
    summ("kvc/bytes", "Bytes/launch", "float64", 536870912, "bytes", "bytes one copy launch moves (read + write)",
         hide="kvcompress metadata (JSON only)")])])
empty = bench("empty", 6, [], [state([], times(0.62, 0.90, 20))])
def floor_state(trips, blocks, pdl, batch, cold):
    return state([("Trips", "int64", trips), ("Blocks", "int64", blocks), ("PDL", "int64", pdl)], times(batch, cold, 20))
floor = bench("latency_floor", 7, [axis("Trips", "int64", [0, 1, 2, 3, 4]), axis("Blocks", "int64", [64, 256]),
                                   axis("PDL", "int64", [0, 1])], [
    floor_state(0, 64, 0, 1.10, 1.50), floor_state(0, 64, 1, 0.80, 1.20),
    floor_state(2, 64, 0, 2.00, 3.50), floor_state(2, 64, 1, 1.60, 3.10),
    floor_state(2, 256, 0, 2.20, 3.90),
])
with open(os.path.join(HERE, "nvbench_small.json")) as f:
    src = json.load(f)
root = {"meta": copy.deepcopy(src["meta"]), "devices": copy.deepcopy(src["devices"]),
        "benchmarks": [compress, insert, copyb, peak, empty, floor]}
root["meta"]["argv"] = ["./kvc_nvbench", "--json", "nvbench.json"]
with open(os.path.join(HERE, "nvbench_axes.json"), "w") as f:
    json.dump(root, f, indent=1)
