# SPDX-License-Identifier: Apache-2.0
"""Tests of scripts/bench_compare.py (no GPU): the minimum over runs, rows in both builds only."""
import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_compare  # noqa: E402

HEADER = ("| shape | ratio | op | layout | graph us | stream us | GB/s | % of copy |\n"
          "|---|---|---|---|---|---|---|---|\n")


def row(shape, op, graph_us):
    return f"| {shape} | 2 | {op} | fp8_ds_mla | {graph_us:8.2f} | 9.99 | 1.0 | 1.0% |\n"


class BenchCompareTest(unittest.TestCase):
    def write(self, text):
        f = tempfile.NamedTemporaryFile("w", suffix=".md", delete=False)
        f.write(text)
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name

    def run_main(self, argv):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = bench_compare.main(argv)
        return rc, out.getvalue()

    def test_minimum_over_runs_and_change(self):
        old = [self.write(HEADER + row("decode 64x2", "insert", 2.5) + row("decode 256x2", "insert", 3.0)),
               self.write(HEADER + row("decode 64x2", "insert", 2.0))]
        new = [self.write(HEADER + row("decode 64x2", "insert", 1.9) + row("prefill 1x8192", "insert", 7.0)),
               self.write(HEADER + row("decode 64x2", "insert", 1.8))]
        rc, out = self.run_main(["--old", *old, "--new", *new])
        self.assertEqual(rc, 0)
        lines = [l for l in out.splitlines() if l.startswith("| decode") or l.startswith("| prefill")]
        self.assertEqual(lines, ["| decode 64x2 | 2 | insert | fp8_ds_mla | 2.00 | 1.80 | -10.0 % |"])

    def test_no_common_row_fails(self):
        rc, _ = self.run_main(["--old", self.write(HEADER + row("a", "insert", 1.0)),
                               "--new", self.write(HEADER + row("b", "insert", 1.0))])
        self.assertEqual(rc, 1)


if __name__ == "__main__":
    unittest.main()
