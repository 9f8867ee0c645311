# SPDX-License-Identifier: Apache-2.0
"""Tests of scripts/bench_compare.py (no GPU): kvc_nvbench JSON runs of two builds, made from
scripts/testdata/nvbench_axes.json with chosen batch times; the minimum over runs, states in
both builds only, op states named as RESULTS.md rows, the other benchmarks by their axes.
And scripts/bench_ab.sh end to end, with two stand-in "binaries" that write such JSON."""
import contextlib
import copy
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_compare  # noqa: E402

with open(os.path.join(HERE, "testdata", "nvbench_axes.json")) as _f:
    FIXTURE = json.load(_f)

COMPRESS = "Device=0 Ratio=2 Shape=decode 64x2 PDL=0 Data=rotating Launch=graph"
COMPRESS_PDL_STREAM = "Device=0 Ratio=2 Shape=decode 64x2 PDL=1 Data=rotating Launch=stream"
COMPRESS_HOT = "Device=0 Ratio=2 Shape=decode 64x2 PDL=0 Data=hot Launch=graph"
FLOOR = "Device=0 Trips=2 Blocks=64 PDL=1"


def run_json(times, keep=None):
    """The fixture with the batch time per launch of the named states set to `times` (state
    name -> us); with `keep`, only those states (and no failed one)."""
    root = copy.deepcopy(FIXTURE)
    for bench in root["benchmarks"]:
        if keep is not None:
            bench["states"] = [st for st in bench["states"] if st["name"] in keep]
        for st in bench["states"]:
            if st["name"] in times:
                for summ in st["summaries"]:
                    if summ["tag"] == "kvc/batch/time_per_launch":
                        summ["data"][0]["value"] = repr(times[st["name"]] * 1e-6)
    return root


class BenchCompareTest(unittest.TestCase):
    def write(self, root):
        f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        json.dump(root, f) if not isinstance(root, str) else f.write(root)
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name

    def run_main(self, argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = bench_compare.main(argv)
            except SystemExit as e:
                rc = e.code
        return rc, out.getvalue(), err.getvalue()

    def lines(self, out, start):
        return [l for l in out.splitlines() if l.startswith(start)]

    def test_minimum_over_runs_and_change(self):
        keep = {COMPRESS, COMPRESS_PDL_STREAM}
        old = [self.write(run_json({COMPRESS: 2.5, COMPRESS_PDL_STREAM: 5.0}, keep)),
               self.write(run_json({COMPRESS: 2.0, COMPRESS_PDL_STREAM: 6.0}, keep))]
        new = [self.write(run_json({COMPRESS: 1.9, COMPRESS_PDL_STREAM: 5.5}, keep)),
               self.write(run_json({COMPRESS: 1.8, COMPRESS_PDL_STREAM: 5.25}, keep))]
        rc, out, _ = self.run_main(["--old", *old, "--new", *new])
        self.assertEqual(rc, 0)
        self.assertEqual(self.lines(out, "| decode"), [
            "| decode 64x2 | 2 | compress | - | graph | 2.00 | 1.80 | -10.0 % |",
            "| decode 64x2 | 2 | compress pdl | - | stream | 5.00 | 5.25 | +5.0 % |"])

    def test_hot_layouts_and_other_benchmarks(self):
        rc, out, _ = self.run_main(["--old", self.write(run_json({COMPRESS_HOT: 1.0, FLOOR: 2.0})),
                                    "--new", self.write(run_json({COMPRESS_HOT: 1.1, FLOOR: 1.5}))])
        self.assertEqual(rc, 0)
        self.assertIn("| decode 64x2 | 2 | compress (hot) | - | graph | 1.00 | 1.10 | +10.0 % |", out)
        self.assertIn("| decode 64x2 | 2 | insert pdl | fp8_ds_mla | graph | 1.90 | 1.90 | +0.0 % |", out)
        self.assertIn("| decode 64x2 | 2 | insert | nvfp4 | graph | 2.50 | 2.50 | +0.0 % |", out)
        self.assertIn("| decode 64x2 | 2 | copy Op=insert | nvfp4 | graph | 1.10 | 1.10 | +0.0 % |", out)
        self.assertIn("| - | - | latency_floor Trips=2 Blocks=64 PDL=1 | - | graph | 2.00 | 1.50 | -25.0 % |", out)
        self.assertIn("| - | - | empty | - | graph | 0.62 | 0.62 | +0.0 % |", out)

    def test_failed_state_named_on_stderr(self):
        rc, _, err = self.run_main(["--old", self.write(run_json({})), "--new", self.write(run_json({}))])
        self.assertEqual(rc, 0)
        self.assertIn("Ratio=4 Shape=decode 64x2", err)
        self.assertIn("Unexpected error", err)

    def test_no_common_state_fails(self):
        rc, _, err = self.run_main(["--old", self.write(run_json({}, {COMPRESS})),
                                    "--new", self.write(run_json({}, {COMPRESS_HOT}))])
        self.assertEqual(rc, 1)
        self.assertIn("no state appears in both", err)

    def test_kvc_bench_markdown_is_refused(self):
        table = ("| shape | ratio | op | layout | graph us | stream us | GB/s | % of copy |\n|---|---|---|---|---|---|---|---|\n"
                 "| decode 64x2 | 2 | insert | fp8_ds_mla | 2.00 | 9.99 | 1.0 | 1.0% |\n")
        rc, _, _ = self.run_main(["--old", self.write(table), "--new", self.write(run_json({}))])
        self.assertIsInstance(rc, str)  # sys.exit(message)
        self.assertIn("is not kvc_nvbench's --json output", rc)


FAKE_BENCH = """#!/usr/bin/env bash
# Stand-in for kvc_nvbench: checks the arguments bench_ab.sh passes, writes --json's file.
args=("$@")
[[ ${args[0]} == --quick && ${args[1]} == -b && ${args[2]} == compress ]] || { echo "bad args: $*"; exit 2; }
[[ ${args[3]} == --json ]] || { echo "no --json: $*"; exit 2; }
cp "$(dirname "$0")/$(basename "$0").json" "${args[4]}"
echo "| markdown on stdout |"
"""


class BenchAbScript(unittest.TestCase):
    def test_alternated_runs_then_compare(self):
        with tempfile.TemporaryDirectory() as tmp:
            for name, us in (("old", 2.0), ("new", 1.5)):
                path = os.path.join(tmp, name)
                with open(path, "w") as f:
                    f.write(FAKE_BENCH)
                os.chmod(path, 0o755)
                with open(path + ".json", "w") as f:
                    json.dump(run_json({COMPRESS: us}), f)
            out = os.path.join(tmp, "ab")
            res = subprocess.run(["bash", os.path.join(HERE, "bench_ab.sh"), os.path.join(tmp, "old"),
                                  os.path.join(tmp, "new"), out, "--quick", "-b", "compress"],
                                 capture_output=True, text=True, env=dict(os.environ, ROUNDS="3"))
            self.assertEqual(res.returncode, 0, res.stderr)
            self.assertEqual(sorted(os.listdir(out)), sorted(
                [f"{n}{i}.{e}" for n in ("old", "new") for i in (1, 2, 3) for e in ("json", "log")] + ["compare.md"]))
            with open(os.path.join(out, "compare.md")) as f:
                table = f.read()
            self.assertIn("| decode 64x2 | 2 | compress | - | graph | 2.00 | 1.50 | -25.0 % |", table)
            self.assertEqual(table, res.stdout)


if __name__ == "__main__":
    unittest.main()
