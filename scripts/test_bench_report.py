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
- scripts/testdata/nvbench_axes.json, the same format with the axes added in issue 15's last
  step: PDL on compress and insert, Data (rotating | hot), the latency_floor benchmark, a
  state skipped for a reason and one that failed ("Unexpected error: ..."); written by
  scripts/testdata/make_nvbench_axes.py in the structure of nvbench_small.json;
- kvc_bench's bench.json (the benchmark before kvc_nvbench): a small file written by the test
  and the recorded bench/history/results-2fed0fa-kvc_bench.json, which must stay readable;
- bench/results.json, the data of bench/RESULTS.md's generated tables (kvc_nvbench's JSON as
  the report reads it): the tables it regenerates are the ones RESULTS.md holds.
"""
import contextlib
import io
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
FIXTURE_AXES = os.path.join(HERE, "testdata", "nvbench_axes.json")
RECORDED = os.path.join(HERE, "..", "bench", "history", "results-2fed0fa-kvc_bench.json")
RESULTS_JSON = os.path.join(HERE, "..", "bench", "results.json")
RESULTS_MD = os.path.join(HERE, "..", "bench", "RESULTS.md")


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


class NvbenchAxes(unittest.TestCase):
    def setUp(self):
        self.data = bench_report.load(FIXTURE_AXES)
        self.rows = {(r["op"], r["layout"], r["shape"], r["ratio"], r["data"]): r for r in self.data["rows"]}

    def test_pdl_rows_of_single_ops(self):
        r = self.rows[("compress pdl", "-", "decode 64x2", 2, "rotating")]
        self.assertAlmostEqual(r["graph_us"], 1.40, places=6)
        self.assertAlmostEqual(r["stream_us"], 4.90, places=6)
        self.assertAlmostEqual(r["pct_copy"], 100 * 1.30 / 1.40, places=6)  # compress's copy
        r = self.rows[("insert pdl", "fp8_ds_mla", "decode 64x2", 2, "rotating")]
        self.assertAlmostEqual(r["graph_us"], 1.90, places=6)
        self.assertAlmostEqual(r["pct_copy"], 100 * 1.28 / 1.90, places=6)  # insert fp8_ds_mla's copy
        self.assertNotIn(("insert pdl", "nvfp4", "decode 64x2", 2, "rotating"), self.rows)  # skipped state

    def test_hot_rows_are_separate(self):
        hot = self.rows[("compress", "-", "decode 64x2", 2, "hot")]
        rot = self.rows[("compress", "-", "decode 64x2", 2, "rotating")]
        self.assertAlmostEqual(hot["graph_us"], 1.50, places=6)
        self.assertAlmostEqual(rot["graph_us"], 1.70, places=6)
        self.assertIsNone(hot["stream_us"])

    def test_row_order(self):
        order = [(r["data"], r["op"], r["layout"]) for r in self.data["rows"]]
        self.assertEqual(order, [
            ("rotating", "compress", "-"), ("rotating", "compress pdl", "-"), ("rotating", "insert", "fp8_ds_mla"),
            ("rotating", "insert", "nvfp4"), ("rotating", "insert pdl", "fp8_ds_mla"), ("hot", "compress", "-")])

    def test_failed_state_is_reported_not_a_row(self):
        self.assertEqual(len(self.data["failed"]), 1)
        bench, state, reason = self.data["failed"][0]
        self.assertEqual(bench, "compress")
        self.assertIn("Ratio=4", state)
        self.assertTrue(reason.startswith("Unexpected error"))
        self.assertFalse(any(r["ratio"] == 4 for r in self.data["rows"]))

    def test_latency_floor(self):
        floor = {(f["trips"], f["blocks"], f["pdl"]): f for f in self.data["latency_floor"]}
        self.assertEqual(len(floor), 5)
        self.assertAlmostEqual(floor[(2, 64, 1)]["us"], 1.60, places=6)
        self.assertAlmostEqual(floor[(2, 64, 1)]["cold_us"], 3.10, places=6)

    def test_results_md(self):
        with tempfile.TemporaryDirectory() as tmp:
            md = run_report(FIXTURE_AXES, tmp)
        self.assertIn("- **1 state(s) failed**; the first: compress `Device=0 Ratio=4 Shape=decode 64x2 PDL=0 "
                      "Data=rotating Launch=graph`: Unexpected error: kvc::compress:", md)
        # PDL table: the single ops too; hot rows stay out of it and out of the targets
        self.assertIn("| decode 64x2 | 2 | compress | 1.70 | 1.40 | 5.20 | 4.90 |", md)
        self.assertIn("| decode 64x2 | 2 | insert | 2.30 | 1.90 | - | - |", md)
        self.assertIn("| decode 64x2 | 128 | 2 | compress (hot) | - | 0.40 | 1.50 | - | 2.00 | 265 | 86.7 |", md)
        self.assertIn("| decode 64x2 | 128 | 2 | compress pdl | - | 0.40 | 1.40 | 4.90 | 1.90 | 284 | 92.9 |", md)
        self.assertIn("## Latency floor", md)
        self.assertIn("| empty | 64 | 1.10 | 0.80 | 1.50 | 1.20 |", md)
        self.assertIn("| 2 dependent loads + store | 64 | 2.00 | 1.60 | 3.50 | 3.10 |", md)
        self.assertIn("| 2 dependent loads + store | 256 | 2.20 | - | 3.90 | - |", md)
        self.assertNotIn("kvc_bench", md)


class ReportCommandLine(unittest.TestCase):
    def run_main(self, argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = bench_report.main(argv)
        return rc, out.getvalue(), err.getvalue()

    def test_missing_json(self):
        with tempfile.TemporaryDirectory() as tmp:
            missing = os.path.join(tmp, "nvbench.json")
            rc, _, err = self.run_main([missing, "--results", os.path.join(tmp, "R.md")])
            self.assertEqual(rc, 1)
            self.assertIn("does not exist", err)
            rc, _, _ = self.run_main([missing, "--skip-missing", "--results", os.path.join(tmp, "R.md")])
            self.assertEqual(rc, 77)
            self.assertFalse(os.path.exists(os.path.join(tmp, "R.md")))

    def test_print(self):
        with tempfile.TemporaryDirectory() as tmp:
            rc, out, _ = self.run_main([FIXTURE_AXES, "--print", "--commit", "abc1234", "--results",
                                        os.path.join(tmp, "R.md"), "--plot", os.path.join(tmp, "p.png")])
            self.assertEqual(rc, 0)
            with open(os.path.join(tmp, "R.md")) as f:
                self.assertIn(f.read(), out)


class KvcBenchInput(unittest.TestCase):
    def test_recorded_results_json_stays_readable(self):
        data = bench_report.load(RECORDED)
        self.assertNotIn("source", data)  # kvc_bench's format, read as it is
        ops = {r["op"] for r in data["rows"]}
        self.assertTrue({"compress", "compress pdl", "insert", "insert pdl", "fused", "A+B", "A+B pdl"} <= ops, ops)
        with tempfile.TemporaryDirectory() as tmp:
            md = run_report(RECORDED, tmp)
        self.assertIn("measured with kvc_bench (the benchmark before kvc_nvbench", md)
        self.assertIn("## Programmatic dependent launch (fp8_ds_mla)", md)
        self.assertNotIn("cold us", md)

    def test_recorded_results_match_results_md(self):
        # bench/RESULTS.md's generated part (Targets to the end) is what bench/results.json gives.
        data = bench_report.load(RESULTS_JSON)
        self.assertEqual(data.get("source"), "kvc_nvbench")
        with tempfile.TemporaryDirectory() as tmp:
            md = run_report(RESULTS_JSON, tmp)
        generated = md[md.index("## Targets"):]
        with open(RESULTS_MD) as f:
            recorded = f.read()
        self.assertIn("## Latency floor", generated)
        self.assertEqual(recorded[recorded.index("## Targets"):], generated)

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
