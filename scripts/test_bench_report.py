#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scripts/bench_report.py on both inputs, without a GPU (unittest; pytest collects it too):

    python3 scripts/test_bench_report.py        or        python3 -m pytest scripts

- kvc_nvbench's JSON: scripts/testdata/nvbench_small.json, a hand-made file in nvbench's
  JSON format (file version 1.0.0, as nvbench's json_printer writes it and the cuda-bench
  wheel's nvbench_compare.py reads it: benchmarks[].states[] with axis_values and summaries
  [{tag, name, ..., data: [{name, type, value}]}], numbers as strings) holding kvc_nvbench's
  benchmarks and summaries, with skipped states, a state without the kvc/ per-launch
  summaries (the time is then nv/batch/time/gpu/mean / kvc/launches) and rows without a
  stream time;
- kvc_bench's bench.json: a small file written by the test.
"""
import json
import os
import sys
import tempfile
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_report  # noqa: E402

FIXTURE = os.path.join(HERE, "testdata", "nvbench_small.json")


def run_report(path, tmp):
    results = os.path.join(tmp, "RESULTS.md")
    argv = ["bench_report.py", path, "--commit", "abc1234", "--date", "2026-12-05",
            "--results", results, "--plot", os.path.join(tmp, "bench.png")]
    with mock.patch.object(sys, "argv", argv), mock.patch("builtins.print"):
        bench_report.main()
    with open(results) as f:
        return f.read()


class NvbenchInput(unittest.TestCase):
    def setUp(self):
        self.data = bench_report.load(FIXTURE)
        self.rows = {(r["op"], r["layout"], r["shape"], r["ratio"]): r for r in self.data["rows"]}

    def test_header_fields(self):
        self.assertEqual(self.data["source"], "kvc_nvbench")
        self.assertEqual(self.data["gpu"], "NVIDIA H200")
        self.assertEqual(self.data["sms"], 132)
        self.assertEqual(self.data["l2_bytes"], 62914560)
        self.assertAlmostEqual(self.data["empty_kernel_us"], 0.62, places=6)
        # copy_peak: kvc/bytes (512 MiB read + write) / batch time per launch
        self.assertAlmostEqual(self.data["copy_512MiB_gbps"], 536870912 / 138.0 / 1e3, places=3)

    def test_rows_and_skips(self):
        self.assertEqual(len(self.data["rows"]), 8)  # skipped states and the baselines are no rows
        self.assertNotIn(("compress", "-", "decode 64x2", 128), self.rows)
        self.assertNotIn(("insert", "bf16_rows", "decode 64x2", 4), self.rows)

    def test_graph_stream_cold_merge(self):
        r = self.rows[("compress", "-", "decode 64x2", 2)]
        self.assertAlmostEqual(r["graph_us"], 1.70, places=6)   # Launch=graph, batch
        self.assertAlmostEqual(r["stream_us"], 5.20, places=6)  # Launch=stream, batch
        self.assertAlmostEqual(r["cold_us"], 2.10, places=6)    # Launch=graph, cold
        self.assertEqual(r["tokens"], 128)
        self.assertEqual(r["bytes"], 397060)
        self.assertAlmostEqual(r["gbps"], 397060 / 1.70 / 1e3, places=6)
        self.assertIsNone(self.rows[("insert", "fp8_ds_mla", "decode 64x2", 2)]["stream_us"])

    def test_time_without_kvc_summaries(self):
        r = self.rows[("compress", "-", "decode 64x2", 4)]
        self.assertAlmostEqual(r["graph_us"], 3.00, places=6)  # nv/batch/time/gpu/mean / 20
        self.assertAlmostEqual(r["cold_us"], 3.40, places=6)

    def test_ops_pdl_and_copy_matching(self):
        pct = lambda key: self.rows[key]["pct_copy"]
        self.assertAlmostEqual(pct(("compress", "-", "decode 64x2", 2)), 100 * 1.30 / 1.70, places=6)
        self.assertAlmostEqual(pct(("compress", "-", "decode 64x2", 4)), 100 * 1.20 / 3.00, places=6)
        self.assertAlmostEqual(pct(("insert", "fp8_ds_mla", "decode 64x2", 2)), 100 * 1.28 / 2.30, places=6)
        self.assertAlmostEqual(pct(("fused", "fp8_ds_mla", "decode 64x2", 2)), 100 * 1.40 / 2.80, places=6)
        self.assertAlmostEqual(pct(("fused pdl", "fp8_ds_mla", "decode 64x2", 2)), 100 * 1.40 / 2.50, places=6)
        self.assertAlmostEqual(pct(("A+B", "fp8_ds_mla", "decode 64x2", 2)), 100 * 1.50 / 4.00, places=6)
        self.assertAlmostEqual(pct(("A+B pdl", "fp8_ds_mla", "decode 64x2", 2)), 100 * 1.50 / 3.40, places=6)

    def test_row_order_is_kvc_benchs(self):
        order = [(r["shape"], r["ratio"], r["op"]) for r in self.data["rows"]]
        self.assertEqual(order, [
            ("decode 64x2", 2, "compress"), ("decode 64x2", 2, "insert"), ("decode 64x2", 2, "fused"),
            ("decode 64x2", 2, "A+B"), ("decode 64x2", 2, "A+B pdl"), ("decode 64x2", 2, "fused pdl"),
            ("decode 64x2", 4, "compress"), ("prefill 1x32768 @odd", 2, "compress")])

    def test_results_md(self):
        with tempfile.TemporaryDirectory() as tmp:
            md = run_report(FIXTURE, tmp)
        self.assertIn("- GPU: NVIDIA H200 (132 SMs, L2 63 MB)", md)
        self.assertIn("measured with kvc_nvbench", md)
        self.assertIn("| Op A, ratios 1 and 2, T >= 32768: >= 92% of copy | prefill 1x32768 @odd: 55.00 us, 93% | yes |",
                      md)
        self.assertIn("| Op B fp8_ds_mla, T >= 32768: >= 80% of copy | not measured | - |", md)
        self.assertIn("| decode 64x2 | 2 | fused | 2.80 | 2.50 | - | 6.00 |", md)  # PDL table, no plain stream
        self.assertIn("| shape | tokens | ratio | op | layout | MB | graph us | stream us | cold us | GB/s | % copy |", md)
        self.assertIn("| decode 64x2 | 128 | 2 | compress | - | 0.40 | 1.70 | 5.20 | 2.10 | 234 | 76.5 |", md)

    def test_missing_copy_is_not_measured(self):
        with open(FIXTURE) as f:
            root = json.load(f)
        root["benchmarks"] = [b for b in root["benchmarks"] if b["name"] != "copy"]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "nvbench.json")
            with open(path, "w") as f:
                json.dump(root, f)
            md = run_report(path, tmp)
        self.assertIn("| Op A, ratios 1 and 2, T >= 32768: >= 92% of copy | prefill 1x32768 @odd: 55.00 us, -% | **no** |",
                      md)
        self.assertIn("| decode 64x2 | 128 | 2 | compress | - | 0.40 | 1.70 | 5.20 | 2.10 | 234 | - |", md)


class KvcBenchInput(unittest.TestCase):
    def test_bench_json_unchanged_format(self):
        data = {"gpu": "NVIDIA H200", "sms": 132, "l2_bytes": 62914560, "empty_kernel_us": 0.621,
                "copy_512MiB_gbps": 3889.1, "rows": [
                    {"op": "compress", "layout": "-", "shape": "decode 64x2", "ratio": 1, "tokens": 128,
                     "bytes": 397060, "graph_us": 1.658, "stream_us": 5.194, "copy_us": 1.307, "gbps": 239.5,
                     "pct_copy": 78.9}]}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bench.json")
            with open(path, "w") as f:
                json.dump(data, f)
            md = run_report(path, tmp)
        self.assertIn("times are the median per launch of CUDA-graph replays", md)
        self.assertIn("| shape | tokens | ratio | op | layout | MB | graph us | stream us | GB/s | % copy |", md)
        self.assertIn("| decode 64x2 | 128 | 1 | compress | - | 0.40 | 1.66 | 5.19 | 240 | 78.9 |", md)
        self.assertNotIn("cold us", md)


if __name__ == "__main__":
    unittest.main()
